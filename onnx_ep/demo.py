"""A small decoder-only transformer, built deterministically with ``onnx.helper``.

Used by ``onnx-ep demo``, the tests and ``benchmarks/overhead.py``: no download,
no model file. The graph is a pre-LayerNorm GPT block stack at opset 17
(so GELU is spelled with Erf, and LayerNormalization is a single op):

    input_ids [batch, seq] int64
      -> Gather(token_embedding) + Slice(position_embedding)
      -> layers x { x + Attention(LN(x)); x + MLP(LN(x)) }
      -> LN -> MatMul(lm_head) -> logits [batch, seq, vocab] float32

``seq`` is the largest sequence length the model accepts (the size of the
position table and of the causal mask); shorter inputs slice both.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: opset 17: LayerNormalization exists, Gelu does not (it arrives in opset 20)
DEMO_OPSET = 17
#: IR version 9 loads in onnxruntime 1.14 and later
DEMO_IR_VERSION = 9
#: added to masked attention scores; exp() of it underflows to exactly 0 in float32
MASK_VALUE = -1e9


class _Builder:
    """Collects nodes and initializers; names every node after its place in the model."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        w = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.const(name, w)

    def op(self, op_type: str, name: str, inputs: list[str], **attrs: object) -> str:
        out = f"{name}:0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def linear(self, prefix: str, x: str, d_in: int, d_out: int) -> str:
        # 1/sqrt(d_in) keeps activations O(1), so softmax and erf are not saturated
        w = self.weight(f"{prefix}.weight", (d_in, d_out), 1.0 / math.sqrt(d_in))
        b = self.weight(f"{prefix}.bias", (d_out,), 0.02)
        return self.op("Add", f"{prefix}/add", [self.op("MatMul", f"{prefix}/matmul", [x, w]), b])

    def layer_norm(self, prefix: str, x: str, d: int) -> str:
        g = self.const(f"{prefix}.weight",
                       (1.0 + 0.1 * self.rng.standard_normal(d)).astype(np.float32))
        b = self.const(f"{prefix}.bias", (0.1 * self.rng.standard_normal(d)).astype(np.float32))
        return self.op("LayerNormalization", prefix, [x, g, b], axis=-1, epsilon=1e-5)


def build_demo_model(layers: int = 2, d_model: int = 64, heads: int = 4, vocab: int = 256,
                     seq: int = 16, seed: int = 0) -> onnx.ModelProto:
    """Build the demo transformer; the same arguments give the same bytes.

    :param layers: number of transformer blocks.
    :param d_model: hidden size; must be divisible by ``heads``.
    :param heads: attention heads.
    :param vocab: vocabulary size (rows of the token embedding, columns of ``logits``).
    :param seq: the longest sequence the model accepts.
    :param seed: seed of ``numpy.random.default_rng`` for every weight.
    :returns: an opset-17, IR-version-9 ``ModelProto`` with input ``input_ids``
        (int64 ``[batch, seq]``) and output ``logits`` (float32 ``[batch, seq, vocab]``).
    :raises ValueError: if ``d_model`` is not divisible by ``heads`` or a size is < 1.
    """
    if min(layers, d_model, heads, vocab, seq) < 1:
        raise ValueError("layers, d_model, heads, vocab and seq must all be >= 1")
    if d_model % heads:
        raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
    d_head = d_model // heads
    b = _Builder(np.random.default_rng(seed))

    # embeddings; positions and the causal mask are sliced to the input's length
    tok = b.weight("token_embedding", (vocab, d_model), 1.0)
    pos = b.weight("position_embedding", (seq, d_model), 0.1)
    mask = np.triu(np.full((seq, seq), MASK_VALUE, np.float32), k=1)
    b.const("causal_mask", mask)
    seq_len = b.op("Shape", "seq_len", ["input_ids"], start=1, end=2)
    zero = b.const("const.zero", np.array([0], np.int64))
    ends2 = b.op("Concat", "mask/ends", [seq_len, seq_len], axis=0)
    b.const("const.axes01", np.array([0, 1], np.int64))
    b.const("const.zero2", np.array([0, 0], np.int64))
    mask_s = b.op("Slice", "mask/slice", ["causal_mask", "const.zero2", ends2, "const.axes01"])
    pos_s = b.op("Slice", "pos/slice", [pos, zero, seq_len, zero])
    x = b.op("Add", "embed/add", [b.op("Gather", "embed/gather", [tok, "input_ids"], axis=0),
                                  pos_s])

    heads_shape = b.const("const.heads_shape", np.array([0, 0, heads, d_head], np.int64))
    model_shape = b.const("const.model_shape", np.array([0, 0, d_model], np.int64))
    scale = b.const("const.attn_scale", np.array(1.0 / math.sqrt(d_head), np.float32))
    sqrt2 = b.const("const.sqrt2", np.array(math.sqrt(2.0), np.float32))
    one_f = b.const("const.one_f", np.array(1.0, np.float32))
    half = b.const("const.half", np.array(0.5, np.float32))

    for i in range(layers):
        p = f"layer{i}"
        h = b.layer_norm(f"{p}/ln1", x, d_model)
        q, k, v = (b.op("Reshape", f"{p}/attn/{n}_heads",
                        [b.linear(f"{p}/attn/{n}_proj", h, d_model, d_model), heads_shape])
                   for n in "qkv")
        q = b.op("Transpose", f"{p}/attn/q_t", [q], perm=[0, 2, 1, 3])      # [B,H,S,Dh]
        kt = b.op("Transpose", f"{p}/attn/k_t", [k], perm=[0, 2, 3, 1])     # [B,H,Dh,S]
        v = b.op("Transpose", f"{p}/attn/v_t", [v], perm=[0, 2, 1, 3])      # [B,H,S,Dh]
        scores = b.op("Mul", f"{p}/attn/scale", [b.op("MatMul", f"{p}/attn/qk", [q, kt]), scale])
        scores = b.op("Add", f"{p}/attn/mask", [scores, mask_s])
        probs = b.op("Softmax", f"{p}/attn/softmax", [scores], axis=-1)
        ctx = b.op("Transpose", f"{p}/attn/ctx_t",
                   [b.op("MatMul", f"{p}/attn/pv", [probs, v])], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", f"{p}/attn/merge", [ctx, model_shape])
        x = b.op("Add", f"{p}/attn/residual",
                 [x, b.linear(f"{p}/attn/out_proj", ctx, d_model, d_model)])

        h = b.layer_norm(f"{p}/ln2", x, d_model)
        h = b.linear(f"{p}/mlp/fc1", h, d_model, 4 * d_model)
        # GELU(h) = 0.5 * h * (1 + erf(h / sqrt(2)))
        erf = b.op("Erf", f"{p}/mlp/gelu/erf", [b.op("Div", f"{p}/mlp/gelu/div", [h, sqrt2])])
        g = b.op("Mul", f"{p}/mlp/gelu/mul",
                 [h, b.op("Add", f"{p}/mlp/gelu/add", [erf, one_f])])
        g = b.op("Mul", f"{p}/mlp/gelu/half", [g, half])
        x = b.op("Add", f"{p}/mlp/residual", [x, b.linear(f"{p}/mlp/fc2", g, 4 * d_model,
                                                           d_model)])

    x = b.layer_norm("final_ln", x, d_model)
    lm_head = b.weight("lm_head.weight", (d_model, vocab), 1.0 / math.sqrt(d_model))
    b.nodes.append(helper.make_node("MatMul", [x, lm_head], ["logits"], name="lm_head"))

    graph = helper.make_graph(
        b.nodes, "onnx_ep_demo_transformer",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       ["batch", "seq", vocab])],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", DEMO_OPSET)],
                              ir_version=DEMO_IR_VERSION, producer_name="onnx_ep.demo")
    onnx.checker.check_model(model)
    return model


def demo_feeds(batch: int = 1, seq: int = 16, seed: int = 0,
               vocab: int = 256) -> dict[str, np.ndarray]:
    """Token ids for :func:`build_demo_model`: ``{"input_ids": int64 [batch, seq]}``.

    Ids are uniform in ``[0, vocab)``; ``seq`` must not exceed the model's ``seq``.
    """
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)}
