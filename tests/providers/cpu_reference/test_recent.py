"""cpu_reference BitCast, CumProd, SwiGLU, TensorScatter, DeformConv, LinearAttention and
CausalConvWithState.

onnxruntime runs BitCast, CumProd, TensorScatter and DeformConv; SwiGLU (opset 28),
LinearAttention and CausalConvWithState (opset 27) are checked against numpy formulas
written here, against onnxruntime Conv for the causal convolution, and against
themselves run in pieces (state carried across calls).
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ort, run_ours

RNG = np.random.default_rng(11)
F32 = np.float32


def _ours(op: str, feeds: dict[str, np.ndarray], n_out: int = 1, *, opset: int,
          **attrs: object) -> list[np.ndarray]:
    """Run one ``op`` node on cpu_reference; a feed named ``""`` is a missing optional."""
    model = node_model(op, feeds, n_out, opset=opset, **attrs)
    return run_ours(model, {k: v for k, v in feeds.items() if k})


# ------------------------------------------------------------------ BitCast


@pytest.mark.parametrize("src,to", [
    (np.float32, TensorProto.INT32), (np.int32, TensorProto.FLOAT),
    (np.float64, TensorProto.INT64), (np.uint64, TensorProto.DOUBLE),
    (np.float16, TensorProto.INT16), (np.uint16, TensorProto.FLOAT16),
    (np.int8, TensorProto.UINT8), (np.uint32, TensorProto.FLOAT),
])
def test_bitcast_matches_ort(src: type, to: int) -> None:
    raw = RNG.integers(0, 256, size=(3, 4, 8), dtype=np.uint8)
    feeds = {"x": raw.view(src)}
    assert_matches_ort(node_model("BitCast", feeds, opset=26, to=to), feeds)


def test_bitcast_bool_to_uint8_gives_zeros_and_ones() -> None:
    # onnxruntime 1.32 has no bool BitCast kernel
    x = np.array([[True, False, True]])
    (y,) = _ours("BitCast", {"x": x}, opset=26, to=TensorProto.UINT8)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, [[1, 0, 1]])


def test_bitcast_keeps_0d_shape_and_bfloat16_bits() -> None:
    x = np.array(1.5, dtype=ml_dtypes.bfloat16)
    (y,) = _ours("BitCast", {"x": x}, opset=26, to=TensorProto.UINT16)
    assert y.shape == () and y.dtype == np.uint16
    assert int(y) == 0x3FC0


def test_bitcast_int4_to_uint4_reinterprets_the_nibble() -> None:
    x = np.array([-8, -1, 0, 7], dtype=ml_dtypes.int4)
    (y,) = _ours("BitCast", {"x": x}, opset=26, to=TensorProto.UINT4)
    assert y.dtype == np.dtype(ml_dtypes.uint4)
    np.testing.assert_array_equal(y.astype(np.int64), [8, 15, 0, 7])


@pytest.mark.parametrize("src,to", [(np.float32, TensorProto.INT64),
                                    (np.uint8, TensorProto.UINT4),
                                    (np.float32, TensorProto.STRING)])
def test_bitcast_between_different_widths_raises_node_error(src: type, to: int) -> None:
    with pytest.raises(NodeError, match="bits|string"):
        _ours("BitCast", {"x": np.zeros(3, src)}, opset=26, to=to)


# ------------------------------------------------------------------ CumProd


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("exclusive,reverse", list(itertools.product([0, 1], [0, 1])))
@pytest.mark.parametrize("axis", [0, -1])
def test_cumprod_matches_ort(dtype: type, exclusive: int, reverse: int, axis: int) -> None:
    x = RNG.uniform(0.5, 1.5, (3, 5)) if np.dtype(dtype).kind == "f" \
        else RNG.integers(-3, 4, (3, 5))
    feeds = {"x": x.astype(dtype), "axis": np.array(axis, np.int64)}
    model = node_model("CumProd", feeds, opset=26, exclusive=exclusive, reverse=reverse)
    assert_matches_ort(model, feeds, rtol=1e-6 if dtype == np.float32 else 0)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_cumprod_narrow_floats_accumulate_in_float32_and_round_once(dtype: type) -> None:
    x = RNG.uniform(0.9, 1.1, 64).astype(dtype)
    (y,) = _ours("CumProd", {"x": x, "axis": np.array(0, np.int32)}, opset=26)
    expected = np.cumprod(x.astype(F32), dtype=F32).astype(dtype)
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, expected)


def test_cumprod_int32_wraps_like_the_hardware() -> None:
    x = np.full(40, 3, np.int32)
    (y,) = _ours("CumProd", {"x": x, "axis": np.array(0, np.int64)}, opset=26)
    np.testing.assert_array_equal(y, np.cumprod(x, dtype=np.int32))


def test_cumprod_axis_out_of_range_raises_node_error() -> None:
    feeds = {"x": np.ones((2, 3), F32), "axis": np.array(2, np.int64)}
    with pytest.raises(NodeError, match="axis"):
        _ours("CumProd", feeds, opset=26)


# ------------------------------------------------------------------ SwiGLU


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swiglu_is_swish_gate_times_value(dtype: type, alpha: float) -> None:
    a = RNG.uniform(-8, 8, (4, 6)).astype(dtype)
    b = RNG.standard_normal((4, 6)).astype(dtype)
    (y,) = _ours("SwiGLU", {"a": a, "b": b}, opset=28, alpha=alpha)
    a64 = a.astype(np.float64)
    expected = (a64 / (1 + np.exp(-np.float32(alpha).astype(np.float64) * a64))
                * b.astype(np.float64)).astype(dtype)
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, expected, rtol=4 * np.finfo(dtype).eps, atol=0)


def test_swiglu_with_mismatched_shapes_raises_node_error() -> None:
    feeds = {"a": np.ones((2, 3), F32), "b": np.ones((1, 3), F32)}
    with pytest.raises(NodeError, match="same shape"):
        _ours("SwiGLU", feeds, opset=28)


# ------------------------------------------------------------------ TensorScatter


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, 2])
@pytest.mark.parametrize("with_indices", [True, False])
def test_tensor_scatter_matches_ort(mode: str, axis: int, with_indices: bool) -> None:
    shape = [3, 4, 6, 5]
    upd = list(shape)
    upd[axis] = 3
    feeds = {"past": RNG.standard_normal(shape).astype(F32),
             "update": RNG.standard_normal(upd).astype(F32)}
    if with_indices:
        hi = shape[axis] - 3 if mode == "linear" else 2 * shape[axis]
        feeds["idx"] = RNG.integers(0, hi + 1, size=3).astype(np.int64)
    model = node_model("TensorScatter", feeds, opset=24, mode=mode, axis=axis)
    assert_matches_ort(model, feeds)


def test_tensor_scatter_linear_write_past_the_end_raises_node_error() -> None:
    feeds = {"past": np.zeros((2, 4, 3), F32), "update": np.ones((2, 2, 3), F32),
             "idx": np.array([0, 3], np.int64)}
    with pytest.raises(NodeError, match="linear mode"):
        _ours("TensorScatter", feeds, opset=24, axis=1)


def test_tensor_scatter_on_batch_axis_raises_node_error() -> None:
    feeds = {"past": np.zeros((2, 4), F32), "update": np.ones((1, 4), F32)}
    with pytest.raises(NodeError, match="batch"):
        _ours("TensorScatter", feeds, opset=24, axis=0)


# ------------------------------------------------------------------ DeformConv


@pytest.mark.parametrize("case", [
    dict(),
    dict(strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2]),
    dict(group=2, offset_group=2),
    dict(group=1, offset_group=4, pads=[1, 1, 1, 1]),
])
@pytest.mark.parametrize("with_mask_bias", [True, False])
def test_deform_conv_2d_matches_ort(case: dict, with_mask_bias: bool) -> None:
    n, c, m, hw, k = 2, 4, 6, (6, 7), (3, 2)
    x = RNG.standard_normal((n, c) + hw).astype(F32)
    w = RNG.standard_normal((m, c // case.get("group", 1)) + k).astype(F32)
    s, p, d = case.get("strides", [1, 1]), case.get("pads", [0] * 4), case.get("dilations", [1, 1])
    out = tuple((hw[i] + p[i] + p[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2))
    og = case.get("offset_group", 1)
    # offsets reach outside the image so zero padding of samples is exercised
    feeds = {"x": x, "w": w,
             "off": RNG.uniform(-2.5, 2.5, (n, og * 6 * 2) + out).astype(F32)}
    if with_mask_bias:
        feeds["b"] = RNG.standard_normal(m).astype(F32)
        feeds["mask"] = RNG.uniform(0, 1, (n, og * 6) + out).astype(F32)
    model = node_model("DeformConv", feeds, opset=22, **case)
    assert_matches_ort(model, feeds, rtol=1e-4, atol=1e-5)


def _deform_conv_1d_loops(x: np.ndarray, w: np.ndarray, off: np.ndarray,
                          stride: int, pad: int, dil: int) -> np.ndarray:
    n, c, length = x.shape
    m, _, k = w.shape
    out = off.shape[-1]
    y = np.zeros((n, m, out))
    for b, o, j, oc in itertools.product(range(n), range(out), range(k), range(m)):
        p = -pad + o * stride + j * dil + off[b, j, o]
        lo = int(np.floor(p))
        t = p - lo
        sample = sum(wt * x[b, :, i] for i, wt in ((lo, 1 - t), (lo + 1, t)) if 0 <= i < length)
        y[b, oc, o] += np.dot(w[oc, :, j], sample) if np.ndim(sample) else 0.0
    return y


def test_deform_conv_1d_matches_a_loop_formula() -> None:
    x = RNG.standard_normal((2, 3, 9))
    w = RNG.standard_normal((4, 3, 3))
    off = RNG.uniform(-3, 3, (2, 3, 4))  # (9 + 2 - 5) // 2 + 1 outputs
    (y,) = _ours("DeformConv", {"x": x, "w": w, "off": off}, opset=22,
                 strides=[2], pads=[1, 1], dilations=[2])
    np.testing.assert_allclose(y, _deform_conv_1d_loops(x, w, off, 2, 1, 2), rtol=1e-12,
                               atol=1e-12)


def test_deform_conv_with_zero_offsets_is_conv() -> None:
    feeds = {"x": RNG.standard_normal((1, 2, 4, 3, 5)).astype(F32),
             "w": RNG.standard_normal((3, 2, 2, 2, 3)).astype(F32)}
    (conv,) = run_ort(node_model("Conv", feeds, pads=[1, 0, 1, 0, 1, 1]), feeds)
    off = np.zeros((1, 2 * 2 * 3 * 3) + conv.shape[2:], F32)
    (y,) = _ours("DeformConv", {**feeds, "off": off}, opset=22, pads=[1, 0, 1, 0, 1, 1])
    np.testing.assert_allclose(y, conv, rtol=1e-5, atol=1e-5)


def test_deform_conv_with_wrong_offset_shape_raises_node_error() -> None:
    feeds = {"x": np.zeros((1, 2, 4, 4), F32), "w": np.zeros((1, 2, 2, 2), F32),
             "off": np.zeros((1, 6, 3, 3), F32)}
    with pytest.raises(NodeError, match="offset has shape"):
        _ours("DeformConv", feeds, opset=22)


# ------------------------------------------------------------------ LinearAttention


def _linear_attention_loops(q, k, v, state, decay, beta, hq, hkv, rule, scale):
    """Per batch, per query head, per token: the spec's recurrence written out."""
    bsz, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    out = np.zeros((bsz, t, hq * dv))
    state = state.astype(np.float64).copy()
    for b, hk in itertools.product(range(bsz), range(hkv)):
        s = state[b, hk]
        for i in range(t):
            kt, vt = k[b, i, hk * dk:(hk + 1) * dk], v[b, i, hk * dv:(hk + 1) * dv]
            if rule in ("gated", "gated_delta"):
                g = decay[b, i, hk] if decay.shape[2] == hkv else decay[b, i, hk * dk:(hk + 1) * dk]
                s = np.exp(g).reshape(-1, 1) * s
            if rule in ("delta", "gated_delta"):
                bt = beta[b, i, hk if beta.shape[2] == hkv else 0]
                vt = bt * (vt - s.T @ kt)
            s = s + np.outer(kt, vt)
            for hqi in range(hk * (hq // hkv), (hk + 1) * (hq // hkv)):
                out[b, i, hqi * dv:(hqi + 1) * dv] = scale * q[b, i, hqi * dk:(hqi + 1) * dk] @ s
        state[b, hk] = s
    return out, state


@pytest.mark.parametrize("rule,hq,hkv,per_key_decay,beta_heads", [
    ("linear", 2, 2, False, 0), ("gated", 4, 2, True, 0), ("gated", 2, 2, False, 0),
    ("delta", 2, 1, False, 1), ("gated_delta", 4, 2, False, 2), ("gated_delta", 3, 3, True, 1),
])
def test_linear_attention_matches_the_recurrence(rule: str, hq: int, hkv: int,
                                                 per_key_decay: bool, beta_heads: int) -> None:
    bsz, t, dk, dv = 2, 5, 4, 3
    feeds = {"q": RNG.standard_normal((bsz, t, hq * dk)).astype(F32),
             "k": RNG.standard_normal((bsz, t, hkv * dk)).astype(F32) / 2,
             "v": RNG.standard_normal((bsz, t, hkv * dv)).astype(F32),
             "past": RNG.standard_normal((bsz, hkv, dk, dv)).astype(F32)}
    decay = RNG.uniform(-1, 0, (bsz, t, hkv * dk if per_key_decay else hkv)).astype(F32)
    beta = RNG.uniform(0, 1, (bsz, t, max(beta_heads, 1))).astype(F32)
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    # a missing optional input keeps its slot as "" only when a later input is present
    if gated or delta:
        feeds["decay" if gated else ""] = decay
    if delta:
        feeds["beta"] = beta
    model = node_model("LinearAttention", feeds, 2, opset=27,
                       q_num_heads=hq, kv_num_heads=hkv, update_rule=rule)
    feeds.pop("", None)
    y, present = run_ours(model, feeds)
    ey, es = _linear_attention_loops(feeds["q"], feeds["k"], feeds["v"], feeds["past"],
                                     decay, beta, hq, hkv, rule, 1 / np.sqrt(dk))
    assert y.dtype == F32 and present.dtype == F32
    np.testing.assert_allclose(y, ey, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(present, es, rtol=1e-4, atol=1e-5)


def test_linear_attention_prefill_in_two_calls_equals_one_call() -> None:
    bsz, t, h, dk, dv = 1, 6, 2, 4, 4
    q, k, v = (RNG.standard_normal((bsz, t, h * d)).astype(F32) for d in (dk, dk, dv))
    decay = RNG.uniform(-1, 0, (bsz, t, h)).astype(F32)
    beta = RNG.uniform(0, 1, (bsz, t, h)).astype(F32)
    attrs = dict(q_num_heads=h, kv_num_heads=h, scale=0.5)

    def call(sl: slice, past: np.ndarray | None) -> list[np.ndarray]:
        feeds = {"q": q[:, sl], "k": k[:, sl], "v": v[:, sl],
                 "past": np.zeros((bsz, h, dk, dv), F32) if past is None else past,
                 "decay": decay[:, sl], "beta": beta[:, sl]}
        return _ours("LinearAttention", feeds, 2, opset=27, **attrs)

    y_all, s_all = call(slice(None), None)
    y1, s1 = call(slice(0, 4), None)
    y2, s2 = call(slice(4, None), s1)
    np.testing.assert_allclose(np.concatenate([y1, y2], axis=1), y_all, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s2, s_all, rtol=1e-6, atol=1e-6)


def test_linear_attention_float16_returns_float16() -> None:
    feeds = {"q": np.ones((1, 2, 4), np.float16), "k": np.ones((1, 2, 4), np.float16),
             "v": np.ones((1, 2, 4), np.float16)}
    y, s = _ours("LinearAttention", feeds, 2, opset=27, q_num_heads=1, kv_num_heads=1,
                 update_rule="linear")
    assert y.dtype == s.dtype == np.float16
    np.testing.assert_array_equal(y[0, 1], np.full(4, 4.0, np.float16))  # 0.5 * 4 * 2


@pytest.mark.parametrize("attrs,match", [
    (dict(q_num_heads=3, kv_num_heads=2, update_rule="linear"), "multiple"),
    (dict(q_num_heads=2, kv_num_heads=2, update_rule="gated"), "requires the 'decay'"),
    (dict(q_num_heads=2, kv_num_heads=2, update_rule="fast"), "update_rule"),
])
def test_linear_attention_bad_attributes_raise_node_error(attrs: dict, match: str) -> None:
    feeds = {"q": np.ones((1, 2, 12), F32), "k": np.ones((1, 2, 12), F32),
             "v": np.ones((1, 2, 12), F32)}
    with pytest.raises(NodeError, match=match):
        _ours("LinearAttention", feeds, 2, opset=27, **attrs)


# ------------------------------------------------------------------ CausalConvWithState


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("with_past,with_bias", [(False, False), (True, True)])
def test_causal_conv_with_state_is_depthwise_conv_over_the_concatenation(
        k: int, with_past: bool, with_bias: bool) -> None:
    bsz, c, length = 2, 3, 6
    x = RNG.standard_normal((bsz, c, length)).astype(F32)
    w = RNG.standard_normal((c, 1, k)).astype(F32)
    past = RNG.standard_normal((bsz, c, k - 1)).astype(F32) if with_past else None
    bias = RNG.standard_normal(c).astype(F32) if with_bias else None
    feeds = {"x": x, "w": w}
    if with_bias:
        feeds["b"] = bias
    if with_past:
        feeds["past"] = past
    y, present = _ours("CausalConvWithState", feeds, 2, opset=27)
    padded = np.concatenate([past if with_past else np.zeros((bsz, c, k - 1), F32), x], 2)
    conv_feeds = {"p": padded, "w": w} | ({"b": bias} if with_bias else {})
    (expected,) = run_ort(node_model("Conv", conv_feeds, group=c), conv_feeds)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(present, padded[:, :, length:])
    assert present.shape == (bsz, c, k - 1)


def test_causal_conv_with_state_silu_streamed_token_by_token_equals_one_call() -> None:
    bsz, c, length, k = 1, 4, 5, 3
    x = RNG.standard_normal((bsz, c, length)).astype(F32)
    w = RNG.standard_normal((c, 1, k)).astype(F32)
    y_all, s_all = _ours("CausalConvWithState", {"x": x, "w": w}, 2, opset=27,
                         activation="silu")
    state = np.zeros((bsz, c, k - 1), F32)
    steps = []
    for i in range(length):
        yi, state = _ours("CausalConvWithState", {"x": x[:, :, i:i + 1], "w": w, "": None,
                                                  "past": state}, 2, opset=27,
                          activation="swish")
        steps.append(yi)
    np.testing.assert_allclose(np.concatenate(steps, axis=2), y_all, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(state, s_all)
    conv = np.einsum("bclk,ck->bcl", np.lib.stride_tricks.sliding_window_view(
        np.concatenate([np.zeros((bsz, c, k - 1), F32), x], 2).astype(np.float64), k, axis=2),
        w[:, 0].astype(np.float64))
    np.testing.assert_allclose(y_all, conv / (1 + np.exp(-conv)), rtol=1e-5, atol=1e-6)


def test_causal_conv_with_state_wrong_past_shape_raises_node_error() -> None:
    feeds = {"x": np.ones((1, 2, 3), F32), "w": np.ones((2, 1, 3), F32), "": None,
             "past": np.ones((1, 2, 3), F32)}
    with pytest.raises(NodeError, match="past_state"):
        _ours("CausalConvWithState", feeds, 2, opset=27)
