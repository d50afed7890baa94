#!/usr/bin/env python3
"""cpu_reference vs onnxruntime CPU vs onnx.reference.ReferenceEvaluator on LLM-shaped models.

Workloads, all built with ``onnx.helper`` (random seeded weights, nothing downloaded, no torch):

- ``decoder``: a Qwen2-shaped decoder in standard ai.onnx ops, built by
  ``../shared/bench/qwen_decode.py`` (RMSNorm from primitives, rotary, GQA by Expand,
  MatMul/Softmax attention, SwiGLU, tied lm_head); a prefill chunk of ``seq`` tokens
  (causal mask) or one decode step over a ``past``-token cache.
- ``int4``: the same decoder as onnxruntime-genai's builder writes it for int4 CPU:
  ``GatherBlockQuantized`` embedding, ``SimplifiedLayerNormalization`` /
  ``SkipSimplifiedLayerNormalization``, ``MatMulNBits`` projections (4 bits, block 32, with
  zero points, ``accuracy_level`` 4), ``GroupQueryAttention`` with rotary caches, int4
  lm_head; one decode step.
- ``encoder``: BERT-like post-LN encoder layers (``benchmarks/cpu_reference.py``'s builder).

Presets: ``small`` (tiny shapes, CI-fast), ``125m`` (a 125M-parameter Qwen2-like decoder: a
16-token prefill chunk in float32, an int4 decode step, BERT-base encoder 2 layers, seq 128)
and ``0.5b`` (Qwen2.5-0.5B shapes: hidden 896, 24 layers, 14/2 heads, intermediate 4864,
vocab 151936; a float16 decode step and an int4 decode step).

Timing: sessions are built untimed, then one warm-up call each (its outputs are compared with
onnxruntime's), then ``--repeat`` calls per engine, interleaved round by round; medians (and
mins) per call, and the ratios ours/ORT and ours/RefEval. ReferenceEvaluator has no
com.microsoft kernels: it is left out of the int4 workload. onnxruntime runs with its default
intra-op threads (every core); numpy's BLAS threads follow ``--threads`` when given.

    python benchmarks/reference_speed.py --preset small
    python benchmarks/reference_speed.py --preset 125m --workloads decoder,encoder
    python benchmarks/reference_speed.py --preset 0.5b --workloads int4 --profile
"""

from __future__ import annotations

import os
import sys

if "--threads" in sys.argv:        # before numpy loads its BLAS
    _n = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _n

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

_HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(_HERE), str(_HERE.parent.parent / "shared" / "bench")]

from common import profile_runs  # noqa: E402
from cpu_reference import agreement, build_encoder, measure  # noqa: E402

ENGINES = ("onnx-ep", "onnxruntime", "RefEval")
MS = "com.microsoft"
BLOCK, BITS = 32, 4

QWEN_05B = dict(hidden=896, layers=24, heads=14, kv_heads=2, head_dim=64, inter=4864,
                vocab=151936)
QWEN_125M = dict(hidden=768, layers=12, heads=12, kv_heads=4, head_dim=64, inter=2048,
                 vocab=32000)
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, inter=128, vocab=256)

#: preset -> workload -> how to build it
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "small": {"decoder": dict(cfg=TINY, dtype="float32", seq=16, past=16),
              "int4": dict(cfg=TINY, past=16),
              "encoder": dict(layers=2, hidden=128, heads=4, ffn=512, seq=32)},
    "125m": {"decoder": dict(cfg=QWEN_125M, dtype="float32", seq=16, past=32),
             "int4": dict(cfg=QWEN_125M, past=32),
             "encoder": dict(layers=2, hidden=768, heads=12, ffn=3072, seq=128)},
    "0.5b": {"decoder": dict(cfg=QWEN_05B, dtype="float16", seq=1, past=64),
             "int4": dict(cfg=QWEN_05B, past=64),
             "encoder": dict(layers=2, hidden=896, heads=14, ffn=4864, seq=128)},
}


# --------------------------------------------------------------------------- models
def standard_decoder(cfg: dict[str, int], dtype: str, seq: int,
                     past: int) -> tuple[Any, dict[str, np.ndarray]]:
    import qwen_decode as qd  # ../shared/bench: builds without torch
    dt = np.dtype(dtype)
    w = qd.make_weights(cfg, 0, dt)
    model = qd.build_model(cfg, w, mask=seq > 1)
    return qd.source(model), qd.make_feeds(cfg, dt, 1, seq, past, 0)


def quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[K, N] float32 -> MatMulNBits' B [N, K/32, 16] uint8, scales [N * K/32] float32 and
    packed uint8 zero points [N, ceil(K/64)]: asymmetric, as onnxruntime's quantizer."""
    k, n = w.shape
    blocks = w.T.reshape(n, k // BLOCK, BLOCK)
    lo, hi = np.minimum(blocks.min(-1), 0), np.maximum(blocks.max(-1), 0)
    scale = np.where(hi > lo, (hi - lo) / 15, 1.0).astype(np.float32)
    zp = np.clip(np.round(-lo / scale), 0, 15).astype(np.uint8)
    q = np.clip(np.round(blocks / scale[..., None]) + zp[..., None], 0, 15).astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    zp_pad = np.concatenate([zp, np.zeros((n, zp.shape[1] % 2), np.uint8)], axis=1)
    zp_packed = (zp_pad[:, 0::2] | (zp_pad[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale.reshape(-1), zp_packed


def int4_decoder(cfg: dict[str, int], past: int) -> tuple[onnx.ModelProto,
                                                            dict[str, np.ndarray]]:
    """One decode step in onnxruntime-genai's int4 CPU layout (see the module docstring)."""
    H, L, NH, KV, D, FF, V = (cfg[k] for k in ("hidden", "layers", "heads", "kv_heads",
                                               "head_dim", "inter", "vocab"))
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def init(name: str, a: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(a, name))
        return name

    def op(kind: str, inputs: list[str], outs: list[str] | str | None = None,
           domain: str = "", **attrs: Any) -> str:
        name = f"{kind}_{len(nodes)}"
        outs = [outs] if isinstance(outs, str) else (outs or [name])
        nodes.append(helper.make_node(kind, inputs, outs, name=name, domain=domain, **attrs))
        return outs[0]

    def linear(x: str, name: str, k: int, n: int, bias: bool = False) -> str:
        b, s, z = quantize((rng.standard_normal((k, n), np.float32) / math.sqrt(k)))
        y = op("MatMulNBits", [x, init(name + ".qweight", b), init(name + ".scales", s),
                               init(name + ".qzeros", z)], domain=MS, K=k, N=n, bits=BITS,
               block_size=BLOCK, accuracy_level=4)
        if bias:
            y = op("Add", [y, init(name + ".bias", 0.02 * rng.standard_normal(n, np.float32))])
        return y

    def norm(name: str) -> str:
        return init(name, (1 + 0.1 * rng.standard_normal(H, np.float32)))

    emb, emb_s, emb_z = quantize(rng.standard_normal((V, H), np.float32).T.copy())
    x = op("GatherBlockQuantized", [init("embed.qweight", emb.reshape(V, -1)), "input_ids",
                                    init("embed.scales", emb_s.reshape(V, -1)),
                                    init("embed.qzeros", emb_z)], domain=MS,
           gather_axis=0, quantize_axis=1, block_size=BLOCK, bits=BITS)
    one = init("one", np.array([1], np.int64))
    mask_sum = op("ReduceSum", ["attention_mask", one], keepdims=0)
    seqlens = op("Cast", [op("Sub", [mask_sum, one])], to=TensorProto.INT32)
    total = op("Cast", [op("Squeeze", [op("Shape", ["attention_mask"], start=1, end=2),
                                       init("zero", np.array([0], np.int64))])],
               to=TensorProto.INT32)
    inv = 1.0 / 1e6 ** (np.arange(0, D, 2) / D)
    ang = np.arange(past + 64)[:, None] * inv[None, :]
    cos, sin = init("cos_cache", np.cos(ang).astype(np.float32)), \
        init("sin_cache", np.sin(ang).astype(np.float32))
    h = op("SimplifiedLayerNormalization", [x, norm("l0.ln1")], epsilon=1e-6, axis=-1)
    res, down = x, ""
    for i in range(L):
        p = f"l{i}."
        if i:
            h, res = op("SkipSimplifiedLayerNormalization", [res, down, norm(p + "ln1")],
                        [f"{p}h1", "", "", f"{p}r1"], domain=MS, epsilon=1e-6), f"{p}r1"
        q, k, v = (linear(h, p + n, H, c * D, bias=True)
                   for n, c in (("q", NH), ("k", KV), ("v", KV)))
        attn = op("GroupQueryAttention",
                  [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens,
                   total, cos, sin], [f"{p}attn", f"present.{i}.key", f"present.{i}.value"],
                  domain=MS, num_heads=NH, kv_num_heads=KV, do_rotary=1,
                  scale=float(1 / math.sqrt(D)))
        o = linear(attn, p + "o", NH * D, H)
        h, res = op("SkipSimplifiedLayerNormalization", [res, o, norm(p + "ln2")],
                    [f"{p}h2", "", "", f"{p}r2"], domain=MS, epsilon=1e-6), f"{p}r2"
        g = linear(h, p + "gate", H, FF)
        m = op("Mul", [op("Mul", [g, op("Sigmoid", [g])]), linear(h, p + "up", H, FF)])
        down = linear(m, p + "down", FF, H)
    h = op("SkipSimplifiedLayerNormalization", [res, down, norm("norm")], ["final", "", "",
                                                                           "final_res"],
           domain=MS, epsilon=1e-6)
    nodes.append(helper.make_node(
        "MatMulNBits", [h, "embed.qweight.lm", "embed.scales", "embed.qzeros"], ["logits"],
        name="lm_head", domain=MS, K=H, N=V, bits=BITS, block_size=BLOCK, accuracy_level=4))
    init("embed.qweight.lm", emb)           # tied: the embedding's codes in MatMulNBits' shape
    vi = helper.make_tensor_value_info
    ins = [vi("input_ids", TensorProto.INT64, ["batch", "seq"]),
           vi("attention_mask", TensorProto.INT64, ["batch", "total"])]
    outs = [vi("logits", TensorProto.FLOAT, ["batch", "seq", V])]
    for i in range(L):
        for kind in ("key", "value"):
            ins.append(vi(f"past_key_values.{i}.{kind}", TensorProto.FLOAT,
                          ["batch", KV, "past", D]))
            outs.append(vi(f"present.{i}.{kind}", TensorProto.FLOAT, ["batch", KV, "total", D]))
    graph = helper.make_graph(nodes, "int4_decoder", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(MS, 1)], ir_version=10)
    feeds = {"input_ids": np.array([[42]], np.int64),
             "attention_mask": np.ones((1, past + 1), np.int64)}
    frng = np.random.default_rng(1)
    for i in range(L):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = frng.standard_normal(
                (1, KV, past, D), np.float32)
    return model, feeds


def encoder(layers: int, hidden: int, heads: int, ffn: int,
            seq: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    return build_encoder(layers=layers, hidden=hidden, heads=heads, ffn=ffn, seq=seq)


def build(name: str, spec: dict[str, Any]) -> tuple[Any, dict[str, np.ndarray], str]:
    """(model or path, feeds, title) of one workload."""
    if name == "decoder":
        cfg = spec["cfg"]
        what = (f"{spec['seq']}-token prefill" if spec["seq"] > 1 else "decode step")
        src, feeds = standard_decoder(cfg, spec["dtype"], spec["seq"], spec["past"])
        return src, feeds, (f"decoder {spec['dtype']} h{cfg['hidden']} x{cfg['layers']}, "
                            f"{what}, past {spec['past']}")
    if name == "int4":
        cfg = spec["cfg"]
        model, feeds = int4_decoder(cfg, spec["past"])
        return model, feeds, (f"int4 decoder h{cfg['hidden']} x{cfg['layers']}, decode step, "
                              f"past {spec['past']}")
    model, feeds = encoder(**spec)
    return model, feeds, (f"encoder h{spec['hidden']} x{spec['layers']}, seq {spec['seq']}")


# --------------------------------------------------------------------------- engines
def runners(src: Any, threads: int, with_refeval: bool) -> tuple[dict[str, Callable], dict]:
    """One callable per engine (feeds -> outputs) and each engine's setup seconds."""
    import onnxruntime as ort

    from onnx_ep import Session

    fns: dict[str, Callable] = {}
    setup: dict[str, float] = {}
    t0 = time.perf_counter()
    ours = Session(src, providers=["cpu_reference"])
    setup["onnx-ep"] = time.perf_counter() - t0
    fns["onnx-ep"] = lambda f: ours.run(None, f)
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    # idle onnxruntime workers spinning after a run would take a core from numpy's BLAS
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    t0 = time.perf_counter()
    ort_sess = ort.InferenceSession(src if isinstance(src, str) else src.SerializeToString(),
                                    so, providers=["CPUExecutionProvider"])
    setup["onnxruntime"] = time.perf_counter() - t0
    fns["onnxruntime"] = lambda f: ort_sess.run(None, f)
    if with_refeval:
        from onnx.reference import ReferenceEvaluator
        t0 = time.perf_counter()
        ref = ReferenceEvaluator(src)
        setup["RefEval"] = time.perf_counter() - t0
        fns["RefEval"] = lambda f: ref.run(None, f)
    return fns, setup


def bench(name: str, spec: dict[str, Any], args: Any) -> dict[str, Any]:
    src, feeds, title = build(name, spec)
    print(f"[{name}] {title}: sessions...", file=sys.stderr, flush=True)
    fns, setup = runners(src, args.threads, with_refeval=name != "int4" and not args.no_refeval)
    outs, errors = {}, {}
    for eng, fn in fns.items():
        try:
            outs[eng] = fn(feeds)
        except Exception as exc:            # report it and time the others
            errors[eng] = f"{type(exc).__name__}: {exc}"
    check = agreement(outs["onnx-ep"], outs["onnxruntime"]) if len(
        {"onnx-ep", "onnxruntime"} & set(outs)) == 2 else None
    print(f"[{name}] timing {', '.join(outs)}...", file=sys.stderr, flush=True)
    rows = measure({e: (lambda fn=fn: fn(feeds)) for e, fn in fns.items() if e in outs},
                   args.repeat, args.max_seconds)
    if args.profile:
        print(f"===== cProfile of onnx-ep on {name} =====", file=sys.stderr)
        print(profile_runs(src if not isinstance(src, str) else onnx.load(src), feeds, 2, 25),
              file=sys.stderr)
    return {"title": title, "rows": rows, "setup_s": setup, "errors": errors, "check": check}


def report(results: dict[str, Any]) -> str:
    lines = ["| workload | onnx-ep ms | onnxruntime ms | RefEval ms | ours/ORT | ours/RefEval "
             "| max err vs ORT (of max abs) |", "|---|---:|---:|---:|---:|---:|---|"]
    for res in results.values():
        rows = res["rows"]
        cells = [f"{rows[e]['median_ms']:.1f}" if e in rows else "-" for e in ENGINES]
        ours = rows.get("onnx-ep")
        ratios = [f"{ours['median_ms'] / rows[e]['median_ms']:.2f}x" if ours and e in rows
                  else "-" for e in ("onnxruntime", "RefEval")]
        c = res["check"]
        err = "-" if c is None else f"{c.get('max_abs_over_max_ref', float('nan')):.1e}"
        lines.append(f"| {res['title']} | " + " | ".join(cells + ratios + [err]) + " |")
    for name, res in results.items():
        for eng, why in res["errors"].items():
            lines.append(f"\n{name}: {eng} failed: {why}")
        lines.append(f"\n{name}: setup s " + ", ".join(f"{e} {s:.1f}"
                                                       for e, s in res["setup_s"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--workloads", default="decoder,int4,encoder",
                    help="comma-separated subset of decoder,int4,encoder")
    ap.add_argument("--repeat", type=int, default=7, help="timed calls per engine (7)")
    ap.add_argument("--max-seconds", type=float, default=30.0,
                    help="stop timing an engine after this long, with >= 3 calls (30)")
    ap.add_argument("--threads", type=int, default=0,
                    help="onnxruntime intra-op threads and numpy BLAS threads (0: defaults)")
    ap.add_argument("--no-refeval", action="store_true", help="leave ReferenceEvaluator out")
    ap.add_argument("--profile", action="store_true",
                    help="also print a cProfile of two onnx-ep runs per workload (stderr)")
    args = ap.parse_args(argv)
    preset = PRESETS[args.preset]
    results = {n: bench(n, preset[n], args) for n in args.workloads.split(",")}
    print(f"preset {args.preset}, {os.cpu_count()} CPUs, medians of up to {args.repeat} "
          f"interleaved calls\n")
    print(report(results))
    return 1 if any("onnx-ep" in r["errors"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
