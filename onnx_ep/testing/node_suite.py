"""Run onnx's backend node test suite (generated in memory) through ``onnx_ep.backend``.

The comparison is onnx's own (``onnx.backend.test.runner.Runner.assert_similar_outputs``)
with each case's rtol/atol. Cases we skip are listed, with their reason, in
``node_suite_skips.toml`` beside this module; nothing else is skipped. Where a case's
generated data contradicts the written specification (``node_suite_spec.py``), exactly
those elements are compared with the specification's answer instead, and the case's
result says so.

With ``--capture`` (a device), each data set runs three times: eagerly (the warm-up that
onnx's comparison checks), then recorded into CUDA graphs and replayed, then replayed
again; both replays must equal the eager outputs byte for byte. The case's ``captured``
counts its replays (0 where nothing could be captured).

``python -m onnx_ep.testing.node_suite [-k REGEX] [--device CPU|CUDA] [--capture] [--failures]
[--jobs N]``
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
import numpy as np

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
    #: graph replays checked against the eager outputs (``--capture``)
    captured: int = 0


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


def _same_bytes(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == object:
        return bool(np.all(a == b))
    return a.tobytes() == b.tobytes()


def _replays_match(rep: Any, feeds: list[Any], eager: Sequence[Any]) -> None:
    """Two more runs (record + replay, replay): every output byte-identical to ``eager``."""
    for attempt in ("recorded", "replayed"):
        again = rep.run(feeds)
        for k, (a, b) in enumerate(zip(again, eager)):
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
                continue              # sequences and maps run on the host, never captured
            if not _same_bytes(a, b):
                raise AssertionError(f"output {k} of the {attempt} run differs from the "
                                     f"eager run's bytes")


def _replays(session: Any) -> int:
    return sum(p["replays"] for p in session.capture_report()["plans"])


def run_case(case: Any, device: str = "CPU", capture: bool = False) -> CaseResult:
    """Run one node test case as onnx's runner does; with ``capture``, check replays too."""
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
                if capture:
                    _replays_match(rep, feeds, outs)
    except AssertionError as exc:
        msg = str(exc).strip().splitlines()
        return CaseResult(case.name, "failed", " ".join(msg[:3])[:300],
                          time.perf_counter() - t0)
    except Exception as exc:  # the report classifies every failure, it never stops the suite
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return CaseResult(case.name, "error", f"{type(exc).__name__}: {first}"[:300],
                          time.perf_counter() - t0)
    return CaseResult(case.name, "passed", note, time.perf_counter() - t0,
                      rep.session.placement_summary(),
                      _replays(rep.session) if capture else 0)


def _run_shard(args: tuple[str | None, str, int, int, bool]) -> list[CaseResult]:
    pattern, device, shard, n_shards, capture = args
    skips = load_skips()
    out = []
    for i, case in enumerate(load_cases(pattern)):
        if i % n_shards != shard:
            continue
        if case.name in skips:
            out.append(CaseResult(case.name, "skipped", skips[case.name]))
        else:
            out.append(run_case(case, device, capture))
    return out


def run_suite(pattern: str | None = None, device: str = "CPU",
              jobs: int = 1, capture: bool = False) -> list[CaseResult]:
    """Run every matching case (skips applied); results sorted by name."""
    if jobs <= 1:
        results = _run_shard((pattern, device, 0, 1, capture))
    else:
        with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
            parts = pool.map(_run_shard, [(pattern, device, i, jobs, capture)
                                          for i in range(jobs)])
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
            "passed_on_device_only": pure,
            "captured": sum(1 for r in results if r.status == "passed" and r.captured)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m onnx_ep.testing.node_suite",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", help="only cases whose name matches this regex")
    ap.add_argument("--device", default="CPU", choices=["CPU", "CUDA"])
    ap.add_argument("--capture", action="store_true",
                    help="also record and replay each data set twice and require the replays' "
                         "bytes to equal the eager run's (a device only)")
    ap.add_argument("--failures", action="store_true", help="print only failures")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--json", metavar="FILE", help="write every case's result to FILE")
    ns = ap.parse_args(argv)
    results = run_suite(ns.pattern, ns.device, ns.jobs, ns.capture)
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
          f"({100 * s['pass_rate']:.1f}%)"
          + (f"; {s['captured']} replayed byte-identical to eager" if ns.capture else ""))
    return 0 if s["failed"] + s["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
