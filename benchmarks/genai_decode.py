#!/usr/bin/env python3
"""Greedy decode of onnxruntime-genai model-builder models on onnx-ep, capture on and off.

For each precision (``--presets int4,fp16``) a random Qwen2 checkpoint (``--preset
qwen0.5b``: Qwen2.5-0.5B's shape, hidden 896, 24 layers, 14/2 heads of 64, intermediate
4864, vocab 151936, tied embeddings; ``tiny``: 64 hidden, 2 layers) is saved with
``save_pretrained`` and built by ``python -m onnxruntime_genai.models.builder -p PREC -e
cuda`` into ``--model-dir``/PREC (``--skip-build`` reuses folders already there). Then,
per folder, batch 1, ``--prompt-len`` random ids, ``--new-tokens`` greedy tokens (the
config's EOS ids dropped, so every run makes all of them):

- onnx-ep on ``--provider`` (``cuda``; ``cpu_reference`` to try the flow on a CPU) with
  ``SessionOptions(capture="auto")`` and ``capture="off"``, each with the generator queuing
  the next greedy step before it waits (``--ahead on``) and, asked for, without (``off``):
  prefill tokens/s, decode ms per token (median and mean of the generator's per-step
  times: with a step in flight, the intervals between tokens), each decode step's capture
  state (``captured`` / ``recorded`` / ``eager`` / ``host``) counted, and the first states;
- onnx-ep ``cpu_reference``'s greedy tokens for the first ``--ref-tokens`` against the
  provider's: the first divergence and the reference's top-2 logit gap there;
- onnxruntime-genai itself on the same folder (``--og``, when importable): decode ms/token;
- ``../shared/bench/qwen_decode.py``'s PyTorch eager and CUDA-graph figures for one decode
  step of the same shape (its own standard-op model, past = ``--prompt-len``), when that
  file and torch import (``--torch``); torch-graph needs CUDA.

    python benchmarks/genai_decode.py --preset qwen0.5b --provider cuda --out r.json
    python benchmarks/genai_decode.py --preset tiny --provider cpu_reference --new-tokens 16 \\
        --prompt-len 16 --ref-tokens 8
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SHAPES = {
    "qwen0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                     num_key_value_heads=2, head_dim=64, intermediate_size=4864,
                     vocab_size=151936, max_position_embeddings=32768),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=256,
                 max_position_embeddings=512),
}
QWEN_DECODE = Path(__file__).resolve().parents[2] / "shared" / "bench" / "qwen_decode.py"


# ------------------------------------------------------------------ building
def save_checkpoint(folder: Path, preset: str, dtype: str, seed: int) -> None:
    """A random Qwen2ForCausalLM of the preset's shape (tied embeddings), saved with
    save_pretrained, plus a WordLevel tokenizer over its vocabulary."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    shape = SHAPES[preset]
    cfg = Qwen2Config(**shape, tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2,
                      initializer_range=0.02 if preset != "tiny" else 0.2)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).to(getattr(torch, dtype)).eval()
    model.save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(shape["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t3"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", bos_token="t1",
                            eos_token="t2", unk_token="t3").save_pretrained(folder)


def build(root: Path, precision: str, preset: str, ep: str, seed: int,
          extra: list[str]) -> Path:
    """``root/precision``, built from ``root/hf-<preset>`` (saved first when missing)."""
    hf = root / f"hf-{preset}"
    if not (hf / "config.json").is_file():
        print(f"saving a random {preset} Qwen2 checkpoint to {hf}", flush=True)
        save_checkpoint(hf, preset, "float16" if preset != "tiny" else "float32", seed)
    out = root / precision
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o",
           str(out), "-p", precision, "-e", ep, "-c", str(root / "cache")]
    if extra:
        cmd += ["--extra_options", *extra]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the builder failed ({precision}):\n{done.stdout[-2000:]}"
                         f"{done.stderr[-4000:]}")
    print(f"  built {out} in {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def graph_ops(folder: Path) -> dict[str, Any]:
    """Op counts and the contrib ops' attributes and input dtypes of a built model."""
    import onnx

    m = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    inits = {t.name: onnx.TensorProto.DataType.Name(t.data_type) for t in m.graph.initializer}
    counts: dict[str, int] = {}
    contrib: dict[str, Any] = {}
    for n in m.graph.node:
        key = f"{n.domain or 'ai.onnx'}::{n.op_type}"
        counts[key] = counts.get(key, 0) + 1
        if n.domain == "com.microsoft" and key not in contrib:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            contrib[key] = {"attributes": {k: v.decode() if isinstance(v, bytes) else v
                                           for k, v in attrs.items()},
                            "initializer_dtypes": sorted({inits[i] for i in n.input
                                                          if i in inits})}
    return {"ops": dict(sorted(counts.items())), "contrib": contrib}


# ------------------------------------------------------------------ running onnx-ep
def greedy(model: Any, prompt: np.ndarray, new: int, logits: bool = False, ahead: bool = True
           ) -> tuple[list[int], list[np.ndarray], Any]:
    """``new`` greedy tokens (EOS ignored); with ``logits`` the logits of every choice;
    ``ahead``: the generator queues each decode step before waiting for the previous."""
    import attrs

    from onnx_ep import genai

    # a random model may well emit its EOS id: the config's EOS ids are dropped (rather
    # than masked through min_length, which would make every step choose on the host
    # from downloaded logits instead of the greedy path a real decode takes)
    model.config = attrs.evolve(model.config, eos_token_ids=())
    params = genai.GeneratorParams(model)
    total = prompt.size + new
    params.set_search_options(max_length=total, min_length=0, do_sample=False,
                              batch_size=1, past_present_share_buffer=True)
    gen = genai.Generator(model, params)
    gen.queue_ahead = ahead
    seen: list[np.ndarray] = []
    try:
        gen.append_tokens(prompt[None, :])
        while not gen.is_done():
            if logits:
                if gen.get_logits() is None:
                    gen._run()            # what generate_next_token would run lazily
                seen.append(gen.get_logits()[0])
            gen.generate_next_token()
        return gen.get_sequence(0)[prompt.size:].tolist(), seen, gen.stats
    finally:
        gen.close()


def timed(folder: Path, provider: str, capture: str, prompt: np.ndarray, new: int,
          warmup: int, ahead: bool = True) -> dict[str, Any]:
    """onnx-ep on ``provider``: prefill and per-decode-step figures of the last of
    ``warmup + 1`` generations (the first ones plan, compile and record)."""
    from onnx_ep import SessionOptions, genai

    t0 = time.perf_counter()
    model = genai.Model(folder, providers=[provider], options=SessionOptions(capture=capture))
    load_s = time.perf_counter() - t0
    for _ in range(warmup):
        greedy(model, prompt, new, ahead=ahead)
    t0 = time.perf_counter()
    tokens, _, stats = greedy(model, prompt, new, ahead=ahead)
    wall = time.perf_counter() - t0
    d = stats.as_dict()
    steps = [s for s in stats.steps if s.kind == "decode"]
    ms = [1e3 * s.seconds for s in steps]
    res = {"provider": provider, "capture_option": capture, "ahead_option": ahead,
           "load_s": round(load_s, 2), "wall_s": round(wall, 4),
           "decode_ahead": d["decode"]["ahead"],
           "placement": model.session.placement_summary(),
           "prefill_tokens_per_s": d["prefill"]["tokens_per_s"],
           "prefill_ms": 1e3 * d["prefill"]["seconds"],
           "decode_ms_median": statistics.median(ms) if ms else float("nan"),
           "decode_ms_mean": statistics.fmean(ms) if ms else float("nan"),
           "decode_tokens_per_s": d["decode"]["tokens_per_s"],
           "decode_steps": len(steps), "decode_capture": d["decode"]["capture"],
           "decode_signatures": d["decode"]["signatures"],
           "first_states": [s.capture for s in steps[:6]],
           "decode_ms": [round(m, 4) for m in ms], "tokens": tokens}
    model.close()
    return res


def versus_reference(folder: Path, prompt: np.ndarray, tokens: list[int], n: int
                     ) -> dict[str, Any]:
    """cpu_reference teacher-forced on the provider's first ``n`` greedy tokens: at each
    step the reference's logits are computed, its argmax compared with the provider's
    token, and the provider's token appended (so one tie cannot end the comparison).

    ``agree``: steps where the argmax is the provider's token; ``ties``: steps where it is
    not, but the reference scores the provider's token equal to its maximum (an exact tie:
    either token is the greedy answer); ``deficits``: the other steps, with how far below
    the reference's maximum the provider's token scored there (logit units).
    """
    from onnx_ep import genai

    model = genai.Model(folder, providers=["cpu_reference"])
    t0 = time.perf_counter()
    params = genai.GeneratorParams(model)
    total = prompt.size + n
    params.set_search_options(max_length=total, min_length=total, do_sample=False,
                              batch_size=1, past_present_share_buffer=True)
    gen = genai.Generator(model, params)
    agree, ties, deficits, scale = 0, 0, [], 0.0
    try:
        gen.append_tokens(prompt[None, :])
        for i, tok in enumerate(tokens[:n]):
            lg = np.asarray(gen.get_logits()[0], np.float64)
            scale = max(scale, float(np.abs(lg).max()))
            top = int(np.argmax(lg))
            if top == tok:
                agree += 1
            elif lg[tok] == lg[top]:
                ties += 1
            else:
                deficits.append({"step": i, "reference": top, "provider": tok,
                                 "deficit": float(lg[top] - lg[tok])})
            if i + 1 < n:
                gen.append_tokens([[tok]])
    finally:
        gen.close()
        model.close()
    return {"tokens": n, "reference_s": round(time.perf_counter() - t0, 1),
            "agree": agree, "ties": ties, "deficits": deficits,
            "equal": agree == n, "logit_scale": scale}


# ------------------------------------------------------------------ the others
def onnxruntime_genai(folder: Path, prompt: np.ndarray, new: int) -> dict[str, Any]:
    """onnxruntime-genai itself (its genai_config.json providers), greedy, EOS masked."""
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    runs = []
    for _ in range(2):                    # the first one warms up
        params = og.GeneratorParams(model)
        total = prompt.size + new
        params.set_search_options(max_length=total, min_length=total, do_sample=False)
        gen = og.Generator(model, params)
        t0 = time.perf_counter()
        gen.append_tokens(prompt.tolist())
        t1 = time.perf_counter()
        ms = []
        while not gen.is_done():
            t = time.perf_counter()
            gen.generate_next_token()
            ms.append(1e3 * (time.perf_counter() - t))
        runs.append((t1 - t0, ms, [int(x) for x in gen.get_sequence(0)[prompt.size:]]))
        del gen
    prefill, ms, tokens = runs[-1]
    ms = ms[1:]                           # its first one runs the prefill's logits
    return {"prefill_tokens_per_s": prompt.size / prefill if prefill else 0.0,
            "decode_ms_median": statistics.median(ms) if ms else float("nan"),
            "decode_ms_mean": statistics.fmean(ms) if ms else float("nan"),
            "tokens": tokens}


def torch_figures(preset: str, dtype: str, past: int, cuda: bool) -> dict[str, Any]:
    """qwen_decode.py's torch-eager (and torch-graph on CUDA) decode step, same shape."""
    spec = importlib.util.spec_from_file_location("qwen_decode", QWEN_DECODE)
    if spec is None or spec.loader is None or not QWEN_DECODE.is_file():
        return {"skipped": f"{QWEN_DECODE} not found"}
    qd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(qd)
    out: dict[str, Any] = {"source": str(QWEN_DECODE)}
    for provider in ("torch-eager", "torch-graph") if cuda else ("torch-eager",):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            try:
                qd.main(["--bench", "--provider", provider, "--preset", preset, "--dtype",
                         dtype, "--past", str(past), "--ref", "none", "--json", path])
                r = json.loads(Path(path).read_text())
                out[provider] = {k: r.get(k) for k in ("median_ms", "mean_ms", "min_ms",
                                                      "device", "torch")}
            except (Exception, SystemExit) as exc:   # noqa: BLE001 - a figure, not a test
                out[provider] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--preset", choices=sorted(SHAPES), default="qwen0.5b",
                    help="model shape (default qwen0.5b)")
    ap.add_argument("--presets", default="int4,fp16",
                    help="builder precisions, comma-separated (default int4,fp16)")
    ap.add_argument("--provider", default="cuda", help="onnx-ep provider (default cuda)")
    ap.add_argument("--ep", default="cuda", help="the builder's -e (default cuda)")
    ap.add_argument("--extra-options", nargs="*", default=[], metavar="KEY=VALUE",
                    help="passed to the builder's --extra_options")
    ap.add_argument("--model-dir", type=Path,
                    help="where the built folders are (<dir>/<precision>); default a temp dir")
    ap.add_argument("--skip-build", action="store_true",
                    help="use <model-dir>/<precision> as they are")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--ref-tokens", type=int, default=64,
                    help="cpu_reference greedy tokens to compare (0: none)")
    ap.add_argument("--captures", default="auto,off",
                    help="SessionOptions.capture values to time (default auto,off)")
    ap.add_argument("--ahead", default="on",
                    help="comma list of on/off: the generator queues each greedy decode step "
                         "before waiting for the previous one (default on)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed generations first")
    ap.add_argument("--og", choices=("auto", "on", "off"), default="auto",
                    help="time onnxruntime-genai on the same folder (auto: when importable)")
    ap.add_argument("--torch", choices=("auto", "on", "off"), default="auto",
                    help="qwen_decode.py's PyTorch figures (auto: when torch imports)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", metavar="JSON", help="write every figure to JSON")
    ns = ap.parse_args(argv)
    if ns.skip_build and ns.model_dir is None:
        ap.error("--skip-build needs --model-dir")
    root = ns.model_dir or Path(tempfile.mkdtemp(prefix="genai_decode_"))
    root.mkdir(parents=True, exist_ok=True)
    vocab = SHAPES[ns.preset]["vocab_size"]
    prompt = np.random.default_rng(ns.seed).integers(3, vocab, ns.prompt_len).astype(np.int64)
    report: dict[str, Any] = {"preset": ns.preset, "provider": ns.provider,
                              "prompt_len": ns.prompt_len, "new_tokens": ns.new_tokens,
                              "model_dir": str(root), "models": {}}
    for precision in [p for p in ns.presets.split(",") if p]:
        folder = root / precision
        if not ns.skip_build:
            folder = build(root, precision, ns.preset, ns.ep, ns.seed, ns.extra_options)
        entry: dict[str, Any] = {"folder": str(folder), **graph_ops(folder), "runs": []}
        report["models"][precision] = entry
        print(f"\n== {precision} ({folder}): "
              + ", ".join(f"{k.split('::')[1]} x{v}" for k, v in entry["ops"].items()
                          if k.startswith("com.microsoft")), flush=True)
        runs = [(c, a) for c in ns.captures.split(",") if c
                for a in ns.ahead.split(",") if a]
        for capture, ahead in runs:
            r = timed(folder, ns.provider, capture, prompt, ns.new_tokens, ns.warmup,
                      ahead == "on")
            entry["runs"].append(r)
            print(f"onnx-ep {ns.provider} capture={capture} ahead={ahead}: prefill "
                  f"{r['prefill_tokens_per_s']:.1f} tok/s ({r['prefill_ms']:.1f} ms), decode "
                  f"median {r['decode_ms_median']:.3f} ms/token, mean "
                  f"{r['decode_ms_mean']:.3f} ({r['decode_steps']} steps, {r['decode_ahead']} "
                  f"queued ahead; {r['decode_capture']}; first {r['first_states']}; "
                  f"signatures {r['decode_signatures']}; generation wall {r['wall_s']} s); "
                  f"placement {r['placement']}", flush=True)
        if ns.ref_tokens and entry["runs"]:
            v = versus_reference(folder, prompt, entry["runs"][0]["tokens"],
                                 min(ns.ref_tokens, ns.new_tokens))
            entry["versus_cpu_reference"] = v
            worst = max((d["deficit"] for d in v["deficits"]), default=0.0)
            print(f"cpu_reference teacher-forced on {ns.provider}'s first {v['tokens']} "
                  f"tokens: argmax equal at {v['agree']}, exact ties at {v['ties']}, below "
                  f"the reference's top at {len(v['deficits'])} (worst by {worst:.4g}; "
                  f"logit scale {v['logit_scale']:.3g}) ({v['reference_s']} s)", flush=True)
        if ns.og == "on" or (ns.og == "auto" and importlib.util.find_spec("onnxruntime_genai")):
            try:
                o = onnxruntime_genai(folder, prompt, ns.new_tokens)
                entry["onnxruntime_genai"] = o
                same = o["tokens"] == entry["runs"][0]["tokens"] if entry["runs"] else None
                print(f"onnxruntime-genai: prefill {o['prefill_tokens_per_s']:.1f} tok/s, decode"
                      f" median {o['decode_ms_median']:.3f} ms/token, mean "
                      f"{o['decode_ms_mean']:.3f}; tokens equal onnx-ep's: {same}", flush=True)
            except Exception as exc:  # noqa: BLE001 - e.g. no CUDA provider in its wheel
                entry["onnxruntime_genai"] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"onnxruntime-genai: {type(exc).__name__}: {exc}", flush=True)
    if ns.torch == "on" or (ns.torch == "auto" and importlib.util.find_spec("torch")):
        import torch

        cuda = torch.cuda.is_available()
        dtype = "float16" if cuda else "float32"
        report["torch"] = torch_figures(ns.preset, dtype, ns.prompt_len, cuda)
        for k, v in report["torch"].items():
            if isinstance(v, dict):
                print(f"qwen_decode.py {k} ({dtype}, past {ns.prompt_len}): {v}", flush=True)
    if ns.out:
        Path(ns.out).write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
