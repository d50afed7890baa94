"""cpu_reference data-movement ops (views, Concat, Split, Slice, Tile, Gather) against
onnxruntime, plus their NodeError paths."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ort, run_ours

RNG = np.random.default_rng(1)
I64 = np.int64


def assert_strings_match_ort(model: object, feeds: dict[str, np.ndarray]) -> None:
    """String outputs equal onnxruntime's (the oracle helper compares objects numerically)."""
    for ours, ref in zip(run_ours(model, feeds), run_ort(model, feeds), strict=True):
        assert ours.dtype == object and ours.shape == ref.shape
        assert ours.tolist() == ref.tolist()


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


def test_scalar_transpose_and_reshape_keep_rank_zero() -> None:
    x = np.array(2.5, np.float32)
    assert_matches_ort(node_model("Transpose", {"x": x}), {"x": x})
    feeds = {"x": np.array([2.5], np.float32), "s": np.zeros(0, I64)}
    assert_matches_ort(node_model("Reshape", feeds), feeds)


def test_squeeze_with_empty_axes_input_squeezes_all_unit_dims() -> None:
    feeds = {"x": _x(1, 2, 1), "a": np.zeros(0, I64)}
    assert_matches_ort(node_model("Squeeze", feeds), feeds)


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


@pytest.mark.parametrize("op,bad", [("Gather", 3), ("Gather", -4)])
def test_gather_out_of_range_index_raises_node_error(op: str, bad: int) -> None:
    feeds = {"x": _x(3, 3), "i": np.array([[0, bad]], I64)}
    with pytest.raises(NodeError, match=f"value {bad} is out of range"):
        run_ours(node_model(op, feeds), feeds)
