"""Cast and CastLike: every numeric type, bool and string.

Parity (docs/PARITY.md): exact. Float targets are rounded once, to nearest even, from the
exact source value: narrow ml_dtypes formats (bfloat16, float8, float4, float6) go
through float64 and :func:`.numerics.round_from_float64`, never through a second
rounding. ``saturate`` (default 1) clamps out-of-range values of the four float8 types
to +-max (infinities included, NaN stays NaN); ``saturate=0`` follows the
format (inf or NaN). float8e8m0 honours ``round_mode`` (up / down / nearest).
Float -> integer truncates toward zero; out-of-range values are undefined by ONNX
(numpy's result). Integer -> narrower integer wraps (two's complement).
Strings: numbers are written like onnxruntime (``%.8g`` for floats, ``NaN``, ``INF``,
``-INF``, bools as ``1``/``0``); strings are parsed as integers for integer targets
(falling back to truncated floats, undefined by ONNX) and as floats otherwise, with
``INF``/``+INF``/``-INF``/``NaN`` in any letter case.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.numerics import (
    ML_FLOATS,
    ML_INTS,
    is_float,
    is_int,
    is_signed_int,
    round_from_float64,
)

#: float8 formats that ``saturate`` applies to (besides float8e8m0).
SATURATING_FLOAT8: frozenset[np.dtype] = frozenset(np.dtype(t) for t in (
    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))

E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
ROUND_MODES = ("up", "down", "nearest")
STRING = np.dtype(object)


def cast(x: np.ndarray, target: np.dtype, *, saturate: bool = True,
         round_mode: str = "up") -> np.ndarray:
    """``x`` converted to ``target`` with ONNX Cast semantics (see the module docstring).

    :raises ValueError: for a string that is not a number.
    """
    src = x.dtype
    if src == target:
        return x.copy()
    if target == STRING:
        return to_string(x)
    if src == STRING:
        return from_string(x, target)
    if src in ML_INTS:
        # exact widening first: ml_dtypes' sub-byte ints convert cleanly to int8/uint8
        x = x.astype(np.int8 if is_signed_int(src) else np.uint8)
    elif src in ML_FLOATS:
        x = x.astype(np.float64)  # exact: every ml_dtypes float fits float64
    with np.errstate(all="ignore"):
        if target == E8M0:
            return to_e8m0(x.astype(np.float64), saturate=saturate, round_mode=round_mode)
        if target in ML_FLOATS:
            x64 = x.astype(np.float64)
            if saturate and target in SATURATING_FLOAT8:
                limit = float(ml_dtypes.finfo(target).max)
                x64 = np.clip(x64, -limit, limit)  # NaN passes through np.clip
            return round_from_float64(x64, target)
        return np.asarray(x.astype(target))


def to_string(x: np.ndarray) -> np.ndarray:
    """Numbers as onnxruntime writes them: ``%.8g``, ``NaN``, ``INF``, ``-INF``, ``1``/``0``."""
    if x.dtype == np.bool_:
        text = np.where(x, "1", "0")
    elif is_float(x.dtype):
        x64 = x.astype(np.float64)
        text = np.char.mod("%.8g", x64)
        text = np.where(np.isnan(x64), "NaN", text)
        text = np.where(np.isposinf(x64), "INF", text)
        text = np.where(np.isneginf(x64), "-INF", text)
    else:
        wide = x.astype(np.uint64 if x.dtype.kind == "u" else np.int64)
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


def to_e8m0(x: np.ndarray, *, saturate: bool, round_mode: str) -> np.ndarray:
    """Round float64 ``x`` to a power of two 2^k, k in [-127, 127] (float8e8m0).

    ``up`` rounds away from zero, ``down`` toward zero, ``nearest`` to the nearer
    power (ties up). The sign is ignored (negative inputs are unspecified by ONNX).
    Out of range: the closest end when saturating, else NaN; zero counts as below
    range; +-inf saturates to the largest value.
    """
    a = np.abs(x)
    mant, exp = np.frexp(a)            # a = mant * 2^exp, mant in [0.5, 1)
    k = exp.astype(np.int64) - 1        # 2^k <= a < 2^(k+1)
    if round_mode == "up":
        k = k + (mant != 0.5)
    elif round_mode == "nearest":
        k = k + (mant >= 0.75)         # a >= 1.5 * 2^k, the midpoint, rounds up
    biased = k + 127
    over = (biased > 254) | np.isinf(a)
    under = (biased < 0) | (a == 0)
    if saturate:
        code = np.where(under, 0, np.where(over, 254, np.clip(biased, 0, 254)))
    else:
        code = np.where(over | under, 255, np.clip(biased, 0, 254))
    code = np.where(np.isnan(a), 255, code)
    return np.asarray(code.astype(np.uint8).view(E8M0))


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


KERNELS: list[CpuKernel] = [Cast("Cast", since=1, parity=Parity.EXACT),
                            CastLike("CastLike", since=15, parity=Parity.EXACT)]
