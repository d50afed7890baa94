"""Pooling: MaxPool (with Indices), AveragePool, LpPool, their Global forms, MaxUnpool.

Numerics: max pooling selects values and is exact. Average pooling sums in the
input type (float16/bfloat16 in float32) and divides once, so it is promised
to a tolerance; LpPool (``|x|^p``, ``^(1/p)``) is computed in float64 and
rounded once. Windows come from :mod:`onnx_ep.providers.shared.windows` (pads,
auto_pad, ceil_mode, dilations); each op loops over the kernel taps (prod(kernel)
iterations) and folds the tap's strided view of the padded input into the
(N, C, *out) result, so no window is gathered element by element and no
(out x kernel) array is built.
"""

from __future__ import annotations

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast
from onnx_ep.providers.shared.windows import (
    WindowGeometry,
    pad_input,
    tap_positions,
    tap_slices,
    window_geometry,
)

#: window sums reorder additions; narrow floats accumulate in float32.
AVERAGE_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)


def _geometry(kernel: CpuKernel, ctx: ExecutionContext, x: np.ndarray) -> WindowGeometry:
    if x.ndim < 3:
        raise kernel.fail(ctx, f"X must have rank >= 3 (N, C, D1, ...), got shape {x.shape}")
    shape = ctx.node.attr("kernel_shape", None)
    if shape is None:
        raise kernel.fail(ctx, "attribute 'kernel_shape' is required")
    return window_geometry(ctx.node, x.shape[2:], shape,
                           ceil_mode=bool(ctx.node.attr("ceil_mode", 0)))


def _window_sums(padded: np.ndarray, g: WindowGeometry) -> np.ndarray:
    """Sum of every window, adding the taps in C order of the kernel."""
    taps = tap_slices(g)
    _, first = next(taps)
    total = padded[first].copy()
    for _, idx in taps:
        total += padded[idx]
    return total


def _lowest(dtype: np.dtype) -> float | int:
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


class MaxPool(CpuKernel):
    """Max over each window; optional Indices are flat offsets into X (``storage_order``
    1 lays the spatial axes out column-major)."""

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
        g = _geometry(self, ctx, x)
        work = upcast(x) if x.dtype.kind == "V" else x
        padded = pad_input(work, g, _lowest(work.dtype))
        taps = tap_slices(g)
        _, first = next(taps)
        best = padded[first].copy()
        want_indices = len(ctx.node.output_names) > 1 and bool(ctx.node.output_names[1])
        if not want_indices:
            for _, idx in taps:
                np.maximum(best, padded[idx], out=best)  # NaN propagates, as max() does
            return round_to(best, x.dtype)
        # flat tap index of the first maximum (the first NaN, if any, as np.argmax picks);
        # blended arithmetically: much faster than masked stores
        arg = np.zeros(best.shape, dtype=np.min_scalar_type(int(np.prod(g.kernel)) - 1))
        better = np.empty(best.shape, dtype=bool)
        nans = best.dtype.kind == "f" and bool(np.isnan(work).any())
        for k, idx in taps:
            v = padded[idx]
            np.greater(v, best, out=better)
            if nans:
                better |= np.isnan(v) & ~np.isnan(best)
            np.maximum(best, v, out=best)  # NaN propagates: the same value as taking v
            arg *= ~better
            arg += better.astype(arg.dtype) * arg.dtype.type(k)
        return round_to(best, x.dtype), self._indices(ctx, x, g, arg)

    @staticmethod
    def _indices(ctx: ExecutionContext, x: np.ndarray, g: WindowGeometry,
                 arg: np.ndarray) -> np.ndarray:
        n = len(g.kernel)
        taps = np.unravel_index(arg, g.kernel)
        coords = []
        for ax in range(n):
            # broadcast this axis' output position against the tap offset
            shape = [1] * arg.ndim
            shape[2 + ax] = g.out[ax]
            o = np.arange(g.out[ax]).reshape(shape) * g.strides[ax]
            coords.append(o + taps[ax] * g.dilations[ax] - g.pads_begin[ax])
        order = "F" if ctx.node.attr("storage_order", 0) else "C"
        spatial = np.ravel_multi_index(tuple(coords), x.shape[2:], mode="clip", order=order)
        plane = (np.arange(x.shape[0])[:, None] * x.shape[1]
                 + np.arange(x.shape[1])[None, :]).reshape(x.shape[:2] + (1,) * n)
        return (plane * int(np.prod(x.shape[2:])) + spatial).astype(np.int64)


class AveragePool(CpuKernel):
    """Mean over each window; ``count_include_pad`` counts the op's pads (never the
    extra ``ceil_mode`` overhang) in the divisor."""

    parity = AVERAGE_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        g = _geometry(self, ctx, x)
        work = upcast(x)
        total = _window_sums(pad_input(work, g), g)
        include_pad = bool(ctx.node.attr("count_include_pad", 0))
        # window counts are separable: their product over axes is the divisor
        count = np.ones((), dtype=np.int64)
        for ax, size in enumerate(x.shape[2:]):
            pos = tap_positions(g, ax)
            if include_pad:
                inside = (pos >= -g.pads_begin[ax]) & (pos < size + g.pads_end[ax])
            else:
                inside = (pos >= 0) & (pos < size)
            count = np.multiply.outer(count, inside.sum(axis=1))
        return round_to(total / count.astype(work.dtype), x.dtype)


class LpPool(CpuKernel):
    """(sum |x|^p)^(1/p) over each window; padding contributes zero."""

    parity = AVERAGE_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        g = _geometry(self, ctx, x)
        p = float(ctx.node.attr("p", 2))
        powed = np.abs(source_value(x)) ** p
        total = _window_sums(pad_input(powed, g), g)
        return round_to(total ** (1.0 / p), x.dtype)


class GlobalPool(CpuKernel):
    """GlobalAveragePool / GlobalMaxPool / GlobalLpPool: one window over all spatial axes."""

    def __init__(self, op_type: str, kind: str) -> None:
        super().__init__(op_type, since=1,
                         parity=Parity.EXACT if kind == "max" else AVERAGE_PARITY)
        self.kind = kind

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        if x.ndim < 3:
            raise self.fail(ctx, f"X must have rank >= 3 (N, C, D1, ...), got shape {x.shape}")
        axes = tuple(range(2, x.ndim))
        if self.kind == "max":
            return round_to(np.max(upcast(x), axis=axes, keepdims=True), x.dtype)
        if self.kind == "avg":
            return round_to(np.mean(upcast(x), axis=axes, keepdims=True), x.dtype)
        p = float(ctx.node.attr("p", 2))
        s = np.sum(np.abs(source_value(x)) ** p, axis=axes, keepdims=True)
        return round_to(s ** (1.0 / p), x.dtype)


class MaxUnpool(CpuKernel):
    """Scatter X to the flat positions I of the inferred unpooled shape; an explicit
    ``output_shape`` zero-extends that result at the end of each spatial axis."""

    def run(self, ctx: ExecutionContext, x: np.ndarray, indices: np.ndarray,
            output_shape: np.ndarray | None = None) -> np.ndarray:
        if x.ndim < 3:
            raise self.fail(ctx, f"X must have rank >= 3 (N, C, D1, ...), got shape {x.shape}")
        if indices.shape != x.shape:
            raise self.fail(ctx, f"I has shape {indices.shape}, expected X's {x.shape}")
        kernel = ctx.node.attr("kernel_shape", None)
        n = x.ndim - 2
        if kernel is None or len(kernel) != n:
            raise self.fail(ctx, f"attribute 'kernel_shape' must have {n} values, got {kernel}")
        strides = ctx.node.attr("strides", None) or [1] * n
        pads = ctx.node.attr("pads", None) or [0] * (2 * n)
        inferred = x.shape[:2] + tuple(
            (i - 1) * s - (pads[a] + pads[n + a]) + k
            for a, (i, s, k) in enumerate(zip(x.shape[2:], strides, kernel)))
        size = int(np.prod(inferred))
        flat_i = indices.reshape(-1).astype(np.int64)
        if flat_i.size and (flat_i.min() < 0 or flat_i.max() >= size):
            raise self.fail(ctx, f"indices must lie in [0, {size}) for the unpooled shape "
                                 f"{inferred}, got range [{flat_i.min()}, {flat_i.max()}]")
        y = np.zeros(size, dtype=x.dtype)
        y[flat_i] = x.reshape(-1)
        y = y.reshape(inferred)
        if output_shape is None:
            return y
        target = tuple(int(d) for d in np.asarray(output_shape).reshape(-1))
        if len(target) != x.ndim or any(t < i for t, i in zip(target, inferred)):
            raise self.fail(ctx, f"output_shape {target} must have rank {x.ndim} and be at "
                                 f"least the inferred shape {inferred}")
        out = np.zeros(target, dtype=x.dtype)
        out[tuple(slice(0, d) for d in inferred)] = y
        return out


KERNELS: list[CpuKernel] = [
    MaxPool("MaxPool", since=1),
    AveragePool("AveragePool", since=1),
    LpPool("LpPool", since=1),
    GlobalPool("GlobalMaxPool", "max"),
    GlobalPool("GlobalAveragePool", "avg"),
    GlobalPool("GlobalLpPool", "lp"),
    MaxUnpool("MaxUnpool", since=9),
]
