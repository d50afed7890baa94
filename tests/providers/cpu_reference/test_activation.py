"""cpu_reference activation functions against onnxruntime, plus their NodeError paths."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(11)


def _x(*shape: int, dtype: type = np.float32, scale: float = 4.0) -> np.ndarray:
    x = (RNG.standard_normal(shape) * scale).astype(dtype)
    x.flat[:3] = [0.0, 40.0, -40.0]  # saturating regions of the sigmoids
    return x


# (op, attributes, opset); onnxruntime's float32 kernels use vectorized approximations,
# so the comparison allows a few float32 ulps.
CASES = [
    ("Relu", {}, 21), ("LeakyRelu", {}, 21), ("LeakyRelu", {"alpha": 0.3}, 21),
    ("Elu", {"alpha": 0.7}, 21), ("Selu", {}, 21), ("Celu", {"alpha": 2.0}, 21),
    ("Sigmoid", {}, 21), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 21),
    ("HardSwish", {}, 21), ("Softplus", {}, 21), ("Softsign", {}, 21),
    ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20), ("Mish", {}, 21),
    ("ThresholdedRelu", {"alpha": 0.5}, 21), ("Shrink", {"lambd": 1.5, "bias": 0.5}, 21),
]


@pytest.mark.parametrize("op, attrs, opset", CASES,
                         ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(CASES)])
def test_activation_matches_ort(op: str, attrs: dict, opset: int) -> None:
    x = _x(4, 16)
    # onnxruntime's float32 erf loses relative accuracy in Gelu's negative tail (x < -3),
    # where ours matches math.erfc (test_gelu_exact_matches_math_erfc_in_the_tail)
    atol = 1e-7 if op != "Gelu" else 1e-5
    assert_matches_ort(node_model(op, {"x": x}, opset=opset, **attrs), {"x": x},
                       rtol=4e-6, atol=atol)


@pytest.mark.parametrize("op", ["Relu", "LeakyRelu", "Sigmoid", "Gelu", "HardSwish"])
def test_float16_and_bfloat16_are_the_float64_result_rounded_once(op: str) -> None:
    for dtype in (np.float16, ml_dtypes.bfloat16):
        x = _x(32, dtype=dtype)
        y = run_ours(node_model(op, {"x": x}, opset=20), {"x": x})[0]
        assert y.dtype == np.dtype(dtype)
        wide = {"x": x.astype(np.float64)}
        ref = run_ours(node_model(op, wide, opset=20), wide)[0]
        expected = ref.astype(np.float32) if dtype is ml_dtypes.bfloat16 else ref
        # float16: numpy rounds float64 in one step; bfloat16 is within half an ulp
        if dtype is np.float16:
            np.testing.assert_array_equal(y, ref.astype(np.float16))
        else:
            np.testing.assert_allclose(y.astype(np.float32), expected, rtol=2 ** -8)


def test_gelu_exact_matches_math_erfc_in_the_tail() -> None:
    x = np.array([-9.0, -5.3, -3.0, -0.5, 0.0, 0.7, 2.5, 6.0])
    y = run_ours(node_model("Gelu", {"x": x}, opset=20), {"x": x})[0]
    ref = [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x]
    np.testing.assert_allclose(y, ref, rtol=1e-13)


def test_swish_is_x_times_sigmoid_alpha_x() -> None:
    x = _x(20, dtype=np.float64)
    y = run_ours(node_model("Swish", {"x": x}, opset=24, alpha=0.5), {"x": x})[0]
    np.testing.assert_allclose(y, x / (1 + np.exp(-0.5 * x)), rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.int8, np.int32])  # onnxruntime: no int64 Relu
def test_relu_on_integers(dtype: type) -> None:
    x = RNG.integers(-100, 100, (3, 5)).astype(dtype)
    assert_matches_ort(node_model("Relu", {"x": x}), {"x": x})


def test_shrink_on_integers_keeps_dtype() -> None:
    x = np.arange(-5, 6, dtype=np.int32)
    assert_matches_ort(node_model("Shrink", {"x": x}, lambd=1.5, bias=1.0), {"x": x})


def test_prelu_broadcasts_slope_to_x() -> None:
    feeds = {"x": _x(2, 3, 4), "slope": (RNG.random((3, 1)) * 0.5).astype(np.float32)}
    assert_matches_ort(node_model("PRelu", feeds), feeds)


def test_prelu_rejects_slope_that_grows_x() -> None:
    feeds = {"x": _x(3), "slope": _x(2, 3)}
    with pytest.raises(NodeError, match="without growing"):
        run_ours(node_model("PRelu", feeds), feeds)


@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (None, 0.5), (-0.5, None), (None, None),
                                    (2.0, -2.0)])
def test_clip_with_optional_bound_inputs(bounds: tuple) -> None:
    lo, hi = bounds
    feeds = {"x": _x(3, 4)}
    node_inputs: dict = dict(feeds)
    if lo is not None:
        node_inputs["lo"] = feeds["lo"] = np.array(lo, np.float32)
    if hi is not None:
        if lo is None:
            node_inputs[""] = None  # missing optional min
        node_inputs["hi"] = feeds["hi"] = np.array(hi, np.float32)
    assert_matches_ort(node_model("Clip", node_inputs), feeds)


def test_clip_on_integers_and_legacy_attributes() -> None:
    x = np.arange(-6, 6, dtype=np.int8)
    feeds = {"x": x, "lo": np.array(-2, np.int8), "hi": np.array(3, np.int8)}
    assert_matches_ort(node_model("Clip", feeds), feeds)
    y = run_ours(node_model("Clip", {"x": _x(5)}, opset=6, min=-0.5, max=0.25),
                 {"x": _x(5)})[0]
    assert y.min() >= -0.5 and y.max() <= 0.25


def test_clip_rejects_non_scalar_bounds() -> None:
    feeds = {"x": _x(4), "lo": np.zeros(2, np.float32)}
    with pytest.raises(NodeError, match="must be a scalar"):
        run_ours(node_model("Clip", feeds), feeds)


def test_activation_rejects_integer_input_where_spec_wants_float() -> None:
    feeds = {"x": np.arange(3, dtype=np.int32)}
    with pytest.raises(NodeError, match="not supported"):
        run_ours(node_model("Sigmoid", feeds), feeds)


# ------------------------------------------------------------------ SwiGLU


def _ours(op: str, feeds: dict[str, np.ndarray], n_out: int = 1, *, opset: int,
          **attrs: object) -> list[np.ndarray]:
    """Run one ``op`` node on cpu_reference; a feed named ``""`` is a missing optional."""
    model = node_model(op, feeds, n_out, opset=opset, **attrs)
    return run_ours(model, {k: v for k, v in feeds.items() if k})


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swiglu_is_swish_gate_times_value(dtype: type, alpha: float) -> None:
    a = RNG.uniform(-8, 8, (4, 6)).astype(dtype)
    b = RNG.standard_normal((4, 6)).astype(dtype)
    (y,) = _ours("SwiGLU", {"a": a, "b": b}, opset=28, alpha=alpha)
    a64 = a.astype(np.float64)
    expected = (a64 / (1 + np.exp(-np.float32(alpha).astype(np.float64) * a64))
                * b.astype(np.float64)).astype(dtype)
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, expected, rtol=4 * np.finfo(dtype).eps, atol=0)


def test_swiglu_with_mismatched_shapes_raises_node_error() -> None:
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones((1, 3), np.float32)}
    with pytest.raises(NodeError, match="same shape"):
        _ours("SwiGLU", feeds, opset=28)
