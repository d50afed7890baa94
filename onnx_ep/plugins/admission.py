"""Built-in admission strategies ``strict``, ``headroom`` and ``queue``: a plugin like any other.

The default (``strict``) answers ``trylast``, so any plugin's strategy wins over it. An
explicit ``SessionOptions(admission="strict" | "headroom")`` beats every plugin: the
wrapper below replaces whatever the other implementations chose.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from onnx_ep.core.admission import AdmissionDecision, AdmissionRequest, AdmissionStrategy
from onnx_ep.core.hookspecs import hookimpl
from onnx_ep.core.memory import Fit, LedgerView
from onnx_ep.errors import CapacityUnavailable, OptionsError, TierExhausted

BUILTINS = ("strict", "headroom", "queue")


class StrictAdmission:
    """Admit when the request fits in what is free now; refuse otherwise."""

    name = "strict"

    def admit(self, request: AdmissionRequest, ledger: LedgerView) -> AdmissionDecision:
        return _decide(request, ledger, keep_free=0.0, name=self.name)


class HeadroomAdmission:
    """Like strict, but keep ``fraction`` of the budget free (for bursts and other tenants)."""

    name = "headroom"

    def __init__(self, fraction: float = 0.1) -> None:
        if not 0.0 <= fraction < 1.0:
            raise OptionsError(f"headroom_fraction must be in [0, 1), got {fraction}")
        self.fraction = fraction

    def admit(self, request: AdmissionRequest, ledger: LedgerView) -> AdmissionDecision:
        return _decide(request, ledger, keep_free=self.fraction, name=self.name)


class QueueAdmission:
    """Wait for bytes instead of refusing at once: a request that does not fit now (or
    finds others waiting before it) joins its device's queue and is admitted first come,
    first served when releases make room, or refused with :exc:`TierExhausted` after
    ``timeout`` seconds. A request that can never fit is refused at once."""

    name = "queue"

    def __init__(self, timeout: float = 10.0) -> None:
        if not timeout >= 0:
            raise OptionsError(f"admission_timeout must be >= 0 seconds, got {timeout}")
        self.timeout = float(timeout)

    def admit(self, request: AdmissionRequest, ledger: LedgerView) -> AdmissionDecision:
        decision = _decide(request, ledger, keep_free=0.0, name=self.name)
        if isinstance(decision.refusal, CapacityUnavailable):
            return decision
        return AdmissionDecision(decision.refusal, wait=self.timeout)


def _decide(request: AdmissionRequest, ledger: LedgerView, keep_free: float,
            name: str) -> AdmissionDecision:
    need = sum(ledger.round_up(n) for n in
               (request.activations, request.workspace_step, request.growth))
    usable = int(ledger.budget * (1.0 - keep_free))
    verdict = ledger.fit(need, usable)
    if verdict is Fit.NEVER:
        return AdmissionDecision(CapacityUnavailable(
            f"{request.holder} needs {need} bytes (activations {request.activations}, "
            f"step workspace {request.workspace_step}, growth {request.growth}) on top of "
            f"{ledger.held} held by {request.session}; {name} admission allows {usable} of "
            f"the {ledger.budget}-byte budget on {ledger.device}. Raise memory_limit, "
            f"lower the batch or sequence length, or use weight_streaming",
            requested=need, available=usable - ledger.held, holder=request.holder))
    if verdict is Fit.NOT_NOW:
        free = max(usable - ledger.committed, 0)
        return AdmissionDecision(TierExhausted(
            f"{request.holder} needs {need} bytes but only {free} are free now on "
            f"{ledger.device} ({name} admission, budget {ledger.budget}); retry later",
            requested=need, available=free, holder=request.holder))
    return AdmissionDecision()


def builtin_strategy(choice: str, options: Any) -> AdmissionStrategy:
    """The built-in strategy called ``choice``.

    :raises OptionsError: ``choice`` names no built-in.
    """
    if choice == "strict":
        return StrictAdmission()
    if choice == "headroom":
        return HeadroomAdmission(getattr(options, "headroom_fraction", 0.1))
    if choice == "queue":
        return QueueAdmission(getattr(options, "admission_timeout", 10.0))
    raise OptionsError(f"unknown admission strategy {choice!r}; built-ins are 'strict', "
                       f"'headroom' and 'queue' (plugins may add more through "
                       f"onnx_ep_select_admission_strategy)")


@hookimpl(wrapper=True)
def onnx_ep_select_admission_strategy(options: Any) -> Generator[None, Any, Any]:
    # an explicit choice of a built-in beats every plugin; another name is left to them
    chosen = yield
    choice = getattr(options, "admission", None)
    return builtin_strategy(choice, options) if choice in BUILTINS else chosen


@hookimpl(trylast=True, specname="onnx_ep_select_admission_strategy")
def default_admission_strategy(options: Any) -> AdmissionStrategy:
    # reached only when no plugin answered: a name no plugin knows is an error here
    return builtin_strategy(getattr(options, "admission", None) or "strict", options)
