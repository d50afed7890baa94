"""What ``Session.resources()`` reports: budget, ledger, plans, policy, capture, fusion."""

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
