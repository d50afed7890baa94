"""Output shapes from the input values a plan knows, for the CUDA kernels' ``infer_outputs``.

``NodeMeta.constants`` holds the host value of every input the plan knows when a shape
signature is planned: initializers, ``Constant`` outputs and values computed from shapes
(``Shape -> Gather -> Concat``). Attribute-like inputs (Slice's starts/ends/axes/steps,
Tile's repeats, Expand's and Reshape's shape, Squeeze's / Unsqueeze's axes, Range's
bounds, Pad's pads and axes, TopK's K, Resize's scales / sizes, CenterCropPad's shape,
AffineGrid's size, Col2Im's image and block shapes) then size the outputs here, with
cpu_reference's own formulas (its movement.py, shape.py, indexing.py and resize.py).
Every function answers ``None`` where the value is not known or the reference would
raise, so such a node stays unsized and runs on the host, which raises there. At run
time the device kernels still take sizes from their pre-bound outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import NodeMeta, TensorSpec
from onnx_ep.providers.cuda.kernels.base import normalize_axis, prod


def known_ints(meta: Any, i: int) -> list[int] | None:
    """Input ``i``'s value as Python ints when the plan knows it (``meta.constant(i)``) and
    it is a 0-D or 1-D integer tensor, else ``None``."""
    value = known_array(meta, i)
    return None if value is None else [int(v) for v in value]


def known_array(meta: Any, i: int, kind: str = "iu") -> np.ndarray | None:
    """Input ``i``'s value flattened, when the plan knows it and it is 0-D or 1-D of a
    dtype of ``kind`` (numpy kinds: ``"iu"`` integers, ``"f"`` floats), else ``None``."""
    value = meta.constant(i)
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.ndim > 1 or (arr.size and arr.dtype.kind not in kind):
        return None
    return arr.reshape(-1)


def static_dims(spec: TensorSpec | None) -> tuple[int, ...] | None:
    """``spec``'s shape when every dim is a known int, else ``None``."""
    if spec is None or not all(isinstance(d, int) for d in spec.shape):
        return None
    return tuple(int(d) for d in spec.shape)


# ---------------------------------------------------------------- movement

def expand_shape(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...] | None:
    """numpy's broadcast of ``shape`` with Expand's ``target``, or ``None``."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(tuple(shape), tuple(target)))
    except ValueError:
        return None


def tile_shape(shape: Sequence[int], repeats: Sequence[int]) -> tuple[int, ...] | None:
    """Each dim times its repeat (one repeat >= 0 per dim), or ``None``."""
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        return None
    return tuple(int(d) * int(r) for d, r in zip(shape, repeats))


def slice_shape(shape: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                axes: Sequence[int] | None, steps: Sequence[int] | None
                ) -> tuple[int, ...] | None:
    """Opset >= 10 Slice's output shape (ONNX clamping, negative steps), or ``None`` for
    unequal lengths, a bad or repeated axis or a zero step."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        return None
    norm = [normalize_axis(int(a), rank) for a in axes]
    if any(a is None for a in norm) or len(set(norm)) != len(norm):
        return None
    out = [int(d) for d in shape]
    for s, e, a, st in zip(starts, ends, norm, steps):
        dim = out[a]
        if st == 0:
            return None
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            out[a] = len(range(s, e, st))
        elif dim == 0:
            out[a] = 0
        else:
            # the reference's end -1 is "before element 0" (a Python slice's None)
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
            out[a] = len(range(dim)[slice(s, None if e < 0 else e, st)])
    return tuple(out)


def slice_known_shape(meta: NodeMeta) -> tuple[int, ...] | None:
    """Opset >= 10 Slice from starts/ends (and axes/steps) the plan knows; ``None`` while
    one of the given inputs is a device value."""
    values: list[list[int] | None] = []
    for i in range(1, 5):
        value = known_ints(meta, i)
        if len(meta.inputs) > i and meta.inputs[i] is not None and value is None:
            return None
        values.append(value)
    starts, ends, axes, steps = values
    x = static_dims(meta.inputs[0])
    if x is None or starts is None or ends is None:
        return None
    return slice_shape(x, starts, ends, axes, steps)


def reshape_shape(shape: Sequence[Any], target: Sequence[int],
                  allowzero: bool) -> tuple[int, ...] | None:
    """Reshape-5+ (0 copies the input dim unless ``allowzero``, one -1 takes the rest), or
    ``None`` where the reference raises or the input shape is not static."""
    if not all(isinstance(d, int) for d in shape):
        return None
    out = [int(d) for d in target]
    if allowzero and 0 in out and -1 in out:
        return None
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                return None
            out[i] = int(shape[i])
        elif d < -1:
            return None
    if out.count(-1) > 1:
        return None
    size = prod(shape)
    if -1 in out:
        known = prod([d for d in out if d != -1])
        if known == 0 or size % known:
            return None
        out[out.index(-1)] = size // known
    return tuple(out) if prod(out) == size else None


def view_shape(op: str, shape: Sequence[Any], value: Sequence[int],
               allowzero: bool = False) -> tuple[Any, ...] | None:
    """Reshape-5+ from its shape value, opset >= 13 Squeeze / Unsqueeze from their axes
    value, or ``None`` where the reference raises (or a dim it tests is symbolic)."""
    r = len(shape)
    if op == "Reshape":
        return reshape_shape(shape, value, allowzero)
    if op == "Squeeze":
        if not value:                           # empty axes: every unit dim, as absent axes
            if not all(isinstance(d, int) for d in shape):
                return None
            return tuple(d for d in shape if d != 1)
        drop = [normalize_axis(int(a), r) for a in value]
        if any(a is None for a in drop) or len(set(drop)) != len(drop) \
                or any(shape[a] != 1 for a in drop):   # a symbolic dim is not known to be 1
            return None
        return tuple(d for i, d in enumerate(shape) if i not in drop)
    ro = r + len(value)
    add = [normalize_axis(int(a), ro) for a in value]
    if any(a is None for a in add) or len(set(add)) != len(add):
        return None
    dims = iter(shape)
    return tuple(1 if i in add else next(dims) for i in range(ro))


# ---------------------------------------------------------------- shape, indexing

def range_count(start: Any, limit: Any, delta: Any) -> int | None:
    """Range's element count (``ceil((limit - start) / delta)`` in float64 for floats,
    exact integer division for integers), or ``None`` for values the reference rejects
    (not scalars, delta 0, a count that is not finite)."""
    vals = [np.asarray(v) for v in (start, limit, delta)]
    if any(v.size != 1 for v in vals):
        return None
    s, lim, d = (v.reshape(()) for v in vals)
    if s.dtype.kind in "iu":
        if int(d) == 0:
            return None
        return max(-(-(int(lim) - int(s)) // int(d)), 0)
    s64, lim64, d64 = (float(v.astype(np.float64)) for v in (s, lim, d))
    if d64 == 0:
        return None
    q = np.ceil((lim64 - s64) / d64)
    return max(int(q), 0) if np.isfinite(q) else None


def pad_const_lists(meta: Any, rank: int) -> tuple[list[int], list[int]] | None:
    """Opset >= 11: (begins, ends) per axis from the pads (and axes) values the plan knows
    (``meta.constant``), or ``None``."""
    pads = meta.constant(1)
    axes_spec = meta.inputs[3] if len(meta.inputs) > 3 else None
    axes = meta.constant(3) if axes_spec is not None else None
    if pads is None or (axes_spec is not None and axes is None):
        return None
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    axes_l = ([int(a) + rank if int(a) < 0 else int(a) for a in np.asarray(axes).reshape(-1)]
              if axes is not None else list(range(rank)))
    k = len(axes_l)
    if len(pads) != 2 * k or any(not 0 <= a < rank for a in axes_l):
        return None
    begins, ends = [0] * rank, [0] * rank
    for j, a in enumerate(axes_l):
        begins[a], ends[a] = pads[j], pads[k + j]
    return begins, ends


def top_k_value(meta: Any) -> int | None:
    """TopK's K: the attribute before opset 10, else input 1's value when the plan knows it;
    ``None`` when it is unknown or not one integer."""
    if meta.opset < 10:
        k = meta.attr("k")
        return None if k is None else int(k)
    value = known_array(meta, 1)
    return None if value is None or value.size != 1 else int(value[0])


# ---------------------------------------------------------------- resize family

def resize_shape(x_shape: Sequence[int], axes: Sequence[int], opts: dict[str, Any],
                 scales: Sequence[float] | None, sizes: Sequence[int] | None
                 ) -> tuple[int, ...] | None:
    """Y as cpu_reference's resize sizes it from ``scales`` (``floor(scale * dim)``) or
    ``sizes`` (with keep_aspect_ratio_policy), or ``None`` where it raises."""
    out = [int(d) for d in x_shape]
    if scales is not None:
        if len(scales) != len(axes) or any(not s > 0 for s in scales):
            return None
        for a, s in zip(axes, scales):
            size = float(np.floor(float(s) * x_shape[a]))
            if not np.isfinite(size):
                return None
            out[a] = int(size)
        return tuple(out)
    if sizes is None or len(sizes) != len(axes) or any(s < 0 for s in sizes) \
            or any(x_shape[a] == 0 for a in axes):
        return None
    policy = opts["keep_aspect_ratio_policy"]
    if policy == "stretch":
        for a, s in zip(axes, sizes):
            out[a] = int(s)
        return tuple(out)
    if policy not in ("not_larger", "not_smaller"):
        return None
    pick = min if policy == "not_larger" else max
    common = pick(s / x_shape[a] for a, s in zip(axes, sizes))
    for a in axes:
        out[a] = int(common * x_shape[a] + 0.5)
    return tuple(out)


def _given(meta: NodeMeta, i: int, kind: str) -> np.ndarray | None:
    """Input ``i``'s known value; an empty array when it is absent or statically empty."""
    spec = meta.inputs[i] if len(meta.inputs) > i else None
    if meta.constant(i) is None and (spec is None or (spec.is_static
                                                       and prod(spec.shape) == 0)):
        return np.zeros(0)
    return known_array(meta, i, kind)


def resize_known_shape(meta: NodeMeta, x_shape: tuple[int, ...], axes: list[int] | None,
                       opts: dict[str, Any]) -> tuple[int, ...] | None:
    """Resize / Upsample's Y from the scales or sizes the plan knows (``axes`` and
    ``opts`` as resize.py reads the attributes)."""
    old = meta.op_type == "Upsample" or meta.opset < 11
    scales = _given(meta, 1 if old else 2, "f")
    sizes = np.zeros(0) if old else _given(meta, 3, "iu")
    if axes is None or scales is None or sizes is None:
        return None                             # scales / sizes are device values
    if meta.op_type == "Upsample" and any(float(v) < 1 for v in scales):
        return None                             # the reference rejects downsampling
    if scales.size and not sizes.size:
        return resize_shape(x_shape, axes, opts, [float(v) for v in scales], None)
    if sizes.size and not scales.size:
        return resize_shape(x_shape, axes, opts, None, [int(v) for v in sizes])
    return None                                 # the reference wants exactly one of them


def crop_pad_shape(meta: NodeMeta, x_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """CenterCropPad's Y from the shape the plan knows."""
    target = known_ints(meta, 1)
    axes = meta.attr("axes")
    rank = len(x_shape)
    norm = list(range(rank)) if axes is None else [normalize_axis(int(a), rank) for a in axes]
    if target is None or any(a is None for a in norm) or len(set(norm)) != len(norm) \
            or len(target) != len(norm) or any(t < 0 for t in target):
        return None
    out = list(x_shape)
    for a, t in zip(norm, target):
        out[a] = t
    return tuple(out)


def affine_grid_shape(meta: NodeMeta, theta: tuple[int, ...]) -> tuple[int, ...] | None:
    """AffineGrid's Y, ``(N, *spatial, nd)``, from the size the plan knows."""
    size = known_ints(meta, 1)
    if size is None:
        return None
    nd = len(size) - 2
    if nd not in (2, 3) or tuple(theta) != (size[0], nd, nd + 1) or any(d < 0 for d in size):
        return None
    return (size[0], *size[2:], nd)


def col2im_shape(meta: NodeMeta, x_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Col2Im's Y, ``(N, C, *image_shape)``, from the image and block shapes the plan
    knows, where the input holds exactly the sliding blocks they make."""
    img, k = known_ints(meta, 1), known_ints(meta, 2)
    if img is None or k is None:
        return None
    nd = len(img)
    dil = list(meta.attr("dilations", None) or [1] * nd)
    strides = list(meta.attr("strides", None) or [1] * nd)
    pads = list(meta.attr("pads", None) or [0] * (2 * nd))
    if len(x_shape) != 3 or len(k) != nd or len(dil) != nd or len(strides) != nd \
            or len(pads) != 2 * nd or any(int(s) < 1 for s in strides) or prod(k) < 1:
        return None
    blocks = [(img[i] + pads[i] + pads[nd + i] - dil[i] * (k[i] - 1) - 1) // strides[i] + 1
              for i in range(nd)]
    if x_shape[1] % prod(k) or any(b < 1 for b in blocks) or x_shape[2] != prod(blocks):
        return None
    return (x_shape[0], x_shape[1] // prod(k), *img)
