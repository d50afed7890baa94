"""A decoder with a fixed-size KV cache, built with ``onnx.helper``: the shape a captured
decode loop runs (one shape signature for every step, presents fed back as pasts).

Each layer reads ``past_key_i`` / ``past_value_i`` ``[batch, kv_heads, max_len, head_dim]``
and returns ``present_*`` of the same shape with the new token's key and value written at
position ``pos`` (``Where`` over a one-hot of the positions), so a decode loop feeds each
step's presents back as the next step's pasts and every step has the same signature. The
attention masks positions after ``pos``. Standard ai.onnx ops at opset 17: RMSNorm as
Pow/ReduceMean/Add/Sqrt/Div/Mul, grouped-query attention by Expand/Reshape, a SwiGLU MLP.
Random weights with std 1/sqrt(fan_in); nothing is downloaded.

Used by ``tests/providers/cuda/test_capture.py`` (a 64-step loop captured vs eager) and
``benchmarks/decode.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: small enough for a test, the shape of a real decoder
TINY = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16, "inter": 128,
        "vocab": 256, "max_len": 64}
#: Qwen2.5-0.5B's dimensions
QWEN_05B = {"hidden": 896, "layers": 24, "heads": 14, "kv_heads": 2, "head_dim": 64,
            "inter": 4864, "vocab": 151936, "max_len": 256}
OPSET = 17


def build_decoder(cfg: dict[str, int] = TINY, dtype: Any = np.float32,
                  seed: int = 0) -> onnx.ModelProto:
    """One decode step (``input_ids [batch, 1]``, ``pos [1]``, pasts) as a ModelProto."""
    dt = np.dtype(dtype)
    et = helper.np_dtype_to_tensor_dtype(dt)
    rng = np.random.default_rng(seed)
    H, L, NH, KV, D, FF, V, T = (cfg[k] for k in (
        "hidden", "layers", "heads", "kv_heads", "head_dim", "inter", "vocab", "max_len"))
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    consts: dict[Any, str] = {}

    def weight(name: str, fan_in: int, *shape: int) -> str:
        a = (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(fan_in)).astype(dt)
        inits.append(numpy_helper.from_array(a, name))
        return name

    def const(value: Any, dtype: Any = np.int64) -> str:
        a = np.array(value, dtype)
        key = (a.dtype.str, a.shape, a.tobytes())
        if key not in consts:
            consts[key] = f"const_{len(consts)}"
            inits.append(numpy_helper.from_array(a, consts[key]))
        return consts[key]

    def op(kind: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        name = out or f"{kind}_{len(nodes)}"
        nodes.append(helper.make_node(kind, list(inputs), [name], name=name, **attrs))
        return name

    def rms(x: str, w: str) -> str:
        ms = op("ReduceMean", op("Pow", x, const(2, dt)), axes=[-1], keepdims=1)
        return op("Mul", op("Div", x, op("Sqrt", op("Add", ms, const(1e-6, dt)))), w)

    def heads(x: str, n: int) -> str:             # [B,1,n*D] -> [B,n,1,D]
        return op("Transpose", op("Reshape", x, const([0, 0, n, D])), perm=[0, 2, 1, 3])

    def repeat_kv(x: str) -> str:                  # [B,KV,T,D] -> [B,NH,T,D]
        if NH == KV:
            return x
        x = op("Expand", op("Unsqueeze", x, const([2])), const([1, 1, NH // KV, 1, 1]))
        return op("Reshape", x, const([0, NH, T, D]))

    positions = const(np.arange(T))
    write = op("Reshape", op("Equal", positions, "pos"), const([1, 1, T, 1]))
    visible = op("Reshape", op("LessOrEqual", positions, "pos"), const([1, 1, 1, T]))
    hidden_min = const(np.finfo(dt).min, dt)
    scale = const(1 / np.sqrt(D), dt)
    x = op("Gather", weight("embed", H, V, H), "input_ids", axis=0)
    for i in range(L):
        h = rms(x, const(np.ones(H), dt))
        q = heads(op("MatMul", h, weight(f"q{i}", H, H, NH * D)), NH)
        k = heads(op("MatMul", h, weight(f"k{i}", H, H, KV * D)), KV)
        v = heads(op("MatMul", h, weight(f"v{i}", H, H, KV * D)), KV)
        k = op("Where", write, k, f"past_key_{i}", out=f"present_key_{i}")
        v = op("Where", write, v, f"past_value_{i}", out=f"present_value_{i}")
        s = op("Mul", op("MatMul", q, op("Transpose", repeat_kv(k), perm=[0, 1, 3, 2])), scale)
        s = op("Where", visible, s, hidden_min)
        a = op("MatMul", op("Softmax", s, axis=-1), repeat_kv(v))
        a = op("Reshape", op("Transpose", a, perm=[0, 2, 1, 3]), const([0, 0, NH * D]))
        x = op("Add", x, op("MatMul", a, weight(f"o{i}", NH * D, NH * D, H)))
        h = rms(x, const(np.ones(H), dt))
        g = op("MatMul", h, weight(f"gate{i}", H, H, FF))
        m = op("Mul", op("Mul", g, op("Sigmoid", g)), op("MatMul", h, weight(f"up{i}", H, H, FF)))
        x = op("Add", x, op("MatMul", m, weight(f"down{i}", FF, FF, H)))
    op("MatMul", rms(x, const(np.ones(H), dt)), weight("lm_head", H, H, V), out="logits")

    vi = helper.make_tensor_value_info
    ins = [vi("input_ids", TensorProto.INT64, ["batch", 1]), vi("pos", TensorProto.INT64, [1])]
    outs = [vi("logits", et, ["batch", 1, V])]
    for i in range(L):
        for kv in ("key", "value"):
            ins.append(vi(f"past_{kv}_{i}", et, ["batch", KV, T, D]))
            outs.append(vi(f"present_{kv}_{i}", et, ["batch", KV, T, D]))
    graph = helper.make_graph(nodes, "static_kv_decoder", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=9, producer_name="onnx_ep.testing.decoder")


def cache_names(cfg: dict[str, int]) -> list[tuple[str, str]]:
    """``(past input, present output)`` pairs in the model's order."""
    return [(f"past_{kv}_{i}", f"present_{kv}_{i}") for i in range(cfg["layers"])
            for kv in ("key", "value")]


def empty_cache(cfg: dict[str, int], dtype: Any = np.float32,
                batch: int = 1) -> dict[str, np.ndarray]:
    """Zeroed pasts for step 0."""
    shape = (batch, cfg["kv_heads"], cfg["max_len"], cfg["head_dim"])
    return {past: np.zeros(shape, dtype) for past, _ in cache_names(cfg)}
