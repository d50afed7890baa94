#!/usr/bin/env python3
"""Dispatch overhead and small-model latency, measured side by side in one run.

(a) A chain of N tiny Add nodes (float32 [1], default N = 1000): the run time
    divided by N is the per-node dispatch overhead, since each add is ~free.
    onnx-ep (cpu_reference) vs onnxruntime CPU (ORT_DISABLE_ALL and the default
    ORT_ENABLE_ALL; default threads, idle spinning off) vs
    onnx.reference.ReferenceEvaluator vs a bare ``np.add`` loop.
(b) The demo transformer (onnx_ep.demo, batch 1, seq 16), end to end.

Every number is timeit-style: each runner is called ``number`` times per
repeat (autoranged to at least --min-time seconds), ``--repeat`` repeats, and
min and median per call are reported. The last column is the runner's min
divided by onnx-ep's min (above 1: onnx-ep is faster); the verdict also uses
the min, which timeit recommends and which a loaded machine disturbs least.

Usage::

    python benchmarks/overhead.py [--nodes 1000] [--repeat 7] [--json] [--profile]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from common import add_chain_model, commit_id, profile_runs, time_per_call

from onnx_ep import Session
from onnx_ep.demo import build_demo_model, demo_feeds

#: the issue's target for onnx-ep's per-node overhead
TARGET_US_PER_NODE = 3.0


def runners(model: onnx.ModelProto,
            feeds: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
    """A zero-argument callable per engine, each already warmed up once."""
    out: dict[str, Callable[[], Any]] = {}
    ours = Session(model, providers=["cpu_reference"])
    out["onnx-ep (cpu_reference)"] = lambda: ours.run(None, feeds)
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime is not installed; skipping it", file=sys.stderr)
    else:
        data = model.SerializeToString()
        levels = ort.GraphOptimizationLevel
        for label, level in (("ORT_DISABLE_ALL", levels.ORT_DISABLE_ALL),
                             ("ORT_ENABLE_ALL, default", levels.ORT_ENABLE_ALL)):
            so = ort.SessionOptions()
            so.graph_optimization_level = level
            # idle workers spinning after each call would take a core from the engines timed
            # next on a small machine (see docs/PERFORMANCE.md)
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            out[f"onnxruntime CPU ({label})"] = (lambda s=sess: s.run(None, feeds))
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model)
    out["onnx ReferenceEvaluator"] = lambda: ref.run(None, feeds)
    for fn in out.values():
        fn()   # plans, allocates, JITs: the first run is not what we measure
    return out


def measure(fn: Callable[[], Any], repeat: int, min_time: float) -> dict[str, float]:
    """Min and median seconds per call, timeit-style."""
    best, med, number = time_per_call(fn, repeat, min_time)
    return {"min_s": best, "median_s": med, "number": number}


def check_agreement(fns: dict[str, Callable[[], Any]]) -> float:
    """Max abs difference between every engine's first output and onnx-ep's."""
    outs = {k: np.asarray(f()[0], np.float64) for k, f in fns.items()}
    base = next(iter(outs.values()))
    return max(float(np.max(np.abs(o - base))) for o in outs.values())


def bench_chain(n: int, repeat: int, min_time: float) -> dict[str, Any]:
    model = add_chain_model(n)
    feeds = {"x": np.array([0.5], np.float32)}
    fns = runners(model, feeds)
    c = np.array([1.0], np.float32)

    def bare() -> np.ndarray:
        y = feeds["x"]
        for _ in range(n):
            y = np.add(y, c)
        return y

    fns[f"bare np.add loop ({n} calls)"] = lambda: [bare()]
    rows = {}
    for name, fn in fns.items():
        print(f"[chain] {name}...", file=sys.stderr, flush=True)
        rows[name] = measure(fn, repeat, min_time)
    return {"nodes": n, "max_abs_diff": check_agreement(fns), "rows": rows}


def bench_demo(repeat: int, min_time: float) -> dict[str, Any]:
    model = build_demo_model()
    fns = runners(model, demo_feeds(batch=1, seq=16))
    rows = {}
    for name, fn in fns.items():
        print(f"[demo] {name}...", file=sys.stderr, flush=True)
        rows[name] = measure(fn, repeat, min_time)
    return {"nodes": len(model.graph.node), "max_abs_diff": check_agreement(fns),
            "rows": rows}


def profile_chain(n: int, calls: int = 50, top: int = 25) -> str:
    """cProfile of onnx-ep on the Add chain: where each node's microseconds go."""
    return profile_runs(add_chain_model(n), {"x": np.array([0.5], np.float32)}, calls, top)

def _table(title: str, res: dict[str, Any], per_node: bool) -> str:
    first = next(iter(res["rows"].values()))
    unit = "µs/node" if per_node else "ms"
    scale = (1e6 / res["nodes"]) if per_node else 1e3
    lines = [f"### {title}", "",
             f"| engine | min {unit} | median {unit} | min / onnx-ep min |",
             "|---|---:|---:|---:|"]
    for name, r in res["rows"].items():
        lines.append(f"| {name} | {r['min_s'] * scale:.3f} | {r['median_s'] * scale:.3f} | "
                     f"{r['min_s'] / first['min_s']:.2f}x |")
    lines.append("")
    lines.append(f"All engines agree: max abs diff {res['max_abs_diff']:.3g}.")
    return "\n".join(lines)


def machine() -> dict[str, str]:
    commit = commit_id()
    versions = {"python": platform.python_version(), "numpy": np.__version__,
                "onnx": onnx.__version__}
    try:
        import onnxruntime
        versions["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "processor": platform.processor() or platform.machine(), "commit": commit,
            "cpus": str(os.cpu_count()), "load_average": load,
            "command": " ".join(["python", *sys.argv]),
            "versions": ", ".join(f"{k} {v}" for k, v in versions.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000, help="Add nodes in the chain (1000)")
    ap.add_argument("--repeat", type=int, default=7, help="timeit repeats (7)")
    ap.add_argument("--min-time", type=float, default=0.2,
                    help="seconds per repeat, at least (0.2)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    ap.add_argument("--profile", action="store_true",
                    help="also print a cProfile of onnx-ep on the chain (stderr)")
    args = ap.parse_args(argv)
    chain = bench_chain(args.nodes, args.repeat, args.min_time)
    demo = bench_demo(args.repeat, args.min_time)
    ours = chain["rows"]["onnx-ep (cpu_reference)"]["min_s"] * 1e6 / args.nodes
    ref_demo = demo["rows"]["onnx ReferenceEvaluator"]["min_s"]
    ours_demo = demo["rows"]["onnx-ep (cpu_reference)"]["min_s"]
    verdict = {"us_per_node": ours, "target_us_per_node": TARGET_US_PER_NODE,
               "meets_overhead_target": ours <= TARGET_US_PER_NODE,
               "faster_than_reference_evaluator_on_demo": ours_demo < ref_demo}
    if args.profile:
        print(profile_chain(args.nodes), file=sys.stderr)
    if args.json:
        print(json.dumps({"machine": machine(), "chain": chain, "demo": demo,
                          "verdict": verdict}, indent=2))
        return 0
    m = machine()
    print(f"{m['date']}, {m['processor']}, {m['cpus']} CPUs, load average {m['load_average']} "
          f"(at the end), commit {m['commit']}, {m['versions']}")
    print(f"command: {m['command']}\n")
    print(_table(f"(a) Dispatch overhead: chain of {args.nodes} Add nodes, float32 [1]",
                 chain, per_node=True))
    print()
    print(_table(f"(b) Demo transformer ({demo['nodes']} nodes), batch 1, seq 16, latency",
                 demo, per_node=False))
    print()
    print(f"onnx-ep: {ours:.2f} µs/node (target <= {TARGET_US_PER_NODE} µs: "
          f"{'met' if verdict['meets_overhead_target'] else 'NOT met'}); demo "
          f"{ref_demo / ours_demo:.2f}x the speed of ReferenceEvaluator.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
