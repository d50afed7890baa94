"""Admission: a run asks for its whole need up front and is admitted or refused before work.

The strategy (chosen by the ``onnx_ep_select_admission_strategy`` hook) sees
the :class:`AdmissionRequest` and the authority's ledger. A refusal is a typed
error (:exc:`TierExhausted`: full now, may succeed later; :exc:`CapacityUnavailable`:
can never fit) with ``http_status = 429``. An admitted run holds its
reservations until it ends, so it never fails later for lack of memory.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from onnx_ep.core.memory import DeviceMemoryAuthority, Reservation, Role
from onnx_ep.errors import AdmissionRefused


@attrs.frozen
class AdmissionRequest:
    """Everything one run will reserve, in bytes, before any step runs.

    :ivar holder: who asks (``session-3/run-17``).
    :ivar activations: the activation arena at this shape signature.
    :ivar workspace_step: the step-scoped workspace peak.
    :ivar growth: new session-persistent bytes (workspace / KV growth) this run adds.
    """

    holder: str
    activations: int
    workspace_step: int
    growth: int = 0

    @property
    def total(self) -> int:
        return self.activations + self.workspace_step + self.growth


@attrs.frozen
class AdmissionDecision:
    """``refusal`` is ``None`` when admitted, else the typed error to raise."""

    refusal: AdmissionRefused | None = None

    @property
    def admitted(self) -> bool:
        return self.refusal is None


class AdmissionStrategy(Protocol):
    """What ``onnx_ep_select_admission_strategy`` returns."""

    name: str

    def admit(self, request: AdmissionRequest,
              authority: DeviceMemoryAuthority) -> AdmissionDecision: ...


def reserve_for_run(request: AdmissionRequest,
                    authority: DeviceMemoryAuthority) -> list[Reservation]:
    """Reserve a request's step-scoped bytes atomically (all or none).

    Growth is reserved separately by the session through a grant, because it
    outlives the run.
    """
    parts = [(request.activations, Role.ACTIVATIONS),
             (request.workspace_step, Role.WORKSPACE_STEP)]
    return authority.reserve_many([(n, r) for n, r in parts if n > 0], request.holder)


def describe(strategy: Any) -> str:
    return getattr(strategy, "name", type(strategy).__name__)
