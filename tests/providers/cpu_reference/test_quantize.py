"""Quantization ops against onnxruntime (exact), plus NodeError paths."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(3)


def _x(*shape: int) -> np.ndarray:
    x = (RNG.standard_normal(shape) * 40).astype(np.float32)
    x.flat[:4] = [0.5, 1.5, -2.5, 1e6]          # ties round to even; saturation
    return x


QUANT = [
    ("per_tensor_uint8", {"x": _x(3, 4), "s": np.array(0.5, np.float32),
                          "z": np.array(128, np.uint8)}, {}),
    ("per_axis_int8", {"x": _x(2, 3, 4), "s": np.array([0.5, 1.0, 2.0], np.float32),
                       "z": np.array([-3, 0, 4], np.int8)}, {"axis": 1}),
    ("blocked_int16", {"x": _x(3, 8), "s": np.abs(_x(3, 2)) / 100 + 0.1,
                       "z": np.zeros((3, 2), np.int16)}, {"axis": 1, "block_size": 4}),
]


@pytest.mark.parametrize("name", [c[0] for c in QUANT])
def test_quantize_dequantize_round_trip_matches_ort(name: str) -> None:
    _, feeds, attrs = next(c for c in QUANT if c[0] == name)
    q = assert_matches_ort(node_model("QuantizeLinear", feeds, opset=21, **attrs), feeds)[0]
    dq_feeds = {"q": q, "s": feeds["s"], "z": feeds["z"]}
    assert_matches_ort(node_model("DequantizeLinear", dq_feeds, opset=21, **attrs), dq_feeds)


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2,
                                   ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_quantize_to_narrow_types_matches_the_spec_formula(dtype: type) -> None:
    # onnxruntime's Python API cannot exchange these dtypes, so the oracle is the formula
    x, scale = _x(4, 6), np.float32(3.0)
    feeds = {"x": x, "s": np.array(scale), "z": np.zeros((), dtype)}
    out = run_ours(node_model("QuantizeLinear", feeds, opset=21), feeds)[0]
    assert out.dtype == np.dtype(dtype)
    if dtype in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        info = ml_dtypes.finfo(dtype)
        want = np.clip(x / scale, float(info.min), float(info.max)).astype(dtype)
    else:
        info = ml_dtypes.iinfo(dtype)
        want = np.clip(np.rint(x / scale), info.min, info.max).astype(dtype)
    np.testing.assert_array_equal(out.astype(np.float32), want.astype(np.float32))
    back = run_ours(node_model("DequantizeLinear", {"q": out, "s": feeds["s"]}, opset=21),
                    {"q": out, "s": feeds["s"]})[0]
    np.testing.assert_array_equal(back, out.astype(np.float32) * scale)


def test_quantize_without_zero_point_uses_output_dtype() -> None:
    feeds = {"x": _x(2, 4), "s": np.array(0.25, np.float32)}
    out = run_ours(node_model("QuantizeLinear", feeds, opset=21, output_dtype=3), feeds)[0]
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, np.clip(np.rint(feeds["x"] / 0.25), -128, 127))


def test_dynamic_quantize_linear_matches_ort() -> None:
    feeds = {"x": _x(5, 7)}
    assert_matches_ort(node_model("DynamicQuantizeLinear", feeds, 3, opset=21), feeds)


def test_qlinear_matmul_and_matmul_integer_match_ort() -> None:
    a = RNG.integers(0, 255, (3, 5), dtype=np.uint8)
    b = RNG.integers(0, 255, (5, 4), dtype=np.uint8)
    feeds = {"a": a, "sa": np.array(0.02, np.float32), "za": np.array(120, np.uint8),
             "b": b, "sb": np.array(0.03, np.float32), "zb": np.array(130, np.uint8),
             "sy": np.array(0.5, np.float32), "zy": np.array(100, np.uint8)}
    assert_matches_ort(node_model("QLinearMatMul", feeds, opset=21), feeds)
    mi = {"a": a, "b": b, "za": feeds["za"], "zb": feeds["zb"]}
    assert_matches_ort(node_model("MatMulInteger", mi, opset=21), mi)


def test_conv_integer_and_qlinear_conv_match_ort() -> None:
    x = RNG.integers(0, 255, (1, 2, 5, 5), dtype=np.uint8)
    w = RNG.integers(0, 255, (3, 2, 3, 3), dtype=np.uint8)
    ci = {"x": x, "w": w, "zx": np.array(128, np.uint8), "zw": np.array(127, np.uint8)}
    assert_matches_ort(node_model("ConvInteger", ci, opset=21, pads=[1, 1, 1, 1]), ci)
    # |w| <= 60: onnxruntime's u8s8 kernel sums byte pairs in saturating int16
    wq = RNG.integers(-60, 60, (3, 2, 3, 3), dtype=np.int8)
    q = {"x": x, "sx": np.array(0.05, np.float32), "zx": np.array(128, np.uint8), "w": wq,
         "sw": np.array([0.01, 0.02, 0.03], np.float32), "zw": np.zeros(3, np.int8),
         "sy": np.array(0.2, np.float32), "zy": np.array(90, np.uint8),
         "bias": RNG.integers(-500, 500, 3, dtype=np.int32)}
    assert_matches_ort(node_model("QLinearConv", q, opset=21, strides=[2, 2]), q)


def test_per_axis_scale_of_wrong_length_raises() -> None:
    feeds = {"x": _x(2, 3), "s": np.ones(2, np.float32)}
    with pytest.raises(NodeError, match="per-axis scale"):
        run_ours(node_model("QuantizeLinear", feeds, opset=21, axis=1), feeds)


def test_blocked_scale_of_wrong_shape_raises() -> None:
    feeds = {"x": _x(2, 8), "s": np.ones((2, 3), np.float32)}
    with pytest.raises(NodeError, match="blocked scale"):
        run_ours(node_model("QuantizeLinear", feeds, opset=21, axis=1, block_size=4), feeds)
