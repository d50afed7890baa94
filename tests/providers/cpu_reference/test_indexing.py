"""cpu_reference indexing ops against onnxruntime (or formulas written here where it lacks
them): GatherElements, GatherND, the scatters, TensorScatter, OneHot, CumSum, CumProd,
TopK, Pad, DepthToSpace, SpaceToDepth, ReverseSequence, Dropout; and their NodeError
paths, out-of-range indices among them."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(2)
I64 = np.int64
F32 = np.float32


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _ours(op: str, feeds: dict[str, np.ndarray], n_out: int = 1, *, opset: int,
          **attrs: object) -> list[np.ndarray]:
    """Run one ``op`` node on cpu_reference; a feed named ``""`` is a missing optional."""
    model = node_model(op, feeds, n_out, opset=opset, **attrs)
    return run_ours(model, {k: v for k, v in feeds.items() if k})


# ------------------------------------------------------------------ gathers and scatters


@pytest.mark.parametrize("op,bad", [("GatherElements", 3), ("GatherElements", -4)])
def test_gather_elements_out_of_range_index_raises_node_error(op: str, bad: int) -> None:
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


# ------------------------------------------------------------------ TensorScatter


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, 2])
@pytest.mark.parametrize("with_indices", [True, False])
def test_tensor_scatter_matches_ort(mode: str, axis: int, with_indices: bool) -> None:
    shape = [3, 4, 6, 5]
    upd = list(shape)
    upd[axis] = 3
    feeds = {"past": RNG.standard_normal(shape).astype(F32),
             "update": RNG.standard_normal(upd).astype(F32)}
    if with_indices:
        hi = shape[axis] - 3 if mode == "linear" else 2 * shape[axis]
        feeds["idx"] = RNG.integers(0, hi + 1, size=3).astype(np.int64)
    model = node_model("TensorScatter", feeds, opset=24, mode=mode, axis=axis)
    assert_matches_ort(model, feeds)


def test_tensor_scatter_linear_write_past_the_end_raises_node_error() -> None:
    feeds = {"past": np.zeros((2, 4, 3), F32), "update": np.ones((2, 2, 3), F32),
             "idx": np.array([0, 3], np.int64)}
    with pytest.raises(NodeError, match="linear mode"):
        _ours("TensorScatter", feeds, opset=24, axis=1)


def test_tensor_scatter_on_batch_axis_raises_node_error() -> None:
    feeds = {"past": np.zeros((2, 4), F32), "update": np.ones((1, 4), F32)}
    with pytest.raises(NodeError, match="batch"):
        _ours("TensorScatter", feeds, opset=24, axis=0)


# ------------------------------------------------------------------ CumSum, CumProd


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_matches_ort(dtype: type, exclusive: int, reverse: int) -> None:
    x = (RNG.integers(-9, 10, (3, 5)) if dtype != np.float32 else _x(3, 5)).astype(dtype)
    feeds = {"x": x, "axis": np.array(-1, np.int32)}
    assert_matches_ort(node_model("CumSum", feeds, exclusive=exclusive, reverse=reverse),
                       feeds, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("exclusive,reverse", list(itertools.product([0, 1], [0, 1])))
@pytest.mark.parametrize("axis", [0, -1])
def test_cumprod_matches_ort(dtype: type, exclusive: int, reverse: int, axis: int) -> None:
    x = RNG.uniform(0.5, 1.5, (3, 5)) if np.dtype(dtype).kind == "f" \
        else RNG.integers(-3, 4, (3, 5))
    feeds = {"x": x.astype(dtype), "axis": np.array(axis, np.int64)}
    model = node_model("CumProd", feeds, opset=26, exclusive=exclusive, reverse=reverse)
    assert_matches_ort(model, feeds, rtol=1e-6 if dtype == np.float32 else 0)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_cumprod_narrow_floats_accumulate_in_float32_and_round_once(dtype: type) -> None:
    x = RNG.uniform(0.9, 1.1, 64).astype(dtype)
    (y,) = _ours("CumProd", {"x": x, "axis": np.array(0, np.int32)}, opset=26)
    expected = np.cumprod(x.astype(F32), dtype=F32).astype(dtype)
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, expected)


def test_cumprod_int32_wraps_like_the_hardware() -> None:
    x = np.full(40, 3, np.int32)
    (y,) = _ours("CumProd", {"x": x, "axis": np.array(0, np.int64)}, opset=26)
    np.testing.assert_array_equal(y, np.cumprod(x, dtype=np.int32))


def test_cumprod_axis_out_of_range_raises_node_error() -> None:
    feeds = {"x": np.ones((2, 3), F32), "axis": np.array(2, np.int64)}
    with pytest.raises(NodeError, match="axis"):
        _ours("CumProd", feeds, opset=26)


# ------------------------------------------------------------------ TopK


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


# ------------------------------------------------- Pad, DepthToSpace, SpaceToDepth, ReverseSequence


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 2, 1], [0, 1, 0, 3], [-1, 1, 1, -2]])
def test_pad_modes_match_ort(mode: str, pads: list[int]) -> None:
    feeds = {"x": _x(4, 5), "p": np.array(pads, I64), "v": np.array(1.5, np.float32)}
    assert_matches_ort(node_model("Pad", feeds, mode=mode), feeds)


def test_pad_with_axes_input_matches_ort() -> None:
    feeds = {"x": _x(2, 3, 4), "p": np.array([1, 2, 0, 3], I64), "v": np.array(0, np.float32),
             "a": np.array([-1, 0], I64)}
    assert_matches_ort(node_model("Pad", feeds, mode="constant"), feeds)


def test_pad_with_wrong_pads_length_raises_node_error() -> None:
    feeds = {"x": _x(2, 3), "p": np.array([1, 1], I64)}
    with pytest.raises(NodeError, match="2 entries per padded axis"):
        run_ours(node_model("Pad", feeds), feeds)


def test_pad_reflect_beyond_the_axis_raises_node_error() -> None:
    feeds = {"x": _x(3), "p": np.array([3, 0], I64)}
    with pytest.raises(NodeError, match="exceed the maximum 2"):
        run_ours(node_model("Pad", feeds, mode="reflect"), feeds)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back_match_ort(mode: str) -> None:
    feeds = {"x": _x(2, 8, 3, 2)}
    assert_matches_ort(node_model("DepthToSpace", feeds, blocksize=2, mode=mode), feeds)
    feeds = {"x": _x(2, 3, 4, 6)}
    assert_matches_ort(node_model("SpaceToDepth", feeds, blocksize=2), feeds)


def test_depth_to_space_with_indivisible_channels_raises_node_error() -> None:
    feeds = {"x": _x(1, 6, 2, 2)}
    with pytest.raises(NodeError, match="blocksize"):
        run_ours(node_model("DepthToSpace", feeds, blocksize=2), feeds)


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_matches_ort(batch_axis: int, time_axis: int) -> None:
    shape = [5, 5, 3]
    feeds = {"x": _x(*shape), "l": np.array([1, 5, 3, 0, 2], I64)}
    model = node_model("ReverseSequence", feeds, batch_axis=batch_axis, time_axis=time_axis)
    feeds["l"] = np.array([1, 5, 3, 1, 2], I64)  # onnxruntime rejects length 0
    assert_matches_ort(model, feeds)


def test_reverse_sequence_with_too_long_length_raises_node_error() -> None:
    feeds = {"x": _x(3, 2), "l": np.array([1, 4], I64)}
    with pytest.raises(NodeError, match="sequence_lens"):
        run_ours(node_model("ReverseSequence", feeds), feeds)


# ------------------------------------------------------------------ Dropout


def test_dropout_in_inference_is_identity_with_true_mask() -> None:
    feeds = {"x": _x(3, 4)}
    assert_matches_ort(node_model("Dropout", feeds, 2, opset=13), feeds)


def test_dropout_in_training_keeps_where_uniform_reaches_ratio() -> None:
    x = _x(3, 4, 5)
    feeds = {"x": x, "r": np.array(0.25, np.float32), "t": np.array(True)}
    y, mask = run_ours(node_model("Dropout", feeds, 2, opset=13, seed=7), feeds)
    keep = np.random.RandomState(7).uniform(0.0, 1.0, x.shape) >= 0.25
    np.testing.assert_array_equal(mask, keep)
    np.testing.assert_allclose(y, keep * x / 0.75, rtol=1e-6)
