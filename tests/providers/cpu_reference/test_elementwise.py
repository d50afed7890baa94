"""cpu_reference elementwise ops against onnxruntime, the float64 rounding rule, NodeErrors."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference.numerics import erf, round_from_float64
from tests.helpers.oracle import assert_matches_ort, node_model, run_ort, run_ours

RNG = np.random.default_rng(7)


def _x(*shape: int, dtype: type = np.float32, lo: float = -3, hi: float = 3) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(dtype)


def _ints(*shape: int, dtype: type = np.int32, lo: int = -50, hi: int = 50) -> np.ndarray:
    return RNG.integers(lo, hi, shape).astype(dtype)


# ------------------------------------------------------------------ unary

EXACT_UNARY = ["Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Sqrt", "Reciprocal"]
TRANSCENDENTAL = {"Exp": (-5, 5), "Log": (0.01, 9), "Sin": (-6, 6), "Cos": (-6, 6),
                  "Tan": (-1.5, 1.5), "Asin": (-1, 1), "Acos": (-1, 1), "Atan": (-9, 9),
                  "Sinh": (-4, 4), "Cosh": (-4, 4), "Tanh": (-4, 4), "Asinh": (-9, 9),
                  "Acosh": (1, 9), "Atanh": (-0.99, 0.99), "Erf": (-4, 4)}


@pytest.mark.parametrize("op", EXACT_UNARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_exact_unary_ops_match_ort_bit_for_bit(op: str, dtype: type) -> None:
    x = _x(3, 4, dtype=dtype, lo=0.1 if op == "Sqrt" else -4)
    x.flat[:4] = [0.5, 1.5, 2.5, -2.5]  # Round: halves go to even
    assert_matches_ort(node_model(op, {"x": x}), {"x": x})


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign"])
def test_integer_unary_ops_match_ort(op: str) -> None:
    x = _ints(2, 5, dtype=np.int64)
    assert_matches_ort(node_model(op, {"x": x}), {"x": x})


@pytest.mark.parametrize("op", sorted(TRANSCENDENTAL))
def test_transcendental_ops_match_ort_within_float32_rounding(op: str) -> None:
    lo, hi = TRANSCENDENTAL[op]
    x = _x(4, 8, lo=lo, hi=hi)
    assert_matches_ort(node_model(op, {"x": x}), {"x": x}, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("op", ["Exp", "Tanh", "Erf", "Sin"])
def test_float16_transcendental_is_float64_rounded_once(op: str) -> None:
    x = _x(64, dtype=np.float16)
    ours = run_ours(node_model(op, {"x": x}), {"x": x})[0]
    fn = {"Exp": np.exp, "Tanh": np.tanh, "Erf": np.vectorize(math.erf), "Sin": np.sin}[op]
    assert ours.dtype == np.float16
    np.testing.assert_array_equal(ours, fn(x.astype(np.float64)).astype(np.float16))


def test_bfloat16_unary_runs_in_float64_and_keeps_dtype() -> None:
    x = _x(10).astype(ml_dtypes.bfloat16)
    y = run_ours(node_model("Exp", {"x": x}), {"x": x})[0]
    assert y.dtype == ml_dtypes.bfloat16
    ref = round_from_float64(np.exp(x.astype(np.float64)), np.dtype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(y.view(np.uint16), ref.view(np.uint16))


def test_round_from_float64_rounds_once_where_float32_would_double_round() -> None:
    # 1 + 2^-8 + 2^-40 is just above the bfloat16 midpoint 1 + 2^-8; float32 drops the
    # 2^-40 and a second rounding would then tie to even (1.0).
    y = np.array([1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 1 + 2**-8, np.inf, np.nan])
    got = round_from_float64(y, np.dtype(ml_dtypes.bfloat16)).astype(np.float64)
    np.testing.assert_array_equal(got[:4], [1 + 2**-7, -(1 + 2**-7), 1.0, np.inf])
    assert np.isnan(got[4])


def test_erf_matches_math_erf_to_a_few_ulps() -> None:
    x = np.concatenate([np.linspace(-7, 7, 4001), [0.0, -0.0, 1e-300, np.inf, -np.inf]])
    ref = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), ref, rtol=4e-15, atol=0)
    assert np.isnan(erf(np.array([np.nan])))[0]


def test_isnan_isinf_not_and_bitwise_not() -> None:
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    assert_matches_ort(node_model("IsNaN", {"x": x}), {"x": x})
    for pos, neg in ((1, 1), (1, 0), (0, 1)):
        model = node_model("IsInf", {"x": x}, detect_positive=pos, detect_negative=neg)
        assert_matches_ort(model, {"x": x})
    b = np.array([[True, False]])
    assert_matches_ort(node_model("Not", {"x": b}), {"x": b})
    u = _ints(6, dtype=np.uint8, lo=0, hi=255)
    assert_matches_ort(node_model("BitwiseNot", {"x": u}), {"x": u})


def test_float_only_unary_rejects_integer_input() -> None:
    x = _ints(3)
    with pytest.raises(NodeError, match="not supported"):
        run_ours(node_model("Exp", {"x": x}), {"x": x})


# ------------------------------------------------------------------ binary

@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64,
                                   np.uint8])
def test_arithmetic_broadcasts_and_matches_ort_exactly(op: str, dtype: type) -> None:
    if np.dtype(dtype).kind == "f":
        a, b = _x(2, 3, 4, dtype=dtype), _x(3, 1, dtype=dtype, lo=0.5)
    else:
        lo = 0 if np.dtype(dtype).kind == "u" else -50
        a, b = _ints(2, 3, 4, dtype=dtype, lo=lo), _ints(3, 1, dtype=dtype, lo=1, hi=9)
        if np.dtype(dtype).kind == "i":
            b = b * np.where(_ints(3, 1, lo=0, hi=2) == 0, -1, 1).astype(dtype)
    assert_matches_ort(node_model(op, {"a": a, "b": b}), {"a": a, "b": b})


def test_integer_div_truncates_toward_zero() -> None:
    a = np.array([7, -7, 7, -7, 6], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    y = run_ours(node_model("Div", {"a": a, "b": b}), {"a": a, "b": b})[0]
    np.testing.assert_array_equal(y, [3, -3, -3, 3, 2])
    assert y.dtype == np.int32


def test_zero_dim_inputs_give_zero_dim_arrays_of_input_dtype() -> None:
    a, b = np.array(3, np.int8), np.array(4, np.int8)
    y = run_ours(node_model("Add", {"a": a, "b": b}), {"a": a, "b": b})[0]
    assert isinstance(y, np.ndarray) and y.shape == () and y.dtype == np.int8


# onnxruntime rejects float Mod with fmod=0 before opset 28: that case is tested below
@pytest.mark.parametrize("fmod, dtype", [(0, np.int32), (1, np.int32), (0, np.int64),
                                         (1, np.int64), (1, np.float32)])
def test_mod_sign_follows_divisor_or_dividend(fmod: int, dtype: type) -> None:
    a = np.array([-4, 7, 5, 4, -7, 8], dtype)
    b = np.array([2, -3, 8, -2, 3, 5], dtype)
    assert_matches_ort(node_model("Mod", {"a": a, "b": b}, fmod=fmod), {"a": a, "b": b})


def test_float_mod_fmod_0_follows_python_semantics() -> None:
    a = np.array([-4.3, 7.2, 1.0, 0.0], np.float32)
    b = np.array([2.1, -3.4, -np.inf, -2.0], np.float32)
    y = run_ours(node_model("Mod", {"a": a, "b": b}, fmod=0, opset=28), {"a": a, "b": b})[0]
    np.testing.assert_array_equal(y, np.mod(a, b))
    assert np.signbit(y[3])


@pytest.mark.parametrize("base, expo", [(np.float32, np.float32), (np.float32, np.int64),
                                        (np.int32, np.int32), (np.int64, np.float32),
                                        (np.float16, np.float16)])
def test_pow_output_dtype_is_the_base_dtype(base: type, expo: type) -> None:
    x = np.array([1, 2, 3, 4], base)
    y = np.array([3, 2, 0, 1], expo)
    out = assert_matches_ort(node_model("Pow", {"x": x, "y": y}), {"x": x, "y": y},
                             rtol=1e-6)
    assert out[0].dtype == base


def test_integer_pow_keeps_int64_precision() -> None:
    x, y = np.array([3, -3], np.int64), np.array([39, 39], np.int64)
    out = run_ours(node_model("Pow", {"x": x, "y": y}), {"x": x, "y": y})[0]
    np.testing.assert_array_equal(out, [3**39, -(3**39)])


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_matches_ort(direction: str) -> None:
    x = np.array([16, 4, 1, 255], np.uint8)
    s = np.array([1, 2, 3, 4], np.uint8)
    assert_matches_ort(node_model("BitShift", {"x": x, "s": s}, direction=direction),
                       {"x": x, "s": s})


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_ops_match_ort(op: str) -> None:
    a, b = _ints(3, 4, dtype=np.int16), _ints(4, dtype=np.int16)
    assert_matches_ort(node_model(op, {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical_ops_match_ort(op: str) -> None:
    a, b = _ints(3, 4, lo=0, hi=2).astype(bool), _ints(1, 4, lo=0, hi=2).astype(bool)
    assert_matches_ort(node_model(op, {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_comparisons_return_bool_and_match_ort(op: str, dtype: type) -> None:
    a, b = _ints(3, 4, lo=-2, hi=3).astype(dtype), _ints(4, lo=-2, hi=3).astype(dtype)
    assert_matches_ort(node_model(op, {"a": a, "b": b}), {"a": a, "b": b})


def test_equal_compares_strings() -> None:
    a = np.array(["x", "yy", ""], dtype=object)
    b = np.array(["x", "y", ""], dtype=object)
    y = run_ours(node_model("Equal", {"a": a, "b": b}, opset=19), {"a": a, "b": b})[0]
    np.testing.assert_array_equal(y, [True, False, True])


def test_legacy_broadcast_attribute_aligns_b_at_axis() -> None:
    a, b = _x(2, 3, 4), _x(3)
    y = run_ours(node_model("Add", {"a": a, "b": b}, opset=6, broadcast=1, axis=1),
                 {"a": a, "b": b})[0]
    np.testing.assert_array_equal(y, a + b[:, None])


@pytest.mark.parametrize("feeds, match", [
    ({"a": np.array([1, 2], np.int32), "b": np.array([0, 1], np.int32)}, "by zero"),
    ({"a": np.ones(2, np.float32), "b": np.ones(2, np.float64)}, "share one dtype"),
    ({"a": np.ones((2, 3), np.float32), "b": np.ones((4,), np.float32)}, "broadcast"),
])
def test_binary_rejects_bad_inputs_with_node_error(feeds: dict, match: str) -> None:
    with pytest.raises(NodeError, match=match):
        run_ours(node_model("Div", feeds), feeds)


def test_bitshift_rejects_unknown_direction() -> None:
    feeds = {"x": np.array([1], np.uint8), "s": np.array([1], np.uint8)}
    with pytest.raises(NodeError, match="direction"):
        run_ours(node_model("BitShift", feeds, direction="UP"), feeds)


# ------------------------------------------------------------------ variadic, Where

@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_ops_broadcast_three_inputs(op: str) -> None:
    feeds = {"a": _x(2, 3), "b": _x(3), "c": _x(2, 1)}
    # onnxruntime scales Mean by 1/n; we divide (correctly rounded): 1 ulp apart
    assert_matches_ort(node_model(op, feeds), feeds, rtol=3e-7)
    one = {"a": _x(2, 3)}
    assert_matches_ort(node_model(op, one), one)


def test_max_min_on_integers() -> None:
    feeds = {"a": _ints(2, 3, dtype=np.int64), "b": _ints(3, dtype=np.int64)}
    assert_matches_ort(node_model("Max", feeds), feeds)
    assert_matches_ort(node_model("Min", feeds), feeds)


def test_where_broadcasts_condition_and_branches() -> None:
    feeds = {"c": _ints(2, 1, lo=0, hi=2).astype(bool), "x": _x(1, 3), "y": _x(2, 3)}
    assert_matches_ort(node_model("Where", feeds), feeds)
    strs = {"c": np.array([True, False]), "x": np.array(["a", "b"], dtype=object),
            "y": np.array(["c", "d"], dtype=object)}
    model = node_model("Where", strs)
    assert run_ours(model, strs)[0].tolist() == run_ort(model, strs)[0].tolist()


def test_where_rejects_non_bool_condition() -> None:
    feeds = {"c": np.array([1, 0], np.int32), "x": _x(2), "y": _x(2)}
    with pytest.raises(NodeError, match="condition must be bool"):
        run_ours(node_model("Where", feeds), feeds)


@pytest.mark.parametrize("exponent", [np.array(2.0, np.float32), np.array([[2]], np.int64),
                                      np.array([2.0], np.float64)])
def test_float32_square_is_the_float64_power_rounded_once(exponent):
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([x, np.array([0.0, -0.0, np.inf, -np.inf, 1.9e19, 1e-45, 3.4e38,
                                     -1.1e-19], np.float32)]).reshape(4, -1)
    (got,) = run_ours(node_model("Pow", {"x": x, "y": exponent}), {"x": x, "y": exponent})
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), 2.0).astype(np.float32)
    want = np.broadcast_to(want, np.broadcast_shapes(x.shape, exponent.shape))
    assert got.dtype == np.float32 and got.shape == want.shape
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
