"""Reductions on CUDA: Reduce{Sum,Mean,Prod,SumSquare,L1,L2,LogSum,LogSumExp,Max,Min},
ArgMax, ArgMin (``reduce.cu``).

Deterministic: one block per output (a 32x8 block's column for the ``[outer, R,
inner]`` layout), a fixed per-thread fold then a shared-memory tree, no atomics.
Float sums accumulate in double and round once, so they stay within the reference's
own tolerance (``rtol=1e-5, atol=1e-6``; float16/bfloat16 outputs: one output ulp
more, see :func:`~.base.narrow_tolerance`). Max, Min, ArgMax, ArgMin are exact.

Axes: the ``axes`` attribute (opsets before 13 for ReduceSum, 18 for the others) is read
on the host. Where ``axes`` is an input whose value the plan knows (an initializer, or a
value computed from shapes: ``meta.constant(1)``), that value is used like the
attribute, for every keepdims and noop_with_empty_axes. Otherwise it lives on the device
only; the kernel then derives the reduced axes from the input shape and the pre-bound
output shape, which needs ``keepdims=1`` (declined otherwise). Dims of size 1 reduce to
themselves, so the derivation is exact, except that ``noop_with_empty_axes=1`` with an
empty ``axes`` input (identity) cannot be told from a reduction over size-1 dims:
declined for the ops where that changes values (L1, L2, SumSquare, LogSum, LogSumExp).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import NodeMeta, Parity, Support, TensorSpec, WorkspaceRequirement
from onnx_ep.providers.cuda import copies
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    FLOATS,
    I32,
    I64,
    INTS,
    MAX_DIMS,
    PTR,
    CudaKernel,
    FloatKernel,
    Geo,
    block_for,
    contiguous_strides,
    dtype_support,
    grid_1d,
    normalize_axis,
    prod,
    replayed,
    struct_arg,
    suffix,
)

#: the reference's bound for sums (docs/PARITY.md, "Declared bounds")
SUM_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)
#: reductions that are the identity on a single element (safe when size-1 dims reduce)
_IDENTITY_ON_ONE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                              "ReduceProd"})
MAX_GRID = 1 << 20
#: ArgMax / ArgMin over rows of at least this many elements, fewer rows than
#: :data:`ARG_SPLIT_ROWS`, split each row over blocks of :data:`ARG_CHUNK` elements (one
#: block per row would leave most of the GPU idle on a vocabulary's logits)
ARG_SPLIT_MIN = 8192
ARG_SPLIT_ROWS = 64
ARG_CHUNK = 2048


def arg_split(outer: int, dim: int, inner: int) -> int:
    """Blocks per row of the split ArgMax / ArgMin route (0: one block per row)."""
    if inner != 1 or dim < ARG_SPLIT_MIN or outer >= ARG_SPLIT_ROWS:
        return 0
    return -(-dim // ARG_CHUNK)


def arg_workspace(outer: int, parts: int, dtype: Any) -> tuple[int, int]:
    """(offset of the part indexes, total bytes) of the split route's workspace: each part's
    best value (float32 for the narrow floats) then its index."""
    dt = np.dtype(dtype)
    val = dt if dt.kind in "iub" or dt.itemsize >= 4 else np.dtype(np.float32)
    at = -(-outer * parts * val.itemsize // 256) * 256
    return at, at + outer * parts * 8


def axes_input_since(op_type: str) -> int:
    """First opset where ``axes`` is an input instead of an attribute."""
    return 13 if op_type == "ReduceSum" else 18


def attr_axes(meta: Any, rank: int) -> list[int] | None:
    """Normalized attribute axes; ``[]`` for none given; ``None`` for invalid ones."""
    axes = meta.attr("axes")
    if axes is None:
        return []
    return checked_axes(axes, rank)


def checked_axes(axes: Any, rank: int) -> list[int] | None:
    """``axes`` (a list or a 1-D integer array) normalized into ``[0, rank)``; ``None`` when
    one is out of range or repeated, or the value is not integers."""
    arr = np.asarray(axes)
    if arr.ndim > 1 or (arr.size and arr.dtype.kind not in "iu"):
        return None
    out = [normalize_axis(int(a), rank) for a in arr.reshape(-1)]
    if any(a is None for a in out) or len(set(out)) != len(out):
        return None
    return out  # type: ignore[return-value]


def derived_axes(in_shape: Sequence[int], out_shape: Sequence[int]) -> list[int] | None:
    """Reduced axes from shapes with keepdims=1: output dim 1 where the input's is not.

    ``None`` when the shapes cannot come from a keepdims=1 reduction.
    """
    if len(in_shape) != len(out_shape):
        return None
    axes = []
    for d, (i, o) in enumerate(zip(in_shape, out_shape)):
        if o == i:
            continue
        if o != 1:
            return None
        axes.append(d)
    return axes


def reduce_groups(shape: Sequence[int], axes: Sequence[int]
                  ) -> list[tuple[bool, int, int]]:
    """Coalesced ``(reduced, size, stride)`` groups in input order, size-1 dims dropped."""
    st = contiguous_strides(shape)
    red = set(axes)
    groups: list[tuple[bool, int, int]] = []
    for d, (n, s) in enumerate(zip(shape, st)):
        if n == 1:
            continue
        r = d in red
        if groups and groups[-1][0] == r and groups[-1][2] == s * n:
            groups[-1] = (r, groups[-1][1] * n, s)
        else:
            groups.append((r, n, s))
    return groups


def reduce_plan(shape: Sequence[int], axes: Sequence[int]) -> tuple[str, tuple[Any, ...]]:
    """``("cols", (outer, R, inner))`` for the ``[outer, R, inner]`` layout with inner > 1,
    else ``("rows", (kept sizes, kept strides, reduced sizes, reduced strides))``."""
    g = reduce_groups(shape, axes)
    kinds = [r for r, _, _ in g]
    if kinds in ([True, False], [False, True, False]):
        outer = g[0][1] if len(g) == 3 else 1
        return "cols", (outer, g[-2][1], g[-1][1])
    kept = [(n, s) for r, n, s in g if not r]
    red = [(n, s) for r, n, s in g if r]
    return "rows", ([n for n, _ in kept], [s for _, s in kept],
                    [n for n, _ in red], [s for _, s in red])


class Reduce(CudaKernel):
    """One row of the Reduce* table; ``name`` is the ``reduce_<name>_<dtype>`` symbol."""

    source = "reduce"

    def __init__(self, op_type: str, name: str, *, ints: bool, parity: Parity) -> None:
        super().__init__(op_type, since=1, parity=parity)
        self.name = name
        self.dtypes = FLOATS | INTS if ints else FLOATS

    def _axes_from_input(self, meta: Any) -> bool:
        return (meta.opset >= axes_input_since(self.key.op_type) and len(meta.inputs) > 1
                and meta.inputs[1] is not None)

    def _known_axes(self, meta: Any, rank: int) -> list[int] | None:
        """The node's axes as written (attribute, or input 1's value the plan knows),
        normalized; ``[]`` for none; ``None`` when invalid or on the device only."""
        if not self._axes_from_input(meta):
            return attr_axes(meta, rank)
        value = meta.constant(1)
        return None if value is None else checked_axes(value, rank)

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0]
        if x is None:
            return Support.no("the input's type is unknown here (asked again at plan time)")
        s = dtype_support(x.dtype, self.dtypes)
        if not s:
            return s
        if len(x.shape) > MAX_DIMS:
            return Support.no(f"rank {len(x.shape)} > {MAX_DIMS}")
        if self._axes_from_input(meta) and meta.constant(1) is None:
            if not meta.attr("keepdims", 1):
                return Support.no("axes is a device input whose value the plan does not "
                                  "know and keepdims=0: the reduced axes cannot be derived "
                                  "from the shapes")
            if meta.attr("noop_with_empty_axes", 0) and self.key.op_type not in \
                    _IDENTITY_ON_ONE:
                return Support.no("axes is a device input whose value the plan does not "
                                  "know, with noop_with_empty_axes=1: an empty axes "
                                  "(identity) cannot be told from a reduction over size-1 "
                                  "dims")
        elif self._known_axes(meta, len(x.shape)) is None:
            given = meta.constant(1) if self._axes_from_input(meta) else meta.attr("axes")
            return Support.no(f"axes {np.asarray(given).tolist()} are out of range for rank "
                              f"{len(x.shape)}, repeated or not integers")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        rank = len(x.shape)
        axes = self._known_axes(meta, rank)
        if axes is None:
            return [None]
        if not axes:
            if meta.attr("noop_with_empty_axes", 0):
                return [TensorSpec(x.dtype, x.shape)]
            axes = list(range(rank))
        keep = meta.attr("keepdims", 1)
        shape = [1 if d in axes else n for d, n in enumerate(x.shape)] if keep else \
            [n for d, n in enumerate(x.shape) if d not in axes]
        return [TensorSpec(x.dtype, tuple(shape))]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        node = ctx.node
        if self._axes_from_input(node) and node.constant(1) is None:
            axes = derived_axes(x.shape, y.shape)
            if axes is None:
                raise self.fail(ctx, f"output shape {y.shape} is not a keepdims=1 "
                                     f"reduction of {x.shape}")
        else:
            axes = self._known_axes(node, x.ndim)
            if axes is None:
                given = node.constant(1) if self._axes_from_input(node) else node.attr("axes")
                raise self.fail(ctx, f"axes {np.asarray(given).tolist()} are out of range "
                                     f"for rank {x.ndim}, repeated or not integers")
            if not axes:
                if node.attr("noop_with_empty_axes", 0):
                    copies.copy_dtod(y.ptr, x.ptr, y.nbytes, ctx.stream)
                    return
                axes = list(range(x.ndim))
        sfx = suffix(x.dtype)
        route, geo = reduce_plan(x.shape, axes)
        if route == "cols":
            outer, r, inner = geo
            grid = (-(-inner // 32), min(outer, 65535), 1)
            self.launch(self.function(f"reduce_cols_{self.name}_{sfx}", x), grid, (32, 8, 1),
                        [(x.ptr, PTR), (y.ptr, PTR), (outer, I64), (r, I64), (inner, I64)],
                        ctx.stream)
            return
        ks, kst, rs, rst = geo
        nred = prod(rs)
        if x.size == 0:
            ks, kst = list(y.shape), [0] * y.ndim    # empty sets: only the output shape counts
            rs, rst = [], []
            nred = 0
        n_out = y.size
        kept = Geo.of(ks or [1], kst or [0])
        red = Geo.of(rs or [1], rst or [0])
        self.launch(self.function(f"reduce_{self.name}_{sfx}", x), (min(n_out, MAX_GRID), 1, 1),
                    (block_for(nred), 1, 1),
                    [(x.ptr, PTR), (y.ptr, PTR), struct_arg(kept), struct_arg(red),
                     (nred, I64), (n_out, I64)], ctx.stream)


class ArgExtreme(CudaKernel):
    """ArgMax / ArgMin with keepdims and select_last_index; int64 output. Exact."""

    source = "reduce"

    def __init__(self, op_type: str, name: str) -> None:
        super().__init__(op_type, since=1, parity=Parity.EXACT)
        self.name = name

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0]
        if x is None:
            return Support.no("the input's type is unknown here (asked again at plan time)")
        s = dtype_support(x.dtype, FLOATS | INTS)
        if not s:
            return s
        if normalize_axis(int(meta.attr("axis", 0)), len(x.shape)) is None:
            return Support.no(f"axis {meta.attr('axis', 0)} is out of range for rank "
                              f"{len(x.shape)}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        a = normalize_axis(int(meta.attr("axis", 0)), len(x.shape))
        shape = list(x.shape)
        if meta.attr("keepdims", 1):
            shape[a] = 1
        else:
            del shape[a]
        return [TensorSpec(np.int64, tuple(shape))]

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        def size() -> WorkspaceRequirement:
            x = meta.inputs[0]
            a = normalize_axis(int(meta.attr("axis", 0)), len(x.shape))
            if a is None:
                return WorkspaceRequirement.NONE
            outer, dim, inner = prod(x.shape[:a]), x.shape[a], prod(x.shape[a + 1:])
            parts = arg_split(outer, dim, inner)
            return WorkspaceRequirement(arg_workspace(outer, parts, x.dtype)[1] if parts
                                        else 0)
        if not meta.inputs or meta.inputs[0] is None:
            return WorkspaceRequirement.NONE
        return FloatKernel.plan_time(meta, size)

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        a = normalize_axis(int(ctx.node.attr("axis", 0)), x.ndim)
        outer, dim, inner = prod(x.shape[:a]), x.shape[a], prod(x.shape[a + 1:])
        if dim == 0:
            raise self.fail(ctx, f"cannot take {ctx.node.op_type} over empty axis {a}")
        last = int(bool(ctx.node.attr("select_last_index", 0)))
        sfx = suffix(x.dtype)
        parts = arg_split(outer, dim, inner)
        at, need = arg_workspace(outer, parts, x.dtype) if parts else (0, 0)
        if parts and workspace is not None and workspace.nbytes >= need:
            pv = int(workspace.buffer.ptr)
            self.launch(self.function(f"{self.name}_part_{sfx}", x), (parts, outer, 1),
                        (BLOCK, 1, 1),
                        [(x.ptr, PTR), (pv, PTR), (pv + at, PTR), (dim, I64),
                         (ARG_CHUNK, I64), (last, I32)], ctx.stream)
            self.launch(self.function(f"{self.name}_join_{sfx}", x), (outer, 1, 1),
                        (block_for(parts), 1, 1),
                        [(pv, PTR), (pv + at, PTR), (y.ptr, PTR), (parts, I64), (last, I32)],
                        ctx.stream)
        elif inner == 1:
            self.launch(self.function(f"{self.name}_rows_{sfx}", x), (min(outer, MAX_GRID), 1, 1),
                        (block_for(dim), 1, 1),
                        [(x.ptr, PTR), (y.ptr, PTR), (outer, I64), (dim, I64), (last, I32)],
                        ctx.stream)
        else:
            n = outer * inner
            self.launch(self.function(f"{self.name}_cols_{sfx}", x),
                        grid_1d(n, BLOCK, MAX_GRID), (BLOCK, 1, 1),
                        [(x.ptr, PTR), (y.ptr, PTR), (outer, I64), (dim, I64), (inner, I64),
                         (last, I32)], ctx.stream)


_TABLE = [
    # op, symbol name, integer types too, parity
    ("ReduceSum", "sum", True, SUM_PARITY),
    ("ReduceMean", "mean", True, SUM_PARITY),
    ("ReduceProd", "prod", True, SUM_PARITY),
    ("ReduceSumSquare", "sum_square", True, SUM_PARITY),
    ("ReduceL1", "l1", True, SUM_PARITY),
    ("ReduceL2", "l2", False, SUM_PARITY),
    ("ReduceLogSum", "log_sum", False, SUM_PARITY),
    ("ReduceLogSumExp", "log_sum_exp", False, SUM_PARITY),
    ("ReduceMax", "max", True, Parity.EXACT),
    ("ReduceMin", "min", True, Parity.EXACT),
]

KERNELS: list[CudaKernel] = [
    *(Reduce(op, name, ints=ints, parity=p) for op, name, ints, p in _TABLE),
    ArgExtreme("ArgMax", "argmax"),
    ArgExtreme("ArgMin", "argmin"),
]
