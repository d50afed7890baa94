#!/usr/bin/env python3
"""Models no one here wrote, exported by torch, run on a provider and checked against onnxruntime.

Each model is a randomly initialised torch/transformers module (fixed seed, no download)
exported with ``torch.onnx.export(..., dynamo=True)``; only where the dynamo exporter fails
is the TorchScript exporter (``dynamo=False``) used, and the row says so. The families:

- ``qwen2-decode``: decoder-only LLMs with a KV cache (Qwen2, Llama, Mistral): transformers'
  ``Qwen2ForCausalLM`` (hidden 256, 4 layers, 4 heads, 2 KV heads, MLP 512, vocab 1000), one
  decode step over a ``DynamicCache`` of 32 past positions; inputs ``input_ids``,
  ``attention_mask``, ``position_ids`` and ``past_{key,value}_<layer>``, outputs ``logits``
  and ``present_{key,value}_<layer>`` (a wrapper builds the cache from flat tensors).
- ``qwen2-chunk``: the same model prefilling a 16-token chunk after the 32 past positions.
- ``bert-encoder``: encoder-only text models (BERT, RoBERTa, sentence embedders):
  ``BertModel`` (hidden 128, 2 layers, 4 heads), sequence 64 with 8 padded positions.
- ``vit``: vision transformers (ViT, DeiT, CLIP's image tower): ``ViTModel`` (hidden 128,
  2 layers, 4 heads), a 64x64 image in 8x8 patches, batch 1.
- ``whisper-encoder``: Conv1D + transformer audio encoders (Whisper, wav2vec2's front end):
  ``WhisperEncoder`` (d_model 128, 2 layers, 4 heads) over 80 mel bins x 200 frames.
- ``vad-if``: small recurrent voice-activity models with control flow (Silero VAD): a
  ``torch.cond`` on the sample rate (an ONNX ``If``) picks one of two branches, each a Conv1D
  front end and an LSTM cell, with the recurrent state as an input and an output.

Every model's inputs are random with a fixed seed. Per model the script reports:

- ``nodes``: the exported graph's nodes, control-flow branches included (and how many are
  left after the session's fusion, where it fused any);
- ``dev/host``: where the latest plan runs the nodes (after fusion; shape arithmetic folded
  away at the signature runs nowhere and counts in neither; nodes inside the bodies of
  If/Loop/Scan count where their body plans run them, ``resources()["bodies"]``, and as host
  nodes where the control-flow node itself runs on the host), and each host node's op and
  the device provider's reason, aggregated by (op, reason), from the plans' public report
  (``resources()["plans"][i]["nodes"]``);
- ``h2d`` / ``d2h``: the host<->device copies one ``run()`` makes, with their bytes;
- ``first s``: seconds to create the session and run it once (a one-node model runs first
  in the process, so plugin loading and the device context are not charged to the first
  model; CUDA kernels compiled by NVRTC are cached on disk, so a second invocation is
  faster), for onnx-ep eager (``capture="off"``), onnx-ep with capture (``capture="auto"``)
  and onnxruntime's CPUExecutionProvider (default threads);
- ``ms``: the median ms per ``run()`` of each, timed in turns run by run after
  ``--warmup`` runs each (the capture session records its graphs in the first of them),
  and the ratios onnx-ep / onnxruntime;
- ``max_abs``: the largest ``|ours - ort|`` over all outputs of both onnx-ep sessions;
  ``max_rel``: per output, that largest difference over the output's largest ``|ort|`` (so
  values near zero do not blow it up), the maximum over outputs and sessions;
- ``us/node``: eager ms over nodes.

The exit code is 1 when a model fails to export, load or run, or when a max_rel exceeds
``--rtol``. torch, transformers, onnxscript and onnxruntime are needed by this script only::

    python benchmarks/real_models.py [--provider cuda] [--models a,b] [--runs 20]
        [--warmup 3] [--out DIR] [--json FILE] [--rtol 1e-3]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import inspect
import io
import json
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:   # run as a script it is there already; imported by path, not
    sys.path.insert(0, str(HERE))

from exported_models import MODELS, Exportable, RealModel  # noqa: E402

# ---------------------------------------------------------------- export

def export(ex: Exportable, path: Path) -> dict[str, Any]:
    """Write ``ex`` to ``path``: dynamo first, TorchScript only if dynamo fails.

    :returns: ``{"exporter": "dynamo" | "torchscript", "dynamo_error": str | None,
        "seconds": float}``
    """
    import torch

    kw: dict[str, Any] = {"input_names": ex.input_names, "output_names": ex.output_names}
    dyn: dict[str, Any] = {}
    if ex.dynamic_axes:
        # torch.export infers how the dims relate (total = past + seq) with Dim.AUTO
        auto = torch.export.Dim.AUTO
        shapes = [{a: auto for a in ex.dynamic_axes.get(n, {})} or None
                  for n in ex.input_names]
        params = inspect.signature(ex.module.forward).parameters.values()
        fixed = sum(1 for p in params if p.kind is not p.VAR_POSITIONAL)
        if fixed < len(shapes):      # forward(a, b, *rest): the rest is one tuple input
            shapes = [*shapes[:fixed], tuple(shapes[fixed:])]
        dyn = {"dynamic_shapes": tuple(shapes)}
    log = io.StringIO()          # the exporters' progress lines, kept out of the table
    t0 = time.perf_counter()
    dynamo_error = None
    try:
        with torch.no_grad(), contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            torch.onnx.export(ex.module, ex.args, str(path), dynamo=True, external_data=False,
                              **kw, **dyn)
        exporter = "dynamo"
    except Exception as exc:
        dynamo_error = f"{type(exc).__name__}: {exc}"[:2000]
        try:
            with (torch.no_grad(), contextlib.redirect_stdout(log),
                  contextlib.redirect_stderr(log)):
                torch.onnx.export(ex.module, ex.args, str(path), dynamo=False,
                                  opset_version=17, dynamic_axes=ex.dynamic_axes, **kw)
        except Exception as exc2:
            raise RuntimeError(f"dynamo exporter: {dynamo_error[:600]}; TorchScript exporter: "
                               f"{type(exc2).__name__}: {exc2}"[:1500]) from exc2
        exporter = "torchscript"
    return {"exporter": exporter, "dynamo_error": dynamo_error,
            "seconds": time.perf_counter() - t0}


def count_nodes(graph: onnx.GraphProto) -> tuple[int, int]:
    """(top-level nodes, nodes inside control-flow subgraphs, recursively)."""
    nested = 0
    for node in graph.node:
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for sub in subs:
                top, inner = count_nodes(sub)
                nested += top + inner
    return len(graph.node), nested


# ---------------------------------------------------------------- runs

def first_run(make: Callable[[], Any], feeds: dict[str, np.ndarray]) -> tuple[Any, list[Any],
                                                                         float]:
    """(session, outputs, seconds to create the session and run it once)."""
    t0 = time.perf_counter()
    sess = make()
    outs = sess.run(None, feeds)
    return sess, outs, time.perf_counter() - t0


def interleaved(sessions: dict[str, Any], feeds: dict[str, np.ndarray], runs: int,
                warmup: int) -> dict[str, list[float]]:
    """ms per run of each session, taking turns run by run so drift hits all of them alike."""
    for sess in sessions.values():
        for _ in range(warmup):
            sess.run(None, feeds)
    ms: dict[str, list[float]] = {mode: [] for mode in sessions}
    for _ in range(runs):
        for mode, sess in sessions.items():
            t = time.perf_counter()
            sess.run(None, feeds)
            ms[mode].append((time.perf_counter() - t) * 1e3)
    return ms


def plan_nodes(sess: Any) -> dict[str, Any] | None:
    """Where the latest plan's nodes run (``resources()["plans"][i]["nodes"]``)."""
    plans = sess.resources()["plans"]
    return plans[-1]["nodes"] if plans else None


def host_steps(sess: Any) -> list[dict[str, str]]:
    """Each node the latest plan of a device session runs on the host, with the reason."""
    nodes = plan_nodes(sess)
    hosts = list(nodes["host"]) if nodes else []
    for b in body_nodes(sess).values():
        hosts += b["host"]
    return [{"node": h["node"], "op": h["op"], "reason": h["reason"]} for h in hosts]


def body_nodes(sess: Any) -> dict[str, dict[str, Any]]:
    """The node report of each control-flow body a device session planned (the latest plan
    per body)."""
    return {b["body"]: b["nodes"] for b in sess.resources().get("bodies", [])}


def device_nodes(sess: Any, nested: int) -> tuple[int, int]:
    """(nodes on a device, nodes on the host) in the latest plan (nodes folded away at its
    signature run nowhere); the ``nested`` nodes of control-flow bodies count where their
    body plans run them, and on the host where no body plan ran them."""
    nodes = plan_nodes(sess)
    total = sum(nodes["by_provider"].values()) if nodes else 0
    if nodes is None or sess.resources()["device"] == "cpu":     # a host session
        return 0, total + nested
    bodies = body_nodes(sess).values()
    in_bodies = sum(sum(b["by_provider"].values()) + b["folded"] for b in bodies)
    body_host = sum(len(b["host"]) for b in bodies)
    body_device = sum(sum(b["by_provider"].values()) for b in bodies) - body_host
    return (total - len(nodes["host"]) + body_device,
            len(nodes["host"]) + body_host + max(nested - in_bodies, 0))


def copies(sess: Any) -> dict[str, dict[str, int]]:
    """Host<->device copies per run, summed over the session's plans."""
    total = {"host_to_device": {"count": 0, "bytes": 0},
             "device_to_host": {"count": 0, "bytes": 0}}
    for plan in sess.resources()["plans"]:
        for way, c in plan["copies"].items():
            total[way]["count"] += c["count"]
            total[way]["bytes"] += c["bytes"]
    return total


def capture_summary(report: dict[str, Any]) -> dict[str, Any]:
    """The capture report's plans in brief (a host session has none)."""
    plans = report.get("plans", [])
    return {"plans": [{"state": p["state"], "segments": len(p["segments"]),
                       "captured_steps": p["captured_steps"], "steps": p["steps"],
                       "seams": len(p["seams"]), "replays": p["replays"],
                       "failures": p["failures"][:3]} for p in plans]}


def compare(ours: Sequence[Any], ref: Sequence[Any],
            names: Sequence[str]) -> tuple[float, float, dict[str, Any]]:
    """(max abs, max rel, per output) of ``ours`` against ``ref``; rel is over max |ref|."""
    per: dict[str, Any] = {}
    max_abs = max_rel = 0.0
    for name, a, b in zip(names, ours, ref):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ValueError(f"output {name!r}: ours {a.dtype}{list(a.shape)}, onnxruntime "
                             f"{b.dtype}{list(b.shape)}")
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore"):
            diff = np.abs(a64 - b64)
        # equal values (infinities included) and NaN against NaN agree; any other NaN does not
        diff[(a64 == b64) | (np.isnan(a64) & np.isnan(b64))] = 0.0
        diff[np.isnan(diff)] = np.inf
        d = float(diff.max()) if diff.size else 0.0
        finite = np.abs(b64[np.isfinite(b64)])
        scale = float(finite.max()) if finite.size else 0.0
        rel = d / scale if scale > 0 else (0.0 if d == 0 else float("inf"))
        per[name] = {"max_abs": d, "max_rel": rel, "max_abs_ref": scale}
        max_abs, max_rel = max(max_abs, d), max(max_rel, rel)
    return max_abs, max_rel, per


def measure(spec: RealModel, out_dir: Path, provider: str, runs: int,
            warmup: int, ort_spin: bool = True) -> dict[str, Any]:
    """One model's row. A failure records ``error``; a session that fails to load or run
    leaves the others to be measured."""
    import onnxruntime as ort

    import onnx_ep
    from onnx_ep import SessionOptions

    row: dict[str, Any] = {"model": spec.name, "family": spec.family}
    errors: list[str] = []
    tracebacks: list[str] = []

    def failed(stage: str, exc: Exception) -> None:
        errors.append(f"{stage}: {type(exc).__name__}: {exc}"[:1000])
        tracebacks.append(traceback.format_exc())

    stage = "build"
    try:
        ex = spec.build()
        feeds = {n: a.numpy() for n, a in zip(ex.input_names, ex.args)}
        stage = "export"
        path = out_dir / f"{spec.name}.onnx"
        row |= export(ex, path)
        row["path"] = str(path)
        proto = onnx.load(str(path))
    except Exception as exc:
        failed(stage, exc)
        return row | {"error": errors[0], "traceback": tracebacks[0]}
    top, nested = count_nodes(proto.graph)
    row |= {"nodes": top + nested, "nodes_in_subgraphs": nested,
            "opset": next((o.version for o in proto.opset_import
                           if o.domain in ("", "ai.onnx")), None),
            "ops": dict(collections.Counter(n.op_type for n in proto.graph.node))}
    del proto

    ort_options = ort.SessionOptions()
    if not ort_spin:
        # onnxruntime's pool threads spin after each run by default; interleaved with ours
        # they take the cores our host-bound eager runs need
        ort_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    makers = {
        "ort": lambda: ort.InferenceSession(str(path), ort_options,
                                            providers=["CPUExecutionProvider"]),
        "eager": lambda: onnx_ep.Session(str(path), providers=[provider],
                                         options=SessionOptions(capture="off")),
        "capture": lambda: onnx_ep.Session(str(path), providers=[provider],
                                           options=SessionOptions(capture="auto")),
    }
    sessions: dict[str, Any] = {}
    outs: dict[str, list[Any]] = {}
    for mode, make in makers.items():
        try:
            sessions[mode], outs[mode], first = first_run(make, feeds)
            row[mode] = {"first_run_s": first}
        except Exception as exc:
            failed(f"{mode} session", exc)
    try:
        if "eager" in sessions:
            sess = sessions["eager"]
            on_device, on_host = device_nodes(sess, nested)
            hosts = host_steps(sess)
            agg = collections.Counter((h["op"], h["reason"]) for h in hosts)
            by_op = [{"op": op, "reason": why, "count": n}
                     for (op, why), n in agg.most_common()]
            unplanned = nested - sum(sum(b["by_provider"].values()) + b["folded"]
                                     for b in body_nodes(sess).values())
            if on_device and unplanned > 0:
                by_op.append({"op": "(nodes inside If/Loop/Scan subgraphs)",
                              "reason": "their control-flow node runs on the host",
                              "count": unplanned})
            row |= {"nodes_after_fusion": len(sess.graph.nodes),
                    "placement": sess.placement_summary(),
                    "folded": (plan_nodes(sess) or {}).get("folded", 0),
                    "promoted": (plan_nodes(sess) or {}).get("promoted", []),
                    "on_device": on_device, "on_host": on_host, "host_steps": hosts,
                    "host_by_op": by_op, "copies": copies(sess),
                    "fusion": sess.resources()["fusion"]}
        stage = "timed runs"
        ms = interleaved(sessions, feeds, runs, warmup)
        for mode, times in ms.items():
            row[mode] |= {"ms": statistics.median(times), "ms_all": times}
        stage = "comparison"
        if "capture" in sessions:
            sess = sessions["capture"]
            # the last timed run was a replay where a graph was recorded: compare that one
            outs["capture"] = sess.run(None, feeds)
            row["capture"]["report"] = capture_summary(sess.capture_report())
        if "ort" in sessions:
            # max_abs and max_rel cover both of our modes' outputs against onnxruntime's
            names = [o.name for o in sessions["ort"].get_outputs()]
            for mode in ("eager", "capture"):
                if mode in outs:
                    d, rel, per = compare(outs[mode], outs["ort"], names)
                    row[mode] |= {"max_abs": d, "max_rel": rel, "per_output": per}
                    row["max_abs"] = max(row.get("max_abs", 0.0), d)
                    row["max_rel"] = max(row.get("max_rel", 0.0), rel)
        if "eager" in outs and "capture" in outs:
            names = [o.name for o in sessions["eager"].get_outputs()]
            row["capture_vs_eager_max_abs"] = compare(outs["capture"], outs["eager"], names)[0]
        for mode in ("eager", "capture"):
            if "ms" in row.get(mode, {}) and "ms" in row.get("ort", {}):
                row[f"{mode}_over_ort"] = row[mode]["ms"] / row["ort"]["ms"]
        if "ms" in row.get("eager", {}):
            row["us_per_node"] = row["eager"]["ms"] * 1e3 / row["nodes"]
    except Exception as exc:
        failed(stage, exc)
    finally:
        for mode in ("eager", "capture"):
            if mode in sessions:
                sessions[mode].close()
    if errors:
        row |= {"error": "; ".join(errors), "traceback": "\n".join(tracebacks)}
    return row


# ---------------------------------------------------------------- report

def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}GiB"


def _f(row: dict[str, Any], key: str, sub: str, fmt: str) -> str:
    v = row.get(key, {}).get(sub) if sub else row.get(key)
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def _nodes(r: dict[str, Any]) -> str:
    """Nodes in the model, and after fusion where the session fused any."""
    if "nodes" not in r:
        return "-"
    fused = r.get("fusion", {}).get("fused")
    return f"{r['nodes']}" + (f" ({r['nodes_after_fusion']} fused)" if fused else "")


HEADER = ("model", "exporter", "nodes", "dev/host", "h2d", "d2h", "first s eager/cap/ort",
          "ms eager/cap/ort", "eager/ort", "cap/ort", "max_abs", "max_rel", "us/node")


def table(rows: list[dict[str, Any]]) -> str:
    """One line per model, then its host nodes by (op, reason), exporter notes and errors."""
    lines = []
    cells = [HEADER]
    for r in rows:
        c = r.get("copies")
        way = (lambda w: f"{c[w]['count']} ({_size(c[w]['bytes'])})") if c else (lambda w: "-")
        cells.append((
            r["model"], r.get("exporter", "-"),
            _nodes(r),
            f"{r['on_device']}/{r['on_host']}" if "on_device" in r else "-",
            way("host_to_device"), way("device_to_host"),
            "/".join(_f(r, k, "first_run_s", ".2f") for k in ("eager", "capture", "ort")),
            "/".join(_f(r, k, "ms", ".3f") for k in ("eager", "capture", "ort")),
            _f(r, "eager_over_ort", "", ".2f"), _f(r, "capture_over_ort", "", ".2f"),
            _f(r, "max_abs", "", ".2e"), _f(r, "max_rel", "", ".2e"),
            _f(r, "us_per_node", "", ".1f")))
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(HEADER))]
    for i, row in enumerate(cells):
        lines.append("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        notes = []
        if r.get("dynamo_error"):
            notes.append(f"dynamo export failed, TorchScript used: {r['dynamo_error'][:300]}")
        for h in r.get("host_by_op", []):
            notes.append(f"host: {h['count']} x {h['op']}: {h['reason'][:200]}")
        for p in r.get("capture", {}).get("report", {}).get("plans", []):
            notes.append(f"capture: {p['state']}, {p['segments']} segment(s) with "
                         f"{p['captured_steps']} of {p['steps']} steps, {p['seams']} seam(s), "
                         f"{p['replays']} replays")
        if "capture_vs_eager_max_abs" in r and r["capture_vs_eager_max_abs"]:
            notes.append(f"capture vs eager: max abs {r['capture_vs_eager_max_abs']:.2e}")
        if r.get("error"):
            notes.append(f"ERROR {r['error']}")
        if notes:
            lines.append(f"{r['model']}:")
            lines += [f"  {n}" for n in notes]
    return "\n".join(lines)


def warm_process(provider: str) -> None:
    """Run a one-node model once, so that loading the plugins and (on a GPU) creating the
    device's context is not charged to the first model's first run."""
    from common import add_chain_model

    import onnx_ep

    sess = onnx_ep.Session(add_chain_model(1), providers=[provider])
    sess.run(None, {"x": np.ones(1, np.float32)})
    sess.close()


def versions() -> dict[str, str]:
    out = {}
    for mod in ("torch", "transformers", "onnxscript", "onnxruntime", "onnx", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = "not installed"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated subset of {', '.join(MODELS)} (default: all)")
    ap.add_argument("--provider", default="cuda",
                    help="onnx-ep provider (default cuda; nodes it declines fall back to "
                         "cpu_reference); cpu_reference runs without a GPU")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per mode (default 20)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed runs after the first, per mode (default 3; the capture "
                         "session records its graphs in the first)")
    ap.add_argument("--out", metavar="DIR",
                    help="keep the exported .onnx files here (default: a temporary folder)")
    ap.add_argument("--json", metavar="FILE", help="write every figure to FILE")
    ap.add_argument("--ort-no-spin", action="store_true",
                    help="onnxruntime's pool threads do not spin between runs (by default "
                         "they do, which slows a host-bound runner timed in turns with it)")
    ap.add_argument("--rtol", type=float, default=1e-3,
                    help="fail when a model's max_rel exceeds this (default 1e-3, fp32)")
    ns = ap.parse_args(argv)
    names = [n.strip() for n in ns.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    if ns.runs < 1 or ns.warmup < 0:
        ap.error("--runs must be at least 1 and --warmup at least 0")

    with contextlib.ExitStack() as stack:
        if ns.out:
            out_dir = Path(ns.out)
            out_dir.mkdir(parents=True, exist_ok=True)
        else:
            out_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="real_")))
        warm_process(ns.provider)
        rows = []
        for name in names:
            t0 = time.perf_counter()
            print(f"{name}: exporting and running ...", file=sys.stderr, flush=True)
            row = measure(MODELS[name], out_dir, ns.provider, ns.runs, ns.warmup,
                          not ns.ort_no_spin)
            row["wall_s"] = time.perf_counter() - t0
            print(f"{name}: {'ERROR ' + row['error'] if 'error' in row else 'ok'} "
                  f"({row['wall_s']:.1f} s)", file=sys.stderr, flush=True)
            rows.append(row)

    failed = [r["model"] for r in rows if "error" in r]
    inexact = [r["model"] for r in rows if r.get("max_rel", 0.0) > ns.rtol]
    print(f"provider {ns.provider}; {ns.runs} timed runs after {ns.warmup} warm-up; "
          f"ms are medians; onnxruntime {versions()['onnxruntime']} CPUExecutionProvider"
          f"{' (threads not spinning)' if ns.ort_no_spin else ''}; rtol {ns.rtol:g}")
    print(table(rows))
    print(f"{len(rows) - len(failed)} of {len(rows)} models ran; "
          f"failed: {', '.join(failed) or 'none'}; "
          f"max_rel above {ns.rtol:g}: {', '.join(inexact) or 'none'}")
    if ns.json:
        from common import commit_id
        commit = commit_id()
        with open(ns.json, "w") as f:
            json.dump({"provider": ns.provider, "runs": ns.runs, "warmup": ns.warmup,
                       "rtol": ns.rtol, "ort_spin": not ns.ort_no_spin, "commit": commit,
                       "versions": versions(),
                       "out": str(ns.out) if ns.out else None, "models": rows}, f, indent=1)
    return 1 if failed or inexact else 0


if __name__ == "__main__":
    sys.exit(main())
