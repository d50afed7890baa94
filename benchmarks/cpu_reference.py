#!/usr/bin/env python3
"""cpu_reference vs onnxruntime CPU vs onnx.reference.ReferenceEvaluator, one run, three models.

Models, all built here with ``onnx.helper`` (opset 17, random weights, seed 0):

(a) ``encoder``: a post-LayerNorm transformer encoder with BERT-base shapes
    (hidden 768, 12 heads, FFN 3072, GELU via Erf, additive attention mask),
    batch 1, seq 128. ``--layers`` (default 2, to keep the run short; BERT-base
    has 12) sets the depth: every layer is the same nodes on the same shapes,
    so the cost per layer is constant and the total scales linearly.
(b) ``resnet``: a ResNet-18-style conv stack on a 1x3x224x224 image: stem
    Conv 7x7/2 + BatchNormalization + Relu + MaxPool 3x3/2, then basic blocks
    (Conv+BN+Relu, Conv+BN, residual Add, Relu) 64, 64, 128/2 (1x1 projection),
    128, then GlobalAveragePool, Flatten, Gemm to 1000 classes.
(c) ``decoder``: one decode step of a 4-layer pre-LN decoder, hidden 512,
    8 heads, FFN 2048, vocabulary 4096, with a KV cache: per layer
    ``past_key_i``/``past_value_i`` [1, 8, 128, 64] are Concat'ed with the new
    token's K/V, attention runs over all 129 positions, and the concatenations
    are the ``present_key_i``/``present_value_i`` outputs.

Engines: onnx-ep (``providers=["cpu_reference"]``); onnxruntime CPU with its
default graph optimizations (ORT_ENABLE_ALL), ``intra_op_num_threads`` =
``--threads`` and idle-worker spinning off (``--ort-spinning`` turns it back on:
spinning workers keep a core busy after each run and slow the numpy engines
timed in between); ReferenceEvaluator. cpu_reference's heavy lifting is numpy, whose
BLAS gets the same thread count through OPENBLAS/OMP/MKL_NUM_THREADS, set
before numpy is imported (default: every CPU). ReferenceEvaluator is numpy too,
so it gets the same BLAS threads.

Before timing, every model's outputs are checked: onnx-ep vs onnxruntime must
agree within 1e-3 relative (``|ours - ort| <= 1e-3 * (|ort| + max|ort| * 1e-3)``
elementwise, i.e. rtol 1e-3 with an atol of 1e-6 of the output's scale).

Timing: one warm-up call (plans, allocates), then ``--repeat`` calls per engine,
the engines interleaved round by round so that a changing machine load hits all
of them alike; an engine stops early once its calls pass ``--max-seconds`` (at
least 3 calls). Median and min wall ms per call are reported, with ours/ORT and
ours/RefEval ratios of the medians and of the mins (below 1: onnx-ep is faster;
the verdicts use the mins, which other load on the machine disturbs least); ``--json``
also has each engine's median process CPU ms per call (all threads, spinning
included). The exit status is 1 when onnx-ep fails or disagrees with onnxruntime.

Targets (from the issue): never slower than ReferenceEvaluator on any model;
within 4x of onnxruntime on the encoder.

Usage::

    python benchmarks/cpu_reference.py [--layers 2] [--threads N] [--repeat 10]
        [--models encoder,resnet,decoder] [--json] [--profile]
"""

from __future__ import annotations

import os
import sys


def _threads_from_argv(argv: list[str]) -> int:
    """``--threads`` must act before numpy loads its BLAS, so it is read here first."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--threads="):
            return int(a.split("=", 1)[1])
    return os.cpu_count() or 1


THREADS = _threads_from_argv(sys.argv[1:])
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(THREADS)

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from common import commit_id, profile_runs  # noqa: E402

OPSET = 17
IR_VERSION = 9
#: the issue's targets
TARGET_VS_ORT_ENCODER = 4.0
RTOL = 1e-3

ENGINES = ("onnx-ep", "onnxruntime", "RefEval")


# --------------------------------------------------------------------------- model building
class _Builder:
    """Nodes and initializers; every output is named after its node."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._shared: set[str] = set()

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def shared(self, name: str, value: np.ndarray) -> str:
        """A constant every layer reads: added on first use."""
        if name not in self._shared:
            self._shared.add(name)
            self.const(name, value)
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, name: str, inputs: list[str], n_out: int = 1,
           outputs: list[str] | None = None, **attrs: Any) -> str:
        outs = outputs or ([f"{name}:0"] if n_out == 1 else [f"{name}:{i}" for i in range(n_out)])
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0]

    def linear(self, p: str, x: str, d_in: int, d_out: int) -> str:
        w = self.weight(f"{p}.weight", (d_in, d_out), 1.0 / math.sqrt(d_in))
        b = self.weight(f"{p}.bias", (d_out,), 0.02)
        return self.op("Add", f"{p}/add", [self.op("MatMul", f"{p}/matmul", [x, w]), b])

    def layer_norm(self, p: str, x: str, d: int) -> str:
        g = self.const(f"{p}.weight", (1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32))
        b = self.const(f"{p}.bias", (0.1 * self.rng.standard_normal(d)).astype(np.float32))
        return self.op("LayerNormalization", p, [x, g, b], axis=-1, epsilon=1e-5)

    def gelu(self, p: str, x: str) -> str:
        """0.5 * x * (1 + erf(x / sqrt 2)), as exporters spell it before opset 20."""
        sqrt2 = self.shared("const.sqrt2", np.array(math.sqrt(2), np.float32))
        one = self.shared("const.one", np.array(1, np.float32))
        half = self.shared("const.half", np.array(0.5, np.float32))
        e = self.op("Erf", f"{p}/erf", [self.op("Div", f"{p}/div", [x, sqrt2])])
        m = self.op("Mul", f"{p}/mul", [x, self.op("Add", f"{p}/add1", [e, one])])
        return self.op("Mul", f"{p}/half", [m, half])

    def model(self, name: str, inputs: list[onnx.ValueInfoProto],
              outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, producer_name="benchmarks/cpu_reference")
        onnx.checker.check_model(m)
        return m


def _attention(b: _Builder, p: str, q: str, k: str, v: str, heads: int, d_head: int,
               mask: str | None) -> str:
    """Multi-head attention on [B, S, H*Dh] projections -> context [B, S, H*Dh]."""
    hs = b.shared("const.heads_shape", np.array([0, 0, heads, d_head], np.int64))
    scale = b.shared("const.attn_scale", np.array(1 / math.sqrt(d_head), np.float32))
    ms = b.shared("const.model_shape", np.array([0, 0, heads * d_head], np.int64))
    qh = b.op("Transpose", f"{p}/q_t", [b.op("Reshape", f"{p}/q_r", [q, hs])], perm=[0, 2, 1, 3])
    kt = b.op("Transpose", f"{p}/k_t", [b.op("Reshape", f"{p}/k_r", [k, hs])], perm=[0, 2, 3, 1])
    vh = b.op("Transpose", f"{p}/v_t", [b.op("Reshape", f"{p}/v_r", [v, hs])], perm=[0, 2, 1, 3])
    s = b.op("Mul", f"{p}/scale", [b.op("MatMul", f"{p}/qk", [qh, kt]), scale])
    if mask is not None:
        s = b.op("Add", f"{p}/mask", [s, mask])
    probs = b.op("Softmax", f"{p}/softmax", [s], axis=-1)
    ctx = b.op("Transpose", f"{p}/ctx_t", [b.op("MatMul", f"{p}/pv", [probs, vh])],
               perm=[0, 2, 1, 3])
    return b.op("Reshape", f"{p}/merge", [ctx, ms])


def build_encoder(layers: int = 2, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                  seq: int = 128, batch: int = 1) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """BERT-style post-LN encoder layers on hidden states (embeddings left out)."""
    b = _Builder(0)
    x, d_head = "hidden_states", hidden // heads
    for i in range(layers):
        p = f"layer{i}"
        q, k, v = (b.linear(f"{p}/attn/{n}", x, hidden, hidden) for n in "qkv")
        ctx = _attention(b, f"{p}/attn", q, k, v, heads, d_head, "attention_mask")
        x = b.layer_norm(f"{p}/ln1", b.op("Add", f"{p}/attn/residual",
                                          [x, b.linear(f"{p}/attn/out", ctx, hidden, hidden)]),
                         hidden)
        h = b.gelu(f"{p}/ffn/gelu", b.linear(f"{p}/ffn/fc1", x, hidden, ffn))
        x = b.layer_norm(f"{p}/ln2", b.op("Add", f"{p}/ffn/residual",
                                          [x, b.linear(f"{p}/ffn/fc2", h, ffn, hidden)]),
                         hidden)
    b.op("Identity", "output", [x], outputs=["last_hidden_state"])
    model = b.model(
        "bert_base_encoder",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [batch, seq, hidden]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [batch, 1, 1, seq])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       [batch, seq, hidden])])
    rng = np.random.default_rng(1)
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    mask[..., seq - seq // 8:] = -10000.0      # BERT's padding mask: the last 1/8 is padding
    feeds = {"hidden_states": rng.standard_normal((batch, seq, hidden)).astype(np.float32),
             "attention_mask": mask}
    return model, feeds


def build_resnet(image: int = 224, classes: int = 1000) -> tuple[onnx.ModelProto,
                                                                 dict[str, np.ndarray]]:
    """ResNet-18-style: stem, four basic blocks (64, 64, 128/2, 128), pool, Gemm."""
    b = _Builder(0)

    def conv_bn(p: str, x: str, c_in: int, c_out: int, k: int, stride: int,
                relu: bool) -> str:
        w = b.weight(f"{p}.weight", (c_out, c_in, k, k), math.sqrt(2.0 / (c_in * k * k)))
        y = b.op("Conv", f"{p}/conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                 pads=[k // 2] * 4)
        scale = b.const(f"{p}.bn.scale",
                        (1 + 0.1 * b.rng.standard_normal(c_out)).astype(np.float32))
        bias = b.const(f"{p}.bn.bias", (0.1 * b.rng.standard_normal(c_out)).astype(np.float32))
        mean = b.const(f"{p}.bn.mean", (0.1 * b.rng.standard_normal(c_out)).astype(np.float32))
        var = b.const(f"{p}.bn.var", (1 + 0.1 * b.rng.random(c_out)).astype(np.float32))
        y = b.op("BatchNormalization", f"{p}/bn", [y, scale, bias, mean, var], epsilon=1e-5)
        return b.op("Relu", f"{p}/relu", [y]) if relu else y

    def block(p: str, x: str, c_in: int, c_out: int, stride: int) -> str:
        h = conv_bn(f"{p}/c1", x, c_in, c_out, 3, stride, relu=True)
        h = conv_bn(f"{p}/c2", h, c_out, c_out, 3, 1, relu=False)
        skip = x if (c_in == c_out and stride == 1) else \
            conv_bn(f"{p}/down", x, c_in, c_out, 1, stride, relu=False)
        return b.op("Relu", f"{p}/relu", [b.op("Add", f"{p}/residual", [h, skip])])

    x = conv_bn("stem", "image", 3, 64, 7, 2, relu=True)
    x = b.op("MaxPool", "stem/pool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    for i, (c_in, c_out, stride) in enumerate([(64, 64, 1), (64, 64, 1), (64, 128, 2),
                                               (128, 128, 1)]):
        x = block(f"block{i}", x, c_in, c_out, stride)
    x = b.op("Flatten", "flatten", [b.op("GlobalAveragePool", "gap", [x])], axis=1)
    w = b.weight("fc.weight", (classes, 128), 1 / math.sqrt(128))
    fc_b = b.weight("fc.bias", (classes,), 0.02)
    b.op("Gemm", "fc", [x, w, fc_b], outputs=["logits"], transB=1)
    model = b.model("resnet_style",
                    [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                   [1, 3, image, image])],
                    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])])
    feeds = {"image": np.random.default_rng(1).standard_normal((1, 3, image, image))
             .astype(np.float32)}
    return model, feeds


def build_decoder(layers: int = 4, hidden: int = 512, heads: int = 8, ffn: int = 2048,
                  vocab: int = 4096, past: int = 128) -> tuple[onnx.ModelProto,
                                                               dict[str, np.ndarray]]:
    """One decode step (one new token) of a pre-LN decoder with a KV cache."""
    b = _Builder(0)
    d_head = hidden // heads
    tok = b.weight("token_embedding", (vocab, hidden), 1.0)
    x = b.op("Gather", "embed", [tok, "input_ids"], axis=0)            # [1, 1, hidden]
    hs = b.shared("const.heads_shape", np.array([0, 0, heads, d_head], np.int64))
    scale = b.shared("const.attn_scale", np.array(1 / math.sqrt(d_head), np.float32))
    ms = b.shared("const.model_shape", np.array([0, 0, hidden], np.int64))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, vocab])]
    cache = [1, heads, past, d_head]
    rng = np.random.default_rng(1)
    feeds: dict[str, np.ndarray] = {"input_ids": np.array([[42]], np.int64)}
    for i in range(layers):
        p = f"layer{i}"
        h = b.layer_norm(f"{p}/ln1", x, hidden)
        q, k, v = (b.linear(f"{p}/attn/{n}", h, hidden, hidden) for n in "qkv")
        qh = b.op("Transpose", f"{p}/attn/q_t", [b.op("Reshape", f"{p}/attn/q_r", [q, hs])],
                  perm=[0, 2, 1, 3])                                    # [1, H, 1, Dh]
        kh = b.op("Transpose", f"{p}/attn/k_t", [b.op("Reshape", f"{p}/attn/k_r", [k, hs])],
                  perm=[0, 2, 1, 3])
        vh = b.op("Transpose", f"{p}/attn/v_t", [b.op("Reshape", f"{p}/attn/v_r", [v, hs])],
                  perm=[0, 2, 1, 3])
        pk, pv = f"past_key_{i}", f"past_value_{i}"
        kk = b.op("Concat", f"{p}/attn/k_cat", [pk, kh], outputs=[f"present_key_{i}"], axis=2)
        vv = b.op("Concat", f"{p}/attn/v_cat", [pv, vh], outputs=[f"present_value_{i}"],
                  axis=2)                                               # [1, H, past+1, Dh]
        kt = b.op("Transpose", f"{p}/attn/kT", [kk], perm=[0, 1, 3, 2])
        s = b.op("Mul", f"{p}/attn/scale", [b.op("MatMul", f"{p}/attn/qk", [qh, kt]), scale])
        probs = b.op("Softmax", f"{p}/attn/softmax", [s], axis=-1)    # the new token sees all
        ctx = b.op("Transpose", f"{p}/attn/ctx_t", [b.op("MatMul", f"{p}/attn/pv", [probs, vv])],
                   perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", f"{p}/attn/merge", [ctx, ms])
        x = b.op("Add", f"{p}/attn/residual", [x, b.linear(f"{p}/attn/out", ctx, hidden, hidden)])
        h = b.gelu(f"{p}/mlp/gelu", b.linear(f"{p}/mlp/fc1", b.layer_norm(f"{p}/ln2", x, hidden),
                                             hidden, ffn))
        x = b.op("Add", f"{p}/mlp/residual", [x, b.linear(f"{p}/mlp/fc2", h, ffn, hidden)])
        for n in (pk, pv):
            inputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, cache))
            feeds[n] = rng.standard_normal(cache).astype(np.float32)
        for n in (f"present_key_{i}", f"present_value_{i}"):
            outputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT,
                                                         [1, heads, past + 1, d_head]))
    x = b.layer_norm("final_ln", x, hidden)
    head = b.weight("lm_head.weight", (hidden, vocab), 1 / math.sqrt(hidden))
    b.op("MatMul", "lm_head", [x, head], outputs=["logits"])
    return b.model("kv_cache_decoder", inputs, outputs), feeds


# --------------------------------------------------------------------------- engines
def make_runners(model: onnx.ModelProto, threads: int,
                 spinning: bool = False) -> dict[str, Callable[[dict], list]]:
    """One callable per engine (feeds -> outputs); sessions are created here, not timed."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    from onnx_ep import Session

    ours = Session(model, providers=["cpu_reference"])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL   # the default
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    # onnxruntime's idle workers spin for a while after each run; interleaved with
    # the numpy engines in one process, they would steal a core from numpy's BLAS
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    ort_sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    ref = ReferenceEvaluator(model)
    return {"onnx-ep": lambda f: ours.run(None, f),
            "onnxruntime": lambda f: ort_sess.run(None, f),
            "RefEval": lambda f: ref.run(None, f)}


def agreement(a: list[Any], b: list[Any]) -> dict[str, Any]:
    """Worst elementwise error of ``a`` against reference ``b``, in units of rtol 1e-3."""
    worst, max_abs, max_rel = 0.0, 0.0, 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape:
            return {"ok": False, "why": f"shape {x.shape} != {y.shape}"}
        tol = RTOL * (np.abs(y) + 1e-3 * float(np.max(np.abs(y)) or 1.0))
        err = np.abs(x - y)
        worst = max(worst, float(np.max(err / tol)))
        max_abs = max(max_abs, float(np.max(err)))
        max_rel = max(max_rel, float(np.max(err) / (np.max(np.abs(y)) or 1.0)))
    return {"ok": worst <= 1.0, "max_abs": max_abs, "max_abs_over_max_ref": max_rel,
            "worst_over_tolerance": worst}


def measure(fns: dict[str, Callable[[], Any]], repeat: int,
            max_seconds: float) -> dict[str, dict[str, Any]]:
    """Per-call wall (and process CPU) ms, engines interleaved round by round.

    Interleaving spreads a drifting machine load over every engine alike. An
    engine leaves the rounds after ``repeat`` calls, or once its calls add up to
    ``max_seconds`` (with at least 3 calls).
    """
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    active = list(fns)
    while active:
        for eng in list(active):
            c0, t0 = time.process_time(), time.perf_counter()
            fns[eng]()
            wall[eng].append((time.perf_counter() - t0) * 1e3)
            cpu[eng].append((time.process_time() - c0) * 1e3)
            n = len(wall[eng])
            if n >= repeat or (n >= 3 and sum(wall[eng]) > max_seconds * 1e3):
                active.remove(eng)
    return {k: {"median_ms": statistics.median(w), "min_ms": min(w), "calls": len(w),
                "cpu_median_ms": statistics.median(cpu[k])} for k, w in wall.items()}


def bench(name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray], args: Any,
          ) -> dict[str, Any]:
    fns = make_runners(model, args.threads, args.ort_spinning)
    outs: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for eng, fn in fns.items():          # the warm-up call doubles as the correctness check
        print(f"[{name}] {eng}: first run...", file=sys.stderr, flush=True)
        try:
            outs[eng] = fn(feeds)
        except Exception as exc:  # report and go on to the other engines
            errors[eng] = f"{type(exc).__name__}: {exc}"
    check = {}
    if "onnx-ep" in outs and "onnxruntime" in outs:
        check["onnx-ep vs onnxruntime"] = agreement(outs["onnx-ep"], outs["onnxruntime"])
    if "RefEval" in outs and "onnxruntime" in outs:
        check["RefEval vs onnxruntime"] = agreement(outs["RefEval"], outs["onnxruntime"])
    print(f"[{name}] timing {', '.join(outs)}...", file=sys.stderr, flush=True)
    rows = measure({eng: (lambda fn=fn: fn(feeds)) for eng, fn in fns.items() if eng in outs},
                   args.repeat, args.max_seconds)
    return {"nodes": len(model.graph.node), "ops": _op_counts(model), "rows": rows,
            "errors": errors, "check": check}


def _op_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in model.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def profile(model: onnx.ModelProto, feeds: dict[str, np.ndarray], calls: int = 3,
            top: int = 20) -> str:
    """cProfile of onnx-ep: which kernels (and numpy calls under them) take the time."""
    return profile_runs(model, feeds, calls, top, sorts=("tottime", "cumulative"))

def machine(threads: int) -> dict[str, str]:
    commit = commit_id()
    import onnxruntime
    versions = {"python": platform.python_version(), "numpy": np.__version__,
                "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "processor": platform.processor() or platform.machine(), "commit": commit,
            "cpus": str(os.cpu_count()), "threads": str(threads), "load_average": load,
            "command": " ".join(["python", *sys.argv]),
            "versions": ", ".join(f"{k} {v}" for k, v in versions.items())}


def table(results: dict[str, Any], titles: dict[str, str]) -> str:
    lines = ["| model | onnx-ep median / min ms | onnxruntime median / min ms | "
             "RefEval median / min ms | ours/ORT median, min | ours/RefEval median, min | "
             "ours vs ORT max err |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name, res in results.items():
        rows = res["rows"]
        cells = [f"{rows[e]['median_ms']:.1f} / {rows[e]['min_ms']:.1f}" if e in rows else
                 "failed" for e in ENGINES]
        ours = rows.get("onnx-ep")
        ratios = [f"{ours['median_ms'] / rows[e]['median_ms']:.2f}x, "
                  f"{ours['min_ms'] / rows[e]['min_ms']:.2f}x" if ours and e in rows else "-"
                  for e in ("onnxruntime", "RefEval")]
        c = res["check"].get("onnx-ep vs onnxruntime")
        err = ("-" if c is None else
               f"{'ok' if c['ok'] else 'MISMATCH'}, {c['max_abs_over_max_ref']:.1e} of max|y|")
        lines.append(f"| {titles[name]} | " + " | ".join(cells + ratios + [err]) + " |")
    return "\n".join(lines)


def verdicts(results: dict[str, Any]) -> list[str]:
    """Targets judged on the min (least disturbed by other load, as timeit advises)."""
    out = []
    for name, res in results.items():
        rows = res["rows"]
        if "onnx-ep" not in rows:
            out.append(f"{name}: onnx-ep FAILED: {res['errors'].get('onnx-ep')}")
            continue
        ours = rows["onnx-ep"]["min_ms"]
        if "RefEval" in rows:
            ok = ours <= rows["RefEval"]["min_ms"]
            out.append(f"{name}: {'faster' if ok else 'SLOWER'} than ReferenceEvaluator "
                       f"({rows['RefEval']['min_ms'] / ours:.2f}x its speed, min) - target "
                       f"{'met' if ok else 'NOT met'}")
        if name == "encoder" and "onnxruntime" in rows:
            r = ours / rows["onnxruntime"]["min_ms"]
            out.append(f"encoder: {r:.2f}x onnxruntime's time (min; target <= "
                       f"{TARGET_VS_ORT_ENCODER:.0f}x) - target "
                       f"{'met' if r <= TARGET_VS_ORT_ENCODER else 'NOT met'}")
        c = res["check"].get("onnx-ep vs onnxruntime")
        if c is not None and not c["ok"]:
            out.append(f"{name}: onnx-ep output differs from onnxruntime beyond rtol "
                       f"{RTOL}: {c}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=2,
                    help="encoder layers (2; BERT-base has 12, cost scales linearly)")
    ap.add_argument("--threads", type=int, default=THREADS,
                    help="onnxruntime intra-op threads and numpy BLAS threads (all CPUs)")
    ap.add_argument("--ort-spinning", action="store_true",
                    help="let onnxruntime's idle workers spin (its default; off here, since "
                         "spinning workers take a core from the numpy engines run beside it)")
    ap.add_argument("--repeat", type=int, default=10, help="timed calls per engine (10)")
    ap.add_argument("--max-seconds", type=float, default=20.0,
                    help="stop timing an engine after this long, with >= 3 calls (20)")
    ap.add_argument("--models", default="encoder,resnet,decoder",
                    help="comma-separated subset of encoder,resnet,decoder")
    ap.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    ap.add_argument("--profile", action="store_true",
                    help="also print a cProfile of onnx-ep per model (stderr)")
    args = ap.parse_args(argv)
    builders = {"encoder": lambda: build_encoder(layers=args.layers),
                "resnet": build_resnet, "decoder": build_decoder}
    titles = {"encoder": f"(a) encoder, BERT-base shapes, {args.layers} layers, seq 128",
              "resnet": "(b) ResNet-style convs, 1x3x224x224",
              "decoder": "(c) decoder, 4 layers, hidden 512, 1 step, 128-token KV cache"}
    results: dict[str, Any] = {}
    for name in args.models.split(","):
        model, feeds = builders[name]()
        results[name] = bench(name, model, feeds, args)
        if args.profile:
            print(f"===== cProfile of onnx-ep on {name} =====", file=sys.stderr)
            print(profile(model, feeds), file=sys.stderr)
    m = machine(args.threads)
    broken = any("onnx-ep" in r["errors"] or
                 not r["check"].get("onnx-ep vs onnxruntime", {"ok": True})["ok"]
                 for r in results.values())
    if args.json:
        print(json.dumps({"machine": m, "results": results, "verdicts": verdicts(results)},
                         indent=2))
        return 1 if broken else 0
    print(f"{m['date']}, {m['processor']}, {m['cpus']} CPUs, {m['threads']} threads for "
          f"onnxruntime (intra-op) and numpy's BLAS, load average {m['load_average']} (at the "
          f"end), commit {m['commit']}, {m['versions']}")
    print(f"command: {m['command']}\n")
    print(table(results, {k: titles[k] for k in results}))
    print()
    for name, res in results.items():
        print(f"- {name}: {res['nodes']} nodes; calls timed: "
              + ", ".join(f"{e} {r['calls']}" for e, r in res["rows"].items()))
    for line in verdicts(results):
        print(f"- {line}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
