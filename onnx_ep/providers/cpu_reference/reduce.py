"""Reductions and their relatives: Reduce*, ArgMax/ArgMin, CumSum, TopK, Einsum.

Numerics: float16/bfloat16 are widened to float32; float32 sums accumulate in
float64 and round once to float32 (numpy sums a float32 axis that is not the
innermost one sequentially, in float32: 300 N(0, 1) values erred by 3.8e-6 on a
sum of -4.8e-4, outside the bound below); float64 accumulates in float64. Sums
are promised to a tolerance, not bit for bit. Max, Min,
ArgMax, ArgMin and TopK select values and are exact. Integer sums and products
are computed in the input type (wrapping as the hardware does).
"""

from __future__ import annotations

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
        # float64 accumulation: the result no longer depends on which axis numpy
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
        n = int(np.prod([x.shape[a] for a in axes]))
        s = _sum(x, axes, keep)
        if n == 0:
            return s
        return (np.sign(s) * (np.abs(s) // n)).astype(x.dtype)
    n = int(np.prod([x.shape[a] for a in axes]))
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


class CumSum(CpuKernel):
    """CumSum with exclusive and reverse; the axis is a 0-d or 1-element input."""

    def run(self, ctx: ExecutionContext, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
        a = np.asarray(axis).reshape(-1)
        if a.size != 1:
            raise self.fail(ctx, f"axis must hold one value, got shape {np.shape(axis)}")
        ax = normalize_axis(ctx, int(a[0]), x.ndim)
        work = upcast(x)
        if ctx.node.attr("reverse", 0):
            work = np.flip(work, axis=ax)
        out = np.cumsum(work, axis=ax, dtype=work.dtype)
        if ctx.node.attr("exclusive", 0):
            # shift by one along the axis: element i gets the sum of elements before it
            out = np.concatenate(
                [np.zeros_like(np.take(out, [0], axis=ax)),
                 np.take(out, np.arange(out.shape[ax] - 1), axis=ax)], axis=ax) \
                if out.shape[ax] else out
        if ctx.node.attr("reverse", 0):
            out = np.flip(out, axis=ax)
        return round_to(out, x.dtype)


class TopK(CpuKernel):
    """TopK (K as input since opset 10, attribute before); ties keep the lower index first."""

    def run(self, ctx: ExecutionContext, x: np.ndarray, k: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
        if k is None:
            kk = ctx.node.attr("k", None)
            if kk is None:
                raise self.fail(ctx, "K is required (input 'K' or attribute 'k')")
        else:
            flat = np.asarray(k).reshape(-1)
            if flat.size != 1:
                raise self.fail(ctx, f"K must hold one value, got shape {np.shape(k)}")
            kk = int(flat[0])
        axis = normalize_axis(ctx, ctx.node.attr("axis", -1), x.ndim)
        n = x.shape[axis]
        if not 0 <= kk <= n:
            raise self.fail(ctx, f"K={kk} is out of range for axis {axis} of size {n}")
        key = upcast(x) if x.dtype.kind == "V" else x
        if ctx.node.attr("largest", 1):
            # a strictly decreasing map keeps a stable ascending sort stable by index;
            # bitwise not avoids the overflow of negating INT_MIN and unsigned values
            key = ~key if key.dtype.kind in "iu" else -key
        order = np.argsort(key, axis=axis, kind="stable")
        idx = np.take(order, np.arange(kk), axis=axis)
        values = np.take_along_axis(x, idx, axis=axis)
        return np.asarray(values), idx.astype(np.int64)


class Einsum(CpuKernel):
    """Einsum through numpy (narrow floats computed in float32, rounded once)."""

    parity = SUM_PARITY

    def run(self, ctx: ExecutionContext, *xs: np.ndarray) -> np.ndarray:
        eq = ctx.node.attr("equation", None)
        if not eq:
            raise self.fail(ctx, "attribute 'equation' is required")
        eq = eq.replace(" ", "")
        dtype = xs[0].dtype
        for i, x in enumerate(xs):
            if x.dtype != dtype:
                raise self.fail(ctx, f"input {i} has dtype {x.dtype}, expected {dtype}")
        try:
            out = np.einsum(eq, *[upcast(x) for x in xs])
        except ValueError as e:
            raise self.fail(ctx, f"equation {eq!r} does not fit the inputs: {e}") from e
        return round_to(out, dtype)


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
    CumSum("CumSum", since=11, parity=SUM_PARITY),
    TopK("TopK", since=1),
    Einsum("Einsum", since=12),
]

