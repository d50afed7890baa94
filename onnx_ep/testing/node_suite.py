"""Run onnx's backend node test suite (generated in memory) through ``onnx_ep.backend``.

The comparison is onnx's own (``onnx.backend.test.runner.Runner.assert_similar_outputs``)
with each case's rtol/atol. Cases we skip are listed, with their reason, in
``node_suite_skips.toml`` beside this module; nothing else is skipped. Where a case's
generated data contradicts the written specification (``node_suite_spec.py``), exactly
those elements are compared with the specification's answer instead, and the case's
result says so.

``python -m onnx_ep.testing.node_suite [-k REGEX] [--device CPU|CUDA] [--failures] [--jobs N]``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import re
import sys
import time
import warnings
from collections.abc import Sequence
from importlib import resources
from typing import Any

import attrs

SKIPS_FILE = "node_suite_skips.toml"


@attrs.frozen
class CaseResult:
    """One case: ``status`` is ``passed``, ``failed``, ``error`` or ``skipped``."""

    name: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    #: providers that ran the case's nodes: {provider: node count}
    placement: dict[str, int] = attrs.field(factory=dict)


def load_skips() -> dict[str, str]:
    """``{case name: reason}`` from the skip file."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the tomli backport (a dependency there)
        import tomli as tomllib  # type: ignore[no-redef]

    text = resources.files("onnx_ep.testing").joinpath(SKIPS_FILE).read_text()
    data = tomllib.loads(text)
    return {str(k): str(v) for k, v in data.get("skip", {}).items()}


def load_cases(pattern: str | None = None) -> list[Any]:
    from onnx.backend.test.loader import load_node_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_node_model_tests()
    rx = re.compile(pattern) if pattern else None
    return [c for c in cases if rx is None or rx.search(c.name)]


def run_case(case: Any, device: str = "CPU") -> CaseResult:
    """Run one node test case as onnx's runner does."""
    from onnx.backend.test.runner import Runner, _normalize_tensor

    from onnx_ep.backend import OnnxEpBackend
    from onnx_ep.testing import node_suite_spec

    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            rep = OnnxEpBackend.prepare(case.model, device)
            rule = node_suite_spec.rule_for(case.name)
            note = ""
            for inputs, ref_outputs in case.data_sets:
                feeds = [_normalize_tensor(x) for x in inputs]
                refs = [_normalize_tensor(x) for x in ref_outputs]
                if rule is not None:
                    refs[0], changed = node_suite_spec.corrected(rule, feeds[0], refs[0])
                    note = f"{changed} element(s) compared with the spec ({rule.why})"
                outs = rep.run(feeds)
                Runner.assert_similar_outputs(ref_outputs=refs, outputs=list(outs),
                                              rtol=case.rtol, atol=case.atol)
    except AssertionError as exc:
        msg = str(exc).strip().splitlines()
        return CaseResult(case.name, "failed", " ".join(msg[:3])[:300],
                          time.perf_counter() - t0)
    except Exception as exc:  # the report classifies every failure, it never stops the suite
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return CaseResult(case.name, "error", f"{type(exc).__name__}: {first}"[:300],
                          time.perf_counter() - t0)
    return CaseResult(case.name, "passed", note, time.perf_counter() - t0,
                      rep.session.placement_summary())


def _run_shard(args: tuple[str | None, str, int, int]) -> list[CaseResult]:
    pattern, device, shard, n_shards = args
    skips = load_skips()
    out = []
    for i, case in enumerate(load_cases(pattern)):
        if i % n_shards != shard:
            continue
        if case.name in skips:
            out.append(CaseResult(case.name, "skipped", skips[case.name]))
        else:
            out.append(run_case(case, device))
    return out


def run_suite(pattern: str | None = None, device: str = "CPU",
              jobs: int = 1) -> list[CaseResult]:
    """Run every matching case (skips applied); results sorted by name."""
    if jobs <= 1:
        results = _run_shard((pattern, device, 0, 1))
    else:
        with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
            parts = pool.map(_run_shard, [(pattern, device, i, jobs) for i in range(jobs)])
            results = [r for part in parts for r in part]
    return sorted(results, key=lambda r: r.name)


def summarize(results: Sequence[CaseResult], device: str) -> dict[str, Any]:
    import onnx

    counts = {s: sum(r.status == s for r in results) for s in
              ("passed", "failed", "error", "skipped")}
    total = len(results)
    only = "cuda" if device == "CUDA" else "cpu_reference"
    pure = sum(1 for r in results if r.status == "passed" and set(r.placement) == {only})
    return {"onnx": onnx.__version__, "device": device, "total": total, **counts,
            "pass_rate": counts["passed"] / total if total else 0.0,
            "passed_on_device_only": pure}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m onnx_ep.testing.node_suite",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", help="only cases whose name matches this regex")
    ap.add_argument("--device", default="CPU", choices=["CPU", "CUDA"])
    ap.add_argument("--failures", action="store_true", help="print only failures")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--json", metavar="FILE", help="write every case's result to FILE")
    ns = ap.parse_args(argv)
    results = run_suite(ns.pattern, ns.device, ns.jobs)
    for r in results:
        if ns.failures and r.status in ("passed", "skipped"):
            continue
        print(f"{r.status:8s} {r.name}" + (f"  -- {r.reason}" if r.reason else ""))
    s = summarize(results, ns.device)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump({"summary": s, "cases": [attrs.asdict(r) for r in results]}, f, indent=1)
    print(f"node suite (onnx {s['onnx']}, device {s['device']}): {s['passed']} passed, "
          f"{s['failed'] + s['error']} failed, {s['skipped']} skipped of {s['total']} "
          f"({100 * s['pass_rate']:.1f}%)")
    return 0 if s["failed"] + s["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
