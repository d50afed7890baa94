"""GPU parity of CUDA com.microsoft::FusedMatMul against cpu_reference under the kernel's
declared promise (MatMul's, blas.GEMM_PARITY), on every route: A's batch folded into M, a
strided batch (attention's scores ``q @ k^T * scale`` per head), and a single matrix read at
batch stride 0; one cublasLtMatmul per call, alpha and the transposes included; captured
replays and determinism.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_fused_matmul.py
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_ep import Session, SessionOptions
from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.providers.cuda import blas
from onnx_ep.providers.cuda.kernels import fused_gemm
from tests.helpers.cuda_dense import DTYPES, assert_parity
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET

needs_nvmath = pytest.mark.skipif(not blas.is_available(),
                                  reason="nvmath-python (cuBLASLt bindings) is not installed")
pytestmark = [pytest.mark.cuda, needs_nvmath]
(KERNEL,) = [k for k in fused_gemm.KERNELS if type(k) is fused_gemm.FusedMatMul]
OFF = SessionOptions(capture="off")


def fused_matmul_model(dtype: object, a: Sequence[int | str], b: Sequence[int | str],
                       op: str = "FusedMatMul", domain: str = "com.microsoft",
                       **attrs: Any) -> onnx.ModelProto:
    """One FusedMatMul (or ``domain::op``) node over graph inputs a and b."""
    node = helper.make_node(op, ["a", "b"], ["y"], domain=domain, name="fmm", **attrs)
    elem = onnx_elem_type(np.dtype(dtype))
    graph = helper.make_graph(
        [node], "fused_matmul",
        [helper.make_tensor_value_info(n, elem, list(s)) for n, s in zip("ab", (a, b))],
        [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", ORACLE_OPSET),
                                            helper.make_opsetid(domain, 1)])


def feeds_for(dtype: object, a: Sequence[int], b: Sequence[int], k: int,
              seed: int = 0) -> dict[str, np.ndarray]:
    """Operands of unit scale, B scaled by 1/sqrt(K) so the product is of unit scale too."""
    rng = np.random.default_rng(seed)
    arrays = (rng.standard_normal(tuple(a)), rng.standard_normal(tuple(b)) / np.sqrt(max(k, 1)))
    return {n: np.asarray(x, np.float32).astype(dtype) for n, x in zip("ab", arrays)}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[blas.GemmProblem]:
    """The problem of every cuBLASLt call from here on."""
    seen: list[blas.GemmProblem] = []
    run = blas.run

    def spy(problem: blas.GemmProblem, *args: Any, **kw: Any) -> Any:
        seen.append(problem)
        return run(problem, *args, **kw)

    monkeypatch.setattr(blas, "run", spy)
    return seen


def check(a: Sequence[int], b: Sequence[int], dtype: Any, *, seed: int = 0,
          **attrs: Any) -> np.ndarray:
    """Run on cuda alone (eagerly) and on cpu_reference; assert the promise for ``dtype``."""
    m = fused_matmul_model(dtype, a, b, **attrs)
    shape = fused_gemm.fused_matmul_shape(a, b, bool(attrs.get("transA", 0)),
                                          bool(attrs.get("transB", 0)), dtype)
    k = shape.problem.k if shape.problem is not None else 1
    f = feeds_for(dtype, a, b, k, seed=seed)
    got = np.asarray(Session(m, providers=["cuda"], options=OFF).run(None, f)[0])
    ref = np.asarray(Session(m, providers=["cpu_reference"]).run(None, f)[0])
    assert_parity(got, ref, KERNEL.parity_for(dtype), f"FusedMatMul {a} {b} {attrs} {dtype}")
    return got


#: (A, B, attributes): attention's scores at decode and prefill (Qwen2.5-0.5B: 14 heads of
#: 64), plain 2-D products with every transpose, the fold with transB, the strided batch with
#: transA, single matrices read at stride 0, 1-D operands
CASES = {
    "attention_decode": ((1, 14, 1, 64), (1, 14, 129, 64), {"transB": 1, "alpha": 0.125}),
    "attention_prefill": ((1, 14, 7, 64), (1, 14, 129, 64), {"transB": 1, "alpha": 0.125}),
    "plain": ((33, 65), (65, 17), {}),
    "trans_a": ((65, 33), (65, 17), {"transA": 1, "alpha": -2.0}),
    "trans_b": ((33, 65), (17, 65), {"transB": 1, "alpha": 0.125}),
    "trans_both": ((65, 33), (17, 65), {"transA": 1, "transB": 1}),
    "fold_trans_b": ((2, 5, 96), (40, 96), {"transB": 1, "alpha": 0.5}),
    "batched_trans_a": ((3, 24, 8), (3, 24, 16), {"transA": 1}),
    "trans_a_one_b": ((4, 48, 9), (48, 20), {"transA": 1, "alpha": -2.0}),
    "one_a_batched_b": ((12, 32), (2, 3, 20, 32), {"transB": 1}),
    "vector_a": ((64,), (6, 40, 64), {"transA": 1, "transB": 1}),
    "vector_b": ((5, 64, 7), (64,), {"transA": 1}),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(CASES))
def test_every_route_keeps_the_promise_in_one_cublaslt_call(cuda_device, calls, dtype, case):
    a, b, attrs = CASES[case]
    check(a, b, DTYPES[dtype], **attrs)
    (problem,) = calls
    assert problem == fused_gemm.fused_matmul_shape(
        a, b, bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0)), DTYPES[dtype]).problem


def test_the_batch_stride_zero_routes_read_one_matrix_for_every_batch(cuda_device, calls):
    """B at stride 0 behind a transposed A, A at stride 0 before a batch of B: cuBLASLt
    must read the one matrix again for every batch (parity fails otherwise)."""
    for a, b, attrs in (CASES["trans_a_one_b"], CASES["one_a_batched_b"]):
        check(a, b, np.dtype(np.float32), seed=3, **attrs)
    assert [(p.stride_a == 0, p.stride_b == 0) for p in calls] == [(False, True), (True, False)]


def test_k_zero_is_zeros_and_an_empty_output_is_fine(cuda_device):
    got = check((3, 0), (5, 0), np.dtype(np.float16), transB=1, alpha=3.0)
    assert got.shape == (3, 5) and not got.any()
    assert check((0, 4), (4, 5), np.dtype(np.float16)).shape == (0, 5)


def test_the_workspace_is_what_cublaslt_receives(cuda_device, monkeypatch):
    from tests.helpers.cuda_dense import meta

    dt = np.dtype(np.float16)
    a, b, attrs = (64, 512), (384, 512), {"transB": 1, "alpha": 0.125}
    m = meta("FusedMatMul", [(dt, a), (dt, b)], attrs)
    need = KERNEL.bind(m).workspace_requirement(m).nbytes
    assert need == blas.workspace_bytes(fused_gemm.fused_matmul_shape(a, b, False, True,
                                                                      dt).problem)
    seen = []
    lt = blas.lt()
    real = lt.matmul
    monkeypatch.setattr(lt, "matmul", lambda *args: (seen.append(args[14]), real(*args)))
    monkeypatch.setattr(blas, "_calls", {})
    check(a, b, dt, **attrs)
    assert seen == [need]


def test_a_session_reruns_bit_identically_over_symbolic_lengths(cuda_device):
    m = fused_matmul_model(np.float16, (1, 14, "s", 64), (1, 14, "t", 64), transB=1,
                           alpha=0.125)
    sess = Session(m, providers=["cuda"], options=OFF)
    ref = Session(m, providers=["cpu_reference"])
    try:
        for s_len, t_len in ((7, 7), (1, 8), (1, 8), (1, 129)):
            f = feeds_for(np.float16, (1, 14, s_len, 64), (1, 14, t_len, 64), 64, seed=t_len)
            got = np.asarray(sess.run(None, f)[0])
            assert_parity(got, np.asarray(ref.run(None, f)[0]), KERNEL.parity_for(np.float16),
                          f"s={s_len} t={t_len}")
            assert np.asarray(sess.run(None, f)[0]).tobytes() == got.tobytes()
    finally:
        sess.close()


@pytest.mark.parametrize("case", ["attention_decode", "trans_a_one_b"])
def test_captured_replays_are_the_eager_bytes(cuda_device, case):
    a, b, attrs = CASES[case]
    m = fused_matmul_model(np.float16, a, b, **attrs)
    on = Session(m, providers=["cuda"], options=SessionOptions(capture="require"))
    off = Session(m, providers=["cuda"], options=OFF)
    try:
        for seed in range(4):
            f = feeds_for(np.float16, a, b, 64, seed=seed)
            x = np.asarray(on.run(None, f)[0])
            y = np.asarray(off.run(None, f)[0])
            assert x.tobytes() == y.tobytes(), f"seed {seed}"
        assert sum(p["replays"] for p in on.capture_report()["plans"]) >= 1
    finally:
        on.close()
        off.close()


# ---------------------------------------------------------------- onnx_ep.fused::GroupedMatMul

#: (A, B, attributes): a decode step's scores and weighted values (14 heads on 2 groups),
#: a prefill, and a batch of two
GROUPED_CASES = {
    "scores_decode": ((1, 14, 1, 64), (1, 2, 129, 64), {"transB": 1, "alpha": 0.125}),
    "values_decode": ((1, 14, 1, 129), (1, 2, 129, 64), {}),
    "scores_prefill": ((1, 14, 7, 64), (1, 2, 135, 64), {"transB": 1, "alpha": 0.125}),
    "values_batch2": ((2, 4, 3, 10), (2, 2, 10, 8), {}),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(GROUPED_CASES))
def test_grouped_matmul_keeps_the_promise_in_one_cublaslt_call(cuda_device, calls, case,
                                                               dtype):
    a, b, attrs = GROUPED_CASES[case]
    dt = DTYPES[dtype]
    m = fused_matmul_model(dt, a, b, op="GroupedMatMul", domain=FUSED_DOMAIN, **attrs)
    f = feeds_for(dt, a, b, b[-1] if attrs.get("transB") else b[-2], seed=5)
    sess = Session(m, providers=["cuda"], options=OFF)
    assert sess.placement_summary() == {"cuda": 1}
    got = np.asarray(sess.run(None, f)[0])
    ref = np.asarray(Session(m, providers=["cpu_reference"]).run(None, f)[0])
    assert got.shape == ref.shape
    (grouped,) = [k for k in fused_gemm.KERNELS if isinstance(k, fused_gemm.GroupedMatMul)]
    assert_parity(got, ref, grouped.parity_for(dt), f"GroupedMatMul {case} {dtype}")
    assert len(calls) == 1 and calls[0].batch == a[0] * b[1]
