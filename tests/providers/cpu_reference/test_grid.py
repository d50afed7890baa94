"""cpu_reference GridSample, AffineGrid and Col2Im against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(5)
F32 = np.float32


@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d_matches_ort(mode: str, padding: str, align: int) -> None:
    # Grid values reach past [-1, 1] so every padding mode is exercised.
    feeds = {"x": RNG.standard_normal((2, 3, 4, 5)).astype(F32),
             "g": RNG.uniform(-1.7, 1.7, size=(2, 3, 6, 2)).astype(F32)}
    model = node_model("GridSample", feeds, mode=mode, padding_mode=padding,
                       align_corners=align)
    assert_matches_ort(model, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_volumetric_matches_ort(mode: str) -> None:
    feeds = {"x": RNG.standard_normal((1, 2, 3, 4, 5)).astype(F32),
             "g": RNG.uniform(-1.2, 1.2, size=(1, 2, 3, 4, 3)).astype(F32)}
    assert_matches_ort(node_model("GridSample", feeds, mode=mode), feeds,
                       rtol=1e-4, atol=1e-5)


def test_grid_sample_with_wrong_grid_shape_raises_node_error() -> None:
    feeds = {"x": np.zeros((1, 1, 3, 3), F32), "g": np.zeros((1, 2, 2, 3), F32)}
    with pytest.raises(NodeError, match="grid shape"):
        run_ours(node_model("GridSample", feeds), feeds)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 4, 2]])
def test_affine_grid_matches_ort(align: int, size: list[int]) -> None:
    nd = len(size) - 2
    feeds = {"t": RNG.standard_normal((2, nd, nd + 1)).astype(F32),
             "s": np.array(size, np.int64)}
    assert_matches_ort(node_model("AffineGrid", feeds, align_corners=align), feeds,
                       rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strides,pads,dilations", [
    ([1, 1], [0, 0, 0, 0], [1, 1]), ([2, 1], [1, 0, 1, 2], [1, 2]),
])
def test_col2im_matches_ort(strides: list[int], pads: list[int], dilations: list[int]) -> None:
    img, k = [5, 6], [2, 3]
    blocks = [(img[i] + pads[i] + pads[2 + i] - dilations[i] * (k[i] - 1) - 1) // strides[i] + 1
              for i in range(2)]
    feeds = {"x": RNG.standard_normal((2, 3 * 6, blocks[0] * blocks[1])).astype(F32),
             "i": np.array(img, np.int64), "b": np.array(k, np.int64)}
    model = node_model("Col2Im", feeds, strides=strides, pads=pads, dilations=dilations)
    assert_matches_ort(model, feeds, rtol=1e-5, atol=1e-6)


def test_col2im_with_wrong_block_count_raises_node_error() -> None:
    feeds = {"x": np.zeros((1, 4, 7), F32), "i": np.array([3, 3], np.int64),
             "b": np.array([2, 2], np.int64)}
    with pytest.raises(NodeError, match="sliding blocks"):
        run_ours(node_model("Col2Im", feeds), feeds)
