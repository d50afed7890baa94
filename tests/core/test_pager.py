"""Weight streaming on a device (core/pager.py), on the fake device's VMM-like stable region."""

from __future__ import annotations

import re

import numpy as np
import pytest

import onnx_ep
from onnx_ep import SessionOptions
from onnx_ep.core.memory import DeviceMemoryAuthority, authority_for
from onnx_ep.core.pager import DevicePager
from onnx_ep.errors import AdmissionRefused, CapacityUnavailable, PlanError
from tests.helpers.fake_device import FakeDevicePlugin, FakeRuntime
from tests.helpers.models import mlp_model

# w1 and w2 are 32 KiB each (8 pages of the fake's 4 KiB); the biases share pages with them
MODEL = mlp_model(d_in=64, d_hidden=128, d_out=64, batch=4)
X = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float32)
LIMIT = 60 * 1024                   # weights alone are 66,304 bytes
PROVIDERS = ["fake", "cpu_reference"]


def _session(limit: int | None = None, plugin: FakeDevicePlugin | None = None,
             **options) -> tuple[onnx_ep.Session, FakeDevicePlugin]:
    plugin = plugin or FakeDevicePlugin()
    s = onnx_ep.Session(MODEL, providers=PROVIDERS, plugins=[plugin],
                        options=SessionOptions(memory_limit=limit, **options))
    return s, plugin


def _resident() -> np.ndarray:
    s, _ = _session()
    assert s.memory_policy.name == "full_resident"
    (y,) = s.run(None, {"x": X})
    s.close()
    return y


def test_device_weights_larger_than_the_budget_stream_byte_identical_to_full_residency():
    expected = _resident()
    s, plugin = _session(LIMIT)
    assert s.memory_policy.name == "weight_streaming" and s.placement_summary() == {"fake": 5}
    for _ in range(3):
        (y,) = s.run(None, {"x": X})
        assert y.tobytes() == expected.tobytes()
    res = s.resources()
    c = res["policy"]["counters"]
    assert res["policy"]["streaming"]
    assert c["page_ins"] > 0 and c["evictions"] > 0 and c["remaps"] == c["evictions"]
    assert c["fence_waits"] > 0                      # evicting what the last step read waits
    assert c["bytes_moved"] >= 3 * s.graph.weight_bytes
    assert c["window_bytes"] < s.graph.weight_bytes <= c["region_bytes"]
    # the ledger holds the window, not the weights, and nothing else of the session's leaks
    assert res["ledger"]["by_holder"][s.holder]["weights"] == c["window_bytes"]
    assert res["committed"] <= LIMIT
    (region,) = plugin.runtime.regions
    s.close()
    assert region.closed and plugin.runtime.live == 0
    assert s.holder not in authority_for("fake:0", LIMIT).ledger()["by_holder"]


def test_full_residency_at_that_budget_is_refused_at_load():
    with pytest.raises(AdmissionRefused):
        _session(LIMIT, memory_policy="full_resident")


def test_weights_keep_their_device_addresses_while_pages_move():
    plugin = FakeDevicePlugin()
    seen: list[int] = []
    kernel = plugin.kernels["MatMul"]

    def matmul(a: np.ndarray, w: np.ndarray) -> np.ndarray:
        seen.append(w.__array_interface__["data"][0])
        return np.matmul(a, w)

    kernel.fn = matmul
    s, _ = _session(LIMIT, plugin)
    for _ in range(3):
        s.run(None, {"x": X})
    assert seen[:2] * 3 == seen and seen[0] != seen[1]     # w1, w2: same address every run
    assert s.resources()["policy"]["counters"]["evictions"] > 0
    s.close()


def test_host_steps_read_host_weights_while_device_weights_stream():
    plugin = FakeDevicePlugin(ops=("MatMul", "Relu"))       # the bias Adds run on the host
    expected = _resident()
    s, _ = _session(LIMIT, plugin)
    assert s.placement_summary() == {"fake": 3, "cpu_reference": 2}
    assert s.memory_policy.name == "weight_streaming"
    for _ in range(2):
        (y,) = s.run(None, {"x": X})
        np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)
    assert s.resources()["policy"]["counters"]["evictions"] > 0
    s.close()


def test_a_step_needing_more_than_the_window_is_refused_at_load_saying_what_fits():
    plugin = FakeDevicePlugin()
    with pytest.raises(CapacityUnavailable, match=r"step 'mm2' reads 9 page\(s\)") as exc:
        _session(36 * 1024, plugin)
    assert plugin.runtime.live == 0 and all(r.closed for r in plugin.runtime.regions)
    fits = int(re.search(r"memory_limit of at least (\d+) bytes", str(exc.value)).group(1))
    s, _ = _session(fits, plugin)                # the suggested budget is enough
    assert s.memory_policy.name == "weight_streaming"
    (y,) = s.run(None, {"x": X})
    assert y.tobytes() == _resident().tobytes()
    s.close()


def test_a_window_forced_below_one_step_is_refused():
    from onnx_ep import WeightStreaming

    class Tiny:
        @onnx_ep.hookimpl
        def onnx_ep_select_memory_policy(self, model_bytes, planned_peak, budget, options):
            return WeightStreaming(window_bytes=16 * 1024)

    plugin = FakeDevicePlugin()
    with pytest.raises(CapacityUnavailable, match="the streaming window is 16384 bytes"):
        onnx_ep.Session(MODEL, providers=PROVIDERS, plugins=[plugin, Tiny()])
    assert plugin.runtime.live == 0


def test_a_runtime_without_stable_regions_refuses_streaming_with_a_plan_error():
    plugin = FakeDevicePlugin()
    plugin.runtime.stable_region = None            # type: ignore[assignment]
    with pytest.raises(PlanError, match=r"has no stable_region\(\)"):
        _session(LIMIT, plugin)
    assert plugin.runtime.live == 0


def test_a_model_that_fits_never_pages_on_the_device():
    s, plugin = _session(1 << 20)
    s.run(None, {"x": X})
    assert s.memory_policy.name == "full_resident" and plugin.runtime.regions == []
    assert s.resources()["policy"]["counters"]["page_ins"] == 0
    s.close()


# ---------------------------------------------------------------- the pager alone

def _pager(window_pages: int, n: int = 3) -> tuple[DevicePager, FakeRuntime]:
    rt = FakeRuntime()
    P = rt.page_bytes
    weights = [(name, np.full(P // 4, i + 1, np.float32)) for i, name in enumerate("abcd"[:n])]
    authority = DeviceMemoryAuthority("fake:0", 1 << 20, rt.granularity)
    pager = DevicePager(rt, weights, [(w, [w]) for w, _ in weights], window_pages * P,
                        authority, "t", stream=None)
    return pager, rt


def test_pages_are_evicted_least_recently_used_first_and_hold_the_host_bytes():
    pager, rt = _pager(window_pages=2)
    (region,) = rt.regions
    a, b, c = (pager.pages_of(w)[0] for w in "abc")
    for w in "abc":
        pager.make_resident(pager.pages_of(w))
    assert pager.resident_pages() == [b, c]          # a was least recently used
    pager.make_resident([b])
    pager.make_resident([a])                          # evicts c, not the just-used b
    assert pager.resident_pages() == [b, a]
    assert (pager.views["a"].array == 1).all() and (pager.views["b"].array == 2).all()
    assert np.isnan(pager.views["c"].array).all()    # unmapped: reads as garbage
    c_ = pager.counters()
    assert (c_["page_ins"], c_["evictions"], c_["remaps"]) == (4, 2, 2)
    assert c_["window_bytes"] == c_["resident_bytes"] == 2 * rt.page_bytes
    pager.close()
    assert region.closed and pager.reservation.released


def test_a_page_is_unmapped_only_after_waiting_for_the_fence_behind_its_last_reader():
    pager, rt = _pager(window_pages=2)
    (region,) = rt.regions
    pages = {w: pager.pages_of(w)[0] * rt.page_bytes for w in "abc"}
    pager.make_resident(pager.pages_of("a"))
    pager.make_resident(pager.pages_of("b"))
    fence_after_a = next(e for e in region.log if e[0] == "fence")   # recorded before b's map
    pager.make_resident(pager.pages_of("c"))         # evicts a
    log = region.log
    i_unmap = log.index(("unmap", pages["a"]))
    assert ("wait", fence_after_a[1]) in log[:i_unmap]
    pager.make_resident(pager.pages_of("a"))         # evicts b, read by the step before last
    i_unmap_b = log.index(("unmap", pages["b"]))
    fences = [e for e in log[:i_unmap_b] if e[0] == "fence"]
    assert log[i_unmap_b - 1] == ("wait", fences[-2][1])   # the fence recorded after b's step
    assert pager.counters()["fence_waits"] == 2
    pager.close()


def test_steps_reading_no_device_weight_do_not_page():
    pager, rt = _pager(window_pages=1, n=2)
    pager.bind({"a": 10, "b": 11}, [(10, None), (11, None), (12, "host-value")])
    assert pager.page_in((12,)) == ["host-value"]
    assert pager.counters()["page_ins"] == 0
    (va,) = pager.page_in((10,))
    assert va is pager.views["a"] and pager.counters()["page_ins"] == 1
    with pytest.raises(PlanError, match="one numbering"):
        pager.check_slots({"a": 3})
    pager.close()


def test_symbolic_shapes_stream_across_signatures_and_a_forced_policy_pages_without_evicting():
    dynamic = mlp_model(d_in=64, d_hidden=128, d_out=64)        # batch is symbolic
    full = onnx_ep.Session(dynamic, providers=PROVIDERS, plugins=[FakeDevicePlugin()])
    s = onnx_ep.Session(dynamic, providers=PROVIDERS, plugins=[FakeDevicePlugin()],
                        options=SessionOptions(memory_limit=LIMIT))
    assert s.memory_policy.name == "weight_streaming" and s.resources()["plans"] == []
    for batch in (4, 2, 4):
        xb = X[:batch]
        assert s.run(None, {"x": xb})[0].tobytes() == full.run(None, {"x": xb})[0].tobytes()
    assert len(s.resources()["plans"]) == 2
    assert s.resources()["policy"]["counters"]["evictions"] > 0
    s.close()
    # forced on a roomy budget: the window holds every page, so nothing is ever evicted
    roomy = onnx_ep.Session(dynamic, providers=PROVIDERS, plugins=[FakeDevicePlugin()],
                            options=SessionOptions(memory_policy="weight_streaming"))
    for _ in range(2):
        assert roomy.run(None, {"x": X})[0].tobytes() == full.run(None, {"x": X})[0].tobytes()
    c = roomy.resources()["policy"]["counters"]
    assert c["page_ins"] == c["region_bytes"] // c["page_bytes"] and c["evictions"] == 0
    roomy.close()
    full.close()


def test_a_view_of_a_weight_is_paged_in_again_before_the_step_that_reads_it():
    import onnx
    from onnx import TensorProto, helper

    from onnx_ep import WeightStreaming
    from tests.helpers.oracle import ORACLE_IR_VERSION

    rng = np.random.default_rng(8)
    w1 = rng.standard_normal(64 * 64).astype(np.float32)           # 4 pages, viewed [64, 64]
    w2 = rng.standard_normal((64, 64)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Reshape", ["w1", "s"], ["r"], name="view"),    # r aliases w1
         helper.make_node("MatMul", ["x", "w2"], ["h"], name="mm_w2"),    # evicts w1's pages
         helper.make_node("MatMul", ["h", "r"], ["y"], name="mm_view")],  # reads w1 via r
        "view", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
        initializer=[onnx.numpy_helper.from_array(w1, "w1"),
                     onnx.numpy_helper.from_array(np.array([64, 64], np.int64), "s"),
                     onnx.numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=ORACLE_IR_VERSION)

    class Window:
        @onnx_ep.hookimpl
        def onnx_ep_select_memory_policy(self, model_bytes, planned_peak, budget, options):
            return WeightStreaming(window_bytes=5 * 4096)

    ops = ("MatMul", "Reshape")
    full = onnx_ep.Session(model, providers=PROVIDERS, plugins=[FakeDevicePlugin(ops)])
    s = onnx_ep.Session(model, providers=PROVIDERS, plugins=[FakeDevicePlugin(ops), Window()])
    assert s.placement_summary() == {"fake": 3}
    for _ in range(2):
        y = s.run(None, {"x": X})[0]
        assert not np.isnan(y).any() and y.tobytes() == full.run(None, {"x": X})[0].tobytes()
    assert s.resources()["policy"]["counters"]["evictions"] > 0
    s.close()
    full.close()
