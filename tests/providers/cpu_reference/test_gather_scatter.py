"""cpu_reference Gather*/Scatter*/OneHot against onnxruntime, and out-of-range index errors."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ort, run_ours

RNG = np.random.default_rng(2)
I64 = np.int64


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather_with_negative_indices_matches_ort(axis: int, idx_dtype: type) -> None:
    data = _x(3, 4, 5)
    n = data.shape[axis]
    feeds = {"x": data, "i": RNG.integers(-n, n, size=(2, 3)).astype(idx_dtype)}
    assert_matches_ort(node_model("Gather", feeds, axis=axis), feeds)


def test_gather_moves_strings() -> None:
    feeds = {"x": np.array(["a", "b", "c"], dtype=object), "i": np.array([[2, -3]], I64)}
    model = node_model("Gather", feeds)
    assert run_ours(model, feeds)[0].tolist() == run_ort(model, feeds)[0].tolist()


@pytest.mark.parametrize("op,bad", [("Gather", 3), ("Gather", -4), ("GatherElements", 3),
                                    ("GatherElements", -4)])
def test_gather_out_of_range_index_raises_node_error(op: str, bad: int) -> None:
    feeds = {"x": _x(3, 3), "i": np.array([[0, bad]], I64)}
    with pytest.raises(NodeError, match=f"value {bad} is out of range"):
        run_ours(node_model(op, feeds), feeds)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_matches_ort(axis: int) -> None:
    data = _x(4, 5)
    n = data.shape[axis]
    feeds = {"x": data, "i": RNG.integers(-n, n, size=(3, 2)).astype(I64)}
    assert_matches_ort(node_model("GatherElements", feeds, axis=axis), feeds)


@pytest.mark.parametrize("batch_dims,data_shape,idx_shape", [
    (0, (4, 5, 6), (3, 2)), (0, (4, 5), (2, 3, 2)), (1, (2, 5, 6), (2, 3, 1)),
    (2, (2, 3, 4, 5), (2, 3, 2)),
])
def test_gather_nd_matches_ort(batch_dims: int, data_shape: tuple[int, ...],
                               idx_shape: tuple[int, ...]) -> None:
    m = idx_shape[-1]
    dims = data_shape[batch_dims:batch_dims + m]
    idx = np.stack([RNG.integers(-d, d, size=idx_shape[:-1]) for d in dims], -1)
    feeds = {"x": _x(*data_shape), "i": idx.astype(I64)}
    assert_matches_ort(node_model("GatherND", feeds, batch_dims=batch_dims), feeds)


def test_gather_nd_out_of_range_index_raises_node_error() -> None:
    feeds = {"x": _x(2, 3), "i": np.array([[1, 3]], I64)}
    with pytest.raises(NodeError, match="out of range"):
        run_ours(node_model("GatherND", feeds), feeds)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_reductions_match_ort(reduction: str) -> None:
    # Duplicate indices only for reductions (their order is fixed by the spec).
    idx = [[1], [3], [1]] if reduction != "none" else [[1], [3], [0]]
    feeds = {"x": _x(4, 3), "i": np.array(idx, I64), "u": _x(3, 3)}
    assert_matches_ort(node_model("ScatterND", feeds, reduction=reduction), feeds,
                       rtol=1e-6)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements_reductions_match_ort(reduction: str, axis: int) -> None:
    idx = np.array([[0, -1, 2], [1, 0, -3]], I64) if reduction == "none" \
        else np.array([[0, 1, 0], [0, 1, 0]], I64)
    feeds = {"x": _x(3, 3), "i": idx, "u": _x(2, 3)}
    assert_matches_ort(node_model("ScatterElements", feeds, axis=axis,
                                  reduction=reduction), feeds, rtol=1e-6)


def test_deprecated_scatter_matches_scatter_elements() -> None:
    feeds = {"x": _x(3, 3), "i": np.array([[1, 0, 2]], I64), "u": _x(1, 3)}
    ours = run_ours(node_model("Scatter", feeds, opset=9, axis=0), feeds)[0]
    ref = run_ours(node_model("ScatterElements", feeds, axis=0), feeds)[0]
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_scatter_out_of_range_index_raises_node_error(op: str) -> None:
    idx = np.array([[5]], I64) if op == "ScatterND" else np.array([[0, 5, 1]], I64)
    upd = _x(1, 3)
    feeds = {"x": _x(3, 3), "i": idx, "u": upd}
    with pytest.raises(NodeError, match="value 5 is out of range"):
        run_ours(node_model(op, feeds), feeds)


def test_scatter_nd_with_wrong_updates_shape_raises_node_error() -> None:
    feeds = {"x": _x(4, 3), "i": np.array([[1]], I64), "u": _x(1, 2)}
    with pytest.raises(NodeError, match="updates shape"):
        run_ours(node_model("ScatterND", feeds), feeds)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot_with_negative_and_out_of_range_indices_matches_ort(axis: int) -> None:
    feeds = {"i": np.array([[0, -1, 9], [-10, 2, 3]], I64), "d": np.array([5], I64),
             "v": np.array([-2.0, 7.0], np.float32)}
    assert_matches_ort(node_model("OneHot", feeds, axis=axis), feeds)


def test_onehot_with_non_positive_depth_raises_node_error() -> None:
    feeds = {"i": np.array([0], I64), "d": np.array(0, I64), "v": np.array([0, 1], I64)}
    with pytest.raises(NodeError, match="depth"):
        run_ours(node_model("OneHot", feeds), feeds)
