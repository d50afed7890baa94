"""Quantization: QuantizeLinear / DequantizeLinear (per-tensor, per-axis, blocked; int2/4/8/16,
float8, float4 storage), DynamicQuantizeLinear, QLinearMatMul, QLinearConv, MatMulInteger,
ConvInteger.

Numerics: ``x / scale`` is one IEEE division in float32 (float64 for float64 inputs),
rounded half-to-even and saturated: EXACT. Dequantization computes ``(x - zp) * scale``
in float64 (exact for every quantized type) and rounds once: EXACT. Integer matmul and
conv accumulate exactly (int64 / float64 holding exact integers); requantization
multiplies by ``a_scale * b_scale / y_scale`` computed in the scale dtype, as the ONNX
reference does: EXACT.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis
from onnx_ep.providers.cpu_reference.conv import Conv
from onnx_ep.providers.cpu_reference.formats import (
    SATURATING_FLOAT8,
    SUB_BYTE_INTS,
    encode,
    encode_int,
    source_value,
)
from onnx_ep.providers.cpu_reference.numerics import round_from_float64

_INT_TYPES = {np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32)} \
    | set(SUB_BYTE_INTS)
_FLOAT8 = set(SATURATING_FLOAT8)
_FLOAT4 = {np.dtype(ml_dtypes.float4_e2m1fn)}


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    if dtype in SUB_BYTE_INTS:
        bits, signed = SUB_BYTE_INTS[dtype]
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _to_int(values: np.ndarray, out: np.dtype) -> np.ndarray:
    """Exact integers (held in float64, already in range; NaN gives 0) stored as ``out``."""
    v = np.where(np.isnan(values), 0.0, values).astype(np.int64)
    return encode_int(v, out) if out in SUB_BYTE_INTS else v.astype(out)


def _broadcast_param(kernel: CpuKernel, ctx: ExecutionContext, p: np.ndarray,
                     shape: tuple[int, ...], axis: int, block: int, what: str) -> np.ndarray:
    """Scale / zero point broadcastable to ``shape``: per-tensor, per-axis or blocked."""
    p = np.asarray(p)
    if p.ndim == 0 or (p.size == 1 and not block):
        return p.reshape(())
    if not shape:
        raise kernel.fail(ctx, f"{what} of shape {p.shape} cannot apply to a scalar input")
    axis = normalize_axis(ctx, axis, len(shape))
    if not block:
        if p.ndim != 1 or p.shape[0] != shape[axis]:
            raise kernel.fail(ctx, f"per-axis {what} must be 1-D of length {shape[axis]} "
                                   f"(axis {axis} of {shape}), got shape {p.shape}")
        dims = [1] * len(shape)
        dims[axis] = p.size
        return p.reshape(dims)
    if block < 0:
        raise kernel.fail(ctx, f"block_size must be >= 0, got {block}")
    n_blocks = -(-shape[axis] // block)
    want = shape[:axis] + (n_blocks,) + shape[axis + 1:]
    if p.shape != want:
        raise kernel.fail(ctx, f"blocked {what} must have shape {want} for input {shape}, "
                               f"axis {axis}, block_size {block}; got {p.shape}")
    return np.repeat(p, block, axis=axis).take(np.arange(shape[axis]), axis=axis)


def quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, out: np.dtype,
             saturate: bool = True) -> np.ndarray:
    """Saturating ``round(x / scale) + zp`` into ``out`` (params already broadcastable)."""
    cdt = np.float64 if np.dtype(x.dtype) == np.float64 else np.float32
    q = np.asarray(x, dtype=cdt) / np.asarray(scale, dtype=cdt)
    if out in _INT_TYPES:
        lo, hi = _int_range(out)
        qi = np.rint(q)
        if zp is not None:
            qi = qi + source_value(zp)
        return _to_int(np.clip(qi, lo, hi), out)
    if out in _FLOAT8:
        return encode(q, out, saturate=saturate)
    if out in _FLOAT4:
        if zp is not None:
            q = q + source_value(zp).astype(cdt)
        return encode(q, out)   # float4 has no inf/nan: always saturates
    raise ValueError(f"{out} is not a quantized type")


class QuantizeLinear(CpuKernel):
    def run(self, ctx: ExecutionContext, x: np.ndarray, scale: np.ndarray,
            zp: np.ndarray | None = None) -> np.ndarray:
        node = ctx.node
        out_attr = int(node.attr("output_dtype", 0))
        if zp is not None:
            out = np.dtype(zp.dtype)
            if out_attr and np_dtype(out_attr) != out:
                raise self.fail(ctx, f"output_dtype {np_dtype(out_attr)} differs from the "
                                     f"zero point's dtype {out}")
        else:
            out = np_dtype(out_attr) if out_attr else np.dtype(np.uint8)
        if out not in _INT_TYPES | _FLOAT8 | _FLOAT4 or out == np.int32:
            raise self.fail(ctx, f"output type {out} is not a quantized type")
        axis, block = int(node.attr("axis", 1)), int(node.attr("block_size", 0))
        s = _broadcast_param(self, ctx, scale, x.shape, axis, block, "scale")
        z = None if zp is None else _broadcast_param(self, ctx, zp, x.shape, axis, block,
                                                     "zero point")
        if out in _FLOAT8 and z is not None and np.any(source_value(z) != 0):
            raise self.fail(ctx, "a float8 zero point must be 0")
        return quantize(np.asarray(x), s, z, out, bool(node.attr("saturate", 1)))


class DequantizeLinear(CpuKernel):
    def run(self, ctx: ExecutionContext, x: np.ndarray, scale: np.ndarray,
            zp: np.ndarray | None = None) -> np.ndarray:
        node = ctx.node
        if zp is not None and zp.dtype != x.dtype:
            raise self.fail(ctx, f"zero point dtype {zp.dtype} differs from x dtype {x.dtype}")
        axis, block = int(node.attr("axis", 1)), int(node.attr("block_size", 0))
        s = _broadcast_param(self, ctx, scale, x.shape, axis, block, "scale")
        dx = source_value(x)
        if zp is not None:
            if x.dtype in _FLOAT8 and np.any(source_value(zp) != 0):
                raise self.fail(ctx, "a float8 zero point must be 0")
            dx = dx - source_value(_broadcast_param(self, ctx, zp, x.shape, axis, block,
                                                    "zero point"))
        out_attr = int(node.attr("output_dtype", 0))
        out = np_dtype(out_attr) if out_attr else np.dtype(scale.dtype)
        return round_from_float64(dx * source_value(s), out)


class DynamicQuantizeLinear(CpuKernel):
    """uint8 range from min(0, x) .. max(0, x), computed in float32 as the spec's formula."""

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> Any:
        xf = np.asarray(x, dtype=np.float32)
        hi = np.float32(max(0.0, float(xf.max()))) if xf.size else np.float32(0)
        lo = np.float32(min(0.0, float(xf.min()))) if xf.size else np.float32(0)
        scale = np.float32(1.0 if hi == lo else hi - lo) / np.float32(255)
        zp = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
        y = np.clip(np.rint(xf / scale) + zp, 0, 255).astype(np.uint8)
        return y, np.array(scale, dtype=x.dtype), np.array(zp, dtype=np.uint8)


def _centered(kernel: CpuKernel, ctx: ExecutionContext, x: np.ndarray, zp: Any,
              axis_for_vector: int | None = None) -> np.ndarray:
    """``x - zp`` as exact int64; a vector zp applies along ``axis_for_vector``."""
    xi = np.asarray(x).astype(np.int64)
    if zp is None:
        return xi
    z = np.asarray(zp)
    if z.dtype != x.dtype:
        raise kernel.fail(ctx, f"zero point dtype {z.dtype} differs from its input's {x.dtype}")
    z = z.astype(np.int64)
    if z.size > 1 and axis_for_vector is not None:
        shape = [1] * xi.ndim
        shape[axis_for_vector] = z.size
        z = z.reshape(shape)
    elif z.size == 1:
        z = z.reshape(())
    return xi - z


def _requantize(acc: np.ndarray, factor: np.ndarray, y_zp: np.ndarray | None,
                out: np.dtype) -> np.ndarray:
    lo, hi = _int_range(out)
    r = acc * factor
    if y_zp is not None:
        r = r + np.asarray(y_zp).astype(np.float64).reshape(())
    return np.clip(np.rint(r), lo, hi).astype(out)


def _matmul_int(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # float64 holds these int8/uint8 dot products exactly (|sum| << 2**53) and uses BLAS
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


class MatMulInteger(CpuKernel):
    def run(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray,
            a_zp: Any = None, b_zp: Any = None) -> np.ndarray:
        ai = _centered(self, ctx, a, a_zp, a.ndim - 2 if a.ndim >= 2 else None)
        bi = _centered(self, ctx, b, b_zp, b.ndim - 1)
        return _matmul_int(ai, bi).astype(np.int32)


class QLinearMatMul(CpuKernel):
    def run(self, ctx: ExecutionContext, a: np.ndarray, a_scale: np.ndarray, a_zp: Any,
            b: np.ndarray, b_scale: np.ndarray, b_zp: Any, y_scale: np.ndarray,
            y_zp: Any) -> np.ndarray:
        ai = _centered(self, ctx, a, a_zp, a.ndim - 2 if a.ndim >= 2 else None)
        bi = _centered(self, ctx, b, b_zp, b.ndim - 1)
        acc = _matmul_int(ai, bi)
        sa = np.asarray(a_scale)
        sa = sa.reshape(-1, 1) if sa.size > 1 else sa.reshape(())
        sb = np.asarray(b_scale)
        sb = sb.reshape(-1) if sb.size > 1 else sb.reshape(())
        # factor in the scale dtype, as the spec's reference computes it
        factor = (sa * sb / np.asarray(y_scale).reshape(())).astype(np.float64)
        out = np.dtype(y_zp.dtype) if y_zp is not None else np.dtype(a.dtype)
        return _requantize(acc, factor, y_zp, out)


_CONV = Conv("Conv")


def _conv_int(ctx: ExecutionContext, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact integer convolution through the float64 Conv body (products fit in 2**53)."""
    return _CONV.convolve(ctx, x.astype(np.float64), w.astype(np.float64), None, None)


class ConvInteger(CpuKernel):
    def run(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray, x_zp: Any = None,
            w_zp: Any = None) -> np.ndarray:
        xi = _centered(self, ctx, x, x_zp, 1)
        wi = _centered(self, ctx, w, w_zp, 0)
        return _conv_int(ctx, xi, wi).astype(np.int32)


class QLinearConv(CpuKernel):
    def run(self, ctx: ExecutionContext, x: np.ndarray, x_scale: np.ndarray, x_zp: Any,
            w: np.ndarray, w_scale: np.ndarray, w_zp: Any, y_scale: np.ndarray,
            y_zp: Any, bias: np.ndarray | None = None) -> np.ndarray:
        xi = _centered(self, ctx, x, x_zp, None)
        wi = _centered(self, ctx, w, w_zp, 0)
        acc = _conv_int(ctx, xi, wi)
        if bias is not None:
            acc = acc + np.asarray(bias).astype(np.float64).reshape((-1,) + (1,) * (acc.ndim - 2))
        ws = np.asarray(w_scale)
        if ws.size > 1:
            if ws.ndim != 1 or ws.size != w.shape[0]:
                raise self.fail(ctx, f"w_scale must be a scalar or have {w.shape[0]} entries "
                                     f"(one per output channel), got shape {ws.shape}")
            ws = ws.reshape((-1,) + (1,) * (acc.ndim - 2))
        else:
            ws = ws.reshape(())
        factor = (np.asarray(x_scale).reshape(()) * ws
                  / np.asarray(y_scale).reshape(())).astype(np.float64)
        out = np.dtype(y_zp.dtype) if y_zp is not None else np.dtype(x.dtype)
        return _requantize(acc, factor, y_zp, out)


KERNELS: list[CpuKernel] = [
    QuantizeLinear("QuantizeLinear", since=10),
    DequantizeLinear("DequantizeLinear", since=10),
    DynamicQuantizeLinear("DynamicQuantizeLinear", since=11),
    MatMulInteger("MatMulInteger", since=10),
    QLinearMatMul("QLinearMatMul", since=10),
    ConvInteger("ConvInteger", since=10),
    QLinearConv("QLinearConv", since=10),
]
