"""Indexing ops: GatherElements, GatherND, Scatter, ScatterElements, ScatterND,
TensorScatter, OneHot; the scans CumSum and CumProd; TopK; Pad, DepthToSpace,
SpaceToDepth, ReverseSequence; Dropout.

Numerics (docs/PARITY.md):

- Gathers, TensorScatter, Pad, DepthToSpace, SpaceToDepth and ReverseSequence copy
  values, TopK selects them: EXACT.
- Scatter reductions apply numpy's ufunc ``at`` in index order, in the data dtype
  (ml_dtypes floats such as bfloat16 have no ufunc loops: they reduce in float32 and
  round once at the end): EXACT.
- CumSum and CumProd run sequentially along the axis; float16/bfloat16 accumulate in
  float32 and round once, integers wrap in their own type. A parallel scan reorders
  the sums or products, so floats are promised to a tolerance.
- Dropout in inference is the identity (exact); training draws its mask from numpy's
  legacy generator seeded with ``seed``.

Index inputs accept ``[-n, n-1]`` per the spec; anything outside raises a
NodeError (numpy would otherwise wrap or raise IndexError).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import (
    PRODUCT_PARITY,
    CpuKernel,
    axes_arg,
    checked_index,
    int_list,
    normalize_axes,
    normalize_axis,
)
from onnx_ep.providers.cpu_reference.lowfloat import float_compute, is_float, round_to, upcast
from onnx_ep.providers.cpu_reference.reduce import SUM_PARITY

# ---------------------------------------------------------------- gathers and scatters

def _element_grid(ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray,
                  axis: int) -> tuple[np.ndarray, ...]:
    """Index tuple for GatherElements/ScatterElements: position grid with ``axis`` replaced."""
    if indices.ndim != data.ndim:
        raise CpuKernel.fail(ctx, f"indices rank {indices.ndim} must equal data rank "
                                  f"{data.ndim}")
    for d, (n_i, n_d) in enumerate(zip(indices.shape, data.shape)):
        if d != axis and n_i > n_d:
            raise CpuKernel.fail(ctx, f"indices shape {indices.shape} exceeds data shape "
                                      f"{data.shape} on axis {d}")
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = checked_index(ctx, indices, data.shape[axis], "indices")
    return tuple(grid)


_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
_REDUCE_SINCE = {"none": 1, "add": 16, "mul": 16, "max": 18, "min": 18}


def _scatter(ctx: ExecutionContext, data: np.ndarray, index: tuple[Any, ...],
             updates: np.ndarray) -> np.ndarray:
    reduction = ctx.node.attr("reduction", "none")
    if reduction not in _REDUCE_SINCE or ctx.node.opset < _REDUCE_SINCE[reduction]:
        raise CpuKernel.fail(ctx, f"reduction {reduction!r} is not supported at opset "
                                  f"{ctx.node.opset}")
    if reduction == "none":
        out = data.copy()
        out[index] = updates
        return out
    narrow = is_float(data.dtype) and data.dtype.kind != "f"
    # ml_dtypes floats have no ufunc.at loops: reduce in float32, round at the end.
    out = upcast(data) if narrow else data.copy()   # upcast of a narrow float is a new array
    upd = upcast(updates) if narrow else updates
    _REDUCE[reduction].at(out, index, upd)
    return round_to(out, data.dtype) if narrow else out


class GatherElements(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        axis = normalize_axis(ctx, ctx.node.attr("axis", 0), data.ndim)
        return data[_element_grid(ctx, data, indices, axis)]


def _nd_index(ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray,
              batch_dims: int) -> tuple[tuple[np.ndarray, ...], int]:
    """Index tuple into ``data`` reshaped to (batch, *rest) and the batch size."""
    if indices.ndim < 1:
        raise CpuKernel.fail(ctx, "indices must have rank >= 1")
    b, m = batch_dims, indices.shape[-1]
    if not 0 <= b < min(data.ndim, indices.ndim):
        raise CpuKernel.fail(ctx, f"batch_dims={b} must be < min(data rank {data.ndim}, "
                                  f"indices rank {indices.ndim})")
    if data.shape[:b] != indices.shape[:b]:
        raise CpuKernel.fail(ctx, f"batch dims of data {data.shape[:b]} and indices "
                                  f"{indices.shape[:b]} differ")
    if m > data.ndim - b:
        raise CpuKernel.fail(ctx, f"indices last dim {m} exceeds data rank {data.ndim} "
                                  f"minus batch_dims {b}")
    n_batch = int(np.prod(data.shape[:b], dtype=np.int64))
    n_pos = int(np.prod(indices.shape[b:-1], dtype=np.int64))
    ind = indices.reshape(n_batch, n_pos, m)
    cols = tuple(checked_index(ctx, ind[..., j], data.shape[b + j], f"indices[..., {j}]")
                 for j in range(m))
    return (np.arange(n_batch)[:, None], *cols), n_batch


class GatherND(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        b = ctx.node.attr("batch_dims", 0)
        index, n_batch = _nd_index(ctx, data, indices, b)
        m = indices.shape[-1]
        flat = data.reshape((n_batch,) + data.shape[b:])
        return flat[index].reshape(indices.shape[:-1] + data.shape[b + m:])


class ScatterND(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray,
            updates: np.ndarray) -> np.ndarray:
        index, _ = _nd_index(ctx, data, indices, 0)
        m = indices.shape[-1]
        expected = indices.shape[:-1] + data.shape[m:]
        if updates.shape != expected:
            raise self.fail(ctx, f"updates shape {updates.shape} must be indices.shape[:-1] "
                                 f"+ data.shape[{m}:] = {expected}")
        n_pos = int(np.prod(indices.shape[:-1], dtype=np.int64))
        upd = updates.reshape((1, n_pos) + data.shape[m:])
        out = _scatter(ctx, data.reshape((1,) + data.shape), index, upd)
        return out.reshape(data.shape)


class ScatterElements(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray,
            updates: np.ndarray) -> np.ndarray:
        axis = normalize_axis(ctx, ctx.node.attr("axis", 0), data.ndim)
        if updates.shape != indices.shape:
            raise self.fail(ctx, f"updates shape {updates.shape} must equal indices shape "
                                 f"{indices.shape}")
        return _scatter(ctx, data, _element_grid(ctx, data, indices, axis), updates)


class TensorScatter(CpuKernel):
    """Write ``update`` into a copy of ``past_cache`` at per-batch sequence offsets."""

    def run(self, ctx: ExecutionContext, past: np.ndarray, update: np.ndarray,
            write_indices: np.ndarray | None = None) -> np.ndarray:
        mode = ctx.node.attr("mode", "linear")
        if mode not in ("linear", "circular"):
            raise self.fail(ctx, f"mode {mode!r} is not 'linear' or 'circular'")
        if past.ndim < 2:
            raise self.fail(ctx, f"past_cache must have rank >= 2, got shape {past.shape}")
        if update.dtype != past.dtype:
            raise self.fail(ctx, f"update is {update.dtype} but past_cache is {past.dtype}")
        axis = normalize_axis(ctx, ctx.node.attr("axis", -2), past.ndim)
        if axis == 0:
            raise self.fail(ctx, "axis must not be 0 (the batch dimension)")
        max_len = past.shape[axis]
        fits = update.ndim == past.ndim and update.shape[axis] <= max_len and all(
            u == p for d, (u, p) in enumerate(zip(update.shape, past.shape)) if d != axis)
        if not fits:
            raise self.fail(ctx, f"update {update.shape} must equal past_cache {past.shape} "
                                 f"except along axis {axis}, where it may not exceed "
                                 f"{max_len}")
        batch, seq_len = past.shape[0], update.shape[axis]
        if write_indices is None:
            starts = np.zeros(batch, dtype=np.int64)
        else:
            starts = np.asarray(write_indices).astype(np.int64).reshape(-1)
            if starts.shape != (batch,):
                raise self.fail(ctx, f"write_indices has shape {np.shape(write_indices)}, "
                                     f"expected ({batch},)")
        if (starts < 0).any():
            raise self.fail(ctx, f"write_indices {starts.tolist()} must be >= 0")
        pos = starts[:, None] + np.arange(seq_len)[None, :]
        if mode == "circular":
            pos %= max(max_len, 1)
        elif (pos >= max_len).any():
            raise self.fail(ctx, f"linear mode needs write_indices + {seq_len} <= {max_len}, "
                                 f"got write_indices {starts.tolist()}")
        present = past.copy()
        # a view with the sequence axis next to the batch: (B, max_len, ...)
        view = np.moveaxis(present, axis, 1)
        view[np.arange(batch)[:, None], pos] = np.moveaxis(update, axis, 1)
        return present


class OneHot(CpuKernel):
    def run(self, ctx: ExecutionContext, indices: np.ndarray, depth: np.ndarray,
            values: np.ndarray) -> np.ndarray:
        if np.asarray(depth).size != 1:
            raise self.fail(ctx, f"depth must be a scalar, got shape {np.shape(depth)}")
        n = int(np.asarray(depth).reshape(-1)[0])
        if n < 1:
            raise self.fail(ctx, f"depth must be >= 1, got {n}")
        values = np.asarray(values)
        if values.size != 2:
            raise self.fail(ctx, f"values must hold [off_value, on_value], got shape "
                                 f"{values.shape}")
        off, on = values.reshape(-1)
        r = indices.ndim
        axis = normalize_axis(ctx, ctx.node.attr("axis", -1), r + 1)   # an axis of the output
        # Float indices truncate toward zero; out-of-range ones give an all-off row (spec).
        idx = np.asarray(indices).astype(np.int64)
        idx = np.where(idx < 0, idx + n, idx)
        classes = np.arange(n).reshape((n,) + (1,) * (r - axis))
        hot = np.expand_dims(idx, axis) == classes
        return np.where(hot, on, off).astype(values.dtype)


# ---------------------------------------------------------------- scans and selection

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


class CumProd(CpuKernel):
    """Cumulative product along ``axis`` (a 0-d input), with ``exclusive`` and ``reverse``."""

    parity = PRODUCT_PARITY
    _TYPES = frozenset(np.dtype(t) for t in (np.uint32, np.uint64, np.int32, np.int64,
                                             np.float16, np.float32, np.float64,
                                             ml_dtypes.bfloat16))

    def run(self, ctx: ExecutionContext, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
        if x.dtype not in self._TYPES:
            raise self.fail(ctx, f"x dtype {x.dtype} is not supported (takes uint32, uint64, "
                                 f"int32, int64, float16, bfloat16, float, double)")
        a = np.asarray(axis)
        if a.dtype.kind not in "iu" or a.size != 1:
            raise self.fail(ctx, f"axis must be one int32/int64 value, got {a.dtype} "
                                 f"of shape {a.shape}")
        if x.ndim == 0:
            raise self.fail(ctx, "x must have rank >= 1")
        ax = normalize_axis(ctx, int(a.reshape(-1)[0]), x.ndim)
        reverse = bool(ctx.node.attr("reverse", 0))
        work = upcast(x)
        if reverse:
            work = np.flip(work, axis=ax)
        if ctx.node.attr("exclusive", 0) and work.shape[ax]:
            # element j is the product of the j elements before it: shift by one, pad with 1
            ones = np.ones_like(np.take(work, [0], axis=ax))
            head = np.take(work, np.arange(work.shape[ax] - 1), axis=ax)
            work = np.concatenate([ones, head], axis=ax)
        out = np.cumprod(work, axis=ax, dtype=work.dtype)
        if reverse:
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
            if key.dtype.kind in "iu":
                order = np.argsort(~key, axis=axis, kind="stable")
            else:
                # NaN ranks as the largest value (as ArgMax does): first, in index order
                nan = np.isnan(key)
                order = np.lexsort((np.where(nan, 0, -key), ~nan), axis=axis)
        else:
            order = np.argsort(key, axis=axis, kind="stable")
        idx = np.take(order, np.arange(kk), axis=axis)
        values = np.take_along_axis(x, idx, axis=axis)
        return np.asarray(values), idx.astype(np.int64)


# ---------------------------------------------------------------- layout

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


class Pad(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, pads: Any = None,
            constant_value: Any = None, axes: Any = None) -> np.ndarray:
        opset = ctx.node.opset
        mode = ctx.node.attr("mode", "constant")
        if mode not in _PAD_MODES or (mode == "wrap" and opset < 19):
            raise self.fail(ctx, f"mode {mode!r} is not one of constant, reflect, edge"
                                 f"{', wrap' if opset >= 19 else ''}")
        if opset < 11:
            raw = [int(p) for p in ctx.node.attr("pads" if opset >= 2 else "paddings", [])]
            value: Any = ctx.node.attr("value", 0.0)
            ax = None
        else:
            raw = int_list(ctx, pads, "pads")
            value = None
            if constant_value is not None and np.asarray(constant_value).size:
                value = np.asarray(constant_value).reshape(-1)[0]
            ax = axes_arg(ctx, axes, 18)
        if value is None:
            value = "" if data.dtype == object else 0
        ax = list(range(data.ndim)) if ax is None else normalize_axes(ctx, ax, data.ndim)
        if len(raw) != 2 * len(ax):
            raise self.fail(ctx, f"pads {raw} must have 2 entries per padded axis "
                                 f"({len(ax)} axes)")
        begin, end = raw[: len(ax)], raw[len(ax):]
        # Negative pads crop; do that first, then pad with the non-negative rest.
        crop = [slice(None)] * data.ndim
        width = [(0, 0)] * data.ndim
        for a, b, e in zip(ax, begin, end):
            dim = data.shape[a]
            lo, hi = max(-b, 0), dim - max(-e, 0)
            if lo > hi:
                raise self.fail(ctx, f"negative pads ({b}, {e}) remove more than the "
                                     f"{dim} elements of axis {a}")
            crop[a] = slice(lo, hi)
            width[a] = (max(b, 0), max(e, 0))
        x = data[tuple(crop)]
        if mode == "constant":
            # round the pad value ourselves: np.pad would convert it with ml_dtypes' cast
            return np.pad(x, width, mode="constant", constant_values=round_to(value, data.dtype))
        for a, (b, e) in enumerate(width):
            if (b or e) and x.shape[a] == 0:
                raise self.fail(ctx, f"mode {mode!r} cannot pad axis {a}, which is empty")
            if mode == "reflect" and max(b, e) > x.shape[a] - 1:
                # A reflection cannot reach further than the axis itself (as onnxruntime).
                raise self.fail(ctx, f"mode 'reflect' pads ({b}, {e}) exceed the maximum "
                                     f"{x.shape[a] - 1} for axis {a} of size {x.shape[a]}")
        return np.pad(x, width, mode=_PAD_MODES[mode])


class DepthToSpace(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> np.ndarray:
        bs = ctx.node.attr("blocksize")
        mode = ctx.node.attr("mode", "DCR")
        if data.ndim != 4 or not bs or bs < 1 or data.shape[1] % (bs * bs):
            raise self.fail(ctx, f"input of shape {data.shape} must be 4-D with channels "
                                 f"divisible by blocksize**2 (blocksize={bs})")
        b, c, h, w = data.shape
        if mode == "DCR":
            tmp = data.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
        elif mode == "CRD":
            tmp = data.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            raise self.fail(ctx, f"mode {mode!r} must be 'DCR' or 'CRD'")
        return tmp.reshape(b, c // (bs * bs), h * bs, w * bs)


class SpaceToDepth(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> np.ndarray:
        bs = ctx.node.attr("blocksize")
        mode = ctx.node.attr("mode", "DCR")
        if (data.ndim != 4 or not bs or bs < 1 or data.shape[2] % bs
                or data.shape[3] % bs):
            raise self.fail(ctx, f"input of shape {data.shape} must be 4-D with H and W "
                                 f"divisible by blocksize={bs}")
        b, c, h, w = data.shape
        tmp = data.reshape(b, c, h // bs, bs, w // bs, bs)
        if mode == "DCR":
            tmp = tmp.transpose(0, 3, 5, 1, 2, 4)
        elif mode == "CRD":
            tmp = tmp.transpose(0, 1, 3, 5, 2, 4)
        else:
            raise self.fail(ctx, f"mode {mode!r} must be 'DCR' or 'CRD'")
        return tmp.reshape(b, c * bs * bs, h // bs, w // bs)


class ReverseSequence(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, lens: np.ndarray) -> np.ndarray:
        if data.ndim < 2:
            raise self.fail(ctx, f"input must have rank >= 2, got shape {data.shape}")
        batch_axis = ctx.node.attr("batch_axis", 1)
        time_axis = ctx.node.attr("time_axis", 0)
        if {batch_axis, time_axis} != {0, 1}:
            raise self.fail(ctx, f"batch_axis={batch_axis} and time_axis={time_axis} must "
                                 f"be 0 and 1 in some order")
        n_batch, n_time = data.shape[batch_axis], data.shape[time_axis]
        lens = np.asarray(lens).astype(np.int64).reshape(-1)
        if lens.shape != (n_batch,) or (lens < 0).any() or (lens > n_time).any():
            raise self.fail(ctx, f"sequence_lens {lens.tolist()} must have {n_batch} entries "
                                 f"in [0, {n_time}]")
        t = np.arange(n_time)[None, :]
        src = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)  # (batch, time)
        if time_axis == 0:
            src = src.T
        src = src.reshape(src.shape + (1,) * (data.ndim - 2))
        return np.take_along_axis(data, src, axis=time_axis)


class Dropout(CpuKernel):
    """Inference: identity and an all-true mask. Training (opset 12+ ``training_mode``
    input true, ratio > 0): numpy's legacy generator seeded with ``seed``, keep where
    uniform >= ratio, scale kept values by 1 / (1 - ratio)."""

    def run(self, ctx: ExecutionContext, x: np.ndarray, ratio: np.ndarray | None = None,
            training_mode: np.ndarray | None = None) -> Any:
        opset = ctx.node.opset
        want_mask = len(ctx.node.output_names) > 1 and bool(ctx.node.output_names[1])
        mask_dtype = np.bool_ if opset >= 10 else x.dtype
        if opset >= 12:
            r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
            training = training_mode is not None and bool(np.asarray(training_mode))
        else:
            r, training = ctx.node.attr("ratio", 0.5), False
        if not 0.0 <= r < 1.0:
            raise self.fail(ctx, f"ratio must be in [0, 1), got {r}")
        if not training or r == 0.0:
            y = x.copy()
            keep = np.ones(x.shape, dtype=np.bool_)
        else:
            seed = ctx.node.attr("seed", None)
            rng = np.random.RandomState(seed)
            keep = rng.uniform(0.0, 1.0, x.shape) >= r
            y = round_to(keep * float_compute(x) * (1.0 / (1.0 - r)), x.dtype)
        if want_mask:
            return y, keep.astype(mask_dtype)
        return y


KERNELS: list[CpuKernel] = [
    GatherElements("GatherElements", since=11),
    GatherND("GatherND", since=11),
    ScatterND("ScatterND", since=11),
    ScatterElements("ScatterElements", since=11),
    ScatterElements("Scatter", since=9),
    TensorScatter("TensorScatter", since=24),
    OneHot("OneHot", since=9),
    CumSum("CumSum", since=11, parity=SUM_PARITY),
    CumProd("CumProd", since=26),
    TopK("TopK", since=1),
    Pad("Pad", since=1),
    DepthToSpace("DepthToSpace", since=1),
    SpaceToDepth("SpaceToDepth", since=1),
    ReverseSequence("ReverseSequence", since=10),
    Dropout("Dropout", since=1),
]
