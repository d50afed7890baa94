"""com.microsoft::MatMulNBits on CUDA (``nbits.cu``), the counterpart of
cpu_reference/quant_contrib.py (registered by :mod:`.quant_contrib`; GatherBlockQuantized
is in :mod:`.nbits_gather`).

``Y = A @ dequant(B)^T (+ bias)``: B is ``[N, ceil(K / block_size), block_size * bits / 8]``
uint8, codes of ``bits`` (2, 4, 8) packed low bits first, dequantized per block as
``(code - zero_point) * scale``. Two routes, chosen from the shapes alone
(:func:`gemv_geometry`, pure Python, tested on the CPU), so the plan knows the workspace:

- **tensor-core gemv** (M <= 8, 4-bit codes in blocks of 32 or more, no or packed zero
  points, float16/bfloat16 A, sm_80+, B with rows enough for the GPU's warps:
  :mod:`.nbits_mma`): ``nbits_mma_b4_*`` turns each code into an exact
  ``code - zero_point`` of A's type and multiplies on tensor cores (``mma.m16n8k16``,
  float32 sums), scaling each 32-code unit's sum in float32. Each warp reads its 16 rows
  of B, their scales and zero points in stages of 16 units, loaded into registers (16-byte
  loads) while it sums the previous stage from shared memory, over a persistent grid.
- **gemv** (M = rows of A <= :data:`GEMV_MAX_M`, a decode step): ``nbits_gemv_*`` reads B in
  its stored layout, 16 bytes a load, dequantizes in registers and accumulates in float32
  (one launch, no workspace). A is staged in shared memory as float32; rows of B that are
  not whole 16-byte chunks, or an A too large for :data:`GEMV_SMEM_MAX`, take the GEMM route.
- **gemm** (larger M, a prefill): ``nbits_dequant_*`` writes W (``[rows, K]`` of A's dtype)
  into the workspace and cuBLASLt multiplies (:mod:`~onnx_ep.providers.cuda.blas`, float32
  accumulation). W is dequantized :data:`DEQUANT_BUDGET` bytes at a time: with more than one
  chunk the product goes to workspace and ``nbits_scatter_*`` moves it into Y's columns. A
  bias is written first and the GEMM adds onto it (``beta = 1``), as MatMulAdd does.

``accuracy_level`` is ignored: every route accumulates in float32 (onnxruntime CPU's int8
quantization of A at level 4 is not emulated; the reference defines the answer).
Declined (cpu_reference runs them): ``g_idx`` (act order), ``weight_prepacked``, float64 A.

Numerics against the reference (float64 weights and sum, rounded once): the gemv sums
exact ``code - zero_point`` products in float32; the gemm route rounds each weight to A's
type (as the spec's dequantized weight is; the reference keeps it exact), half an ulp of
float16/bfloat16 per weight, and a biased product is rounded before the bias is added.
:data:`NBITS_PARITY` bounds both for outputs of unit scale (``sum_k |a_k w_k|`` of order
ten): float32 MatMul's promise, float16/bfloat16 MatMul's rtol with an absolute part of
two weight roundings (and MatMulAdd's for a bias).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

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
    BF16,
    BLOCK,
    I32,
    I64,
    PTR,
    CudaKernel,
    dtype_names,
    grid_1d,
    prod,
    replayed,
    static_shape,
    struct_arg,
    suffix,
)
from onnx_ep.providers.cuda.kernels.fused_gemm import MATMUL_ADD_PARITY, MS_DOMAIN
from onnx_ep.providers.cuda.kernels.gemm import problem_alignment
from onnx_ep.providers.cuda.kernels.nbits_mma import (
    SMEM_MAX,
    Mma,
    NbMma,
    mma_geometry,
    resident_blocks,
)
from onnx_ep.providers.shared.nbits import NBITS_BITS, NBitsGeometry, nbits_geometry  # noqa: F401

#: A's dtypes (the scales', typed zero points' and bias' too)
NBITS_FLOATS: frozenset[np.dtype] = frozenset(
    np.dtype(t) for t in (np.float32, np.float16, BF16))
U8 = np.dtype(np.uint8)

#: the most rows of A the gemv route takes (decode steps; a prefill goes to cuBLASLt)
GEMV_MAX_M = 8
#: rows of A each gemv kernel is built for (``nbits_gemv_b<bits>_m<rows>r<rb>_*``)
GEMV_ROWS = (1, 4, 8)
#: per (rows of A, rows of B a thread takes at once): the most 16-byte chunks of a row a
#: thread holds at once (MAXU of nbits.cu's EP_NB_GEMV)
GEMV_MAXU: dict[tuple[int, int], int] = {(1, 1): 4, (1, 4): 2, (4, 1): 2, (8, 1): 2}
#: rows of B a thread of the one-row-of-A kernel takes at once when there are many
GEMV_RB = 4
#: threads of a gemv block at most, and at least
GEMV_THREADS = 256
GEMV_MIN_THREADS = 64
#: threads the gemv aims for (about a full H200): more rows of B than this fills take
#: GEMV_RB rows a thread, so a thread keeps more loads in flight and reads A once for them
GEMV_TARGET_THREADS = 1 << 17
#: blocks the gemv aims for at least (two per H200 multiprocessor), and launches at most
GEMV_MIN_BLOCKS = 264
GEMV_MAX_BLOCKS = 4096
#: shared memory of the gemv's staged A (float32, plus one sum per 16 values); above 48 KiB
#: the kernel is opted in to more (every sm_80+ device allows 96 KiB)
GEMV_SMEM_MAX = SMEM_MAX
GEMV_SMEM_DEFAULT = 48 * 1024
#: workspace bytes of one chunk of dequantized weights (and its product) on the gemm route
DEQUANT_BUDGET = 64 << 20
#: rows of a chunk are a multiple of this
DEQUANT_ROW_ALIGN = 64

#: promise per A dtype, for outputs of unit scale (module docstring)
NBITS_PARITY: dict[str, Parity] = {
    "float32": blas.GEMM_PARITY["float32"],
    "float16": Parity.tolerance(rtol=blas.GEMM_PARITY["float16"].rtol, atol=2.0 ** -9),
    "bfloat16": Parity.tolerance(rtol=blas.GEMM_PARITY["bfloat16"].rtol, atol=2.0 ** -6),
}
#: the same with a bias, which the gemm route adds to a product already rounded to A's type
NBITS_BIAS_PARITY: dict[str, Parity] = {
    name: Parity.tolerance(p.rtol, max(p.atol, MATMUL_ADD_PARITY[name].atol))
    for name, p in NBITS_PARITY.items()}


#: this kernel's plan is the shared geometry (attributes checked as cpu_reference checks them)
NBitsPlan = NBitsGeometry
nbits_plan = nbits_geometry


class NbGeo(ctypes.Structure):
    """``struct NbGeo`` of nbits.cu (by value)."""

    _fields_ = [("n", ctypes.c_int64), ("k", ctypes.c_int32), ("padded_k", ctypes.c_int32),
                ("m", ctypes.c_int32), ("n_blocks", ctypes.c_int32),
                ("log2_block", ctypes.c_int32), ("row_bytes", ctypes.c_int32),
                ("chunks", ctypes.c_int32), ("tpr", ctypes.c_int32), ("cpt", ctypes.c_int32),
                ("zp_mode", ctypes.c_int32), ("zp_row_bytes", ctypes.c_int32)]


def row_bytes(plan: NBitsPlan) -> int:
    """Bytes of one row of B (its ``n_blocks`` blobs)."""
    return plan.n_blocks * plan.blob


def zp_row_bytes(plan: NBitsPlan) -> int:
    """Bytes of one row of packed uint8 zero points (``ceil(n_blocks * bits / 8)``)."""
    return -(-plan.n_blocks * plan.bits // 8)


def _arch(ctx: ExecutionContext) -> int:
    """The device's compute capability as 80, 90, ... (0 when the stream does not say)."""
    arch = getattr(getattr(ctx.stream, "device", None), "arch", "")
    return int(arch[3:]) if isinstance(arch, str) and arch[3:].isdigit() else 0


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


@attrs.frozen
class Gemv:
    """One gemv launch: ``nbits_gemv_b<bits>_m<rows>r<rb>_*`` on ``grid`` x ``threads``,
    ``tpr`` threads per output column, each loading ``cpt`` of the row's ``chunks`` a pass
    for ``rb`` rows at once, ``shared_bytes`` of staged A."""

    rows: int
    rb: int
    tpr: int
    cpt: int
    chunks: int
    grid: tuple[int, int, int]
    threads: int
    shared_bytes: int

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.threads, 1, 1)


def a_stride(padded_k: int) -> int:
    """Floats of one staged row of A: 4 of padding after every 32 (``apad`` of nbits.cu,
    which keeps the threads of a row on distinct shared-memory banks)."""
    return padded_k + 4 * (-(-padded_k // 32))


def gemv_shared_bytes(plan: NBitsPlan, m: int) -> int:
    """A staged as float32 (``m`` padded rows, :func:`a_stride`) and one float per 16 of
    its values."""
    return 4 * m * (a_stride(plan.padded_k) + plan.padded_k // 16)


def _threads_per_row(chunks: int, each: int) -> int:
    """Threads (a power of two, 8 to 256) for a row of ``chunks``, ``each`` a thread."""
    return min(GEMV_THREADS, max(8, _pow2_at_least(-(-chunks // each))))


def gemv_geometry(plan: NBitsPlan, m: int) -> Gemv | None:
    """THE route decision: the gemv launch for ``m`` rows of A, or ``None`` for the gemm
    route (too many rows, rows of B that are not whole 16-byte chunks, A too large to stage).

    Threads per row: enough that each holds three of the row's chunks with one row of A,
    two with more (8 to 256), so every load of a row is in flight at once (a longer row
    takes passes of ``cpt`` chunks; on the H200 the 0.5B down projection, 152 chunks a
    row, took 10.1 us with 64 threads of 3 against 13.2 with 128 of 2 and 15.5 with 256 of
    1, L2 flushed). With one row of A and more rows of B than :data:`GEMV_TARGET_THREADS`
    threads cover, a thread takes :data:`GEMV_RB` rows, two chunks of each. Blocks shrink to
    :data:`GEMV_MIN_THREADS` threads while there are fewer than :data:`GEMV_MIN_BLOCKS`.
    """
    rb = row_bytes(plan)
    if not 1 <= m <= GEMV_MAX_M or rb % 16:
        return None
    smem = gemv_shared_bytes(plan, m)
    if smem > GEMV_SMEM_MAX:
        return None
    rows = next(r for r in GEMV_ROWS if r >= m)
    chunks = rb // 16
    tpr = _threads_per_row(chunks, 3 if rows == 1 else 2)
    rb_rows = 1
    wide = _threads_per_row(chunks, GEMV_MAXU[(1, GEMV_RB)])
    if rows == 1 and plan.n * wide >= GEMV_RB * GEMV_TARGET_THREADS:
        rb_rows, tpr = GEMV_RB, wide
    cpt = min(-(-chunks // tpr), GEMV_MAXU[(rows, rb_rows)])
    threads = GEMV_THREADS
    while (threads > max(tpr, GEMV_MIN_THREADS)
           and -(-plan.n // (threads // tpr * rb_rows)) < GEMV_MIN_BLOCKS):
        threads //= 2
    blocks = min(-(-plan.n // (threads // tpr * rb_rows)), GEMV_MAX_BLOCKS)
    return Gemv(rows, rb_rows, tpr, cpt, chunks, (blocks, 1, 1), threads, smem)


def _align(n: int) -> int:
    return blas.align_up(n, blas.WORKSPACE_ALIGNMENT)


@attrs.frozen
class GemmRoute:
    """The gemm route: W dequantized ``rows`` at a time into the workspace (``w_bytes``),
    the product of a chunk into ``t_bytes`` after it when there is more than one chunk,
    cuBLASLt's workspace after both (``fixed_bytes`` from the start)."""

    m: int
    n: int
    k: int
    dtype: str
    itemsize: int
    rows: int

    @property
    def chunks(self) -> int:
        return -(-self.n // self.rows)

    @property
    def w_bytes(self) -> int:
        return _align(self.rows * self.k * self.itemsize)

    @property
    def t_bytes(self) -> int:
        return _align(self.m * self.rows * self.itemsize) if self.chunks > 1 else 0

    @property
    def fixed_bytes(self) -> int:
        return self.w_bytes + self.t_bytes

    def problem(self, rows: int) -> blas.GemmProblem:
        """``[m, rows] = A [m, K] @ W[rows, K]^T``."""
        return blas.GemmProblem(self.dtype, self.m, rows, self.k, trans_b=True,
                                alignment=problem_alignment(self.itemsize))

    def problems(self) -> list[blas.GemmProblem]:
        """The distinct GEMMs: full chunks and the last one."""
        last = self.n - (self.chunks - 1) * self.rows
        return [self.problem(r) for r in dict.fromkeys((self.rows, last))]


def gemm_route(plan: NBitsPlan, m: int, dtype: Any) -> GemmRoute:
    """THE gemm-route layout: every row at once within :data:`DEQUANT_BUDGET`, else chunks
    of a multiple of :data:`DEQUANT_ROW_ALIGN` rows whose weights and product fit it."""
    dt = np.dtype(dtype)
    isz = dt.itemsize
    if plan.n * plan.k * isz <= DEQUANT_BUDGET:
        rows = plan.n
    else:
        rows = DEQUANT_BUDGET // ((plan.k + m) * isz) // DEQUANT_ROW_ALIGN * DEQUANT_ROW_ALIGN
        rows = min(plan.n, max(DEQUANT_ROW_ALIGN, rows))
    return GemmRoute(m, plan.n, plan.k, blas.dtype_name(dt), isz, rows)


# ---------------------------------------------------------------- support


def _supports(meta: NodeMeta) -> Support:
    specs = meta.inputs
    if len(specs) < 3 or any(specs[i] is None for i in range(3)):
        return Support.no("needs A, B and scales of known dtype and rank")
    a, b, scales = specs[:3]
    if a.dtype not in NBITS_FLOATS:
        return Support.no(f"A dtype {a.dtype} is not one of {dtype_names(NBITS_FLOATS)} "
                          f"(cpu_reference runs it)")
    if b.dtype != U8:
        return Support.no(f"B must be uint8, got {b.dtype}")
    if scales.dtype != a.dtype:
        return Support.no(f"scales are {scales.dtype}, A is {a.dtype}")
    if meta.attr("weight_prepacked", 0):
        return Support.no("weight_prepacked is an execution provider's private layout")
    try:
        plan = nbits_plan(meta)
    except NodeError as e:
        return Support.no(e.detail)
    if meta.given(3):
        zp = specs[3]
        if zp is None or zp.dtype not in (U8, a.dtype):
            return Support.no(f"zero_points must be uint8 or {a.dtype}, got "
                              f"{None if zp is None else zp.dtype}")
    if meta.given(4):
        return Support.no("g_idx (act-order) is not implemented on cuda; cpu_reference "
                          "runs it")
    if meta.given(5):
        bias = specs[5]
        if bias is None or bias.dtype != a.dtype:
            return Support.no(f"bias must be {a.dtype}")
    if a.shape and isinstance(a.shape[-1], int) and a.shape[-1] != plan.k:
        return Support.no(f"A {tuple(a.shape)} must have a last dim of K={plan.k}")
    if not a.shape:
        return Support.no("A must have rank >= 1")
    if not blas.support():
        sa = static_shape(a)
        if sa is None or gemv_geometry(plan, prod(sa[:-1])) is None:
            return Support.no(f"{blas.support().reason} (rows of A beyond the gemv route)")
    return Support.YES


# ---------------------------------------------------------------- the kernel


class MatMulNBits(CudaKernel):
    """``A @ dequant(B)^T (+ bias)``: the gemv route for decode steps, dequantize + cuBLASLt
    for larger M (module docstring)."""

    source = "nbits"

    def __init__(self, plan: NBitsPlan | None = None) -> None:
        super().__init__("MatMulNBits", since=1)
        self.key = OpKey(MS_DOMAIN, "MatMulNBits", 1)
        self.parity = NBITS_PARITY["float32"]
        self.plan = plan

    def supports(self, meta: NodeMeta) -> Support:
        return _supports(meta)

    def bind(self, meta: NodeMeta) -> MatMulNBits:
        try:
            plan: NBitsPlan | None = nbits_plan(meta)
        except NodeError:
            plan = None     # execution raises it
        bound = MatMulNBits(plan)
        a = meta.inputs[0] if meta.inputs else None
        bound.parity = self.parity_for(a.dtype if a is not None else None, meta.given(5))
        return bound

    def parity_for(self, dtype: Any, bias: bool = False) -> Parity:
        """The promise for A of ``dtype`` (module docstring), with or without a bias."""
        if dtype is None:
            return self.parity
        table = NBITS_BIAS_PARITY if bias else NBITS_PARITY
        return table.get(np.dtype(dtype).name, self.parity)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        a, n = meta.inputs[0], meta.attr("N")
        if a is None or n is None:
            return [None]
        return [TensorSpec(a.dtype, tuple(a.shape[:-1]) + (int(n),))]

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        a = meta.inputs[0] if meta.inputs else None
        b = meta.inputs[1] if len(meta.inputs) > 1 else None
        if a is None or not a.is_static or (b is not None and b.is_static and 0 in b.shape):
            return WorkspaceRequirement.NONE
        try:
            plan = self.plan or nbits_plan(meta)
        except NodeError:
            return WorkspaceRequirement.NONE    # execution raises it
        m = prod(a.shape[:-1])
        if m == 0 or gemv_geometry(plan, m) is not None:
            return WorkspaceRequirement.NONE
        route = gemm_route(plan, m, a.dtype)
        gemm = max(blas.workspace_bytes(p) for p in route.problems())
        return WorkspaceRequirement(route.fixed_bytes + gemm)

    # ------------------------------------------------------------ execution
    def _plan(self, ctx: ExecutionContext) -> NBitsPlan:
        if self.plan is not None:
            return self.plan
        try:
            return nbits_plan(ctx.node)
        except NodeError as e:
            raise self.fail(ctx, e.detail) from None

    def _check(self, ctx: ExecutionContext, plan: NBitsPlan, a: Any, b: Any, scales: Any,
               zp: Any, g_idx: Any, bias: Any) -> int:
        """Raise a NodeError naming an input that does not fit the node; the zero-point mode
        of nbits.cu (0 none, 1 packed uint8, 2 of A's dtype)."""
        if a.dtype not in NBITS_FLOATS or a.ndim < 1 or a.shape[-1] != plan.k:
            raise self.fail(ctx, f"A {a.dtype} {a.shape} must be float32, float16 or "
                                 f"bfloat16 with a last dim of K={plan.k}")
        want = (plan.n, plan.n_blocks, plan.blob)
        if b.dtype != U8 or b.ndim != 3 or any(d not in (0, w) for d, w in zip(b.shape, want)):
            raise self.fail(ctx, f"B {b.dtype} {b.shape} must be uint8 of shape {want}")
        if b.size == 0:
            mode = 0
        elif scales.dtype != a.dtype or scales.size != plan.n * plan.n_blocks:
            raise self.fail(ctx, f"scales must be {a.dtype} of shape "
                                 f"{(plan.n, plan.n_blocks)} (or flat), got {scales.dtype} "
                                 f"{scales.shape}")
        elif zp is None:
            mode = 0
        elif zp.dtype == U8 and zp.size == plan.n * zp_row_bytes(plan):
            mode = 1
        elif zp.dtype == a.dtype and zp.size == plan.n * plan.n_blocks:
            mode = 2
        else:
            raise self.fail(ctx, f"zero_points must be packed uint8 of shape "
                                 f"{(plan.n, zp_row_bytes(plan))} or {a.dtype} of shape "
                                 f"{(plan.n, plan.n_blocks)} (or flat), got {zp.dtype} "
                                 f"{zp.shape}")
        if g_idx is not None:
            raise self.fail(ctx, "g_idx is not implemented on cuda")
        if bias is not None and (bias.dtype != a.dtype or tuple(bias.shape) != (plan.n,)):
            raise self.fail(ctx, f"bias must be {a.dtype} of shape ({plan.n},), got "
                                 f"{bias.dtype} {bias.shape}")
        return mode

    @replayed
    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        plan = self._plan(ctx)
        a, b, scales = inputs[0], inputs[1], inputs[2]
        zp, g_idx, bias = (inputs[i] if len(inputs) > i else None for i in (3, 4, 5))
        y = outputs[0]
        mode = self._check(ctx, plan, a, b, scales, zp, g_idx, bias)
        m = prod(a.shape[:-1])
        if m == 0:
            return
        if b.size == 0:     # an omitted projection: the bias, or zeros
            if bias is None:
                copies.memset_d8(y.ptr, 0, y.nbytes, ctx.stream)
            else:
                self._write_bias(ctx, y.ptr, bias.ptr, m, plan.n, y)
            return
        geo = NbGeo(plan.n, plan.k, plan.padded_k, m, plan.n_blocks,
                    int(plan.block).bit_length() - 1, row_bytes(plan), 0, 0, 0, mode,
                    zp_row_bytes(plan))
        zp_ptr = int(zp.ptr) if zp is not None else 0
        bias_ptr = int(bias.ptr) if bias is not None else 0
        mma = mma_geometry(plan, m, a.dtype, mode, _arch(ctx))
        if mma is not None:
            self._mma(ctx, mma, plan, m, mode, a, b, scales, zp_ptr, bias_ptr, y)
            return
        gemv = gemv_geometry(plan, m)
        if gemv is not None:
            self._gemv(ctx, gemv, geo, a, b, scales, zp_ptr, bias_ptr, y, plan.bits)
        else:
            self._gemm(ctx, plan, geo, a, b, scales, zp_ptr, bias, y, workspace)

    def _gemv(self, ctx: ExecutionContext, gemv: Gemv, geo: NbGeo, a: Any, b: Any,
              scales: Any, zp_ptr: int, bias_ptr: int, y: Any, bits: int) -> None:
        if int(b.ptr) % 16:
            raise self.fail(ctx, f"B at 0x{int(b.ptr):x} is not 16-byte aligned (the gemv "
                                 f"reads it 16 bytes at a time)")
        geo.chunks, geo.tpr, geo.cpt = gemv.chunks, gemv.tpr, gemv.cpt
        fn = self.function(f"nbits_gemv_b{bits}_m{gemv.rows}r{gemv.rb}_{suffix(a.dtype)}", a)
        if gemv.shared_bytes > GEMV_SMEM_DEFAULT:
            from onnx_ep.providers.cuda import launch

            launch.allow_dynamic_shared(fn)
        self.launch(fn, gemv.grid, gemv.block,
                    [(a.ptr, PTR), (b.ptr, PTR), (scales.ptr, PTR), (zp_ptr, PTR),
                     (bias_ptr, PTR), (y.ptr, PTR), struct_arg(geo)], ctx.stream,
                    shared_bytes=gemv.shared_bytes)

    def _mma(self, ctx: ExecutionContext, mma: Mma, plan: NBitsPlan, m: int, mode: int,
             a: Any, b: Any, scales: Any, zp_ptr: int, bias_ptr: int, y: Any) -> None:
        if int(b.ptr) % 16:
            raise self.fail(ctx, f"B at 0x{int(b.ptr):x} is not 16-byte aligned (the "
                                 f"tensor-core gemv reads it 16 bytes at a time)")
        geo = NbMma(plan.n, plan.k, m, plan.n_blocks, int(plan.block).bit_length() - 1,
                    row_bytes(plan), plan.k // 32, mma.kw, mma.upw, mode, zp_row_bytes(plan))
        fn = self.function(f"nbits_mma_b4_{suffix(a.dtype)}", a)
        if mma.shared_bytes > GEMV_SMEM_DEFAULT:
            from onnx_ep.providers.cuda import launch

            launch.allow_dynamic_shared(fn)
        # a persistent grid: each warp's loads run on from tile to tile (the next tile's
        # first stage in flight while this one's last is summed) instead of a block ending
        # after one
        resident = resident_blocks(ctx, fn, mma.threads, mma.shared_bytes)
        grid = (min(mma.grid[0], resident), 1, 1) if resident > 0 else mma.grid
        self.launch(fn, grid, mma.block,
                    [(a.ptr, PTR), (b.ptr, PTR), (scales.ptr, PTR), (zp_ptr, PTR),
                     (bias_ptr, PTR), (y.ptr, PTR), struct_arg(geo)], ctx.stream,
                    shared_bytes=mma.shared_bytes)

    def _write_bias(self, ctx: ExecutionContext, dst: int, bias_ptr: int, m: int, cols: int,
                    like: Any) -> None:
        """``dst [m, cols]`` = the bias row at ``bias_ptr`` on every row."""
        fn = self.function(f"broadcast_rows_{suffix(like.dtype)}", like, source="gemm")
        self.launch(fn, grid_1d(m * cols), (BLOCK, 1, 1),
                    [(dst, PTR), (bias_ptr, PTR), (m * cols, I64), (1, I64), (cols, I64),
                     (0, I64), (1, I64)], ctx.stream)

    def _gemm(self, ctx: ExecutionContext, plan: NBitsPlan, geo: NbGeo, a: Any, b: Any,
              scales: Any, zp_ptr: int, bias: Any, y: Any,
              workspace: WorkspaceView | None) -> None:
        route = gemm_route(plan, geo.m, a.dtype)
        if workspace is None:
            raise self.fail(ctx, f"the gemm route (M={geo.m}) needs its workspace")
        workspace.require(route.fixed_bytes)
        base = int(workspace.buffer.ptr)
        w_ptr, t_ptr = base, base + route.w_bytes
        g_ptr, g_n = base + route.fixed_bytes, workspace.nbytes - route.fixed_bytes
        isz = a.dtype.itemsize
        sfx = suffix(a.dtype)
        dequant = self.function(f"nbits_dequant_b{plan.bits}_{sfx}", a)
        scatter = self.function(f"nbits_scatter_b{8 * isz}", a)
        vec = int(plan.k * isz % 16 == 0)
        groups = plan.padded_k // 16
        for n0 in range(0, plan.n, route.rows):
            rows = min(route.rows, plan.n - n0)
            self.launch(dequant, grid_1d(rows * groups), (BLOCK, 1, 1),
                        [(b.ptr, PTR), (scales.ptr, PTR), (zp_ptr, PTR), (w_ptr, PTR),
                         struct_arg(geo), (n0, I64), (rows, I64), (vec, I32)], ctx.stream)
            dst = y.ptr if route.chunks == 1 else t_ptr
            if bias is not None:
                self._write_bias(ctx, dst, int(bias.ptr) + n0 * isz, geo.m, rows, a)
            blas.run(route.problem(rows), a.ptr, w_ptr, dst, ctx.stream, g_ptr, g_n,
                     beta=1.0 if bias is not None else 0.0, ordinal=a.device,
                     fit_workspace=True)
            if route.chunks > 1:
                self.launch(scatter, grid_1d(geo.m * rows), (BLOCK, 1, 1),
                            [(y.ptr, PTR), (t_ptr, PTR), (geo.m, I64), (rows, I64),
                             (plan.n, I64), (n0, I64)], ctx.stream)

