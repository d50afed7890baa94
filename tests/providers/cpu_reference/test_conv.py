"""cpu_reference Conv and ConvTranspose against onnxruntime, and Conv's planned workspace;
DeformConv against onnxruntime and a loop formula; CausalConvWithState against
onnxruntime Conv and against itself run token by token."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec, WorkspaceView
from onnx_ep.errors import NodeError, WorkspaceTooSmall
from onnx_ep.providers.cpu_reference.conv import Conv
from tests.helpers.oracle import assert_matches_ort, node_model, run_ort, run_ours

RNG = np.random.default_rng(5)
F32 = dict(rtol=1e-4, atol=1e-5)


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


CONV_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((2, 3, 7, 6), (4, 3, 3, 3), {}),
    ((1, 4, 7, 6), (6, 2, 3, 2), dict(group=2, strides=[2, 1], pads=[1, 0, 2, 1])),
    ((1, 4, 8, 8), (4, 1, 3, 3), dict(group=4, dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 3, 7, 7), (2, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 3, 6, 7), (2, 3, 2, 2), dict(auto_pad="SAME_LOWER")),
    ((1, 3, 6, 7), (2, 3, 2, 3), dict(strides=[2, 2], auto_pad="VALID")),
    ((2, 2, 9), (3, 2, 3), dict(strides=[2], pads=[1, 1])),
    ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(pads=[0, 1, 0, 1, 0, 1])),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
def test_conv_matches_ort(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                          attrs: dict[str, Any], with_bias: bool) -> None:
    feeds = {"x": _x(*x_shape), "w": _x(*w_shape)}
    if with_bias:
        feeds["b"] = _x(w_shape[0])
    assert_matches_ort(node_model("Conv", feeds, **attrs), feeds, **F32)


def test_conv_of_float16_accumulates_wide() -> None:
    feeds = {"x": _x(1, 8, 6, 6, dtype=np.float16), "w": _x(4, 8, 3, 3, dtype=np.float16)}
    assert_matches_ort(node_model("Conv", feeds, pads=[1, 1, 1, 1]), feeds,
                       rtol=5e-3, atol=5e-3)


def test_conv_with_group_not_dividing_channels_raises_node_error() -> None:
    feeds = {"x": _x(1, 3, 5, 5), "w": _x(3, 1, 3, 3)}
    with pytest.raises(NodeError, match="group"):
        run_ours(node_model("Conv", feeds, group=2), feeds)


def test_conv_with_mismatched_weight_channels_raises_node_error() -> None:
    feeds = {"x": _x(1, 3, 5, 5), "w": _x(2, 2, 3, 3)}
    with pytest.raises(NodeError, match="does not fit"):
        run_ours(node_model("Conv", feeds), feeds)


def _conv_meta(x: np.ndarray, w: np.ndarray, static: bool = True, **attrs: Any) -> NodeMeta:
    xs = x.shape if static else ("N",) + x.shape[1:]
    return NodeMeta(name="c", op_type="Conv", domain="", opset=17, attrs=attrs,
                    inputs=(TensorSpec(x.dtype, xs), TensorSpec(w.dtype, w.shape)),
                    input_names=("x", "w"), output_names=("y",))


@pytest.mark.parametrize("dtype,itemsize", [(np.float32, 4), (np.float16, 4), (np.float64, 8)])
def test_conv_workspace_is_padded_input_plus_im2col_matrix(dtype: type, itemsize: int) -> None:
    x, w = _x(2, 4, 5, 6, dtype=dtype), _x(6, 2, 3, 2, dtype=dtype)
    meta = _conv_meta(x, w, group=2, pads=[1, 0, 1, 0], strides=[1, 2])
    req = Conv("Conv").workspace_requirement(meta)
    padded = 2 * 4 * 7 * 6
    cols = 2 * 2 * (2 * 3 * 2) * (5 * 3)
    assert req.nbytes == (padded + cols) * itemsize


def test_conv_with_planned_workspace_equals_conv_without() -> None:
    x, w = _x(2, 4, 5, 6), _x(6, 2, 3, 2)
    attrs = dict(group=2, pads=[1, 0, 1, 0], strides=[1, 2])
    meta = _conv_meta(x, w, **attrs)
    kernel = Conv("Conv")
    nbytes = kernel.workspace_requirement(meta).nbytes
    ws = WorkspaceView(np.full(nbytes, 0xAB, np.uint8), nbytes)
    with_ws: list[Any] = [None]
    without: list[Any] = [None]
    kernel.execute_with_workspace(ExecutionContext(meta), [x, w, None], with_ws, ws)
    kernel.execute_with_workspace(ExecutionContext(meta), [x, w, None], without, None)
    np.testing.assert_array_equal(with_ws[0], without[0])
    assert not np.shares_memory(with_ws[0], ws.buffer)


def test_conv_with_too_small_workspace_raises() -> None:
    x, w = _x(1, 2, 4, 4), _x(2, 2, 3, 3)
    meta = _conv_meta(x, w)
    nbytes = Conv("Conv").workspace_requirement(meta).nbytes - 4
    ws = WorkspaceView(np.zeros(nbytes, np.uint8), nbytes)
    with pytest.raises(WorkspaceTooSmall):
        Conv("Conv").execute_with_workspace(ExecutionContext(meta), [x, w, None], [None], ws)


def test_conv_with_symbolic_shapes_needs_no_planned_workspace() -> None:
    x, w = _x(1, 2, 4, 4), _x(2, 2, 3, 3)
    assert Conv("Conv").workspace_requirement(_conv_meta(x, w, static=False)).nbytes == 0


TRANSPOSE_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((1, 2, 3, 4), (2, 3, 3, 3), {}),
    ((2, 2, 4, 3), (2, 2, 3, 2), dict(strides=[2, 3], pads=[1, 0, 1, 1])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], output_padding=[1, 0])),
    ((1, 4, 3, 3), (4, 1, 2, 2), dict(group=2, dilations=[2, 1])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], output_shape=[8, 7])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 3, 3), (2, 2, 2, 2), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((2, 2, 5), (2, 3, 3), dict(strides=[2])),
    ((1, 1, 2, 3, 2), (1, 2, 2, 2, 2), dict(strides=[1, 2, 1])),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("x_shape,w_shape,attrs", TRANSPOSE_CASES)
def test_conv_transpose_matches_ort(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                                    attrs: dict[str, Any], with_bias: bool) -> None:
    feeds = {"x": _x(*x_shape), "w": _x(*w_shape)}
    if with_bias:
        feeds["b"] = _x(w_shape[1] * attrs.get("group", 1))
    assert_matches_ort(node_model("ConvTranspose", feeds, **attrs), feeds, **F32)


def test_conv_transpose_with_weight_channel_mismatch_raises_node_error() -> None:
    feeds = {"x": _x(1, 3, 3, 3), "w": _x(2, 2, 3, 3)}
    with pytest.raises(NodeError, match="ConvTranspose"):
        run_ours(node_model("ConvTranspose", feeds), feeds)


def _ours(op: str, feeds: dict[str, np.ndarray], n_out: int = 1, *, opset: int,
          **attrs: object) -> list[np.ndarray]:
    """Run one ``op`` node on cpu_reference; a feed named ``""`` is a missing optional."""
    model = node_model(op, feeds, n_out, opset=opset, **attrs)
    return run_ours(model, {k: v for k, v in feeds.items() if k})


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
    x = RNG.standard_normal((n, c) + hw).astype(np.float32)
    w = RNG.standard_normal((m, c // case.get("group", 1)) + k).astype(np.float32)
    s, p, d = case.get("strides", [1, 1]), case.get("pads", [0] * 4), case.get("dilations", [1, 1])
    out = tuple((hw[i] + p[i] + p[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2))
    og = case.get("offset_group", 1)
    # offsets reach outside the image so zero padding of samples is exercised
    feeds = {"x": x, "w": w,
             "off": RNG.uniform(-2.5, 2.5, (n, og * 6 * 2) + out).astype(np.float32)}
    if with_mask_bias:
        feeds["b"] = RNG.standard_normal(m).astype(np.float32)
        feeds["mask"] = RNG.uniform(0, 1, (n, og * 6) + out).astype(np.float32)
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
    feeds = {"x": RNG.standard_normal((1, 2, 4, 3, 5)).astype(np.float32),
             "w": RNG.standard_normal((3, 2, 2, 2, 3)).astype(np.float32)}
    (conv,) = run_ort(node_model("Conv", feeds, pads=[1, 0, 1, 0, 1, 1]), feeds)
    off = np.zeros((1, 2 * 2 * 3 * 3) + conv.shape[2:], np.float32)
    (y,) = _ours("DeformConv", {**feeds, "off": off}, opset=22, pads=[1, 0, 1, 0, 1, 1])
    np.testing.assert_allclose(y, conv, rtol=1e-5, atol=1e-5)


def test_deform_conv_with_wrong_offset_shape_raises_node_error() -> None:
    feeds = {"x": np.zeros((1, 2, 4, 4), np.float32), "w": np.zeros((1, 2, 2, 2), np.float32),
             "off": np.zeros((1, 6, 3, 3), np.float32)}
    with pytest.raises(NodeError, match="offset has shape"):
        _ours("DeformConv", feeds, opset=22)


# ------------------------------------------------------------------ CausalConvWithState


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("with_past,with_bias", [(False, False), (True, True)])
def test_causal_conv_with_state_is_depthwise_conv_over_the_concatenation(
        k: int, with_past: bool, with_bias: bool) -> None:
    bsz, c, length = 2, 3, 6
    x = RNG.standard_normal((bsz, c, length)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k)).astype(np.float32)
    past = RNG.standard_normal((bsz, c, k - 1)).astype(np.float32) if with_past else None
    bias = RNG.standard_normal(c).astype(np.float32) if with_bias else None
    feeds = {"x": x, "w": w}
    if with_bias:
        feeds["b"] = bias
    if with_past:
        feeds["past"] = past
    y, present = _ours("CausalConvWithState", feeds, 2, opset=27)
    padded = np.concatenate([past if with_past else np.zeros((bsz, c, k - 1), np.float32), x], 2)
    conv_feeds = {"p": padded, "w": w} | ({"b": bias} if with_bias else {})
    (expected,) = run_ort(node_model("Conv", conv_feeds, group=c), conv_feeds)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(present, padded[:, :, length:])
    assert present.shape == (bsz, c, k - 1)


def test_causal_conv_with_state_silu_streamed_token_by_token_equals_one_call() -> None:
    bsz, c, length, k = 1, 4, 5, 3
    x = RNG.standard_normal((bsz, c, length)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k)).astype(np.float32)
    y_all, s_all = _ours("CausalConvWithState", {"x": x, "w": w}, 2, opset=27,
                         activation="silu")
    state = np.zeros((bsz, c, k - 1), np.float32)
    steps = []
    for i in range(length):
        yi, state = _ours("CausalConvWithState", {"x": x[:, :, i:i + 1], "w": w, "": None,
                                                  "past": state}, 2, opset=27,
                          activation="swish")
        steps.append(yi)
    np.testing.assert_allclose(np.concatenate(steps, axis=2), y_all, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(state, s_all)
    conv = np.einsum("bclk,ck->bcl", np.lib.stride_tricks.sliding_window_view(
        np.concatenate([np.zeros((bsz, c, k - 1), np.float32), x], 2).astype(np.float64), k,
        axis=2),
        w[:, 0].astype(np.float64))
    np.testing.assert_allclose(y_all, conv / (1 + np.exp(-conv)), rtol=1e-5, atol=1e-6)


def test_causal_conv_with_state_wrong_past_shape_raises_node_error() -> None:
    feeds = {"x": np.ones((1, 2, 3), np.float32), "w": np.ones((2, 1, 3), np.float32), "": None,
             "past": np.ones((1, 2, 3), np.float32)}
    with pytest.raises(NodeError, match="past_state"):
        _ours("CausalConvWithState", feeds, 2, opset=27)


# ------------------------------------------------------------ com.microsoft::CausalConvWithState

MS = "com.microsoft"


def _ms_case(dtype: Any, channels_last: int, dims: tuple[int, ...], dilation: int,
             with_bias: bool, with_past: bool, length: int, k: int = 4, bsz: int = 2
             ) -> dict[str, np.ndarray | None]:
    c, span = int(np.prod(dims)), (k - 1) * dilation
    x_shape = (bsz, length, *dims) if channels_last else (bsz, c, length)
    state_shape = (bsz, span, *dims) if channels_last else (bsz, c, span)
    return {"x": _x(*x_shape, dtype=dtype), "w": _x(c, 1, k, dtype=dtype),
            "b" if with_bias else "": _x(c, dtype=dtype) if with_bias else None,
            "past": _x(*state_shape, dtype=dtype) if with_past else None}


def _ms_model(feeds: dict[str, Any], **attrs: object) -> Any:
    names = list(feeds)
    while names and feeds[names[-1]] is None:
        names.pop()             # trailing omitted optionals
    inputs = {k: feeds[k] for k in names}
    return node_model("CausalConvWithState", inputs, 2, domain=MS, **attrs)


def _ort_or_skip(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs; older releases have no com.microsoft::CausalConvWithState."""
    import onnxruntime as ort

    try:
        return run_ort(model, feeds)
    except Exception as exc:     # noqa: BLE001 - the release's own error types vary
        text = str(exc)
        if "CausalConvWithState" in text and any(
                why in text.lower() for why in ("implementation", "schema", "not a registered")):
            pytest.skip(f"onnxruntime {ort.__version__} has no "
                        f"com.microsoft::CausalConvWithState")
        raise


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("channels_last,dims", [(0, (6,)), (1, (6,)), (1, (2, 3))])
@pytest.mark.parametrize("dilation", [1, 3])
@pytest.mark.parametrize("activation,with_bias,with_past,length", [
    ("none", False, True, 1), ("silu", True, True, 5), ("swish", True, False, 5),
    ("none", False, False, 2)])
def test_ms_causal_conv_with_state_matches_onnxruntime(
        dtype: Any, channels_last: int, dims: tuple[int, ...], dilation: int, activation: str,
        with_bias: bool, with_past: bool, length: int) -> None:
    pytest.importorskip("onnxruntime")
    feeds = _ms_case(dtype, channels_last, dims, dilation, with_bias, with_past, length)
    model = _ms_model(feeds, ndim=1, activation=activation, dilation=dilation,
                      channels_last=channels_last)
    given = {k: v for k, v in feeds.items() if k and v is not None}
    want = _ort_or_skip(model, given)
    got = run_ours(model, given)
    for a, b, what in zip(got, want, ("output", "present_state")):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, what
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64),
                                   rtol=1e-3 if dtype == np.float16 else 1e-5,
                                   atol=1e-3 if dtype == np.float16 else 1e-6, err_msg=what)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_ms_causal_conv_with_state_streamed_token_by_token_equals_one_call(
        channels_last: int) -> None:
    """Dilated, channels-last or not: feeding each present state back as the next past gives
    the same outputs and final state as one call over the whole sequence."""
    length, axis = 7, 1 if channels_last else 2
    feeds = _ms_case(np.float32, channels_last, (5,), 2, True, True, length)
    attrs = dict(ndim=1, activation="silu", dilation=2, channels_last=channels_last)
    model = _ms_model(feeds, **attrs)
    y_all, s_all = run_ours(model, {k: v for k, v in feeds.items() if k})
    state, steps = feeds["past"], []
    one = _ms_model(dict(feeds, x=np.take(feeds["x"], [0], axis=axis)), **attrs)
    for i in range(length):
        step = dict(feeds, x=np.take(feeds["x"], [i], axis=axis), past=state)
        yi, state = run_ours(one, {k: v for k, v in step.items() if k})
        steps.append(yi)
    np.testing.assert_allclose(np.concatenate(steps, axis=axis), y_all, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(state, s_all)


@pytest.mark.parametrize("attr,value", [
    ("ndim", 2), ("state_window", 2), ("state_update_capacity", 4), ("state_length", 6),
    ("input_channels", 3), ("input_channel_offset", 1), ("state_channels_last", 1),
    ("dilation", 0)])
def test_ms_causal_conv_with_state_declines_what_it_does_not_implement(attr: str,
                                                                       value: int) -> None:
    """A clear NodeError naming the attribute, and the session runs the next call."""
    import onnx_ep

    feeds = _ms_case(np.float32, 0, (4,), 1, False, True, 3)
    given = {k: v for k, v in feeds.items() if k and v is not None}
    bad = onnx_ep.Session(_ms_model(feeds, **{attr: value}), providers=["cpu_reference"])
    with pytest.raises(NodeError, match=attr):
        bad.run(None, given)
    good = onnx_ep.Session(_ms_model(feeds), providers=["cpu_reference"])
    y, present = good.run(None, given)
    assert y.shape == (2, 4, 3) and present.shape == (2, 4, 3)
