"""cpu_reference data-movement ops against onnxruntime, plus their NodeError paths."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ort, run_ours

RNG = np.random.default_rng(1)
I64 = np.int64


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def test_concat_matches_ort_across_axes_and_dtypes() -> None:
    for axis in (0, 1, -1):
        for dtype in (np.float32, np.int64, np.bool_):
            shapes = [[2, 3, 4], [2, 3, 4]]
            shapes[1][axis] = 1
            feeds = {f"x{i}": _x(*s, dtype=dtype) for i, s in enumerate(shapes)}
            assert_matches_ort(node_model("Concat", feeds, axis=axis), feeds)


def test_concat_moves_strings() -> None:
    feeds = {"a": np.array([["a"], ["b"]], dtype=object),
             "b": np.array([["c", "d"], ["e", "f"]], dtype=object)}
    model = node_model("Concat", feeds, axis=1)
    assert run_ours(model, feeds)[0].tolist() == run_ort(model, feeds)[0].tolist()


def test_concat_with_mismatched_dims_raises_node_error() -> None:
    feeds = {"a": _x(2, 3), "b": _x(3, 3)}
    with pytest.raises(NodeError, match="does not match"):
        run_ours(node_model("Concat", feeds, axis=1), feeds)


def test_split_by_input_by_num_outputs_and_by_attribute() -> None:
    x = _x(7, 2)
    feeds = {"x": x, "s": np.array([2, 5], I64)}
    assert_matches_ort(node_model("Split", feeds, n_outputs=2), feeds)
    # num_outputs=3 over 7 rows: chunks of ceil(7/3)=3, the last one smaller.
    assert_matches_ort(node_model("Split", {"x": x}, n_outputs=3, num_outputs=3,
                                  opset=18), {"x": x})
    outs = run_ours(node_model("Split", {"x": x}, n_outputs=2, opset=11, split=[3, 4]),
                    {"x": x})
    assert [o.shape for o in outs] == [(3, 2), (4, 2)]


def test_split_with_bad_sizes_raises_node_error() -> None:
    feeds = {"x": _x(7), "s": np.array([2, 4], I64)}
    with pytest.raises(NodeError, match="sum to"):
        run_ours(node_model("Split", feeds, n_outputs=2), feeds)
    with pytest.raises(NodeError, match="equal parts"):
        run_ours(node_model("Split", {"x": _x(7)}, n_outputs=2, opset=13), {"x": _x(7)})


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([0, 1], [3, 10], [0, 1], [1, 2]),
    ([-1], [-100], [1], [-1]),
    ([10, -2], [-10, 0], [0, 1], [-2, -1]),
    ([1], [1000], None, None),
    ([2], [1], [0], [1]),
    ([-5], [5], [-1], [3]),
])
def test_slice_matches_ort(starts: list[int], ends: list[int], axes: list[int] | None,
                           steps: list[int] | None) -> None:
    feeds = {"x": _x(5, 6), "s": np.array(starts, I64), "e": np.array(ends, I64)}
    if axes is not None:
        feeds["a"] = np.array(axes, I64)
    if steps is not None:
        feeds["t"] = np.array(steps, I64)
    assert_matches_ort(node_model("Slice", feeds), feeds)


def test_slice_attribute_form_before_opset_10() -> None:
    x = _x(4, 5)
    out = run_ours(node_model("Slice", {"x": x}, opset=9, starts=[1, -3], ends=[3, 100],
                              axes=[0, 1]), {"x": x})[0]
    np.testing.assert_array_equal(out, x[1:3, -3:])


def test_slice_with_zero_step_raises_node_error() -> None:
    feeds = {"x": _x(4), "s": np.array([0], I64), "e": np.array([4], I64),
             "a": np.array([0], I64), "t": np.array([0], I64)}
    with pytest.raises(NodeError, match="step"):
        run_ours(node_model("Slice", feeds), feeds)


def test_tile_matches_ort() -> None:
    feeds = {"x": _x(2, 3), "r": np.array([2, 0], I64)}
    assert_matches_ort(node_model("Tile", feeds), feeds)
    feeds["r"] = np.array([3, 2], I64)
    assert_matches_ort(node_model("Tile", feeds), feeds)


def test_tile_with_wrong_repeats_length_raises_node_error() -> None:
    feeds = {"x": _x(2, 3), "r": np.array([2], I64)}
    with pytest.raises(NodeError, match="repeats"):
        run_ours(node_model("Tile", feeds), feeds)


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


def test_center_crop_pad_crops_and_pads_around_the_center() -> None:
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    feeds = {"x": x, "s": np.array([2, 8], I64)}
    out = run_ours(node_model("CenterCropPad", feeds), feeds)[0]
    expected = np.zeros((2, 8), np.float32)
    expected[:, 1:6] = x[1:3]
    np.testing.assert_array_equal(out, expected)


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


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-1, 0, 2])
def test_trilu_matches_ort(upper: int, k: int) -> None:
    feeds = {"x": _x(2, 4, 5), "k": np.array(k, I64)}
    assert_matches_ort(node_model("Trilu", feeds, upper=upper), feeds)


def test_pad_reflect_beyond_the_axis_raises_node_error() -> None:
    feeds = {"x": _x(3), "p": np.array([3, 0], I64)}
    with pytest.raises(NodeError, match="exceed the maximum 2"):
        run_ours(node_model("Pad", feeds, mode="reflect"), feeds)
