"""The fused GEMM nodes on CUDA, the counterpart of cpu_reference/fused_gemm.py:
``onnx_ep.fused::MatMulAdd`` and ``com.microsoft::FusedMatMul``.

``onnx_ep.fused::MatMulAdd``: ``Y = MatMul(A, B) + bias`` in one cuBLASLt call where it can.

Two routes, chosen per call from :func:`~.gemm.matmul_add_shape` (pure Python, tested on
the CPU):

- **epilogue**: the product folds to one GEMM and the bias is one row of N values (the
  biased q/k/v projections of a transformer): a ``GemmProblem`` with ``bias=True``, whose
  plan adds the bias in cuBLASLt's epilogue (:mod:`~onnx_ep.providers.cuda.blas`). One
  launch.
- **residual**: a bias of the product's shape (``x + MatMul(h, W)``) is passed as
  cuBLASLt's C with ``beta = 1``. One launch.
- **broadcast**: anything else the cuda MatMul runs (a strided batch, a bias along M, a
  scalar bias), a bias pointer off ``blas.BIAS_ALIGNMENT``, or a cuBLASLt
  without an algorithm for the epilogue at these shapes: the bias is written into Y first
  (``broadcast_rows`` of gemm.cu, or a copy) and the GEMM adds onto it with ``beta = 1``,
  as Gemm does with C. Two launches.

The epilogue's heuristic is asked in ``workspace_requirement`` (plan time), which declares
the workspace of the route a call at arena-aligned pointers takes; execution finds the same
plans by dict lookup, so nothing is planned while a stream captures unless a pointer is
less aligned than the arena's (a user's DLPack view; cuda MatMul does the same then).

Numerics: every route accumulates in float32. Measured on the H200, some cuBLASLt
algorithms (odd N, strided batches, a C read with ``beta = 1``) round the product to T
before the bias or C is added, as the unfused MatMul -> Add does; where the bias cancels
most of the product that is one ulp of the *product* off the reference's float64 sum
rounded once. :data:`MATMUL_ADD_PARITY` is MatMul's promise with that ulp (for operands of
unit scale, products below 8 in magnitude) as its absolute part.

``com.microsoft::FusedMatMul``: ``Y = alpha * MatMul(op(A), op(B))`` as one cublasLtMatmul,
transA / transB as cuBLASLt's transposes and alpha as its alpha (it scales the float32 sum
before the one rounding to T: MatMul's promise, :data:`~.blas.GEMM_PARITY`). The geometry
(:func:`fused_matmul_shape`, pure Python) picks one of:

- **fold**: B is one matrix and A is not transposed: A's batch folds into M, one plain GEMM
  (transB included: only B's layout changes).
- **strided batch**: every operand is either the whole broadcast batch (its batch dims,
  padded with leading 1s, are the output's) or a single matrix, read at batch stride 0
  (transA with one B, whose batch cannot fold into M; one A against a batch of B).
- anything else (a batch broadcast along some dims only, transBatchA / transBatchB) is
  declined; cpu_reference runs it.

Planning follows MatMul: the heuristic is asked in ``workspace_requirement`` (plan time)
and execution finds the plan by dict lookup.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    OpKey,
    Parity,
    Support,
    TensorSpec,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cuda import blas, copies
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    I64,
    PTR,
    FloatKernel,
    grid_1d,
    prod,
    replayed,
    static_shape,
    suffix,
)
from onnx_ep.providers.cuda.kernels.gemm import (
    MatMulAddShape,
    MatMulShape,
    matmul_add_shape,
    matmul_shape,
    problem_alignment,
    workspace_ptr,
)
from onnx_ep.providers.shared.grouped import grouped_shapes

#: how a MatMulAdd call runs (:func:`route`; a bias of the product's shape is C: RESIDUAL)
EPILOGUE, BROADCAST, RESIDUAL = "epilogue", "broadcast", "residual"

#: MatMul's promise, and for float16 / bfloat16 one ulp of a product below 8 in magnitude
#: lost where the bias cancels it (a product rounded before the bias is added)
MATMUL_ADD_PARITY = {
    "float32": blas.GEMM_PARITY["float32"],
    "float16": Parity.tolerance(rtol=blas.GEMM_PARITY["float16"].rtol, atol=2.0 ** -8),
    "bfloat16": Parity.tolerance(rtol=blas.GEMM_PARITY["bfloat16"].rtol, atol=2.0 ** -5),
}


def symbolic_problem(a: Sequence[Any], b: Sequence[Any], bias: Sequence[Any]) -> str | None:
    """What the known ranks of shapes with symbolic dims already rule out, or ``None``."""
    if len(b) > 2 and len(a) != len(b):
        return (f"ranks {len(a)} and {len(b)} with a batched B broadcast; the cuda MatMul "
                f"runs equal batches or a single B matrix only")
    out_rank = max(len(a), len(b), 2) - (len(a) == 1) - (len(b) == 1)
    if len(b) == 2 and len(a) >= 2 and tuple(bias) == (*a[:-1], b[-1]):
        return None           # a bias of the product's shape (a residual): cuBLASLt's C
    if len(bias) > out_rank:
        return (f"bias of rank {len(bias)} would grow the MatMul output of rank {out_rank} "
                f"(the sum must keep the product's shape)")
    if any(d != 1 for d in bias[:-2]):
        return (f"bias of shape {tuple(bias)} with symbolic dims may change along the batch "
                f"dims; the cuda MatMulAdd takes biases that repeat over every dim but the "
                f"last two")
    return None


def route(shape: MatMulAddShape, ptrs: tuple[int, ...], bias_ptr: int | None, ordinal: int,
          workspace_nbytes: int) -> tuple[str, blas.MatmulPlan | None]:
    """The route of one call and the plan it runs (``None``: nothing to multiply).

    :param ptrs: A, B and Y's pointers; empty at plan time (the arena's alignment).
    :param bias_ptr: the bias pointer, ``None`` at plan time (weights are aligned).
    """
    if shape.fused is not None and (bias_ptr is None or bias_ptr % blas.BIAS_ALIGNMENT == 0):
        plan = blas.find_plan(shape.fused, ptrs, ordinal, workspace_nbytes)
        if plan is not None:
            return EPILOGUE, plan
    problem = shape.matmul.problem
    if problem is None:
        return BROADCAST, None
    return BROADCAST, blas.plan_for_pointers(problem, ptrs, ordinal, workspace_nbytes,
                                             fit_workspace=True)


class MatMulAdd(FloatKernel):
    """``onnx_ep.fused::MatMulAdd(A, B, bias)``: ONNX MatMul, plus a bias broadcast to it."""

    source = "gemm"

    def __init__(self) -> None:
        super().__init__("MatMulAdd", since=1, parities=MATMUL_ADD_PARITY)
        self.key = OpKey(FUSED_DOMAIN, "MatMulAdd", 1)

    def check(self, meta: NodeMeta) -> Support:
        if not blas.support():
            return blas.support()
        if len(meta.inputs) != 3 or any(s is None for s in meta.inputs):
            return Support.no(f"MatMulAdd takes 3 inputs (A, B, bias), got "
                              f"{len(meta.inputs)} known")
        a, b, bias = meta.inputs
        if len(a.shape) == 0 or len(b.shape) == 0:
            return Support.no("MatMul needs inputs of rank >= 1")
        sa, sb, sc = static_shape(a), static_shape(b), static_shape(bias)
        if sa is not None and sb is not None and sc is not None:
            try:
                matmul_add_shape(sa, sb, sc, a.dtype)
            except NodeError as e:
                return Support.no(e.detail)
            return Support.YES
        why = symbolic_problem(a.shape, b.shape, bias.shape)
        return Support.no(why) if why else Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        sa, sb = static_shape(meta.inputs[0]), static_shape(meta.inputs[1])
        if sa is None or sb is None:
            return [None]
        return [TensorSpec(meta.inputs[0].dtype, matmul_shape(sa, sb, meta.inputs[0].dtype).out)]

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        def size() -> WorkspaceRequirement:
            a, b, bias = meta.inputs
            try:
                shape = matmul_add_shape(a.shape, b.shape, bias.shape, a.dtype)
            except NodeError:
                return WorkspaceRequirement.NONE   # execution raises it with the run's shapes
            _, plan = route(shape, (), None, 0, blas.MAX_WORKSPACE_BYTES)
            if plan is None or plan.workspace_size == 0:
                return WorkspaceRequirement.NONE
            return WorkspaceRequirement(plan.workspace_size)
        return self.plan_time(meta, size)

    @replayed
    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        a, b, bias = inputs
        y = outputs[0]
        try:
            shape = matmul_add_shape(a.shape, b.shape, bias.shape, a.dtype)
        except NodeError as e:
            raise self.fail(ctx, e.detail) from None
        if prod(shape.matmul.out) == 0:
            return
        ws_ptr, ws_n = workspace_ptr(workspace)
        ordinal = a.device
        how, _ = route(shape, (a.ptr, b.ptr, y.ptr), int(bias.ptr), ordinal, ws_n)
        if how == EPILOGUE:
            assert shape.fused is not None
            blas.run(shape.fused, a.ptr, b.ptr, y.ptr, ctx.stream, ws_ptr, ws_n,
                     bias_ptr=int(bias.ptr), ordinal=ordinal, fit_workspace=True)
            return
        if shape.matmul.problem is not None and tuple(bias.shape) == tuple(shape.matmul.out):
            # a bias of the product's shape (a residual) is cuBLASLt's C: one call, no copy
            blas.run(shape.matmul.problem, a.ptr, b.ptr, y.ptr, ctx.stream, ws_ptr, ws_n,
                     beta=1.0, c_ptr=int(bias.ptr), ordinal=ordinal, fit_workspace=True)
            return
        self.write_bias(ctx, shape, bias, y)
        if shape.matmul.problem is not None:
            blas.run(shape.matmul.problem, a.ptr, b.ptr, y.ptr, ctx.stream, ws_ptr, ws_n,
                     beta=1.0, ordinal=ordinal, fit_workspace=True)

    def write_bias(self, ctx: ExecutionContext, shape: MatMulAddShape, bias: Any, y: Any) -> None:
        """Y = bias broadcast to Y's shape (a copy when they have one shape)."""
        if tuple(bias.shape) == tuple(shape.matmul.out):
            copies.copy_dtod(y.ptr, bias.ptr, y.nbytes, ctx.stream)
            return
        r = shape.rows
        n = prod(shape.matmul.out)
        fn = self.function(f"broadcast_rows_{suffix(y.dtype)}", y)
        self.launch(fn, grid_1d(n), (BLOCK, 1, 1),
                    [(y.ptr, PTR), (bias.ptr, PTR), (n, I64), (r.rows, I64), (r.cols, I64),
                     (r.row_stride, I64), (r.col_stride, I64)], ctx.stream)


# ---------------------------------------------------------------- FusedMatMul

#: onnxruntime's contrib domain
MS_DOMAIN = "com.microsoft"
#: what the cuda FusedMatMul says of a batch broadcast it cannot express
_BROADCAST = ("the cuda FusedMatMul runs batches where each operand is the whole batch or "
              "a single matrix")


def fused_matmul_shape(a: Sequence[int], b: Sequence[int], trans_a: bool, trans_b: bool,
                       dtype: Any) -> MatMulShape:
    """THE FusedMatMul geometry (plan time and execution both call it; memoized): the
    GEMM of ``op(A) @ op(B)`` (alpha is the caller's) and the output shape.

    :raises NodeError: invalid shapes, or a batch broadcast :func:`batch_stride` cannot
        express as cuBLASLt's strided batch.
    """
    dt = np.dtype(dtype)
    return _fused_matmul_shape(tuple(int(d) for d in a), tuple(int(d) for d in b),
                               bool(trans_a), bool(trans_b), dt.name, dt.itemsize)


def batch_stride(batch_x: tuple[int, ...], batch: tuple[int, ...], size: int) -> int | None:
    """Elements between an operand's consecutive matrices in a strided batch over the
    broadcast ``batch``: ``size`` when it holds the whole batch, 0 when it is one matrix
    (read again for every batch), ``None`` when it is broadcast along some dims only."""
    if prod(batch_x) == 1:
        return 0
    if (1,) * (len(batch) - len(batch_x)) + batch_x == batch:
        return size
    return None


@functools.lru_cache(maxsize=4096)
def _fused_matmul_shape(a: tuple[int, ...], b: tuple[int, ...], trans_a: bool, trans_b: bool,
                        name: str, isz: int) -> MatMulShape:
    if not a or not b:
        raise NodeError(f"FusedMatMul needs inputs of rank >= 1, got shapes {a} and {b}")
    # numpy transposes a vector to itself: the flags only act on matrices
    trans_a, trans_b = trans_a and len(a) > 1, trans_b and len(b) > 1
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    m, k = (a2[-1], a2[-2]) if trans_a else (a2[-2], a2[-1])
    k_b, n = (b2[-1], b2[-2]) if trans_b else (b2[-2], b2[-1])
    if k != k_b:
        raise NodeError(f"inner dimensions differ: op(A) of A {a} (transA={int(trans_a)}) has "
                        f"K={k}, op(B) of B {b} (transB={int(trans_b)}) has K={k_b}")
    batch_a, batch_b = a2[:-2], b2[:-2]
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(batch_a, batch_b))
    except ValueError:
        raise NodeError(f"batch dimensions {batch_a} and {batch_b} do not broadcast") from None
    out = batch + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ())
    if prod(out) == 0:
        return MatMulShape(None, out)
    nb = prod(batch)
    if prod(batch_b) == 1 and not trans_a:
        # A's rows of every batch are one (nb * m, k) matrix: one plain GEMM
        problem = blas.GemmProblem(name, nb * m, n, k, trans_b=trans_b,
                                   alignment=problem_alignment(isz))
    else:
        sa, sb = batch_stride(batch_a, batch, m * k), batch_stride(batch_b, batch, k * n)
        if sa is None or sb is None:
            raise NodeError(f"batch dimensions {batch_a} and {batch_b} broadcast; {_BROADCAST}")
        problem = blas.GemmProblem(name, m, n, k, trans_a=trans_a, trans_b=trans_b)
        if nb == 1:
            problem = problem.with_alignment(problem_alignment(isz))
        else:
            problem = attrs.evolve(problem, batch=nb, stride_a=sa, stride_b=sb, stride_d=m * n,
                                   alignment=problem_alignment(isz, (sa, sb, m * n)))
    if k == 0:
        return MatMulShape(None, out, zero_k=True)
    return MatMulShape(problem, out)


def symbolic_fused_problem(a: Sequence[Any], b: Sequence[Any]) -> str | None:
    """What the known ranks of shapes with symbolic dims already rule out, or ``None``."""
    def single(x: Sequence[Any]) -> bool:
        return len(x) <= 2 or all(d == 1 for d in x[:-2])

    if len(a) != len(b) and not single(a) and not single(b):
        return (f"ranks {len(a)} and {len(b)} with batch dims on both sides; "
                f"{_BROADCAST}")
    return None


class FusedMatMul(FloatKernel):
    """``com.microsoft::FusedMatMul(A, B)``: ``alpha * MatMul(op(A), op(B))``, one GEMM."""

    source = "gemm"

    def __init__(self) -> None:
        super().__init__("FusedMatMul", since=1, parities=blas.GEMM_PARITY)
        self.key = OpKey(MS_DOMAIN, "FusedMatMul", 1)

    @staticmethod
    def flags(meta: NodeMeta) -> tuple[bool, bool]:
        """transA and transB (any non-zero value is true, as in onnxruntime)."""
        return bool(meta.attr("transA", 0)), bool(meta.attr("transB", 0))

    def geometry(self, meta: NodeMeta, a: Sequence[int], b: Sequence[int],
                 dtype: Any) -> MatMulShape:
        """The GEMM and output shape of this node at these shapes."""
        return fused_matmul_shape(a, b, *self.flags(meta), dtype)

    def check(self, meta: NodeMeta) -> Support:
        if not blas.support():
            return blas.support()
        if len(meta.inputs) != 2 or any(s is None for s in meta.inputs):
            return Support.no(f"FusedMatMul takes 2 inputs (A, B), got {len(meta.inputs)} known")
        for name in ("transBatchA", "transBatchB"):
            if meta.attr(name, 0):
                return Support.no(f"{name}={meta.attr(name, 0)}: the cuda FusedMatMul runs "
                                  f"transBatchA = transBatchB = 0 only (cpu_reference runs it)")
        a, b = meta.inputs
        if len(a.shape) == 0 or len(b.shape) == 0:
            return Support.no("FusedMatMul needs inputs of rank >= 1")
        static = self._static_check(meta)
        if static is not None:
            return static
        why = symbolic_fused_problem(a.shape, b.shape)
        return Support.no(why) if why else Support.YES

    def _static_check(self, meta: NodeMeta) -> Support | None:
        """With both shapes static, whether :meth:`geometry` takes them; else None."""
        a, b = meta.inputs
        sa, sb = static_shape(a), static_shape(b)
        if sa is None or sb is None:
            return None
        try:
            self.geometry(meta, sa, sb, a.dtype)
        except NodeError as e:
            return Support.no(e.detail)
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        a, b = meta.inputs
        sa, sb = static_shape(a), static_shape(b)
        if sa is None or sb is None:
            return [None]
        return [TensorSpec(a.dtype, self.geometry(meta, sa, sb, a.dtype).out)]

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        def size() -> WorkspaceRequirement:
            a, b = meta.inputs
            try:
                shape = self.geometry(meta, a.shape, b.shape, a.dtype)
            except NodeError:
                return WorkspaceRequirement.NONE   # execution raises it with the run's shapes
            if shape.problem is None:
                return WorkspaceRequirement.NONE
            return WorkspaceRequirement(blas.workspace_bytes(shape.problem))
        return self.plan_time(meta, size)

    @replayed
    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        a, b = inputs
        y = outputs[0]
        meta = ctx.node
        if meta.attr("transBatchA", 0) or meta.attr("transBatchB", 0):
            raise self.fail(ctx, "transBatchA / transBatchB are not run on cuda (supports() "
                                 "declines them)")
        try:
            shape = self.geometry(meta, a.shape, b.shape, a.dtype)
        except NodeError as e:
            raise self.fail(ctx, e.detail) from None
        if shape.zero_k:
            copies.memset_d8(y.ptr, 0, y.nbytes, ctx.stream)
        if shape.problem is None:
            return
        ws_ptr, ws_n = workspace_ptr(workspace)
        blas.run(shape.problem, a.ptr, b.ptr, y.ptr, ctx.stream, ws_ptr, ws_n,
                 alpha=float(meta.attr("alpha", 1.0)), ordinal=a.device)


class GroupedMatMul(FusedMatMul):
    """``onnx_ep.fused::GroupedMatMul(A, B)`` (cpu_reference/fused_gemm.py): A's H heads
    against B's G groups, head h on group h // (H / G), one strided-batch GEMM.

    Heads of one group are adjacent, so A ``[..., H, M, K]`` is read as ``[..., G, rep * M,
    K]`` and the output ``[..., H, M, N]`` is written as ``[..., G, rep * M, N]``: the same
    bytes, with B's groups read once each instead of expanded into a copy.
    """

    def __init__(self) -> None:
        FloatKernel.__init__(self, "GroupedMatMul", since=1, parities=blas.GEMM_PARITY)
        self.key = OpKey(FUSED_DOMAIN, "GroupedMatMul", 1)

    @staticmethod
    def flags(meta: NodeMeta) -> tuple[bool, bool]:
        return False, bool(meta.attr("transB", 0))

    def geometry(self, meta: NodeMeta, a: Sequence[int], b: Sequence[int],
                 dtype: Any) -> MatMulShape:
        a, b = tuple(int(d) for d in a), tuple(int(d) for d in b)
        trans_b = self.flags(meta)[1]
        why = grouped_shapes(a, b, trans_b)
        if why:
            raise NodeError(why)
        h, g, m = a[-3], b[-3], a[-2]
        shape = fused_matmul_shape(a[:-3] + (g, h // g * m, a[-1]), b, False, trans_b, dtype)
        n = b[-2] if trans_b else b[-1]
        return attrs.evolve(shape, out=a[:-3] + (h, m, n))

    def check(self, meta: NodeMeta) -> Support:
        if not blas.support():
            return blas.support()
        if len(meta.inputs) != 2 or any(s is None for s in meta.inputs):
            return Support.no("GroupedMatMul takes 2 inputs (A, B) of known type")
        a, b = meta.inputs
        static = self._static_check(meta)
        if static is not None:
            return static
        h, g = (a.shape[-3], b.shape[-3]) if min(len(a.shape), len(b.shape)) >= 3 else (0, 0)
        if len(a.shape) != len(b.shape) or not isinstance(h, int) or not isinstance(g, int) \
                or not g or h % g:
            return Support.no(f"A {a.shape} and B {b.shape}: GroupedMatMul needs one rank "
                              f">= 3 and known head counts, H a multiple of G")
        return Support.YES


KERNELS: list[Any] = [MatMulAdd(), FusedMatMul(), GroupedMatMul()]
