"""cpu_reference shape and constant ops against onnxruntime, plus their NodeError paths."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ort, run_ours

RNG = np.random.default_rng(0)
I64 = np.int64


def assert_strings_match_ort(model: object, feeds: dict[str, np.ndarray]) -> None:
    """String outputs equal onnxruntime's (the oracle helper compares objects numerically)."""
    for ours, ref in zip(run_ours(model, feeds), run_ort(model, feeds), strict=True):
        assert ours.dtype == object and ours.shape == ref.shape
        assert ours.tolist() == ref.tolist()


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-1, None), (0, -1),
                                       (-10, 10), (2, 1)])
def test_shape_with_start_end_matches_ort(start: int | None, end: int | None) -> None:
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    feeds = {"x": _x(2, 3, 4)}
    assert_matches_ort(node_model("Shape", feeds, **attrs), feeds)


def test_size_of_empty_and_scalar() -> None:
    for x in (_x(3, 0), np.array(1.5, np.float32)):
        assert_matches_ort(node_model("Size", {"x": x}), {"x": x})


@pytest.mark.parametrize("attr,value", [
    ("value", helper.make_tensor("v", TensorProto.INT32, [2], [3, 4])),
    ("value_float", 1.5), ("value_floats", [1.0, 2.0]), ("value_int", 7),
    ("value_ints", [1, 2, 3]),
])
def test_constant_attribute_forms_match_ort(attr: str, value: object) -> None:
    assert_matches_ort(node_model("Constant", {}, **{attr: value}), {})


def test_constant_strings_and_sparse() -> None:
    out = run_ours(node_model("Constant", {}, value_strings=["a", "b"]), {})[0]
    assert out.dtype == object and out.tolist() == ["a", "b"]
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", TensorProto.FLOAT, [2], [5.0, 6.0]),
        helper.make_tensor("i", TensorProto.INT64, [2], [1, 3]), [4])
    out = run_ours(node_model("Constant", {}, sparse_value=sparse), {})[0]
    np.testing.assert_array_equal(out, np.array([0, 5, 0, 6], np.float32))


def test_constant_of_shape_matches_ort() -> None:
    feeds = {"s": np.array([2, 3], I64)}
    value = helper.make_tensor("v", TensorProto.INT32, [1], [9])
    assert_matches_ort(node_model("ConstantOfShape", feeds, value=value), feeds)
    assert_matches_ort(node_model("ConstantOfShape", feeds), feeds)


@pytest.mark.parametrize("k", [0, 1, -2, 5])
def test_eyelike_matches_ort(k: int) -> None:
    feeds = {"x": _x(3, 4)}
    assert_matches_ort(node_model("EyeLike", feeds, k=k, dtype=TensorProto.INT32), feeds)


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (1, 10, 3, np.int32), (10, 6, -3, np.int64), (0.5, 3.0, 0.25, np.float32),
    (3.0, -1.0, -0.7, np.float64), (5, 5, 1, np.int64),
])
def test_range_matches_ort(start: float, limit: float, delta: float, dtype: type) -> None:
    feeds = {"a": np.array(start, dtype), "b": np.array(limit, dtype),
             "c": np.array(delta, dtype)}
    # onnxruntime accumulates ``prev + delta``; the spec (and we) compute start + i * delta.
    tol = 1e-12 if np.dtype(dtype).kind == "f" else 0.0
    assert_matches_ort(node_model("Range", feeds), feeds, rtol=tol, atol=tol)


def test_range_with_zero_delta_raises_node_error() -> None:
    feeds = {"a": np.array(0, I64), "b": np.array(3, I64), "c": np.array(0, I64)}
    with pytest.raises(NodeError, match="delta"):
        run_ours(node_model("Range", feeds), feeds)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-1, 0, 2])
def test_trilu_matches_ort(upper: int, k: int) -> None:
    feeds = {"x": _x(2, 4, 5), "k": np.array(k, I64)}
    assert_matches_ort(node_model("Trilu", feeds, upper=upper), feeds)
