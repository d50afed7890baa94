"""What ``Session.resources()`` reports: budget, ledger, plans, policy, capture, fusion; and
the capture report as text (``onnx-ep run --capture-report``)."""

from __future__ import annotations

from typing import Any

from onnx_ep.core import admission as adm
from onnx_ep.core.capture import signature_text


def session_resources(session: Any) -> dict[str, Any]:
    """``session.resources()``: JSON-ready (only dicts, lists, strings and ints)."""
    s = session
    plans = [{"signature": signature_text(p.signature), "arena_bytes": p.arena.size,
              "activation_naive_bytes": p.arena.naive_bytes,
              "activation_live_peak_bytes": p.arena.live_peak_bytes,
              "workspace_step_bytes": p.workspace.step_peak,
              "workspace_session_bytes": p.workspace.session_peak, "copies": p.copies(),
              "nodes": p.nodes()}
             for p in list(s._plans.values())]
    authority = s._authority
    bodies = s._executor.device_subgraphs
    return {"holder": s.holder, "device": authority.device,
            "budget": authority.budget, "committed": authority.committed,
            "held_by_session": authority.held_by(s.holder),
            "weights_bytes": s._graph.weight_bytes,
            "ledger": authority.ledger(),
            "policy": {"name": s.memory_policy.name,
                       "streaming": bool(s.memory_policy.streams),
                       "counters": s.memory_policy.counters()},
            "admission": adm.strategy_name(s._admission), "plans": plans,
            "plan_cache": s._plans.report(),
            "bodies": bodies.report() if bodies else [],
            "capture": s.capture_report(), "fusion": s._fusion.as_dict()}


def capture_text(report: dict[str, Any]) -> str:
    """``Session.capture_report()`` in a few lines per signature."""
    if not report["plans"]:
        return f"capture ({report['mode']}): no device plan (nothing to capture)"
    lines = []
    for p in report["plans"]:
        lines.append(f"capture ({report['mode']}) {p['signature']}: {p['state']}, "
                     f"{len(p['segments'])} segments, {p['captured_steps']} of {p['steps']} "
                     f"steps captured, {len(p['seams'])} seams, {p['records']} records, "
                     f"{p['replays']} replays")
        for seg in p["segments"]:
            lines.append(f"  segment {seg['first']} .. {seg['last']} ({seg['nodes']} steps"
                         f"{', recorded' if seg.get('recorded') else ''})")
        for seam in p["seams"]:
            if seam["kind"] != "io":
                lines.append(f"  seam {seam['step']} ({seam['kind']}): {seam['reason']}")
        for f in p["failures"]:
            lines.append(f"  recording failed at {f['node']} ({f['kernel']}): {f['error']}")
        if p.get("declined") or p.get("given_up"):
            lines.append(f"  {p.get('declined') or p.get('given_up')}")
    for node, why in report["quarantined"].items():
        lines.append(f"quarantined {node}: {why}")
    return "\n".join(lines)
