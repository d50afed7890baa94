"""What ``providers=`` accepts, and what a refusal suggests."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep.errors import NoKernelError, OptionsError
from tests.helpers.oracle import ORACLE_IR_VERSION


def _model(op: str = "Relu", domain: str = ""):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], domain=domain)], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(g, opset_imports=opsets, ir_version=ORACLE_IR_VERSION)


def test_a_string_is_not_a_provider_list():
    with pytest.raises(OptionsError, match=r"a list of provider names, e\.g\. \['cpu_reference'\]"):
        onnx_ep.Session(_model(), providers="cpu_reference")


def test_an_empty_provider_list_says_what_is_available():
    with pytest.raises(OptionsError, match=r"providers=\[\] names no provider.*cpu_reference"):
        onnx_ep.Session(_model(), providers=[])


def test_no_kernel_never_suggests_a_provider_already_listed():
    with pytest.raises(NoKernelError) as info:
        onnx_ep.Session(_model("Nope", "com.acme"), providers=["cpu_reference"])
    msg = str(info.value)
    assert "cpu_reference (no kernel)" in msg
    assert "Add 'cpu_reference'" not in msg and "Register a kernel" in msg
