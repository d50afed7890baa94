"""Admission: a run asks for its whole need up front and is admitted or refused before work.

The strategy (chosen by the ``onnx_ep_select_admission_strategy`` hook) gets two values:
the :class:`AdmissionRequest` (which session asks, for what) and a
:class:`~onnx_ep.core.memory.LedgerView` of the device's ledger. It decides with
:meth:`LedgerView.fit <onnx_ep.core.memory.LedgerView.fit>`, the same decision the
authority makes when it reserves. A refusal is a typed error (:exc:`TierExhausted`: full
now, may succeed later; :exc:`CapacityUnavailable`: can never fit) with
``http_status = 429``. An admitted run holds its reservations until it ends, so it never
fails later for lack of memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import attrs

from onnx_ep.core.memory import DeviceMemoryAuthority, Fit, LedgerView, Reservation, Role, fit
from onnx_ep.errors import AdmissionRefused, CapacityUnavailable, PluginError


@attrs.frozen
class AdmissionRequest:
    """Everything one run (or one device plan) will reserve, in bytes, before any step runs.

    :ivar session: the asking session's holder name (``session-3``); the ledger view
        handed to the strategy counts what this session already holds.
    :ivar holder: the holder its reservations are charged to (``session-3/run-17``).
    :ivar activations: the activation arena at this shape signature.
    :ivar workspace_step: the step-scoped workspace peak.
    :ivar growth: new session-persistent bytes (workspace / KV growth) this run adds.
    """

    session: str
    holder: str
    activations: int
    workspace_step: int
    growth: int = 0

    @property
    def total(self) -> int:
        return self.activations + self.workspace_step + self.growth


@attrs.frozen
class AdmissionDecision:
    """``refusal`` is ``None`` when admitted, else the typed error to raise.

    :ivar wait: seconds the request may wait in its device's first-come-first-served
        queue (:meth:`~onnx_ep.core.memory.DeviceMemoryAuthority.turn`) for its bytes; it
        is admitted when it reaches the head of the queue and fits, and refused with
        :exc:`TierExhausted` when the time passes first. ``0``: decide now.
    """

    refusal: AdmissionRefused | None = None
    wait: float = 0.0

    @property
    def admitted(self) -> bool:
        return self.refusal is None


class AdmissionStrategy(Protocol):
    """What ``onnx_ep_select_admission_strategy`` returns.

    :ivar name: shown in ``Session.resources()`` and the session's log line.
    """

    name: str

    def admit(self, request: AdmissionRequest, ledger: LedgerView) -> AdmissionDecision:
        """Admit or refuse ``request`` given the ledger now. Called before every run on
        the host, and once per shape signature on a device (when its plan is bound).
        Must not reserve anything: the session reserves what an admitted request asked."""
        ...


@contextmanager
def admitted(strategy: AdmissionStrategy, request: AdmissionRequest,
             authority: DeviceMemoryAuthority) -> Iterator[None]:
    """Ask ``strategy`` about ``request`` on ``authority``'s ledger and raise its refusal;
    when it says wait, wait for the request's turn. The caller reserves the request's
    bytes inside the block, so no later request takes them first.

    :raises AdmissionRefused: the strategy's refusal, or :exc:`TierExhausted` when a
        waiting request's time passed.
    """
    decision = strategy.admit(request, authority.view(request.session))
    if not isinstance(decision, AdmissionDecision):
        raise PluginError(f"admission strategy {strategy_name(strategy)!r}: admit() returned "
                          f"{type(decision).__name__}, expected an AdmissionDecision")
    if decision.wait > 0 and not isinstance(decision.refusal, CapacityUnavailable):
        need = sum(authority.round_up(n) for n in
                   (request.activations, request.workspace_step, request.growth))
        with authority.turn(need, request.session, request.holder, decision.wait):
            yield
        return
    if decision.refusal is not None:
        raise decision.refusal
    yield


def plan_request(session: str, holder: str, plan: Any) -> AdmissionRequest:
    """The request of a plan held for the session's life (a device plan or a control-flow
    body's): its arena, step workspace and session workspace, charged to ``holder``."""
    ws = plan.workspace
    return AdmissionRequest(session, holder, plan.arena.size, ws.step_peak, ws.session_peak)


def refuse_never(session: str, plan: Any, weight_bytes: int,
                 authority: DeviceMemoryAuthority) -> None:
    """Refuse at load what no run could ever be admitted for: the weights and a static
    ``plan`` (arena and workspaces) together over the whole budget.

    :raises CapacityUnavailable: naming each part and the budget.
    """
    ws = plan.workspace
    parts = {"weights": weight_bytes, "activations": plan.arena.size,
             "step workspace": ws.step_peak, "session workspace": ws.session_peak}
    need = sum(authority.round_up(n) for n in parts.values())
    if fit(need, budget=authority.budget, committed=0) is Fit.NEVER:
        listed = ", ".join(f"{k} {v}" for k, v in parts.items() if v)
        raise CapacityUnavailable(
            f"{session} needs {need} bytes for its inputs' one shape ({listed}) but the "
            f"budget on {authority.device} is {authority.budget}: no run could ever be "
            f"admitted. Raise memory_limit, lower the input sizes, or use weight_streaming",
            requested=need, available=authority.budget, holder=session)


def reserve_for_run(request: AdmissionRequest,
                    authority: DeviceMemoryAuthority) -> list[Reservation]:
    """Reserve a request's step-scoped bytes atomically (all or none).

    Growth is reserved separately by the session through a grant, because it
    outlives the run.
    """
    parts = [(request.activations, Role.ACTIVATIONS),
             (request.workspace_step, Role.WORKSPACE_STEP)]
    return authority.reserve_many([(n, r) for n, r in parts if n > 0], request.holder)


def strategy_name(strategy: Any) -> str:
    """The strategy's ``name``, else its class name."""
    return getattr(strategy, "name", type(strategy).__name__)
