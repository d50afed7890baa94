"""A tiny decoder whose only layer is a convolution with a state (LFM2's kind of layer:
com.microsoft::CausalConvWithState, its state fed back from step to step), in
onnxruntime-genai's folder layout, and a numpy re-implementation for the greedy oracle.

The model: token embeddings x; y = x + conv(x) (depthwise, causal, kernel K over the
sequence, channels last); logits ``y @ lm``. ``past.0.conv`` / ``present.0.conv`` are
``[batch, hidden, K - 1]`` (channels first, as the builder writes them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, K = 40, 16, 3


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"embed": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32),
            "conv": (rng.standard_normal((HIDDEN, 1, K)) / np.sqrt(K)).astype(np.float32),
            "lm": (rng.standard_normal((HIDDEN, VOCAB)) / np.sqrt(HIDDEN) * 4).astype(
                np.float32)}


def reference_greedy(w: dict[str, np.ndarray], prompt: list[int], max_new: int) -> list[int]:
    """Greedy tokens, the whole sequence recomputed per token (zeros before its start)."""
    seq, out = list(prompt), []
    for _ in range(max_new):
        x = w["embed"][np.array(seq)].astype(np.float64)              # [T, H]
        padded = np.concatenate([np.zeros((K - 1, HIDDEN)), x])
        conv = sum(padded[j:j + len(seq)] * w["conv"][:, 0, j] for j in range(K))
        logits = (x + conv) @ w["lm"]
        out.append(int(np.argmax(logits[-1])))
        seq.append(out[-1])
    return out


def build_model(w: dict[str, np.ndarray]) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Gather", ["embed", "input_ids"], ["x"]),
        # the state is channels first; the activations channels last
        helper.make_node("Transpose", ["past.0.conv"], ["past_t"], perm=[0, 2, 1]),
        helper.make_node("CausalConvWithState", ["x", "conv", "", "past_t"],
                         ["c", "present_t"], domain="com.microsoft", ndim=1,
                         activation="none", channels_last=1),
        helper.make_node("Transpose", ["present_t"], ["present.0.conv"], perm=[0, 2, 1]),
        helper.make_node("Add", ["x", "c"], ["y"]),
        helper.make_node("MatMul", ["y", "lm"], ["logits"]),
    ]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                            ["batch", "sequence"]),
              helper.make_tensor_value_info("past.0.conv", TensorProto.FLOAT,
                                            ["batch", HIDDEN, K - 1])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                             ["batch", "sequence", VOCAB]),
               helper.make_tensor_value_info("present.0.conv", TensorProto.FLOAT,
                                             ["batch", HIDDEN, K - 1])]
    graph = helper.make_graph(nodes, "conv_lm", inputs, outputs,
                              [numpy_helper.from_array(w[n], n) for n in ("embed", "conv", "lm")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)


def genai_config(shared: bool, eos: Any = 39) -> dict[str, Any]:
    return {"model": {
        "bos_token_id": 1, "eos_token_id": eos, "pad_token_id": 0, "context_length": 64,
        "vocab_size": VOCAB, "type": "lfm2",
        "decoder": {"filename": "model.onnx", "head_size": 4, "hidden_size": HIDDEN,
                    "num_attention_heads": 4, "num_key_value_heads": 4,
                    "num_hidden_layers": 1, "layer_types": ["conv"],
                    "conv_cache_size": K - 1,
                    "inputs": {"input_ids": "input_ids", "past_conv_names": "past.%d.conv"},
                    "outputs": {"logits": "logits", "present_conv_names": "present.%d.conv"}}},
        "search": {"max_length": 64, "past_present_share_buffer": shared, "do_sample": False}}


def write_folder(folder: Path, shared: bool = True, seed: int = 0,
                 **config: Any) -> dict[str, np.ndarray]:
    w = weights(seed)
    onnx.save(build_model(w), folder / "model.onnx")
    (folder / "genai_config.json").write_text(json.dumps(genai_config(shared, **config)))
    return w
