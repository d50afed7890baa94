"""cpu_reference Compress, NonZero and Unique against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_with_short_condition_matches_ort(axis: int | None) -> None:
    attrs = {} if axis is None else {"axis": axis}
    feeds = {"x": RNG.standard_normal((3, 4)).astype(np.float32),
             "c": np.array([True, False, True])}
    assert_matches_ort(node_model("Compress", feeds, **attrs), feeds)


def test_compress_with_condition_selecting_past_the_axis_raises_node_error() -> None:
    feeds = {"x": np.zeros((2, 2), np.float32), "c": np.array([False, True, True])}
    with pytest.raises(NodeError, match="condition"):
        run_ours(node_model("Compress", feeds, axis=0), feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_nonzero_matches_ort(dtype: type) -> None:
    x = (RNG.integers(0, 3, size=(3, 4, 2)) - 1).astype(dtype)
    assert_matches_ort(node_model("NonZero", {"x": x}), {"x": x})


def test_nonzero_of_all_zero_input_is_empty() -> None:
    x = np.zeros((2, 3), np.float32)
    assert_matches_ort(node_model("NonZero", {"x": x}), {"x": x})


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique_four_outputs_match_ort(sorted_: int, axis: int | None) -> None:
    x = RNG.integers(0, 3, size=(5, 3)).astype(np.float32)
    x[3] = x[0]
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    model = node_model("Unique", {"x": x}, n_outputs=4, **attrs)
    assert_matches_ort(model, {"x": x})


def test_unique_of_strings_is_sorted_by_value() -> None:
    x = np.array(["b", "a", "b", "c"], dtype=object)
    y, first, inverse, counts = run_ours(node_model("Unique", {"x": x}, n_outputs=4), {"x": x})
    assert y.tolist() == ["a", "b", "c"]
    assert first.tolist() == [1, 0, 3] and inverse.tolist() == [1, 0, 1, 2]
    assert counts.tolist() == [1, 2, 1]


def test_nonzero_of_scalar_is_treated_as_one_element_vector() -> None:
    x = np.array(3.0, np.float32)
    out = run_ours(node_model("NonZero", {"x": x}), {"x": x})[0]
    np.testing.assert_array_equal(out, np.zeros((1, 1), np.int64))
