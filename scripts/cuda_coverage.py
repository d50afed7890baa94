"""Static CUDA coverage of the onnx node suite, without a GPU.

Places every node-suite model with providers ``["cuda", "cpu_reference"]`` as a
session would (CUDA's ``is_available`` is forced true for the placement only; no
kernel runs) and reports how many cases would run entirely on CUDA, and for the
rest which op declined and why. The GPU run (``scripts/gpu-check.sh``) is the
measured number; this one predicts it (placement can still move nodes to the host
at run time where a device output cannot be sized).

``python scripts/cuda_coverage.py [-k REGEX] [--ops] [--cases] [--json FILE]``
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
from onnx_ep.errors import NoKernelError
from onnx_ep.plugins.manager import build_runtime
from onnx_ep.providers.cuda import runtime as cuda_runtime
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", default=None, help="regex on case names")
    ap.add_argument("--ops", action="store_true", help="list declined ops with reasons")
    ap.add_argument("--cases", action="store_true", help="list cases not entirely on CUDA")
    ap.add_argument("--json", default=None, help="write per-case results here")
    args = ap.parse_args(argv)

    cuda_runtime.is_available = lambda: Support.YES  # placement only: nothing launches
    registry = build_runtime(()).registry
    skips = load_skips()
    cases = [c for c in load_cases(args.pattern) if c.name not in skips]
    per_case: dict[str, list[tuple[str, str]]] = {}
    for case in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                proto = case.model
                graph = build_graph(proto, light_model_for_inference(proto))
                per_case[case.name] = declined(graph, registry)
            except Exception as exc:  # a model we cannot even build counts as not on CUDA
                per_case[case.name] = [("?", f"{type(exc).__name__}: {exc}"[:200])]
    pure = sum(1 for v in per_case.values() if not v)
    total = len(load_cases(args.pattern))
    print(f"static CUDA coverage: {pure} of {total} cases entirely on cuda "
          f"({100.0 * pure / max(total, 1):.1f}%); {len(skips)} skipped cases count as not")
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
