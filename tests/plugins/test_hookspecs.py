"""Every hook in onnx_ep/core/hookspecs.py, round-tripped through an in-process plugin.

Each test passes a small plugin object as ``Session(model, plugins=[obj])`` and
checks what the session does with the hook's answer; the plugin never leaks into
sessions built without it.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import AdmissionDecision, LedgerView, NoKernelError, OpKey, Provider, SessionOptions
from onnx_ep.core import hookspecs
from onnx_ep.core import plugin_manager as manager
from onnx_ep.errors import OnnxEpWarning, OptionsError, PluginError, TierExhausted
from onnx_ep.plugins.policies import POLICY_ENV
from tests.helpers.fake_device import FakeDevicePlugin, FakeKernel
from tests.helpers.oracle import ORACLE_IR_VERSION, node_model
from tests.helpers.plugins import TEST_DOMAIN, KernelPlugin, PlainKernel, custom_model

HOOKS = sorted(name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
               if name.startswith("onnx_ep_"))


def test_every_hook_has_a_round_trip_test():
    tests = [name for name in globals() if name.startswith("test_")]
    missing = [h for h in HOOKS if not any(t.startswith(f"test_{h}") for t in tests)]
    assert HOOKS and not missing, f"hooks without a test_<hook>... here: {missing}"


def test_hooks_follow_the_naming_convention():
    assert all(h.startswith("onnx_ep_") for h in HOOKS)
    for h in HOOKS:
        assert inspect.getdoc(getattr(hookspecs, h)), f"{h} has no docstring"


@pytest.fixture
def x() -> np.ndarray:
    return np.arange(-3, 3, dtype=np.float32).reshape(2, 3)


# ---------------------------------------------------------------- registration


def test_onnx_ep_register_providers_adds_a_provider_sessions_can_pick(x: np.ndarray):
    fast = Provider(name="fast", device="cpu", priority=10, description="test provider")
    key = OpKey(TEST_DOMAIN, "Double")
    plugin = KernelPlugin([(PlainKernel(key, lambda a: a * 2), "fast")], providers=[fast])
    model = custom_model("Double", x)

    sess = onnx_ep.Session(model, plugins=[plugin])   # providers=None: best available first
    assert sess.get_providers() == ["fast", "cpu_reference"]
    assert sess.placement_summary() == {"fast": 1}
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x * 2)

    # round trip: a session built without the plugin has no such provider
    with pytest.raises(onnx_ep.ProviderUnavailable, match="'fast'"):
        onnx_ep.Session(model, providers=["fast"])


def test_onnx_ep_register_providers_unavailable_provider_is_not_picked(x: np.ndarray):
    gone = Provider(name="gone", priority=100,
                    is_available=lambda: onnx_ep.Support.no("no such device here"))
    key = OpKey(TEST_DOMAIN, "Double")
    plugin = KernelPlugin([(PlainKernel(key, lambda a: a * 2), "cpu_reference")],
                          providers=[gone])
    model = custom_model("Double", x)
    assert onnx_ep.Session(model, plugins=[plugin]).get_providers() == ["cpu_reference"]
    with pytest.raises(onnx_ep.ProviderUnavailable, match="no such device here"):
        onnx_ep.Session(model, providers=["gone"], plugins=[plugin])


def test_onnx_ep_register_kernels_adds_a_kernel_to_a_builtin_provider(x: np.ndarray):
    key = OpKey(TEST_DOMAIN, "AddOne")
    plugin = KernelPlugin([(PlainKernel(key, lambda a: a + 1), "cpu_reference")])
    model = custom_model("AddOne", x)

    (y,) = onnx_ep.Session(model, providers=["cpu_reference"], plugins=[plugin]).run(
        None, {"x": x})
    np.testing.assert_array_equal(y, x + 1)

    with pytest.raises(NoKernelError) as info:   # not left behind in the default plugin set
        onnx_ep.Session(model, providers=["cpu_reference"])
    assert info.value.tried == {"cpu_reference": "no kernel"}


def test_onnx_ep_register_kernels_accepts_a_module_as_plugin(x: np.ndarray):
    import types

    module = types.ModuleType("tests_inline_plugin")
    key = OpKey(TEST_DOMAIN, "Neg")

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(register: Any) -> None:
        register(PlainKernel(key, np.negative), provider="cpu_reference")

    module.onnx_ep_register_kernels = onnx_ep_register_kernels  # type: ignore[attr-defined]
    plugin_set = manager.build_plugins([module], entry_points=False)
    assert "tests_inline_plugin" in plugin_set.plugin_names
    assert [e.plugin for e in plugin_set.registry.entries("cpu_reference")
            if e.kernel.key == key] == ["tests_inline_plugin"]
    (y,) = onnx_ep.Session(custom_model("Neg", x), plugins=[module]).run(None, {"x": x})
    np.testing.assert_array_equal(y, -x)


# ---------------------------------------------------------------- selection


class _PinnedPolicy:
    """A plugin memory policy: weights stay resident, like full_resident, under its own name."""

    name = "pinned_by_plugin"
    streams = False

    def counters(self) -> dict[str, int]:
        return {"page_ins": 0, "evictions": 0, "bytes_moved": 0}


class PolicyPlugin:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[dict[str, Any]] = []

    @onnx_ep.hookimpl
    def onnx_ep_select_memory_policy(self, model_bytes: int, planned_peak: int, budget: int,
                                     options: Any) -> Any:
        self.calls.append(dict(model_bytes=model_bytes, planned_peak=planned_peak,
                               budget=budget, options=options))
        return self.answer


def _weighted_model() -> Any:
    w = np.ones((3,), np.float32)
    return node_model("Add", {"x": np.zeros(3, np.float32), "w": w}, initializers={"w": w})


def test_onnx_ep_select_memory_policy_plugin_answer_wins_over_builtins():
    plugin = PolicyPlugin(_PinnedPolicy())
    options = SessionOptions(memory_limit=1 << 30)
    sess = onnx_ep.Session(_weighted_model(), options=options, plugins=[plugin])
    try:
        assert sess.resources()["policy"]["name"] == "pinned_by_plugin"
        (call,) = plugin.calls
        assert call["model_bytes"] == 12
        assert call["budget"] == 1 << 30
        assert call["options"] is options
        (y,) = sess.run(None, {"x": np.ones(3, np.float32)})
        np.testing.assert_array_equal(y, np.full(3, 2, np.float32))
    finally:
        sess.close()


def test_onnx_ep_select_memory_policy_none_falls_through_to_builtin():
    plugin = PolicyPlugin(None)
    sess = onnx_ep.Session(_weighted_model(), plugins=[plugin])
    try:
        assert len(plugin.calls) == 1
        assert sess.resources()["policy"]["name"] == "full_resident"
    finally:
        sess.close()


@pytest.mark.parametrize("how", ["options", "env"])
def test_onnx_ep_select_memory_policy_forced_choice_beats_plugins(
        monkeypatch: pytest.MonkeyPatch, how: str):
    options = SessionOptions(memory_policy="full_resident" if how == "options" else None)
    if how == "env":
        monkeypatch.setenv(POLICY_ENV, "full_resident")
    sess = onnx_ep.Session(_weighted_model(), options=options,
                           plugins=[PolicyPlugin(_PinnedPolicy())])
    try:
        assert sess.resources()["policy"]["name"] == "full_resident"
    finally:
        sess.close()


class AdmissionPlugin:
    """Answers onnx_ep_select_admission_strategy with itself: a strategy that records requests."""

    name = "recording_by_plugin"

    def __init__(self, *, refuse: bool = False) -> None:
        self.refuse = refuse
        self.requests: list[Any] = []
        self.ledgers: list[Any] = []

    @onnx_ep.hookimpl
    def onnx_ep_select_admission_strategy(self, options: Any) -> Any:
        return self

    def admit(self, request: Any, ledger: Any) -> AdmissionDecision:
        self.requests.append(request)
        self.ledgers.append(ledger)
        if self.refuse:
            return AdmissionDecision(TierExhausted(
                f"{request.holder}: refused by the test strategy", requested=request.total,
                holder=request.holder))
        return AdmissionDecision()


def test_onnx_ep_select_admission_strategy_plugin_strategy_admits_every_run(x: np.ndarray):
    plugin = AdmissionPlugin()
    key = OpKey(TEST_DOMAIN, "AddOne")
    plugin_k = KernelPlugin([(PlainKernel(key, lambda a: a + 1), "cpu_reference")])
    sess = onnx_ep.Session(custom_model("AddOne", x), plugins=[plugin_k, plugin])
    try:
        assert sess.resources()["admission"] == "recording_by_plugin"
        sess.run(None, {"x": x})
        sess.run(None, {"x": x})
        assert [r.holder for r in plugin.requests] == [f"{sess.holder}/run-1",
                                                       f"{sess.holder}/run-2"]
        # the strategy gets values: which session asks, and the ledger with its holdings
        assert {r.session for r in plugin.requests} == {sess.holder}
        res = sess.resources()
        for ledger in plugin.ledgers:
            assert isinstance(ledger, LedgerView)
            assert (ledger.device, ledger.budget) == (res["device"], res["budget"])
            assert ledger.held == res["held_by_session"]
    finally:
        sess.close()


@pytest.mark.parametrize("choice", ["strict", "headroom"])
def test_onnx_ep_select_admission_strategy_named_builtin_beats_plugins(x: np.ndarray,
                                                                       choice: str):
    plugin = AdmissionPlugin()
    sess = onnx_ep.Session(node_model("Identity", {"x": x}),
                           options=SessionOptions(admission=choice), plugins=[plugin])
    try:
        sess.run(None, {"x": x})
        assert sess.resources()["admission"] == choice and plugin.requests == []
    finally:
        sess.close()


def test_onnx_ep_select_admission_strategy_unknown_name_without_a_plugin_is_refused(
        x: np.ndarray):
    with pytest.raises(OptionsError, match="unknown admission strategy 'fair'"):
        onnx_ep.Session(node_model("Identity", {"x": x}),
                        options=SessionOptions(admission="fair"))


def test_a_selection_hook_answer_without_the_protocol_method_is_a_plugin_error(x: np.ndarray):
    class Broken:
        @onnx_ep.hookimpl
        def onnx_ep_select_admission_strategy(self, options: Any) -> Any:
            return object()

    with pytest.raises(PluginError, match="has no admit"):
        onnx_ep.Session(node_model("Identity", {"x": x}), plugins=[Broken()])


def test_onnx_ep_select_admission_strategy_refusal_stops_the_run(x: np.ndarray):
    plugin = AdmissionPlugin(refuse=True)
    key = OpKey(TEST_DOMAIN, "AddOne")
    ran: list[bool] = []
    plugin_k = KernelPlugin([(PlainKernel(key, lambda a: ran.append(True) or a), "cpu_reference")])
    sess = onnx_ep.Session(custom_model("AddOne", x), plugins=[plugin_k, plugin])
    try:
        with pytest.raises(TierExhausted, match="refused by the test strategy") as info:
            sess.run(None, {"x": x})
        assert info.value.http_status == 429
        assert ran == []            # refused before any step ran
    finally:
        sess.close()


# ---------------------------------------------------------------- observation


class Observer:
    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.created: list[Any] = []
        self.finished: list[tuple[Any, dict[str, Any]]] = []

    @onnx_ep.hookimpl
    def onnx_ep_session_created(self, session: Any) -> None:
        self.created.append(session)
        if self.fail:
            raise RuntimeError("observer bug (created)")

    @onnx_ep.hookimpl
    def onnx_ep_run_finished(self, session: Any, stats: dict[str, Any]) -> None:
        self.finished.append((session, stats))
        if self.fail:
            raise RuntimeError("observer bug (finished)")


def _observed_session(x: np.ndarray, *observers: Observer) -> onnx_ep.Session:
    key = OpKey(TEST_DOMAIN, "AddOne")
    kernels = KernelPlugin([(PlainKernel(key, lambda a: a + 1), "cpu_reference")])
    return onnx_ep.Session(custom_model("AddOne", x), plugins=[kernels, *observers])


def test_onnx_ep_session_created_sees_the_placed_session(x: np.ndarray):
    obs = Observer()
    sess = _observed_session(x, obs)
    assert obs.created == [sess]
    assert obs.created[0].placement_summary() == {"cpu_reference": 1}   # after placement
    assert obs.finished == []


def test_onnx_ep_session_created_observer_that_raises_is_a_warning(x: np.ndarray):
    obs = Observer(fail=True)
    with pytest.warns(OnnxEpWarning,
                      match="plugin 'Observer-1': onnx_ep_session_created.*observer bug"):
        sess = _observed_session(x, obs)
    assert obs.created == [sess]
    with pytest.warns(OnnxEpWarning, match="onnx_ep_run_finished.*observer bug"):
        (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, x + 1)   # the run's answer is unaffected


def test_onnx_ep_run_finished_reports_stats_per_run(x: np.ndarray):
    obs = Observer()
    sess = _observed_session(x, obs)
    sess.run(None, {"x": x})
    sess.run(None, {"x": x})
    assert [s for s, _ in obs.finished] == [sess, sess]
    first, second = (stats for _, stats in obs.finished)
    assert set(first) >= {"seconds", "planned", "signature"}
    # the model's input shape is static, so the session planned it at load: no run plans
    assert first["planned"] is False and second["planned"] is False
    assert sess.stats["plans"] == 1
    assert first["signature"] == second["signature"]
    assert first["seconds"] >= 0.0


def test_onnx_ep_run_finished_not_called_for_a_failed_run(x: np.ndarray):
    obs = Observer()
    sess = _observed_session(x, obs)
    with pytest.raises(onnx_ep.FeedError):
        sess.run(None, {"x": x.astype(np.float64)})
    assert obs.finished == []


@pytest.mark.parametrize("bad_first", [True, False])
def test_onnx_ep_run_finished_a_raising_observer_does_not_silence_others(x: np.ndarray,
                                                                        bad_first: bool):
    good, bad = Observer(), Observer(fail=True)
    with pytest.warns(OnnxEpWarning):
        sess = _observed_session(x, *((bad, good) if bad_first else (good, bad)))
    with pytest.warns(OnnxEpWarning):
        sess.run(None, {"x": x})
    assert good.created == [sess]
    assert len(good.finished) == 1


def test_an_admit_answer_that_is_not_a_decision_is_a_plugin_error_and_the_session_survives(
        x: np.ndarray):
    class Sloppy:
        name = "sloppy"
        answer: Any = True

        @onnx_ep.hookimpl
        def onnx_ep_select_admission_strategy(self, options: Any) -> Any:
            return self

        def admit(self, request: Any, ledger: Any) -> Any:
            return self.answer

    plugin = Sloppy()
    sess = onnx_ep.Session(node_model("Identity", {"x": x}), plugins=[plugin])
    try:
        with pytest.raises(PluginError, match="sloppy.*expected an AdmissionDecision"):
            sess.run(None, {"x": x})
        plugin.answer = AdmissionDecision()
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x)
        # the refused run reserved nothing, and the admitted one released its bytes
        assert not [h for h in sess.resources()["ledger"]["by_holder"] if "/run-" in h]
    finally:
        sess.close()


# ---------------------------------------------------------------- fusion


class _NegNeg:
    """A plugin's rule: Neg(Neg(x)) -> Identity(x)."""

    name = "neg_neg"

    def match(self, anchor, view):
        inner = view.producer(anchor.inputs[0], "Neg") if anchor.op_type == "Neg" else None
        if inner is None:
            return None
        from onnx_ep.core.fusion import Match
        from onnx_ep.core.graph import Node
        return Match((inner, anchor), Node(f"{anchor.name}/id", "Identity", "",
                                           (inner.inputs[0],), anchor.outputs, {}))


def _negneg_model() -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    n = helper.make_node
    g = helper.make_graph([n("Neg", ["x"], ["a"]), n("Neg", ["a"], ["b"]),
                           n("Add", ["b", "x"], ["y"])], "nn",
                          [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)],
                             ir_version=ORACLE_IR_VERSION)


def test_onnx_ep_fusion_rules_adds_a_rule_a_device_session_applies():
    class RulePlugin:
        @onnx_ep.hookimpl
        def onnx_ep_fusion_rules(self):
            return [_NegNeg()]

    device = FakeDevicePlugin(ops=("Add",))
    device.kernels["id"] = FakeKernel("Identity", lambda x: x)
    s = onnx_ep.Session(_negneg_model(), providers=["fake", "cpu_reference"],
                        plugins=[device, RulePlugin()])
    assert [n.op_type for n in s.graph.nodes] == ["Identity", "Add"]
    assert s.resources()["fusion"]["fused"] == {"neg_neg": 1}
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], 2 * x)
    # round trip: without the plugin the pattern stays
    plain = onnx_ep.Session(_negneg_model(), providers=["fake", "cpu_reference"],
                            plugins=[FakeDevicePlugin(ops=("Add",))])
    assert [n.op_type for n in plain.graph.nodes] == ["Neg", "Neg", "Add"]


def test_onnx_ep_fusion_rules_a_rule_without_match_is_a_plugin_error():
    class BadPlugin:
        @onnx_ep.hookimpl
        def onnx_ep_fusion_rules(self):
            return [object()]

    with pytest.raises(PluginError, match="fusion rule"):
        onnx_ep.Session(_negneg_model(), providers=["fake", "cpu_reference"],
                        plugins=[FakeDevicePlugin(ops=("Add",)), BadPlugin()])
