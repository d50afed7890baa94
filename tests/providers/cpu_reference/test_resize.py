"""cpu_reference Resize/Upsample against onnxruntime, plus the NodeError paths."""

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
