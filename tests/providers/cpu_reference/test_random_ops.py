"""Random generators: shapes, dtypes, ranges and seeded determinism (values are not oracled)."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import node_model, run_ours


def test_seeded_random_uniform_is_deterministic_and_in_range() -> None:
    model = node_model("RandomUniform", {}, opset=21, shape=[3, 4], low=-2.0, high=5.0,
                       seed=1.5, dtype=11)
    a, b = run_ours(model, {})[0], run_ours(model, {})[0]
    assert a.dtype == np.float64 and a.shape == (3, 4)
    np.testing.assert_array_equal(a, b)
    assert (a >= -2).all() and (a < 5).all()


def test_random_normal_like_takes_shape_and_dtype_from_its_input() -> None:
    feeds = {"x": np.zeros((2, 5), np.float16)}
    out = run_ours(node_model("RandomNormalLike", feeds, opset=21, seed=3.0), feeds)[0]
    assert out.dtype == np.float16 and out.shape == (2, 5)


def test_bernoulli_is_zero_or_one_and_respects_certain_probabilities() -> None:
    feeds = {"p": np.array([0.0, 1.0, 0.5, 0.0, 1.0], np.float32)}
    out = run_ours(node_model("Bernoulli", feeds, opset=21, seed=7.0, dtype=7), feeds)[0]
    assert out.dtype == np.int64
    assert out[[0, 3]].tolist() == [0, 0] and out[[1, 4]].tolist() == [1, 1]


def test_bernoulli_rejects_probabilities_outside_unit_interval() -> None:
    feeds = {"p": np.array([1.5], np.float32)}
    with pytest.raises(NodeError, match=r"\[0, 1\]"):
        run_ours(node_model("Bernoulli", feeds, opset=21), feeds)
