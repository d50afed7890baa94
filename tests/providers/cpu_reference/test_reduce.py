"""cpu_reference reductions, ArgMax/ArgMin, CumSum, TopK and Einsum against onnxruntime."""

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


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_matches_ort(dtype: type, exclusive: int, reverse: int) -> None:
    x = (RNG.integers(-9, 10, (3, 5)) if dtype != np.float32 else _x(3, 5)).astype(dtype)
    feeds = {"x": x, "axis": np.array(-1, np.int32)}
    assert_matches_ort(node_model("CumSum", feeds, exclusive=exclusive, reverse=reverse),
                       feeds, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.float64])
@pytest.mark.parametrize("largest", [0, 1])
def test_topk_with_ties_keeps_lower_index_first_like_ort(dtype: type, largest: int) -> None:
    x = RNG.integers(0, 4, (3, 7)).astype(dtype)
    feeds = {"x": x, "k": np.array([4], I64)}
    assert_matches_ort(node_model("TopK", feeds, 2, axis=1, largest=largest), feeds)


def test_topk_of_uint64_orders_large_values_correctly() -> None:
    # onnxruntime has no uint64 TopK, so the expectation is written out
    big = np.iinfo(np.uint64).max
    feeds = {"x": np.array([3, big, 0, big - 1, 3], np.uint64), "k": np.array([3], I64)}
    values, indices = run_ours(node_model("TopK", feeds, 2), feeds)
    np.testing.assert_array_equal(values, np.array([big, big - 1, 3], np.uint64))
    np.testing.assert_array_equal(indices, [1, 3, 0])


def test_topk_of_int_extremes_does_not_overflow() -> None:
    info = np.iinfo(np.int32)
    feeds = {"x": np.array([info.min, 0, info.max, info.min], np.int32),
             "k": np.array([2], I64)}
    assert_matches_ort(node_model("TopK", feeds, 2, largest=1), feeds)


@pytest.mark.parametrize("k", [-1, 8])
def test_topk_with_k_out_of_range_raises_node_error(k: int) -> None:
    feeds = {"x": _x(3, 7), "k": np.array([k], I64)}
    with pytest.raises(NodeError, match="TopK"):
        run_ours(node_model("TopK", feeds, 2), feeds)


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]), ("ij->", [(3, 4)]), ("i,i", [(5,), (5,)]), ("...ij->...ji", [(2, 3, 4)]),
])
def test_einsum_matches_ort(equation: str, shapes: list[tuple[int, ...]]) -> None:
    feeds = {f"x{i}": _x(*s) for i, s in enumerate(shapes)}
    assert_matches_ort(node_model("Einsum", feeds, equation=equation), feeds,
                       rtol=1e-5, atol=1e-6)


def test_einsum_with_mismatched_operands_raises_node_error() -> None:
    feeds = {"a": _x(3, 4), "b": _x(5, 6)}
    with pytest.raises(NodeError, match="Einsum"):
        run_ours(node_model("Einsum", feeds, equation="ij,jk->ik"), feeds)
