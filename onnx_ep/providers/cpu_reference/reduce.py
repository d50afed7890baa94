"""Reductions: ReduceSum, ReduceMean, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare,
ReduceLogSum, ReduceLogSumExp, ReduceMax, ReduceMin, ArgMax, ArgMin.

Numerics: float16/bfloat16 are widened to float32; float32 sums accumulate in
float64 and round once to float32 (numpy sums a float32 axis that is not the
innermost one sequentially, in float32: 300 N(0, 1) values erred by 3.8e-6 on a
sum of -4.8e-4, outside the bound below); float64 accumulates in float64. Sums
are promised to a tolerance, not bit for bit. Max, Min,
ArgMax and ArgMin select values and are exact. Integer sums and products
are computed in the input type (wrapping as the hardware does).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast

#: sums reorder additions (float32: accumulated in float64, rounded once).
SUM_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)


def _reduce_axes(ctx: ExecutionContext, x: np.ndarray,
                 axes_input: np.ndarray | None) -> tuple[int, ...] | None:
    """The axes to reduce, or ``None`` for the identity (noop_with_empty_axes)."""
    if axes_input is not None:
        axes = [int(a) for a in np.asarray(axes_input).reshape(-1)]
    else:
        axes = ctx.node.attr("axes", None)
        axes = None if axes is None else list(axes)
    if not axes:
        if ctx.node.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    norm = tuple(normalize_axis(ctx, a, x.ndim) for a in axes)
    if len(set(norm)) != len(norm):
        raise CpuKernel.fail(ctx, f"axes {axes} name the same axis twice")
    return norm


def _extreme(dtype: np.dtype, *, low: bool) -> Any:
    """The identity of max (``low``) or min: -inf/+inf, the int limits, or False/True."""
    if dtype == np.bool_:
        return not low
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if low else info.max
    return -np.inf if low else np.inf


def _sum(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if x.dtype == np.float32:
        # float64 accumulation: the result does not depend on which axis numpy
        # sums pairwise and which sequentially
        return np.sum(x, axis=axes, keepdims=keep, dtype=np.float64).astype(np.float32)
    return np.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)


def _prod(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return np.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)


def _max(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return np.maximum.reduce(x, axis=axes, keepdims=keep, initial=_extreme(x.dtype, low=True))


def _min(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return np.minimum.reduce(x, axis=axes, keepdims=keep, initial=_extreme(x.dtype, low=False))


def _mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if x.dtype.kind in "iu":
        # integer mean: sum in the type, then C-style division truncating toward zero
        n = math.prod(x.shape[a] for a in axes)
        s = _sum(x, axes, keep)
        if n == 0:
            return s
        # truncate toward zero without abs(): abs(INT_MIN) overflows to INT_MIN; the C-style
        # remainder makes s - r an exact multiple of n, inside the type's range
        r = np.fmod(s, s.dtype.type(n))
        return ((s - r) // s.dtype.type(n)).astype(x.dtype)
    n = math.prod(x.shape[a] for a in axes)
    # sum / count rather than np.mean: an empty set gives NaN without a warning
    with np.errstate(invalid="ignore"):
        return _sum(x, axes, keep) / x.dtype.type(n)


def _l1(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return _sum(np.abs(x), axes, keep)


def _l2(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    s = _sum(x * x, axes, keep)
    if x.dtype.kind in "iu":
        return np.sqrt(s.astype(np.float64)).astype(x.dtype)
    return np.sqrt(s)


def _sum_square(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return _sum(x * x, axes, keep)


def _log_sum(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(_sum(x, axes, keep))


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if x.dtype.kind in "iu":
        x = x.astype(np.float64)
    m = np.maximum.reduce(x, axis=axes, keepdims=True, initial=-np.inf)
    # shift by the max for stability, except where it is infinite (empty set, all -inf)
    shift = np.where(np.isfinite(m), m, 0).astype(x.dtype)
    with np.errstate(divide="ignore"):
        out = np.log(_sum(np.exp(x - shift), axes, True)) + shift
    return out if keep else np.squeeze(out, axis=axes)


class Reduce(CpuKernel):
    """One row of the Reduce* table: ``fn(x, axes, keepdims)`` on the accumulation type.

    :param axes_input_since: first opset where ``axes`` moved from attribute to input.
    :param accumulate: upcast narrow floats to float32 before ``fn`` (sums), or compute
        in the input type (selections, which are exact).
    """

    def __init__(self, op_type: str, fn: Callable[[np.ndarray, tuple[int, ...], bool],
                                                  np.ndarray], *,
                 accumulate: bool = True, parity: Parity = SUM_PARITY) -> None:
        super().__init__(op_type, since=1, parity=parity)
        self.fn = fn
        self.accumulate = accumulate

    def run(self, ctx: ExecutionContext, x: np.ndarray, axes: np.ndarray | None = None
            ) -> np.ndarray:
        red = _reduce_axes(ctx, x, axes)
        if red is None:
            return x
        keep = bool(ctx.node.attr("keepdims", 1))
        dtype = x.dtype
        # ml_dtypes types lack most ufunc loops: selections go through float32 (lossless)
        work = upcast(x) if (self.accumulate or dtype.kind == "V") else x
        return round_to(self.fn(work, red, keep), dtype)


class ArgExtreme(CpuKernel):
    """ArgMax / ArgMin with keepdims and select_last_index (output int64)."""

    def __init__(self, op_type: str, pick: Callable[..., np.ndarray]) -> None:
        super().__init__(op_type, since=1)
        self.pick = pick

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        axis = normalize_axis(ctx, ctx.node.attr("axis", 0), x.ndim)
        if x.shape[axis] == 0:
            raise self.fail(ctx, f"cannot take {ctx.node.op_type} over empty axis {axis}")
        keep = bool(ctx.node.attr("keepdims", 1))
        work = upcast(x) if x.dtype.kind == "V" else x
        if ctx.node.attr("select_last_index", 0):
            flipped = np.flip(work, axis=axis)
            idx = work.shape[axis] - 1 - self.pick(flipped, axis=axis, keepdims=keep)
        else:
            idx = self.pick(work, axis=axis, keepdims=keep)
        return np.asarray(idx, dtype=np.int64)


def _exact_reduce(op: str, fn: Callable[..., np.ndarray]) -> Reduce:
    return Reduce(op, fn, accumulate=False, parity=Parity.EXACT)


KERNELS: list[CpuKernel] = [
    Reduce("ReduceSum", _sum),
    Reduce("ReduceMean", _mean),
    Reduce("ReduceProd", _prod),
    Reduce("ReduceL1", _l1),
    Reduce("ReduceL2", _l2),
    Reduce("ReduceSumSquare", _sum_square),
    Reduce("ReduceLogSum", _log_sum),
    Reduce("ReduceLogSumExp", _log_sum_exp),
    _exact_reduce("ReduceMax", _max),
    _exact_reduce("ReduceMin", _min),
    ArgExtreme("ArgMax", np.argmax),
    ArgExtreme("ArgMin", np.argmin),
]
