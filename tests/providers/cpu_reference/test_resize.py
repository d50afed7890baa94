"""cpu_reference Resize/Upsample, GridSample, AffineGrid, Col2Im and CenterCropPad against
onnxruntime (or the expected values written out), plus the NodeError paths."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(4)
F32 = np.float32
COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
          "asymmetric"]


def _feeds(x: np.ndarray, *, scales: list[float] | None = None,
           sizes: list[int] | None = None) -> dict[str, np.ndarray]:
    feeds = {"x": x, "roi": np.zeros(0, F32)}
    if scales is not None:
        feeds["scales"] = np.array(scales, F32)
    else:
        feeds["scales"] = np.zeros(0, F32)
        feeds["sizes"] = np.array(sizes, np.int64)
    return feeds


def _model(feeds: dict[str, np.ndarray], **attrs: object) -> object:
    # roi/scales/sizes are initializers, so onnxruntime accepts the empty ones.
    inits = {k: v for k, v in feeds.items() if k != "x"}
    return node_model("Resize", feeds, initializers=inits, **attrs)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 1.5], [1, 1, 0.5, 0.75]])
def test_resize_by_scales_matches_ort(coord: str, mode: str, scales: list[float]) -> None:
    feeds = _feeds(RNG.standard_normal((1, 2, 4, 4)).astype(F32), scales=scales)
    model = _model(feeds, mode=mode, coordinate_transformation_mode=coord)
    assert_matches_ort(model, {"x": feeds["x"]}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil",
                                          "floor", "ceil"])
@pytest.mark.parametrize("sizes", [[1, 1, 7, 3], [1, 1, 2, 9]])
def test_resize_nearest_modes_by_sizes_match_ort(nearest_mode: str, sizes: list[int]) -> None:
    feeds = _feeds(RNG.standard_normal((1, 1, 4, 5)).astype(F32), sizes=sizes)
    model = _model(feeds, mode="nearest", nearest_mode=nearest_mode,
                   coordinate_transformation_mode="asymmetric")
    assert_matches_ort(model, {"x": feeds["x"]})


@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_cubic_coeff_and_exclude_outside_match_ort(exclude_outside: int) -> None:
    feeds = _feeds(RNG.standard_normal((1, 1, 5, 5)).astype(F32), scales=[1, 1, 1.6, 0.6])
    model = _model(feeds, mode="cubic", cubic_coeff_a=-0.5, exclude_outside=exclude_outside)
    assert_matches_ort(model, {"x": feeds["x"]}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_antialias_and_aspect_policy_match_ort(mode: str, policy: str) -> None:
    feeds = _feeds(RNG.standard_normal((1, 1, 8, 9)).astype(F32), sizes=[3, 5])
    model = _model(feeds, mode=mode, antialias=1, axes=[2, 3],
                   keep_aspect_ratio_policy=policy)
    assert_matches_ort(model, {"x": feeds["x"]}, rtol=1e-5, atol=1e-5)


def test_resize_tf_crop_and_resize_with_extrapolation_matches_ort() -> None:
    x = RNG.standard_normal((1, 1, 4, 4)).astype(F32)
    feeds = {"x": x, "roi": np.array([0, 0, 0.4, -0.2, 1, 1, 1.3, 0.8], F32),
             "scales": np.zeros(0, F32), "sizes": np.array([1, 1, 3, 3], np.int64)}
    model = _model(feeds, mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                   extrapolation_value=10.0)
    assert_matches_ort(model, {"x": x}, rtol=1e-5, atol=1e-5)


def test_resize_uint8_linear_rounds_like_ort() -> None:
    feeds = _feeds(RNG.integers(0, 256, size=(1, 1, 3, 4)).astype(np.uint8),
                   scales=[1, 1, 2, 2])
    assert_matches_ort(_model(feeds, mode="linear"), {"x": feeds["x"]}, atol=1)


def test_resize_with_both_scales_and_sizes_raises_node_error() -> None:
    x = np.zeros((1, 1, 2, 2), F32)
    feeds = {"x": x, "roi": np.zeros(0, F32), "scales": np.ones(4, F32),
             "sizes": np.array([1, 1, 4, 4], np.int64)}
    with pytest.raises(NodeError, match="exactly one of 'scales' and 'sizes'"):
        run_ours(node_model("Resize", feeds), feeds)


def test_resize_opset10_and_upsample_use_asymmetric_floor_nearest() -> None:
    x = np.arange(6, dtype=F32).reshape(1, 1, 2, 3)
    scales = np.array([1, 1, 2, 1.5], F32)
    expected = x[:, :, [0, 0, 1, 1]][:, :, :, [0, 0, 1, 2]]
    for op, opset in (("Resize", 10), ("Upsample", 9)):
        feeds = {"x": x, "s": scales}
        out = run_ours(node_model(op, feeds, opset=opset, mode="nearest"), feeds)[0]
        np.testing.assert_array_equal(out, expected)


# ------------------------------------------------------------------ GridSample, AffineGrid, Col2Im


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


# ------------------------------------------------------------------ CenterCropPad


def test_center_crop_pad_crops_and_pads_around_the_center() -> None:
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    feeds = {"x": x, "s": np.array([2, 8], np.int64)}
    out = run_ours(node_model("CenterCropPad", feeds), feeds)[0]
    expected = np.zeros((2, 8), np.float32)
    expected[:, 1:6] = x[1:3]
    np.testing.assert_array_equal(out, expected)
