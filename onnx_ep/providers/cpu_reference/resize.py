"""Resize (opset 10+) and the deprecated Upsample (opset 7-9); the sampling-grid ops
GridSample, AffineGrid and Col2Im; CenterCropPad.

Interpolation is separable: each resized axis is done in turn as a gather of
``n`` neighbours per output position times a coefficient table, so no Python
loop runs over elements. Coordinates, coefficients and the weighted sums are
computed in float64 and rounded once to the input dtype (integers round half
to even, then saturate), as the ONNX reference does.

Parity: nearest is EXACT in effect (a pure gather), but one promise covers the
kernel: a float32 implementation of the same formulas stays within
``rtol=1e-3, atol=1e-5`` of this one.

GridSample and AffineGrid compute coordinates, weights and weighted sums in
float64 and round once to the output dtype (the ONNX reference computes some
coordinates in float32, hence the tolerance). Col2Im sums overlapping patches
with ``numpy.add.at`` in the input dtype (float16/bfloat16 in float32).
CenterCropPad copies values: EXACT.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel, int_list, normalize_axes
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import is_float, round_to, upcast

_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(mode: str, out_len: int, in_len: int, scale: float,
                   roi: tuple[float, float]) -> np.ndarray:
    """Map output positions to input coordinates (the spec's coordinate transformations).

    ``length_resized`` is ``scale * in_len`` as a float, as in the ONNX reference.
    """
    y = np.arange(out_len, dtype=np.float64)
    width = scale * in_len
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / width)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if width != 1 else np.full(out_len, -0.5)
    if mode == "align_corners":
        return y * (in_len - 1) / (width - 1) if width != 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    # tf_crop_and_resize
    lo, hi = roi
    if width == 1:
        return np.full(out_len, (hi - lo) * (in_len - 1) / 2 + lo * (in_len - 1))
    return y * (hi - lo) * (in_len - 1) / (width - 1) + lo * (in_len - 1)


def _nearest_index(x: np.ndarray, mode: str, scale: float) -> np.ndarray:
    fl = np.floor(x)
    frac = x - fl
    if mode == "round_prefer_floor":
        idx = np.where(frac <= 0.5, fl, fl + 1)
    elif mode == "round_prefer_ceil":
        idx = np.where(frac < 0.5, fl, fl + 1)
    elif mode == "floor":
        idx = fl
    elif mode == "ceil":
        idx = np.ceil(x)
    else:
        # "simple": Resize-10 / Upsample semantics as onnxruntime implements them.
        idx = np.ceil(x) if scale < 1 else fl
    return idx.astype(np.int64)


def _cubic(s: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic convolution kernel at distances ``s``."""
    s = np.abs(s)
    near = ((a + 2) * s - (a + 3)) * s * s + 1
    far = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
    return np.where(s <= 1, near, np.where(s < 2, far, 0.0))


def _kernel(mode: str, ratio: np.ndarray, scale: float, antialias: bool,
            cubic_a: float) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour offsets from ``floor(x)`` and their coefficients, shape (out, n)."""
    if antialias and scale < 1:
        # The filter is stretched by 1/scale when downsampling and renormalized.
        support = 1.0 if mode == "linear" else 2.0
        start = int(np.floor(-support / scale)) + 1
        offsets = np.arange(start, 2 - start)
        dist = (offsets[None, :] - ratio[:, None]) * scale
        if mode == "linear":
            coeffs = np.clip(1 - np.abs(dist), 0, 1)
        else:
            coeffs = _cubic(dist, cubic_a)
        return offsets, coeffs / coeffs.sum(axis=1, keepdims=True)
    if mode == "linear":
        return np.arange(0, 2), np.stack([1 - ratio, ratio], axis=1)
    offsets = np.arange(-1, 3)
    return offsets, _cubic(offsets[None, :] - ratio[:, None], cubic_a)


def _resize_axis(x: np.ndarray, axis: int, out_len: int, scale: float,
                 roi: tuple[float, float], opts: dict[str, Any]) -> np.ndarray:
    in_len = x.shape[axis]
    if out_len == 0 or in_len == 0:
        shape = list(x.shape)
        shape[axis] = out_len
        return np.zeros(shape, dtype=x.dtype)
    coord = _source_coords(opts["coord"], out_len, in_len, scale, roi)
    if opts["mode"] == "nearest":
        idx = np.clip(_nearest_index(coord, opts["nearest_mode"], scale), 0, in_len - 1)
        out = np.take(x, idx, axis=axis)
    else:
        base = np.floor(coord)
        ratio = coord - base
        # At integer coordinates take the left neighbour with ratio 1 (the reference's
        # convention); this only matters for the window of exclude_outside.
        exact = ratio == 0
        base = np.where(exact, base - 1, base).astype(np.int64)
        ratio = np.where(exact, 1.0, ratio)
        offsets, coeffs = _kernel(opts["mode"], ratio, scale, opts["antialias"],
                                  opts["cubic_a"])
        idx = base[:, None] + offsets[None, :]
        if opts["exclude_outside"]:
            coeffs = np.where((idx < 0) | (idx >= in_len), 0.0, coeffs)
            total = coeffs.sum(axis=1, keepdims=True)
            coeffs = coeffs / np.where(total == 0, 1.0, total)
        gathered = np.take(x, np.clip(idx, 0, in_len - 1), axis=axis)
        shape = (1,) * axis + coeffs.shape + (1,) * (x.ndim - axis - 1)
        out = (gathered * coeffs.reshape(shape)).sum(axis=axis + 1)
    if opts["coord"] == "tf_crop_and_resize":
        outside = (coord < 0) | (coord > in_len - 1)
        if outside.any():
            mask = outside.reshape((1,) * axis + (out_len,) + (1,) * (x.ndim - axis - 1))
            out = np.where(mask, opts["extrapolation_value"], out)
    return out


def _to_dtype(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.rint(y), info.min, info.max).astype(dtype)
    return round_to(y, dtype)


def resize(ctx: ExecutionContext, x: np.ndarray, *, scales: list[float] | None,
           sizes: list[int] | None, axes: list[int], roi: list[float] | None,
           opts: dict[str, Any]) -> np.ndarray:
    """Resize ``x`` along ``axes`` to ``sizes`` or by ``scales`` (exactly one is given)."""
    r = x.ndim
    scale_of = {a: 1.0 for a in range(r)}
    size_of = {a: x.shape[a] for a in range(r)}
    if scales is not None:
        if len(scales) != len(axes) or any(s <= 0 for s in scales):
            raise CpuKernel.fail(ctx, f"scales {scales} must hold one positive value per "
                                      f"resized axis {axes}")
        for a, s in zip(axes, scales):
            scale_of[a] = float(s)
            size_of[a] = int(np.floor(float(s) * x.shape[a]))
    else:
        assert sizes is not None
        if len(sizes) != len(axes) or any(s < 0 for s in sizes):
            raise CpuKernel.fail(ctx, f"sizes {sizes} must hold one value >= 0 per "
                                      f"resized axis {axes}")
        for a, s in zip(axes, sizes):
            if x.shape[a] == 0:
                raise CpuKernel.fail(ctx, f"cannot resize empty axis {a} to size {s}")
            scale_of[a] = s / x.shape[a]
            size_of[a] = s
        policy = opts["keep_aspect_ratio_policy"]
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise CpuKernel.fail(ctx, f"keep_aspect_ratio_policy {policy!r} must be "
                                          f"stretch, not_larger or not_smaller")
            pick = min if policy == "not_larger" else max
            common = pick(scale_of[a] for a in axes)
            for a in axes:
                scale_of[a] = common
                size_of[a] = int(common * x.shape[a] + 0.5)
    roi_of = {a: (0.0, 1.0) for a in range(r)}
    if opts["coord"] == "tf_crop_and_resize":
        if roi is None or len(roi) != 2 * len(axes):
            raise CpuKernel.fail(ctx, f"tf_crop_and_resize needs roi with 2 values per "
                                      f"resized axis {axes}, got {roi}")
        for i, a in enumerate(axes):
            roi_of[a] = (float(roi[i]), float(roi[len(axes) + i]))
    # upcast, not source_value: int64 data converts as it always did
    y = x if opts["mode"] == "nearest" else upcast(x).astype(np.float64)
    for a in sorted(axes):
        if (size_of[a] == y.shape[a] and scale_of[a] == 1.0
                and roi_of[a] == (0.0, 1.0)):
            continue
        y = _resize_axis(y, a, size_of[a], scale_of[a], roi_of[a], opts)
    return y.copy() if opts["mode"] == "nearest" else _to_dtype(y, x.dtype)


def _floats(value: Any) -> list[float] | None:
    if value is None or np.asarray(value).size == 0:
        return None
    return [float(v) for v in np.asarray(value).astype(np.float64).reshape(-1)]


def _check_mode(ctx: ExecutionContext, mode: str, allowed: tuple[str, ...]) -> str:
    if mode not in allowed:
        raise CpuKernel.fail(ctx, f"mode {mode!r} must be one of {', '.join(allowed)}")
    return mode


class Resize(CpuKernel):
    parity = Parity.tolerance(1e-3, 1e-5)

    def run(self, ctx: ExecutionContext, x: np.ndarray, roi: Any = None,
            scales: Any = None, sizes: Any = None) -> np.ndarray:
        node = ctx.node
        if node.opset < 11:
            # Resize-10: (X, scales), asymmetric coordinates, onnxruntime's "simple" nearest.
            scales, roi, sizes = roi, None, None
            coord, nearest_mode = "asymmetric", "simple"
        else:
            coord = node.attr("coordinate_transformation_mode", "half_pixel")
            nearest_mode = node.attr("nearest_mode", "round_prefer_floor")
            if coord not in _COORD_MODES:
                raise self.fail(ctx, f"coordinate_transformation_mode {coord!r} must be one "
                                     f"of {', '.join(_COORD_MODES)}")
            if nearest_mode not in _NEAREST_MODES:
                raise self.fail(ctx, f"nearest_mode {nearest_mode!r} must be one of "
                                     f"{', '.join(_NEAREST_MODES)}")
        mode = _check_mode(ctx, node.attr("mode", "nearest"), ("nearest", "linear", "cubic"))
        scale_list, size_list = _floats(scales), None
        if sizes is not None and np.asarray(sizes).size:
            size_list = [int(s) for s in np.asarray(sizes).reshape(-1)]
        if (scale_list is None) == (size_list is None):
            raise self.fail(ctx, "exactly one of 'scales' and 'sizes' must be given "
                                 "(non-empty)")
        axes_attr = node.attr("axes")
        axes = (list(range(x.ndim)) if axes_attr is None
                else normalize_axes(ctx, list(axes_attr), x.ndim))
        if not is_float(x.dtype) and x.dtype.kind not in "iu":
            raise self.fail(ctx, f"dtype {x.dtype} cannot be resized")
        opts = {
            "mode": mode, "coord": coord, "nearest_mode": nearest_mode,
            "cubic_a": node.attr("cubic_coeff_a", -0.75),
            "exclude_outside": bool(node.attr("exclude_outside", 0)),
            "extrapolation_value": node.attr("extrapolation_value", 0.0),
            "antialias": bool(node.attr("antialias", 0)) and mode != "nearest",
            "keep_aspect_ratio_policy": node.attr("keep_aspect_ratio_policy", "stretch"),
        }
        return resize(ctx, x, scales=scale_list, sizes=size_list, axes=axes,
                      roi=_floats(roi), opts=opts)


class Upsample(CpuKernel):
    parity = Parity.tolerance(1e-3, 1e-5)

    def run(self, ctx: ExecutionContext, x: np.ndarray, scales: Any = None) -> np.ndarray:
        node = ctx.node
        scale_list = _floats(node.attr("scales") if node.opset < 9 else scales)
        if scale_list is None:
            raise self.fail(ctx, "scales are required")
        if any(s < 1 for s in scale_list):
            raise self.fail(ctx, f"scales {scale_list} must all be >= 1")
        mode = node.attr("mode", "nearest")
        mode = _check_mode(ctx, "linear" if mode == "bilinear" else mode,
                           ("nearest", "linear"))
        opts = {"mode": mode, "coord": "asymmetric", "nearest_mode": "simple",
                "cubic_a": -0.75, "exclude_outside": False, "extrapolation_value": 0.0,
                "antialias": False, "keep_aspect_ratio_policy": "stretch"}
        return resize(ctx, x, scales=scale_list, sizes=None, axes=list(range(x.ndim)),
                      roi=None, opts=opts)


# ---------------------------------------------------------------- sampling grids

_GS_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
             "nearest": "nearest"}
_GS_PADDING = ("zeros", "border", "reflection")


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect coordinates outside ``[lo, hi]`` back inside, bouncing off both borders."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    n = np.floor(dx / span)
    r = dx - n * span
    even = n % 2 == 0
    back_below = np.where(even, lo + r, hi - r)
    back_above = np.where(even, hi - r, lo + r)
    return np.where(below, back_below, np.where(above, back_above, x))


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> list[np.ndarray]:
    """Keys cubic weights of the neighbours at offsets -1, 0, 1, 2 for fraction ``t``."""
    def near(s: np.ndarray) -> np.ndarray:
        return ((a + 2) * s - (a + 3)) * s * s + 1

    def far(s: np.ndarray) -> np.ndarray:
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


class GridSample(CpuKernel):
    parity = Parity.tolerance(1e-3, 1e-5)

    def run(self, ctx: ExecutionContext, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
        mode = _GS_MODES.get(ctx.node.attr("mode", "linear" if ctx.node.opset >= 20
                                           else "bilinear"))
        padding = ctx.node.attr("padding_mode", "zeros")
        align = bool(ctx.node.attr("align_corners", 0))
        if mode is None or padding not in _GS_PADDING:
            raise self.fail(ctx, f"mode {ctx.node.attr('mode')!r} / padding_mode {padding!r} "
                                 f"not supported (modes: linear, cubic, nearest; padding: "
                                 f"{', '.join(_GS_PADDING)})")
        dims = x.shape[2:]
        nd = len(dims)
        if x.ndim < 3 or grid.shape != (x.shape[0],) + grid.shape[1:-1] + (nd,) \
                or grid.ndim != nd + 2:
            raise self.fail(ctx, f"grid shape {grid.shape} must be (N, *out, {nd}) for "
                                 f"input shape {x.shape}")
        # Grid components are (x, y[, z]) = innermost dim first; reverse to dim order.
        g = source_value(grid)[..., ::-1]
        coords = []
        for i, d in enumerate(dims):
            c = (g[..., i] + 1) / 2 * (d - 1) if align else ((g[..., i] + 1) * d - 1) / 2
            if mode == "nearest":
                c = np.rint(c)  # round half to even, as PyTorch and the spec do
            lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
            if padding == "border" and mode != "cubic":
                # Bicubic clamps each neighbour instead (PyTorch / onnxruntime semantics).
                c = np.clip(c, 0, d - 1)
            elif padding == "reflection":
                c = _reflect(c, lo, hi)
            coords.append(c)
        data = np.moveaxis(upcast(x).astype(np.float64), 1, -1)  # (N, *dims, C)
        batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))

        def pixels(idx: list[np.ndarray]) -> np.ndarray:
            valid = np.ones(idx[0].shape, dtype=bool)
            fixed = []
            for i, (j, d) in enumerate(zip(idx, dims)):
                if padding == "reflection":
                    lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
                    j = np.trunc(_reflect(j.astype(np.float64), lo, hi)).astype(np.int64)
                valid &= (j >= 0) & (j < d)
                fixed.append(np.clip(j, 0, d - 1))
            vals = data[(batch, *fixed)]
            return np.where(valid[..., None], vals, 0.0) if padding == "zeros" else vals

        if mode == "nearest":
            out = pixels([c.astype(np.int64) for c in coords])
        else:
            base = [np.floor(c) for c in coords]
            frac = [c - b for c, b in zip(coords, base)]
            if mode == "linear":
                offsets, weights = (0, 1), [[1 - f, f] for f in frac]
            else:
                offsets, weights = (-1, 0, 1, 2), [_cubic_weights(f) for f in frac]
            out = np.zeros(grid.shape[:-1] + (x.shape[1],))
            for combo in itertools.product(range(len(offsets)), repeat=nd):
                w = np.prod([weights[i][k] for i, k in enumerate(combo)], axis=0)
                idx = [b.astype(np.int64) + offsets[k] for b, k in zip(base, combo)]
                out += w[..., None] * pixels(idx)
        return round_to(np.moveaxis(out, -1, 1), x.dtype)


class AffineGrid(CpuKernel):
    parity = Parity.tolerance(1e-5, 1e-6)

    def run(self, ctx: ExecutionContext, theta: np.ndarray, size: np.ndarray) -> np.ndarray:
        shape = int_list(ctx, size, "size")
        nd = len(shape) - 2
        if nd not in (2, 3) or theta.shape != (shape[0], nd, nd + 1):
            raise self.fail(ctx, f"size {shape} must be (N, C, H, W) or (N, C, D, H, W) with "
                                 f"theta of shape (N, {nd}, {nd + 1}), got {theta.shape}")
        align = bool(ctx.node.attr("align_corners", 0))
        spatial = shape[2:]
        axes = []
        for d in spatial:
            if align:
                axes.append(np.linspace(-1.0, 1.0, d) if d > 1 else np.full(d, -1.0))
            else:
                axes.append((2 * np.arange(d) + 1) / d - 1)
        # Homogeneous base grid (x, y[, z], 1) with x running over the innermost dim.
        mesh = np.meshgrid(*axes, indexing="ij")
        base = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1).reshape(-1, nd + 1)
        out = np.einsum("nij,pj->npi", source_value(theta), base)
        return round_to(out.reshape([shape[0], *spatial, nd]), theta.dtype)


class Col2Im(CpuKernel):
    parity = Parity.tolerance(1e-5, 1e-6)

    def run(self, ctx: ExecutionContext, x: np.ndarray, image_shape: np.ndarray,
            block_shape: np.ndarray) -> np.ndarray:
        img = int_list(ctx, image_shape, "image_shape")
        k = int_list(ctx, block_shape, "block_shape")
        nd = len(img)
        dil = ctx.node.attr("dilations", [1] * nd)
        strides = ctx.node.attr("strides", [1] * nd)
        pads = ctx.node.attr("pads", [0] * (2 * nd))
        if len(k) != nd or len(dil) != nd or len(strides) != nd or len(pads) != 2 * nd:
            raise self.fail(ctx, f"image_shape {img}, block_shape {k}, dilations {dil}, "
                                 f"strides {strides} and pads {pads} disagree on the number "
                                 f"of spatial dims")
        n_k = int(np.prod(k))
        blocks = [(img[i] + pads[i] + pads[nd + i] - dil[i] * (k[i] - 1) - 1) // strides[i] + 1
                  for i in range(nd)]
        if (x.ndim != 3 or x.shape[1] % n_k or any(b < 1 for b in blocks)
                or x.shape[2] != int(np.prod(blocks))):
            raise self.fail(ctx, f"input shape {x.shape} must be (N, C*{n_k}, "
                                 f"{int(np.prod(blocks))}) for {blocks} sliding blocks")
        n, c = x.shape[0], x.shape[1] // n_k
        cols = upcast(x).reshape([n, c, *k, *blocks])
        padded = [img[i] + pads[i] + pads[nd + i] for i in range(nd)]
        out = np.zeros([n, c, *padded], dtype=cols.dtype)
        index = []
        for i in range(nd):
            pos = (np.arange(k[i]) * dil[i])[:, None] + (np.arange(blocks[i]) * strides[i])
            shape = [1] * (2 * nd)
            shape[i], shape[nd + i] = k[i], blocks[i]
            index.append(pos.reshape(shape))
        np.add.at(out, (slice(None), slice(None), *index), cols)
        crop = tuple(slice(pads[i], pads[i] + img[i]) for i in range(nd))
        return round_to(out[(slice(None), slice(None), *crop)], x.dtype)


# ---------------------------------------------------------------- CenterCropPad

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


KERNELS: list[CpuKernel] = [
    Resize("Resize", since=10),
    Upsample("Upsample", since=7),
    GridSample("GridSample", since=16),
    AffineGrid("AffineGrid", since=20),
    Col2Im("Col2Im", since=18),
    CenterCropPad("CenterCropPad", since=18),
]
