"""cpu_reference onnx_ep.fused::RotaryHalf against the pattern it replaces, run unfused by
onnxruntime CPU (Slice, Neg, Concat, Mul, Add), and against the formula in float64 rounded
once (the reference's promise)."""

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
from onnx_ep.providers.cpu_reference.fused import KERNELS, RotaryHalf
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET, run_ort

BF16 = np.dtype(ml_dtypes.bfloat16)
Shape = Sequence[int | str]


def _rand(shape: Sequence[int], dtype: object, seed: int, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(tuple(shape)) * scale).astype(np.float32).astype(dtype)


def _angles(shape: Sequence[int], dtype: object, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of random angles, as a rotary table holds them."""
    theta = np.random.default_rng(seed).uniform(-4.0, 4.0, tuple(shape))
    return np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)


def _value_info(name: str, dtype: np.dtype, shape: Shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx_elem_type(np.dtype(dtype)), list(shape))


def fused_model(dtype: object, x: Shape, cos: Shape, sin: Shape, *,
                dtypes: Sequence[object] | None = None) -> onnx.ModelProto:
    """One RotaryHalf node over graph inputs x, cos, sin (``dtypes`` per input when given)."""
    dts = [np.dtype(d) for d in (dtypes or (dtype,) * 3)]
    node = helper.make_node("RotaryHalf", ["x", "cos", "sin"], ["y"], domain=FUSED_DOMAIN,
                            name="rotary")
    graph = helper.make_graph(
        [node], "rotary_half",
        [_value_info(n, d, s) for n, d, s in zip(("x", "cos", "sin"), dts, (x, cos, sin))],
        [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", ORACLE_OPSET),
                                            helper.make_opsetid(FUSED_DOMAIN, 1)])


def pattern_model(dtype: object, x: Shape, cos: Shape, sin: Shape) -> onnx.ModelProto:
    """``Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, D/2:D)), Slice(x, 0:D/2)), sin))``: the
    Hugging Face rotate_half pattern the fusion pass replaces."""
    d = int(x[-1])
    consts = {"zero": [0], "half": [d // 2], "end": [d], "last": [-1]}
    nodes = [
        helper.make_node("Slice", ["x", "half", "end", "last"], ["x2"]),
        helper.make_node("Slice", ["x", "zero", "half", "last"], ["x1"]),
        helper.make_node("Neg", ["x2"], ["neg_x2"]),
        helper.make_node("Concat", ["neg_x2", "x1"], ["rot"], axis=-1),
        helper.make_node("Mul", ["x", "cos"], ["x_cos"]),
        helper.make_node("Mul", ["rot", "sin"], ["rot_sin"]),
        helper.make_node("Add", ["x_cos", "rot_sin"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "rotate_half_pattern",
        [_value_info(n, np.dtype(dtype), s) for n, s in (("x", x), ("cos", cos), ("sin", sin))],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[numpy_helper.from_array(np.array(v, np.int64), k)
                     for k, v in consts.items()])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", ORACLE_OPSET)])


def formula(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Y = X * cos + rotate_half(X) * sin in float64 (not rounded)."""
    x64, c64, s64 = (a.astype(np.float64) for a in (x, cos, sin))
    h = x.shape[-1] // 2
    rot = np.concatenate((-x64[..., h:], x64[..., :h]), axis=-1)
    return x64 * c64 + rot * s64


def run_fused(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    (y,) = Session(fused_model(x.dtype, x.shape, cos.shape, sin.shape),
                   providers=["cpu_reference"]).run(None, {"x": x, "cos": cos, "sin": sin})
    return np.asarray(y)


#: (X, cos, sin) shapes: Llama/Qwen layouts, lower-rank and equal-shape tables, D broadcast
SHAPES = {
    "bhsd_cos_b1sd": ((2, 3, 5, 8), (2, 1, 5, 8), (2, 1, 5, 8)),
    "bhsd_cos_sd": ((2, 3, 5, 8), (5, 8), (5, 8)),
    "equal": ((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8)),
    "qwen_decode": ((1, 14, 1, 64), (1, 1, 1, 64), (1, 1, 1, 64)),
    "d128": ((1, 2, 7, 128), (1, 1, 7, 128), (1, 1, 7, 128)),
    "cos_sin_differ": ((2, 3, 5, 8), (5, 8), (2, 1, 5, 8)),
    "d_broadcast": ((2, 3, 5, 8), (5, 1), (1, 3, 5, 1)),
    "rank2": ((6, 4), (6, 4), (4,)),
    "d2": ((3, 2), (2,), (2,)),
}


@pytest.mark.parametrize("case", list(SHAPES))
def test_float32_matches_the_unfused_pattern_on_onnxruntime(case: str) -> None:
    xs, cs, ss = SHAPES[case]
    x = _rand(xs, np.float32, 1, scale=3.0)
    cos, sin = _angles(cs, np.float32, 2)[0], _angles(ss, np.float32, 3)[1]
    got = run_fused(x, cos, sin)
    (want,) = run_ort(pattern_model(np.float32, xs, cs, ss), {"x": x, "cos": cos, "sin": sin})
    assert got.dtype == want.dtype and got.shape == want.shape == x.shape
    # the pattern rounds both products and the sum to float32; the fused op rounds once
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=4e-6)


@pytest.mark.parametrize("case", list(SHAPES))
def test_float64_is_the_unfused_pattern_byte_for_byte(case: str) -> None:
    """In float64 the pattern's three roundings are the fused op's own operations."""
    xs, cs, ss = SHAPES[case]
    x = _rand(xs, np.float64, 4, scale=3.0)
    cos, sin = _angles(cs, np.float64, 5)[0], _angles(ss, np.float64, 6)[1]
    (want,) = run_ort(pattern_model(np.float64, xs, cs, ss), {"x": x, "cos": cos, "sin": sin})
    assert run_fused(x, cos, sin).tobytes() == np.asarray(want).tobytes()


@pytest.mark.parametrize("case", ["bhsd_cos_b1sd", "bhsd_cos_sd", "qwen_decode", "d128"])
def test_float16_is_near_the_unfused_pattern_and_rounds_the_formula_once(case: str) -> None:
    xs, cs, ss = SHAPES[case]
    x = _rand(xs, np.float16, 7, scale=3.0)
    cos, sin = _angles(cs, np.float16, 8)[0], _angles(ss, np.float16, 9)[1]
    got = run_fused(x, cos, sin)
    (want,) = run_ort(pattern_model(np.float16, xs, cs, ss), {"x": x, "cos": cos, "sin": sin})
    assert got.dtype == np.float16 and got.shape == x.shape
    # the pattern rounds to float16 three times (up to 1.5 ulp of terms below 16)
    np.testing.assert_allclose(got.astype(np.float32), np.asarray(want, np.float32),
                               rtol=2e-3, atol=2e-2)
    # numpy rounds float64 to float16 directly: the reference's one rounding, bit for bit
    assert got.tobytes() == formula(x, cos, sin).astype(np.float16).tobytes()


@pytest.mark.parametrize("case", list(SHAPES))
def test_float32_is_the_float64_formula_rounded_once(case: str) -> None:
    xs, cs, ss = SHAPES[case]
    x = _rand(xs, np.float32, 10, scale=100.0)
    cos, sin = _angles(cs, np.float32, 11)[0], _angles(ss, np.float32, 12)[1]
    assert run_fused(x, cos, sin).tobytes() == formula(x, cos, sin).astype(np.float32).tobytes()


def test_bfloat16_is_the_formula_within_half_an_ulp() -> None:
    xs, cs, _ = SHAPES["bhsd_cos_b1sd"]
    x = _rand(xs, BF16, 13, scale=3.0)
    cos, sin = _angles(cs, BF16, 14)
    got = run_fused(x, cos, sin)
    assert got.dtype == BF16 and got.shape == x.shape
    exact = formula(x, cos, sin)
    err = np.abs(got.astype(np.float64) - exact)
    # half a bfloat16 ulp: 2^-8 relative to the binade of the result
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(exact), 2.0 ** -126))) - 7)
    assert np.all(err <= ulp / 2), float((err / ulp).max())


def test_specials_follow_ieee_in_float64() -> None:
    x = np.array([[np.inf, 1.0, -0.0, 2.0], [np.nan, 0.0, 3.0, -1.0]], np.float32)
    cos = np.array([0.0, 1.0, 1.0, 0.5], np.float32)
    sin = np.array([1.0, 0.0, -0.0, 0.5], np.float32)
    got = run_fused(x, cos, sin)
    with np.errstate(invalid="ignore"):
        want = formula(x, cos, sin).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_empty_rows_give_an_empty_output() -> None:
    x = np.zeros((0, 3, 4), np.float32)
    cos, sin = _angles((3, 4), np.float32, 15)
    got = run_fused(x, cos, sin)
    assert got.shape == (0, 3, 4) and got.dtype == np.float32


def test_a_session_reruns_and_takes_a_second_shape() -> None:
    m = fused_model(np.float32, ("b", "h", "s", 8), ("s", 8), ("s", 8))
    sess = Session(m, providers=["cpu_reference"])
    for s_len in (5, 5, 1):
        x = _rand((2, 3, s_len, 8), np.float32, s_len)
        cos, sin = _angles((s_len, 8), np.float32, 16)
        (got,) = sess.run(None, {"x": x, "cos": cos, "sin": sin})
        assert got.tobytes() == formula(x, cos, sin).astype(np.float32).tobytes()


def test_the_kernel_is_registered_in_the_fused_domain() -> None:
    (kernel,) = KERNELS
    assert kernel.key.domain == FUSED_DOMAIN == "onnx_ep.fused"
    assert (kernel.key.op_type, kernel.key.since) == ("RotaryHalf", 1)
    assert kernel.parity.kind.value == "exact"


# ---------------------------------------------------------------- rejections


def _declined(m: onnx.ModelProto) -> str:
    with pytest.raises(NoKernelError) as info:
        Session(m, providers=["cpu_reference"])
    return info.value.tried["cpu_reference"]


@pytest.mark.parametrize("xs,cs,ss,why", [
    ((2, 3, 5, 7), (5, 7), (5, 7), "D=7) must be even"),
    ((2, 3, 5, 8), (4, 8), (5, 8), "cos of shape (4, 8) does not broadcast"),
    ((2, 3, 5, 8), (5, 8), (5, 16), "sin of shape (5, 16) does not broadcast"),
    ((5, 8), (1, 5, 8), (5, 8), "its rank 3 exceeds X's 2"),
    ((), (), (), "X must have rank >= 1"),
])
def test_bad_shapes_are_declined_with_the_reason(xs, cs, ss, why) -> None:
    assert why in _declined(fused_model(np.float32, xs, cs, ss))


def test_mixed_dtypes_are_declined() -> None:
    m = fused_model(np.float32, (2, 8), (8,), (8,), dtypes=(np.float32, np.float16, np.float32))
    assert "input cos is float16 but X is float32" in _declined(m)


def test_integer_inputs_are_declined() -> None:
    assert "X dtype int32 is not one of" in _declined(fused_model(np.int32, (2, 8), (8,), (8,)))


def test_symbolic_shapes_are_checked_when_the_run_shapes_are_known() -> None:
    m = fused_model(np.float32, ("s", "d"), ("s", "d"), ("s", "d"))
    sess = Session(m, providers=["cpu_reference"])
    x = _rand((3, 5), np.float32, 17)
    with pytest.raises(NodeError, match="must be even"):
        sess.run(None, {"x": x, "cos": x, "sin": x})
    m = fused_model(np.float32, ("s", 8), ("t", 8), ("t", 8))
    sess = Session(m, providers=["cpu_reference"])
    x, cos = _rand((3, 8), np.float32, 18), _rand((2, 8), np.float32, 19)
    with pytest.raises(NodeError, match=r"cos of shape \(2, 8\) does not broadcast"):
        sess.run(None, {"x": x, "cos": cos, "sin": cos})


def test_run_rejects_what_supports_could_not_see() -> None:
    meta = NodeMeta(name="rope", op_type="RotaryHalf", domain=FUSED_DOMAIN, opset=1, attrs={},
                    inputs=(TensorSpec(np.float32, ("n", 4)),) * 3)
    ctx = ExecutionContext(meta)
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(NodeError, match="input sin is float64 but X is float32") as info:
        RotaryHalf().execute_with_workspace(ctx, [x, x, x.astype(np.float64)], [None], None)
    assert info.value.node == "rope"
    with pytest.raises(NodeError, match="X dtype int64 is not one of"):
        RotaryHalf().execute_with_workspace(ctx, [x.astype(np.int64)] * 3, [None], None)
