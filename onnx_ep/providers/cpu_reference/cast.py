"""Cast and CastLike: every numeric type, bool and string; BitCast.

Parity (docs/PARITY.md): exact. The rules are the ONNX specification's, computed here and
in :mod:`.formats` rather than by numpy's or ml_dtypes' conversions (whose answers for
narrow formats and out-of-range values differ between releases and platforms):

- float targets are rounded once, to nearest even, from the exact source value;
  ``saturate`` (default 1) clamps out-of-range values of the four float8 types to +-max
  (infinities included, NaN stays NaN), ``saturate=0`` follows the format (inf or NaN);
  float4e2m1 always saturates and takes NaN to 6; float8e8m0 honours ``round_mode``
  (up / down / nearest);
- float -> int4 / uint4 / int2 / uint2 rounds half to even and keeps the low bits;
  float -> any other integer truncates toward zero, with x86's answer for the values
  ONNX leaves undefined (:func:`.formats.float_to_int`);
- integer -> narrower integer wraps (two's complement); anything -> bool is ``x != 0``
  (NaN is true).

Strings: numbers are written like onnxruntime (``%.8g`` for floats, ``NaN``, ``INF``,
``-INF``, bools as ``1``/``0``); strings are parsed as integers for integer targets
(falling back to truncated floats, undefined by ONNX) and as floats otherwise, with
``INF``/``+INF``/``-INF``/``NaN`` in any letter case.

BitCast reinterprets the bits of each element (same bit width, little endian): exact.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.formats import (
    E8M0,
    FORMATS,
    SATURATING_FLOAT8,
    SUB_BYTE_INTS,
    decode,
    decode_int,
    encode,
    encode_int,
    float_to_int,
    float_to_sub_byte_int,
    source_value,
    to_e8m0,
)
from onnx_ep.providers.cpu_reference.numerics import is_float, is_int

__all__ = ["KERNELS", "BitCast", "Cast", "CastLike", "cast", "from_string", "to_e8m0",
           "to_string"]

ROUND_MODES = ("up", "down", "nearest")
STRING = np.dtype(object)


def cast(x: np.ndarray, target: np.dtype, *, saturate: bool = True,
         round_mode: str = "up") -> np.ndarray:
    """``x`` converted to ``target`` with ONNX Cast semantics (see the module docstring).

    :raises ValueError: for a string that is not a number.
    """
    x = np.asarray(x)
    src = x.dtype
    target = np.dtype(target)
    if src == target:
        return x.copy()
    if target == STRING:
        return to_string(x)
    if src == STRING:
        return from_string(x, target)
    with np.errstate(all="ignore"):
        if target == E8M0:
            return to_e8m0(x, saturate=saturate, round_mode=round_mode)
        if target in FORMATS:
            return encode(x, target, saturate=saturate and target in SATURATING_FLOAT8)
        if target in SUB_BYTE_INTS:
            if is_float(src):
                return float_to_sub_byte_int(x, target)
            return encode_int(decode_int(x) if src in SUB_BYTE_INTS else x, target)
        if is_float(src):
            if is_int(target):
                return float_to_int(x, target)
            if src in FORMATS or src == E8M0:
                # exact; a float16 / float32 / float64 target then rounds once
                x = decode(x, np.float32 if target == np.float32 else np.float64)
        elif src in SUB_BYTE_INTS:
            x = decode_int(x)
        return np.asarray(x.astype(target))


def to_string(x: np.ndarray) -> np.ndarray:
    """Numbers as onnxruntime writes them: ``%.8g``, ``NaN``, ``INF``, ``-INF``, ``1``/``0``."""
    if x.dtype == np.bool_:
        text = np.where(x, "1", "0")
    elif is_float(x.dtype):
        x64 = source_value(x)
        text = np.char.mod("%.8g", x64)
        text = np.where(np.isnan(x64), "NaN", text)
        text = np.where(np.isposinf(x64), "INF", text)
        text = np.where(np.isneginf(x64), "-INF", text)
    else:
        wide = decode_int(x) if x.dtype in SUB_BYTE_INTS else \
            x.astype(np.uint64 if x.dtype.kind == "u" else np.int64)
        text = np.char.mod("%d", wide)
    return np.asarray(text, dtype=object).reshape(x.shape)


def from_string(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """Parse strings; integers exactly when the text is an integer literal."""
    if is_int(target) or target == np.bool_:
        try:
            wide = x.astype(np.uint64 if target.kind == "u" and _all_unsigned(x)
                            else np.int64)
        except (ValueError, OverflowError):
            wide = np.trunc(_parse_floats(x))
        with np.errstate(all="ignore"):
            if target == np.bool_:
                return np.asarray(wide != 0)
            return cast(np.asarray(wide), target)
    return cast(_parse_floats(x), target)


def _all_unsigned(x: np.ndarray) -> bool:
    return not np.any(np.char.startswith(x.astype(str), "-"))


def _parse_floats(x: np.ndarray) -> np.ndarray:
    # float() accepts "inf", "+inf", "-inf", "nan" in any letter case, as ONNX asks
    return x.astype(np.float64)


def _attrs(kernel: CpuKernel, ctx: ExecutionContext) -> tuple[bool, str]:
    saturate = int(ctx.node.attr("saturate", 1))
    round_mode = ctx.node.attr("round_mode", "up")
    if round_mode not in ROUND_MODES:
        raise kernel.fail(ctx, f"round_mode must be one of {ROUND_MODES}, got {round_mode!r}")
    return bool(saturate), round_mode


def _run(kernel: CpuKernel, ctx: ExecutionContext, x: np.ndarray,
         target: np.dtype) -> np.ndarray:
    saturate, round_mode = _attrs(kernel, ctx)
    try:
        return cast(x, target, saturate=saturate, round_mode=round_mode)
    except (ValueError, TypeError) as exc:
        raise kernel.fail(ctx, f"cannot cast {x.dtype} to {target}: {exc}") from exc


class Cast(CpuKernel):
    """Cast to the element type named by attribute ``to``."""

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        to = ctx.node.attr("to")
        if to is None:
            raise self.fail(ctx, "attribute 'to' is required")
        try:
            if isinstance(to, str):  # opset 1-5 named the type: to="FLOAT"
                to = onnx.TensorProto.DataType.Value(to.upper())
            target = STRING if to == onnx.TensorProto.STRING else np_dtype(int(to))
        except (KeyError, ValueError, TypeError) as exc:
            raise self.fail(ctx, f"attribute to={to!r} is not a known ONNX element "
                                 f"type ({exc})") from exc
        return _run(self, ctx, x, target)


class CastLike(CpuKernel):
    """Cast input 0 to the element type of input 1 (``target_type``)."""

    def run(self, ctx: ExecutionContext, x: np.ndarray, like: Any) -> np.ndarray:
        return _run(self, ctx, x, np.asarray(like).dtype)


# ---------------------------------------------------------------- BitCast

#: ONNX bit widths of the sub-byte types ml_dtypes stores one per byte (low bits).
_SUB_BYTE_BITS: dict[np.dtype, int] = {
    **{np.dtype(t): 4 for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn)},
    **{np.dtype(t): 2 for t in (ml_dtypes.int2, ml_dtypes.uint2)},
}


def _bits(dt: np.dtype) -> int:
    return _SUB_BYTE_BITS.get(dt, dt.itemsize * 8)


class BitCast(CpuKernel):
    """Reinterpret the bits of each element as ``to`` (same bit width, little endian)."""

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        to = ctx.node.attr("to", None)
        if to is None:
            raise self.fail(ctx, "attribute 'to' is required")
        if to == onnx.TensorProto.STRING or x.dtype.kind in "OUS":
            raise self.fail(ctx, "BitCast does not take or produce strings")
        try:
            target = np_dtype(int(to))
        except (KeyError, ValueError, TypeError) as e:
            raise self.fail(ctx, f"'to'={to} is not an ONNX tensor element type") from e
        if _bits(x.dtype) != _bits(target):
            raise self.fail(ctx, f"cannot bitcast {x.dtype} ({_bits(x.dtype)} bits) to "
                                 f"{target} ({_bits(target)} bits); widths must be equal")
        if x.dtype.byteorder == ">":
            x = x.astype(x.dtype.newbyteorder("<"))
        # a C-contiguous copy only when needed (np.ascontiguousarray would make 0-d 1-d)
        x = np.asarray(x, order="C")
        if target in _SUB_BYTE_BITS:
            # ml_dtypes keeps a sub-byte value in the low bits of its byte (int4 -1 is
            # 0x0f), so masking to the width gives the bit pattern of any sub-byte type
            raw = x.view(np.uint8) & np.uint8((1 << _bits(target)) - 1)
            return np.asarray(raw.view(target))
        # numpy's native order is little endian on every platform we run on
        return np.asarray(x.view(target))


KERNELS: list[CpuKernel] = [Cast("Cast", since=1, parity=Parity.EXACT),
                            CastLike("CastLike", since=15, parity=Parity.EXACT),
                            BitCast("BitCast", since=26)]
