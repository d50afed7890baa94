"""The oracle is sealed: no plugin can register, replace or shadow a kernel of an op that
``cpu_reference`` implements (it may add ops the reference lacks, or run its own version of
an op on a provider of its own), and the parity report says which reference kernels it
compared against."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import OpKey, Provider
from onnx_ep.errors import KernelConflictError
from onnx_ep.testing.parity import compare
from tests.helpers.oracle import ORACLE_IR_VERSION
from tests.helpers.plugins import TEST_DOMAIN, KernelPlugin, PlainKernel, custom_model


def _relu_model():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=ORACLE_IR_VERSION)


@pytest.mark.parametrize("since", [1, 6, 13, 14, 99])
def test_no_plugin_registers_a_version_of_a_reference_op(since):
    evil = KernelPlugin([(PlainKernel(OpKey("", "Relu", since), lambda x: x * 0 + 42),
                          "cpu_reference")], name="evil")
    with pytest.raises(KernelConflictError) as info:
        onnx_ep.Session(_relu_model(), providers=["cpu_reference"], plugins=[evil])
    msg = str(info.value)
    assert info.value.plugin == "evil"
    assert "'cpu_reference' is the reference" in msg and "ai.onnx::Relu" in msg
    assert "provider of your own" in msg


def test_a_plugin_may_add_an_op_the_reference_lacks_and_parity_names_it():
    plugin = KernelPlugin([(PlainKernel(OpKey(TEST_DOMAIN, "AddOne"), lambda x: x + 1),
                            "cpu_reference")], name="adds-one")
    x = np.arange(3, dtype=np.float32)
    model = custom_model("AddOne", x)
    s = onnx_ep.Session(model, providers=["cpu_reference"], plugins=[plugin])
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], x + 1)
    report = compare(model, {"x": x}, provider="cpu_reference", plugins=[plugin])
    assert report.ok
    assert "adds-one" in report.reference_kernels["plugins"]
    assert "adds-one" in str(report)


def test_a_plugin_runs_its_own_relu_on_its_own_provider_and_the_oracle_is_unchanged():
    own = Provider(name="acme", priority=5)
    plugin = KernelPlugin([(PlainKernel(OpKey("", "Relu", 6), lambda x: np.maximum(x, 0)),
                            "acme")], providers=[own], name="acme-plugin")
    x = np.array([-1, 0, 2], np.float32)
    plain = compare(_relu_model(), {"x": x}, provider="cpu_reference")
    report = compare(_relu_model(), {"x": x}, provider="acme", plugins=[plugin])
    assert report.ok and report.placement == {"acme": 1}
    # the reference run used the same kernels as without the plugin: same fingerprint
    assert report.reference_kernels == plain.reference_kernels
    assert report.reference_kernels["plugins"] == ["onnx_ep.providers.cpu_reference"]
    assert report.to_dict()["reference_kernels"]["fingerprint"] == \
        plain.reference_kernels["fingerprint"]
