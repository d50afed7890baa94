"""onnxruntime's fallback rule: a device provider listed alone runs what it can and the
rest falls back to the host reference, logged with the reason; disable_fallback refuses
(on the fake device, so every machine runs it)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep.errors import NoKernelError
from tests.helpers.fake_device import FakeDevicePlugin
from tests.helpers.oracle import ORACLE_IR_VERSION


def _model():
    """y = Relu(x) * x + x: Mul has no kernel on the fake device."""
    n = helper.make_node
    g = helper.make_graph([n("Relu", ["x"], ["r"]), n("Mul", ["r", "x"], ["m"], name="mul"),
                           n("Add", ["m", "x"], ["y"])], "fb",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def test_a_device_listed_alone_falls_back_to_the_reference_and_says_why(caplog):
    plugin = FakeDevicePlugin(ops=("Relu", "Add"))
    with caplog.at_level(logging.INFO, logger="onnx_ep"):
        s = onnx_ep.Session(_model(), providers=["fake"], plugins=[plugin])
    assert s.get_providers() == ["fake", "cpu_reference"]
    assert s.placement_summary() == {"fake": 2, "cpu_reference": 1}
    (line,) = [r.getMessage() for r in caplog.records if "falls back" in r.getMessage()]
    assert "'mul'" in line and "ai.onnx::Mul" in line and "cpu_reference" in line
    assert "fake: no kernel" in line
    x = np.array([[-1, 2, 3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(x, 0) * x + x)


def test_a_declining_kernel_is_named_with_its_reason():
    plugin = FakeDevicePlugin(ops=("Relu", "Add", "Mul"))
    m = _model()
    for v in (*m.graph.input, *m.graph.output):
        v.type.tensor_type.elem_type = TensorProto.DOUBLE      # the fake takes float32 only
    s = onnx_ep.Session(m, providers=["fake"], plugins=[plugin])
    assert s.placement_summary() == {"cpu_reference": 3}
    assert s._program.placement.fallbacks[0][3] == "fake: rejected: fake device kernels take " \
        "float32 only"


def test_disable_fallback_refuses_with_every_reason():
    plugin = FakeDevicePlugin(ops=("Relu", "Add"))
    strict = onnx_ep.SessionOptions(disable_fallback=True)
    with pytest.raises(NoKernelError, match="Mul") as info:
        onnx_ep.Session(_model(), providers=["fake"], plugins=[plugin], options=strict)
    assert "fake" in str(info.value)
    # a host provider listed by the user is kept as given, fallback or not
    s = onnx_ep.Session(_model(), providers=["fake", "cpu_reference"], plugins=[plugin],
                        options=strict)
    assert s.get_providers() == ["fake", "cpu_reference"]


def test_each_plan_counts_its_copies_between_host_and_device():
    plugin = FakeDevicePlugin(ops=("Relu", "Add"))
    s = onnx_ep.Session(_model(), providers=["fake"], plugins=[plugin])
    x = np.ones((2, 3), np.float32)
    s.run(None, {"x": x})
    (plan,) = s.resources()["plans"]
    # x up; r down for the host Mul (which reads the host feed x as it is); m up again for
    # Add; y down: 24 bytes each
    assert plan["copies"] == {"host_to_device": {"count": 2, "bytes": 48},
                              "device_to_host": {"count": 2, "bytes": 48}}
    all_device = onnx_ep.Session(_model(), providers=["fake"],
                                 plugins=[FakeDevicePlugin(ops=("Relu", "Add", "Mul"))])
    all_device.run(None, {"x": x})
    (plan,) = all_device.resources()["plans"]
    assert plan["copies"] == {"host_to_device": {"count": 1, "bytes": 24},
                              "device_to_host": {"count": 1, "bytes": 24}}


def test_disable_fallback_takes_a_bool_and_says_so():
    from onnx_ep.errors import OptionsError

    with pytest.raises(OptionsError, match="disable_fallback must be True or False"):
        onnx_ep.SessionOptions(disable_fallback="yes")
