"""Memory policies: weight streaming is byte-identical and pages; a fitting model never pages."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_ep
from onnx_ep import SessionOptions
from onnx_ep.errors import CapacityUnavailable, OptionsError
from tests.helpers.models import mlp_model

MODEL = mlp_model(d_in=256, d_hidden=256, d_out=64)      # ~329 KB of weights, w1 is 256 KiB
X = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)


def test_model_that_fits_is_full_resident_and_never_pages():
    s = onnx_ep.Session(MODEL, options=SessionOptions(memory_limit=8 << 20))
    for _ in range(3):
        s.run(None, {"x": X})
    res = s.resources()
    assert res["policy"]["name"] == "full_resident" and not res["policy"]["streaming"]
    assert res["policy"]["counters"]["page_ins"] == 0
    assert res["ledger"]["by_holder"][s.holder]["weights"] >= MODEL_WEIGHT_BYTES


MODEL_WEIGHT_BYTES = sum(t.dims[0] * (t.dims[1] if len(t.dims) > 1 else 1) * 4
                         for t in MODEL.graph.initializer)


def test_weights_larger_than_budget_stream_with_byte_identical_outputs():
    (resident,) = onnx_ep.Session(MODEL).run(None, {"x": X})
    limit = 300 * 1024
    assert MODEL_WEIGHT_BYTES > limit
    s = onnx_ep.Session(MODEL, options=SessionOptions(memory_limit=limit))
    assert s.memory_policy.name == "weight_streaming"
    for _ in range(2):
        (streamed,) = s.run(None, {"x": X})
        assert streamed.tobytes() == resident.tobytes()
    c = s.resources()["policy"]["counters"]
    assert c["page_ins"] > 0 and c["evictions"] > 0 and c["bytes_moved"] >= MODEL_WEIGHT_BYTES
    assert c["window_bytes"] <= limit


def test_streaming_window_smaller_than_one_step_is_refused_at_load():
    with pytest.raises(CapacityUnavailable, match="one step reads"):
        onnx_ep.Session(MODEL, options=SessionOptions(memory_limit=128 * 1024))


def test_policy_can_be_forced_by_option_and_environment(monkeypatch):
    s = onnx_ep.Session(MODEL, options=SessionOptions(memory_policy="weight_streaming"))
    (y,) = s.run(None, {"x": X})
    assert s.resources()["policy"]["counters"]["page_ins"] > 0
    monkeypatch.setenv("ONNX_EP_MEMORY_POLICY", "full_resident")
    s2 = onnx_ep.Session(MODEL, options=SessionOptions(memory_policy="weight_streaming"))
    assert s2.memory_policy.name == "full_resident"
    np.testing.assert_array_equal(s2.run(None, {"x": X})[0], y)
    monkeypatch.setenv("ONNX_EP_MEMORY_POLICY", "bogus")
    with pytest.raises(OptionsError, match="unknown memory policy 'bogus'"):
        onnx_ep.Session(MODEL)


def test_a_plugin_policy_hook_wins_over_the_builtins():
    from onnx_ep import WeightStreaming

    class Always:
        @onnx_ep.hookimpl
        def onnx_ep_select_memory_policy(self, model_bytes, planned_peak, budget, options):
            return WeightStreaming(window_bytes=300 * 1024)

    s = onnx_ep.Session(MODEL, plugins=[Always()])
    assert s.memory_policy.name == "weight_streaming"
    s.run(None, {"x": X})
    assert s.resources()["policy"]["counters"]["window_bytes"] == 300 * 1024


def test_a_step_is_measured_in_the_window_granules_page_in_charges():
    """Two 40-byte weights read by one step need two 64-byte host granules (128 bytes): a
    100-byte window is refused at bind time, not with a failure halfway through a run."""
    from onnx_ep.core.memory import DeviceMemoryAuthority
    from onnx_ep.core.pager import WeightStore

    authority = DeviceMemoryAuthority("cpu-test", 1 << 20)
    host = {0: np.zeros(10, np.float32), 1: np.ones(10, np.float32)}
    with pytest.raises(CapacityUnavailable, match="reads 128 weight bytes"):
        WeightStore(host, [(0, 1)], 100, authority, "t")
    store = WeightStore(host, [(0, 1)], 128, authority, "t")
    a, b = store.page_in((0, 1))
    np.testing.assert_array_equal(b, host[1])
    store.close()
    assert authority.committed == 0
