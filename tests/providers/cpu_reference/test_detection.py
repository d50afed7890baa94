"""NonMaxSuppression and RoiAlign against onnxruntime, plus NodeError paths."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(4)


def _boxes(batch: int, n: int) -> np.ndarray:
    lo = RNG.random((batch, n, 2)) * 10
    return np.concatenate([lo, lo + RNG.random((batch, n, 2)) * 5 + 0.1], -1).astype(np.float32)


@pytest.mark.parametrize("center, score_thr", [(0, None), (1, 0.3)])
def test_non_max_suppression_matches_ort(center: int, score_thr: float | None) -> None:
    feeds = {"boxes": _boxes(2, 12), "scores": RNG.random((2, 3, 12)).astype(np.float32),
             "max": np.array(4, np.int64), "iou": np.array(0.4, np.float32)}
    if score_thr is not None:
        feeds["score"] = np.array(score_thr, np.float32)
    model = node_model("NonMaxSuppression", feeds, opset=11, center_point_box=center)
    assert_matches_ort(model, feeds)


def test_non_max_suppression_rejects_mismatched_scores() -> None:
    feeds = {"boxes": _boxes(1, 4), "scores": np.zeros((1, 1, 5), np.float32)}
    with pytest.raises(NodeError, match="boxes must be"):
        run_ours(node_model("NonMaxSuppression", feeds, opset=11), feeds)


@pytest.mark.parametrize("mode, ratio, ctm", [("avg", 2, "half_pixel"),
                                              ("avg", 0, "output_half_pixel"),
                                              ("max", 2, "half_pixel")])
def test_roi_align_matches_ort(mode: str, ratio: int, ctm: str) -> None:
    feeds = {"x": RNG.standard_normal((2, 3, 10, 12)).astype(np.float32),
             "rois": np.array([[0, 0, 9, 9], [1.5, 2.2, 8.1, 6.3], [-2, -1, 4, 15]],
                              np.float32),
             "idx": np.array([0, 1, 1], np.int64)}
    model = node_model("RoiAlign", feeds, opset=16, mode=mode, sampling_ratio=ratio,
                       output_height=3, output_width=4, spatial_scale=0.8,
                       coordinate_transformation_mode=ctm)
    assert_matches_ort(model, feeds, rtol=1e-5, atol=1e-5)


def test_roi_align_rejects_batch_index_out_of_range() -> None:
    feeds = {"x": np.zeros((1, 1, 4, 4), np.float32), "rois": np.zeros((1, 4), np.float32),
             "idx": np.array([1], np.int64)}
    with pytest.raises(NodeError, match="batch_indices"):
        run_ours(node_model("RoiAlign", feeds, opset=16), feeds)
