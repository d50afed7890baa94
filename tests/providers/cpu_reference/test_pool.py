"""cpu_reference pooling ops against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, ort_version, run_ours

RNG = np.random.default_rng(4)
F32 = dict(rtol=1e-5, atol=1e-6)


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


GEOMETRIES: list[dict[str, Any]] = [
    dict(kernel_shape=[3, 3]),
    dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]),
    dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 3], dilations=[2, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="VALID"),
]


@pytest.mark.parametrize("attrs", GEOMETRIES)
def test_maxpool_with_indices_matches_ort(attrs: dict[str, Any]) -> None:
    feeds = {"x": _x(2, 3, 7, 6)}
    assert_matches_ort(node_model("MaxPool", feeds, 2, **attrs), feeds)


@pytest.mark.parametrize("shape,kernel", [((1, 2, 9), [3]), ((1, 2, 5, 4, 6), [2, 3, 2])])
def test_maxpool_in_1d_and_3d_with_column_major_indices_matches_ort(
        shape: tuple[int, ...], kernel: list[int]) -> None:
    feeds = {"x": _x(*shape)}
    assert_matches_ort(node_model("MaxPool", feeds, 2, kernel_shape=kernel, storage_order=1),
                       feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float16])
def test_maxpool_of_narrow_types_matches_ort(dtype: type) -> None:
    feeds = {"x": RNG.integers(0, 100, (1, 2, 5, 5)).astype(dtype)}
    assert_matches_ort(node_model("MaxPool", feeds, kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
                       feeds)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("attrs", GEOMETRIES)
def test_averagepool_matches_ort(attrs: dict[str, Any], count_include_pad: int) -> None:
    pads = attrs.get("pads", [0] * 4)
    if (count_include_pad and (pads[:2] != pads[2:] or "SAME" in attrs.get("auto_pad", ""))
            and ort_version() < (1, 26)):
        pytest.skip(f"onnxruntime {'.'.join(map(str, ort_version()))} < 1.26 counts "
                    f"asymmetric padding differently with count_include_pad=1")
    feeds = {"x": _x(2, 3, 7, 6)}
    assert_matches_ort(node_model("AveragePool", feeds, count_include_pad=count_include_pad,
                                  **attrs), feeds, **F32)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lppool_matches_ort(p: int) -> None:
    feeds = {"x": _x(2, 3, 6, 5)}
    assert_matches_ort(node_model("LpPool", feeds, kernel_shape=[2, 3], strides=[2, 1],
                                  pads=[1, 1, 0, 1], p=p), feeds, **F32)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5)])
def test_global_pools_match_ort(op: str, shape: tuple[int, ...]) -> None:
    feeds = {"x": _x(*shape)}
    assert_matches_ort(node_model(op, feeds), feeds, **F32)


def test_maxunpool_inverts_maxpool_indices_like_ort() -> None:
    x = _x(1, 2, 4, 4)
    pool = node_model("MaxPool", {"x": x}, 2, kernel_shape=[2, 2], strides=[2, 2])
    values, indices = run_ours(pool, {"x": x})
    feeds = {"v": values, "i": indices}
    assert_matches_ort(node_model("MaxUnpool", feeds, kernel_shape=[2, 2], strides=[2, 2]),
                       feeds)


def test_maxunpool_with_out_of_range_index_raises_node_error() -> None:
    feeds = {"v": _x(1, 1, 2, 2), "i": np.array([[[[0, 1], [2, 16]]]], np.int64)}
    with pytest.raises(NodeError, match="indices"):
        run_ours(node_model("MaxUnpool", feeds, kernel_shape=[2, 2], strides=[2, 2]), feeds)


def test_pool_window_larger_than_input_raises_node_error() -> None:
    feeds = {"x": _x(1, 1, 2, 2)}
    with pytest.raises(NodeError, match="does not fit"):
        run_ours(node_model("MaxPool", feeds, kernel_shape=[3, 3]), feeds)


def test_pool_with_wrong_stride_count_raises_node_error() -> None:
    feeds = {"x": _x(1, 1, 4, 4)}
    with pytest.raises(NodeError, match="strides"):
        run_ours(node_model("AveragePool", feeds, kernel_shape=[2, 2], strides=[1]), feeds)
