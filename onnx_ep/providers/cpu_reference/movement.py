"""Data-movement ops: Reshape, Flatten, Squeeze, Unsqueeze, Expand, Transpose, Identity,
Concat, Split, Slice, Tile, Gather.

Parity: EXACT (values are copied, never computed). String tensors work wherever
ONNX allows them. Gather's indices accept ``[-n, n-1]`` per the spec; anything
outside raises a NodeError (numpy would otherwise wrap or raise IndexError).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import (
    CpuKernel,
    axes_arg,
    checked_index,
    int_list,
    normalize_axes,
    normalize_axis,
)


class Reshape(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, shape: Any = None) -> np.ndarray:
        if ctx.node.opset < 5:
            target = [int(d) for d in ctx.node.attr("shape", [])]
        else:
            if shape is None:
                raise self.fail(ctx, "the shape input is required")
            target = int_list(ctx, shape, "shape")
        allowzero = ctx.node.attr("allowzero", 0)
        out = list(target)
        if allowzero and 0 in out and -1 in out:
            raise self.fail(ctx, f"shape {target} has both 0 and -1 while allowzero=1")
        for i, d in enumerate(target):
            if d == 0 and not allowzero:
                if i >= data.ndim:
                    raise self.fail(ctx, f"shape {target}: 0 at position {i} copies a "
                                         f"dim the input (rank {data.ndim}) does not have")
                out[i] = data.shape[i]
            elif d < -1:
                raise self.fail(ctx, f"shape {target} has invalid dim {d}")
        if out.count(-1) > 1:
            raise self.fail(ctx, f"shape {target} has more than one -1")
        if -1 in out:
            known = math.prod(d for d in out if d != -1)
            if known == 0 or data.size % known:
                raise self.fail(ctx, f"cannot reshape input of shape {data.shape} "
                                     f"({data.size} elements) to {target}")
            out[out.index(-1)] = data.size // known
        if math.prod(out) != data.size:
            raise self.fail(ctx, f"cannot reshape input of shape {data.shape} "
                                 f"({data.size} elements) to {target}")
        return data.reshape(out)


class Flatten(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> np.ndarray:
        axis = ctx.node.attr("axis", 1)
        r = data.ndim
        if not -r <= axis <= r:
            raise self.fail(ctx, f"axis {axis} is out of range for rank {r} "
                                 f"(expected {-r} <= axis <= {r})")
        axis = axis + r if axis < 0 else axis
        outer = int(np.prod(data.shape[:axis], dtype=np.int64))
        inner = int(np.prod(data.shape[axis:], dtype=np.int64))
        return data.reshape(outer, inner)


class Squeeze(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, axes: Any = None) -> np.ndarray:
        ax = axes_arg(ctx, axes, 13)
        if not ax:
            # An empty axes input means "all unit dims", as when axes are omitted (ORT).
            return data.reshape([d for d in data.shape if d != 1])
        ax = normalize_axes(ctx, ax, data.ndim)
        for a in ax:
            if data.shape[a] != 1:
                raise self.fail(ctx, f"cannot squeeze axis {a} of shape {data.shape}: "
                                     f"dim is {data.shape[a]}, expected 1")
        return data.reshape([d for i, d in enumerate(data.shape) if i not in ax])


class Unsqueeze(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, axes: Any = None) -> np.ndarray:
        ax = axes_arg(ctx, axes, 13)
        if ax is None:
            raise self.fail(ctx, "axes are required")
        r_out = data.ndim + len(ax)
        ax = normalize_axes(ctx, ax, r_out)
        dims = iter(data.shape)
        return data.reshape([1 if i in ax else next(dims) for i in range(r_out)])


class Expand(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, shape: np.ndarray) -> np.ndarray:
        target = int_list(ctx, shape, "shape")
        try:
            out_shape = np.broadcast_shapes(data.shape, tuple(target))
        except ValueError:
            raise self.fail(ctx, f"input shape {data.shape} cannot be broadcast with "
                                 f"shape {target}") from None
        return np.array(np.broadcast_to(data, out_shape))


class Transpose(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> np.ndarray:
        perm = ctx.node.attr("perm")
        if perm is None:
            perm = list(range(data.ndim))[::-1]
        if sorted(perm) != list(range(data.ndim)):
            raise self.fail(ctx, f"perm {perm} is not a permutation of "
                                 f"0..{data.ndim - 1} (input shape {data.shape})")
        return np.transpose(data, perm).copy()


class Identity(CpuKernel):
    def run(self, ctx: ExecutionContext, data: Any) -> Any:
        # Sequences (lists) and empty optionals (None) pass through unchanged.
        if isinstance(data, np.ndarray):
            return data.copy()
        if isinstance(data, list):
            return list(data)
        return data


class Concat(CpuKernel):
    def run(self, ctx: ExecutionContext, *inputs: np.ndarray) -> np.ndarray:
        arrays = [x for x in inputs if x is not None]
        if not arrays:
            raise self.fail(ctx, "needs at least one input")
        rank = arrays[0].ndim
        axis = ctx.node.attr("axis")
        if axis is None:
            if ctx.node.opset >= 4:
                raise self.fail(ctx, "attribute 'axis' is required")
            axis = 1  # Concat-1 defaulted to axis 1
        axis = normalize_axis(ctx, axis, rank)
        ref = arrays[0].shape
        for i, x in enumerate(arrays):
            if x.ndim != rank or any(d != r for k, (d, r) in enumerate(zip(x.shape, ref))
                                     if k != axis):
                raise self.fail(ctx, f"input {i} has shape {x.shape}, which does not match "
                                     f"input 0 shape {ref} outside axis {axis}")
        return np.concatenate(arrays, axis=axis)


def _split_sizes(ctx: ExecutionContext, dim: int, n_out: int, split: Any) -> list[int]:
    opset = ctx.node.opset
    if opset < 13:
        split = ctx.node.attr("split")
    if split is not None and np.asarray(split).size > 0:
        sizes = int_list(ctx, split, "split")
        if len(sizes) != n_out:
            raise CpuKernel.fail(ctx, f"split {sizes} has {len(sizes)} entries for "
                                      f"{n_out} outputs")
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            raise CpuKernel.fail(ctx, f"split {sizes} must be >= 0 and sum to the "
                                      f"axis dim {dim}")
        return sizes
    num = ctx.node.attr("num_outputs")
    if opset >= 18 and num is not None:
        if num != n_out:
            raise CpuKernel.fail(ctx, f"num_outputs={num} but the node has {n_out} outputs")
        chunk = -(-dim // num)
        sizes = [min(chunk, max(dim - chunk * i, 0)) for i in range(num)]
        return sizes
    if dim % n_out:
        raise CpuKernel.fail(ctx, f"axis dim {dim} cannot be split into {n_out} equal parts")
    return [dim // n_out] * n_out


class Split(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray,
            split: Any = None) -> tuple[np.ndarray, ...]:
        axis = normalize_axis(ctx, ctx.node.attr("axis", 0), data.ndim)
        n_out = len(ctx.node.output_names)
        sizes = _split_sizes(ctx, data.shape[axis], n_out, split)
        bounds = np.cumsum([0] + sizes)
        index = [slice(None)] * data.ndim
        outs = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            index[axis] = slice(int(lo), int(hi))
            outs.append(data[tuple(index)].copy())
        return tuple(outs)


def _slice_index(ctx: ExecutionContext, shape: tuple[int, ...], starts: list[int],
                 ends: list[int], axes: list[int] | None,
                 steps: list[int] | None) -> tuple[slice, ...]:
    rank = len(shape)
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise CpuKernel.fail(ctx, f"starts, ends, axes and steps must have equal lengths, "
                                  f"got {len(starts)}, {len(ends)}, {len(axes)}, {len(steps)}")
    axes = normalize_axes(ctx, axes, rank)
    index = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        dim = shape[a]
        if st == 0:
            raise CpuKernel.fail(ctx, f"step for axis {a} must not be 0")
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            index[a] = slice(s, e, st)
        elif dim == 0:
            index[a] = slice(0, 0)
        else:
            # Negative steps clamp start to [0, dim-1] and end to [-1, dim-1], where -1
            # means "before element 0", which a Python slice spells as None.
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
            index[a] = slice(s, None if e < 0 else e, st)
    return tuple(index)


class Slice(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, starts: Any = None,
            ends: Any = None, axes: Any = None, steps: Any = None) -> np.ndarray:
        if ctx.node.opset < 10:
            st = [int(v) for v in ctx.node.attr("starts", [])]
            en = [int(v) for v in ctx.node.attr("ends", [])]
            ax = ctx.node.attr("axes")
            index = _slice_index(ctx, data.shape, st, en, ax, None)
        else:
            if starts is None or ends is None:
                raise self.fail(ctx, "inputs 'starts' and 'ends' are required")
            index = _slice_index(
                ctx, data.shape, int_list(ctx, starts, "starts"), int_list(ctx, ends, "ends"),
                None if axes is None else int_list(ctx, axes, "axes"),
                None if steps is None else int_list(ctx, steps, "steps"))
        return data[index].copy()


class Tile(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, repeats: np.ndarray) -> np.ndarray:
        reps = int_list(ctx, repeats, "repeats")
        if len(reps) != data.ndim or any(r < 0 for r in reps):
            raise self.fail(ctx, f"repeats {reps} must have one entry >= 0 per input dim "
                                 f"(input shape {data.shape})")
        return np.tile(data, reps)


class Gather(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        axis = normalize_axis(ctx, ctx.node.attr("axis", 0), data.ndim)
        idx = checked_index(ctx, indices, data.shape[axis], "indices")
        return np.take(data, idx, axis=axis)


class TransposedGather(CpuKernel):
    """``onnx_ep.fused::TransposedGather(w, indices)``: ``Gather(Transpose(w), indices,
    axis=0)`` of a matrix ``w`` [K, N] (the fusion pass's node, core/fusion.py)."""

    def run(self, ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        if data.ndim != 2:
            raise self.fail(ctx, f"data must be a matrix, got shape {data.shape}")
        idx = checked_index(ctx, indices, data.shape[1], "indices")
        return np.moveaxis(np.take(data, idx, axis=1), 0, -1)


KERNELS: list[CpuKernel] = [
    TransposedGather("TransposedGather", since=1, domain=FUSED_DOMAIN),
    Reshape("Reshape", since=1),
    Flatten("Flatten", since=1),
    Squeeze("Squeeze", since=1),
    Unsqueeze("Unsqueeze", since=1),
    Expand("Expand", since=8),
    Transpose("Transpose", since=1),
    Identity("Identity", since=1),
    Concat("Concat", since=1),
    Split("Split", since=1),
    Slice("Slice", since=1),
    Tile("Tile", since=6),
    Gather("Gather", since=1),
]
