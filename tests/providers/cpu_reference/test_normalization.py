"""cpu_reference Hardmax and the normalizations against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(2)
F32 = dict(rtol=1e-5, atol=1e-6)
F16 = dict(rtol=2e-3, atol=2e-3)


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("op", ["Hardmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, -1), (11, 0), (13, 1), (13, -1), (13, 0)])
def test_hardmax_axis_semantics_match_ort(op: str, opset: int, axis: int) -> None:
    feeds = {"x": _x(2, 3, 4)}
    assert_matches_ort(node_model(op, feeds, opset=opset, axis=axis), feeds, **F32)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_normalization_inference_matches_ort(shape: tuple[int, ...]) -> None:
    c = shape[1]
    feeds = {"x": _x(*shape), "s": _x(c), "b": _x(c), "m": _x(c),
             "v": np.abs(_x(c)) + 0.5}
    assert_matches_ort(node_model("BatchNormalization", feeds, opset=15, epsilon=1e-3),
                       feeds, **F32)


def test_batch_normalization_training_updates_running_statistics() -> None:
    x = _x(4, 3, 5)
    s, b, m, v = _x(3), _x(3), _x(3), np.abs(_x(3)) + 0.5
    feeds = {"x": x, "s": s, "b": b, "m": m, "v": v}
    y, rm, rv = run_ours(node_model("BatchNormalization", feeds, 3, opset=15,
                                    training_mode=1, momentum=0.8), feeds)
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    ref = s[:, None] * (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) + b[:, None]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rm, m * 0.8 + mean * 0.2, rtol=1e-6)
    np.testing.assert_allclose(rv, v * 0.8 + var * 0.2, rtol=1e-6)


def test_instance_normalization_matches_ort() -> None:
    feeds = {"x": _x(2, 3, 4, 5), "s": _x(3), "b": _x(3)}
    assert_matches_ort(node_model("InstanceNormalization", feeds, epsilon=1e-3), feeds, **F32)


def test_group_normalization_with_per_channel_scale_matches_ort() -> None:
    feeds = {"x": _x(2, 6, 4, 3), "s": _x(6), "b": _x(6)}
    assert_matches_ort(node_model("GroupNormalization", feeds, opset=21, num_groups=3),
                       feeds, **F32)


def test_group_normalization_before_opset_21_scales_per_group() -> None:
    x, s, b = _x(2, 4, 3), _x(2), _x(2)
    feeds = {"x": x, "s": s, "b": b}
    (y,) = run_ours(node_model("GroupNormalization", feeds, opset=18, num_groups=2), feeds)
    g = x.reshape(2, 2, -1)
    normed = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5))
    ref = normed * s[None, :, None] + b[None, :, None]
    np.testing.assert_allclose(y, ref.reshape(x.shape), rtol=1e-5, atol=1e-5)


def test_group_normalization_with_indivisible_groups_raises_node_error() -> None:
    feeds = {"x": _x(2, 6, 4), "s": _x(6), "b": _x(6)}
    with pytest.raises(NodeError, match="num_groups"):
        run_ours(node_model("GroupNormalization", feeds, opset=21, num_groups=4), feeds)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, -1])
def test_lp_normalization_matches_ort(p: int, axis: int) -> None:
    feeds = {"x": _x(3, 4)}
    assert_matches_ort(node_model("LpNormalization", feeds, axis=axis, p=p), feeds, **F32)


def test_lp_normalization_with_p_3_raises_node_error() -> None:
    feeds = {"x": _x(3, 4)}
    with pytest.raises(NodeError, match="p must be 1 or 2"):
        run_ours(node_model("LpNormalization", feeds, p=3), feeds)


@pytest.mark.parametrize("axes", [None, [2, 3], [1]])
def test_mean_variance_normalization_matches_ort(axes: list[int] | None) -> None:
    feeds = {"x": _x(2, 3, 4, 5)}
    attrs = {} if axes is None else {"axes": axes}
    assert_matches_ort(node_model("MeanVarianceNormalization", feeds, **attrs), feeds,
                       rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_matches_ort(size: int) -> None:
    feeds = {"x": _x(2, 5, 3, 3)}
    assert_matches_ort(node_model("LRN", feeds, size=size, alpha=0.01, beta=0.6, bias=1.5),
                       feeds, **F32)


def test_lrn_with_even_size_uses_spec_window() -> None:
    # onnxruntime accepts odd sizes only; the spec's window is [c - 1, c + 2] for size 4
    x = _x(1, 6, 2, 2)
    feeds = {"x": x}
    (y,) = run_ours(node_model("LRN", feeds, size=4, alpha=0.01, beta=0.6, bias=1.5), feeds)
    sq = np.pad(x.astype(np.float64) ** 2, [(0, 0), (1, 2), (0, 0), (0, 0)])
    square_sum = sum(sq[:, i:i + 6] for i in range(4))
    ref = x / (1.5 + 0.01 / 4 * square_sum) ** 0.6
    np.testing.assert_allclose(y, ref, rtol=1e-6)


def test_lrn_without_size_raises_node_error() -> None:
    feeds = {"x": _x(2, 5, 3, 3)}
    with pytest.raises(NodeError, match="size"):
        run_ours(node_model("LRN", feeds), feeds)
