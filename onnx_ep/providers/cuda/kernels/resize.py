"""Resize (opset 10+), Upsample (opset 9), GridSample (opset 16+), CenterCropPad (18+),
AffineGrid (20+) and Col2Im (18+) on CUDA (resize.cu).

One thread per output element recomputes its coordinates, coefficients and the weighted
sums in float64 with cpu_reference's operations in cpu_reference's order (its resize.py,
which holds AffineGrid, GridSample and Col2Im too; see resize.cu), then rounds once: EXACT
(AffineGrid: a tolerance, see there).

Resize's scales / sizes / roi stay on the device: the kernel reads them through their
pointers (the coordinates need the actual scale values), and the output shape is the
planned one (``outputs[0].shape``). The host checks only what shapes tell: exactly one
of scales and sizes is non-empty, one value per resized axis, two roi values per axis
for tf_crop_and_resize. Values the reference would reject (scales <= 0) are not checked
on cuda (that needs a host read): the output is then unspecified.

``infer_outputs`` sizes Y from the input values the plan knows (initializers, values
computed from shapes: ``meta.constant(i)``) with the reference's formulas
(:mod:`.known_values`): Resize / Upsample's scales or sizes, CenterCropPad's shape,
AffineGrid's size, Col2Im's image and block shapes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity, Support, TensorSpec
from onnx_ep.providers.cuda.kernels import known_values as kv
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    BLOCK,
    F64,
    I64,
    PTR,
    CudaKernel,
    dtype_support,
    grid_1d,
    normalize_axis,
    prod,
    struct_arg,
    suffix,
)

#: the most axes a resize geometry carries (RS_MAX in resize.cu)
MAX_DIMS = 8

FLOATS = frozenset(d for d in (np.dtype(np.float32), np.dtype(np.float16), BF16)
                   if d is not None)
#: interpolation (linear / cubic) rounds float64 to these; int64 cannot saturate exactly
INTERP_DTYPES = FLOATS | {np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int32)}
#: nearest only gathers
NEAREST_DTYPES = INTERP_DTYPES | {np.dtype(np.int64)}

MODES = {"nearest": 0, "linear": 1, "cubic": 2}
COORDS = {"half_pixel": 0, "half_pixel_symmetric": 1, "pytorch_half_pixel": 2,
          "align_corners": 3, "asymmetric": 4, "tf_crop_and_resize": 5,
          "tf_half_pixel_for_nn": 6}
NEAREST = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3,
           "simple": 4}
POLICIES = {"stretch": 0, "not_larger": 1, "not_smaller": 2}
ROI_KINDS = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.float64): 2}


class _ResizeFamily(CudaKernel):
    """The kernels of ``resize.cu``: grid-stride launches over the output."""

    source = "resize"

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        # Y's shape is a value (Resize's scales / sizes, CenterCropPad's shape, AffineGrid's
        # size, Col2Im's image_shape): sized here when the plan knows it, else by the plan
        x = meta.inputs[0] if meta.inputs else None
        if x is None or not all(isinstance(d, int) for d in x.shape):
            return [None]
        shape = self.output_shape(meta, tuple(int(d) for d in x.shape))
        return [None if shape is None else TensorSpec(x.dtype, shape)]

    def output_shape(self, meta: NodeMeta, x_shape: tuple[int, ...]
                     ) -> tuple[int, ...] | None:
        """Y's shape from the input values the plan knows, or ``None``."""
        return None

    def _launch(self, ctx: ExecutionContext, symbol: str, like: Any, n: int,
                args: list[tuple[Any, Any]]) -> None:
        self.launch(self.function(symbol, like), grid_1d(n), (BLOCK, 1, 1), args, ctx.stream)

    def _same_rank(self, ctx: ExecutionContext, inputs: Sequence[Any],
                   outputs: Sequence[Any]) -> tuple[Any, Any]:
        """``(X, Y)``, the first input and output; Y must keep X's rank."""
        x, y = inputs[0], outputs[0]
        if y.ndim != x.ndim:
            raise self.fail(ctx, f"output rank {y.ndim} differs from input rank {x.ndim}")
        return x, y


def _ranked(x: TensorSpec | None, what: str, verb: str, movable: bool = False) -> Support:
    """X is known, (``movable``: of a dtype cuda holds,) of rank 1..MAX_DIMS."""
    if x is None:
        return Support.no(f"{what} is not a tensor of known dtype and rank")
    if movable and (x.dtype.kind in "OUS" or x.dtype.itemsize not in (1, 2, 4, 8)):
        return Support.no(f"dtype {x.dtype} cannot live on cuda")
    if not 1 <= len(x.shape) <= MAX_DIMS:
        return Support.no(f"X of rank {len(x.shape)}: cuda {verb} ranks 1..{MAX_DIMS}")
    return Support.YES


def _float_inputs(meta: NodeMeta, *names: str) -> Support:
    """The inputs ``names`` are known tensors and the first is of a float dtype cuda computes."""
    known = meta.inputs[:len(names)]
    first = known[0] if known else None
    if first is None or len(known) < len(names) or any(t is None for t in known):
        listed = ", ".join(names[:-1]) + " and " + names[-1]
        return Support.no(f"{listed} must be tensors of known dtype and rank")
    return dtype_support(first.dtype, FLOATS, names[0])


class ResizeGeo(ctypes.Structure):
    """``struct ResizeGeo`` of resize.cu (same field order, so the same layout)."""

    _fields_ = [("in_", ctypes.c_int64 * MAX_DIMS), ("out", ctypes.c_int64 * MAX_DIMS),
                ("stride", ctypes.c_int64 * MAX_DIMS), ("pos", ctypes.c_int32 * MAX_DIMS),
                ("pairwise", ctypes.c_int32 * MAX_DIMS), ("ndim", ctypes.c_int32),
                ("naxes", ctypes.c_int32), ("mode", ctypes.c_int32),
                ("coord", ctypes.c_int32), ("nearest", ctypes.c_int32),
                ("exclude_outside", ctypes.c_int32), ("antialias", ctypes.c_int32),
                ("policy", ctypes.c_int32), ("roi_kind", ctypes.c_int32),
                ("cubic_a", ctypes.c_double), ("extrapolation", ctypes.c_double)]


class GridGeo(ctypes.Structure):
    """``struct GridGeo`` of resize.cu."""

    _fields_ = [("dims", ctypes.c_int64 * 3), ("out", ctypes.c_int64 * 3),
                ("n", ctypes.c_int64), ("c", ctypes.c_int64), ("out_size", ctypes.c_int64),
                ("nd", ctypes.c_int32), ("mode", ctypes.c_int32),
                ("padding", ctypes.c_int32), ("align", ctypes.c_int32)]


def resize_options(meta: NodeMeta) -> dict[str, Any]:
    """The node's attributes as resize.py reads them (Resize-10 and Upsample: asymmetric
    coordinates and onnxruntime's "simple" nearest)."""
    if meta.op_type == "Upsample":
        mode = meta.attr("mode", "nearest")
        return {"mode": "linear" if mode == "bilinear" else mode, "coord": "asymmetric",
                "nearest_mode": "simple", "cubic_a": -0.75, "exclude_outside": False,
                "extrapolation_value": 0.0, "antialias": False,
                "keep_aspect_ratio_policy": "stretch", "axes": None}
    mode = meta.attr("mode", "nearest")
    old = meta.opset < 11
    return {
        "mode": mode,
        "coord": "asymmetric" if old else meta.attr("coordinate_transformation_mode",
                                                    "half_pixel"),
        "nearest_mode": "simple" if old else meta.attr("nearest_mode", "round_prefer_floor"),
        "cubic_a": float(meta.attr("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(meta.attr("exclude_outside", 0)),
        "extrapolation_value": float(meta.attr("extrapolation_value", 0.0)),
        "antialias": bool(meta.attr("antialias", 0)) and mode != "nearest",
        "keep_aspect_ratio_policy": meta.attr("keep_aspect_ratio_policy", "stretch"),
        "axes": meta.attr("axes"),
    }


def resize_inputs(meta: NodeMeta, inputs: Sequence[Any]) -> tuple[Any, Any, Any]:
    """``(roi, scales, sizes)`` among ``inputs`` (specs or tensors; ``None`` when absent)."""
    def at(i: int) -> Any:
        return inputs[i] if len(inputs) > i else None

    if meta.op_type == "Upsample" or meta.opset < 11:
        return None, at(1), None
    return at(1), at(2), at(3)


def resize_axes(meta: NodeMeta, rank: int, opts: dict[str, Any]) -> list[int] | None:
    """The resized axes in attribute order (all axes without ``axes``), None if invalid."""
    if opts["axes"] is None:
        return list(range(rank))
    axes = [normalize_axis(int(a), rank) for a in opts["axes"]]
    if any(a is None for a in axes) or len(set(axes)) != len(axes):
        return None
    return [int(a) for a in axes if a is not None]


def resize_geometry(x_shape: Sequence[int], y_shape: Sequence[int], axes: Sequence[int],
                    opts: dict[str, Any], roi_dtype: Any = np.float32) -> ResizeGeo:
    """THE kernel geometry: per dim sizes, strides, where its scale / size / roi sit, and
    whether numpy sums its taps pairwise (the dim is innermost: nothing after it)."""
    rank = len(x_shape)
    g = ResizeGeo()
    strides = [1] * rank
    for d in range(rank - 2, -1, -1):
        strides[d] = strides[d + 1] * int(x_shape[d + 1])
    for d in range(rank):
        g.in_[d] = int(x_shape[d])
        g.out[d] = int(y_shape[d])
        g.stride[d] = strides[d]
        g.pos[d] = axes.index(d) if d in axes else -1
        g.pairwise[d] = int(prod(x_shape[d + 1:]) == 1)
    g.ndim = rank
    g.naxes = len(axes)
    g.mode = MODES[opts["mode"]]
    g.coord = COORDS[opts["coord"]]
    g.nearest = NEAREST[opts["nearest_mode"]]
    g.exclude_outside = int(opts["exclude_outside"])
    g.antialias = int(opts["antialias"])
    g.policy = POLICIES[opts["keep_aspect_ratio_policy"]]
    g.roi_kind = ROI_KINDS.get(np.dtype(roi_dtype), 0)
    g.cubic_a = float(opts["cubic_a"])
    g.extrapolation = float(opts["extrapolation_value"])
    return g


#: resize.cu sums an antialias row of at most this many taps in numpy's pairwise order
#: (numpy splits longer rows in halves first, which the kernel does not replay)
MAX_TAPS = 128


def max_taps(x_shape: Sequence[int], y_shape: Sequence[int], axes: Sequence[int],
             opts: dict[str, Any]) -> int:
    """An upper bound of the taps per output of an antialias axis (2 or 4 otherwise).

    The scale of an axis is at least ``out / in`` (``floor(scale * in) == out`` for
    scales, ``out / in`` exactly for sizes), or ``(out - 0.5) / in`` when a
    keep_aspect_ratio_policy rounds the common scale; downsampling by ``scale`` takes
    ``-2 * floor(-support / scale)`` taps.
    """
    if opts["mode"] == "nearest":
        return 1
    support = 1.0 if opts["mode"] == "linear" else 2.0
    taps = 2 if opts["mode"] == "linear" else 4
    if not opts["antialias"]:
        return taps
    slack = 0.0 if opts["keep_aspect_ratio_policy"] == "stretch" else 0.5
    for a in axes:
        n_in, n_out = int(x_shape[a]), int(y_shape[a])
        if n_out < 1 or n_in < 1 or n_out - slack <= 0:
            continue
        scale = (n_out - slack) / n_in
        if scale < 1.0:
            taps = max(taps, -2 * int(np.floor(-support / scale)))
    return taps


def int_bounds(dtype: Any) -> tuple[float, float]:
    """Saturation bounds of an integer output (unused for floats)."""
    dt = np.dtype(dtype)
    if dt.kind not in "iu":
        return 0.0, 0.0
    info = np.iinfo(dt)
    return float(info.min), float(info.max)


class Resize(_ResizeFamily):
    """Resize-10+ and Upsample-9: nearest / linear / cubic, every coordinate mode."""

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0] if meta.inputs else None
        s = _ranked(x, "input X", "resizes")
        if not s:
            return s
        opts = resize_options(meta)
        if opts["mode"] not in MODES or (meta.op_type == "Upsample"
                                         and opts["mode"] == "cubic"):
            return Support.no(f"mode {opts['mode']!r} is not one of {', '.join(MODES)}")
        if opts["coord"] not in COORDS:
            return Support.no(f"coordinate_transformation_mode {opts['coord']!r} is unknown")
        if opts["nearest_mode"] not in NEAREST:
            return Support.no(f"nearest_mode {opts['nearest_mode']!r} is unknown")
        if opts["keep_aspect_ratio_policy"] not in POLICIES:
            return Support.no(f"keep_aspect_ratio_policy "
                              f"{opts['keep_aspect_ratio_policy']!r} is unknown")
        s = dtype_support(x.dtype, NEAREST_DTYPES if opts["mode"] == "nearest"
                          else INTERP_DTYPES, "X")
        if not s:
            return s
        if (opts["mode"] == "nearest" and opts["coord"] == "tf_crop_and_resize"
                and x.dtype not in (np.float32, np.float16)):
            return Support.no(f"nearest tf_crop_and_resize of {x.dtype}: the reference's "
                              f"extrapolation turns the output into float64")
        if resize_axes(meta, len(x.shape), opts) is None:
            return Support.no(f"axes {opts['axes']} are not distinct axes of rank "
                              f"{len(x.shape)}")
        roi, scales, sizes = resize_inputs(meta, meta.inputs)
        if scales is not None and scales.dtype != np.float32:
            return Support.no(f"scales of dtype {scales.dtype}: cuda reads float32")
        if sizes is not None and sizes.dtype != np.int64:
            return Support.no(f"sizes of dtype {sizes.dtype}: cuda reads int64")
        if (roi is not None and opts["coord"] == "tf_crop_and_resize"
                and roi.dtype not in ROI_KINDS):
            return Support.no(f"roi of dtype {roi.dtype}: cuda reads float16/32/64")
        if scales is None and sizes is None:
            return Support.no("neither scales nor sizes is given")
        y = meta.outputs[0] if meta.outputs else None
        if opts["antialias"] and x.is_static and y is not None and y.is_static:
            axes = resize_axes(meta, len(x.shape), opts) or []
            taps = max_taps(x.shape, y.shape, axes, opts)
            if taps > MAX_TAPS:
                return Support.no(f"antialias rows of up to {taps} taps: cuda replays "
                                  f"numpy's summation order up to {MAX_TAPS}")
        return Support.YES

    def output_shape(self, meta: NodeMeta, x_shape: tuple[int, ...]
                     ) -> tuple[int, ...] | None:
        opts = resize_options(meta)
        return kv.resize_known_shape(meta, x_shape, resize_axes(meta, len(x_shape), opts), opts)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: Sequence[Any], workspace: Any) -> None:
        x, y = self._same_rank(ctx, inputs, outputs)
        if y.size == 0:
            return
        opts = resize_options(ctx.node)
        axes = resize_axes(ctx.node, x.ndim, opts)
        if axes is None:
            raise self.fail(ctx, f"axes {opts['axes']} are not distinct axes of rank {x.ndim}")
        roi, scales, sizes = resize_inputs(ctx.node, inputs)
        scales = scales if scales is not None and scales.size else None
        sizes = sizes if sizes is not None and sizes.size else None
        if (scales is None) == (sizes is None):
            raise self.fail(ctx, "exactly one of 'scales' and 'sizes' must be given (non-empty)")
        given = scales if scales is not None else sizes
        if given.size != len(axes):
            raise self.fail(ctx, f"{'scales' if scales is not None else 'sizes'} hold "
                                 f"{given.size} values for the {len(axes)} resized axes {axes}")
        if sizes is not None and any(x.shape[a] == 0 for a in axes):
            raise self.fail(ctx, f"cannot resize the empty axes of {tuple(x.shape)} to sizes")
        if x.size == 0:
            raise self.fail(ctx, f"cannot resize empty X {tuple(x.shape)} to "
                                 f"{tuple(y.shape)}")
        roi_dtype = np.float32
        if opts["coord"] == "tf_crop_and_resize":
            if roi is None or roi.size != 2 * len(axes):
                raise self.fail(ctx, f"tf_crop_and_resize needs roi with 2 values per "
                                     f"resized axis {axes}")
            roi_dtype = roi.dtype
        taps = max_taps(x.shape, y.shape, axes, opts)
        if taps > MAX_TAPS:
            raise self.fail(ctx, f"antialias rows of up to {taps} taps from {tuple(x.shape)} "
                                 f"to {tuple(y.shape)}: cuda replays numpy's summation order "
                                 f"up to {MAX_TAPS} (run this node on cpu_reference)")
        g = resize_geometry(x.shape, y.shape, axes, opts, roi_dtype)
        lo, hi = int_bounds(x.dtype)
        self._launch(ctx, f"resize_{suffix(x.dtype)}", x, y.size, [
            (x.ptr, PTR), (y.ptr, PTR), struct_arg(g),
            (scales.ptr if scales is not None else 0, PTR),
            (sizes.ptr if sizes is not None else 0, PTR),
            (roi.ptr if roi is not None and opts["coord"] == "tf_crop_and_resize"
             else 0, PTR),
            (y.size, I64), (lo, F64), (hi, F64)])


# ---------------------------------------------------------------- GridSample

GRID_MODES = {"bilinear": 1, "bicubic": 2, "linear": 1, "cubic": 2, "nearest": 0}
GRID_PADDING = {"zeros": 0, "border": 1, "reflection": 2}


def grid_options(meta: NodeMeta) -> tuple[str, str, bool]:
    mode = meta.attr("mode", "linear" if meta.opset >= 20 else "bilinear")
    return mode, meta.attr("padding_mode", "zeros"), bool(meta.attr("align_corners", 0))


class GridSample(_ResizeFamily):
    """GridSample-16+: 1-3 spatial dims, nearest / linear / cubic, every padding mode."""

    def supports(self, meta: NodeMeta) -> Support:
        s = _float_inputs(meta, "X", "grid")
        if not s:
            return s
        x, grid = meta.inputs[0], meta.inputs[1]
        if grid.dtype != x.dtype:
            return Support.no(f"grid of dtype {grid.dtype} with X of {x.dtype}: cuda needs "
                              f"one dtype")
        nd = len(x.shape) - 2
        if not 1 <= nd <= 3 or len(grid.shape) != nd + 2:
            return Support.no(f"X of rank {len(x.shape)} with grid of rank {len(grid.shape)}: "
                              f"cuda samples 1-3 spatial dims, grid (N, *out, nd)")
        mode, padding, _ = grid_options(meta)
        if mode not in GRID_MODES or padding not in GRID_PADDING:
            return Support.no(f"mode {mode!r} / padding_mode {padding!r} is unknown")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x, grid = meta.inputs[0], meta.inputs[1]
        return [TensorSpec(x.dtype, (grid.shape[0], x.shape[1], *grid.shape[1:-1]))]

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: Sequence[Any], workspace: Any) -> None:
        x, grid, y = inputs[0], inputs[1], outputs[0]
        nd = x.ndim - 2
        want = (grid.shape[0], x.shape[1], *grid.shape[1:-1])
        if (grid.ndim != nd + 2 or grid.shape[-1] != nd or grid.shape[0] != x.shape[0]
                or tuple(y.shape) != want):
            raise self.fail(ctx, f"grid shape {tuple(grid.shape)} must be (N, *out, {nd}) for "
                                 f"X {tuple(x.shape)} (Y planned as {tuple(y.shape)})")
        if y.size == 0:
            return
        if any(d == 0 for d in x.shape[2:]):
            raise self.fail(ctx, f"cannot sample empty X {tuple(x.shape)}")
        mode, padding, align = grid_options(ctx.node)
        g = GridGeo()
        for i in range(nd):
            g.dims[i] = int(x.shape[2 + i])
            g.out[i] = int(grid.shape[1 + i])
        g.n, g.c, g.out_size = int(x.shape[0]), int(x.shape[1]), prod(grid.shape[1:-1])
        g.nd, g.mode, g.padding, g.align = nd, GRID_MODES[mode], GRID_PADDING[padding], \
            int(align)
        self._launch(ctx, f"grid_sample_{suffix(x.dtype)}", x, y.size, [
            (x.ptr, PTR), (grid.ptr, PTR), (y.ptr, PTR), struct_arg(g),
            (y.size, I64)])


# ---------------------------------------------------------------- CenterCropPad

class CropGeo(ctypes.Structure):
    """``struct CropGeo`` of resize.cu."""

    _fields_ = [("in_", ctypes.c_int64 * MAX_DIMS), ("out", ctypes.c_int64 * MAX_DIMS),
                ("stride", ctypes.c_int64 * MAX_DIMS), ("shift", ctypes.c_int64 * MAX_DIMS),
                ("ndim", ctypes.c_int32)]


def crop_geometry(x_shape: Sequence[int], y_shape: Sequence[int]) -> CropGeo:
    """Per dim ``src = out + shift``: the centred crop / pad of cpu_reference's
    CenterCropPad, from the shapes alone (the ``shape`` input is never read)."""
    g = CropGeo()
    stride = 1
    for d in range(len(x_shape) - 1, -1, -1):
        n_in, n_out = int(x_shape[d]), int(y_shape[d])
        g.in_[d], g.out[d], g.stride[d] = n_in, n_out, stride
        g.shift[d] = (n_in - n_out) // 2 if n_out < n_in else -((n_out - n_in) // 2)
        stride *= n_in
    g.ndim = len(x_shape)
    return g


class CenterCropPad(_ResizeFamily):
    """CenterCropPad-18: bytes moved, zeros padded (EXACT); geometry from the shapes."""

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0] if meta.inputs else None
        s = _ranked(x, "input", "crops", movable=True)
        if not s:
            return s
        axes = meta.attr("axes")
        if axes is not None and any(normalize_axis(int(a), len(x.shape)) is None
                                    for a in axes):
            return Support.no(f"axes {axes} are out of range for rank {len(x.shape)}")
        return Support.YES

    def output_shape(self, meta: NodeMeta, x_shape: tuple[int, ...]
                     ) -> tuple[int, ...] | None:
        return kv.crop_pad_shape(meta, x_shape)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: Sequence[Any], workspace: Any) -> None:
        x, y = self._same_rank(ctx, inputs, outputs)
        axes = ctx.node.attr("axes")
        kept = set(range(x.ndim)) if axes is None else \
            {normalize_axis(int(a), x.ndim) for a in axes}
        if any(y.shape[d] != x.shape[d] for d in range(x.ndim) if d not in kept):
            raise self.fail(ctx, f"Y planned as {tuple(y.shape)} changes axes outside "
                                 f"{sorted(a for a in kept if a is not None)} of X "
                                 f"{tuple(x.shape)}")
        if y.size == 0:
            return
        g = crop_geometry(x.shape, y.shape)
        self._launch(ctx, f"center_crop_pad_x{x.dtype.itemsize}", x, y.size, [
            (x.ptr, PTR), (y.ptr, PTR), struct_arg(g), (y.size, I64)])


# ---------------------------------------------------------------- AffineGrid, Col2Im

class AffineGeo(ctypes.Structure):
    """``struct AffineGeo`` of resize.cu."""

    _fields_ = [("spatial", ctypes.c_int64 * 3), ("n", ctypes.c_int64),
                ("points", ctypes.c_int64), ("nd", ctypes.c_int32), ("align", ctypes.c_int32)]


class AffineGrid(_ResizeFamily):
    """AffineGrid-20: theta times the base grid in float64, rounded once. The reference
    contracts with einsum, whose summation order is its own: a tolerance."""

    parity = Parity.tolerance(rtol=1e-6, atol=1e-12)

    def supports(self, meta: NodeMeta) -> Support:
        s = _float_inputs(meta, "theta", "size")
        if not s:
            return s
        theta = meta.inputs[0]
        if len(theta.shape) != 3:
            return Support.no(f"theta of rank {len(theta.shape)}: must be (N, nd, nd + 1)")
        return Support.YES

    def output_shape(self, meta: NodeMeta, x_shape: tuple[int, ...]
                     ) -> tuple[int, ...] | None:
        return kv.affine_grid_shape(meta, x_shape)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: Sequence[Any], workspace: Any) -> None:
        theta, y = inputs[0], outputs[0]
        nd = y.ndim - 2
        if nd not in (2, 3) or tuple(theta.shape) != (y.shape[0], nd, nd + 1) \
                or y.shape[-1] != nd:
            raise self.fail(ctx, f"theta {tuple(theta.shape)} and Y planned as "
                                 f"{tuple(y.shape)} must be (N, nd, nd + 1) and "
                                 f"(N, *spatial, nd) with nd 2 or 3")
        if y.size == 0:
            return
        g = AffineGeo()
        for i, d in enumerate(y.shape[1:-1]):
            g.spatial[i] = int(d)
        g.n, g.points, g.nd = int(y.shape[0]), prod(y.shape[1:-1]), nd
        g.align = int(bool(ctx.node.attr("align_corners", 0)))
        self._launch(ctx, f"affine_grid_{suffix(theta.dtype)}", theta, y.size, [
            (theta.ptr, PTR), (y.ptr, PTR), struct_arg(g), (y.size, I64)])


class Col2ImGeo(ctypes.Structure):
    """``struct Col2ImGeo`` of resize.cu."""

    _fields_ = [("image", ctypes.c_int64 * MAX_DIMS), ("pad_begin", ctypes.c_int64 * MAX_DIMS),
                ("pad_end", ctypes.c_int64 * MAX_DIMS), ("stride", ctypes.c_int64 * MAX_DIMS),
                ("dilation", ctypes.c_int64 * MAX_DIMS), ("channels", ctypes.c_int64),
                ("l", ctypes.c_int64), ("nd", ctypes.c_int32)]


def col2im_geometry(meta: NodeMeta, x_shape: Sequence[int],
                    y_shape: Sequence[int]) -> Col2ImGeo | None:
    """The geometry from the attributes and the shapes (block_shape is read on the
    device); ``None`` when the attributes disagree with the spatial rank."""
    nd = len(y_shape) - 2
    dil = list(meta.attr("dilations", None) or [1] * nd)
    strides = list(meta.attr("strides", None) or [1] * nd)
    pads = list(meta.attr("pads", None) or [0] * (2 * nd))
    if not 1 <= nd <= MAX_DIMS or len(dil) != nd or len(strides) != nd or len(pads) != 2 * nd:
        return None
    if any(int(s) < 1 for s in strides) or any(int(d) < 1 for d in dil):
        return None
    g = Col2ImGeo()
    for i in range(nd):
        g.image[i] = int(y_shape[2 + i])
        g.pad_begin[i], g.pad_end[i] = int(pads[i]), int(pads[nd + i])
        g.stride[i], g.dilation[i] = int(strides[i]), int(dil[i])
    g.channels, g.l, g.nd = int(y_shape[1]), int(x_shape[2]), nd
    return g


class Col2Im(_ResizeFamily):
    """Col2Im-18: float32 sums in the reference's np.add.at order, rounded once (EXACT)."""

    def supports(self, meta: NodeMeta) -> Support:
        s = _float_inputs(meta, "input", "image_shape", "block_shape")
        if not s:
            return s
        x, block = meta.inputs[0], meta.inputs[2]
        if len(x.shape) != 3 or block.dtype != np.int64:
            return Support.no(f"input of rank {len(x.shape)} / block_shape {block.dtype}: "
                              f"cuda needs (N, C * prod(block), L) and int64 block_shape")
        return Support.YES

    def output_shape(self, meta: NodeMeta, x_shape: tuple[int, ...]
                     ) -> tuple[int, ...] | None:
        return kv.col2im_shape(meta, x_shape)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: Sequence[Any], workspace: Any) -> None:
        x, block, y = inputs[0], inputs[2], outputs[0]
        g = col2im_geometry(ctx.node, x.shape, y.shape)
        if g is None or block.size != y.ndim - 2 or y.shape[0] != x.shape[0]:
            raise self.fail(ctx, f"Y planned as {tuple(y.shape)}, block_shape of "
                                 f"{block.size} values and the dilations / strides / pads "
                                 f"disagree on the spatial rank")
        if y.size == 0:
            return
        self._launch(ctx, f"col2im_{suffix(x.dtype)}", x, y.size, [
            (x.ptr, PTR), (block.ptr, PTR), (y.ptr, PTR), struct_arg(g), (y.size, I64)])


KERNELS: list[Any] = [
    Resize("Resize", since=10),
    Resize("Upsample", since=9),
    GridSample("GridSample", since=16),
    CenterCropPad("CenterCropPad", since=18),
    AffineGrid("AffineGrid", since=20),
    Col2Im("Col2Im", since=18),
]
