#!/usr/bin/env python3
"""Decode-step latency with CUDA-graph capture on and off, side by side in one process.

Builds the fixed-KV-cache decoder of ``onnx_ep.testing.decoder`` (``--preset tiny`` or
``qwen0.5b``, Qwen2.5-0.5B's dimensions), binds every input and output on the device
through IOBinding (presents stay on the device, logits come back to the host), and times
one decode step run to completion, alternating capture on (the session default, replayed
graphs) and ``RunOptions(capture="off")`` (every step eagerly) so drift hits both alike.
Prints the medians, the ratio, and the captured step's time per recorded graph node (an
upper bound of the replay cost per kernel: it includes the feeds' copies and the GPU work).

    python benchmarks/decode.py [--preset qwen0.5b] [--dtype float16] [--steps 50] [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import onnx_ep
from onnx_ep import RunOptions
from onnx_ep.testing.decoder import QWEN_05B, TINY, build_decoder, cache_names, empty_cache

PRESETS = {"tiny": TINY, "qwen0.5b": QWEN_05B}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--dtype", choices=("float32", "float16"), default="float16")
    ap.add_argument("--steps", type=int, default=50, help="timed steps per mode (default 50)")
    ap.add_argument("--pos", type=int, default=128, help="the step's position (default 128)")
    ap.add_argument("--json", metavar="FILE", help="write the figures to FILE")
    ns = ap.parse_args(argv)
    cfg = dict(PRESETS[ns.preset])
    cfg["max_len"] = max(cfg["max_len"], ns.pos + 1)
    t0 = time.perf_counter()
    model = build_decoder(cfg, np.dtype(ns.dtype))
    sess = onnx_ep.Session(model, providers=["cuda", "cpu_reference"])
    built = time.perf_counter() - t0
    b = sess.io_binding()
    b.bind_input("input_ids", onnx_ep.Tensor.from_numpy(np.array([[11]], np.int64), "cuda"))
    b.bind_input("pos", onnx_ep.Tensor.from_numpy(np.array([ns.pos], np.int64), "cuda"))
    for past, arr in empty_cache(cfg, np.dtype(ns.dtype)).items():
        b.bind_input(past, onnx_ep.Tensor.from_numpy(arr, "cuda"))
    b.bind_output("logits", "cuda")
    for _, present in cache_names(cfg):
        b.bind_output(present, "cuda")
    t1 = time.perf_counter()
    sess.run_with_iobinding(b)                 # plans, compiles, warms up
    first = time.perf_counter() - t1
    off = RunOptions(capture="off")
    sess.run_with_iobinding(b)                 # records
    sess.run_with_iobinding(b, off)
    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(ns.steps):
        for mode, ro in (("on", None), ("off", off)):
            t = time.perf_counter()
            sess.run_with_iobinding(b, ro)
            times[mode].append((time.perf_counter() - t) * 1e3)
    report = sess.capture_report()
    (plan,) = report["plans"]
    graph_nodes = sum(s.get("graph_nodes") or 0 for s in plan["segments"])
    on, off_ms = statistics.median(times["on"]), statistics.median(times["off"])
    res = {"preset": ns.preset, "dtype": ns.dtype, "pos": ns.pos, "nodes": len(model.graph.node),
           "build_s": round(built, 2), "first_run_s": round(first, 2),
           "capture_on_ms": on, "capture_off_ms": off_ms, "speedup": off_ms / on,
           "segments": len(plan["segments"]), "captured_steps": plan["captured_steps"],
           "seams": len(plan["seams"]), "graph_nodes": graph_nodes,
           "us_per_graph_node": on * 1e3 / graph_nodes if graph_nodes else None,
           "eager_us_per_node": off_ms * 1e3 / len(model.graph.node),
           "records": plan["records"], "replays": plan["replays"]}
    print(f"decode {ns.preset} {ns.dtype} pos {ns.pos}: {res['nodes']} nodes; capture on "
          f"{on:.3f} ms/token, off {off_ms:.3f} ms/token: {res['speedup']:.1f}x; "
          f"{res['segments']} segment(s), {res['seams']} seams, {graph_nodes} graph nodes, "
          f"{res['us_per_graph_node'] or 0:.2f} us per graph node (upper bound); eager "
          f"{res['eager_us_per_node']:.1f} us per node; first run {res['first_run_s']} s")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(res | {"ms": times, "capture": plan}, f, indent=1)
    sess.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
