"""Device sessions on a fake device: copies, uploads once, pre-bound outputs, device ledger."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnx_ep
from onnx_ep import SessionOptions
from onnx_ep.errors import CapacityUnavailable
from tests.helpers.fake_device import FakeDevicePlugin
from tests.helpers.models import mlp_model

X = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)


def _expected() -> np.ndarray:
    return onnx_ep.Session(mlp_model(), providers=["cpu_reference"]).run(None, {"x": X})[0]


def test_whole_graph_on_the_device_matches_the_reference_and_uploads_weights_once():
    plugin = FakeDevicePlugin()
    s = onnx_ep.Session(mlp_model(), providers=["fake", "cpu_reference"], plugins=[plugin])
    assert s.placement_summary() == {"fake": 5}
    rt = plugin.runtime
    uploads_after_load = rt.uploads
    assert uploads_after_load == 4                    # w1, b1, w2, b2
    (y,) = s.run(None, {"x": X})
    np.testing.assert_allclose(y, _expected(), rtol=1e-6, atol=1e-6)
    allocations = rt.allocations
    for _ in range(3):
        (y2,) = s.run(None, {"x": X})
        np.testing.assert_array_equal(y2, y)
    assert rt.allocations == allocations              # a cached signature allocates nothing
    assert rt.uploads == uploads_after_load + 4       # only the input, once per run
    assert rt.downloads == 4                          # only the output, once per run
    assert isinstance(y, np.ndarray)


def test_device_bytes_are_in_the_device_ledger_and_released_on_close():
    plugin = FakeDevicePlugin()
    s = onnx_ep.Session(mlp_model(), providers=["fake", "cpu_reference"], plugins=[plugin],
                        options=SessionOptions(memory_limit=1 << 20))
    s.run(None, {"x": X})
    res = s.resources()
    assert res["device"] == "fake:0"
    roles = res["ledger"]["by_holder"][s.holder]
    assert roles["weights"] >= s.graph.weight_bytes and roles["activations"] > 0
    (plan,) = res["plans"]
    assert plan["arena_bytes"] == plan["activation_live_peak_bytes"]
    s.close()
    assert plugin.runtime.live == 0
    assert s.holder not in res_after(s)


def res_after(s: onnx_ep.Session) -> dict:
    from onnx_ep.core.memory import authority_for

    return authority_for("fake:0", 1 << 20).ledger()["by_holder"]


def test_mixed_placement_copies_at_every_device_boundary():
    plugin = FakeDevicePlugin(ops=("Relu",))           # MatMul/Add fall back to the reference
    s = onnx_ep.Session(mlp_model(), providers=["fake", "cpu_reference"], plugins=[plugin])
    assert s.placement_summary() == {"cpu_reference": 4, "fake": 1}
    (y,) = s.run(None, {"x": X})
    np.testing.assert_allclose(y, _expected(), rtol=1e-6, atol=1e-6)
    assert plugin.runtime.downloads == 1 and plugin.runtime.uploads == 1


def test_device_workspace_views_are_carved_from_device_memory():
    plugin = FakeDevicePlugin(scratch=96)
    s = onnx_ep.Session(mlp_model(), providers=["fake", "cpu_reference"], plugins=[plugin])
    (y,) = s.run(None, {"x": X})
    np.testing.assert_allclose(y, _expected(), rtol=1e-6, atol=1e-6)
    assert s.resources()["plans"][0]["workspace_step_bytes"] == 96


def test_a_plan_that_cannot_fit_the_device_budget_is_refused_and_session_stays_usable():
    plugin = FakeDevicePlugin()
    limit = 4096
    s = onnx_ep.Session(mlp_model(), providers=["fake", "cpu_reference"], plugins=[plugin],
                        options=SessionOptions(memory_limit=limit))
    with pytest.raises(CapacityUnavailable):
        s.run(None, {"x": np.ones((4096, 8), np.float32)})
    (y,) = s.run(None, {"x": X})
    np.testing.assert_allclose(y, _expected(), rtol=1e-6, atol=1e-6)


def test_a_view_output_keeps_its_source_buffer_alive_in_the_arena():
    from onnx import TensorProto, helper

    from tests.helpers.oracle import ORACLE_IR_VERSION

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]),
         helper.make_node("Reshape", ["a", "s"], ["b"]),      # b views a's buffer
         helper.make_node("Mul", ["x", "x"], ["t"]),            # may not reuse a's bytes
         helper.make_node("Reshape", ["t", "s"], ["u"]),
         helper.make_node("Add", ["b", "u"], ["y"])], "alias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])],
        initializer=[onnx.numpy_helper.from_array(np.array([8, 4], np.int64), "s")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=ORACLE_IR_VERSION)
    plugin = FakeDevicePlugin(ops=("Relu", "Reshape", "Mul", "Add"))
    s = onnx_ep.Session(model, providers=["fake", "cpu_reference"], plugins=[plugin])
    assert s.placement_summary() == {"fake": 5}
    (y,) = s.run(None, {"x": X})
    expected = (np.maximum(X, 0) + X * X).reshape(8, 4)
    np.testing.assert_array_equal(y, expected)
    (plan,) = s.resources()["plans"]
    assert plan["arena_bytes"] == 3 * 128      # a, t, y: the two views take no bytes
    assert plugin.kernels["Reshape"].calls == 2


def test_nodes_the_device_cannot_size_fall_back_to_the_host_for_that_signature():
    from onnx import TensorProto, helper

    from tests.helpers.oracle import ORACLE_IR_VERSION

    # NonZero's output size depends on the data: the Relu after it cannot be pre-sized
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("NonZero", ["r"], ["nz"]),
         helper.make_node("Cast", ["nz"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Relu", ["f"], ["y"], name="late_relu")], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=ORACLE_IR_VERSION)
    plugin = FakeDevicePlugin(ops=("Relu",))
    s = onnx_ep.Session(model, providers=["fake", "cpu_reference"], plugins=[plugin])
    assert s.placement_summary() == {"fake": 2, "cpu_reference": 2}
    (y,) = s.run(None, {"x": X})
    expected = np.nonzero(np.maximum(X, 0))
    np.testing.assert_array_equal(y, np.array(expected, np.float32))
    # the first Relu still ran on the device; the unsized one ran on the host
    assert plugin.kernels["Relu"].calls == 1
    # and the summary reports what ran, not what was placed at load
    assert s.placement_summary() == {"fake": 1, "cpu_reference": 3}


def test_an_unsizable_node_without_a_host_provider_is_a_plan_error_naming_it():
    from onnx import TensorProto, helper

    from onnx_ep.errors import PlanError
    from tests.helpers.oracle import ORACLE_IR_VERSION

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Reshape", ["r", "s"], ["y"], name="dyn_reshape")], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=ORACLE_IR_VERSION)
    plugin = FakeDevicePlugin(ops=("Relu", "Reshape"))
    strict = onnx_ep.SessionOptions(disable_fallback=True)
    with pytest.raises(PlanError, match="'dyn_reshape' on fake.*add 'cpu_reference'"):
        onnx_ep.Session(model, providers=["fake"], plugins=[plugin],
                        options=strict)                                # planned at load
    # onnxruntime's rule (the default): the host provider is there, the node runs on it
    s = onnx_ep.Session(model, providers=["fake"], plugins=[plugin])
    x = np.arange(32, dtype=np.float32).reshape(4, 8) - 9
    y = s.run(None, {"x": x, "s": np.array([8, 4])})[0]
    np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(8, 4))
    assert s.placement_summary() == {"fake": 1, "cpu_reference": 1}


def test_a_refusal_at_load_frees_everything_the_device_got():
    from onnx_ep.errors import AdmissionRefused
    from tests.helpers.models import mlp_model as static_mlp

    plugin = FakeDevicePlugin()
    # static input shape: the session plans and admits the arena at load, and cannot fit
    model = static_mlp(d_in=8, d_hidden=16, d_out=4, batch=2048)
    with pytest.raises(AdmissionRefused):
        onnx_ep.Session(model, providers=["fake", "cpu_reference"], plugins=[plugin],
                        options=SessionOptions(memory_limit=64 * 1024))
    assert plugin.runtime.live == 0
    # the arena is bound at load before the weights are placed: weights that do not fit
    # (full residency forced) are refused after the arena got device memory
    big = static_mlp(d_in=256, d_hidden=256, d_out=4, batch=2)
    with pytest.raises(AdmissionRefused):
        onnx_ep.Session(big, providers=["fake", "cpu_reference"], plugins=[plugin],
                        options=SessionOptions(memory_limit=64 * 1024,
                                               memory_policy="full_resident"))
    assert plugin.runtime.allocations > 0 and plugin.runtime.live == 0
