"""Static CUDA coverage of the onnx node suite, without a GPU.

Places every node-suite model with providers ``["cuda", "cpu_reference"]`` as a
session would (CUDA's ``is_available`` is forced true for the placement only; no
kernel runs) and reports how many cases would run entirely on CUDA, and for the
rest which op declined and why. The GPU run (``scripts/gpu-check.sh``) is the
measured number; this one predicts it (placement can still move nodes to the host
at run time where a device output cannot be sized).

With ``--plan`` it also plans each case at its first data set's input shapes, as a
session does, and counts the nodes the planner sends back to the host because a device
buffer's size is unknown at plan time. Cases whose planning asks the driver (cuBLASLt's
workspace query for MatMul/Gemm/Conv) cannot be planned without a GPU and are counted by
static placement. At 731ec76 it predicted 1,451 cases against the H200's 1,347: every case it
counted as off cuda was off cuda there, and 103 of the 104 it over-counts are such unplannable
cases (expanded Attention/FlexAttention; the 104th is test_constant).

``--model PATH`` reports one model instead: its graph fused and placed as a
``providers=["cuda"]`` session would at load (onnxruntime's fallback rule), every node that
would run on the host with the reason each device provider gave, which of those are deferred
(asked again with each signature's sizes and folded values, see ``core/settling.py``), the
copies between host and device that placement inserts, and what fusion did.

``python scripts/cuda_coverage.py [-k REGEX] [--ops] [--cases] [--plan] [--json FILE]``
``python scripts/cuda_coverage.py --model PATH [--json FILE]``
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import warnings

from onnx_ep.core.graph import build_graph, light_model_for_inference
from onnx_ep.core.kernel import Support
from onnx_ep.core.placement import node_meta
from onnx_ep.core.plugin_manager import build_plugins
from onnx_ep.errors import NoKernelError
from onnx_ep.providers.cuda import driver as cuda_driver
from onnx_ep.testing.node_suite import load_cases, load_skips


def declined(graph, registry) -> list[tuple[str, str]]:
    """``[(op_type, reason)]`` for the nodes CUDA would not run (subgraphs included)."""
    out = []
    for node in graph.nodes:
        meta = node_meta(node, graph)
        try:
            sel = registry.select(meta, ["cuda", "cpu_reference"])
        except NoKernelError as exc:
            out.append((node.op_type, f"no provider: {exc}"))
            continue
        if sel.provider != "cuda":
            entry = registry.kernel_for("cuda", meta.domain, meta.op_type, meta.opset)
            if entry is None:
                why = "no cuda kernel"
            else:
                why = getattr(entry.kernel, "supports", lambda m: Support.YES)(meta).reason
            out.append((node.op_type, why or "declined"))
        if node.subgraphs:
            out.append((node.op_type, "has subgraphs (run on the host)"))
    return out


class _NoCopies:
    """Stands in for the device runtime of copy steps: planning never copies."""


def unsized_at_plan(light, graph, registry, case) -> list[tuple[str, str]]:
    """``[(op_type, reason)]`` for device nodes the planner would send to the host at the
    case's first data set's input shapes (the session's fixed-point loop)."""
    from onnx.backend.test.runner import _normalize_tensor  # noqa: PLC2701 - onnx's own helper

    from onnx_ep.core.kernel import TensorSpec
    from onnx_ep.core.placement import place
    from onnx_ep.core.planner import build_program, infer_specs
    from onnx_ep.core.settling import plan_with_host_fallback

    inputs, _ = case.data_sets[0]
    arrays = [_normalize_tensor(x) for x in inputs]
    if len(arrays) != len(graph.inputs) or not all(hasattr(a, "shape") for a in arrays):
        return []                      # sequences / optionals: static placement only
    specs_in = [TensorSpec(a.dtype, a.shape) for a in arrays]
    specs = infer_specs(light, graph, specs_in)
    ops = {n.name: n.op_type for n in graph.nodes}
    moved: list[str] = []

    def build(host_only: frozenset[str], promoted: frozenset[str] = frozenset()):
        placement = place(graph, registry, ["cuda", "cpu_reference"], host_only, promoted)
        # uploaded initializers are program constants (host arrays stand in for the device
        # copies: nothing runs)
        return build_program(graph, placement, runtimes={"cuda": _NoCopies()},
                             device_constants={c.dst: graph.initializers[c.src]
                                               for c in placement.uploads})

    why: dict[str, str] = {}

    def moved_back(names: list[str], reasons: dict[str, str]) -> None:
        moved.extend(names)
        why.update(reasons)

    plan_with_host_fallback(build, (), specs, "cuda", moved_back)   # the session's loop
    return [(ops[n], f"{why[n]} (runs on the host)") for n in sorted(moved)]


def model_report(path: str) -> dict:
    """One model as a ``providers=["cuda"]`` session would place it (no GPU needed)."""
    from onnx_ep.core.fusion import fuse
    from onnx_ep.core.graph import load_model
    from onnx_ep.core.placement import CopyStep, PlacedNode, place

    plugins = build_plugins(())
    registry = plugins.registry
    providers = ["cuda", "cpu_reference"]
    proto = load_model(path)
    graph = build_graph(proto, light_model_for_inference(proto))
    n_model = len(graph.nodes)
    graph, fused = fuse(graph, registry, providers, plugins.fusion_rules())
    placement = place(graph, registry, providers)
    host = [{"node": n, "op": op, "reason": why} for n, op, _, why in placement.fallbacks]
    host += [{"node": n.name, "op": n.op_type, "reason": "has subgraphs (they run on the host)"}
             for n in graph.nodes if n.subgraphs]
    copies = collections.Counter(f"{c.src_device}->{c.dst_device}" for c in placement.steps
                                 if isinstance(c, CopyStep))
    deferred = [s.node.name for s in placement.steps
                if isinstance(s, PlacedNode) and s.deferred]
    return {"model": str(path), "model_nodes": n_model, "nodes": len(graph.nodes),
            "placement": placement.count_by_provider(), "host_steps": host,
            "deferred": deferred,
            "copies": dict(copies), "uploaded_weights": len(placement.uploads),
            "fusion": fused.as_dict()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", default=None, help="regex on case names")
    ap.add_argument("--ops", action="store_true", help="list declined ops with reasons")
    ap.add_argument("--cases", action="store_true", help="list cases not entirely on CUDA")
    ap.add_argument("--plan", action="store_true",
                    help="also plan each case at its input shapes (plan-time host fallbacks)")
    ap.add_argument("--json", default=None, help="write per-case results here")
    ap.add_argument("--model", default=None,
                    help="report this model's host steps, copies and fusion instead")
    args = ap.parse_args(argv)

    cuda_driver.is_available = lambda: Support.YES  # placement only: nothing launches
    if args.model:
        rep = model_report(args.model)
        print(f"{rep['model']}: {rep['model_nodes']} nodes, {rep['nodes']} after fusion "
              f"{rep['fusion']['fused']}; placed {rep['placement']}; copies {rep['copies']}")
        for h in rep["host_steps"]:
            print(f"  host: {h['node']} ({h['op']}): {h['reason'][:160]}")
        if rep["deferred"]:
            print(f"  {len(rep['deferred'])} of these are asked again when a signature is "
                  f"planned (their meta was incomplete at load): a session runs them on cuda "
                  f"where the kernel accepts them then")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rep, f, indent=1)
        return 0
    registry = build_plugins(()).registry
    skips = load_skips()
    all_cases = load_cases(args.pattern)
    cases = [c for c in all_cases if c.name not in skips]
    per_case: dict[str, list[tuple[str, str]]] = {}
    unplannable: list[str] = []
    for case in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                proto = case.model
                light = light_model_for_inference(proto)
                graph = build_graph(proto, light)
                per_case[case.name] = declined(graph, registry)
                if args.plan and not per_case[case.name]:
                    try:
                        per_case[case.name] = unsized_at_plan(light, graph, registry, case)
                    except Exception:   # a kernel asked the driver at plan time (no GPU here)
                        unplannable.append(case.name)
            except Exception as exc:  # a model we cannot even build counts as not on CUDA
                per_case[case.name] = [("?", f"{type(exc).__name__}: {exc}"[:200])]
    pure = sum(1 for v in per_case.values() if not v)
    total = len(all_cases)
    print(f"{'planned' if args.plan else 'static'} CUDA coverage: {pure} of {total} cases "
          f"entirely on cuda "
          f"({100.0 * pure / max(total, 1):.1f}%); {len(skips)} skipped cases count as not")
    if unplannable:
        print(f"{len(unplannable)} cases could not be planned without a GPU (a kernel asks the "
              f"driver at plan time); counted by static placement")
    if args.ops:
        ops = collections.Counter()
        reasons: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for v in per_case.values():
            for op, why in set(v):
                ops[op] += 1
                reasons[op][why[:160]] += 1
        for op, n in ops.most_common():
            print(f"{n:5d}  {op}")
            for why, m in reasons[op].most_common(4):
                print(f"         {m:4d}  {why}")
    if args.cases:
        for name, v in sorted(per_case.items()):
            if v:
                print(name, "|", "; ".join(f"{op}: {why[:80]}" for op, why in sorted(set(v))))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: [list(x) for x in v] for k, v in per_case.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
