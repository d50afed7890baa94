"""core/plugin_manager.py and the registry it fills: validation, containment, selection.

A plugin that fails names itself and leaves nothing behind; other plugins and
the built-in cpu_reference keep every registration.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import onnx_ep
from onnx_ep import NoKernelError, OpKey, Parity, PluginError, Provider
from onnx_ep.core import plugin_manager as manager
from onnx_ep.errors import KernelConflictError, KernelContractError
from tests.helpers.plugins import (
    TEST_DOMAIN,
    KernelPlugin,
    PlainKernel,
    custom_model,
    write_dist_info,
)

KEY = OpKey(TEST_DOMAIN, "AddOne")


@pytest.fixture
def x() -> np.ndarray:
    return np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.fixture
def fresh_default_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager, "_default_plugins", {})


def _builtin_counts() -> dict[str, int]:
    return manager.build_plugins(entry_points=False).registry.kernel_counts()


def _keys(plugin_set: manager.PluginSet, provider: str = "cpu_reference") -> set[OpKey]:
    return {e.kernel.key for e in plugin_set.registry.entries(provider)}


# ---------------------------------------------------------------- a raising plugin


def test_raising_register_hook_makes_session_raise_plugin_error_naming_it(x: np.ndarray):
    bad = KernelPlugin([(PlainKernel(KEY), "cpu_reference")], fail_after=1, name="bad_plugin")
    with pytest.raises(PluginError) as info:
        onnx_ep.Session(custom_model("AddOne", x), plugins=[bad])
    err = info.value
    assert err.plugin == "bad_plugin"
    assert "'bad_plugin'" in str(err) and "onnx_ep_register_kernels" in str(err)
    assert "plugin bug after partial registration" in str(err)
    assert isinstance(err.__cause__, RuntimeError)


def test_failing_plugin_keeps_none_of_its_kernels_and_spares_the_others():
    bad_key, good_key = OpKey(TEST_DOMAIN, "Bad"), OpKey(TEST_DOMAIN, "Good")
    bad = KernelPlugin([(PlainKernel(bad_key), "cpu_reference"),
                        (PlainKernel(OpKey(TEST_DOMAIN, "Bad2")), "cpu_reference")],
                       fail_after=1, name="bad")
    good = KernelPlugin([(PlainKernel(good_key), "cpu_reference")], name="good")

    plugin_set = manager.build_plugins([bad, good], entry_points=False)

    assert [e.plugin for e in plugin_set.errors] == ["bad"]
    keys = _keys(plugin_set)
    assert good_key in keys
    assert bad_key not in keys                          # the partial registration is gone
    assert {k for k in keys if k.domain == TEST_DOMAIN} == {good_key}
    counts = plugin_set.registry.kernel_counts()
    assert counts["cpu_reference"] == _builtin_counts()["cpu_reference"] + 1
    with pytest.raises(PluginError, match="'bad'"):
        plugin_set.check()


def test_failing_provider_hook_discards_its_providers_and_then_its_kernels():
    class BadProviders(KernelPlugin):
        @onnx_ep.hookimpl
        def onnx_ep_register_providers(self, register: Any) -> None:
            register(Provider(name="half_done"))
            raise RuntimeError("crash after one provider")

    plugin = BadProviders([(PlainKernel(KEY), "half_done")], name="bad_providers")
    plugin_set = manager.build_plugins([plugin], entry_points=False)
    assert "half_done" not in plugin_set.registry.providers
    assert [e.plugin for e in plugin_set.errors] == ["bad_providers", "bad_providers"]
    assert "crash after one provider" in str(plugin_set.errors[0])
    assert "unknown provider 'half_done'" in str(plugin_set.errors[1])


def test_plugin_that_fails_to_register_with_pluggy_names_itself():
    class Misspelt:
        @onnx_ep.hookimpl
        def onnx_ep_register_kernels(self, registr: Any) -> None:   # not a hook argument
            pass

    with pytest.raises(PluginError) as info:
        manager.build_plugins([Misspelt()], entry_points=False)
    assert info.value.plugin == "Misspelt-0"
    assert "registr" in str(info.value)


def test_same_plugin_object_twice_is_a_plugin_error():
    plugin = KernelPlugin(name="twice")
    with pytest.raises(PluginError, match="twice"):
        manager.build_plugins([plugin, plugin], entry_points=False)


def test_hookimpl_with_an_unknown_hook_name_is_a_plugin_error():
    class Typo:
        @onnx_ep.hookimpl
        def onnx_ep_register_kernel(self, register: Any) -> None:
            register(PlainKernel(KEY), provider="cpu_reference")

    with pytest.raises(PluginError, match="onnx_ep_register_kernel") as info:
        manager.build_plugins([Typo()], entry_points=False)
    assert info.value.plugin == "Typo-0"
    assert "onnx_ep_register_kernels" in str(info.value)   # lists the real hook names


# ---------------------------------------------------------------- malformed kernels


class NoKey:
    parity = Parity.EXACT

    def capture_support(self): ...
    def workspace_requirement(self, meta): ...
    def execute_with_workspace(self, ctx, inputs, outputs, workspace): ...


class TupleKey(NoKey):
    key = (TEST_DOMAIN, "AddOne", 1)


class NoExecute:
    key = KEY
    parity = Parity.EXACT

    def capture_support(self): ...
    def workspace_requirement(self, meta): ...


class StringParity(NoKey):
    key = KEY
    parity = "exact"


class NonCallableSupports(NoKey):
    key = KEY
    supports = True


class ZeroSince(NoKey):
    key = OpKey(TEST_DOMAIN, "AddOne", since=0)


@pytest.mark.parametrize("kernel, why", [
    (NoKey(), "'key' must be an OpKey, got NoneType"),
    (TupleKey(), "'key' must be an OpKey, got tuple"),
    (NoExecute(), "missing method execute_with_workspace()"),
    (StringParity(), "'parity' must be a Parity, got str"),
    (NonCallableSupports(), "'supports' must be callable"),
    (ZeroSince(), "OpKey.since must be an int >= 1"),
], ids=["no-key", "key-not-opkey", "no-execute", "parity-not-parity", "supports-not-callable",
        "since-0"])
def test_malformed_kernel_is_a_contract_error_naming_the_plugin(x: np.ndarray, kernel: Any,
                                                                why: str):
    plugin = KernelPlugin([(kernel, "cpu_reference")], name="sloppy")
    plugin_set = manager.build_plugins([plugin], entry_points=False)
    (err,) = plugin_set.errors
    assert isinstance(err, KernelContractError) and isinstance(err, TypeError)
    assert err.plugin == "sloppy"
    assert why in str(err)
    assert plugin_set.registry.kernel_counts() == _builtin_counts()
    with pytest.raises(KernelContractError, match="'sloppy'"):
        onnx_ep.Session(custom_model("AddOne", x), plugins=[plugin])


def test_supports_returning_a_bool_is_a_contract_error_at_placement(x: np.ndarray):
    class BoolSupports(PlainKernel):
        def supports(self, meta: Any) -> Any:
            return True

    plugin = KernelPlugin([(BoolSupports(KEY), "cpu_reference")], name="boolish")
    with pytest.raises(KernelContractError, match="expected onnx_ep.Support") as info:
        onnx_ep.Session(custom_model("AddOne", x), plugins=[plugin])
    assert info.value.plugin == "boolish"


# ---------------------------------------------------------------- conflicts and providers


def test_duplicate_kernel_in_one_plugin_is_a_conflict():
    plugin = KernelPlugin([(PlainKernel(KEY), "cpu_reference"),
                           (PlainKernel(KEY), "cpu_reference")], name="dup")
    plugin_set = manager.build_plugins([plugin], entry_points=False)
    (err,) = plugin_set.errors
    assert isinstance(err, KernelConflictError) and isinstance(err, ValueError)
    assert err.plugin == "dup" and str(KEY) in str(err)
    assert KEY not in _keys(plugin_set)


def test_duplicate_kernel_across_plugins_blames_the_later_plugin():
    first = KernelPlugin([(PlainKernel(KEY), "cpu_reference")], name="first")
    second = KernelPlugin([(PlainKernel(KEY), "cpu_reference")], name="second")
    plugin_set = manager.build_plugins([first, second], entry_points=False)
    (err,) = plugin_set.errors
    assert isinstance(err, KernelConflictError)
    assert err.plugin == "second"
    assert "already registered by plugin 'first'" in str(err)
    assert [e.plugin for e in plugin_set.registry.entries("cpu_reference")
            if e.kernel.key == KEY] == ["first"]


@pytest.mark.parametrize("what", ["kernel", "provider"])
def test_conflict_with_a_builtin_blames_the_plugin_and_keeps_the_builtin(what: str):
    some_builtin = next(manager.build_plugins(entry_points=False).registry.entries(
        "cpu_reference")).kernel.key
    if what == "kernel":
        plugin = KernelPlugin([(PlainKernel(some_builtin), "cpu_reference")], name="intruder")
    else:
        plugin = KernelPlugin(providers=[Provider(name="cpu_reference")], name="intruder")
    plugin_set = manager.build_plugins([plugin], entry_points=False)
    assert [e.plugin for e in plugin_set.errors] == ["intruder"]
    assert plugin_set.registry.provider_plugin("cpu_reference") == "onnx_ep.providers.cpu_reference"
    assert plugin_set.registry.kernel_counts() == _builtin_counts()


def test_same_op_on_two_providers_or_two_opsets_is_not_a_conflict():
    fast = Provider(name="fast", priority=10)
    plugin = KernelPlugin([(PlainKernel(KEY), "cpu_reference"), (PlainKernel(KEY), "fast"),
                           (PlainKernel(OpKey(TEST_DOMAIN, "AddOne", 3)), "cpu_reference")],
                          providers=[fast])
    plugin_set = manager.build_plugins([plugin], entry_points=False)
    assert plugin_set.errors == []
    assert plugin_set.registry.kernel_counts()["fast"] == 1


def test_kernel_for_unknown_provider_is_a_plugin_error():
    plugin = KernelPlugin([(PlainKernel(KEY), "warp_drive")], name="hopeful")
    plugin_set = manager.build_plugins([plugin], entry_points=False)
    (err,) = plugin_set.errors
    assert type(err) is PluginError
    assert err.plugin == "hopeful"
    assert "unknown provider 'warp_drive'" in str(err)
    assert "cpu_reference" in str(err)                 # lists what is registered
    assert "onnx_ep_register_providers" in str(err)    # says what to do


@pytest.mark.parametrize("plugins, kept", [
    # one plugin: all of its registrations are discarded together
    ([KernelPlugin(providers=[Provider(name="fast"), Provider(name="fast")], name="p")], False),
    # two plugins: the registration that came first stands
    ([KernelPlugin(providers=[Provider(name="fast")], name="a"),
      KernelPlugin(providers=[Provider(name="fast")], name="p")], True),
], ids=["same-plugin", "two-plugins"])
def test_provider_registered_twice_is_a_plugin_error(plugins: list[Any], kept: bool):
    plugin_set = manager.build_plugins(plugins, entry_points=False)
    (err,) = plugin_set.errors
    assert type(err) is PluginError
    assert "provider 'fast' is registered twice" in str(err)
    assert err.plugin == "p"
    assert ("fast" in plugin_set.registry.providers) is kept
    assert "cpu_reference" in plugin_set.registry.providers


def test_registering_something_that_is_not_a_provider_is_a_plugin_error():
    plugin = KernelPlugin(providers=["fast"], name="stringly")   # type: ignore[list-item]
    (err,) = manager.build_plugins([plugin], entry_points=False).errors
    assert err.plugin == "stringly" and "expects an onnx_ep.Provider, got str" in str(err)


# ---------------------------------------------------------------- placement


def _two_provider_plugin(fast_declines: str | None, ref_declines: str | None) -> KernelPlugin:
    fast = Provider(name="fast", device="cpu", priority=10)
    return KernelPlugin([
        (PlainKernel(KEY, lambda a: a + 100, decline=lambda m: fast_declines), "fast"),
        (PlainKernel(KEY, lambda a: a + 1, decline=lambda m: ref_declines), "cpu_reference"),
    ], providers=[fast])


def test_kernel_that_accepts_runs_on_the_highest_priority_provider(x: np.ndarray):
    sess = onnx_ep.Session(custom_model("AddOne", x), plugins=[_two_provider_plugin(None, None)])
    assert sess.placement_summary() == {"fast": 1}
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + 100)


def test_declining_kernel_falls_back_to_the_next_provider(x: np.ndarray):
    plugin = _two_provider_plugin("fast needs float16", None)
    sess = onnx_ep.Session(custom_model("AddOne", x), plugins=[plugin])
    assert sess.get_providers() == ["fast", "cpu_reference"]
    assert sess.placement_summary() == {"cpu_reference": 1}
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + 1)


def test_supports_sees_the_node_attributes_and_input_specs(x: np.ndarray):
    seen: list[Any] = []

    def decline(meta: Any) -> str | None:
        seen.append(meta)
        return None if meta.attr("mode") == "fast" else f"mode={meta.attr('mode')!r}"

    fast = Provider(name="fast", priority=10)
    plugin = KernelPlugin([(PlainKernel(KEY, decline=decline), "fast"),
                           (PlainKernel(KEY), "cpu_reference")], providers=[fast])
    slow = onnx_ep.Session(custom_model("AddOne", x, mode="slow"), plugins=[plugin])
    quick = onnx_ep.Session(custom_model("AddOne", x, mode="fast"), plugins=[plugin])
    assert slow.placement_summary() == {"cpu_reference": 1}
    assert quick.placement_summary() == {"fast": 1}
    assert seen[0].inputs[0] == onnx_ep.TensorSpec(np.float32, (2, 3))
    assert seen[0].domain == TEST_DOMAIN and seen[0].op_type == "AddOne"


def test_no_kernel_error_lists_every_provider_with_its_reason(x: np.ndarray):
    plugin = _two_provider_plugin("fast needs float16", "reference needs a 1-D input")
    with pytest.raises(NoKernelError) as info:
        onnx_ep.Session(custom_model("AddOne", x), plugins=[plugin])
    err = info.value
    assert err.tried == {"fast": "rejected: fast needs float16",
                         "cpu_reference": "rejected: reference needs a 1-D input"}
    assert err.op == f"{TEST_DOMAIN}::AddOne"
    assert "fast (rejected: fast needs float16)" in str(err)
    assert "cpu_reference (rejected: reference needs a 1-D input)" in str(err)


def test_providers_argument_restricts_placement(x: np.ndarray):
    plugin = _two_provider_plugin(None, None)
    sess = onnx_ep.Session(custom_model("AddOne", x), providers=["cpu_reference"],
                           plugins=[plugin])
    assert sess.placement_summary() == {"cpu_reference": 1}


# ---------------------------------------------------------------- OpKey.since


def _versioned_plugin(*sinces: int) -> KernelPlugin:
    def marker(since: int) -> Any:
        return lambda a: np.full_like(a, since)
    return KernelPlugin([(PlainKernel(OpKey(TEST_DOMAIN, "Ver", since), marker(since)),
                          "cpu_reference") for since in sinces])


@pytest.mark.parametrize("opset, chosen", [(1, 1), (4, 1), (5, 5), (8, 5), (9, 9), (30, 9)])
def test_since_selection_picks_the_newest_kernel_not_above_the_model_opset(
        x: np.ndarray, opset: int, chosen: int):
    plugin = _versioned_plugin(9, 1, 5)          # registration order does not matter
    sess = onnx_ep.Session(custom_model("Ver", x, domain_opset=opset), plugins=[plugin])
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.full_like(x, chosen))


def test_model_opset_below_every_kernel_says_which_opsets_exist(x: np.ndarray):
    plugin = _versioned_plugin(5, 9)
    with pytest.raises(NoKernelError) as info:
        onnx_ep.Session(custom_model("Ver", x, domain_opset=3), plugins=[plugin])
    assert info.value.tried == {"cpu_reference": "kernels only from opset 5"}
    assert info.value.opset == 3


# ---------------------------------------------------------------- entry points


def test_a_broken_installed_plugin_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               fresh_default_plugins: None, capsys):
    """An installed plugin that cannot be imported is disabled with a warning naming it, its
    error and how to leave it out; sessions that do not need it work; strict_plugins=True
    makes it an error; ``onnx-ep providers`` lists it as broken."""
    from onnx_ep.cli import main
    from onnx_ep.errors import OnnxEpWarning

    write_dist_info(tmp_path, "broken-plugin", {"broken": "no_such_module_for_onnx_ep_tests"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(manager.PLUGINS_ENV, "broken")
    plugin_set = manager.default_plugins()             # does not raise
    (err,) = plugin_set.errors
    assert err.plugin == "broken" and "no_such_module_for_onnx_ep_tests" in str(err)
    assert isinstance(err.__cause__, ImportError)
    x = np.arange(3, dtype=np.float32)
    with pytest.warns(OnnxEpWarning, match=r"installed plugin 'broken' is disabled: .*"
                                          r"no_such_module_for_onnx_ep_tests.*ONNX_EP_PLUGINS"):
        s = onnx_ep.Session(custom_model("Relu", x, domain=""), providers=["cpu_reference"])
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(x, 0))
    with pytest.raises(PluginError) as info:
        onnx_ep.Session(custom_model("Relu", x, domain=""), providers=["cpu_reference"],
                        options=onnx_ep.SessionOptions(strict_plugins=True))
    assert info.value.plugin == "broken"
    assert main(["providers"]) == 0
    out = capsys.readouterr().out
    assert "broken plugin broken (disabled; leave it out with ONNX_EP_PLUGINS)" in out
    # a session that needs what it would have provided is told why it is missing
    with pytest.raises(onnx_ep.ProviderUnavailable, match="disabled installed plugins: broken"):
        onnx_ep.Session(custom_model("Relu", x, domain=""), providers=["acme"])
    monkeypatch.setenv(manager.PLUGINS_ENV, "none")    # narrowing skips it entirely
    assert "broken" not in manager.default_plugins().plugin_names
    assert not manager.default_plugins().errors


def test_an_in_process_plugin_that_fails_is_still_an_error(x: np.ndarray):
    plugin = KernelPlugin([(PlainKernel(KEY), "cpu_reference")], fail_after=0, name="mine")
    with pytest.raises(PluginError) as info:
        onnx_ep.Session(custom_model("AddOne", x), providers=["cpu_reference"],
                        plugins=[plugin])
    assert info.value.plugin == "mine"


def test_entry_point_plugins_are_named_after_the_entry_point(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            fresh_default_plugins: None):
    pkg = tmp_path / "ep_plugin_for_onnx_ep_tests.py"
    pkg.write_text(
        "import onnx_ep\n"
        "@onnx_ep.hookimpl\n"
        "def onnx_ep_register_kernels(register):\n"
        "    raise RuntimeError('entry point plugin bug')\n", encoding="utf-8")
    write_dist_info(tmp_path, "ep-plugin", {"shortname": "ep_plugin_for_onnx_ep_tests"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ep_plugin_for_onnx_ep_tests", raising=False)
    monkeypatch.setenv(manager.PLUGINS_ENV, "shortname")
    plugin_set = manager.default_plugins()
    assert "shortname" in plugin_set.plugin_names
    (err,) = plugin_set.errors
    assert err.plugin == "shortname" and "entry point plugin bug" in str(err)
    assert plugin_set.registry.kernel_counts() == _builtin_counts()


def test_default_plugins_are_built_once_per_plugins_env_value(monkeypatch: pytest.MonkeyPatch,
                                                             fresh_default_plugins: None):
    monkeypatch.setenv(manager.PLUGINS_ENV, "none")
    a = manager.default_plugins()
    assert manager.default_plugins() is a
    monkeypatch.setenv(manager.PLUGINS_ENV, "")
    b = manager.default_plugins()
    assert b is not a
    monkeypatch.setenv(manager.PLUGINS_ENV, "none")
    assert manager.default_plugins() is a


def test_in_process_plugins_get_a_fresh_plugin_set(fresh_default_plugins: None):
    plugin = KernelPlugin([(PlainKernel(KEY), "cpu_reference")])
    rt = manager.plugins_for([plugin])
    assert rt is not manager.default_plugins()
    assert KEY in _keys(rt) and KEY not in _keys(manager.default_plugins())
    assert manager.plugins_for([]) is manager.default_plugins()


def test_builtins_register_through_the_same_hooks():
    plugin_set = manager.build_plugins(entry_points=False)
    assert plugin_set.errors == []
    assert plugin_set.registry.provider_plugin("cpu_reference") == "onnx_ep.providers.cpu_reference"
    assert set(manager.BUILTIN_PLUGINS) <= set(plugin_set.plugin_names)
    assert all(e.plugin == "onnx_ep.providers.cpu_reference"
               for e in plugin_set.registry.entries("cpu_reference"))


def test_the_default_provider_order_is_logged_with_where_each_came_from(x: np.ndarray, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="onnx_ep"):
        onnx_ep.Session(custom_model("Relu", x, domain=""))
    (line,) = [r.getMessage() for r in caplog.records if "providers=None" in r.getMessage()]
    assert "cpu_reference (priority 0, plugin onnx_ep.providers.cpu_reference)" in line
