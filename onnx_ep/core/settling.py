"""Settling placement at one shape signature: the planner's fixed-point loop.

Placement (``core/placement.py``) runs once, with the types onnx inference gives at load.
At a shape signature a plan knows more (every size, the values folded there), so two kinds
of node change sides there:

- *promoted*: a host node whose device kernel declined at load while part of its meta was
  unknown (:attr:`~onnx_ep.core.placement.PlacedNode.deferred`) and accepts it with this
  signature's meta runs on the device at this signature;
- *sent back*: a device node that reads or writes a value of unknown size here (a device
  pre-binds every buffer) runs on the host at this signature.

Each outcome is a placement of its own, cached by the session per (sent back, promoted)
pair; docs/ARCHITECTURE.md ("Placement") walks through it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from onnx_ep.core.folding import HostKernels
from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.planner import ExecutionPlan, plan_signature
from onnx_ep.errors import PlanError

log = logging.getLogger("onnx_ep")

#: why a device node that declined nothing is sent back to the host at a signature
UNSIZED = ("an input or output size is unknown at plan time (it depends on values computed "
           "on the device)")


def plan_with_host_fallback(build: Any, signature: tuple[Any, ...],
                            specs: dict[str, TensorSpec | None], device: str,
                            on_fallback: Any = None, *,
                            host_kernels: HostKernels | None = None,
                            check: Any = None,
                            outer_known: Mapping[str, Any] | None = None) -> ExecutionPlan:
    """Plan ``build(frozenset(), frozenset())`` at ``signature``, settling placement there.

    Host nodes whose device kernel declined at load with part of the meta unknown (a rank,
    a size, a value folded per signature) and accepts it at this signature's are promoted:
    planned again as ``build(frozenset(), promoted)``. Then, while device nodes cannot be
    sized (or a promoted one declines after all), plan ``build(host_only, promoted)`` with
    them moved to the host (moving one can leave a neighbour unsized, so this repeats to a
    fixed point).

    :param build: ``(host_only, promoted) -> Program``. :param on_fallback: called with the
        node names sent back to the host, then a ``{name: reason}`` dict, before each
        re-plan (it may raise). :param host_kernels: as :func:`plan_signature`'s.
    :param check: ``plan -> {name: reason}``, more device nodes to send back once every
        size is known (device control flow whose bodies cannot run there).
    :param outer_known: as :func:`plan_signature`'s (a control-flow body).
    """
    def plan_at(host_only: frozenset[str], promoted: frozenset[str]) -> ExecutionPlan:
        return plan_signature(build(host_only, promoted), signature, dict(specs), device,
                              host_kernels=host_kernels, outer_known=outer_known)

    host_only: frozenset[str] = frozenset()
    promoted: frozenset[str] = frozenset()
    plan = plan_at(host_only, promoted)
    # to a fixed point: a promoted node's kernel can size outputs the host's could not (a
    # contrib op onnx cannot infer), which lets the nodes reading them be promoted in turn
    while not set(plan.promotable) <= promoted:
        promoted |= frozenset(plan.promotable)
        plan = plan_at(host_only, promoted)
    back: dict[str, str] = {}

    def to_send_back() -> dict[str, str]:
        why = {n: plan.declined.get(n, UNSIZED) for n in unsized_device_steps(plan, device)}
        return why or (check(plan) if check is not None else {})

    while why := to_send_back():
        unsized = list(why)
        back.update(why)
        if on_fallback is not None:
            on_fallback(unsized, why)
        host_only |= frozenset(unsized)
        plan = plan_at(host_only, promoted)
    plan.promoted = tuple(n for n in promoted if n not in host_only)
    plan.sent_back = back
    return plan


def fallback_reporter(device: str, signature: str, can_fall_back: bool) -> Any:
    """The ``on_fallback`` of a session's :func:`plan_with_host_fallback`: logs each node
    sent back to the host with its reason (INFO), or raises :exc:`PlanError` when no host
    provider is listed to run them."""
    def report(unsized: list[str], why: Mapping[str, str]) -> None:
        if not can_fall_back:
            raise PlanError(
                f"node(s) {', '.join(map(repr, unsized[:5]))} on {device}: "
                f"{why[unsized[0]]} at inputs {signature}, and no host provider is listed to "
                f"run them; add 'cpu_reference' to providers=")
        for n in unsized:
            log.info("signature %s: node %r falls back to the host: %s", signature, n, why[n])
    return report


def unsized_device_steps(plan: ExecutionPlan, device: str) -> list[str]:
    """Names of nodes on ``device`` that read or write a value of unknown size here.

    A device needs every buffer's bytes before the run (outputs are pre-bound, inputs
    arrive through pre-bound copies); the session re-places these nodes on a host
    provider for this signature.
    """
    name_of = {s: n for n, s in plan.program.slot_of.items()}
    constants = {c for c, _ in plan.program.constants}   # uploaded: sized by construction

    def unsized(s: int) -> bool:
        if s < 0 or s in constants:
            return False
        spec = plan.specs.get(name_of[s])
        return spec is None or not spec.is_static

    def needs_sizes(st: Any) -> tuple[int, ...]:
        # a kernel that sizes its outputs at run time (core/dynamic.py) makes its own; one
        # that reads run-sized values (a region) takes them at any size
        kernel = st.placed.kernel
        ins = () if getattr(kernel, "reads_run_sized", False) else st.in_slots
        return ins + (() if getattr(kernel, "sizes_at_run", False) else st.out_slots)

    return [st.placed.node.name for st in plan.program.steps
            if st.placed is not None and st.placed.device == device
            and (st.placed.node.name in plan.declined
                 or any(unsized(s) for s in needs_sizes(st)))]
