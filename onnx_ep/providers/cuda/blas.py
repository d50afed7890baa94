"""cuBLASLt through ``nvmath.bindings.cublasLt``: row-major GEMM plans, cached per problem.

A :class:`GemmProblem` says what to multiply in row-major terms (the layout of
ONNX tensors); :func:`lt_operands` turns it into cuBLASLt's column-major view by
the transposition trick: a row-major ``D = op(A) @ op(B)`` is, read
column-major, ``D^T = op(B)^T @ op(A)^T``, so B is passed as cuBLASLt's first
operand and A as its second, with no data moved.

:func:`matmul_plan` builds the descriptors, layouts and preference once per
(device, problem) and runs the heuristic query (``cublasLtMatmulAlgoGetHeuristic``)
there. Kernels call it from ``workspace_requirement`` at plan time, so the
query never happens while a stream captures, and call the SAME function in
``execute_with_workspace``, where it is a dict lookup; the plan's
:attr:`MatmulPlan.workspace_size` (the chosen algorithm's exact bytes) is what
the kernel declared, and :func:`run` hands the view's pointer and size to
``cublasLtMatmul``.

Numerics: compute type ``CUBLAS_COMPUTE_32F`` and scale type float32 for
float32, float16 and bfloat16 operands (plain 32F, not ``FAST_TF32``, so float32
products keep 24 bits). cpu_reference accumulates in float64 and rounds once,
so results agree to :data:`GEMM_PARITY` (per dtype), not bit for bit.

Bias epilogue: a problem with ``bias=True`` adds a vector of ``n`` values to every
row of the row-major D inside the GEMM (``CUBLASLT_EPILOGUE_BIAS``). cuBLASLt's bias
runs along the rows of its column-major D, which is our D transposed (``n`` rows):
one bias value per row-major output column, as a ``Linear`` layer needs. The bias
has D's type (``CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE`` is left at -1, which means D's
type for every kernel that is neither IMMA nor FP8). Its pointer is a per-call
attribute of the plan's shared descriptor: :func:`run` sets it and enqueues under the
plan's lock, so sessions and threads sharing a plan never enqueue another's bias.

nvmath is imported on first use: ``import onnx_ep`` works without it.
"""

from __future__ import annotations

import functools
import importlib
import threading
from types import ModuleType
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.kernel import Parity, Support
from onnx_ep.errors import CudaError, WorkspaceTooSmall
from onnx_ep.providers.cuda import launch

#: cudaDataType_t of the operand dtypes cuBLASLt runs for us (numpy dtype name -> value)
CUDA_DATA_TYPE = {"float32": 0, "float16": 2, "bfloat16": 14}
#: cublasComputeType_t CUBLAS_COMPUTE_32F (not FAST_TF32: float32 keeps full precision)
COMPUTE_32F = 68
#: cudaDataType_t CUDA_R_32F: alpha and beta are float32 for every operand dtype
SCALE_TYPE_32F = 0
#: the most workspace a heuristic may pick; the plan declares the chosen algorithm's bytes
MAX_WORKSPACE_BYTES = 32 * 2**20
#: pointer alignment (bytes) plans assume; smaller actual alignments get their own plan
PLAN_ALIGNMENT = 16
#: cuBLASLt workspaces must start on this boundary
WORKSPACE_ALIGNMENT = 256
#: bias pointers the epilogue takes: cuBLASLt's preferences bound the alignment of A, B, C
#: and D but not of the bias vector, and a kernel may load it 16 bytes at a time
BIAS_ALIGNMENT = 16
#: the statuses that mean "no algorithm for this problem" (remembered, never re-queried);
#: INVALID_VALUE is what a cuBLASLt without the requested epilogue answers
NO_ALGORITHM = frozenset({"CUBLAS_STATUS_NOT_SUPPORTED", "CUBLAS_STATUS_INVALID_VALUE"})

#: honest bounds against cpu_reference (float64 accumulation, rounded once) for operands of
#: unit scale: float32 sums in float32 in cuBLAS's order (K up to a few thousand); float16
#: and bfloat16 sum in float32 and round once, so at most one ulp of the output type off
GEMM_PARITY: dict[str, Parity] = {
    "float32": Parity.tolerance(rtol=1e-4, atol=1e-5),
    "float16": Parity.tolerance(rtol=2e-3, atol=1e-4),
    "bfloat16": Parity.tolerance(rtol=1.6e-2, atol=1e-3),
}


_lt: ModuleType | None = None


def lt() -> ModuleType:
    """``nvmath.bindings.cublasLt``, imported on first use (then kept: every enqueue asks)."""
    global _lt
    if _lt is None:
        _lt = importlib.import_module("nvmath.bindings.cublasLt")
    return _lt


@functools.cache
def is_available() -> bool:
    """Whether nvmath-python's cuBLASLt bindings import here (cached)."""
    try:
        lt()
    except ImportError:
        return False
    return True


def support() -> Support:
    """:data:`Support.YES` when cuBLASLt's bindings import, else why not (kernels decline)."""
    if is_available():
        return Support.YES
    return Support.no("nvmath-python is not installed (cuBLASLt bindings); "
                      "pip install nvmath-python to run GEMM-based ops on cuda")


def dtype_name(dtype: Any) -> str:
    """``"float32"``, ``"float16"`` or ``"bfloat16"`` (ml_dtypes' name); others as numpy names."""
    return np.dtype(dtype).name


def parity_for(dtype: Any) -> Parity:
    """The GEMM promise for operands of ``dtype``."""
    return GEMM_PARITY.get(dtype_name(dtype), GEMM_PARITY["float32"])


# ---------------------------------------------------------------- problems and layouts

@attrs.frozen
class GemmProblem:
    """Row-major ``D[i] (m x n) = op(A[i]) (m x k) @ op(B[i]) (k x n)`` for ``i < batch``.

    Operands are dense and C-contiguous in their stored shape: A is stored
    ``(m, k)``, or ``(k, m)`` when ``trans_a``; B ``(k, n)`` or ``(n, k)``; D ``(m, n)``.

    :ivar stride_a, stride_b, stride_d: elements between consecutive batch matrices.
    :ivar alignment: the byte alignment every pointer is known to have.
    :ivar bias: add a vector of ``n`` values to every row of D in cuBLASLt's epilogue
        (``D = op(A) @ op(B) + bias``); its plan differs from the plain one (descriptor
        and heuristic), so the flag is part of the plan key.
    """

    dtype: str
    m: int
    n: int
    k: int
    batch: int = 1
    trans_a: bool = False
    trans_b: bool = False
    stride_a: int = 0
    stride_b: int = 0
    stride_d: int = 0
    alignment: int = PLAN_ALIGNMENT
    bias: bool = False

    def with_alignment(self, alignment: int) -> GemmProblem:
        return attrs.evolve(self, alignment=int(alignment))


@attrs.frozen
class Layout:
    """A cuBLASLt column-major matrix layout: ``rows x cols``, ``ld`` elements per column."""

    rows: int
    cols: int
    ld: int
    batch: int = 1
    stride: int = 0


@attrs.frozen
class LtOperands:
    """cuBLASLt's view of a :class:`GemmProblem`: ``D_cm = op(first) @ op(second)``.

    ``first`` is the problem's B and ``second`` its A (the transposition trick);
    C has D's layout.
    """

    trans_first: bool
    trans_second: bool
    first: Layout
    second: Layout
    d: Layout


def lt_operands(p: GemmProblem) -> LtOperands:
    """The column-major layouts and transposes that compute row-major ``p``.

    A row-major matrix stored ``(r, c)`` is, read column-major, a ``c x r`` matrix
    with leading dimension ``c``: its transpose, for free.
    """
    b_stored = (p.n, p.k) if p.trans_b else (p.k, p.n)
    a_stored = (p.k, p.m) if p.trans_a else (p.m, p.k)
    batched = p.batch > 1
    first = Layout(b_stored[1], b_stored[0], b_stored[1], p.batch,
                   p.stride_b if batched else 0)
    second = Layout(a_stored[1], a_stored[0], a_stored[1], p.batch,
                    p.stride_a if batched else 0)
    d = Layout(p.n, p.m, p.n, p.batch, p.stride_d if batched else 0)
    return LtOperands(p.trans_b, p.trans_a, first, second, d)


def pointer_alignment(*ptrs: int, cap: int = PLAN_ALIGNMENT) -> int:
    """The largest power of two (at most ``cap``) dividing every pointer."""
    align = cap
    for p in ptrs:
        p = int(p)
        if p:
            align = min(align, p & -p)
    return align


def align_up(nbytes: int, alignment: int = WORKSPACE_ALIGNMENT) -> int:
    return -(-int(nbytes) // alignment) * alignment


# ---------------------------------------------------------------- handles and plans

_lock = threading.RLock()
_handles: dict[int, int] = {}
_plans: dict[tuple[int, GemmProblem, int], MatmulPlan] = {}
#: bias-problem plan keys cuBLASLt had no algorithm for, with the error it gave
_no_plan: dict[tuple[int, GemmProblem, int], CudaError] = {}
#: calls enqueued before, by every argument (pointers included): a run of a planned
#: signature repeats them, so the checks, the plan lookup and the argument tuple are reused
_calls: dict[tuple[Any, ...], tuple[MatmulPlan, Any]] = {}
MAX_CACHED_CALLS = 8192
_scalars: dict[tuple[float, float], np.ndarray] = {}


def _lt_error(exc: Exception, what: str) -> CudaError:
    status = getattr(exc, "status", None)
    name = None
    if status is not None:
        try:
            name = lt().get_status_name(int(status))
        except Exception:  # noqa: BLE001 - the name is decoration; keep the original error
            name = None
    name = name or str(exc).split(":")[0].strip() or "CUBLAS_STATUS_UNKNOWN"
    return CudaError(f"{what} failed: {exc}", error_name=name)


def handle(ordinal: int = 0) -> int:
    """The cuBLASLt handle of device ``ordinal`` (created once, kept for the process)."""
    h = _handles.get(ordinal)
    if h is None:
        with _lock:
            h = _handles.get(ordinal)
            if h is None:
                from onnx_ep.providers.cuda.device import get_device

                get_device(ordinal).set_current()
                try:
                    h = _handles[ordinal] = int(lt().create())
                except Exception as e:  # cuBLASLtError, or the library not found
                    raise _lt_error(e, "cublasLtCreate") from e
    return h


def _set(setter: Any, dtype_of: Any, obj: int, attr: Any, value: Any) -> None:
    buf = np.array(value, dtype=dtype_of(attr))
    setter(obj, attr, buf.ctypes.data, buf.itemsize)


class MatmulPlan:
    """Descriptors, layouts, preference and the chosen algorithm of one problem.

    :ivar problem: the :class:`GemmProblem`. :ivar workspace_size: the algorithm's
        exact workspace bytes (what ``workspace_requirement`` declares).
    :ivar lock: held by :func:`run` from setting a bias pointer on :attr:`desc` until
        ``cublasLtMatmul`` has read it (the enqueue), since plans are shared.
    """

    def __init__(self, ordinal: int, problem: GemmProblem, max_workspace: int) -> None:
        self.problem = problem
        self.ordinal = ordinal
        self.handle = handle(ordinal)
        self.lock = threading.Lock()
        self._bias_ptr: int | None = None
        self._objects: list[tuple[Any, int]] = []
        try:
            self._build(max_workspace)
        except Exception as e:
            self.close()
            if isinstance(e, CudaError):
                raise
            raise _lt_error(e, f"cuBLASLt plan for {problem}") from e

    def _build(self, max_workspace: int) -> None:
        c = lt()
        p = self.problem
        dt = CUDA_DATA_TYPE[p.dtype]
        ops = lt_operands(p)
        self.operands = ops
        desc = c.matmul_desc_create(COMPUTE_32F, SCALE_TYPE_32F)
        self._objects.append((c.matmul_desc_destroy, desc))
        da = c.MatmulDescAttribute
        setd = c.matmul_desc_set_attribute
        getd = c.get_matmul_desc_attribute_dtype
        _set(setd, getd, desc, da.TRANSA, int(ops.trans_first))
        _set(setd, getd, desc, da.TRANSB, int(ops.trans_second))
        if p.bias:
            # the pointer is set per call (point_bias); the heuristic needs only the epilogue
            _set(setd, getd, desc, da.EPILOGUE, int(c.Epilogue.BIAS))
        self.desc = desc
        self.first = self._layout(dt, ops.first)
        self.second = self._layout(dt, ops.second)
        self.d = self._layout(dt, ops.d)
        pref = c.matmul_preference_create()
        self._objects.append((c.matmul_preference_destroy, pref))
        pa = c.MatmulPreferenceAttribute
        setp = c.matmul_preference_set_attribute
        getp = c.get_matmul_preference_attribute_dtype
        _set(setp, getp, pref, pa.MAX_WORKSPACE_BYTES, int(max_workspace))
        for attr in (pa.MIN_ALIGNMENT_A_BYTES, pa.MIN_ALIGNMENT_B_BYTES,
                     pa.MIN_ALIGNMENT_C_BYTES, pa.MIN_ALIGNMENT_D_BYTES):
            _set(setp, getp, pref, attr, int(p.alignment))
        if p.bias:
            # split-K only with float32 partial sums reduced in a fixed order: in-place and
            # output-type reductions sum (and add the bias) in D's type, rounding a float16
            # result more than once, and the in-place one is not deterministic
            _set(setp, getp, pref, pa.REDUCTION_SCHEME_MASK,
                 int(c.ReductionScheme.COMPUTE_TYPE))
        self.preference = pref
        self.result = c.MatmulHeuristicResult(1)
        count = np.zeros(1, dtype=np.int32)
        c.matmul_algo_get_heuristic(self.handle, desc, self.first, self.second, self.d,
                                    self.d, pref, 1, self.result.ptr, count.ctypes.data)
        if int(count[0]) < 1:
            raise CudaError(f"cuBLASLt has no algorithm for {p} within {max_workspace} "
                            f"workspace bytes", error_name="CUBLAS_STATUS_NOT_SUPPORTED")
        self.workspace_size = int(np.asarray(self.result.workspace_size).reshape(-1)[0])
        self.algo = int(self.result.ptr)   # the algo struct is the result's first field

    def _layout(self, dt: int, lay: Layout) -> int:
        c = lt()
        obj = c.matrix_layout_create(dt, lay.rows, lay.cols, lay.ld)
        self._objects.append((c.matrix_layout_destroy, obj))
        if lay.batch > 1:
            la = c.MatrixLayoutAttribute
            setl = c.matrix_layout_set_attribute
            getl = c.get_matrix_layout_attribute_dtype
            _set(setl, getl, obj, la.BATCH_COUNT, lay.batch)
            _set(setl, getl, obj, la.STRIDED_BATCH_OFFSET, lay.stride)
        return int(obj)

    def point_bias(self, ptr: int) -> None:
        """Point the epilogue at the bias vector at ``ptr`` (the caller holds :attr:`lock`
        until its ``cublasLtMatmul`` has been enqueued)."""
        if ptr != self._bias_ptr:
            c = lt()
            _set(c.matmul_desc_set_attribute, c.get_matmul_desc_attribute_dtype, self.desc,
                 c.MatmulDescAttribute.BIAS_POINTER, int(ptr))
            self._bias_ptr = ptr

    def close(self) -> None:
        objects, self._objects = self._objects, []
        for destroy, obj in reversed(objects):
            try:
                destroy(obj)
            except Exception:  # noqa: BLE001 - teardown of a failed or cached plan
                pass


def matmul_plan(problem: GemmProblem, ordinal: int = 0,
                max_workspace: int = MAX_WORKSPACE_BYTES) -> MatmulPlan:
    """THE plan of ``problem`` on device ``ordinal``, built (heuristic query included) once.

    Plan time (``workspace_requirement``) and execution both call this; the second
    call is a dict lookup. A bias problem cuBLASLt has no algorithm for
    (:data:`NO_ALGORITHM`) raises the same :exc:`CudaError` on every call without asking
    the heuristic again (its kernel falls back to the plain problem).
    """
    key = (ordinal, problem, int(max_workspace))
    plan = _plans.get(key)
    if plan is None:
        with _lock:
            plan = _plans.get(key)
            if plan is None:
                failed = _no_plan.get(key)
                if failed is not None:
                    raise CudaError(str(failed), error_name=failed.error_name)
                try:
                    plan = _plans[key] = MatmulPlan(ordinal, problem, max_workspace)
                except CudaError as e:
                    if problem.bias and e.error_name in NO_ALGORITHM:
                        _no_plan[key] = e
                    raise
    return plan


def workspace_bytes(problem: GemmProblem, ordinal: int = 0) -> int:
    """Exact workspace bytes of ``problem``'s chosen algorithm (plans it if needed)."""
    return matmul_plan(problem, ordinal).workspace_size


def clear_plans() -> None:
    """Destroy every cached plan (handles stay)."""
    with _lock:
        plans = list(_plans.values())
        _plans.clear()
        _no_plan.clear()
    for p in plans:
        p.close()


def plan_for_pointers(problem: GemmProblem, ptrs: tuple[int, ...], ordinal: int,
                      workspace_nbytes: int, *, fit_workspace: bool = False) -> MatmulPlan:
    """The plan to run ``problem`` with these pointers.

    Pointers aligned to :data:`PLAN_ALIGNMENT` (the arena's are) use the plan made at
    plan time. A less aligned pointer (a user's DLPack view) gets a plan of its own,
    restricted to the workspace the view actually has, so it never needs more.

    :param fit_workspace: also restrict the plan of aligned pointers to
        ``workspace_nbytes`` when the plan-time one needs more (a kernel that sized its
        workspace for another route, e.g. the bias epilogue, and falls back at run time).
    """
    align = pointer_alignment(*ptrs, cap=problem.alignment)
    if align >= problem.alignment:
        plan = matmul_plan(problem, ordinal)
        if not fit_workspace or plan.workspace_size <= workspace_nbytes:
            return plan
    return matmul_plan(problem.with_alignment(align), ordinal, max_workspace=workspace_nbytes)


def find_plan(problem: GemmProblem, ptrs: tuple[int, ...] = (), ordinal: int = 0,
              workspace_nbytes: int = MAX_WORKSPACE_BYTES) -> MatmulPlan | None:
    """The plan ``run(..., fit_workspace=True)`` takes for these pointers and workspace,
    or ``None`` when cuBLASLt has no algorithm for it (:data:`NO_ALGORITHM`; remembered for
    a bias problem, so a later call is a dict lookup). No pointers: the plan-time plan.
    """
    try:
        return plan_for_pointers(problem, ptrs, ordinal, workspace_nbytes, fit_workspace=True)
    except CudaError as e:
        if e.error_name in NO_ALGORITHM:
            return None
        raise


def run(problem: GemmProblem, a_ptr: int, b_ptr: int, d_ptr: int, stream: Any,
        workspace_ptr: int, workspace_nbytes: int, *, alpha: float = 1.0, beta: float = 0.0,
        c_ptr: int | None = None, bias_ptr: int | None = None, ordinal: int = 0,
        fit_workspace: bool = False) -> MatmulPlan:
    """Enqueue ``D = alpha * op(A) @ op(B) + beta * C`` on ``stream`` (C has D's layout),
    plus the bias vector at ``bias_ptr`` for a ``problem.bias`` problem.

    :param workspace_ptr, workspace_nbytes: the kernel's workspace (or its GEMM part);
        passed to ``cublasLtMatmul`` as they are.
    :param bias_ptr: ``n`` values of D's type, :data:`BIAS_ALIGNMENT`-aligned; given
        exactly when ``problem.bias``.
    :param fit_workspace: see :func:`plan_for_pointers`.
    :raises WorkspaceTooSmall: the plan's algorithm needs more than ``workspace_nbytes``.
    :raises CudaError: cuBLASLt rejected the call (its status name as ``error_name``), or
        a bias pointer is missing, unexpected or under-aligned.
    :returns: the plan that ran (tests check its workspace size).
    """
    c_ptr = d_ptr if c_ptr is None else c_ptr
    key = (problem, a_ptr, b_ptr, c_ptr, d_ptr, workspace_ptr, workspace_nbytes, alpha, beta,
           bias_ptr, ordinal, fit_workspace, stream)
    hit = _calls.get(key)
    if hit is not None:           # a call seen before: checked and planned then
        hit[1]()
        launch.record(hit[1])
        return hit[0]
    if problem.bias != (bias_ptr is not None) or (bias_ptr or 0) % BIAS_ALIGNMENT:
        raise CudaError(f"cuBLASLt bias epilogue of {problem} got bias pointer {bias_ptr}: "
                        f"a bias problem takes a {BIAS_ALIGNMENT}-byte aligned bias vector, "
                        f"a plain one none", error_name="CUBLAS_STATUS_INVALID_VALUE")
    plan = plan_for_pointers(problem, (a_ptr, b_ptr, c_ptr, d_ptr), ordinal, workspace_nbytes,
                             fit_workspace=fit_workspace)
    if plan.workspace_size > workspace_nbytes:
        raise WorkspaceTooSmall(
            f"cuBLASLt algorithm for {problem} needs {plan.workspace_size} workspace bytes but "
            f"the kernel got {workspace_nbytes}; workspace_requirement() and execute must size "
            f"through blas.matmul_plan")
    if workspace_nbytes and workspace_ptr % WORKSPACE_ALIGNMENT:
        raise CudaError(f"cuBLASLt workspace at 0x{workspace_ptr:x} is not "
                        f"{WORKSPACE_ALIGNMENT}-byte aligned",
                        error_name="CUBLAS_STATUS_INVALID_VALUE")
    # host pointer mode reads alpha and beta at enqueue: one array per pair, never mutated
    scalars = _scalars.get((alpha, beta))
    if scalars is None:
        scalars = _scalars.setdefault((alpha, beta), np.array([alpha, beta], np.float32))
    base = scalars.ctypes.data
    matmul = lt().matmul
    args = (plan.handle, plan.desc, base, b_ptr, plan.first, a_ptr, plan.second, base + 4,
            c_ptr, plan.d, d_ptr, plan.d, plan.algo, workspace_ptr, workspace_nbytes,
            int(stream.ptr))

    def enqueue() -> None:
        try:
            if bias_ptr is None:
                matmul(*args)
            else:
                # cublasLtMatmul reads the descriptor while it enqueues, never later:
                # holding the lock from setting the pointer to the enqueue is enough
                with plan.lock:
                    plan.point_bias(bias_ptr)
                    matmul(*args)
        except Exception as e:
            raise _lt_error(e, f"cublasLtMatmul({problem})") from e

    enqueue()
    launch.record(enqueue)
    if len(_calls) >= MAX_CACHED_CALLS:
        _calls.clear()
    _calls[key] = (plan, enqueue)
    return plan
