"""Kernel lookup by (domain, op_type, opset, provider, dtypes).

The registry is filled by the ``onnx_ep_register_providers`` and
``onnx_ep_register_kernels`` hooks (see ``core/plugin_manager.py``); every entry
records the plugin that registered it, so errors can name it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from types import ModuleType
from typing import Any

import attrs

from onnx_ep.core.kernel import Kernel, NodeMeta, Support, check_kernel, check_runner
from onnx_ep.core.provider import Provider
from onnx_ep.errors import KernelConflictError, KernelContractError, NoKernelError, PluginError


@attrs.frozen
class KernelEntry:
    """One registered kernel and who registered it."""

    kernel: Any
    provider: str
    plugin: str

    @property
    def since(self) -> int:
        return int(self.kernel.key.since)


@attrs.frozen
class Selection:
    """The result of a lookup: which provider's kernel runs a node."""

    provider: str
    kernel: Any
    entry: KernelEntry
    #: ``(provider, why)`` for each provider listed before ``provider`` that declined
    passed_over: tuple[tuple[str, str], ...] = ()


class KernelRegistry:
    """Providers and their kernels. Filled once per plugin manager; read-only afterwards."""

    def __init__(self) -> None:
        self.providers: dict[str, Provider] = {}
        self._provider_plugin: dict[str, str] = {}
        # (provider, domain, op_type) -> entries sorted by since, newest first
        self._kernels: dict[tuple[str, str, str], list[KernelEntry]] = {}

    # ------------------------------------------------------------ registration
    def add_provider(self, provider: Provider, *, plugin: str) -> None:
        if not isinstance(provider, Provider):
            raise PluginError(f"register() expects an onnx_ep.Provider, got "
                              f"{type(provider).__name__}", plugin=plugin)
        if provider.name in self.providers:
            raise PluginError(f"provider {provider.name!r} is already registered by plugin "
                              f"{self._provider_plugin[provider.name]!r}", plugin=plugin)
        self.providers[provider.name] = provider
        self._provider_plugin[provider.name] = plugin

    def validate_kernel(self, kernel: Any, provider: str, *, plugin: str) -> KernelEntry:
        """Check ``kernel`` against the protocol and for conflicts; raise naming the plugin."""
        why = check_kernel(kernel)
        if why is not None:
            raise KernelContractError(f"kernel {kernel!r} breaks the Kernel protocol: {why}",
                                      plugin=plugin)
        if provider not in self.providers:
            known = ", ".join(sorted(self.providers)) or "none"
            raise PluginError(f"kernel {kernel.key} registered for unknown provider "
                              f"{provider!r} (registered providers: {known}); register the "
                              f"provider in onnx_ep_register_providers first", plugin=plugin)
        owner = self._provider_plugin.get(provider)
        versions = self._kernels.get((provider, kernel.key.domain, kernel.key.op_type), ())
        if self.providers[provider].sealed and plugin != owner and any(
                e.plugin == owner for e in versions):
            op = f"{kernel.key.domain or 'ai.onnx'}::{kernel.key.op_type}"
            raise KernelConflictError(
                f"provider {provider!r} is the reference every other provider is held to: "
                f"no plugin may register, replace or shadow its {op} (a kernel since opset "
                f"{kernel.key.since} was offered); register the kernel on a provider of "
                f"your own", plugin=plugin)
        for other in versions:
            if other.since == kernel.key.since:
                raise KernelConflictError(
                    f"a kernel for {kernel.key} (since opset {kernel.key.since}) on provider "
                    f"{provider!r} is already registered by plugin {other.plugin!r}",
                    plugin=plugin)
        return KernelEntry(kernel, provider, plugin)

    def add_entries(self, entries: Iterable[KernelEntry]) -> None:
        """Commit validated entries (all of one plugin's registrations at once)."""
        for e in entries:
            k = e.kernel.key
            bucket = self._kernels.setdefault((e.provider, k.domain, k.op_type), [])
            bucket.append(e)
            bucket.sort(key=lambda x: -x.since)

    # ------------------------------------------------------------ lookup
    def kernel_for(self, provider: str, domain: str, op_type: str,
                   opset: int) -> KernelEntry | None:
        """The newest kernel with ``since <= opset``, or None."""
        for e in self._kernels.get((provider, domain, op_type), ()):
            if e.since <= opset:
                return e
        return None

    def select(self, meta: NodeMeta, providers: Sequence[str]) -> Selection:
        """Pick the first provider (in priority order) whose kernel supports ``meta``.

        :raises NoKernelError: listing every provider tried and why it declined.
        """
        tried: dict[str, str] = {}
        for p in providers:
            entry = self.kernel_for(p, meta.domain, meta.op_type, meta.opset)
            if entry is None:
                older = self._kernels.get((p, meta.domain, meta.op_type))
                tried[p] = (f"kernels only from opset {older[-1].since}" if older
                            else "no kernel")
                continue
            verdict = ask_supports(entry.kernel, meta, entry.plugin)
            if verdict:
                return Selection(p, entry.kernel, entry, tuple(tried.items()))
            tried[p] = f"rejected: {verdict.reason}"
        op = f"{meta.domain or 'ai.onnx'}::{meta.op_type}"
        raise NoKernelError(node=meta.name, op=op, opset=meta.opset, tried=tried)

    # ------------------------------------------------------------ introspection
    def entries(self, provider: str | None = None) -> Iterator[KernelEntry]:
        for (p, _, _), bucket in sorted(self._kernels.items()):
            if provider is None or p == provider:
                yield from bucket

    def kernel_counts(self) -> dict[str, int]:
        counts = {p: 0 for p in self.providers}
        for e in self.entries():
            counts[e.provider] = counts.get(e.provider, 0) + 1
        return counts

    def provider_plugin(self, name: str) -> str:
        return self._provider_plugin[name]

    def available(self) -> list[str]:
        """Names of providers that can run here, highest priority first."""
        ok = [p for p in self.providers.values() if p.is_available()]
        return [p.name for p in sorted(ok, key=lambda p: -p.priority)]


def ask_supports(kernel: Any, meta: NodeMeta, plugin: str = "") -> Support:
    """``kernel.supports(meta)`` (YES when the kernel has none), held to its contract.

    :raises KernelContractError: it raised, or returned something other than a Support.
    """
    supports = getattr(kernel, "supports", None)
    try:
        verdict = supports(meta) if supports is not None else Support.YES
    except Exception as exc:
        raise KernelContractError(
            f"{kernel!r}.supports() raised {type(exc).__name__}: {exc} for node "
            f"{meta.name!r}; supports() must return Support.no(reason) instead",
            plugin=plugin) from exc
    if not isinstance(verdict, Support):
        raise KernelContractError(
            f"{kernel!r}.supports() returned {type(verdict).__name__}, "
            f"expected onnx_ep.Support", plugin=plugin)
    return verdict


def bind_kernel(kernel: Kernel, meta: NodeMeta) -> Kernel:
    """The object that runs one node: ``kernel.bind(meta)`` when defined, else the kernel."""
    bind = getattr(kernel, "bind", None)
    if bind is None:
        return kernel
    bound = bind(meta)
    if bound is None or bound is kernel:
        return kernel
    why = check_runner(bound)
    if why is not None:
        raise KernelContractError(f"{kernel!r}.bind() for node {meta.name!r} returned "
                                  f"{type(bound).__name__}, which breaks the Kernel protocol: "
                                  f"{why}")
    return bound


def register_kernel_modules(register: Callable[..., None], modules: Iterable[ModuleType],
                            provider: str) -> None:
    """Register the ``KERNELS`` list of each module in ``modules`` for ``provider``.

    The built-in providers keep their kernels in op-family modules and pass those modules
    here from their ``onnx_ep_register_kernels`` hook; a third-party provider can do the
    same.
    """
    for module in modules:
        for kernel in module.KERNELS:
            register(kernel, provider=provider)
