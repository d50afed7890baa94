"""Attention (opset 23) and RotaryEmbedding against onnxruntime; the scores workspace contract;
LinearAttention against the spec's recurrence written out and against itself run in pieces."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec, WorkspaceView
from onnx_ep.errors import NodeError, WorkspaceTooSmall
from onnx_ep.providers.cpu_reference.attention import Attention, scores_spec
from tests.helpers.oracle import assert_matches_ort, node_model, requires_ort, run_ours

RNG = np.random.default_rng(5)


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "4d": ({"Q": _r(2, 4, 3, 8), "K": _r(2, 4, 5, 8), "V": _r(2, 4, 5, 6)}, {}),
    "4d_gqa_causal": ({"Q": _r(1, 6, 4, 8), "K": _r(1, 2, 4, 8), "V": _r(1, 2, 4, 8)},
                      {"is_causal": 1}),
    "4d_float_mask_softcap": ({"Q": _r(2, 2, 3, 4), "K": _r(2, 2, 5, 4), "V": _r(2, 2, 5, 4),
                               "attn_mask": _r(3, 5)}, {"softcap": 2.0, "scale": 0.3}),
    "4d_bool_mask": ({"Q": _r(1, 2, 3, 4), "K": _r(1, 2, 5, 4), "V": _r(1, 2, 5, 4),
                      "attn_mask": RNG.random((1, 2, 3, 5)) > 0.3}, {}),
    "3d_gqa": ({"Q": _r(2, 3, 16), "K": _r(2, 5, 8), "V": _r(2, 5, 8)},
               {"q_num_heads": 4, "kv_num_heads": 2}),
}


#: onnxruntime 1.23-1.26 give other values for these (100 % of elements differ)
_ORT_ATTENTION = requires_ort("1.27", "earlier releases compute Attention's softcap and "
                                      "qk_matmul_output differently")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_ORT_ATTENTION) if "softcap" in n
                                  else n for n in CASES])
def test_attention_matches_ort(name: str) -> None:
    feeds, attrs = CASES[name]
    model = node_model("Attention", feeds, opset=23, **attrs)
    assert_matches_ort(model, feeds, rtol=1e-5, atol=1e-6)


@_ORT_ATTENTION
def test_attention_past_and_present_and_qk_output_match_ort() -> None:
    feeds = {"Q": _r(1, 2, 2, 4), "K": _r(1, 2, 2, 4), "V": _r(1, 2, 2, 4),
             "attn_mask": _r(2, 5), "past_key": _r(1, 2, 3, 4), "past_value": _r(1, 2, 3, 4)}
    for mode in (0, 1, 2, 3):
        model = node_model("Attention", feeds, 4, opset=23, qk_matmul_output_mode=mode)
        assert_matches_ort(model, feeds, rtol=1e-5, atol=1e-6)


def _meta(q: np.ndarray, k: np.ndarray, **attrs: object) -> NodeMeta:
    return NodeMeta(name="att", op_type="Attention", domain="", opset=23, attrs=attrs,
                    inputs=(TensorSpec(q.dtype, q.shape), TensorSpec(k.dtype, k.shape),
                            TensorSpec(k.dtype, k.shape)),
                    input_names=("Q", "K", "V"), output_names=("Y",))


def test_workspace_requirement_is_the_scores_matrix_and_execution_uses_it() -> None:
    q, k, v = _r(2, 4, 3, 8), _r(2, 2, 5, 8), _r(2, 2, 5, 8)
    meta = _meta(q, k)
    kernel = Attention("Attention", since=23)
    req = kernel.workspace_requirement(meta)
    assert req.nbytes == scores_spec(q.shape, k.shape, None, q.dtype, {}).nbytes
    assert req.nbytes == 2 * 4 * 3 * 5 * 4
    buf = np.full(req.nbytes, 255, np.uint8)
    outs: list = [None]
    kernel.execute_with_workspace(ExecutionContext(meta), [q, k, v], outs,
                                  WorkspaceView(buf, req.nbytes))
    no_ws: list = [None]
    kernel.execute_with_workspace(ExecutionContext(meta), [q, k, v], no_ws, None)
    np.testing.assert_array_equal(outs[0], no_ws[0])
    assert not (buf == 255).all()      # the scores really lived in the workspace
    with pytest.raises(WorkspaceTooSmall):
        kernel.execute_with_workspace(ExecutionContext(meta), [q, k, v], [None],
                                      WorkspaceView(buf, req.nbytes - 4))


def test_workspace_requirement_is_none_for_symbolic_shapes() -> None:
    meta = NodeMeta(name="att", op_type="Attention", domain="", opset=23, attrs={},
                    inputs=(TensorSpec(np.float32, ("B", 2, 3, 4)),
                            TensorSpec(np.float32, ("B", 2, 5, 4))))
    assert Attention("Attention", since=23).workspace_requirement(meta).nbytes == 0


def test_attention_rejects_heads_that_do_not_group() -> None:
    feeds = {"Q": _r(1, 3, 2, 4), "K": _r(1, 2, 2, 4), "V": _r(1, 2, 2, 4)}
    with pytest.raises(NodeError, match="multiple of kv heads"):
        run_ours(node_model("Attention", feeds, opset=23), feeds)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_matches_ort(interleaved: int) -> None:
    feeds = {"x": _r(2, 3, 4, 8), "cos": _r(6, 4), "sin": _r(6, 4),
             "pos": np.array([[0, 2, 4, 5], [1, 1, 3, 0]], dtype=np.int64)}
    model = node_model("RotaryEmbedding", feeds, opset=23, interleaved=interleaved)
    assert_matches_ort(model, feeds, rtol=1e-6, atol=1e-6)


def test_rotary_embedding_rejects_out_of_range_positions() -> None:
    feeds = {"x": _r(1, 1, 2, 4), "cos": _r(2, 2), "sin": _r(2, 2),
             "pos": np.array([[0, 2]], dtype=np.int64)}
    with pytest.raises(NodeError, match="position_ids"):
        run_ours(node_model("RotaryEmbedding", feeds, opset=23), feeds)


# ------------------------------------------------------------------ LinearAttention


def _ours(op: str, feeds: dict[str, np.ndarray], n_out: int = 1, *, opset: int,
          **attrs: object) -> list[np.ndarray]:
    """Run one ``op`` node on cpu_reference; a feed named ``""`` is a missing optional."""
    model = node_model(op, feeds, n_out, opset=opset, **attrs)
    return run_ours(model, {k: v for k, v in feeds.items() if k})


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
    feeds = {"q": RNG.standard_normal((bsz, t, hq * dk)).astype(np.float32),
             "k": RNG.standard_normal((bsz, t, hkv * dk)).astype(np.float32) / 2,
             "v": RNG.standard_normal((bsz, t, hkv * dv)).astype(np.float32),
             "past": RNG.standard_normal((bsz, hkv, dk, dv)).astype(np.float32)}
    decay = RNG.uniform(-1, 0, (bsz, t, hkv * dk if per_key_decay else hkv)).astype(np.float32)
    beta = RNG.uniform(0, 1, (bsz, t, max(beta_heads, 1))).astype(np.float32)
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
    assert y.dtype == np.float32 and present.dtype == np.float32
    np.testing.assert_allclose(y, ey, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(present, es, rtol=1e-4, atol=1e-5)


def test_linear_attention_prefill_in_two_calls_equals_one_call() -> None:
    bsz, t, h, dk, dv = 1, 6, 2, 4, 4
    q, k, v = (RNG.standard_normal((bsz, t, h * d)).astype(np.float32) for d in (dk, dk, dv))
    decay = RNG.uniform(-1, 0, (bsz, t, h)).astype(np.float32)
    beta = RNG.uniform(0, 1, (bsz, t, h)).astype(np.float32)
    attrs = dict(q_num_heads=h, kv_num_heads=h, scale=0.5)

    def call(sl: slice, past: np.ndarray | None) -> list[np.ndarray]:
        feeds = {"q": q[:, sl], "k": k[:, sl], "v": v[:, sl],
                 "past": np.zeros((bsz, h, dk, dv), np.float32) if past is None else past,
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
    feeds = {"q": np.ones((1, 2, 12), np.float32), "k": np.ones((1, 2, 12), np.float32),
             "v": np.ones((1, 2, 12), np.float32)}
    with pytest.raises(NodeError, match=match):
        _ours("LinearAttention", feeds, 2, opset=27, **attrs)
