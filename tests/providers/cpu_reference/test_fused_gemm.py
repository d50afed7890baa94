"""cpu_reference onnx_ep.fused::MatMulAdd against the pattern it replaces, MatMul then Add,
run unfused by onnxruntime CPU, and against its own promise: the float64 product plus the
bias, rounded once."""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx_ep import Session
from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec
from onnx_ep.errors import NodeError, NoKernelError
from onnx_ep.providers.cpu_reference.fused_gemm import KERNELS, FusedMatMul, MatMulAdd
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET, ort_version, run_ort

BF16 = np.dtype(ml_dtypes.bfloat16)
Shape = Sequence[int | str]
NAMES = ("a", "b", "bias")


def _value_info(name: str, dtype: object, shape: Shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx_elem_type(np.dtype(dtype)), list(shape))


def _model(nodes: list[onnx.NodeProto], dtypes: Sequence[object],
           shapes: Sequence[Shape]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "matmul_add",
                              [_value_info(n, d, s) for n, d, s in zip(NAMES, dtypes, shapes)],
                              [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", ORACLE_OPSET),
                                            helper.make_opsetid(FUSED_DOMAIN, 1)])


def fused_model(dtype: object, a: Shape, b: Shape, bias: Shape, *,
                dtypes: Sequence[object] | None = None) -> onnx.ModelProto:
    """One MatMulAdd node over graph inputs a, b, bias (``dtypes`` per input when given)."""
    node = helper.make_node("MatMulAdd", list(NAMES), ["y"], domain=FUSED_DOMAIN, name="mma")
    return _model([node], dtypes or (dtype,) * 3, (a, b, bias))


def pattern_model(dtype: object, a: Shape, b: Shape, bias: Shape) -> onnx.ModelProto:
    """``Add(MatMul(a, b), bias)``: the two nodes the fusion pass replaces."""
    nodes = [helper.make_node("MatMul", ["a", "b"], ["ab"], name="mm"),
             helper.make_node("Add", ["ab", "bias"], ["y"], name="add")]
    return _model(nodes, (dtype,) * 3, (a, b, bias))


def feeds(dtype: object, a: Sequence[int], b: Sequence[int], bias: Sequence[int],
          seed: int = 0) -> dict[str, np.ndarray]:
    """A of unit scale, B scaled by 1/sqrt(K) so the product is of unit scale too."""
    rng = np.random.default_rng(seed)
    k = a[-1] if a else 1
    arrays = (rng.standard_normal(tuple(a)), rng.standard_normal(tuple(b)) / np.sqrt(max(k, 1)),
              rng.standard_normal(tuple(bias)))
    return {n: np.asarray(x, np.float32).astype(dtype) for n, x in zip(NAMES, arrays)}


def formula(f: dict[str, np.ndarray]) -> np.ndarray:
    """MatMul(A, B) + bias in float64 (not rounded)."""
    a, b, bias = (f[n].astype(np.float64) for n in NAMES)
    return np.asarray(np.matmul(a, b) + bias)


def run_fused(f: dict[str, np.ndarray]) -> np.ndarray:
    m = fused_model(f["a"].dtype, f["a"].shape, f["b"].shape, f["bias"].shape)
    (y,) = Session(m, providers=["cpu_reference"]).run(None, f)
    return np.asarray(y)


#: (A, B, bias): a Qwen decode projection, a prefill one, a strided batch with vector and
#: row biases, a bias along M, a scalar and a full-shape bias, 1-D operands
SHAPES = {
    "qwen_decode_kv": ((1, 1, 896), (896, 128), (128,)),
    "prefill": ((2, 5, 16), (16, 8), (8,)),
    "batched": ((3, 4, 5), (3, 5, 6), (6,)),
    "batched_row_bias": ((3, 4, 5), (3, 5, 6), (1, 6)),
    "bias_along_m": ((2, 4, 5), (5, 6), (4, 1)),
    "scalar_bias": ((4, 5), (5, 6), ()),
    "full_bias": ((2, 4, 5), (5, 6), (2, 4, 6)),
    "a_1d": ((5,), (5, 6), (6,)),
    "b_1d": ((4, 5), (5,), (4,)),
    "both_1d": ((5,), (5,), ()),
    "batch_broadcast": ((2, 1, 4, 5), (3, 5, 6), (6,)),
}
ORT_CASES = ["qwen_decode_kv", "prefill", "batched", "batched_row_bias", "bias_along_m",
             "scalar_bias", "full_bias", "a_1d", "b_1d"]


@pytest.mark.parametrize("case", ORT_CASES)
def test_float32_matches_matmul_then_add_on_onnxruntime(case: str) -> None:
    shapes = SHAPES[case]
    f = feeds(np.float32, *shapes, seed=1)
    got = run_fused(f)
    (want,) = run_ort(pattern_model(np.float32, *shapes), f)
    assert got.dtype == want.dtype and got.shape == want.shape
    # onnxruntime sums in float32 and rounds the product before the add
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["qwen_decode_kv", "prefill", "batched", "batched_row_bias",
                                  "bias_along_m"])
def test_float16_is_near_matmul_then_add_on_onnxruntime(case: str) -> None:
    shapes = SHAPES[case]
    f = feeds(np.float16, *shapes, seed=2)
    got = run_fused(f)
    (want,) = run_ort(pattern_model(np.float16, *shapes), f)
    assert got.dtype == np.float16 and got.shape == want.shape
    # the pattern rounds to float16 twice (product, sum): up to 1.5 ulp of values below 4
    np.testing.assert_allclose(got.astype(np.float32), np.asarray(want, np.float32),
                               rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("case", list(SHAPES))
def test_the_result_is_the_float64_sum_rounded_once(case: str, dtype: object) -> None:
    f = feeds(dtype, *SHAPES[case], seed=3)
    got = run_fused(f)
    # numpy rounds float64 to float32 / float16 directly: the reference's one rounding
    assert got.shape == formula(f).shape
    assert got.tobytes() == formula(f).astype(dtype).tobytes()


def test_bfloat16_is_the_float64_sum_within_half_an_ulp() -> None:
    f = feeds(BF16, *SHAPES["prefill"], seed=4)
    got = run_fused(f)
    assert got.dtype == BF16
    exact = formula(f)
    err = np.abs(got.astype(np.float64) - exact)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(exact), 2.0 ** -126))) - 7)
    assert np.all(err <= ulp / 2), float((err / ulp).max())


def test_float64_matches_matmul_then_add_on_onnxruntime() -> None:
    shapes = SHAPES["batched"]
    f = feeds(np.float64, *shapes, seed=5)
    (want,) = run_ort(pattern_model(np.float64, *shapes), f)
    got = run_fused(f)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_an_empty_product_and_an_empty_sum() -> None:
    f = feeds(np.float32, (3, 0), (0, 5), (5,), seed=6)
    got = run_fused(f)
    assert got.tobytes() == np.broadcast_to(f["bias"], (3, 5)).tobytes()   # K = 0: the bias
    f = feeds(np.float32, (0, 4), (4, 5), (5,), seed=7)
    assert run_fused(f).shape == (0, 5)


def test_a_session_reruns_and_takes_a_second_shape() -> None:
    m = fused_model(np.float32, ("b", "s", 16), (16, 8), (8,))
    sess = Session(m, providers=["cpu_reference"])
    for s_len in (5, 5, 1):
        f = feeds(np.float32, (2, s_len, 16), (16, 8), (8,), seed=s_len)
        (got,) = sess.run(None, f)
        assert np.asarray(got).tobytes() == formula(f).astype(np.float32).tobytes()


def test_the_kernel_is_registered_in_the_fused_domain() -> None:
    (kernel,) = [k for k in KERNELS if isinstance(k, MatMulAdd)]
    assert kernel.key.domain == FUSED_DOMAIN == "onnx_ep.fused"
    assert (kernel.key.op_type, kernel.key.since) == ("MatMulAdd", 1)
    assert not kernel.capture_support().supported


# ---------------------------------------------------------------- rejections


def _declined(m: onnx.ModelProto) -> str:
    with pytest.raises(NoKernelError) as info:
        Session(m, providers=["cpu_reference"])
    return info.value.tried["cpu_reference"]


def test_mixed_dtypes_are_declined() -> None:
    m = fused_model(np.float32, (2, 4), (4, 3), (3,),
                    dtypes=(np.float32, np.float32, np.float16))
    assert "input bias is float16 but A is float32" in _declined(m)


def test_integer_inputs_are_declined() -> None:
    assert "A dtype int32 is not one of" in _declined(fused_model(np.int32, (2, 4), (4, 3), (3,)))


@pytest.mark.parametrize("a,b,bias,why", [
    ((2, 4), (4, 3), (4,), r"bias of shape \(4,\) does not broadcast to the MatMul output"),
    ((4, 3), (3, 6), (2, 1, 6), r"bias of shape \(2, 1, 6\) does not broadcast"),
    ((2, 4), (5, 3), (3,), "inner dimensions differ"),
    ((2, 3, 4), (2, 4, 5), (3, 5), None),
])
def test_shapes_are_checked_at_run_time(a, b, bias, why) -> None:
    f = feeds(np.float32, a, b, bias, seed=8)
    sess = Session(fused_model(np.float32, a, b, bias), providers=["cpu_reference"])
    if why is None:     # a (M, N) bias repeated over the batch is fine
        (got,) = sess.run(None, f)
        assert np.asarray(got).tobytes() == formula(f).astype(np.float32).tobytes()
        return
    with pytest.raises(NodeError, match=why):
        sess.run(None, f)


def test_run_rejects_what_supports_could_not_see() -> None:
    meta = NodeMeta(name="mma", op_type="MatMulAdd", domain=FUSED_DOMAIN, opset=1, attrs={},
                    inputs=(TensorSpec(np.float32, ("n", 4)),) * 3)
    ctx = ExecutionContext(meta)
    a = np.zeros((2, 4), np.float32)
    with pytest.raises(NodeError, match="input bias is float64 but A is float32") as info:
        MatMulAdd().execute_with_workspace(ctx, [a, a.T, np.zeros(2)], [None], None)
    assert info.value.node == "mma"
    with pytest.raises(NodeError, match="A dtype int64 is not one of"):
        x = np.zeros((2, 2), np.int64)
        MatMulAdd().execute_with_workspace(ctx, [x, x, x], [None], None)


# ---------------------------------------------------------------- com.microsoft::FusedMatMul

MS_DOMAIN = "com.microsoft"
FLAGS = ("transA", "transB", "transBatchA", "transBatchB")


def fmm_model(dtype: object, a: Shape, b: Shape, *, dtypes: Sequence[object] | None = None,
              **attrs: object) -> onnx.ModelProto:
    """One FusedMatMul node over graph inputs a and b."""
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS_DOMAIN, name="fmm",
                            **attrs)
    graph = helper.make_graph([node], "fused_matmul",
                              [_value_info(n, d, s) for n, d, s in
                               zip("ab", dtypes or (dtype, dtype), (a, b))],
                              [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", ORACLE_OPSET),
                                            helper.make_opsetid(MS_DOMAIN, 1)])


def fmm_feeds(dtype: object, a: Sequence[int], b: Sequence[int],
              seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(tuple(s)).astype(np.float32).astype(dtype)
            for n, s in zip("ab", (a, b))}


def fmm_formula(f: dict[str, np.ndarray], alpha: float = 1.0, **flags: int) -> np.ndarray:
    """alpha * op(A) @ op(B) in float64 (not rounded), written from the contrib op's text;
    alpha is the float32 the model stores."""
    ops = []
    for name, x in zip("AB", (f["a"].astype(np.float64), f["b"].astype(np.float64))):
        if flags.get(f"transBatch{name}"):
            x = np.moveaxis(x, 0, -2)       # [M, b0..bn, K] read as [b0..bn, M, K]
        if flags.get(f"trans{name}") and x.ndim > 1:
            x = np.swapaxes(x, -1, -2)
        ops.append(np.ascontiguousarray(x))
    return np.asarray(np.matmul(*ops) * float(np.float32(alpha)))


def run_fmm(f: dict[str, np.ndarray], **attrs: object) -> np.ndarray:
    m = fmm_model(f["a"].dtype, f["a"].shape, f["b"].shape, **attrs)
    (y,) = Session(m, providers=["cpu_reference"]).run(None, f)
    return np.asarray(y)


def stored(batch: tuple[int, ...], rows: int, cols: int, trans: int) -> tuple[int, ...]:
    return batch + ((cols, rows) if trans else (rows, cols))


def random_geometry(kind: str, seed: int) -> tuple[tuple[int, ...], tuple[int, ...], int, int,
                                                   int]:
    """(batch of A, batch of B, M, K, N) of one kind, with random sizes."""
    rng = np.random.default_rng(seed)
    m, k, n = (int(d) for d in rng.integers(1, 9, 3))
    batch = tuple(int(d) for d in rng.integers(2, 5, 2))
    return {"2d": ((), ()), "batched_equal": (batch, batch),
            "broadcast_batch": ((batch[0], 1), (batch[1],)),
            "a_batched": (batch, ()), "b_batched": ((), batch)}[kind] + (m, k, n)


KINDS = ["2d", "batched_equal", "broadcast_batch", "a_batched", "b_batched"]
TRANS = [(0, 0), (1, 0), (0, 1), (1, 1)]


@pytest.mark.parametrize("alpha", [1.0, 0.125, -2.0])
@pytest.mark.parametrize("trans", TRANS, ids=lambda t: f"transA{t[0]}B{t[1]}")
@pytest.mark.parametrize("kind", KINDS)
def test_fused_matmul_float32_matches_onnxruntime(kind, trans, alpha) -> None:
    ba, bb, m, k, n = random_geometry(kind, seed=KINDS.index(kind))
    attrs = {"alpha": alpha, "transA": trans[0], "transB": trans[1]}
    f = fmm_feeds(np.float32, stored(ba, m, k, trans[0]), stored(bb, k, n, trans[1]), seed=9)
    got = run_fmm(f, **attrs)
    (want,) = run_ort(fmm_model(np.float32, f["a"].shape, f["b"].shape, **attrs), f)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * abs(alpha))
    assert got.tobytes() == fmm_formula(f, **attrs).astype(np.float32).tobytes()


@pytest.mark.parametrize("trans", TRANS, ids=lambda t: f"transA{t[0]}B{t[1]}")
@pytest.mark.parametrize("kind", ["2d", "batched_equal", "broadcast_batch"])
def test_fused_matmul_float16_is_near_onnxruntime(kind, trans) -> None:
    ba, bb, m, k, n = random_geometry(kind, seed=20)
    attrs = {"alpha": 0.125, "transA": trans[0], "transB": trans[1]}
    f = fmm_feeds(np.float16, stored(ba, m, k, trans[0]), stored(bb, k, n, trans[1]), seed=10)
    got = run_fmm(f, **attrs)
    (want,) = run_ort(fmm_model(np.float16, f["a"].shape, f["b"].shape, **attrs), f)
    assert got.dtype == np.float16 and got.shape == want.shape
    # ours rounds once; onnxruntime may round the product before alpha scales it
    np.testing.assert_allclose(got.astype(np.float32), np.asarray(want, np.float32),
                               rtol=2e-3, atol=1e-3)
    assert got.tobytes() == fmm_formula(f, **attrs).astype(np.float16).tobytes()


#: (A, B, attributes): the attention scores of a decode step and of a prefill, and the
#: transBatch variants (alone, with transA / transB, both, broadcasting)
FMM_CASES = {
    "attention_decode": ((1, 14, 1, 64), (1, 14, 129, 64), {"transB": 1, "alpha": 0.125}),
    "attention_prefill": ((1, 14, 7, 64), (1, 14, 129, 64), {"transB": 1, "alpha": 0.125}),
    "trans_batch_a": ((3, 2, 5), (2, 5, 4), {"transBatchA": 1, "alpha": 0.5}),
    "trans_batch_a_trans_a": ((5, 2, 3), (2, 5, 4), {"transBatchA": 1, "transA": 1}),
    "trans_batch_a_trans_b": ((3, 2, 5), (2, 4, 5), {"transBatchA": 1, "transB": 1}),
    "trans_batch_b": ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}),
    "trans_batch_b_trans_b": ((2, 3, 4), (5, 2, 4), {"transBatchB": 1, "transB": 1}),
    "trans_batch_both": ((4, 2, 3), (5, 2, 4), {"transBatchA": 1, "transBatchB": 1,
                                                "transA": 1, "transB": 1, "alpha": -2.0}),
    "trans_batch_broadcast": ((2, 1, 3), (4, 3, 6), {"transBatchA": 1}),
    "trans_batch_4d": ((3, 2, 4, 5), (2, 4, 5, 6), {"transBatchA": 1}),
    "trans_batch_4d_broadcast": ((3, 2, 1, 5), (2, 4, 5, 6), {"transBatchA": 1}),
    "vector_a": ((6,), (2, 4, 6), {"transA": 1, "transB": 1}),
    "vector_b": ((4, 6), (6,), {"transB": 1}),
    "vectors": ((6,), (6,), {"transA": 1, "transB": 1}),
    "empty_k": ((2, 0), (4, 0), {"transB": 1, "alpha": 3.0}),
    "empty_m": ((0, 3), (3, 4), {}),
    "empty_trans_batch": ((0, 2, 3), (2, 3, 4), {"transBatchA": 1}),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(FMM_CASES))
def test_fused_matmul_cases_match_onnxruntime(case, dtype) -> None:
    a, b, attrs = FMM_CASES[case]
    f = fmm_feeds(dtype, a, b, seed=11)
    got = run_fmm(f, **attrs)
    if 0 in a or 0 in b:
        # onnxruntime 1.23 dies of SIGFPE on empty FusedMatMul inputs (1.32 does not): the
        # empty cases are held to the op's formula alone, on every onnxruntime
        want = fmm_formula(f, **attrs).astype(dtype)
        assert got.shape == want.shape and got.tobytes() == want.tobytes()
        return
    (want,) = run_ort(fmm_model(dtype, a, b, **attrs), f)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype == np.float64:     # dgemm's summation order is unspecified: no byte equality
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        return
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.tobytes() == fmm_formula(f, **attrs).astype(dtype).tobytes()


@pytest.mark.parametrize("a,b", [((3, 2), (3,)), ((5, 3, 2), (3,))])
def test_fused_matmul_transposes_a_before_a_vector_b_as_documented(a, b) -> None:
    """onnxruntime 1.32 CPU reads A untransposed here (``A.reshape(..., M, K) @ B``) though
    its shape inference transposes; the reference follows the op's definition."""
    f = fmm_feeds(np.float32, a, b, seed=12)
    got = run_fmm(f, transA=1)
    want = np.swapaxes(f["a"].astype(np.float64), -1, -2) @ f["b"].astype(np.float64)
    assert got.tobytes() == want.astype(np.float32).tobytes()


def test_fused_matmul_bfloat16_and_an_inexact_alpha_round_once() -> None:
    a, b, attrs = FMM_CASES["attention_prefill"]
    f = fmm_feeds(BF16, a, b, seed=13)
    attrs = {**attrs, "alpha": 0.1}
    got = run_fmm(f, **attrs)
    assert got.dtype == BF16
    exact = fmm_formula(f, **attrs)
    err = np.abs(got.astype(np.float64) - exact)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(exact), 2.0 ** -126))) - 7)
    assert np.all(err <= ulp / 2), float((err / ulp).max())
    f = fmm_feeds(np.float32, a, b, seed=13)
    assert run_fmm(f, **attrs).tobytes() == fmm_formula(f, **attrs).astype(np.float32).tobytes()


def test_fused_matmul_reruns_with_symbolic_dims() -> None:
    m = fmm_model(np.float16, (1, 14, "s", 64), (1, 14, "t", 64), transB=1, alpha=0.125)
    sess = Session(m, providers=["cpu_reference"])
    for s_len, t_len in ((7, 7), (1, 8), (1, 8)):
        f = fmm_feeds(np.float16, (1, 14, s_len, 64), (1, 14, t_len, 64), seed=t_len)
        (got,) = sess.run(None, f)
        want = fmm_formula(f, transB=1, alpha=0.125).astype(np.float16)
        assert np.asarray(got).tobytes() == want.tobytes()


def test_fused_matmul_is_registered_in_onnxruntimes_domain() -> None:
    (kernel,) = [k for k in KERNELS if isinstance(k, FusedMatMul)]
    assert (kernel.key.domain, kernel.key.op_type, kernel.key.since) == (
        "com.microsoft", "FusedMatMul", 1)
    assert not kernel.capture_support().supported


#: (A, B, attributes, our message): shapes onnxruntime refuses too
FMM_ERRORS = {
    "inner_mismatch": ((2, 3), (4, 5), {"transB": 1}, "inner dimensions differ"),
    "inner_mismatch_trans_a": ((2, 5, 3, 2), (4, 2), {"transA": 1},
                               r"multiply as \(2, 5, 2, 3\) and \(4, 2\) under transA"),
    "batch_mismatch": ((2, 3, 4), (3, 4, 5), {}, "do not broadcast"),
    "trans_batch_ranks": ((5, 2, 3), (3, 4), {"transBatchA": 1},
                          "transBatchA needs A and B of one rank, at least 3"),
    "trans_batch_rank_2": ((2, 3), (3, 4), {"transBatchB": 1}, "at least 3"),
    "trans_batch_vectors": ((6,), (6,), {"transBatchA": 1}, "at least 3"),
    "trans_batch_moves_a_batch": ((5, 2, 3), (5, 3, 4), {"transBatchA": 1},
                                  "do not broadcast"),
}


@pytest.mark.parametrize("case", list(FMM_ERRORS))
def test_fused_matmul_refuses_what_onnxruntime_refuses(case) -> None:
    a, b, attrs, why = FMM_ERRORS[case]
    f = fmm_feeds(np.float32, a, b, seed=14)
    m = fmm_model(np.float32, a, b, **attrs)
    if "transBatch" not in str(attrs) or ort_version() >= (1, 32):
        # onnxruntime 1.23 runs these transBatch shapes (1.32 refuses them, as documented)
        with pytest.raises(Exception, match="FAIL|INVALID"):
            run_ort(m, f)
    with pytest.raises(NodeError, match=why) as info:
        Session(m, providers=["cpu_reference"]).run(None, f)
    assert info.value.node == "fmm"


def test_fused_matmul_declines_mixed_and_integer_dtypes() -> None:
    m = fmm_model(np.float32, (2, 4), (4, 3), dtypes=(np.float32, np.float16))
    assert "input B is float16 but A is float32" in _declined(m)
    assert "A dtype int32 is not one of" in _declined(fmm_model(np.int32, (2, 4), (4, 3)))


def test_fused_matmul_run_rejects_a_scalar() -> None:
    meta = NodeMeta(name="fmm", op_type="FusedMatMul", domain=MS_DOMAIN, opset=1, attrs={},
                    inputs=(TensorSpec(np.float32, ()), TensorSpec(np.float32, (3,))))
    with pytest.raises(NodeError, match="rank >= 1"):
        FusedMatMul().execute_with_workspace(ExecutionContext(meta),
                                             [np.float32(1), np.ones(3, np.float32)], [None],
                                             None)


# ---------------------------------------------------------------- onnx_ep.fused::GroupedMatMul

def _grouped(f: dict[str, np.ndarray], unfused: bool, alpha: float = 1.0,
             trans_b: int = 0) -> np.ndarray:
    """GroupedMatMul on the reference, or (``unfused``) the pattern it replaces on
    onnxruntime: MatMul(A, [Transpose](Reshape(Expand(Unsqueeze(B, 2))))) * alpha."""
    a, b = f["a"], f["b"]
    h, g = a.shape[-3], b.shape[-3]
    vi = [_value_info(n, a.dtype, x.shape) for n, x in zip("ab", (a, b))]
    out = [helper.make_empty_tensor_value_info("y")]
    if not unfused:
        node = helper.make_node("GroupedMatMul", ["a", "b"], ["y"], domain=FUSED_DOMAIN,
                                alpha=alpha, transB=trans_b)
        m = helper.make_model(helper.make_graph([node], "g", vi, out), ir_version=ORACLE_IR_VERSION,
                              opset_imports=[helper.make_opsetid("", ORACLE_OPSET),
                                             helper.make_opsetid(FUSED_DOMAIN, 1)])
        return np.asarray(Session(m, providers=["cpu_reference"]).run(None, f)[0])
    shape = list(b.shape)
    inits = [numpy_helper.from_array(np.array([2]), "ax"),
             numpy_helper.from_array(np.array([1, 1, h // g, 1, 1]), "rep"),
             numpy_helper.from_array(np.array([0, h, -1, shape[-1]]), "merge"),
             numpy_helper.from_array(np.array(alpha, a.dtype), "alpha")]
    n = helper.make_node
    nodes = [n("Unsqueeze", ["b", "ax"], ["u"]), n("Expand", ["u", "rep"], ["e"]),
             n("Reshape", ["e", "merge"], ["r"])]
    if trans_b:
        nodes.append(n("Transpose", ["r"], ["rt"], perm=[0, 1, 3, 2]))
    nodes += [n("MatMul", ["a", "rt" if trans_b else "r"], ["p"]), n("Mul", ["p", "alpha"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "u", vi, out, inits),
                          ir_version=ORACLE_IR_VERSION,
                          opset_imports=[helper.make_opsetid("", ORACLE_OPSET)])
    return np.asarray(run_ort(m, f)[0])


@pytest.mark.parametrize("a,b,trans_b,alpha", [
    ((1, 14, 1, 64), (1, 2, 9, 64), 1, 0.125), ((1, 14, 1, 9), (1, 2, 9, 64), 0, 1.0),
    ((2, 4, 3, 10), (2, 2, 10, 8), 0, -2.0), ((1, 6, 5, 16), (1, 3, 7, 16), 1, 0.25),
])
def test_grouped_matmul_matches_the_repeated_heads_on_onnxruntime(a, b, trans_b, alpha):
    f = fmm_feeds(np.float32, a, b, seed=31)
    got = _grouped(f, False, alpha, trans_b)
    want = _grouped(f, True, alpha, trans_b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    rep = a[1] // b[1]
    wb = np.repeat(f["b"].astype(np.float64), rep, axis=1)
    exact = f["a"].astype(np.float64) @ (np.swapaxes(wb, -1, -2) if trans_b else wb) * alpha
    assert got.tobytes() == exact.astype(np.float32).tobytes()        # rounded once


def test_grouped_matmul_refuses_heads_that_are_not_whole_groups():
    f = fmm_feeds(np.float32, (1, 5, 1, 8), (1, 2, 8, 4), seed=2)
    with pytest.raises(NodeError, match="whole number"):
        _grouped(f, False)
