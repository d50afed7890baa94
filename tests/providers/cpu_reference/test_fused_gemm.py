"""cpu_reference onnx_ep.fused::MatMulAdd against the pattern it replaces, MatMul then Add,
run unfused by onnxruntime CPU, and against its own promise: the float64 product plus the
bias, rounded once."""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_ep import Session
from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec
from onnx_ep.errors import NodeError, NoKernelError
from onnx_ep.providers.cpu_reference.fused_gemm import KERNELS, MatMulAdd
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET, run_ort

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
    (kernel,) = KERNELS
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
