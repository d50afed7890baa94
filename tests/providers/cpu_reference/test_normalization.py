"""cpu_reference Hardmax and the normalizations (onnxruntime's RMS normalizations included)
against onnxruntime."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import helper as onnx_helper

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, ort_version, run_ours

RNG = np.random.default_rng(2)
BF16 = np.dtype(ml_dtypes.bfloat16)
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


def test_lrn_without_size_is_refused_at_load() -> None:
    """``size`` is required by LRN's schema: the model is invalid, as onnxruntime says."""
    from onnx_ep.errors import ModelError

    feeds = {"x": _x(2, 5, 3, 3)}
    with pytest.raises(ModelError, match="requires attribute 'size'"):
        run_ours(node_model("LRN", feeds), feeds)


# ---------------------------------------------------------------- onnxruntime's RMS norms
# SimplifiedLayerNormalization (default domain) and com.microsoft::SkipSimplifiedLayerNormalization.
# The reference computes in float64 and rounds once; onnxruntime sums squares in float32, so
# comparisons take the normalization bound (float16: a few of its ulps).

RMS = dict(rtol=1e-4, atol=1e-5)
RMS_F16 = dict(rtol=2e-3, atol=2e-3)
MS = "com.microsoft"


def _rms_tol(dtype: type) -> dict[str, float]:
    return RMS_F16 if np.dtype(dtype) == np.float16 else RMS


#: the onnxruntime these contrib ops were checked against; 1.23 refuses scale broadcasts
#: over several axes and returns no ``mean`` of SkipSimplifiedLayerNormalization
ORT_RMS = (1, 32)


def _needs_ort() -> None:
    pytest.importorskip("onnxruntime")
    if ort_version() < ORT_RMS:
        pytest.skip(f"onnxruntime {'.'.join(map(str, ort_version()))} predates the RMS-norm "
                    f"contrib-op behaviour the reference follows (checked against 1.32)")


def _rms64(v: np.ndarray, axes: tuple[int, ...], eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Independent float64 formula: (v / rms, 1 / rms) with rms = sqrt(mean(v^2) + eps)."""
    v = v.astype(np.float64)
    inv = 1.0 / np.sqrt(np.mean(v * v, axis=axes, keepdims=True) + eps)
    return v * inv, inv


def _with_outputs(model, outputs: list[str]):
    """``model`` whose node writes ``outputs`` ("" skips an optional one); the graph
    returns the named ones."""
    node = model.graph.node[0]
    del node.output[:]
    node.output.extend(outputs)
    del model.graph.output[:]
    model.graph.output.extend(onnx_helper.make_empty_tensor_value_info(o) for o in outputs if o)
    return model


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("shape,axis,scale_shape", [
    ((2, 3, 8), -1, (8,)), ((4, 896), -1, (896,)), ((2, 3, 8), 1, (3, 8)),
    ((2, 3, 8), 1, (8,)), ((2, 3, 8), 1, (3, 1)), ((2, 3, 8), -2, (1, 3, 8)),
    ((2, 3, 8), 0, (2, 3, 8)), ((2, 3, 8), -1, (2, 3, 8)), ((5,), 0, (5,)), ((0, 8), -1, (8,)),
])
@pytest.mark.parametrize("n_out", [1, 2])
def test_simplified_layer_normalization_matches_ort(dtype, shape, axis, scale_shape, n_out):
    _needs_ort()
    feeds = {"x": _x(*shape, dtype=dtype), "s": _x(*scale_shape, dtype=dtype)}
    assert_matches_ort(node_model("SimplifiedLayerNormalization", feeds, n_out, axis=axis),
                       feeds, **_rms_tol(dtype))


@pytest.mark.parametrize("seed", range(8))
def test_simplified_layer_normalization_on_random_shapes_matches_ort(seed):
    _needs_ort()
    rng = np.random.default_rng(100 + seed)
    rank = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(1, 7, size=rank))
    axis = int(rng.integers(-rank, rank))
    norm = shape[axis:]
    scale_shape = norm[int(rng.integers(0, len(norm))):]       # a suffix broadcasts too
    dtype = [np.float32, np.float16][seed % 2]
    feeds = {"x": (rng.standard_normal(shape) * 3).astype(dtype),
             "s": rng.standard_normal(scale_shape).astype(dtype)}
    assert_matches_ort(node_model("SimplifiedLayerNormalization", feeds, 2, axis=axis,
                                  epsilon=1e-4), feeds, **_rms_tol(dtype))


@pytest.mark.parametrize("x_dtype,s_dtype", [(np.float32, np.float16), (np.float16, np.float32)])
def test_simplified_layer_normalization_output_takes_the_scale_type(x_dtype, s_dtype):
    _needs_ort()
    feeds = {"x": _x(3, 40, dtype=x_dtype), "s": _x(40, dtype=s_dtype)}
    y, inv = assert_matches_ort(node_model("SimplifiedLayerNormalization", feeds, 2), feeds,
                                **RMS_F16)
    assert y.dtype == s_dtype and inv.dtype == np.float32


def test_simplified_layer_normalization_epsilon_on_a_zero_row_matches_ort():
    _needs_ort()
    x = _x(3, 16)
    x[1] = 0.0
    feeds = {"x": x, "s": _x(16)}
    y, inv = assert_matches_ort(node_model("SimplifiedLayerNormalization", feeds, 2,
                                           epsilon=1e-3), feeds, **RMS)
    assert not y[1].any()
    np.testing.assert_allclose(inv[1], 1 / np.sqrt(np.float32(1e-3)), rtol=1e-6)


def test_simplified_layer_normalization_bfloat16_matches_float64_formula():
    # onnxruntime's Python API cannot feed bfloat16: an independent formula instead
    x = _x(4, 3, 64).astype(BF16)
    s = _x(3, 64).astype(BF16)
    y, inv = run_ours(node_model("SimplifiedLayerNormalization", {"x": x, "s": s}, 2, axis=1),
                      {"x": x, "s": s})
    normed, inv64 = _rms64(x, (1, 2), 1e-5)
    assert y.dtype == BF16 and inv.dtype == np.float32 and inv.shape == (4, 1, 1)
    np.testing.assert_array_equal(y, (normed * s.astype(np.float64)).astype(BF16))
    np.testing.assert_allclose(inv, inv64, rtol=1e-6)


def test_simplified_layer_normalization_stash_type_double_gives_float64_statistics():
    x, s = _x(5, 24), _x(24)
    y, inv = run_ours(node_model("SimplifiedLayerNormalization", {"x": x, "s": s}, 2,
                                 stash_type=11), {"x": x, "s": s})
    normed, inv64 = _rms64(x, (1,), 1e-5)
    assert y.dtype == np.float32 and inv.dtype == np.float64
    np.testing.assert_allclose(inv, inv64, rtol=1e-12)
    np.testing.assert_allclose(y, normed * s, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("scale_shape,attrs,match", [
    ((8,), {"stash_type": 10}, "stash_type"),
    ((5,), {}, "does not broadcast"),
    ((2, 2, 3, 8), {}, "does not broadcast"),
    ((8,), {"axis": 3}, "out of range"),
])
def test_simplified_layer_normalization_rejects_bad_nodes(scale_shape, attrs, match):
    feeds = {"x": _x(2, 3, 8), "s": _x(*scale_shape)}
    with pytest.raises(NodeError, match=match):
        run_ours(node_model("SimplifiedLayerNormalization", feeds, **attrs), feeds)


def _skip_feeds(shape, skip_shape, dtype, bias: bool) -> dict[str, np.ndarray]:
    hidden = shape[-1]
    feeds = {"x": _x(*shape, dtype=dtype), "skip": _x(*skip_shape, dtype=dtype),
             "gamma": _x(hidden, dtype=dtype)}
    if bias:
        feeds["bias"] = _x(hidden, dtype=dtype)
    return feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("shape,skip_shape", [
    ((2, 3, 16), (2, 3, 16)), ((2, 3, 16), (3, 16)), ((2, 3, 16), (1, 3, 16)),
    ((5, 896), (5, 896)), ((1, 1, 4864), (1, 4864)),
])
def test_skip_simplified_layer_normalization_matches_ort(dtype, bias, shape, skip_shape):
    _needs_ort()
    feeds = _skip_feeds(shape, skip_shape, dtype, bias)
    m = node_model("SkipSimplifiedLayerNormalization", feeds, 4, domain=MS, epsilon=1e-6)
    y, mean, inv, s = assert_matches_ort(m, feeds, **_rms_tol(dtype))
    assert mean.shape == inv.shape == shape[:-1] + (1,) and not mean.any()
    exact = feeds["x"].astype(np.float64) + feeds["skip"]
    if bias:
        exact = exact + feeds["bias"]
    np.testing.assert_array_equal(s, exact.astype(dtype))        # rounded once


@pytest.mark.parametrize("outputs", [["y"], ["y", "", "", "sum"], ["y", "", "inv"],
                                     ["y", "mean"]])
def test_skip_simplified_layer_normalization_optional_outputs_match_ort(outputs):
    _needs_ort()
    feeds = _skip_feeds((3, 4, 32), (4, 32), np.float32, bias=True)
    m = _with_outputs(node_model("SkipSimplifiedLayerNormalization", feeds, 1, domain=MS),
                      outputs)
    assert len(assert_matches_ort(m, feeds, **RMS)) == len([o for o in outputs if o])


def test_skip_simplified_layer_normalization_default_epsilon_is_1e_12():
    _needs_ort()
    x = np.full((1, 2, 4), 1e-7, np.float32)
    feeds = {"x": x, "skip": x, "gamma": np.ones(4, np.float32)}
    m = _with_outputs(node_model("SkipSimplifiedLayerNormalization", feeds, 1, domain=MS),
                      ["y", "", "inv"])
    _, inv = assert_matches_ort(m, feeds, **RMS)
    np.testing.assert_allclose(inv, 1 / np.sqrt(4e-14 + 1e-12), rtol=1e-6)


def test_skip_simplified_layer_normalization_bfloat16_and_rank_4_match_float64_formula():
    feeds = {k: v.astype(BF16) for k, v in _skip_feeds((2, 2, 3, 48), (3, 48), np.float32,
                                                        bias=True).items()}
    y, mean, inv, s = run_ours(node_model("SkipSimplifiedLayerNormalization", feeds, 4,
                                          domain=MS), feeds)
    exact = (feeds["x"].astype(np.float64) + feeds["skip"].astype(np.float64)
             + feeds["bias"].astype(np.float64))
    normed, inv64 = _rms64(exact, (3,), 1e-12)
    assert (y.dtype, mean.dtype, inv.dtype, s.dtype) == (BF16, np.float32, np.float32, BF16)
    np.testing.assert_array_equal(y, (normed * feeds["gamma"].astype(np.float64)).astype(BF16))
    np.testing.assert_array_equal(s, exact.astype(BF16))
    np.testing.assert_allclose(inv, inv64, rtol=1e-6)


@pytest.mark.parametrize("name,shape,dtype,match", [
    ("skip", (2, 1, 16), np.float32, "skip of shape"),
    ("skip", (16,), np.float32, "skip of shape"),
    ("gamma", (1, 16), np.float32, "gamma must have shape"),
    ("bias", (8,), np.float32, "bias must have shape"),
    ("skip", (2, 3, 16), np.float16, "must match"),
])
def test_skip_simplified_layer_normalization_rejects_bad_inputs(name, shape, dtype, match):
    feeds = _skip_feeds((2, 3, 16), (2, 3, 16), np.float32, bias=True)
    feeds[name] = _x(*shape, dtype=dtype)
    with pytest.raises(NodeError, match=match):
        run_ours(node_model("SkipSimplifiedLayerNormalization", feeds, domain=MS), feeds)
