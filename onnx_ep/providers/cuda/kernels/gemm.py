"""MatMul and Gemm through cuBLASLt (:mod:`onnx_ep.providers.cuda.blas`).

Shapes become a :class:`~onnx_ep.providers.cuda.blas.GemmProblem` here (pure
Python, tested on the CPU): a batched A against a 2-D (or 1-D) B folds the batch
into M (one GEMM), equal batch dims run as a strided batch, and other batch
broadcasts are declined. Gemm's C is written into the pre-bound output first (a
device-to-device copy, or ``broadcast_rows`` from gemm.cu for a broadcast C) and
the GEMM accumulates onto it with ``beta``. The geometry of the fused MatMulAdd
(:func:`matmul_add_shape`: its bias epilogue, or its bias written first the same way)
lives here too; its kernel is in ``fused_gemm.py``.

Numerics: float32 accumulation (CUBLAS_COMPUTE_32F) against the reference's
float64 accumulation rounded once: :data:`~onnx_ep.providers.cuda.blas.GEMM_PARITY`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
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
from onnx_ep.providers.cuda.kernels.movement_plan import coalesce


def problem_alignment(itemsize: int, strides: Sequence[int] = ()) -> int:
    """Pointer alignment a plan may assume: the arena's 16 bytes, less when a batch
    stride (in elements) moves the next matrix off that boundary."""
    align = blas.PLAN_ALIGNMENT
    for s in strides:
        if s:
            align = min(align, blas.pointer_alignment(int(s) * itemsize))
    return align


@attrs.frozen
class MatMulShape:
    """How a MatMul runs: the GEMM (None when nothing to compute) and the output shape.

    :ivar zero_k: K == 0, the output is zeros (a memset, no GEMM).
    """

    problem: blas.GemmProblem | None
    out: tuple[int, ...]
    zero_k: bool = False


#: how many geometries each memo keeps: a decode step asks for the same few hundred every
#: run, and computing one costs more than the launch it describes
GEOMETRY_CACHE = 4096


def matmul_shape(a: Sequence[int], b: Sequence[int], dtype: Any) -> MatMulShape:
    """THE MatMul geometry (plan time and execution both call it; memoized).

    :raises NodeError: invalid shapes, or a batch broadcast cuBLASLt's strided batch
        cannot express (a batched B against an A with fewer batch matrices).
    """
    return _matmul_shape(tuple(a), tuple(b), np.dtype(dtype))


@functools.lru_cache(maxsize=GEOMETRY_CACHE)
def _matmul_shape(a: tuple[Any, ...], b: tuple[Any, ...], dtype: np.dtype) -> MatMulShape:
    """THE MatMul geometry (plan time and execution both call it).

    :raises NodeError: invalid shapes, or a batch broadcast cuBLASLt's strided batch
        cannot express (a batched B against an A with fewer batch matrices).
    """
    a, b = tuple(int(d) for d in a), tuple(int(d) for d in b)
    name = np.dtype(dtype).name
    isz = np.dtype(dtype).itemsize
    if not a or not b:
        raise NodeError(f"MatMul needs inputs of rank >= 1, got shapes {a} and {b}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    k = a2[-1]
    if b2[-2] != k:
        raise NodeError(f"inner dimensions differ: A {a} has K={k}, B {b} has K={b2[-2]}")
    m, n = a2[-2], b2[-1]
    batch_a, batch_b = a2[:-2], b2[:-2]
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(batch_a, batch_b))
    except ValueError:
        raise NodeError(f"batch dimensions {batch_a} and {batch_b} do not broadcast") from None
    out = batch + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ())
    if prod(batch_b) == 1:
        # B is one matrix: fold A's batch into M, one plain GEMM
        if prod(batch_a) != prod(batch):
            raise NodeError(f"A {a} would broadcast against B {b}")
        problem = blas.GemmProblem(name, prod(batch) * m, n, k,
                                   alignment=problem_alignment(isz))
    elif len(batch_a) == len(batch_b) and batch_a == batch_b:
        nb = prod(batch)
        sa, sb, sd = m * k, k * n, m * n
        problem = blas.GemmProblem(name, m, n, k, batch=nb, stride_a=sa, stride_b=sb,
                                   stride_d=sd,
                                   alignment=problem_alignment(isz, (sa, sb, sd)))
        if nb == 1:
            problem = attrs.evolve(problem, batch=1, stride_a=0, stride_b=0, stride_d=0)
    else:
        raise NodeError(f"batch dimensions {batch_a} and {batch_b} broadcast; the cuda MatMul "
                        f"runs equal batches or a single B matrix only")
    if prod(out) == 0:
        return MatMulShape(None, out)
    if k == 0:
        return MatMulShape(None, out, zero_k=True)
    return MatMulShape(problem, out)


def gemm_shape(a: Sequence[int], b: Sequence[int], trans_a: bool, trans_b: bool,
               dtype: Any) -> blas.GemmProblem:
    """THE Gemm problem: ``(M, N) = op(A) @ op(B)``.

    :raises NodeError: A or B not 2-D, or inner dimensions that differ.
    """
    a, b = tuple(int(d) for d in a), tuple(int(d) for d in b)
    if len(a) != 2 or len(b) != 2:
        raise NodeError(f"A and B must be 2-D, got shapes {a} and {b}")
    m, k = (a[1], a[0]) if trans_a else a
    k2, n = (b[1], b[0]) if trans_b else b
    if k != k2:
        raise NodeError(f"inner dimensions differ: op(A) is {(m, k)}, op(B) is {(k2, n)}")
    return blas.GemmProblem(np.dtype(dtype).name, m, n, k, trans_a=bool(trans_a),
                            trans_b=bool(trans_b),
                            alignment=problem_alignment(np.dtype(dtype).itemsize))


def c_broadcast(c: Sequence[int], m: int, n: int) -> tuple[int, int] | None:
    """Element strides ``(row, col)`` that read Gemm's C broadcast to ``(m, n)``, or
    ``None`` when C does not broadcast (numpy rules, unidirectional)."""
    c = tuple(int(d) for d in c)
    if len(c) > 2:
        return None
    rows, cols = ((1, 1) + c)[-2:]
    if rows not in (1, m) or cols not in (1, n):
        return None
    return (cols if rows == m and m != 1 else 0, 1 if cols == n and n != 1 else 0)


@attrs.frozen
class BiasRows:
    """A bias written into Y by ``broadcast_rows``: Y viewed as ``(outer, rows, cols)``,
    element ``(o, r, c)`` is ``bias[r * row_stride + c * col_stride]``."""

    rows: int
    cols: int
    row_stride: int
    col_stride: int


def bias_rows(bias: Sequence[int], out: Sequence[int]) -> BiasRows | None:
    """How ``broadcast_rows`` writes ``bias`` broadcast to ``out``, or ``None`` when the
    broadcast bias changes along more than two runs of dims (``(3, 1, 6)`` into
    ``(3, 4, 6)``). ``bias`` must broadcast to ``out`` (numpy rules, unidirectional)."""
    bias, out = tuple(int(d) for d in bias), tuple(int(d) for d in out)
    if 0 in out:
        return BiasRows(1, 1, 0, 0)             # nothing to write
    own = [1] * len(bias)
    for i in range(len(bias) - 2, -1, -1):
        own[i] = own[i + 1] * bias[i + 1]
    strides = [0] * (len(out) - len(bias)) + [s if n != 1 else 0 for n, s in zip(bias, own)]
    sizes, runs = coalesce(out, strides)
    if len(sizes) == 3 and runs[0] == 0:
        sizes, runs = sizes[1:], runs[1:]       # repeated whole: broadcast_rows' outer loop
    if len(sizes) > 2:
        return None
    sizes, runs = [1] * (2 - len(sizes)) + sizes, [0] * (2 - len(runs)) + runs
    return BiasRows(sizes[0], sizes[1], runs[0], runs[1])


@attrs.frozen
class MatMulAddShape:
    """How MatMulAdd runs: its MatMul, the bias written into Y before a GEMM that adds onto
    it (``rows``), and ``fused``, the same GEMM adding the bias in cuBLASLt's epilogue, when
    the bias is one row of N values and the product one GEMM (None otherwise)."""

    matmul: MatMulShape
    rows: BiasRows
    fused: blas.GemmProblem | None = None


def matmul_add_shape(a: Sequence[int], b: Sequence[int], bias: Sequence[int],
                     dtype: Any) -> MatMulAddShape:
    """THE MatMulAdd geometry (plan time and execution both call it; memoized).

    :raises NodeError: see :func:`_matmul_add_shape`.
    """
    return _matmul_add_shape(tuple(a), tuple(b), tuple(bias), np.dtype(dtype))


@functools.lru_cache(maxsize=GEOMETRY_CACHE)
def _matmul_add_shape(a: tuple[Any, ...], b: tuple[Any, ...], bias: tuple[Any, ...],
                      dtype: np.dtype) -> MatMulAddShape:
    """THE MatMulAdd geometry (plan time and execution both call it).

    :raises NodeError: :func:`matmul_shape`'s reasons, a bias that does not broadcast to
        the product's shape (or would grow it), or one :func:`bias_rows` cannot write.
    """
    mm = matmul_shape(a, b, dtype)
    bias = tuple(int(d) for d in bias)
    try:
        fits = tuple(int(d) for d in np.broadcast_shapes(bias, mm.out)) == mm.out
    except ValueError:
        fits = False
    if not fits:
        raise NodeError(f"bias of shape {bias} does not broadcast to the MatMul output "
                        f"{mm.out} (the sum must keep the product's shape)")
    rows = bias_rows(bias, mm.out)
    if rows is None:
        raise NodeError(f"bias of shape {bias} changes along the batch dims of the output "
                        f"{mm.out}; the cuda MatMulAdd takes biases that repeat over every "
                        f"dim but the last two")
    p = mm.problem
    fused = None
    if p is not None and p.batch == 1 and bias and bias[-1] == p.n \
            and all(d == 1 for d in bias[:-1]):
        fused = attrs.evolve(p, bias=True)
    return MatMulAddShape(mm, rows, fused)


def workspace_ptr(workspace: WorkspaceView | None) -> tuple[int, int]:
    """The view's device pointer and size, ``(0, 0)`` for none."""
    if workspace is None or workspace.nbytes == 0:
        return 0, 0
    return int(workspace.buffer.ptr), int(workspace.nbytes)


class MatMul(FloatKernel):
    """numpy matmul semantics; batches fold into M or run as a strided batch."""

    source = "gemm"

    def __init__(self) -> None:
        super().__init__("MatMul", since=1, parities=blas.GEMM_PARITY)

    def check(self, meta: NodeMeta) -> Support:
        if not blas.support():
            return blas.support()
        if len(meta.inputs) < 2 or meta.inputs[1] is None:
            return Support.no("MatMul needs two inputs")
        a, b = meta.inputs[0].shape, meta.inputs[1].shape
        if len(a) == 0 or len(b) == 0:
            return Support.no("MatMul needs inputs of rank >= 1")
        sa, sb = static_shape(meta.inputs[0]), static_shape(meta.inputs[1])
        if sa is not None and sb is not None:
            try:
                matmul_shape(sa, sb, meta.inputs[0].dtype)
            except NodeError as e:
                return Support.no(e.detail)
        elif len(b) > 2 and len(a) != len(b):
            return Support.no(f"ranks {len(a)} and {len(b)} with a batched B broadcast; "
                              f"the cuda MatMul runs equal batches or a single B matrix only")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        sa, sb = static_shape(meta.inputs[0]), static_shape(meta.inputs[1])
        if sa is None or sb is None:
            return [None]
        return [TensorSpec(meta.inputs[0].dtype, matmul_shape(sa, sb, meta.inputs[0].dtype).out)]

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        def size() -> WorkspaceRequirement:
            try:
                shape = matmul_shape(meta.inputs[0].shape, meta.inputs[1].shape,
                                     meta.inputs[0].dtype)
            except NodeError:
                return WorkspaceRequirement.NONE   # execution raises it with the run's shapes
            if shape.problem is None:
                return WorkspaceRequirement.NONE
            return WorkspaceRequirement(blas.workspace_bytes(shape.problem))
        return self.plan_time(meta, size)

    @replayed
    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        a, b = inputs[0], inputs[1]
        y = outputs[0]
        try:
            shape = matmul_shape(a.shape, b.shape, a.dtype)
        except NodeError as e:
            raise self.fail(ctx, e.detail) from None
        if shape.zero_k:
            copies.memset_d8(y.ptr, 0, y.nbytes, ctx.stream)
        if shape.problem is None:
            return
        ws_ptr, ws_n = workspace_ptr(workspace)
        blas.run(shape.problem, a.ptr, b.ptr, y.ptr, ctx.stream, ws_ptr, ws_n,
                 ordinal=a.device)


class Gemm(FloatKernel):
    """Y = alpha * op(A) @ op(B) + beta * C: C goes into Y first, the GEMM adds onto it."""

    source = "gemm"

    def __init__(self) -> None:
        super().__init__("Gemm", since=1, parities=blas.GEMM_PARITY)

    def check(self, meta: NodeMeta) -> Support:
        if not blas.support():
            return blas.support()
        if len(meta.inputs) < 2 or meta.inputs[1] is None:
            return Support.no("Gemm needs A and B")
        if len(meta.inputs[0].shape) != 2 or len(meta.inputs[1].shape) != 2:
            return Support.no("Gemm needs 2-D A and B")
        c = meta.inputs[2] if len(meta.inputs) > 2 else None
        if c is not None and len(c.shape) > 2:
            return Support.no(f"C of rank {len(c.shape)} does not broadcast to (M, N)")
        sa, sb = static_shape(meta.inputs[0]), static_shape(meta.inputs[1])
        if sa is not None and sb is not None:
            try:
                p = self._problem(meta, sa, sb)
            except NodeError as e:
                return Support.no(e.detail)
            if p.k == 0 and c is not None:
                return Support.no("K == 0 with C: nothing for cuBLASLt to multiply")
            sc = static_shape(c)
            if sc is not None and c_broadcast(sc, p.m, p.n) is None:
                return Support.no(f"C of shape {sc} does not broadcast to ({p.m}, {p.n})")
        return Support.YES

    @staticmethod
    def _problem(meta: NodeMeta, a: Sequence[int], b: Sequence[int]) -> blas.GemmProblem:
        return gemm_shape(a, b, bool(meta.attr("transA", 0)), bool(meta.attr("transB", 0)),
                          meta.inputs[0].dtype)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        sa, sb = static_shape(meta.inputs[0]), static_shape(meta.inputs[1])
        if sa is None or sb is None:
            return [None]
        p = self._problem(meta, sa, sb)
        return [TensorSpec(meta.inputs[0].dtype, (p.m, p.n))]

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        def size() -> WorkspaceRequirement:
            try:
                p = self._problem(meta, meta.inputs[0].shape, meta.inputs[1].shape)
            except NodeError:
                return WorkspaceRequirement.NONE
            if p.m * p.n * p.k == 0:
                return WorkspaceRequirement.NONE
            return WorkspaceRequirement(blas.workspace_bytes(p))
        return self.plan_time(meta, size)

    @replayed
    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        meta = ctx.node
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        y = outputs[0]
        try:
            p = self._problem(meta, a.shape, b.shape)
        except NodeError as e:
            raise self.fail(ctx, e.detail) from None
        if p.m * p.n == 0:
            return
        alpha = float(meta.attr("alpha", 1.0))
        beta = float(meta.attr("beta", 1.0)) if c is not None else 0.0
        if c is not None:
            strides = c_broadcast(c.shape, p.m, p.n)
            if strides is None:
                raise self.fail(ctx, f"C of shape {c.shape} does not broadcast to "
                                     f"({p.m}, {p.n})")
            if tuple(c.shape) == (p.m, p.n):
                copies.copy_dtod(y.ptr, c.ptr, y.nbytes, ctx.stream)
            else:
                fn = self.function(f"broadcast_rows_{suffix(y.dtype)}", y)
                n = p.m * p.n
                self.launch(fn, grid_1d(n), (BLOCK, 1, 1),
                            [(y.ptr, PTR), (c.ptr, PTR), (n, I64), (p.m, I64), (p.n, I64),
                             (strides[0], I64), (strides[1], I64)], ctx.stream)
        if p.k == 0:
            if c is None:
                copies.memset_d8(y.ptr, 0, y.nbytes, ctx.stream)
                return
            raise self.fail(ctx, "K == 0 with C is not supported on cuda")
        ws_ptr, ws_n = workspace_ptr(workspace)
        blas.run(p, a.ptr, b.ptr, y.ptr, ctx.stream, ws_ptr, ws_n, alpha=alpha, beta=beta,
                 ordinal=a.device)


KERNELS: list[Any] = [MatMul(), Gemm()]
