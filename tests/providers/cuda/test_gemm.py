"""MatMul / Gemm on cuBLASLt: layouts and problems on the CPU, parity and workspace on the GPU."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, WorkspaceView
from onnx_ep.errors import NodeError
from onnx_ep.providers.cuda import blas
from onnx_ep.providers.cuda.kernels import gemm
from tests.helpers.cuda_dense import DTYPES, assert_parity, meta, one_node_model, random, run_both


def simulate(p: blas.GemmProblem, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Run ``p`` the way cuBLASLt reads it: column-major layouts over the flat buffers."""
    ops = blas.lt_operands(p)
    fa, fb = a.reshape(-1), b.reshape(-1)
    d = np.zeros(p.batch * p.m * p.n)

    def cm(buf: np.ndarray, lay: blas.Layout, i: int) -> np.ndarray:
        base = buf[i * lay.stride:]
        return np.lib.stride_tricks.as_strided(base, (lay.rows, lay.cols),
                                               (base.itemsize, lay.ld * base.itemsize))

    for i in range(p.batch):
        first = cm(fb, ops.first, i)
        second = cm(fa, ops.second, i)
        first = first.T if ops.trans_first else first
        second = second.T if ops.trans_second else second
        cm(d, ops.d, i)[...] = first @ second
    return d.reshape(p.batch, p.m, p.n)


# ---------------------------------------------------------------- CPU: layouts and problems

@pytest.mark.parametrize("trans_a,trans_b,batch", list(itertools.product((0, 1), (0, 1), (1, 3))))
def test_transposition_trick_computes_row_major_products(trans_a, trans_b, batch):
    m, n, k = 3, 5, 4
    a_shape = (k, m) if trans_a else (m, k)
    b_shape = (n, k) if trans_b else (k, n)
    a = random((batch,) + a_shape, np.float64, 1)
    b = random((batch,) + b_shape, np.float64, 2)
    p = blas.GemmProblem("float32", m, n, k, batch=batch, trans_a=bool(trans_a),
                         trans_b=bool(trans_b), stride_a=m * k, stride_b=k * n, stride_d=m * n)
    op_a = np.swapaxes(a, -1, -2) if trans_a else a
    op_b = np.swapaxes(b, -1, -2) if trans_b else b
    np.testing.assert_allclose(simulate(p, a, b), op_a @ op_b, rtol=1e-12)


def test_lt_operands_swap_a_and_b_and_keep_ld_of_stored_rows():
    ops = blas.lt_operands(blas.GemmProblem("float16", 2, 7, 3, trans_b=True))
    assert (ops.trans_first, ops.trans_second) == (True, False)
    assert ops.first == blas.Layout(3, 7, 3)      # B stored (7, 3): column-major 3 x 7
    assert ops.second == blas.Layout(3, 2, 3)     # A stored (2, 3)
    assert ops.d == blas.Layout(7, 2, 7)


@pytest.mark.parametrize("a,b,out,m,batch", [
    ((2, 3, 4), (4, 5), (2, 3, 5), 6, 1),          # B one matrix: batch folds into M
    ((4,), (4, 5), (5,), 1, 1),
    ((3, 4), (4,), (3,), 3, 1),
    ((4,), (4,), (), 1, 1),
    ((2, 3, 4), (1, 4, 5), (2, 3, 5), 6, 1),
    ((2, 2, 3, 4), (2, 2, 4, 5), (2, 2, 3, 5), 3, 4),  # equal batches: strided batch
])
def test_matmul_shape(a, b, out, m, batch):
    s = gemm.matmul_shape(a, b, np.float32)
    assert s.out == out and s.problem.m == m and s.problem.batch == batch
    assert s.problem.k == a[-1]


def test_matmul_shape_declines_broadcast_batches_and_rejects_bad_k():
    with pytest.raises(NodeError, match="single B matrix"):
        gemm.matmul_shape((3, 4), (2, 4, 5), np.float32)
    with pytest.raises(NodeError, match="single B matrix"):
        gemm.matmul_shape((2, 1, 3, 4), (1, 2, 4, 5), np.float32)
    with pytest.raises(NodeError, match="inner dimensions"):
        gemm.matmul_shape((3, 4), (5, 6), np.float32)


def test_matmul_shape_empty_and_zero_k():
    assert gemm.matmul_shape((0, 4), (4, 5), np.float32).problem is None
    s = gemm.matmul_shape((3, 0), (0, 5), np.float32)
    assert s.zero_k and s.problem is None and s.out == (3, 5)


def test_batch_strides_lower_the_plan_alignment():
    s = gemm.matmul_shape((2, 3, 3), (2, 3, 3), np.float16)   # 9 halves = 18 bytes apart
    assert s.problem.alignment == 2
    assert gemm.matmul_shape((2, 8, 8), (2, 8, 8), np.float16).problem.alignment == 16
    assert blas.pointer_alignment(0x1000, 0x1008) == 8


@pytest.mark.parametrize("c,strides", [((), (0, 0)), ((1,), (0, 0)), ((5,), (0, 1)),
                                       ((1, 5), (0, 1)), ((3, 1), (1, 0)), ((3, 5), (5, 1))])
def test_c_broadcast_strides(c, strides):
    assert gemm.c_broadcast(c, 3, 5) == strides
    cm = np.arange(int(np.prod(c))).reshape(c) if c else np.array(7)
    want = np.broadcast_to(cm, (3, 5))
    flat = cm.reshape(-1)
    got = np.array([[flat[i * strides[0] + j * strides[1]] for j in range(5)] for i in range(3)])
    np.testing.assert_array_equal(got, want)


def test_c_broadcast_rejects_mismatch():
    assert gemm.c_broadcast((4,), 3, 5) is None
    assert gemm.c_broadcast((2, 3, 5), 3, 5) is None


def test_gemm_shape_with_transposes():
    p = gemm.gemm_shape((4, 3), (5, 4), True, True, np.float32)
    assert (p.m, p.n, p.k, p.trans_a, p.trans_b) == (3, 5, 4, True, True)
    with pytest.raises(NodeError):
        gemm.gemm_shape((3, 4), (5, 4), False, False, np.float32)


def test_supports_decisions():
    # without nvmath-python every GEMM-based kernel declines (tested below); the
    # decisions that depend on shapes and attributes need it installed
    pytest.importorskip("nvmath", reason="nvmath-python is not installed")
    mm = gemm.MatMul()
    f32 = np.float32
    assert mm.supports(meta("MatMul", [(f32, (2, 3, 4)), (f32, (4, 5))]))
    assert not mm.supports(meta("MatMul", [(np.float64, (3, 4)), (np.float64, (4, 5))]))
    assert not mm.supports(meta("MatMul", [(np.int32, (3, 4)), (np.int32, (4, 5))]))
    assert not mm.supports(meta("MatMul", [(f32, (3, 4)), (f32, (2, 4, 5))]))
    assert not mm.supports(meta("MatMul", [(f32, ("n", 4)), (f32, ("b", 4, 5))]))
    assert mm.supports(meta("MatMul", [(f32, ("b", 3, 4)), (f32, ("b", 4, 5))]))
    g = gemm.Gemm()
    assert g.supports(meta("Gemm", [(f32, (3, 4)), (f32, (4, 5)), (f32, (5,))]))
    assert not g.supports(meta("Gemm", [(f32, (3, 4)), (f32, (4, 5)), (f32, (4,))]))
    assert not g.supports(meta("Gemm", [(f32, (3, 4)), (np.float16, (4, 5))]))


def test_infer_outputs_and_bound_parity():
    mm = gemm.MatMul()
    m = meta("MatMul", [(np.float16, (2, 3, 4)), (np.float16, (4, 5))])
    assert mm.infer_outputs(m)[0].shape == (2, 3, 5)
    assert mm.bind(m).parity == blas.GEMM_PARITY["float16"]
    g = gemm.Gemm()
    m = meta("Gemm", [(np.float32, (4, 3)), (np.float32, (5, 4))], {"transA": 1, "transB": 1})
    assert g.infer_outputs(m)[0].shape == (3, 5)


def test_workspace_is_none_for_symbolic_shapes():
    m = meta("MatMul", [(np.float32, ("n", 4)), (np.float32, (4, 5))])
    assert gemm.MatMul().workspace_requirement(m).nbytes == 0


# ---------------------------------------------------------------- GPU

needs_nvmath = pytest.mark.skipif(not blas.is_available(),
                                  reason="nvmath-python (cuBLASLt bindings) is not installed")


@pytest.mark.cuda
@needs_nvmath
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("a,b", [((33, 65), (65, 17)), ((2, 3, 40, 24), (2, 3, 24, 8)),
                                 ((4, 7, 16), (16, 9)), ((16,), (16, 5)), ((6, 16), (16,))])
def test_matmul_matches_reference(cuda_device, dtype, a, b):
    dt = DTYPES[dtype]
    feeds = {"a": random(a, dt, 1), "b": random(b, dt, 2)}
    got, ref = run_both(one_node_model("MatMul", feeds), feeds)
    assert_parity(got, ref, blas.GEMM_PARITY[dtype], f"MatMul {a} x {b} {dtype}")


@pytest.mark.cuda
@needs_nvmath
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("trans_a,trans_b,c_shape", [(0, 0, None), (1, 0, (20,)),
                                                     (0, 1, (12, 20)), (1, 1, (12, 1)),
                                                     (0, 0, ())])
def test_gemm_matches_reference(cuda_device, dtype, trans_a, trans_b, c_shape):
    dt = DTYPES[dtype]
    m, n, k = 12, 20, 36
    feeds = {"a": random((k, m) if trans_a else (m, k), dt, 1),
             "b": random((n, k) if trans_b else (k, n), dt, 2)}
    if c_shape is not None:
        feeds["c"] = random(c_shape, dt, 3)
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": 0.5, "beta": 2.0}
    got, ref = run_both(one_node_model("Gemm", feeds, attrs), feeds)
    assert_parity(got, ref, blas.GEMM_PARITY[dtype], f"Gemm {attrs} C={c_shape} {dtype}")


@pytest.mark.cuda
@needs_nvmath
def test_matmul_is_bit_identical_run_after_run(cuda_device):
    feeds = {"a": random((64, 96), np.float32, 1), "b": random((96, 80), np.float32, 2)}
    from onnx_ep import Session

    s = Session(one_node_model("MatMul", feeds), providers=["cuda"])
    first = s.run(None, feeds)[0]
    for _ in range(3):
        assert s.run(None, feeds)[0].tobytes() == first.tobytes()


@pytest.mark.cuda
@needs_nvmath
def test_matmul_workspace_requirement_is_what_cublaslt_receives(cuda_device, stream, allocator,
                                                                monkeypatch):
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    a, b = random((256, 512), np.float16, 1), random((512, 384), np.float16, 2)
    m = meta("MatMul", [(a.dtype, a.shape), (b.dtype, b.shape)])
    kernel = gemm.MatMul().bind(m)
    need = kernel.workspace_requirement(m).nbytes
    shape = gemm.matmul_shape(a.shape, b.shape, a.dtype)
    assert need == blas.matmul_plan(shape.problem).workspace_size
    calls = []
    lt = blas.lt()
    real = lt.matmul

    def spy(*args):
        calls.append((args[13], args[14]))   # workspace pointer and size
        return real(*args)

    monkeypatch.setattr(lt, "matmul", spy)
    da = DeviceTensor.from_numpy(a, allocator, stream, holder="test")
    db = DeviceTensor.from_numpy(b, allocator, stream, holder="test")
    out = allocator.allocate(256 * 384 * 2, Role.ACTIVATIONS, "test")
    blocks = [da.owner, db.owner, out]
    y = DeviceTensor(out.ptr, np.float16, (256, 384), owner=out)
    ws_view = None
    if need:
        ws = allocator.allocate(need, Role.WORKSPACE_STEP, "test")
        blocks.append(ws)
        ws_view = WorkspaceView(DeviceTensor(ws.ptr, np.uint8, (need,), owner=ws), need)
    try:
        kernel.execute_with_workspace(ExecutionContext(m, stream=stream, provider="cuda"),
                                      [da, db], [y], ws_view)
        got = y.numpy(stream)
    finally:
        stream.synchronize()
        for blk in blocks:
            blk.free()
    assert calls == [((ws_view.buffer.ptr, need) if need else (0, 0))]
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
    assert_parity(got, ref, blas.GEMM_PARITY["float16"], "direct MatMul")


def test_gemm_ops_decline_without_nvmath(monkeypatch):
    from onnx_ep.providers.cuda.kernels import conv

    monkeypatch.setattr(blas, "is_available", lambda: False)
    f32 = np.float32
    for kernel, m in [(gemm.MatMul(), meta("MatMul", [(f32, (3, 4)), (f32, (4, 5))])),
                      (gemm.Gemm(), meta("Gemm", [(f32, (3, 4)), (f32, (4, 5))])),
                      (conv.Conv(), meta("Conv", [(f32, (1, 3, 8, 8)), (f32, (4, 3, 3, 3))]))]:
        s = kernel.supports(m)
        assert not s and "nvmath-python" in s.reason



def test_gemm_kernels_decline_with_an_install_hint_without_nvmath(monkeypatch):
    from onnx_ep.providers.cuda import blas

    monkeypatch.setattr(blas, "is_available", lambda: False)
    verdict = blas.support()
    assert not verdict and "pip install nvmath-python" in verdict.reason
