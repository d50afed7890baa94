"""Builds the pluggy PluginManager and the kernel registry from it.

Plugins come from three places, in this order: the built-ins (which use the
same hooks as anyone), the entry-point group ``onnx_ep`` (narrowed by the
``ONNX_EP_PLUGINS`` environment variable), and in-process objects passed as
``Session(..., plugins=[obj])``.

A plugin that fails to import, or raises inside a registration hook, or registers
something malformed is recorded in ``PluginSet.errors`` (a :exc:`PluginError` naming
it); each plugin's registrations are staged and committed only when its hook returns,
so a failing plugin leaves none of its kernels behind and other plugins' kernels are
never affected. A ``Session`` raises the error of an in-process plugin (the caller
passed it); an installed one (entry point) *fails alone*: it is disabled with a warning
naming it, its error and how to leave it out (``ONNX_EP_PLUGINS``), unless the session
asks for ``strict_plugins``.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import attrs
import pluggy

from onnx_ep.core import hookspecs
from onnx_ep.core.provider import Provider
from onnx_ep.core.registry import KernelEntry, KernelRegistry
from onnx_ep.errors import (
    KernelConflictError,
    OnnxEpWarning,
    OptionsError,
    PluginError,
    ProviderUnavailable,
)

ENTRY_POINT_GROUP = "onnx_ep"
#: comma-separated entry-point names to load; unset loads all, empty or "none" loads none
PLUGINS_ENV = "ONNX_EP_PLUGINS"

#: The built-in plugins, by module name: loaded like entry points (the core names them and
#: calls their hooks, it imports none of their code) and registered first, so that every
#: entry point and in-process plugin can override them through the same hooks. pytest's
#: ``default_plugins`` and llm's ``DEFAULT_PLUGINS`` work the same way.
log = logging.getLogger("onnx_ep")

BUILTIN_PLUGINS: tuple[str, ...] = (
    "onnx_ep.providers.cpu_reference",
    "onnx_ep.providers.cuda",
    "onnx_ep.plugins.policies",
    "onnx_ep.plugins.admission",
)


@attrs.define(eq=False)
class PluginSet:
    """A plugin manager together with the registry its hooks filled."""

    pm: pluggy.PluginManager
    registry: KernelRegistry
    plugin_names: list[str]
    #: load and registration failures; each plugin's partial registrations were discarded
    errors: list[PluginError] = attrs.Factory(list)
    #: names of the installed (entry-point) plugins
    installed: frozenset[str] = frozenset()
    _warned: bool = False

    def broken(self) -> dict[str, str]:
        """Installed plugins disabled by a failure, with the failure."""
        return {e.plugin: str(e) for e in self.errors if e.plugin in self.installed}

    def check(self, strict: bool = False) -> None:
        """Raise the first failure of an in-process plugin; for an installed one, warn once
        that it is disabled (``strict``: raise it too).

        :raises PluginError:
        """
        for e in self.errors:
            if strict or e.plugin not in self.installed:
                raise e
        if self.errors and not self._warned:
            self._warned = True
            for name, why in self.broken().items():
                warnings.warn(
                    f"installed plugin {name!r} is disabled: {why}. Sessions that do not "
                    f"need it run without it; leave it out with {PLUGINS_ENV}=<the plugins "
                    f"to load, comma-separated, or 'none'>, or make this an error with "
                    f"SessionOptions(strict_plugins=True)", OnnxEpWarning, stacklevel=3)

    def fusion_rules(self) -> list[Any]:
        """Plugins' fusion rules (``onnx_ep_fusion_rules``), then the built-in ones.

        :raises PluginError: for a rule without a ``name`` or a ``match`` method.
        """
        from onnx_ep.core.fusion import BUILTIN_RULES

        rules: list[Any] = []
        for impl in self.pm.hook.onnx_ep_fusion_rules.get_hookimpls():
            for rule in impl.function() or ():
                if not isinstance(getattr(rule, "name", None), str) or not callable(
                        getattr(rule, "match", None)):
                    raise PluginError(f"fusion rule {rule!r} needs a 'name' and a "
                                      f"match(anchor, view) method", plugin=impl.plugin_name)
                rules.append(rule)
        return [*rules, *BUILTIN_RULES]


def _selected_entry_points() -> list[metadata.EntryPoint]:
    eps = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    wanted = os.environ.get(PLUGINS_ENV)
    if wanted is None:
        return eps
    names = {w.strip() for w in wanted.split(",") if w.strip() and w.strip() != "none"}
    return [ep for ep in eps if ep.name in names]


def build_plugins(plugins: Sequence[Any] = (), *, entry_points: bool = True) -> PluginSet:
    """Create a plugin manager with built-ins, entry points and ``plugins``, then fill a registry.

    Failures are collected in :attr:`PluginSet.errors` (see :meth:`PluginSet.check`).

    :raises PluginError: an in-process plugin pluggy cannot register (a bad hook name).
    """
    from importlib import import_module

    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    installed: set[str] = set()
    load_errors: list[PluginError] = []
    for modname in BUILTIN_PLUGINS:
        pm.register(import_module(modname), name=modname)
    if entry_points:
        for ep in _selected_entry_points():
            if pm.get_plugin(ep.name) is not None:
                continue
            installed.add(ep.name)
            try:
                obj = ep.load()
                _register(pm, obj, ep.name)
            except Exception as exc:          # it fails alone (PluginSet.check)
                err = exc if isinstance(exc, PluginError) else PluginError(
                    f"failed to load entry point {ep.value!r}: {type(exc).__name__}: {exc}",
                    plugin=ep.name)
                err.__cause__ = exc
                load_errors.append(err)
    for i, obj in enumerate(plugins):
        name = getattr(obj, "__name__", None) or f"{type(obj).__name__}-{i}"
        _register(pm, obj, name)
    _check_hook_names(pm, installed, load_errors)
    registry = KernelRegistry()
    errors: list[PluginError] = list(load_errors)
    _call_registration(pm, "onnx_ep_register_providers", registry, _provider_registrar, errors)
    _call_registration(pm, "onnx_ep_register_kernels", registry, _kernel_registrar, errors)
    names = [pm.get_name(p) or "?" for p in pm.get_plugins()]
    return PluginSet(pm, registry, names, errors, frozenset(installed))


def _register(pm: pluggy.PluginManager, obj: Any, name: str) -> None:
    try:
        pm.register(obj, name=name)
    except Exception as exc:  # pluggy.PluginValidationError, duplicate names
        raise PluginError(f"cannot register: {exc}", plugin=name) from exc


def _check_hook_names(pm: pluggy.PluginManager, installed: set[str],
                      errors: list[PluginError]) -> None:
    """A hookimpl whose name matches no hookspec (a typo) is an error, not silently ignored:
    raised for an in-process plugin; an installed one is unregistered and fails alone."""
    for name in dir(pm.hook):
        if not name.startswith("onnx_ep_"):
            continue
        caller = getattr(pm.hook, name)
        if caller.spec is None:
            impls = caller.get_hookimpls()
            plugin = impls[0].plugin_name if impls else None
            known = sorted(n for n in dir(pm.hook) if n.startswith("onnx_ep_")
                           and getattr(pm.hook, n).spec is not None)
            err = PluginError(f"implements unknown hook {name!r}; known hooks: "
                              f"{', '.join(known)}", plugin=plugin)
            if plugin not in installed:
                raise err
            pm.unregister(name=plugin)
            errors.append(err)


def _provider_registrar(registry: KernelRegistry, plugin: str,
                        staged: list[Any]) -> Callable[..., None]:
    def register(provider: Provider) -> None:
        if not isinstance(provider, Provider):
            raise PluginError(f"register() expects an onnx_ep.Provider, got "
                              f"{type(provider).__name__}", plugin=plugin)
        if provider.name in registry.providers or any(p.name == provider.name for p in staged):
            raise PluginError(f"provider {provider.name!r} is registered twice", plugin=plugin)
        staged.append(provider)
    return register


def _kernel_registrar(registry: KernelRegistry, plugin: str,
                      staged: list[Any]) -> Callable[..., None]:
    def register(kernel: Any, *, provider: str) -> None:
        entry = registry.validate_kernel(kernel, provider, plugin=plugin)
        for other in staged:
            if (other.provider == provider and other.kernel.key == kernel.key):
                raise KernelConflictError(f"kernel {kernel.key} registered twice for provider "
                                          f"{provider!r}", plugin=plugin)
        staged.append(entry)
    return register


def _call_registration(pm: pluggy.PluginManager, hook_name: str, registry: KernelRegistry,
                       make_register: Callable[..., Callable[..., None]],
                       errors: list[PluginError]) -> None:
    hook = getattr(pm.hook, hook_name)
    # call implementations one by one, in registration order (built-ins first, then entry
    # points, then in-process plugins), so a failure or conflict is blamed on the newcomer
    for impl in hook.get_hookimpls():
        plugin = impl.plugin_name
        staged: list[Any] = []
        register = make_register(registry, plugin, staged)
        try:
            impl.function(**{a: register for a in impl.argnames})
        except PluginError as exc:
            errors.append(exc if exc.plugin == plugin else
                          PluginError(f"{hook_name} failed: {exc}", plugin=plugin))
            continue
        except Exception as exc:
            err = PluginError(f"{hook_name} raised {type(exc).__name__}: {exc}", plugin=plugin)
            err.__cause__ = exc
            errors.append(err)
            continue
        for item in staged:
            if isinstance(item, KernelEntry):
                registry.add_entries([item])
            else:
                registry.add_provider(item, plugin=plugin)


_default_lock = threading.Lock()
_default_plugins: dict[str | None, PluginSet] = {}


def default_plugins() -> PluginSet:
    """The plugin set for sessions without in-process plugins, built once per ONNX_EP_PLUGINS
    value."""
    key = os.environ.get(PLUGINS_ENV)
    with _default_lock:
        ps = _default_plugins.get(key)
        if ps is None:
            ps = build_plugins()
            _default_plugins[key] = ps
        return ps


def plugins_for(plugins: Sequence[Any]) -> PluginSet:
    """The default plugin set, or a fresh one when in-process plugins are given."""
    return build_plugins(plugins) if plugins else default_plugins()


#: onnxruntime's names of the built-in providers, accepted wherever a provider is named
#: (the ``(name, options)`` form too: the options are not read)
PROVIDER_ALIASES = {"CPUExecutionProvider": "cpu_reference", "CUDAExecutionProvider": "cuda"}


def resolve_providers(requested: Sequence[str] | None, plugins: PluginSet) -> list[str]:
    """Validate ``requested`` against the registry; ``None`` means the comma-separated list in
    the ``ONNX_EP_PROVIDERS`` environment variable when it is set, else all available, best
    first. onnxruntime's names (:data:`PROVIDER_ALIASES`) stand for the built-ins.

    :raises ProviderUnavailable: for an unknown or unavailable provider.
    :raises OptionsError: ``requested`` is a string (not a list of names) or empty.
    """
    reg = plugins.registry
    available = reg.available()
    if isinstance(requested, str):
        raise OptionsError(f"providers must be a list of provider names, e.g. "
                           f"[{requested!r}], not the string {requested!r}")
    if requested is not None and len(requested) == 0:
        raise OptionsError(f"providers=[] names no provider; list at least one (available "
                           f"here: {', '.join(available) or 'none'}), or pass None for all "
                           f"available, best first")
    if requested is None:
        env = [p.strip() for p in os.environ.get("ONNX_EP_PROVIDERS", "").split(",") if p.strip()]
        if not env:
            # the default is whatever is installed: say which, and who brought each one
            log.info("providers=None: %s (best first by priority)", ", ".join(
                f"{p} (priority {reg.providers[p].priority}, plugin {reg.provider_plugin(p)})"
                for p in available))
            return available
        requested = env
    out: list[str] = []
    for name in requested:
        if not isinstance(name, str):
            # onnxruntime also accepts (name, options) tuples
            name = name[0]
        name = PROVIDER_ALIASES.get(name, name)
        prov = reg.providers.get(name)
        if prov is None:
            hint = ("install the CUDA extra (pip install 'onnx-ep[cuda]') on a machine with "
                    "an NVIDIA GPU" if name == "cuda" else
                    "check the spelling, or install the plugin that provides it")
            broken = plugins.broken()
            if broken:
                hint += "; disabled installed plugins: " + "; ".join(
                    f"{n} ({why})" for n, why in broken.items())
            raise ProviderUnavailable(name, f"no such provider is registered; {hint}",
                                      available)
        verdict = prov.is_available()
        if not verdict:
            raise ProviderUnavailable(name, verdict.reason, available)
        if name not in out:
            out.append(name)
    if not out:
        raise ProviderUnavailable("", "providers= is empty", available)
    return out


def with_fallback(providers: list[str], plugins: PluginSet, disable: bool) -> list[str]:
    """onnxruntime's rule: a list of device providers alone gets the available host
    providers appended (best first), so the nodes the device cannot run fall back to the
    CPU; ``disable`` (``SessionOptions.disable_fallback``) keeps the list as given."""
    reg = plugins.registry
    if disable or any(reg.providers[p].device == "cpu" for p in providers):
        return providers
    return providers + [p for p in reg.available() if reg.providers[p].device == "cpu"]


def selection(hook: str, method: str, choice: Any) -> Any:
    """A selection hook's answer, checked: the built-ins always answer, so ``None`` or an
    object without ``method`` means a plugin returned something that is not a strategy."""
    if choice is None or not callable(getattr(choice, method, None)):
        raise PluginError(f"{hook} returned {type(choice).__name__}, which has no "
                          f"{method}() method")
    return choice
