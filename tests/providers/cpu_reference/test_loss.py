"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(8)


def _feeds(weight: bool, spatial: bool) -> dict[str, np.ndarray]:
    shape = (3, 5, 2, 4) if spatial else (6, 5)
    x = RNG.standard_normal(shape).astype(np.float32)
    t = RNG.integers(0, 5, (shape[0],) + shape[2:]).astype(np.int64)
    t.flat[0] = -1                               # an ignored target
    feeds = {"x": x, "t": t}
    if weight:
        feeds["w"] = RNG.random(5).astype(np.float32)
    return feeds


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weight, spatial", [(False, False), (True, True)])
def test_loss_matches_ort(op: str, reduction: str, weight: bool, spatial: bool) -> None:
    feeds = _feeds(weight, spatial)
    n_out = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    model = node_model(op, feeds, n_out, opset=13, reduction=reduction, ignore_index=-1)
    assert_matches_ort(model, feeds, rtol=1e-5, atol=1e-6)


def test_nll_rejects_target_out_of_range() -> None:
    feeds = {"x": np.zeros((2, 3), np.float32), "t": np.array([0, 3], np.int64)}
    with pytest.raises(NodeError, match="target values"):
        run_ours(node_model("NegativeLogLikelihoodLoss", feeds, opset=13), feeds)
