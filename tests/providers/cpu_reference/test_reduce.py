"""cpu_reference reductions and ArgMax/ArgMin against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(1)
I64 = np.int64

SUM_LIKE = ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceSumSquare", "ReduceLogSumExp"]
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float16: dict(rtol=2e-3, atol=2e-3)}


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", SUM_LIKE + ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, -1], 0), ([], 1)])
def test_reduce_with_axes_input_matches_ort(op: str, dtype: type, axes: list[int],
                                            keepdims: int) -> None:
    feeds = {"x": _x(3, 4, 5, dtype=dtype), "axes": np.array(axes, I64)}
    tol = {} if op in ("ReduceMax", "ReduceMin") else TOL[dtype]
    assert_matches_ort(node_model(op, feeds, opset=18, keepdims=keepdims), feeds, **tol)


def test_reduce_log_sum_of_positive_input_matches_ort() -> None:
    feeds = {"x": np.abs(_x(3, 4, 5)) + 0.1, "axes": np.array([2], I64)}
    assert_matches_ort(node_model("ReduceLogSum", feeds, opset=18), feeds, **TOL[np.float32])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_reduce_with_axes_attribute_before_opset_13_matches_ort(op: str) -> None:
    feeds = {"x": _x(2, 3, 4)}
    assert_matches_ort(node_model(op, feeds, opset=11, axes=[0, 2], keepdims=0), feeds,
                       **TOL[np.float32])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_integer_reductions_are_exact(op: str, dtype: type) -> None:
    feeds = {"x": RNG.integers(-5, 6, (3, 4)).astype(dtype), "axes": np.array([1], I64)}
    assert_matches_ort(node_model(op, feeds, opset=18), feeds)


def test_reduce_sum_noop_with_empty_axes_returns_input() -> None:
    feeds = {"x": _x(2, 3), "axes": np.array([], I64)}
    (y,) = run_ours(node_model("ReduceSum", feeds, opset=13, noop_with_empty_axes=1), feeds)
    np.testing.assert_array_equal(y, feeds["x"])


@pytest.mark.parametrize("op,expected", [("ReduceSum", 0.0), ("ReduceProd", 1.0),
                                         ("ReduceMax", -np.inf), ("ReduceMin", np.inf),
                                         ("ReduceLogSumExp", -np.inf), ("ReduceL2", 0.0)])
def test_empty_set_reduction_gives_identity(op: str, expected: float) -> None:
    feeds = {"x": np.zeros((2, 0, 4), np.float32), "axes": np.array([1], I64)}
    (y,) = run_ours(node_model(op, feeds, opset=18, keepdims=1), feeds)
    assert y.shape == (2, 1, 4) and y.dtype == np.float32
    np.testing.assert_array_equal(y, np.full((2, 1, 4), expected, np.float32))


def test_reduce_max_of_bool_is_any() -> None:
    feeds = {"x": np.array([[True, False], [False, False]]), "axes": np.array([1], I64)}
    (y,) = run_ours(node_model("ReduceMax", feeds, opset=20, keepdims=0), feeds)
    np.testing.assert_array_equal(y, [True, False])


@pytest.mark.parametrize("axes", [[3], [0, 0], [-4]])
def test_reduce_with_bad_axes_raises_node_error(axes: list[int]) -> None:
    feeds = {"x": _x(2, 3, 4), "axes": np.array(axes, I64)}
    with pytest.raises(NodeError, match="ReduceSum"):
        run_ours(node_model("ReduceSum", feeds, opset=18), feeds)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("select_last_index", [0, 1])
@pytest.mark.parametrize("axis,keepdims", [(0, 1), (-1, 0)])
def test_arg_extremes_with_ties_match_ort(op: str, select_last_index: int, axis: int,
                                          keepdims: int) -> None:
    feeds = {"x": RNG.integers(0, 3, (4, 5)).astype(np.float32)}
    assert_matches_ort(node_model(op, feeds, axis=axis, keepdims=keepdims,
                                  select_last_index=select_last_index), feeds)
