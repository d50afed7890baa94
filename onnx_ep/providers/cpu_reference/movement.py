"""Data-movement ops: Concat, Split, Slice, Tile, Pad, CenterCropPad, DepthToSpace,
SpaceToDepth, ReverseSequence, Trilu.

Parity: EXACT (values are copied, never computed). String tensors work wherever
ONNX allows them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis
from onnx_ep.providers.cpu_reference.lowfloat import round_to
from onnx_ep.providers.cpu_reference.shape import axes_arg, int_list, normalize_axes


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


class CenterCropPad(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, shape: np.ndarray) -> np.ndarray:
        target = int_list(ctx, shape, "shape")
        ax = ctx.node.attr("axes")
        ax = list(range(data.ndim)) if ax is None else normalize_axes(ctx, ax, data.ndim)
        if len(target) != len(ax) or any(t < 0 for t in target):
            raise self.fail(ctx, f"shape {target} must have one entry >= 0 per axis {ax}")
        crop = [slice(None)] * data.ndim
        place = [slice(None)] * data.ndim
        out_shape = list(data.shape)
        for a, t in zip(ax, target):
            dim = data.shape[a]
            out_shape[a] = t
            if t < dim:
                lo = (dim - t) // 2
                crop[a] = slice(lo, lo + t)
            elif t > dim:
                lo = (t - dim) // 2
                place[a] = slice(lo, lo + dim)
        out = np.zeros(out_shape, dtype=data.dtype)
        out[tuple(place)] = data[tuple(crop)]
        return out


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


class Trilu(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, k: Any = None) -> np.ndarray:
        if data.ndim < 2:
            raise self.fail(ctx, f"input must have rank >= 2, got shape {data.shape}")
        kk = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
        n, m = data.shape[-2:]
        rows, cols = np.arange(n)[:, None], np.arange(m)[None, :]
        keep = cols - rows >= kk if ctx.node.attr("upper", 1) else cols - rows <= kk
        return np.where(keep, data, np.zeros((), dtype=data.dtype))


KERNELS: list[CpuKernel] = [
    Concat("Concat", since=1),
    Split("Split", since=1),
    Slice("Slice", since=1),
    Tile("Tile", since=6),
    Pad("Pad", since=1),
    CenterCropPad("CenterCropPad", since=18),
    DepthToSpace("DepthToSpace", since=1),
    SpaceToDepth("SpaceToDepth", since=1),
    ReverseSequence("ReverseSequence", since=10),
    Trilu("Trilu", since=14),
]
