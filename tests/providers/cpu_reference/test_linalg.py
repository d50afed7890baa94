"""Det against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_det_matches_ort(shape: tuple[int, ...]) -> None:
    feeds = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    assert_matches_ort(node_model("Det", feeds, opset=11), feeds, rtol=1e-5, atol=1e-6)


def test_det_rejects_non_square_matrices() -> None:
    feeds = {"x": np.zeros((2, 3), np.float32)}
    with pytest.raises(NodeError, match="M, M"):
        run_ours(node_model("Det", feeds, opset=11), feeds)
