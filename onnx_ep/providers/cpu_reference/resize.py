"""Resize (opset 10+) and the deprecated Upsample (opset 7-9).

Interpolation is separable: each resized axis is done in turn as a gather of
``n`` neighbours per output position times a coefficient table, so no Python
loop runs over elements. Coordinates, coefficients and the weighted sums are
computed in float64 and rounded once to the input dtype (integers round half
to even, then saturate), as the ONNX reference does.

Parity: nearest is EXACT in effect (a pure gather), but one promise covers the
kernel: a float32 implementation of the same formulas stays within
``rtol=1e-3, atol=1e-5`` of this one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.lowfloat import is_float, round_to, upcast
from onnx_ep.providers.cpu_reference.shape import normalize_axes

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


KERNELS: list[CpuKernel] = [
    Resize("Resize", since=10),
    Upsample("Upsample", since=7),
]
