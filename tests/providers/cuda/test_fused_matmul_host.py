"""Host-side logic of CUDA com.microsoft::FusedMatMul (no GPU): the geometry (which GEMM a
call becomes: A's batch folded into M, a strided batch, a single matrix read at batch stride
0), replayed in numpy through cuBLASLt's column-major view of the problem and compared with
cpu_reference's formula; supports(); and the cuBLASLt calls, recorded by the stand-in for
nvmath's bindings from test_matmul_add_host: transposes and alpha in the call, the
heuristic asked at plan time only."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    TensorSpec,
    WorkspaceRequirement,
    WorkspaceView,
    check_kernel,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference import fused_gemm as ref_fused_gemm
from onnx_ep.providers.cuda import blas, copies
from onnx_ep.providers.cuda.kernels import fused_gemm
from onnx_ep.testing import audit_capture
from tests.providers.cuda.test_matmul_add_host import FakeLt, _Stream, _Tensor

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
(KERNEL,) = [k for k in fused_gemm.KERNELS if type(k) is fused_gemm.FusedMatMul]
shape_of = fused_gemm.fused_matmul_shape


def _meta(a: Any, b: Any, dtype: Any = F16, **attrs: Any) -> NodeMeta:
    """FusedMatMul over A and B of ``dtype`` (a spec ``(dtype, shape)`` where given)."""
    specs = tuple(TensorSpec(*s) if s and isinstance(s[0], np.dtype) else TensorSpec(dtype, s)
                  for s in (a, b))
    return NodeMeta(name="fmm", op_type="FusedMatMul", domain="com.microsoft", opset=1,
                    attrs=attrs, inputs=specs, input_names=("a", "b"), output_names=("y",))


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


# ---------------------------------------------------------------- cuBLASLt in numpy


def _read(buf: np.ndarray, lay: blas.Layout, i: int) -> np.ndarray:
    """Matrix ``i`` of a column-major layout: element (r, c) at ``i*stride + c*ld + r``."""
    off = i * lay.stride if lay.batch > 1 else 0
    cols = buf[off:off + lay.cols * lay.ld].reshape(lay.cols, lay.ld)
    return cols[:, :lay.rows].T


def simulate(p: blas.GemmProblem, a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """What cublasLtMatmul computes for ``p`` over the row-major buffers of A and B, from
    :func:`blas.lt_operands` (B is cuBLASLt's first operand, A its second): D, flat."""
    ops = blas.lt_operands(p)
    d = np.zeros(p.batch * p.m * p.n)
    for i in range(p.batch):
        first = _read(b.reshape(-1).astype(np.float64), ops.first, i)
        second = _read(a.reshape(-1).astype(np.float64), ops.second, i)
        first = first.T if ops.trans_first else first
        second = second.T if ops.trans_second else second
        d_cm = alpha * (first @ second)                 # n x m, ld = n
        off = i * ops.d.stride if ops.d.batch > 1 else 0
        d[off:off + p.m * p.n] = d_cm.T.reshape(-1)     # column-major (n, m) is row-major (m, n)
    return d


def formula(a: np.ndarray, b: np.ndarray, trans_a: bool, trans_b: bool,
            alpha: float) -> np.ndarray:
    """cpu_reference's op(A) @ op(B) times alpha, in float64 (not rounded)."""
    opa = ref_fused_gemm.fused_matmul_operand(a.astype(np.float64), trans_a, False)
    opb = ref_fused_gemm.fused_matmul_operand(b.astype(np.float64), trans_b, False)
    return np.asarray(np.matmul(opa, opb) * alpha)


def stored(batch: tuple[int, ...], rows: int, cols: int, trans: bool) -> tuple[int, ...]:
    """The stored shape of a (rows, cols) operand with these batch dims."""
    return batch + ((cols, rows) if trans else (rows, cols))


#: (batch of A, batch of B, M, K, N) as multiplied, then stored per transA / transB
GEOMETRIES = {
    "plain": ((), (), 5, 7, 3),
    "folded": ((2, 3), (), 4, 6, 5),
    "folded_ones": ((2,), (1, 1), 3, 4, 5),
    "equal": ((3,), (3,), 4, 5, 6),
    "equal_4d": ((2, 3), (2, 3), 2, 4, 3),
    "padded": ((3,), (1, 3), 2, 5, 4),
    "one_a": ((), (4,), 3, 5, 2),
    "one_a_ones": ((1, 1), (2, 3), 2, 3, 4),
    "decode": ((1, 14), (1, 14), 1, 64, 129),
    "prefill": ((1, 14), (1, 14), 7, 64, 129),
}


@pytest.mark.parametrize("alpha", [1.0, 0.125, -2.0])
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)], ids=str)
@pytest.mark.parametrize("case", list(GEOMETRIES))
def test_the_gemm_cublaslt_runs_is_the_reference_formula(case, trans, alpha):
    ba, bb, m, k, n = GEOMETRIES[case]
    rng = np.random.default_rng(len(case))
    a = rng.standard_normal(stored(ba, m, k, trans[0]))
    b = rng.standard_normal(stored(bb, k, n, trans[1]))
    s = shape_of(a.shape, b.shape, *trans, F32)
    want = formula(a, b, *trans, alpha)
    assert s.out == want.shape
    np.testing.assert_allclose(simulate(s.problem, a, b, alpha), want.reshape(-1), rtol=1e-12)


@pytest.mark.parametrize("a,b,trans", [
    ((6,), (6, 4), (1, 0)), ((6,), (4, 6), (0, 1)), ((3, 6), (6,), (0, 1)),
    ((6, 3), (6,), (1, 1)), ((5, 6, 3), (6,), (1, 0)), ((6,), (2, 6, 4), (1, 0)),
    ((6,), (2, 4, 6), (0, 1)), ((6,), (6,), (1, 1)),
])
def test_vectors_ignore_their_flag_and_keep_numpys_shapes(a, b, trans):
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(a), rng.standard_normal(b)
    s = shape_of(a, b, *trans, F16)
    want = formula(x, y, *trans, 1.0)
    assert s.out == want.shape
    np.testing.assert_allclose(simulate(s.problem, x, y, 1.0), want.reshape(-1), rtol=1e-12)


def test_the_routes_and_their_problems():
    # attention at decode: q @ k^T per head, a strided batch with B transposed
    p = shape_of((1, 14, 1, 64), (1, 14, 129, 64), False, True, F16).problem
    assert (p.m, p.n, p.k, p.batch, p.trans_a, p.trans_b) == (1, 129, 64, 14, False, True)
    assert (p.stride_a, p.stride_b, p.stride_d, p.alignment) == (64, 129 * 64, 129, 2)
    # B one matrix, A not transposed: the batch folds into M whatever transB is
    p = shape_of((2, 5, 16), (8, 16), False, True, F16).problem
    assert (p.m, p.n, p.k, p.batch, p.trans_b, p.alignment) == (10, 8, 16, 1, True, 16)
    # transA with one B: no fold (A's per-batch matrices are (K, M)); B at stride 0
    p = shape_of((2, 16, 5), (16, 8), True, False, F16).problem
    assert (p.m, p.n, p.k, p.batch, p.trans_a) == (5, 8, 16, 2, True)
    assert (p.stride_a, p.stride_b, p.stride_d) == (80, 0, 40)
    # a batch of one is one GEMM
    p = shape_of((1, 4, 5), (1, 6, 5), False, True, F32).problem
    assert p.batch == 1 and p.stride_a == p.stride_b == 0 and p.alignment == 16


def test_empty_outputs_and_k_zero():
    assert shape_of((0, 5), (6, 5), False, True, F16).problem is None
    s = shape_of((3, 0), (5, 0), False, True, F16)
    assert s.problem is None and s.zero_k and s.out == (3, 5)
    s = shape_of((2, 0, 3), (4, 0), True, True, F16)
    assert s.zero_k and s.out == (2, 3, 4)


@pytest.mark.parametrize("a,b,trans,why", [
    ((2, 1, 4, 5), (3, 5, 6), (0, 0), r"broadcast; the cuda FusedMatMul runs batches"),
    ((3, 4, 5), (2, 3, 5, 6), (0, 0), r"broadcast; the cuda FusedMatMul runs batches"),
    ((2, 4, 5), (3, 6, 5), (0, 1), r"do not broadcast"),
    ((4, 5), (4, 6), (0, 0), r"op\(A\) of A \(4, 5\) \(transA=0\) has K=5"),
    ((4, 5), (4, 6), (1, 1), r"has K=4, op\(B\) of B \(4, 6\) \(transB=1\) has K=6"),
    ((), (4,), (0, 0), "rank >= 1"),
])
def test_what_the_geometry_refuses(a, b, trans, why):
    with pytest.raises(NodeError, match=why):
        shape_of(a, b, *trans, F16)


# ---------------------------------------------------------------- the kernel


def test_the_kernel_keeps_the_protocol_in_onnxruntimes_domain():
    assert check_kernel(KERNEL) is None
    assert KERNEL.key == ref_fused_gemm.FusedMatMul().key
    assert (KERNEL.key.domain, KERNEL.key.op_type, KERNEL.key.since) == (
        "com.microsoft", "FusedMatMul", 1)
    assert KERNEL.capture_support().supported
    assert not audit_capture([KERNEL])


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_the_promise_is_matmuls(dtype):
    meta = _meta((1, 14, 7, 64), (1, 14, 129, 64), dtype, transB=1, alpha=0.125)
    bound = KERNEL.bind(meta)
    assert check_kernel(bound) is None
    assert bound.parity == blas.GEMM_PARITY[dtype.name]
    assert bound.infer_outputs(meta) == [TensorSpec(dtype, (1, 14, 7, 129))]


def test_supports_decisions(monkeypatch):
    monkeypatch.setattr(blas, "is_available", lambda: True)
    assert KERNEL.supports(_meta((1, 14, 1, 64), (1, 14, 129, 64), transB=1, alpha=0.125))
    assert KERNEL.supports(_meta(("b", 14, "s", 64), ("b", 14, "t", 64), transB=1))
    assert KERNEL.supports(_meta(("b", "s", 64), (64, 32), transA=0))
    assert KERNEL.supports(_meta((2, 16, 5), (16, 8), transA=1))
    for name in ("transBatchA", "transBatchB"):
        no = KERNEL.supports(_meta((3, 2, 4), (2, 4, 5), **{name: 1}))
        assert not no and f"{name}=1" in no.reason and "cpu_reference runs it" in no.reason
    no = KERNEL.supports(_meta((2, 1, 4, 5), (3, 5, 6)))
    assert not no and "each operand is the whole batch or a single matrix" in no.reason
    no = KERNEL.supports(_meta(("b", 3, 4, 5), ("b", 5, 6)))
    assert not no and "batch dims on both sides" in no.reason
    no = KERNEL.supports(_meta((4, 5), (6, 4), transB=1))
    assert not no and "inner dimensions differ" in no.reason
    no = KERNEL.supports(_meta((F16, (4, 5)), (F32, (5, 6))))
    assert not no and "input 1 is float32" in no.reason
    no = KERNEL.supports(_meta((4, 5), (5, 6), np.float64))
    assert not no and "float64" in no.reason
    assert not KERNEL.supports(_meta((), (5, 6)))
    monkeypatch.setattr(blas, "is_available", lambda: False)
    no = KERNEL.supports(_meta((4, 5), (5, 6)))
    assert not no and "nvmath-python" in no.reason


def _execute(shapes: tuple[tuple[int, ...], ...], dtype: Any, out: tuple[int, ...], *,
             ws: int = 0, **attrs: Any) -> Any:
    meta = _meta(*shapes, dtype, **attrs)
    bound = KERNEL.bind(meta)
    a, b = (_Tensor(p, dtype, s) for p, s in zip((0x10000, 0x20000), shapes))
    y = _Tensor(0x40000, dtype, out)
    view = WorkspaceView(_Tensor(0x80000, np.uint8, (ws,)), ws) if ws else None
    bound.execute_with_workspace(ExecutionContext(meta, stream=_Stream(), provider="cuda"),
                                 [a, b], [y], view)
    return bound


def test_one_call_with_alpha_and_the_transposes_planned_ahead(lt):
    lt.plain_workspace = 1024
    shapes = ((1, 14, 7, 64), (1, 14, 129, 64))
    meta = _meta(*shapes, transB=1, alpha=0.125)
    assert KERNEL.bind(meta).workspace_requirement(meta) == WorkspaceRequirement(1024)
    assert len(lt.queries) == 1
    _execute(shapes, F16, (1, 14, 7, 129), ws=1024, transB=1, alpha=0.125)
    _execute(shapes, F16, (1, 14, 7, 129), ws=1024, transB=1, alpha=0.125)
    assert len(lt.queries) == 1                             # no heuristic at execution
    (plan,) = blas._plans.values()
    assert lt.attrs[plan.first] == {5: 14, 6: 129 * 64}     # B: batch count and stride
    assert lt.attrs[plan.second] == {5: 14, 6: 7 * 64}
    first, second = lt.enqueued
    assert first == second
    # cuBLASLt's first operand is B: its TRANSA is transB, its TRANSB is transA
    assert (first["desc"][3], first["desc"][4]) == (1, 0)
    assert (first["a"], first["b"], first["c"], first["d"]) == (0x20000, 0x10000, 0x40000,
                                                                 0x40000)
    assert (first["alpha"], first["beta"], first["ws"]) == (0.125, 0.0, (0x80000, 1024))


def test_transa_with_one_b_reads_b_at_batch_stride_zero(lt):
    _execute(((2, 16, 5), (16, 8)), F32, (2, 5, 8), transA=1, alpha=-2.0)
    (call,) = lt.enqueued
    (plan,) = blas._plans.values()
    assert (call["desc"][3], call["desc"][4]) == (0, 1) and call["alpha"] == -2.0
    assert lt.attrs[plan.first] == {5: 2, 6: 0} and lt.attrs[plan.second] == {5: 2, 6: 80}


def test_k_zero_writes_zeros_and_an_empty_output_does_nothing(lt, monkeypatch):
    cleared: list = []
    monkeypatch.setattr(copies, "memset_d8", lambda ptr, v, n, stream: cleared.append((ptr, n)))
    _execute(((3, 0), (5, 0)), F16, (3, 5), transB=1)
    assert cleared == [(0x40000, 30)] and not lt.enqueued
    _execute(((0, 4), (4, 5)), F16, (0, 5))
    assert len(cleared) == 1 and not lt.enqueued


def test_execution_names_the_node(lt):
    with pytest.raises(NodeError, match=r"FusedMatMul node 'fmm': \(cuda\) inner dimensions"):
        _execute(((4, 5), (6, 4)), F32, (4, 6), transB=1)
    with pytest.raises(NodeError, match=r"\(cuda\) transBatchA / transBatchB are not run"):
        _execute(((3, 2, 4), (2, 4, 5)), F32, (2, 3, 5), transBatchA=1)


def test_grouped_matmul_reads_a_groups_heads_as_one_matrix_per_group():
    from onnx_ep.core.kernel import NodeMeta
    from onnx_ep.errors import NodeError

    (grouped,) = [k for k in fused_gemm.KERNELS if isinstance(k, fused_gemm.GroupedMatMul)]

    def meta(**attrs):
        return NodeMeta(name="g", op_type="GroupedMatMul", domain="onnx_ep.fused", opset=1,
                        attrs=attrs, inputs=())

    scores = grouped.geometry(meta(transB=1), (1, 14, 1, 64), (1, 2, 129, 64), np.float16)
    p = scores.problem
    assert scores.out == (1, 14, 1, 129)
    assert (p.batch, p.m, p.n, p.k, p.trans_a, p.trans_b) == (2, 7, 129, 64, False, True)
    values = grouped.geometry(meta(), (2, 4, 3, 10), (2, 2, 10, 8), np.float32)
    p = values.problem
    assert values.out == (2, 4, 3, 8) and (p.batch, p.m, p.n, p.k) == (4, 6, 8, 10)
    with pytest.raises(NodeError, match="whole number"):
        grouped.geometry(meta(), (1, 5, 1, 8), (1, 2, 8, 4), np.float32)
    with pytest.raises(NodeError, match="inner dimensions"):
        grouped.geometry(meta(transB=1), (1, 4, 1, 8), (1, 2, 8, 4), np.float32)
