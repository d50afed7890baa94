"""The row-normalising ops: Softmax, LogSoftmax, LayerNormalization, RMSNormalization.
Each normalises its input along one axis (Softmax, LogSoftmax) or over the trailing
axes from ``axis`` on (LayerNormalization, RMSNormalization).

Numerics: Softmax and LogSoftmax are computed in float64 and rounded once to the
output type. LayerNormalization and RMSNormalization accumulate float16/bfloat16 in
float32 (or in ``stash_type``) and round once; float32/float64 compute in their own
type. Sums reorder additions, so all four are promised to a tolerance.
"""

from __future__ import annotations

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to, stash_dtype, upcast

#: float64 transcendental math rounded once; reductions reorder additions.
SOFTMAX_PARITY = Parity.tolerance(rtol=1e-6, atol=1e-7)
#: mean/variance statistics accumulated in float32 for float32 and narrower inputs.
NORM_PARITY = Parity.tolerance(rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- softmax family

def softmax_view(ctx: ExecutionContext, x: np.ndarray) -> tuple[np.ndarray, int]:
    """``x`` as float64 arranged so the op reduces over one axis, and that axis.

    Before opset 13 the op flattens ``x`` to 2-D at ``axis`` (default 1) and
    normalizes each row; from 13 on it normalizes along the single ``axis`` (default -1).
    """
    x64 = source_value(x)
    if ctx.node.opset < 13:
        axis = normalize_axis(ctx, ctx.node.attr("axis", 1), max(x.ndim, 1))
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        return x64.reshape(rows, -1), 1
    return x64, normalize_axis(ctx, ctx.node.attr("axis", -1), x.ndim)


class Softmax(CpuKernel):
    """Softmax and LogSoftmax (``log=True``) with the max subtracted for stability."""

    parity = SOFTMAX_PARITY

    def __init__(self, op_type: str, *, log: bool) -> None:
        super().__init__(op_type, since=1)
        self.log = log

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        if x.size == 0:
            return x.copy()
        v, axis = softmax_view(ctx, x)
        m = np.max(v, axis=axis, keepdims=True)
        # the spec's x - max(x): a row holding +inf is NaN throughout; a row of -inf only
        # (a masked row) is shifted by 0 instead, which gives the same NaNs without warnings
        # v is softmax_view's own float64 copy: the steps below overwrite it in place
        shifted = np.subtract(v, np.where(np.isneginf(m), 0.0, m), out=v)
        if self.log:
            s = np.sum(np.exp(shifted), axis=axis, keepdims=True)
            with np.errstate(divide="ignore"):
                y = np.subtract(shifted, np.log(s), out=shifted)
        else:
            e = np.exp(shifted, out=shifted)
            s = np.sum(e, axis=axis, keepdims=True)
            y = np.divide(e, s, out=e)
        return round_to(y.reshape(x.shape), x.dtype)


# ---------------------------------------------------------------- trailing-axes statistics

def _trailing_axes(ctx: ExecutionContext, x: np.ndarray) -> tuple[int, ...]:
    axis = normalize_axis(ctx, ctx.node.attr("axis", -1), x.ndim)
    return tuple(range(axis, x.ndim))


class LayerNormalization(CpuKernel):
    """Y = (X - mean) * InvStdDev * Scale + B over axes [axis, rank); Mean and InvStdDev
    are returned in the stash type with the reduced axes kept as 1."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, scale: np.ndarray,
            bias: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        axes = _trailing_axes(ctx, x)
        eps = ctx.node.attr("epsilon", 1e-5)
        dt = stash_dtype(ctx, x)
        v = upcast(x).astype(dt)
        mean = np.mean(v, axis=axes, keepdims=True)
        diff = v - mean
        var = np.mean(diff * diff, axis=axes, keepdims=True)
        inv_std = (1.0 / np.sqrt(var + dt.type(eps))).astype(dt)
        y = diff * inv_std * upcast(scale).astype(dt)
        if bias is not None:
            y = y + upcast(bias).astype(dt)
        return round_to(y, x.dtype), round_to(mean, dt), round_to(inv_std, dt)


class RMSNormalization(CpuKernel):
    """Y = X / sqrt(mean(X^2) + epsilon) * Scale over axes [axis, rank)."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        axes = _trailing_axes(ctx, x)
        eps = ctx.node.attr("epsilon", 1e-5)
        dt = stash_dtype(ctx, x)
        v = upcast(x).astype(dt)
        ms = np.mean(v * v, axis=axes, keepdims=True)
        y = v * (1.0 / np.sqrt(ms + dt.type(eps))).astype(dt) * upcast(scale).astype(dt)
        return round_to(y, x.dtype)


KERNELS: list[CpuKernel] = [
    Softmax("Softmax", log=False),
    Softmax("LogSoftmax", log=True),
    LayerNormalization("LayerNormalization", since=17),
    RMSNormalization("RMSNormalization", since=23),
]
