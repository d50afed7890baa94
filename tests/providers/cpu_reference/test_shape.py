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


@pytest.mark.parametrize("target,allowzero", [
    ([4, 6], 0), ([-1, 3], 0), ([0, -1], 0), ([2, 0, 2, 2], 0), ([24], 0), ([6, 0, 4], 1),
])
def test_reshape_matches_ort(target: list[int], allowzero: int) -> None:
    x = _x(2, 3, 4) if not allowzero else _x(6, 0, 4)
    feeds = {"x": x, "s": np.array(target, I64)}
    assert_matches_ort(node_model("Reshape", feeds, allowzero=allowzero), feeds)


@pytest.mark.parametrize("target", [[5, 5], [-1, -1], [-1, 5], [0, 0, 0, 0, 7]])
def test_reshape_to_incompatible_shape_raises_node_error(target: list[int]) -> None:
    feeds = {"x": _x(2, 3, 4), "s": np.array(target, I64)}
    with pytest.raises(NodeError, match="Reshape"):
        run_ours(node_model("Reshape", feeds), feeds)


def test_reshape_moves_strings() -> None:
    x = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    feeds = {"x": x, "s": np.array([3, 2], I64)}
    assert_strings_match_ort(node_model("Reshape", feeds), feeds)


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-1, None), (0, -1),
                                       (-10, 10), (2, 1)])
def test_shape_with_start_end_matches_ort(start: int | None, end: int | None) -> None:
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    feeds = {"x": _x(2, 3, 4)}
    assert_matches_ort(node_model("Shape", feeds, **attrs), feeds)


def test_size_of_empty_and_scalar() -> None:
    for x in (_x(3, 0), np.array(1.5, np.float32)):
        assert_matches_ort(node_model("Size", {"x": x}), {"x": x})


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten_matches_ort(axis: int) -> None:
    feeds = {"x": _x(2, 3, 4)}
    assert_matches_ort(node_model("Flatten", feeds, axis=axis), feeds)


def test_squeeze_and_unsqueeze_with_axes_input_match_ort() -> None:
    x = _x(1, 3, 1, 2)
    for op, axes in (("Squeeze", [0, -2]), ("Unsqueeze", [0, -1, 3])):
        feeds = {"x": x, "a": np.array(axes, I64)}
        assert_matches_ort(node_model(op, feeds), feeds)
    assert_matches_ort(node_model("Squeeze", {"x": x}), {"x": x})


def test_squeeze_and_unsqueeze_with_axes_attribute_before_opset_13() -> None:
    x = _x(1, 3, 1)
    out = run_ours(node_model("Squeeze", {"x": x}, opset=11, axes=[2]), {"x": x})[0]
    assert out.shape == (1, 3)
    out = run_ours(node_model("Unsqueeze", {"x": x}, opset=11, axes=[0, 4]), {"x": x})[0]
    assert out.shape == (1, 1, 3, 1, 1)


def test_squeeze_of_non_unit_axis_raises_node_error() -> None:
    feeds = {"x": _x(1, 3), "a": np.array([1], I64)}
    with pytest.raises(NodeError, match="cannot squeeze axis 1"):
        run_ours(node_model("Squeeze", feeds), feeds)


def test_unsqueeze_with_duplicate_axes_raises_node_error() -> None:
    feeds = {"x": _x(3), "a": np.array([0, 0], I64)}
    with pytest.raises(NodeError, match="duplicates"):
        run_ours(node_model("Unsqueeze", feeds), feeds)


@pytest.mark.parametrize("shape", [[2, 1, 3], [3], [4, 2, 1, 1], [1]])
def test_expand_matches_ort(shape: list[int]) -> None:
    feeds = {"x": _x(2, 1), "s": np.array(shape, I64)}
    assert_matches_ort(node_model("Expand", feeds), feeds)


def test_expand_to_incompatible_shape_raises_node_error() -> None:
    feeds = {"x": _x(2, 3), "s": np.array([4], I64)}
    with pytest.raises(NodeError, match="cannot be broadcast"):
        run_ours(node_model("Expand", feeds), feeds)


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1]])
def test_transpose_matches_ort(perm: list[int] | None) -> None:
    attrs = {} if perm is None else {"perm": perm}
    for dtype in (np.float16, np.int8):
        feeds = {"x": _x(2, 3, 4, dtype=dtype)}
        assert_matches_ort(node_model("Transpose", feeds, **attrs), feeds)


def test_transpose_with_bad_perm_raises_node_error() -> None:
    feeds = {"x": _x(2, 3)}
    with pytest.raises(NodeError, match="not a permutation"):
        run_ours(node_model("Transpose", feeds, perm=[0, 0]), feeds)


def test_identity_copies_strings() -> None:
    x = np.array(["x", "yy"], dtype=object)
    assert_strings_match_ort(node_model("Identity", {"x": x}), {"x": x})


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


def test_scalar_transpose_and_reshape_keep_rank_zero() -> None:
    x = np.array(2.5, np.float32)
    assert_matches_ort(node_model("Transpose", {"x": x}), {"x": x})
    feeds = {"x": np.array([2.5], np.float32), "s": np.zeros(0, I64)}
    assert_matches_ort(node_model("Reshape", feeds), feeds)


def test_squeeze_with_empty_axes_input_squeezes_all_unit_dims() -> None:
    feeds = {"x": _x(1, 2, 1), "a": np.zeros(0, I64)}
    assert_matches_ort(node_model("Squeeze", feeds), feeds)
