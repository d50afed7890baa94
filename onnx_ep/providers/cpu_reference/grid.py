"""Sampling-grid ops: GridSample, AffineGrid, Col2Im.

GridSample and AffineGrid compute coordinates, weights and weighted sums in
float64 and round once to the output dtype (the ONNX reference computes some
coordinates in float32, hence the tolerance). Col2Im sums overlapping patches
with ``numpy.add.at`` in the input dtype (float16/bfloat16 in float32).
"""

from __future__ import annotations

import itertools

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast
from onnx_ep.providers.cpu_reference.shape import int_list

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


KERNELS: list[CpuKernel] = [
    GridSample("GridSample", since=16),
    AffineGrid("AffineGrid", since=20),
    Col2Im("Col2Im", since=18),
]
