"""Attention (opset 23) and RotaryEmbedding against onnxruntime; the scores workspace contract."""

from __future__ import annotations

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
