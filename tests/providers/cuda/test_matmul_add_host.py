"""Host-side logic of CUDA onnx_ep.fused::MatMulAdd (no GPU): which route a call takes (the
cuBLASLt bias epilogue or the bias written first), the bias geometry, supports(), and the
cuBLASLt calls the plans make, replayed against a recording stand-in for nvmath's bindings:
the epilogue in the descriptor and the plan key, the heuristic only at plan time, the bias
pointer set under the plan's lock, and the fallback when no algorithm has the epilogue."""

from __future__ import annotations

import ctypes
import enum
import threading
from typing import Any

import attrs
import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    TensorSpec,
    WorkspaceRequirement,
    WorkspaceView,
    check_kernel,
)
from onnx_ep.errors import CudaError, NodeError
from onnx_ep.providers.cpu_reference import fused_gemm as ref_fused_gemm
from onnx_ep.providers.cuda import blas, copies
from onnx_ep.providers.cuda.kernels import fused_gemm, gemm
from onnx_ep.testing import audit_capture

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
(KERNEL,) = [k for k in fused_gemm.KERNELS if isinstance(k, fused_gemm.MatMulAdd)]


def _meta(*specs: Any) -> NodeMeta:
    """MatMulAdd over ``(dtype, shape)`` specs."""
    return NodeMeta(name="mma", op_type="MatMulAdd", domain=FUSED_DOMAIN, opset=1, attrs={},
                    inputs=tuple(TensorSpec(*s) for s in specs),
                    input_names=("a", "b", "bias")[:len(specs)], output_names=("y",))


# ---------------------------------------------------------------- a recording cuBLASLt


class FakeLt:
    """The part of ``nvmath.bindings.cublasLt`` blas.py calls, with the real enum values
    and attribute dtypes; it records attributes, heuristic queries and matmul enqueues."""

    class MatmulDescAttribute(enum.IntEnum):
        TRANSA = 3
        TRANSB = 4
        EPILOGUE = 7
        BIAS_POINTER = 8

    class MatrixLayoutAttribute(enum.IntEnum):
        BATCH_COUNT = 5
        STRIDED_BATCH_OFFSET = 6

    class MatmulPreferenceAttribute(enum.IntEnum):
        MAX_WORKSPACE_BYTES = 1
        REDUCTION_SCHEME_MASK = 3
        MIN_ALIGNMENT_A_BYTES = 5
        MIN_ALIGNMENT_B_BYTES = 6
        MIN_ALIGNMENT_C_BYTES = 7
        MIN_ALIGNMENT_D_BYTES = 8

    class Epilogue(enum.IntEnum):
        DEFAULT = 1
        BIAS = 4

    class ReductionScheme(enum.IntEnum):
        NONE = 0
        INPLACE = 1
        COMPUTE_TYPE = 2
        OUTPUT_TYPE = 4

    DTYPES = {"desc": {3: np.int32, 4: np.int32, 7: np.uint32, 8: np.int64},
              "layout": {5: np.int32, 6: np.int64},
              "pref": {1: np.uint64, 3: np.uint32, 5: np.uint32, 6: np.uint32, 7: np.uint32,
                       8: np.uint32}}

    class _Result:
        def __init__(self, ptr: int) -> None:
            self.ptr, self.workspace_size = ptr, np.zeros(1, np.uint64)

    def __init__(self, *, bias_algorithms: bool = True, workspace: int = 0,
                 bias_workspace: int = 0) -> None:
        self.bias_algorithms = bias_algorithms
        self.plain_workspace, self.bias_workspace = workspace, bias_workspace
        self.attrs: dict[int, dict[int, Any]] = {}
        self.kinds: dict[int, str] = {}
        self.queries: list[dict[int, Any]] = []
        self.results: dict[int, FakeLt._Result] = {}
        self.enqueued: list[dict[str, Any]] = []
        self._next = 0x100

    def _create(self, kind: str) -> int:
        self._next += 0x10
        self.attrs[self._next], self.kinds[self._next] = {}, kind
        return self._next

    def _setter(kind: str) -> Any:          # noqa: N805 - builds methods
        def set_attribute(self: FakeLt, obj: int, attr: int, ptr: int, size: int) -> None:
            dtype = FakeLt.DTYPES[kind][int(attr)]
            assert np.dtype(dtype).itemsize == size
            self.attrs[obj][int(attr)] = np.frombuffer(ctypes.string_at(ptr, size), dtype)[0]
        return set_attribute

    def _dtype_of(kind: str) -> Any:        # noqa: N805 - builds methods
        return staticmethod(lambda attr: FakeLt.DTYPES[kind][int(attr)])

    matmul_desc_set_attribute = _setter("desc")
    matrix_layout_set_attribute = _setter("layout")
    matmul_preference_set_attribute = _setter("pref")
    get_matmul_desc_attribute_dtype = _dtype_of("desc")
    get_matrix_layout_attribute_dtype = _dtype_of("layout")
    get_matmul_preference_attribute_dtype = _dtype_of("pref")

    def matmul_desc_create(self, compute: int, scale: int) -> int:
        assert (compute, scale) == (blas.COMPUTE_32F, blas.SCALE_TYPE_32F)
        return self._create("desc")

    def matrix_layout_create(self, dt: int, rows: int, cols: int, ld: int) -> int:
        return self._create("layout")

    def matmul_preference_create(self) -> int:
        return self._create("pref")

    def MatmulHeuristicResult(self, size: int) -> FakeLt._Result:  # noqa: N802 - nvmath's name
        r = FakeLt._Result(self._create("result"))
        self.results[r.ptr] = r
        return r

    def matmul_desc_destroy(self, obj: int) -> None:
        pass

    matrix_layout_destroy = matmul_preference_destroy = matmul_desc_destroy

    def matmul_algo_get_heuristic(self, handle: int, desc: int, first: int, second: int, c: int,
                                  d: int, pref: int, n: int, result: int, count: int) -> None:
        bias = self.attrs[desc].get(7) == 4
        self.queries.append({**self.attrs[desc], "pref": dict(self.attrs[pref])})
        ws = self.bias_workspace if bias else self.plain_workspace
        self.results[result].workspace_size = np.array([ws], np.uint64)
        ctypes.c_int32.from_address(count).value = int(self.bias_algorithms or not bias)

    def matmul(self, handle: int, desc: int, alpha: int, a: int, adesc: int, b: int, bdesc: int,
               beta: int, c: int, cdesc: int, d: int, ddesc: int, algo: int, ws: int, ws_n: int,
               stream: int) -> None:
        self.enqueued.append({
            "desc": dict(self.attrs[desc]), "a": a, "b": b, "c": c, "d": d, "ws": (ws, ws_n),
            "alpha": ctypes.c_float.from_address(alpha).value,
            "beta": ctypes.c_float.from_address(beta).value})


@pytest.fixture
def lt(monkeypatch: pytest.MonkeyPatch) -> FakeLt:
    fake = FakeLt()
    monkeypatch.setattr(blas, "lt", lambda: fake)
    monkeypatch.setattr(blas, "is_available", lambda: True)
    monkeypatch.setattr(blas, "_plans", {})
    monkeypatch.setattr(blas, "_calls", {})
    monkeypatch.setattr(blas, "_no_plan", {})
    monkeypatch.setitem(blas._handles, 0, 0x1234)
    return fake


class _Tensor:
    """A DeviceTensor stand-in: a pointer, a dtype and a shape."""

    def __init__(self, ptr: int, dtype: Any, shape: tuple[int, ...]) -> None:
        self.ptr, self.dtype, self.shape, self.device = ptr, np.dtype(dtype), shape, 0
        self.nbytes = self.dtype.itemsize * int(np.prod(shape))


class _Stream:
    ptr = 0x5700


def _execute(kernel: Any, shapes: tuple[tuple[int, ...], ...], dtype: Any, *,
             bias_ptr: int = 0x30000, out: tuple[int, ...], ws: int = 0,
             launches: list | None = None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``kernel`` on stand-in tensors; broadcast_rows launches land in ``launches``."""
    meta = _meta(*((dtype, s) for s in shapes))
    bound = kernel.bind(meta)
    monkeypatch.setattr(bound, "function", lambda symbol, tensor, source=None: symbol)
    monkeypatch.setattr(bound, "launch", lambda fn, grid, block, args, stream, shared=0:
                        (launches if launches is not None else []).append((fn, args)))
    a, b, bias = (_Tensor(p, dtype, s) for p, s in zip((0x10000, 0x20000, bias_ptr), shapes))
    y = _Tensor(0x40000, dtype, out)
    view = WorkspaceView(_Tensor(0x80000, np.uint8, (ws,)), ws) if ws else None
    ctx = ExecutionContext(meta, stream=_Stream(), provider="cuda")
    bound.execute_with_workspace(ctx, [a, b, bias], [y], view)


# ---------------------------------------------------------------- the protocol


def test_the_kernel_keeps_the_protocol_in_the_fused_domain():
    assert check_kernel(KERNEL) is None
    assert KERNEL.key == ref_fused_gemm.KERNELS[0].key
    assert KERNEL.key.domain == FUSED_DOMAIN and KERNEL.key.op_type == "MatMulAdd"
    assert KERNEL.capture_support().supported
    assert not audit_capture(fused_gemm.KERNELS)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_the_promise_is_matmuls_with_one_product_ulp_per_dtype(dtype):
    meta = _meta((dtype, (2, 5, 16)), (dtype, (16, 8)), (dtype, (8,)))
    bound = KERNEL.bind(meta)
    assert check_kernel(bound) is None
    assert bound.parity == fused_gemm.MATMUL_ADD_PARITY[dtype.name]
    assert bound.parity.rtol == blas.GEMM_PARITY[dtype.name].rtol
    assert bound.infer_outputs(meta) == [TensorSpec(dtype, (2, 5, 8))]


# ---------------------------------------------------------------- geometry and routes


@pytest.mark.parametrize("a,b,bias,fused", [
    ((1, 1, 896), (896, 128), (128,), (1, 128, 896)),     # decode projection: one GEMM
    ((2, 5, 16), (16, 8), (1, 8), (10, 8, 16)),           # prefill folds the batch into M
    ((5,), (5, 6), (6,), (1, 6, 5)),
    ((4, 5), (5,), (1,), (4, 1, 5)),                      # n = 1: one value for every row
    ((1, 4, 5), (1, 5, 6), (6,), (4, 6, 5)),              # a batch of one is one GEMM
    ((3, 4, 5), (3, 5, 6), (6,), None),                   # strided batch
    ((2, 4, 5), (5, 6), (4, 1), None),                    # bias along M
    ((4, 5), (5, 6), (), None),                           # scalar bias
    ((2, 4, 5), (5, 6), (2, 4, 6), None),                 # full-shape bias
    ((4, 5), (5, 6), (6, ), (4, 6, 5)),
])
def test_the_epilogue_is_chosen_for_one_gemm_and_a_row_of_n(a, b, bias, fused):
    s = gemm.matmul_add_shape(a, b, bias, np.float16)
    if fused is None:
        assert s.fused is None
        return
    assert (s.fused.m, s.fused.n, s.fused.k) == fused
    assert s.fused.batch == 1 and s.fused == attrs.evolve(s.matmul.problem, bias=True)


@pytest.mark.parametrize("bias,out", [
    ((6,), (3, 4, 6)), ((1, 6), (3, 4, 6)), ((4, 1), (3, 4, 6)), ((), (3, 4)),
    ((3, 4, 6), (3, 4, 6)), ((4, 6), (2, 4, 6)), ((2, 1, 1), (2, 3, 4)), ((1,), (5,)),
    ((), ()), ((2, 4, 1), (2, 4, 6)), ((6,), (0, 6)),
])
def test_bias_rows_reads_the_numpy_broadcast(bias, out):
    r = gemm.bias_rows(bias, out)
    src = np.arange(int(np.prod(bias))).reshape(bias)
    i = np.arange(int(np.prod(out)))
    got = src.reshape(-1)[((i // r.cols) % r.rows) * r.row_stride + (i % r.cols) * r.col_stride]
    np.testing.assert_array_equal(got, np.broadcast_to(src, out).reshape(-1))


def test_biases_that_change_along_the_batch_or_grow_the_output_are_refused():
    assert gemm.bias_rows((3, 1, 6), (3, 4, 6)) is None
    with pytest.raises(NodeError, match="changes along the batch dims"):
        gemm.matmul_add_shape((3, 4, 5), (3, 5, 6), (3, 1, 6), np.float32)
    with pytest.raises(NodeError, match="does not broadcast to the MatMul output"):
        gemm.matmul_add_shape((4, 5), (5, 6), (2, 4, 6), np.float32)
    with pytest.raises(NodeError, match="does not broadcast"):
        gemm.matmul_add_shape((4, 5), (5, 6), (5,), np.float32)
    with pytest.raises(NodeError, match="inner dimensions"):
        gemm.matmul_add_shape((4, 5), (4, 6), (6,), np.float32)


def test_supports_decisions(monkeypatch):
    monkeypatch.setattr(blas, "is_available", lambda: True)
    h = F16
    assert KERNEL.supports(_meta((h, (1, 1, 896)), (h, (896, 128)), (h, (128,))))
    assert KERNEL.supports(_meta((h, (3, 4, 5)), (h, (3, 5, 6)), (h, (1, 6))))
    assert KERNEL.supports(_meta((h, ("b", "s", 896)), (h, (896, 128)), (h, (128,))))
    no = KERNEL.supports(_meta((h, (3, 4, 5)), (h, (3, 5, 6)), (h, (3, 1, 6))))
    assert not no and "changes along the batch dims" in no.reason
    no = KERNEL.supports(_meta((h, ("b", 4, 5)), (h, (5, 6)), (h, ("b", 1, 6))))
    assert not no and "symbolic dims" in no.reason
    no = KERNEL.supports(_meta((h, ("n", 5)), (h, (5, 6)), (h, (2, 1, 6))))
    assert not no and "would grow the MatMul output" in no.reason
    no = KERNEL.supports(_meta((h, (4, 5)), (h, (5, 6)), (F32, (6,))))
    assert not no and "input 2 is float32" in no.reason
    no = KERNEL.supports(_meta((np.float64, (4, 5)), (np.float64, (5, 6)),
                               (np.float64, (6,))))
    assert not no and "float64" in no.reason
    assert not KERNEL.supports(_meta((h, (4, 5)), (h, (5, 6))))
    assert not KERNEL.supports(_meta((h, (3, 4)), (h, (2, 4, 5)), (h, (5,))))


def test_supports_declines_without_nvmath(monkeypatch):
    monkeypatch.setattr(blas, "is_available", lambda: False)
    no = KERNEL.supports(_meta((F32, (4, 5)), (F32, (5, 6)), (F32, (6,))))
    assert not no and "nvmath-python" in no.reason


# ---------------------------------------------------------------- plans (recorded cuBLASLt)


def test_a_bias_plan_is_its_own_plan_with_the_epilogue_in_its_descriptor(lt):
    p = gemm.matmul_add_shape((1, 1, 896), (896, 128), (128,), np.float16).fused
    plain = blas.matmul_plan(attrs.evolve(p, bias=False))
    fused = blas.matmul_plan(p)
    assert plain is not fused and p != plain.problem and hash(p) != hash(plain.problem)
    assert len(blas._plans) == 2
    plain_q, fused_q = lt.queries
    assert 7 not in plain_q and 3 not in plain_q["pref"]
    assert fused_q[7] == 4 and 8 not in fused_q             # EPILOGUE_BIAS; pointer per call
    assert fused_q["pref"][3] == 2                          # reductions: COMPUTE_TYPE only
    assert blas.matmul_plan(p) is fused and len(lt.queries) == 2


def test_run_points_the_bias_under_the_plan_lock_and_asks_no_heuristic(lt):
    p = gemm.matmul_add_shape((2, 5, 16), (16, 8), (8,), np.float32).fused
    plan = blas.matmul_plan(p)
    held = []

    class _Lock:
        def __enter__(self):
            held.append(True)

        def __exit__(self, *exc):
            held.append(False)

    real = lt.matmul
    plan.lock = _Lock()
    lt.matmul = lambda *args: (held.append("enqueue"), real(*args))
    for bias in (0x30000, 0x30000, 0x31000):
        blas.run(p, 0x10000, 0x20000, 0x40000, _Stream(), 0, 0, bias_ptr=bias)
    assert [e["desc"][8] for e in lt.enqueued] == [0x30000, 0x30000, 0x31000]
    assert held == [True, "enqueue", False] * 3
    assert len(lt.queries) == 1
    assert all(e["beta"] == 0.0 and e["alpha"] == 1.0 for e in lt.enqueued)


def test_a_shared_plan_never_enqueues_another_threads_bias(lt):
    p = gemm.matmul_add_shape((2, 5, 16), (16, 8), (8,), np.float16).fused
    blas.matmul_plan(p)
    real_set = lt.matmul_desc_set_attribute
    mine: dict[int, int] = {}

    def slow_set(obj, attr, ptr, size):     # widen the window between set and enqueue
        real_set(obj, attr, ptr, size)
        threading.Event().wait(0.0005)

    def check(*args):
        want = mine[threading.get_ident()]
        if lt.attrs[args[1]][8] != want:
            raise AssertionError(f"enqueued bias {lt.attrs[args[1]][8]:#x}, wanted {want:#x}")
        lt.enqueued.append(want)

    lt.matmul_desc_set_attribute, lt.matmul = slow_set, check
    errors: list[BaseException] = []

    def worker(bias: int) -> None:
        mine[threading.get_ident()] = bias
        try:
            for _ in range(50):
                blas.run(p, 0x10000, 0x20000, 0x40000, _Stream(), 0, 0, bias_ptr=bias)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(0x30000 + 0x100 * i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(lt.enqueued) == 200


def test_run_refuses_a_missing_unexpected_or_misaligned_bias(lt):
    s = gemm.matmul_add_shape((2, 5, 16), (16, 8), (8,), np.float32)
    for problem, bias in ((s.fused, None), (s.matmul.problem, 0x30000), (s.fused, 0x30004)):
        with pytest.raises(CudaError, match="bias pointer") as info:
            blas.run(problem, 0x10000, 0x20000, 0x40000, _Stream(), 0, 0, bias_ptr=bias)
        assert info.value.error_name == "CUBLAS_STATUS_INVALID_VALUE"
    assert not lt.enqueued


def test_no_algorithm_with_the_epilogue_is_remembered_and_falls_back(lt, monkeypatch):
    lt.bias_algorithms = False
    s = gemm.matmul_add_shape((2, 5, 16), (16, 8), (8,), np.float16)
    assert blas.find_plan(s.fused) is None
    assert blas.find_plan(s.fused, (0x10000, 0x20000, 0x40000), 0, 0) is None
    with pytest.raises(CudaError) as info:
        blas.matmul_plan(s.fused)
    assert info.value.error_name == "CUBLAS_STATUS_NOT_SUPPORTED"
    assert len(lt.queries) == 1                              # asked once, at plan time
    how, plan = fused_gemm.route(s, (), None, 0, blas.MAX_WORKSPACE_BYTES)
    assert how == fused_gemm.BROADCAST and plan.problem == s.matmul.problem


def test_workspace_is_the_route_plans_workspace(lt):
    lt.plain_workspace, lt.bias_workspace = 4096, 8192
    h = F16
    meta = _meta((h, (2, 5, 16)), (h, (16, 8)), (h, (8,)))
    assert KERNEL.workspace_requirement(meta) == WorkspaceRequirement(8192)
    meta = _meta((h, (3, 4, 5)), (h, (3, 5, 6)), (h, (6,)))
    assert KERNEL.workspace_requirement(meta) == WorkspaceRequirement(4096)
    meta = _meta((h, ("b", 5, 16)), (h, (16, 8)), (h, (8,)))
    assert KERNEL.workspace_requirement(meta) == WorkspaceRequirement.NONE


def test_workspace_falls_back_to_the_plain_plan_without_an_epilogue_algorithm(lt):
    lt.bias_algorithms, lt.plain_workspace = False, 4096
    meta = _meta((F16, (2, 5, 16)), (F16, (16, 8)), (F16, (8,)))
    assert KERNEL.workspace_requirement(meta) == WorkspaceRequirement(4096)


# ---------------------------------------------------------------- execution (recorded)


def test_the_epilogue_route_is_one_cublaslt_call(lt, monkeypatch):
    lt.bias_workspace = 512
    launches: list = []
    _execute(KERNEL, ((2, 5, 16), (16, 8), (8,)), F16, out=(2, 5, 8), ws=512,
             launches=launches, monkeypatch=monkeypatch)
    (call,) = lt.enqueued
    assert not launches
    assert call["desc"][7] == 4 and call["desc"][8] == 0x30000
    assert (call["a"], call["b"], call["d"]) == (0x20000, 0x10000, 0x40000)  # B first
    assert call["ws"] == (0x80000, 512) and call["beta"] == 0.0


@pytest.mark.parametrize("shapes,out,rows", [
    (((3, 4, 5), (3, 5, 6), (6,)), (3, 4, 6), (12, 6, 0, 1)),    # strided batch
    (((2, 4, 5), (5, 6), (4, 1)), (2, 4, 6), (4, 6, 1, 0)),       # bias along M
    (((4, 5), (5, 6), ()), (4, 6), (1, 24, 0, 0)),                # scalar bias
])
def test_other_biases_are_written_first_and_the_gemm_adds_onto_them(lt, monkeypatch, shapes,
                                                                     out, rows):
    launches: list = []
    _execute(KERNEL, shapes, F32, out=out, launches=launches, monkeypatch=monkeypatch)
    ((fn, args),) = launches
    assert fn == "broadcast_rows_f32"
    assert [v for v, _ in args] == [0x40000, 0x30000, int(np.prod(out)), *rows]
    (call,) = lt.enqueued
    assert 7 not in call["desc"] and call["beta"] == 1.0 and call["c"] == call["d"] == 0x40000


def test_a_misaligned_bias_takes_the_broadcast_route(lt, monkeypatch):
    lt.plain_workspace, lt.bias_workspace = 0, 256
    launches: list = []
    _execute(KERNEL, ((2, 5, 16), (16, 8), (8,)), BF16, bias_ptr=0x30002, out=(2, 5, 8),
             ws=256, launches=launches, monkeypatch=monkeypatch)
    ((fn, _),) = launches
    (call,) = lt.enqueued
    assert fn == "broadcast_rows_bf16" and 7 not in call["desc"] and call["beta"] == 1.0


def test_a_full_shape_bias_is_the_gemms_c_and_k_zero_is_the_bias_alone(lt, monkeypatch):
    copied: list = []
    monkeypatch.setattr(copies, "copy_dtod", lambda dst, src, n, stream: copied.append(
        (dst, src, n)))
    _execute(KERNEL, ((2, 4, 5), (5, 6), (2, 4, 6)), F16, out=(2, 4, 6),
             monkeypatch=monkeypatch)
    # a residual: read as C with beta 1 by the one GEMM, never copied into Y first
    (call,) = lt.enqueued
    assert not copied and (call["c"], call["d"], call["beta"]) == (0x30000, 0x40000, 1.0)
    launches: list = []
    _execute(KERNEL, ((3, 0), (0, 5), (5,)), F16, out=(3, 5), launches=launches,
             monkeypatch=monkeypatch)
    assert len(launches) == 1 and len(lt.enqueued) == 1      # no GEMM for K = 0


def test_an_empty_output_does_nothing(lt, monkeypatch):
    launches: list = []
    _execute(KERNEL, ((0, 5), (5, 6), (6,)), F16, out=(0, 6), launches=launches,
             monkeypatch=monkeypatch)
    assert not launches and not lt.enqueued


def test_execution_names_the_node_on_bad_shapes(lt, monkeypatch):
    with pytest.raises(NodeError, match=r"\(cuda\) bias of shape \(5,\) does not broadcast"):
        _execute(KERNEL, ((4, 5), (5, 6), (5,)), F32, out=(4, 6), monkeypatch=monkeypatch)


def test_a_residual_with_symbolic_dims_is_supported(lt):
    meta = _meta((F16, ("batch", "seq", 16)), (F16, (16, 16)), (F16, ("batch", "seq", 16)))
    assert KERNEL.supports(meta)
    other = _meta((F16, ("batch", "seq", 16)), (F16, (16, 16)), (F16, ("b2", "seq", 16)))
    assert "symbolic dims" in KERNEL.supports(other).reason
