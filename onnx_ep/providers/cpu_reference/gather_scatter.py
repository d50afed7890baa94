"""Indexing ops: Gather, GatherElements, GatherND, Scatter, ScatterElements, ScatterND, OneHot.

Parity: EXACT. Gathers copy values; scatter reductions apply numpy's ufunc
``at`` in index order, in the data dtype (ml_dtypes floats such as bfloat16
have no ufunc loops: they reduce in float32 and round once at the end).

Index inputs accept ``[-n, n-1]`` per the spec; anything outside raises a
NodeError (numpy would otherwise wrap or raise IndexError).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis
from onnx_ep.providers.cpu_reference.lowfloat import is_float, round_to, upcast


def checked_index(ctx: ExecutionContext, idx: np.ndarray, dim: int, what: str) -> np.ndarray:
    """``idx`` as int64 in ``[0, dim)``; values outside ``[-dim, dim-1]`` are a NodeError."""
    idx = np.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise CpuKernel.fail(ctx, f"{what} must be integers, got dtype {idx.dtype}")
    idx = idx.astype(np.int64)
    bad = (idx < -dim) | (idx >= dim)
    if bad.any():
        first = int(idx[bad].reshape(-1)[0])
        raise CpuKernel.fail(ctx, f"{what} value {first} is out of range for a dim of size "
                                  f"{dim} (expected {-dim} <= index <= {dim - 1})")
    return np.where(idx < 0, idx + dim, idx)


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


class Gather(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        axis = normalize_axis(ctx, ctx.node.attr("axis", 0), data.ndim)
        idx = checked_index(ctx, indices, data.shape[axis], "indices")
        return np.take(data, idx, axis=axis)


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


KERNELS: list[CpuKernel] = [
    Gather("Gather", since=1),
    GatherElements("GatherElements", since=11),
    GatherND("GatherND", since=11),
    ScatterND("ScatterND", since=11),
    ScatterElements("ScatterElements", since=11),
    ScatterElements("Scatter", since=9),
    OneHot("OneHot", since=9),
]
