"""GPU parity of CUDA onnx_ep.fused::MatMulAdd against cpu_reference under the kernel's
declared promise (MATMUL_ADD_PARITY: MatMul's, plus one product ulp), on every route:
cuBLASLt's bias epilogue (one cublasLtMatmul), a residual read as C (one call), and the
bias written first with the GEMM adding onto it; captured
replays, determinism, and plans shared between threads with different biases.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_matmul_add.py
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_ep import Session, SessionOptions
from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext, WorkspaceView
from onnx_ep.providers.cuda import blas
from onnx_ep.providers.cuda.kernels import fused_gemm, gemm
from tests.helpers.cuda_dense import DTYPES, assert_parity, meta
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET

needs_nvmath = pytest.mark.skipif(not blas.is_available(),
                                  reason="nvmath-python (cuBLASLt bindings) is not installed")
pytestmark = [pytest.mark.cuda, needs_nvmath]
(KERNEL,) = [k for k in fused_gemm.KERNELS if isinstance(k, fused_gemm.MatMulAdd)]
NAMES = ("a", "b", "bias")
OFF = SessionOptions(capture="off")


def matmul_add_model(dtype: object, a: Sequence[int | str], b: Sequence[int | str],
                     bias: Sequence[int | str]) -> onnx.ModelProto:
    """One MatMulAdd node over graph inputs a, b, bias."""
    node = helper.make_node("MatMulAdd", list(NAMES), ["y"], domain=FUSED_DOMAIN, name="mma")
    elem = onnx_elem_type(np.dtype(dtype))
    graph = helper.make_graph(
        [node], "matmul_add",
        [helper.make_tensor_value_info(n, elem, list(s)) for n, s in zip(NAMES, (a, b, bias))],
        [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", ORACLE_OPSET),
                                            helper.make_opsetid(FUSED_DOMAIN, 1)])


def feeds_for(dtype: object, a: Sequence[int], b: Sequence[int], bias: Sequence[int],
              seed: int = 0) -> dict[str, np.ndarray]:
    """Operands of unit scale: B scaled by 1/sqrt(K) so the product is of unit scale too."""
    rng = np.random.default_rng(seed)
    k = max(int(a[-1]), 1)
    arrays = (rng.standard_normal(tuple(a)), rng.standard_normal(tuple(b)) / np.sqrt(k),
              rng.standard_normal(tuple(bias)))
    return {n: np.asarray(x, np.float32).astype(dtype) for n, x in zip(NAMES, arrays)}


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The route of every MatMulAdd call from here on: "epilogue" or "broadcast"."""
    seen: list[str] = []
    run, write_bias = blas.run, fused_gemm.MatMulAdd.write_bias

    def spy_run(problem: blas.GemmProblem, *args: Any, **kw: Any) -> Any:
        if problem.bias:
            seen.append(fused_gemm.EPILOGUE)
        elif kw.get("c_ptr") is not None:
            seen.append(fused_gemm.RESIDUAL)
        return run(problem, *args, **kw)

    def spy_write(self: Any, *args: Any) -> None:
        seen.append(fused_gemm.BROADCAST)
        write_bias(self, *args)

    monkeypatch.setattr(blas, "run", spy_run)
    monkeypatch.setattr(fused_gemm.MatMulAdd, "write_bias", spy_write)
    return seen


def check(shapes: Sequence[Sequence[int]], dtype: Any, *, seed: int = 0,
          feeds: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Run on cuda alone (eagerly) and on cpu_reference; assert the promise for ``dtype``."""
    m = matmul_add_model(dtype, *shapes)
    f = feeds or feeds_for(dtype, *shapes, seed=seed)
    got = np.asarray(Session(m, providers=["cuda"], options=OFF).run(None, f)[0])
    ref = np.asarray(Session(m, providers=["cpu_reference"]).run(None, f)[0])
    assert_parity(got, ref, KERNEL.parity_for(dtype), f"MatMulAdd {shapes} {dtype}")
    return got


#: (A, B, bias) the epilogue takes: a Qwen2.5-0.5B k/v projection at decode, a prefill,
#: an odd N, a 1-D A, a row bias
EPILOGUE_SHAPES = {
    "qwen_decode_kv": ((1, 1, 896), (896, 128), (128,)),
    "qwen_decode_q": ((1, 1, 896), (896, 896), (896,)),
    "prefill": ((2, 5, 16), (16, 8), (8,)),
    "odd_n": ((33, 65), (65, 17), (17,)),
    "a_1d": ((24,), (24, 40), (40,)),
    "row_bias": ((4, 7, 32), (32, 48), (1, 1, 48)),
}
#: (A, B, bias) written first: strided batches, a bias along M, scalar and full-shape
#: biases, a 1-D B, K = 0
BROADCAST_SHAPES = {
    "batched": ((3, 4, 5), (3, 5, 6), (6,)),
    "batched_row_bias": ((3, 4, 5), (3, 5, 6), (1, 6)),
    "batched_mn_bias": ((2, 3, 40, 24), (2, 3, 24, 8), (40, 8)),
    "bias_along_m": ((2, 4, 5), (5, 6), (4, 1)),
    "scalar_bias": ((4, 5), (5, 6), ()),
    "k_zero": ((3, 0), (0, 5), (5,)),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(EPILOGUE_SHAPES))
def test_the_epilogue_route_keeps_the_promise_in_one_cublaslt_call(cuda_device, routes, dtype,
                                                                   case):
    check(EPILOGUE_SHAPES[case], DTYPES[dtype])
    assert routes == [fused_gemm.EPILOGUE]


#: (A, B, bias) with a bias of the product's shape: cuBLASLt's C, one call
RESIDUAL_SHAPES = {
    "full_bias": ((2, 4, 5), (5, 6), (2, 4, 6)),
    "b_1d": ((6, 16), (16,), (6,)),
    "prefill_residual": ((1, 3, 896), (896, 896), (1, 3, 896)),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(RESIDUAL_SHAPES))
def test_the_residual_route_reads_the_bias_as_c_in_one_call(cuda_device, routes, dtype, case):
    check(RESIDUAL_SHAPES[case], DTYPES[dtype])
    assert routes == [fused_gemm.RESIDUAL]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(BROADCAST_SHAPES))
def test_the_broadcast_route_keeps_the_promise(cuda_device, routes, dtype, case):
    check(BROADCAST_SHAPES[case], DTYPES[dtype])
    assert routes == [fused_gemm.BROADCAST]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_epilogue_adds_the_bias_before_the_one_rounding(cuda_device, routes, dtype):
    """A deep K with one row (split-K territory) and a bias cancelling 90% of the product:
    a bias added after rounding the product to float16 / bfloat16 would be off by up to
    half an ulp of the product, five times the promise relative to the sum."""
    dt = DTYPES[dtype]
    shapes = ((1, 4096), (4096, 64), (64,))
    f = feeds_for(dt, *shapes, seed=11)
    product = f["a"].astype(np.float64) @ f["b"].astype(np.float64)
    f["bias"] = (-0.9 * product.reshape(-1)).astype(np.float32).astype(dt)
    check(shapes, dt, feeds=f)
    assert routes == [fused_gemm.EPILOGUE]


def test_a_misaligned_bias_takes_the_broadcast_route(cuda_device, stream, allocator, routes):
    """A bias view 2 bytes into its block (a user's DLPack slice): cuBLASLt's epilogue may
    load it 16 bytes at a time, so the bias is written first instead."""
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    dt = np.dtype(np.float16)
    f = feeds_for(dt, (5, 64), (64, 24), (24,), seed=3)
    m = meta("MatMulAdd", [(dt, (5, 64)), (dt, (64, 24)), (dt, (24,))])
    kernel = KERNEL.bind(m)
    da = DeviceTensor.from_numpy(f["a"], allocator, stream, holder="test")
    db = DeviceTensor.from_numpy(f["b"], allocator, stream, holder="test")
    dbias = DeviceTensor.from_numpy(np.concatenate([np.zeros(1, dt), f["bias"]]), allocator,
                                    stream, holder="test").view(dt, (24,), offset_bytes=2)
    out = allocator.allocate(5 * 24 * 2, Role.ACTIVATIONS, "test")
    blocks = [da.owner, db.owner, dbias.owner.owner, out]
    y = DeviceTensor(out.ptr, dt, (5, 24), owner=out)
    need = kernel.workspace_requirement(m).nbytes
    view = None
    if need:
        ws = allocator.allocate(need, Role.WORKSPACE_STEP, "test")
        blocks.append(ws)
        view = WorkspaceView(DeviceTensor(ws.ptr, np.uint8, (need,), owner=ws), need)
    try:
        kernel.execute_with_workspace(ExecutionContext(m, stream=stream, provider="cuda"),
                                      [da, db, dbias], [y], view)
        got = y.numpy(stream)
    finally:
        stream.synchronize()
        for blk in blocks:
            blk.free()
    assert routes == [fused_gemm.BROADCAST]
    want = (f["a"].astype(np.float64) @ f["b"].astype(np.float64)
            + f["bias"].astype(np.float64)).astype(dt)
    assert_parity(got, want, KERNEL.parity_for(dt), "misaligned bias")


def test_the_epilogue_workspace_is_what_cublaslt_receives(cuda_device, monkeypatch):
    dt = np.dtype(np.float16)
    shapes = ((64, 512), (512, 384), (384,))
    m = meta("MatMulAdd", [(dt, s) for s in shapes])
    need = KERNEL.bind(m).workspace_requirement(m).nbytes
    plan = blas.find_plan(gemm.matmul_add_shape(*shapes, dt).fused)
    assert plan is not None, "cuBLASLt has no bias-epilogue algorithm for a plain fp16 GEMM"
    assert need == plan.workspace_size
    calls = []
    lt = blas.lt()
    real = lt.matmul
    monkeypatch.setattr(lt, "matmul", lambda *args: (calls.append(args[14]), real(*args)))
    check(shapes, dt)
    assert calls == [need]


def test_the_epilogue_is_bit_identical_run_after_run(cuda_device):
    shapes = EPILOGUE_SHAPES["qwen_decode_q"]
    f = feeds_for(np.float16, *shapes, seed=5)
    sess = Session(matmul_add_model(np.float16, *shapes), providers=["cuda"], options=OFF)
    first = np.asarray(sess.run(None, f)[0])
    for _ in range(3):
        assert np.asarray(sess.run(None, f)[0]).tobytes() == first.tobytes()


@pytest.mark.parametrize("case", ["qwen_decode_kv", "batched"])
def test_captured_replays_are_the_eager_bytes(cuda_device, case):
    shapes = {**EPILOGUE_SHAPES, **BROADCAST_SHAPES}[case]
    m = matmul_add_model(np.float16, *shapes)
    on = Session(m, providers=["cuda"], options=SessionOptions(capture="require"))
    off = Session(m, providers=["cuda"], options=OFF)
    try:
        for seed in range(4):
            f = feeds_for(np.float16, *shapes, seed=seed)
            a = np.asarray(on.run(None, f)[0])
            b = np.asarray(off.run(None, f)[0])
            assert a.tobytes() == b.tobytes(), f"seed {seed}"
        assert sum(p["replays"] for p in on.capture_report()["plans"]) >= 1
    finally:
        on.close()
        off.close()


def test_sessions_on_threads_share_a_plan_and_keep_their_own_bias(cuda_device):
    """Two sessions of one shape share the epilogue plan (and its descriptor); each thread's
    calls must enqueue its own bias pointer."""
    shapes = EPILOGUE_SHAPES["qwen_decode_kv"]
    m = matmul_add_model(np.float16, *shapes)
    sessions = [Session(m, providers=["cuda"], options=OFF) for _ in range(2)]
    feeds = [feeds_for(np.float16, *shapes, seed=20 + i) for i in range(2)]
    want = [np.asarray(s.run(None, f)[0]).tobytes() for s, f in zip(sessions, feeds)]
    assert want[0] != want[1]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(40):
                got = np.asarray(sessions[i].run(None, feeds[i])[0]).tobytes()
                if got != want[i]:
                    raise AssertionError(f"session {i} got another session's result")
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in sessions:
            s.close()
    assert not errors, errors[0]
