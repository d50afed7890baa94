"""Data movement on CUDA: Transpose, Expand, Tile, Concat, Split, Slice, Gather, and the
views Reshape / Squeeze / Unsqueeze / Flatten / Identity.

Parity: EXACT (bytes are copied, never computed). Kernels (``movement.cu``) are
instantiated by element size; the host side coalesces dims that stay contiguous and
widens the element to 2-16 bytes where the innermost run and the alignment allow, so a
float16 Concat moves 16-byte words.

Concat copies up to :data:`CONCAT_GROUP` non-empty inputs in one launch (a decode step's
KV-cache append and rotary halves are one launch each, not one per input); the plan is
:func:`concat_plan`.

Shapes that depend on device values (Reshape's shape, Slice's starts/ends, Expand's
shape, Tile's repeats, Split's sizes, Squeeze's / Unsqueeze's axes) come from the
pre-bound outputs: the host never reads those inputs at run time. ``infer_outputs``
sizes the outputs from those values where the plan knows them (initializers, values
computed from shapes: ``meta.constant(i)``; the formulas are in :mod:`.known_values`).
Slice reads starts/axes/steps in the kernel.

Gather: indices outside ``[-dim, dim)`` are not checked on cuda (the reference raises;
a kernel cannot without a host sync, like onnxruntime's CUDA provider): the output for
such an index is unspecified (currently zeros; the kernel never reads out of bounds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Support, TensorSpec
from onnx_ep.providers.cuda import copies
from onnx_ep.providers.cuda.kernels import known_values as kv
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    I32,
    I64,
    MAX_DIMS,
    PTR,
    CudaKernel,
    Geo,
    contiguous_strides,
    grid_1d,
    normalize_axis,
    prod,
    replayed,
    struct_arg,
)
from onnx_ep.providers.cuda.kernels.movement_plan import (  # noqa: F401 (the geometry's home)
    CONCAT_GROUP,
    WIDTHS,
    CatInputs,
    ConcatGroup,
    block_copy_width,
    broadcast_strides,
    coalesce,
    concat_plan,
    tile_grid,
    transpose_plan,
    widen,
)


def _movable(spec: TensorSpec | None) -> Support:
    if spec is None:
        return Support.no("input is not a tensor (sequence, optional or missing)")
    if spec.dtype.kind in "OUS" or spec.dtype.itemsize not in (1, 2, 4, 8, 16):
        return Support.no(f"dtype {spec.dtype} cannot live on cuda")
    return Support.YES


# ---------------------------------------------------------------- launches

def _sym(op: str, width: int) -> str:
    return f"{op}_x{width}"


def _strided(k: CudaKernel, ctx: ExecutionContext, x: Any, x_ptr: int, y: Any, width: int,
             sizes: Sequence[int], strides: Sequence[int]) -> None:
    n = prod(sizes)
    if not sizes:
        sizes, strides = [1], [0]
    g = Geo.of(sizes, strides)
    k.launch(k.function(_sym("strided_copy", width), x), grid_1d(n), (BLOCK, 1, 1),
             [(x_ptr, PTR), (y.ptr, PTR), struct_arg(g), (n, I64)], ctx.stream)


def _block_copy(k: CudaKernel, ctx: ExecutionContext, t: Any, src: int, src_pitch: int,
                dst: int, dst_pitch: int, rows: int, cols: int) -> None:
    """rows x cols elements of ``t.dtype`` from ``src`` to ``dst`` (pitches in elements)."""
    es = t.dtype.itemsize
    if rows == 0 or cols == 0:
        return
    if rows == 1 or (src_pitch == cols and dst_pitch == cols):
        copies.copy_dtod(dst, src, rows * cols * es, ctx.stream)
        return
    w = block_copy_width(es, cols, (src_pitch, dst_pitch), (src, dst))
    f = w // es
    k.launch(k.function(_sym("copy2d", w), t), grid_1d(rows * cols // f), (BLOCK, 1, 1),
             [(src, PTR), (src_pitch // f, I64), (dst, PTR), (dst_pitch // f, I64),
              (rows, I64), (cols // f, I64)], ctx.stream)


class _Movement(CudaKernel):
    source = "movement"

    def supports(self, meta: NodeMeta) -> Support:
        s = _movable(meta.inputs[0] if meta.inputs else None)
        if not s:
            return s
        x = meta.inputs[0]
        if x is not None and len(x.shape) > MAX_DIMS:
            return Support.no(f"rank {len(x.shape)} > {MAX_DIMS}")
        return Support.YES


def moves_only_unit_axes(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether transposing ``shape`` by ``perm`` keeps every element in place: the axes
    longer than 1 keep their order (``[B, 1, H, D] -> [B, H, 1, D]``), so the output is the
    input's bytes under another shape."""
    big = [p for p in perm if shape[p] != 1]
    return big == sorted(big)


class Transpose(_Movement):
    """Transpose; at a signature where it only moves axes of size 1 (a decode step's
    ``[B, 1, H, D] -> [B, H, 1, D]``) it is a view of its input (:meth:`aliases_at`)."""

    def bind(self, meta: NodeMeta) -> Transpose:
        bound = super().bind(meta)
        bound._node_perm = meta.attr("perm")
        # a view of a weight would have to pin the weight's page under weight streaming
        bound._of_weight = 0 in meta.constants
        return bound

    def aliases_at(self, inputs: Sequence[TensorSpec | None]) -> dict[int, int] | None:
        x = inputs[0] if inputs else None
        if x is None or not x.is_static or getattr(self, "_of_weight", True):
            return None
        perm = getattr(self, "_node_perm", None)
        rank = len(x.shape)
        perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
        return {0: 0} if moves_only_unit_axes(x.shape, perm) else None

    def _perm(self, meta: NodeMeta, rank: int) -> list[int]:
        perm = meta.attr("perm")
        return list(range(rank))[::-1] if perm is None else [int(p) for p in perm]

    def supports(self, meta: NodeMeta) -> Support:
        s = super().supports(meta)
        if not s:
            return s
        rank = len(meta.inputs[0].shape)
        if sorted(self._perm(meta, rank)) != list(range(rank)):
            return Support.no(f"perm {meta.attr('perm')} is not a permutation of 0..{rank - 1}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        perm = self._perm(meta, len(x.shape))
        return [TensorSpec(x.dtype, tuple(x.shape[p] for p in perm))]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        if isinstance(outputs[0], TensorSpec):     # a view at this signature (aliases_at)
            spec, x = outputs[0], inputs[0]
            if prod(spec.shape) != x.size:
                raise self.fail(ctx, f"planned view {spec.shape} has {prod(spec.shape)} "
                                     f"elements, input {x.shape} has {x.size}")
            outputs[0] = x.view(spec.dtype, spec.shape)
            return
        self._copy(ctx, inputs, outputs, workspace)

    @replayed
    def _copy(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        perm = self._perm(ctx.node, x.ndim)
        route, w, geo = transpose_plan(x.shape, perm, x.dtype.itemsize, (x.ptr, y.ptr))
        if route == "copy":
            copies.copy_dtod(y.ptr, x.ptr, y.nbytes, ctx.stream)
        elif route == "tile":
            b, r, c = geo
            self.launch(self.function(_sym("transpose_tile", w), x), tile_grid(b, r, c), (32, 8, 1),
                        [(x.ptr, PTR), (y.ptr, PTR), (r, I64), (c, I64), (b, I64)], ctx.stream)
        else:
            nd = len(geo) // 2
            _strided(self, ctx, x, x.ptr, y, w, geo[:nd], geo[nd:])


def _sized_by_value(meta: NodeMeta, shape_of: Callable[..., Any]) -> list[TensorSpec | None]:
    """Output 0 as ``shape_of(input 0's dims, the known ints of input 1)``: unsized while
    input 1 is a device value (or ``shape_of`` rejects it, as the reference would)."""
    x, value = kv.static_dims(meta.inputs[0]), kv.known_ints(meta, 1)
    if x is None or value is None:
        return [None]
    shape = shape_of(x, value)
    return [None if shape is None else TensorSpec(meta.inputs[0].dtype, shape)]


class Expand(_Movement):
    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        return _sized_by_value(meta, kv.expand_shape)

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        try:
            st = broadcast_strides(x.shape, y.shape)
        except ValueError as e:
            raise self.fail(ctx, str(e)) from None
        sizes, strides = coalesce(y.shape, st)
        if len(sizes) > MAX_DIMS:
            raise self.fail(ctx, f"{len(sizes)} dims after coalescing (max {MAX_DIMS})")
        w, sizes, strides = widen(x.dtype.itemsize, sizes, strides, (x.ptr, y.ptr))
        _strided(self, ctx, x, x.ptr, y, w, sizes, strides)


class Tile(_Movement):
    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        return _sized_by_value(meta, kv.tile_shape)

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        if x.ndim == 0:
            copies.copy_dtod(y.ptr, x.ptr, y.nbytes, ctx.stream)
            return
        if x.ndim != y.ndim or any(o % i for i, o in zip(x.shape, y.shape) if i):
            raise self.fail(ctx, f"output shape {y.shape} is not a tiling of {x.shape}")
        ins, outs = list(x.shape), list(y.shape)
        # merge neighbours that are both untiled (they stay one contiguous run)
        mi: list[int] = []
        mo: list[int] = []
        for i, o in zip(ins, outs):
            if mi and i == o and mi[-1] == mo[-1]:
                mi[-1] *= i
                mo[-1] *= o
            else:
                mi.append(i)
                mo.append(o)
        es, w = x.dtype.itemsize, x.dtype.itemsize
        if mi[-1] == mo[-1]:
            w = block_copy_width(es, mi[-1], (), (x.ptr, y.ptr))
            mi[-1] //= w // es
            mo[-1] //= w // es
        self.launch(self.function(_sym("tile", w), x), grid_1d(prod(mo)), (BLOCK, 1, 1),
                    [(x.ptr, PTR), (y.ptr, PTR), struct_arg(Geo.of(mo, [0] * len(mo))),
                     struct_arg(Geo.of(mi, contiguous_strides(mi))), (prod(mo), I64)], ctx.stream)


def _concat_axis(meta: NodeMeta | Any, rank: int) -> int | None:
    axis = meta.attr("axis")
    if axis is None:
        axis = 1 if meta.opset < 4 else None
    return None if axis is None else normalize_axis(int(axis), rank)


class Concat(_Movement):
    def supports(self, meta: NodeMeta) -> Support:
        for spec in meta.inputs:
            s = _movable(spec)
            if not s:
                return s
        rank = len(meta.inputs[0].shape)
        if _concat_axis(meta, rank) is None:
            return Support.no(f"axis {meta.attr('axis')} is missing or out of range for "
                              f"rank {rank}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        a = _concat_axis(meta, len(x.shape))
        dims = [s.shape[a] for s in meta.inputs if s is not None]
        if a is None or not all(isinstance(d, int) for d in dims):
            return [None]
        shape = list(x.shape)
        shape[a] = sum(dims)
        return [TensorSpec(x.dtype, tuple(shape))]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        y = outputs[0]
        a = _concat_axis(ctx.node, y.ndim)
        outer, inner = prod(y.shape[:a]), prod(y.shape[a + 1:])
        xs = [x for x in inputs if x is not None]
        dims = [x.shape[a] for x in xs]
        if sum(dims) != y.shape[a]:
            raise self.fail(ctx, f"inputs add up to {sum(dims)} along axis {a}, output has "
                                 f"{y.shape[a]}")
        es = y.dtype.itemsize
        for g in concat_plan(es, outer, [d * inner for d in dims], [x.ptr for x in xs], y.ptr):
            if len(g.srcs) == 1:
                # one input: a memcpy when it is one run, else the 2-D copy
                f = g.width // es
                _block_copy(self, ctx, y, g.srcs[0], g.cols * f, g.dst, g.pitch * f, g.rows,
                            g.cols * f)
                continue
            self.launch(self.function(_sym("concat", g.width), y), grid_1d(g.rows * g.cols),
                        (BLOCK, 1, 1), [struct_arg(g.table()), (g.dst, PTR), (g.pitch, I64),
                                        (g.rows, I64)], ctx.stream)


class Split(_Movement):
    def _axis(self, meta: Any, rank: int) -> int | None:
        return normalize_axis(int(meta.attr("axis", 0)), rank)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        n_out = len(meta.output_names)
        a = self._axis(meta, len(x.shape))
        unknown: list[TensorSpec | None] = [None] * n_out
        if a is None or not isinstance(x.shape[a], int):
            return unknown
        dim = x.shape[a]
        sizes: list[int] | None = None
        split = kv.known_ints(meta, 1) if meta.opset >= 13 else None
        if meta.opset < 13 and meta.attr("split") is not None:
            sizes = [int(s) for s in meta.attr("split")]
        elif split:                             # sizes the plan knows (empty: as if absent)
            if any(s < 0 for s in split) or sum(split) != dim:
                return unknown                  # the reference rejects them
            sizes = split
        elif len(meta.inputs) > 1 and meta.inputs[1] is not None and split is None:
            return unknown                      # sizes are on the device
        elif meta.opset >= 18 and meta.attr("num_outputs") is not None:
            chunk = -(-dim // n_out)
            sizes = [min(chunk, max(dim - chunk * i, 0)) for i in range(n_out)]
        elif dim % n_out == 0:
            sizes = [dim // n_out] * n_out
        if sizes is None or len(sizes) != n_out:
            return unknown
        out = []
        for s in sizes:
            shape = list(x.shape)
            shape[a] = s
            out.append(TensorSpec(x.dtype, tuple(shape)))
        return out

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x = inputs[0]
        a = self._axis(ctx.node, x.ndim)
        outer, inner = prod(x.shape[:a]), prod(x.shape[a + 1:])
        es = x.dtype.itemsize
        off = 0
        for y in outputs:
            if y is None:
                raise self.fail(ctx, "every Split output must be bound on cuda")
            d = y.shape[a]
            _block_copy(self, ctx, x, x.ptr + off * inner * es, x.shape[a] * inner, y.ptr,
                        d * inner, outer, d * inner)
            off += d
        if off != x.shape[a]:
            raise self.fail(ctx, f"outputs add up to {off} along axis {a}, input has "
                                 f"{x.shape[a]}")


def slice_attr_plan(shape: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                    axes: Sequence[int] | None) -> tuple[int, list[int]] | None:
    """Opset < 10 Slice from attributes: (element offset of the first element, output
    shape), or ``None`` for invalid axes. Steps are 1."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else list(axes)
    if not len(starts) == len(ends) == len(axes):
        return None
    begin, out = [0] * rank, list(shape)
    for s, e, a in zip(starts, ends, axes):
        na = normalize_axis(int(a), rank)
        if na is None:
            return None
        dim = shape[na]
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        begin[na], out[na] = s, max(e - s, 0)
    st = contiguous_strides(shape)
    return sum(b * s for b, s in zip(begin, st)), out


class Slice(_Movement):
    def supports(self, meta: NodeMeta) -> Support:
        s = super().supports(meta)
        if not s:
            return s
        if meta.opset >= 10:
            for i in range(1, len(meta.inputs)):
                spec = meta.inputs[i]
                if spec is not None and spec.dtype not in (np.int32, np.int64):
                    return Support.no(f"input {i} has dtype {spec.dtype}, expected int32/int64")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        if not all(isinstance(d, int) for d in x.shape):
            return [None]
        if meta.opset >= 10:
            shape = kv.slice_known_shape(meta)      # starts/ends/... the plan knows
            return [None if shape is None else TensorSpec(x.dtype, shape)]
        plan = slice_attr_plan(x.shape, meta.attr("starts", []), meta.attr("ends", []),
                               meta.attr("axes"))
        return [None if plan is None else TensorSpec(x.dtype, tuple(plan[1]))]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        if y.ndim != x.ndim:
            raise self.fail(ctx, f"output rank {y.ndim} differs from input rank {x.ndim}")
        es = x.dtype.itemsize
        if ctx.node.opset < 10:
            plan = slice_attr_plan(x.shape, ctx.node.attr("starts", []),
                                   ctx.node.attr("ends", []), ctx.node.attr("axes"))
            if plan is None:
                raise self.fail(ctx, "starts, ends and axes do not match the input")
            base, _ = plan
            sizes, strides = coalesce(y.shape, contiguous_strides(x.shape))
            w, sizes, strides = widen(es, sizes, strides, (x.ptr + base * es, y.ptr))
            _strided(self, ctx, x, x.ptr + base * es, y, w, sizes, strides)
            return
        starts = inputs[1]
        axes = inputs[3] if len(inputs) > 3 else None
        steps = inputs[4] if len(inputs) > 4 else None
        k = starts.size
        idx64 = int(starts.dtype == np.int64)
        out = Geo.of(y.shape or [1], [0] * max(y.ndim, 1))
        ing = Geo.of(x.shape or [1], contiguous_strides(x.shape) or [1])
        self.launch(self.function(_sym("slice", es), x), grid_1d(y.size), (BLOCK, 1, 1),
                    [(x.ptr, PTR), (y.ptr, PTR), struct_arg(out), struct_arg(ing),
                     (starts.ptr, PTR), (axes.ptr if axes is not None else 0, PTR),
                     (steps.ptr if steps is not None else 0, PTR), (k, I32), (idx64, I32),
                     (y.size, I64)], ctx.stream)


class Gather(_Movement):
    def supports(self, meta: NodeMeta) -> Support:
        s = super().supports(meta)
        if not s:
            return s
        idx = meta.inputs[1]
        if idx is None or idx.dtype not in (np.int32, np.int64):
            return Support.no("indices must be int32 or int64")
        if normalize_axis(int(meta.attr("axis", 0)), len(meta.inputs[0].shape)) is None:
            return Support.no(f"axis {meta.attr('axis', 0)} is out of range")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x, idx = meta.inputs[0], meta.inputs[1]
        a = normalize_axis(int(meta.attr("axis", 0)), len(x.shape))
        return [TensorSpec(x.dtype, tuple(x.shape[:a]) + tuple(idx.shape)
                           + tuple(x.shape[a + 1:]))]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, idx, y = inputs[0], inputs[1], outputs[0]
        if y.size == 0:
            return
        a = normalize_axis(int(ctx.node.attr("axis", 0)), x.ndim)
        outer, dim, inner = prod(x.shape[:a]), x.shape[a], prod(x.shape[a + 1:])
        if dim == 0:
            raise self.fail(ctx, f"cannot gather from empty axis {a} (shape {x.shape})")
        es = x.dtype.itemsize
        w = block_copy_width(es, inner, (), (x.ptr, y.ptr))
        f = w // es
        n = outer * idx.size * inner // f
        self.launch(self.function(_sym("gather", w), x), grid_1d(n), (BLOCK, 1, 1),
                    [(x.ptr, PTR), (idx.ptr, PTR), (int(idx.dtype == np.int64), I32), (y.ptr, PTR),
                     (outer, I64), (dim, I64), (idx.size, I64), (inner // f, I64)], ctx.stream)


# ---------------------------------------------------------------- views (no launch)

#: views a View kernel keeps for reuse (cleared when full)
VIEWS_KEPT = 1024


class View(_Movement):
    """Reshape, Squeeze, Unsqueeze, Flatten, Identity: output 0 is a view of input 0.

    The output arrives as its planned :class:`TensorSpec`; the kernel stores
    ``inputs[0].view(spec.dtype, spec.shape)`` there (no copy, no launch).
    """

    aliases = {0: 0}

    def __init__(self, op_type: str, since: int = 1) -> None:
        super().__init__(op_type, since=since)
        #: ``(id(input), spec) -> (input, view)``: the input is held, so its id stays its own
        self._views: dict[tuple[int, TensorSpec], tuple[Any, Any]] = {}

    def supports(self, meta: NodeMeta) -> Support:
        return _movable(meta.inputs[0] if meta.inputs else None)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        op = self.key.op_type
        if op == "Identity":
            return [TensorSpec(x.dtype, x.shape)]
        if op == "Flatten":
            r = len(x.shape)
            a = int(meta.attr("axis", 1))
            a = a + r if a < 0 else a
            if not all(isinstance(d, int) for d in x.shape) or not 0 <= a <= r:
                return [None]
            return [TensorSpec(x.dtype, (prod(x.shape[:a]), prod(x.shape[a:])))]
        if op in ("Squeeze", "Unsqueeze") and meta.opset < 13:
            axes = meta.attr("axes")
            r = len(x.shape)
            if op == "Squeeze":
                if axes is None:
                    if not all(isinstance(d, int) for d in x.shape):
                        return [None]
                    return [TensorSpec(x.dtype, tuple(d for d in x.shape if d != 1))]
                drop = {normalize_axis(int(a), r) for a in axes}
                return [TensorSpec(x.dtype, tuple(d for i, d in enumerate(x.shape)
                                                  if i not in drop))]
            if axes is None:
                return [None]
            ro = r + len(axes)
            add = {normalize_axis(int(a), ro) for a in axes}
            dims = iter(x.shape)
            return [TensorSpec(x.dtype, tuple(1 if i in add else next(dims)
                                              for i in range(ro)))]
        if op in ("Reshape", "Squeeze", "Unsqueeze") and len(meta.inputs) > 1 \
                and meta.inputs[1] is not None:
            value = kv.known_ints(meta, 1)
            if value is None:
                return [None]                   # shape / axes are a device value
            shape = kv.view_shape(op, x.shape, value, bool(meta.attr("allowzero", 0)))
            return [None if shape is None else TensorSpec(x.dtype, shape)]
        return [None]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        spec = outputs[0]
        x = inputs[0]
        if not isinstance(spec, TensorSpec):
            raise self.fail(ctx, f"expected the planned TensorSpec of the view, got "
                                 f"{type(spec).__name__}")
        # the input is a planned buffer (or a view of one), the same object every run: so is
        # its view, made once instead of a new tensor per run
        key = (id(x), spec)
        hit = self._views.get(key)
        if hit is not None and hit[0] is x:
            outputs[0] = hit[1]
            return
        if prod(spec.shape) != x.size:
            raise self.fail(ctx, f"planned output {spec.shape} has {prod(spec.shape)} "
                                 f"elements, input {x.shape} has {x.size}")
        outputs[0] = view = x.view(spec.dtype, spec.shape)
        if len(self._views) >= VIEWS_KEPT:
            self._views.clear()
        self._views[key] = (x, view)


from onnx_ep.providers.cuda.kernels.gather_transposed import TransposedGather  # noqa: E402

KERNELS: list[CudaKernel] = [
    Transpose("Transpose"),
    Expand("Expand", since=8),
    Tile("Tile", since=6),
    Concat("Concat"),
    Split("Split"),
    Slice("Slice"),
    Gather("Gather"),
    # in its own module (this one's size); listed here, the family of cpu_reference's
    TransposedGather(),
    *(View(op) for op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")),
]
