"""Tiny decoder model folders in onnxruntime-genai's layout, built with ``onnx.helper``, and
a numpy re-implementation of the same model for the greedy-loop oracle.

Two KV layouts, both in standard ONNX ops (opset 17):

- ``growing``: each layer ``Concat``s its past and the new keys/values (the shape
  torch/optimum exports have); ``attention_mask`` is ``[batch, total]``.
- ``shared``: past and present are one ``[batch, kv_heads, max_seq_len, head]`` buffer;
  the new tokens are written at ``total_sequence_length - S + j`` (a one-hot MatMul), the
  mask may be shorter than the buffer (padded with zeros inside), and ``seqlens_k`` is a
  (read-only) input, as GroupQueryAttention models have.

The model: token + learned position embeddings, per layer RMS-normed grouped-query
attention (causal and padding mask) and a ReLU MLP, both residual; logits ``[B, S, V]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CFG = {"vocab": 48, "hidden": 32, "heads": 4, "kv_heads": 2, "head": 8, "ff": 64,
       "layers": 2, "positions": 128}
NEG = -1e9


def weights(cfg: dict[str, int] = CFG, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    V, H, NH, KV, D, F, P = (cfg[k] for k in ("vocab", "hidden", "heads", "kv_heads", "head",
                                              "ff", "positions"))

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    out = {"embed": rng.standard_normal((V, H)).astype(np.float32),
           "pos": (0.5 * rng.standard_normal((P, H))).astype(np.float32),
           "lm": w(H, V) * 4}
    for i in range(cfg["layers"]):
        out.update({f"wq{i}": w(H, NH * D), f"wk{i}": w(H, KV * D), f"wv{i}": w(H, KV * D),
                    f"wo{i}": w(NH * D, H), f"w1{i}": w(H, F), f"w2{i}": w(F, H)})
    return out


# ---------------------------------------------------------------- numpy oracle


def _rms(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def reference_logits(w: dict[str, np.ndarray], ids: np.ndarray, mask: np.ndarray,
                     pos: np.ndarray, cfg: dict[str, int] = CFG, window: int = 0
                     ) -> np.ndarray:
    """Logits ``[T, V]`` of one row recomputed over its whole (padded) sequence, no cache;
    ``window`` > 0: layer 0's queries see only the ``window`` newest keys (their own
    included)."""
    NH, KV, D = cfg["heads"], cfg["kv_heads"], cfg["head"]
    T = ids.size
    x = (w["embed"][ids] + w["pos"][pos]).astype(np.float64)
    causal = (np.arange(T)[None, :] <= np.arange(T)[:, None]) & (mask[None, :] == 1)
    near = np.arange(T)[:, None] - np.arange(T)[None, :] < window
    for i in range(cfg["layers"]):
        allowed = causal & near if window > 0 and i == 0 else causal
        h = _rms(x)
        q = (h @ w[f"wq{i}"]).reshape(T, NH, D).transpose(1, 0, 2)
        k = (h @ w[f"wk{i}"]).reshape(T, KV, D).transpose(1, 0, 2)
        v = (h @ w[f"wv{i}"]).reshape(T, KV, D).transpose(1, 0, 2)
        k, v = np.repeat(k, NH // KV, axis=0), np.repeat(v, NH // KV, axis=0)
        s = np.where(allowed, q @ k.transpose(0, 2, 1) / np.sqrt(D), NEG)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + (p @ v).transpose(1, 0, 2).reshape(T, NH * D) @ w[f"wo{i}"]
        x = x + np.maximum(_rms(x) @ w[f"w1{i}"], 0) @ w[f"w2{i}"]
    return _rms(x) @ w["lm"]


def reference_greedy(w: dict[str, np.ndarray], prompt: list[int], max_new: int,
                     eos: tuple[int, ...] = (), cfg: dict[str, int] = CFG,
                     window: int = 0) -> list[int]:
    """The greedy loop of the same model, recomputing the whole sequence per token."""
    seq, out = list(prompt), []
    for _ in range(max_new):
        ids = np.array(seq)
        logits = reference_logits(w, ids, np.ones_like(ids), np.arange(ids.size), cfg,
                                  window)
        tok = int(np.argmax(logits[-1]))
        out.append(tok)
        seq.append(tok)
        if tok in eos:
            break
    return out


# ---------------------------------------------------------------- the ONNX graph


class _Graph:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._consts: dict[Any, str] = {}

    def const(self, value: Any, dtype: Any = np.int64) -> str:
        a = np.array(value, dtype)
        key = (a.dtype.str, a.shape, a.tobytes())
        if key not in self._consts:
            self._consts[key] = f"c{len(self._consts)}"
            self.inits.append(numpy_helper.from_array(a, self._consts[key]))
        return self._consts[key]

    def init(self, name: str, a: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def op(self, kind: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        name = out or f"{kind}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(kind, list(inputs), [name], name=name, **attrs))
        return name

    def rms(self, x: str) -> str:
        ms = self.op("ReduceMean", self.op("Mul", x, x), axes=[-1], keepdims=1)
        return self.op("Div", x, self.op("Sqrt", self.op("Add", ms, self.const(1e-6,
                                                                              np.float32))))

    def dim(self, x: str, axis: int) -> str:       # a 1-element int64 tensor
        return self.op("Shape", x, start=axis, end=axis + 1)

    def scalar(self, x: str) -> str:
        return self.op("Squeeze", x, self.const([0]))


def build_model(w: dict[str, np.ndarray], layout: str = "growing",
                cfg: dict[str, int] = CFG, window: int = 0) -> onnx.ModelProto:
    NH, KV, D = cfg["heads"], cfg["kv_heads"], cfg["head"]
    g = _Graph()
    x = g.op("Add", g.op("Gather", g.init("embed", w["embed"]), "input_ids"),
             g.op("Gather", g.init("pos", w["pos"]), "position_ids"))
    if layout == "gqa":
        return _gqa_model(g, x, w, cfg, window)
    S = g.dim("input_ids", 1)
    if layout == "growing":
        T = g.dim("attention_mask", 1)
        mask = "attention_mask"
        start = g.op("Sub", T, S)
    else:
        T = g.dim("past_key_values.0.key", 2)                     # the buffer's capacity
        total = g.op("Reshape", g.op("Cast", "total_sequence_length", to=TensorProto.INT64),
                     g.const([1]))
        start = g.op("Sub", total, S)
        pads = g.op("Concat", g.const([0, 0, 0]), g.op("Sub", T, g.dim("attention_mask", 1)),
                    axis=0)
        mask = g.op("Pad", "attention_mask", pads, g.const(0))
    qpos = g.op("Unsqueeze", g.op("Range", g.scalar(start), g.scalar(g.op("Add", start, S)),
                                  g.const(1)), g.const([1]))      # [S, 1]
    kpos = g.op("Unsqueeze", g.op("Range", g.const(0), g.scalar(T), g.const(1)),
                g.const([0]))                                     # [1, T]
    causal = g.op("LessOrEqual", kpos, qpos)
    pad = g.op("Equal", g.op("Unsqueeze", mask, g.const([1, 2])), g.const(1))
    allowed = g.op("And", causal, pad)                            # [B, 1, S, T]
    if layout == "shared":
        onehot = g.op("Cast", g.op("Equal", kpos, qpos), to=TensorProto.FLOAT)   # [S, T]
        keep = g.op("Reshape", g.op("Sub", g.const(1.0, np.float32),
                                    g.op("ReduceSum", onehot, g.const([0]), keepdims=1)),
                    g.const([-1, 1]))                             # [T, 1]
        scatter = g.op("Transpose", onehot, perm=[1, 0])          # [T, S]

    def heads(t: str, n: int) -> str:
        return g.op("Transpose", g.op("Reshape", t, g.const([0, 0, n, D])), perm=[0, 2, 1, 3])

    def repeat(t: str) -> str:
        t = g.op("Expand", g.op("Unsqueeze", t, g.const([2])), g.const([1, 1, NH // KV, 1, 1]))
        return g.op("Reshape", t, g.const([0, NH, -1, D]))

    for i in range(cfg["layers"]):
        h = g.rms(x)
        q = heads(g.op("MatMul", h, g.init(f"wq{i}", w[f"wq{i}"])), NH)
        kv = []
        for name, kind in ((f"wk{i}", "key"), (f"wv{i}", "value")):
            new = heads(g.op("MatMul", h, g.init(name, w[name])), KV)
            past, present = f"past_key_values.{i}.{kind}", f"present.{i}.{kind}"
            if layout == "growing":
                kv.append(g.op("Concat", past, new, axis=2, out=present))
            else:
                kv.append(g.op("Add", g.op("Mul", past, keep), g.op("MatMul", scatter, new),
                               out=present))
        s = g.op("Mul", g.op("MatMul", q, g.op("Transpose", repeat(kv[0]), perm=[0, 1, 3, 2])),
                 g.const(1 / np.sqrt(D), np.float32))
        p = g.op("Softmax", g.op("Where", allowed, s, g.const(NEG, np.float32)), axis=-1)
        a = g.op("Reshape", g.op("Transpose", g.op("MatMul", p, repeat(kv[1])),
                                 perm=[0, 2, 1, 3]), g.const([0, 0, NH * D]))
        x = g.op("Add", x, g.op("MatMul", a, g.init(f"wo{i}", w[f"wo{i}"])))
        m = g.op("Relu", g.op("MatMul", g.rms(x), g.init(f"w1{i}", w[f"w1{i}"])))
        x = g.op("Add", x, g.op("MatMul", m, g.init(f"w2{i}", w[f"w2{i}"])))
    g.op("MatMul", g.rms(x), g.init("lm", w["lm"]), out="logits")

    return _finish(g, layout, cfg)


def _gqa_model(g: _Graph, x: str, w: dict[str, np.ndarray],
               cfg: dict[str, int], window: int = 0) -> onnx.ModelProto:
    """The same model with com.microsoft::GroupQueryAttention over a shared KV buffer;
    ``seqlens_k`` and ``total_sequence_length`` computed from ``attention_mask`` inside the
    graph, as onnxruntime-genai's builder does. ``window`` > 0: layer 0 attends a local
    window over a window-sized cache (``sliding_window_cache``), as the builder writes
    Gemma-2's local layers."""
    NH, KV, D = cfg["heads"], cfg["kv_heads"], cfg["head"]
    summed = g.op("ReduceSum", "attention_mask", g.const([1]), keepdims=0)
    seqlens = g.op("Cast", g.op("Sub", summed, g.const(1)), to=TensorProto.INT32)
    total = g.op("Cast", g.scalar(g.dim("attention_mask", 1)), to=TensorProto.INT32)
    for i in range(cfg["layers"]):
        h = g.rms(x)
        q, k, v = (g.op("MatMul", h, g.init(f"{n}{i}", w[f"{n}{i}"])) for n in ("wq", "wk", "wv"))
        outs = [f"attn{i}", f"present.{i}.key", f"present.{i}.value"]
        g.nodes.append(helper.make_node(
            "GroupQueryAttention", [q, k, v, f"past_key_values.{i}.key",
                                    f"past_key_values.{i}.value", seqlens, total],
            outs, name=f"gqa{i}", domain="com.microsoft", num_heads=NH, kv_num_heads=KV,
            scale=float(1 / np.sqrt(D)),
            **({"local_window_size": window, "sliding_window_cache": 1}
               if window > 0 and i == 0 else {})))
        x = g.op("Add", x, g.op("MatMul", outs[0], g.init(f"wo{i}", w[f"wo{i}"])))
        m = g.op("Relu", g.op("MatMul", g.rms(x), g.init(f"w1{i}", w[f"w1{i}"])))
        x = g.op("Add", x, g.op("MatMul", m, g.init(f"w2{i}", w[f"w2{i}"])))
    g.op("MatMul", g.rms(x), g.init("lm", w["lm"]), out="logits")
    return _finish(g, "gqa", cfg, window)


def _finish(g: _Graph, layout: str, cfg: dict[str, int], window: int = 0) -> onnx.ModelProto:
    KV, D = cfg["kv_heads"], cfg["head"]
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    cap = "past_sequence_length" if layout == "growing" else "max_seq_len"
    inputs = [helper.make_tensor_value_info("input_ids", i64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", i64, ["batch", "total"]),
              helper.make_tensor_value_info("position_ids", i64, ["batch", "seq"])]
    if layout == "shared":
        inputs += [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
                   helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32,
                                                 [])]
    outputs = [helper.make_tensor_value_info("logits", f, ["batch", "seq", cfg["vocab"]])]
    present_len = "total" if layout == "growing" else cap
    for i in range(cfg["layers"]):
        # a window-sized cache has its own length (the builder's past_sliding_length)
        rows = "past_sliding_length" if window > 0 and i == 0 else cap
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", f,
                                                        ["batch", KV, rows, D]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kind}", f,
                ["batch", KV, rows if rows != cap else present_len, D]))
    graph = helper.make_graph(g.nodes, "tiny_decoder", inputs, outputs, g.inits)
    opsets = [helper.make_opsetid("", 17)]
    if layout == "gqa":
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def genai_config(layout: str = "growing", cfg: dict[str, int] = CFG, *, eos: Any = 47,
                 pad: int = 0, provider: str | None = None, window: int = 0,
                 cache_slack: int = 0, **search: Any) -> dict[str, Any]:
    """genai_config.json for :func:`build_model`, as onnxruntime-genai's builder lays it out."""
    config = {"model": {
        "bos_token_id": 1, "context_length": cfg["positions"], "eos_token_id": eos,
        "pad_token_id": pad, "type": "qwen2", "vocab_size": cfg["vocab"],
        "decoder": {
            "filename": "model.onnx", "head_size": cfg["head"],
            "hidden_size": cfg["hidden"], "num_attention_heads": cfg["heads"],
            "num_hidden_layers": cfg["layers"], "num_key_value_heads": cfg["kv_heads"],
            "session_options": {"log_id": "onnxruntime-genai", "provider_options":
                                [{provider: {}}] if provider else []},
            "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                       "position_ids": "position_ids",
                       "past_key_names": "past_key_values.%d.key",
                       "past_value_names": "past_key_values.%d.value"},
            "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                        "present_value_names": "present.%d.value"}}},
        "search": {"do_sample": False, "max_length": cfg["positions"], "num_beams": 1,
                   "temperature": 1.0, "top_k": 50, "top_p": 1.0,
                   "past_present_share_buffer": layout != "growing", **search}}
    if window > 0:
        config["model"]["decoder"]["sliding_window"] = {
            "window_size": window, "slide_key_value_cache": False, "slide_inputs": False,
            "layers": [0], "cache_slack": cache_slack}
    return config


def write_folder(folder: Path, layout: str = "growing", seed: int = 0,
                 **config: Any) -> dict[str, np.ndarray]:
    """Write model.onnx and genai_config.json into ``folder``; the weights."""
    folder.mkdir(parents=True, exist_ok=True)
    w = weights(seed=seed)
    onnx.save(build_model(w, layout, window=config.get("window", 0)),
              str(folder / "model.onnx"))
    (folder / "genai_config.json").write_text(json.dumps(genai_config(layout, **config),
                                                         indent=2))
    return w
