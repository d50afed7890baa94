"""Built-in admission strategies: ``strict`` and ``headroom`` (registered ``trylast``)."""

from __future__ import annotations

from typing import Any

from onnx_ep.core.admission import AdmissionDecision, AdmissionRequest
from onnx_ep.core.memory import DeviceMemoryAuthority
from onnx_ep.errors import CapacityUnavailable, OptionsError, TierExhausted
from onnx_ep.plugins.hookspecs import hookimpl


class StrictAdmission:
    """Admit when the request fits in what is free now; refuse otherwise."""

    name = "strict"

    def admit(self, request: AdmissionRequest,
              authority: DeviceMemoryAuthority) -> AdmissionDecision:
        return _check(request, authority, reserve_fraction=0.0, name=self.name)


class HeadroomAdmission:
    """Like strict, but keep ``fraction`` of the budget free (for bursts and other tenants)."""

    name = "headroom"

    def __init__(self, fraction: float = 0.1) -> None:
        if not 0.0 <= fraction < 1.0:
            raise OptionsError(f"headroom_fraction must be in [0, 1), got {fraction}")
        self.fraction = fraction

    def admit(self, request: AdmissionRequest,
              authority: DeviceMemoryAuthority) -> AdmissionDecision:
        return _check(request, authority, reserve_fraction=self.fraction, name=self.name)


def _check(request: AdmissionRequest, authority: DeviceMemoryAuthority,
           reserve_fraction: float, name: str) -> AdmissionDecision:
    need = sum(authority.round_up(n) for n in
               (request.activations, request.workspace_step, request.growth))
    usable = int(authority.budget * (1.0 - reserve_fraction))
    held = authority.held_by(request.holder.split("/")[0])
    if need + held > usable:
        return AdmissionDecision(CapacityUnavailable(
            f"{request.holder} needs {need} bytes (activations {request.activations}, "
            f"step workspace {request.workspace_step}, growth {request.growth}) on top of "
            f"{held} held by its session; {name} admission allows {usable} of the "
            f"{authority.budget}-byte budget on {authority.device}. Raise memory_limit, "
            f"lower the batch or sequence length, or use weight_streaming",
            requested=need, available=usable - held, holder=request.holder))
    free = usable - authority.committed
    if need > free:
        return AdmissionDecision(TierExhausted(
            f"{request.holder} needs {need} bytes but only {max(free, 0)} are free now on "
            f"{authority.device} ({name} admission, budget {authority.budget}); retry later",
            requested=need, available=max(free, 0), holder=request.holder))
    return AdmissionDecision()


def forced_admission(options: Any) -> Any:
    """The built-in strategy named by ``options.admission``, else None.

    An explicit choice of a built-in beats every plugin's hook; another name is
    left for plugins (and refused by the built-in hook if none answers).
    """
    choice = getattr(options, "admission", None)
    return _builtin(choice, options) if choice in ("strict", "headroom") else None


def _builtin(choice: str, options: Any) -> Any:
    if choice == "strict":
        return StrictAdmission()
    if choice == "headroom":
        return HeadroomAdmission(getattr(options, "headroom_fraction", 0.1))
    raise OptionsError(f"unknown admission strategy {choice!r}; built-ins are 'strict' and "
                       f"'headroom' (plugins may add more through "
                       f"onnx_ep_select_admission_strategy)")


@hookimpl(trylast=True)
def onnx_ep_select_admission_strategy(options: Any) -> Any:
    return _builtin(getattr(options, "admission", None) or "strict", options)
