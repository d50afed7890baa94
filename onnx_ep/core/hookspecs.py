"""Every onnx-ep hook, documented: the plugin author's one page (with ``core/kernel.py``).

A plugin is any object or module with functions decorated ``@onnx_ep.hookimpl``
and named after a hook below. Packages expose plugins through the entry-point
group ``onnx_ep``; tests pass them in-process with ``Session(..., plugins=[obj])``.
The built-in providers, memory policies and admission strategies are plugins too
(``core/plugin_manager.BUILTIN_PLUGINS``): the session only calls these hooks.
See docs/PLUGINS.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from onnx_ep.core.admission import AdmissionStrategy
    from onnx_ep.core.kernel import Kernel
    from onnx_ep.core.memory import MemoryPolicy
    from onnx_ep.core.provider import Provider

PROJECT_NAME = "onnx_ep"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class RegisterProvider(Protocol):
    def __call__(self, provider: Provider) -> None: ...


class RegisterKernel(Protocol):
    def __call__(self, kernel: Kernel, *, provider: str) -> None: ...


# ---------------------------------------------------------------- registration

@hookspec
def onnx_ep_register_providers(register: RegisterProvider) -> None:
    """Offer execution providers.

    Called once per plugin manager, before kernels are registered. Call
    ``register(Provider(name=..., device=..., is_available=...))`` for each
    provider. Registering a name twice raises :exc:`PluginError`.

    :param register: callback that validates and records one provider.
    """


@hookspec
def onnx_ep_register_kernels(register: RegisterKernel) -> None:
    """Offer kernel implementations to the registry.

    Called once per plugin manager, after providers are registered and before
    any Session plans a graph. Call ``register(kernel, provider="cpu_reference")``
    for each kernel (an object satisfying :class:`onnx_ep.Kernel`). A kernel
    that breaks the protocol raises :exc:`KernelContractError`; a second kernel
    for the same OpKey and provider raises :exc:`KernelConflictError`. If this
    hook raises, none of this plugin's kernels are kept and other plugins'
    registrations are untouched; the error surfaces as :exc:`PluginError`
    naming the plugin.

    :param register: callback that validates and records one kernel.
    """


@hookspec
def onnx_ep_fusion_rules() -> Sequence[Any]:
    """Graph-fusion rules to try at load, before the built-in ones (docs/FUSION.md).

    Each rule has a ``name`` and ``match(anchor, view) -> Match | None``
    (:class:`~onnx_ep.core.fusion.FusionRule`). A match is applied only where a device
    provider of the session has a kernel that supports the fused node.

    :returns: a sequence of rules (may be empty).
    """


# ---------------------------------------------------------------- selection

@hookspec(firstresult=True)
def onnx_ep_select_memory_policy(model_bytes: int, planned_peak: int, budget: int,
                                 options: Any) -> MemoryPolicy | None:
    """Choose the memory policy for a session at load time.

    Stops at first non-None result. The built-in default (``full_resident`` when
    weights and the planned peak fit the budget, else ``weight_streaming``) answers
    ``trylast``, so any plugin answering wins over it. A policy forced by
    ``ONNX_EP_MEMORY_POLICY`` or ``SessionOptions(memory_policy=...)`` wins over every
    plugin (the built-in plugin wraps this hook to apply it).

    :param model_bytes: bytes of all weights (initializers).
    :param planned_peak: activation arena plus workspace bytes when every model input
        has a static shape (the session plans that signature at load), else 0.
    :param budget: the memory authority's budget in bytes.
    :param options: the session's :class:`SessionOptions`.
    :returns: a :class:`~onnx_ep.core.memory.MemoryPolicy`, or ``None`` to let the next
        plugin decide.
    """


@hookspec(firstresult=True)
def onnx_ep_select_admission_strategy(options: Any) -> AdmissionStrategy | None:
    """Choose the admission strategy for a session, once, when it is created.

    Stops at first non-None result. The built-in default (``strict``) answers
    ``trylast``; ``SessionOptions(admission="strict" | "headroom" | "queue")`` names a
    built-in that wins over every plugin; another name is left to plugins, and refused
    with :exc:`OptionsError` if none answers.

    :param options: the session's :class:`SessionOptions`.
    :returns: an :class:`~onnx_ep.core.admission.AdmissionStrategy` (its
        ``admit(request, ledger) -> AdmissionDecision`` sees an ``AdmissionRequest`` and a
        ``LedgerView``; ``AdmissionDecision(wait=seconds)`` queues the request first come,
        first served instead of deciding now), or ``None``.
    """


# ---------------------------------------------------------------- observation

@hookspec
def onnx_ep_session_created(session: Any) -> None:
    """Observe a new session, after placement of its graph.

    Must not raise; an exception is turned into an :class:`OnnxEpWarning`.
    """


@hookspec
def onnx_ep_run_finished(session: Any, stats: dict[str, Any]) -> None:
    """Observe the end of a successful ``Session.run``.

    :param stats: ``{"seconds": float, "planned": bool, "signature": tuple}``.
    Must not raise; an exception is turned into an :class:`OnnxEpWarning`.
    """
