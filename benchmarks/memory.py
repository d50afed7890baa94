#!/usr/bin/env python3
"""Arena packing and admission/planning overhead, measured side by side in one run.

For the demo transformer and a ResNet-style conv stack it prints the activation arena
the planner packs vs the live-bytes peak (the lower bound) vs the naive sum, and the
cost of planning (once per shape signature) and admission (every run) relative to the
run time. ``python benchmarks/memory.py [--json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep.core.planner import infer_specs, plan_signature
from onnx_ep.core.kernel import TensorSpec
from onnx_ep.demo import build_demo_model, demo_feeds


def conv_stack(blocks: int = 4, channels: int = 32, size: int = 56) -> onnx.ModelProto:
    """x[1,C,H,W] -> blocks of Conv-Relu-Conv + residual Add -> Relu."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for b in range(blocks):
        for j in range(2):
            w = f"w{b}_{j}"
            inits.append(onnx.numpy_helper.from_array(
                (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32), w))
            out = f"c{b}_{j}"
            nodes.append(helper.make_node("Conv", [prev if j == 0 else f"r{b}_0", w], [out],
                                          pads=[1, 1, 1, 1]))
            if j == 0:
                nodes.append(helper.make_node("Relu", [out], [f"r{b}_0"]))
        nodes.append(helper.make_node("Add", [f"c{b}_1", prev], [f"s{b}"]))
        nodes.append(helper.make_node("Relu", [f"s{b}"], [f"y{b}"]))
        prev = f"y{b}"
    g = helper.make_graph(
        nodes, "convstack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, channels, size, size])],
        initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(name: str, model: onnx.ModelProto, feeds: dict, repeat: int) -> dict:
    s = onnx_ep.Session(model, providers=["cpu_reference"])
    s.run(None, feeds)                                   # plans the signature
    (plan,) = s._plans.values()
    arena = plan.arena
    run_s = _median_s(lambda: s.run(None, feeds), repeat)
    specs_in = [TensorSpec(a.dtype, a.shape) for a in feeds.values()]

    def replan() -> None:
        specs = infer_specs(s._light, s.graph, specs_in)
        plan_signature(s._program, plan.signature, specs)

    plan_s = _median_s(replan, max(3, repeat // 5))

    def admit() -> None:
        for r in s._admit(plan, "bench/run"):
            r.release()

    admit_s = _median_s(admit, repeat * 10)
    return {"model": name, "arena_bytes": arena.size, "live_peak_bytes": arena.live_peak_bytes,
            "naive_bytes": arena.naive_bytes,
            "arena_over_peak": arena.size / arena.live_peak_bytes if arena.live_peak_bytes else 1.0,
            "run_ms": run_s * 1e3, "plan_ms": plan_s * 1e3, "admission_us": admit_s * 1e6,
            "plan_pct_of_run": 100 * plan_s / run_s, "admission_pct_of_run": 100 * admit_s / run_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    rows = [measure("demo transformer (2 layers, d64, seq 16)", build_demo_model(),
                    demo_feeds(), ns.repeat),
            measure("conv stack (4 blocks, 32ch, 56x56)", conv_stack(),
                    {"x": np.random.default_rng(1).standard_normal((1, 32, 56, 56))
                     .astype(np.float32)}, ns.repeat)]
    if ns.json:
        print(json.dumps(rows, indent=1))
        return
    print("| model | arena | live-bytes peak | naive sum | arena/peak | run ms | plan ms "
          "(once per signature) | admission µs per run | admission % of run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['arena_bytes']:,} | {r['live_peak_bytes']:,} | "
              f"{r['naive_bytes']:,} | {r['arena_over_peak']:.3f} | {r['run_ms']:.2f} | "
              f"{r['plan_ms']:.2f} ({r['plan_pct_of_run']:.0f}% of one run) | "
              f"{r['admission_us']:.1f} | {r['admission_pct_of_run']:.2f}% |")


if __name__ == "__main__":
    main()
