"""FlexAttention (ai.onnx.preview) against an independent float64 numpy formula.

onnxruntime registers no FlexAttention, so the oracle here is the spec's formula written
directly in float64 (np.repeat for grouped-query heads); modifier subgraphs are mirrored
by numpy functions.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_ep.core.graph import build_graph
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec, WorkspaceView
from onnx_ep.errors import NodeError, WorkspaceTooSmall
from onnx_ep.providers.cpu_reference.flex_attention import FlexAttention, scores_spec
from tests.helpers.oracle import ORACLE_IR_VERSION, node_model, run_ours

DOMAIN = "ai.onnx.preview"
RNG = np.random.default_rng(11)
BF16 = np.dtype(ml_dtypes.bfloat16)
Mod = Callable[[np.ndarray], np.ndarray]


def _r(*shape: int, dtype: object = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _expected(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None,
              score_mod: Mod | None = None, prob_mod: Mod | None = None) -> np.ndarray:
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k64, v64 = np.repeat(k64, rep, axis=1), np.repeat(v64, rep, axis=1)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bhqe,bhke->bhqk", q64, k64) * scale
    if score_mod is not None:
        s = score_mod(s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    if prob_mod is not None:
        p = prob_mod(p)
    return np.einsum("bhqk,bhkv->bhqv", p, v64).astype(q.dtype)


def _mod_graph(name: str, nodes: list[onnx.NodeProto], elem: int = TensorProto.FLOAT,
               inits: list[onnx.TensorProto] | None = None) -> onnx.GraphProto:
    return helper.make_graph(nodes, name,
                             [helper.make_tensor_value_info("x", elem, None)],
                             [helper.make_tensor_value_info("y", elem, None)], inits or [])


def _model(feeds: dict[str, np.ndarray], **attrs: object) -> onnx.ModelProto:
    return node_model("FlexAttention", feeds, opset=21, domain=DOMAIN, **attrs)


def _check(feeds: dict[str, np.ndarray], want: np.ndarray, rtol: float, atol: float,
           **attrs: object) -> None:
    (got,) = run_ours(_model(feeds, **attrs), feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=rtol, atol=atol)


DTYPES = {np.dtype(np.float32): (1e-5, 1e-6), np.dtype(np.float64): (1e-12, 1e-13),
          np.dtype(np.float16): (5e-3, 2e-3), BF16: (3e-2, 2e-2)}
SHAPES = {
    "mha": ((2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 6, 8)),
    "gqa": ((1, 6, 3, 4), (1, 2, 7, 4), (1, 2, 7, 4)),
    "diff_head_sizes": ((2, 2, 3, 8), (2, 2, 4, 8), (2, 2, 4, 5)),
}


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("shapes", list(SHAPES))
def test_flex_attention_matches_the_formula(shapes: str, dtype: np.dtype) -> None:
    sq, sk, sv = SHAPES[shapes]
    q, k, v = _r(*sq, dtype=dtype), _r(*sk, dtype=dtype), _r(*sv, dtype=dtype)
    rtol, atol = DTYPES[dtype]
    _check({"Q": q, "K": k, "V": v}, _expected(q, k, v), rtol, atol)


def test_scale_attribute_replaces_the_default() -> None:
    q, k, v = _r(1, 2, 3, 4), _r(1, 2, 5, 4), _r(1, 2, 5, 4)
    _check({"Q": q, "K": k, "V": v}, _expected(q, k, v, scale=0.7), 1e-5, 1e-6, scale=0.7)


@pytest.mark.parametrize("precision", [TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_softmax_precision_sets_the_modifier_dtype_but_not_the_output(precision: int) -> None:
    q, k, v = _r(1, 2, 3, 4), _r(1, 2, 5, 4), _r(1, 2, 5, 4)
    # an Identity score_mod declared in the softmax dtype proves what the subgraph receives
    ident = _mod_graph("ident", [helper.make_node("Identity", ["x"], ["y"])], precision)
    tol = (1e-5, 1e-6) if precision == TensorProto.DOUBLE else (3e-3, 3e-3)
    _check({"Q": q, "K": k, "V": v}, _expected(q, k, v), *tol,
           softmax_precision=precision, score_mod=ident)


def test_score_mod_causal_bias_masks_future_keys() -> None:
    q, k, v = _r(2, 2, 4, 8), _r(2, 2, 4, 8), _r(2, 2, 4, 8)
    bias = np.where(np.tril(np.ones((4, 4), bool)), 0, -np.inf).astype(np.float32)
    graph = _mod_graph("causal", [helper.make_node("Add", ["x", "bias"], ["y"])],
                       inits=[onnx.numpy_helper.from_array(bias, "bias")])
    want = _expected(q, k, v, score_mod=lambda s: s + bias)
    _check({"Q": q, "K": k, "V": v}, want, 1e-5, 1e-6, score_mod=graph)


def test_score_mod_soft_cap_and_prob_mod_compose() -> None:
    q, k, v = _r(1, 4, 3, 8) * 4, _r(1, 2, 6, 8), _r(1, 2, 6, 8)
    cap = onnx.numpy_helper.from_array(np.array(2.0, np.float32), "cap")
    softcap = _mod_graph("softcap", [helper.make_node("Div", ["x", "cap"], ["t"]),
                                     helper.make_node("Tanh", ["t"], ["u"]),
                                     helper.make_node("Mul", ["u", "cap"], ["y"])],
                         inits=[cap])
    half = onnx.numpy_helper.from_array(np.array(0.5, np.float32), "half")
    scale_probs = _mod_graph("halve", [helper.make_node("Mul", ["x", "half"], ["y"])],
                             inits=[half])
    want = _expected(q, k, v, score_mod=lambda s: np.tanh(s / 2) * 2,
                     prob_mod=lambda p: p * 0.5)
    _check({"Q": q, "K": k, "V": v}, want, 1e-5, 1e-6, score_mod=softcap,
           prob_mod=scale_probs)


def test_score_mod_reads_an_outer_scope_graph_input() -> None:
    q, k, v = _r(1, 2, 3, 4), _r(1, 2, 5, 4), _r(1, 2, 5, 4)
    bias = _r(3, 5)
    score_mod = _mod_graph("outer_bias", [helper.make_node("Add", ["x", "bias"], ["y"])])
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=DOMAIN,
                            score_mod=score_mod)
    feeds = {"Q": q, "K": k, "V": v, "bias": bias}
    graph = helper.make_graph(
        [node], "outer", [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                          for n, a in feeds.items()],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, ir_version=ORACLE_IR_VERSION, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    (got,) = run_ours(model, feeds)
    want = _expected(q, k, v, score_mod=lambda s: s + bias)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fully_masked_row_is_nan_like_softmax() -> None:
    q, k, v = _r(1, 1, 2, 4), _r(1, 1, 3, 4), _r(1, 1, 3, 4)
    bias = np.zeros((2, 3), np.float32)
    bias[1] = -np.inf
    graph = _mod_graph("mask_row", [helper.make_node("Add", ["x", "bias"], ["y"])],
                       inits=[onnx.numpy_helper.from_array(bias, "bias")])
    feeds = {"Q": q, "K": k, "V": v}
    (got,) = run_ours(_model(feeds, score_mod=graph), feeds)
    assert np.isnan(got[0, 0, 1]).all()
    np.testing.assert_allclose(got[0, 0, 0], _expected(q, k, v)[0, 0, 0], rtol=1e-5, atol=1e-6)


def _meta(q: np.ndarray, k: np.ndarray, **attrs: object) -> NodeMeta:
    return NodeMeta(name="flex", op_type="FlexAttention", domain=DOMAIN, opset=1, attrs=attrs,
                    inputs=(TensorSpec(q.dtype, q.shape), TensorSpec(k.dtype, k.shape),
                            TensorSpec(k.dtype, k.shape)),
                    input_names=("Q", "K", "V"), output_names=("Y",))


def test_workspace_requirement_is_the_scores_matrix_and_execution_uses_it() -> None:
    q, k, v = _r(2, 4, 3, 8), _r(2, 2, 5, 8), _r(2, 2, 5, 8)
    meta = _meta(q, k, softmax_precision=TensorProto.DOUBLE)
    kernel = FlexAttention("FlexAttention", since=1, domain=DOMAIN)
    req = kernel.workspace_requirement(meta)
    assert req.nbytes == scores_spec(q.shape, k.shape, q.dtype, meta.attrs).nbytes
    assert req.nbytes == 2 * 4 * 3 * 5 * 8       # float64 scores for softmax_precision=DOUBLE
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
                                      WorkspaceView(buf, req.nbytes - 8))


def test_workspace_requirement_is_none_for_symbolic_shapes_or_bad_precision() -> None:
    kernel = FlexAttention("FlexAttention", since=1, domain=DOMAIN)
    meta = NodeMeta(name="flex", op_type="FlexAttention", domain=DOMAIN, opset=1, attrs={},
                    inputs=(TensorSpec(np.float32, ("B", 2, 3, 4)),
                            TensorSpec(np.float32, ("B", 2, 5, 4))))
    assert kernel.workspace_requirement(meta).nbytes == 0
    bad = _meta(_r(1, 1, 2, 4), _r(1, 1, 2, 4), softmax_precision=TensorProto.INT32)
    assert kernel.workspace_requirement(bad).nbytes == 0


def test_flex_attention_is_registered_in_the_preview_domain() -> None:
    q, k, v = _r(1, 1, 2, 4), _r(1, 1, 3, 4), _r(1, 1, 3, 4)
    model = _model({"Q": q, "K": k, "V": v})
    g = build_graph(model)
    assert g.nodes[0].domain == DOMAIN and g.opsets[DOMAIN] == 1
    (got,) = run_ours(model, {"Q": q, "K": k, "V": v})
    assert got.shape == (1, 1, 2, 4)


def _ident_cast(to: int) -> onnx.GraphProto:
    return _mod_graph("cast", [helper.make_node("Cast", ["x"], ["y"], to=to)], to)


BAD = {
    "rank3": ((2, 3, 8), (2, 3, 8), (2, 3, 8), {}),
    "heads_not_multiple": ((1, 3, 2, 4), (1, 2, 2, 4), (1, 2, 2, 4), {}),
    "head_size_mismatch": ((1, 2, 2, 4), (1, 2, 2, 5), (1, 2, 2, 4), {}),
    "kv_seq_mismatch": ((1, 2, 2, 4), (1, 2, 3, 4), (1, 2, 4, 4), {}),
    "batch_mismatch": ((2, 2, 2, 4), (1, 2, 3, 4), (1, 2, 3, 4), {}),
    "bad_precision": ((1, 2, 2, 4), (1, 2, 3, 4), (1, 2, 3, 4),
                      {"softmax_precision": TensorProto.INT32}),
    "score_mod_changes_shape": (
        (1, 2, 2, 4), (1, 2, 3, 4), (1, 2, 3, 4),
        {"score_mod": _mod_graph("reduce", [helper.make_node(
            "ReduceMax", ["x"], ["y"], keepdims=1)])}),
    "prob_mod_changes_dtype": ((1, 2, 2, 4), (1, 2, 3, 4), (1, 2, 3, 4),
                               {"prob_mod": _ident_cast(TensorProto.DOUBLE)}),
}


@pytest.mark.parametrize("case", list(BAD))
def test_invalid_inputs_raise_node_error(case: str) -> None:
    sq, sk, sv, attrs = BAD[case]
    feeds = {"Q": _r(*sq), "K": _r(*sk), "V": _r(*sv)}
    with pytest.raises(NodeError):
        run_ours(_model(feeds, **attrs), feeds)


def test_mixed_input_dtypes_raise_node_error() -> None:
    meta = _meta(_r(1, 1, 2, 4), _r(1, 1, 3, 4))
    kernel = FlexAttention("FlexAttention", since=1, domain=DOMAIN)
    with pytest.raises(NodeError, match="share one dtype"):
        kernel.run(ExecutionContext(meta), _r(1, 1, 2, 4), _r(1, 1, 3, 4),
                   _r(1, 1, 3, 4, dtype=np.float64))
