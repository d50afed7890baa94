"""Overridable initializers (graph.py, feeds.py): an initializer also listed as a graph input
is a default that a feed may replace, and nothing folds it as a constant."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_ep

W0 = np.arange(6, dtype=np.float32).reshape(3, 2)


def _mul_model(ir_version: int = 8, listed: bool = True) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])
    w = helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])
    graph = helper.make_graph([helper.make_node("Mul", ["X", "W"], ["Y"])], "mul",
                              [x, w] if listed else [x], [y], [numpy_helper.from_array(W0, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = ir_version
    return model


def test_an_omitted_overridable_initializer_uses_the_model_value():
    sess = onnx_ep.Session(_mul_model(), providers=["cpu_reference"])
    x = np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], W0)


def test_a_fed_overridable_initializer_replaces_the_value_for_that_run_only():
    sess = onnx_ep.Session(_mul_model(), providers=["cpu_reference"])
    x = np.ones((3, 2), np.float32)
    w = np.full((3, 2), 7, np.float32)
    np.testing.assert_array_equal(sess.run(None, {"X": x, "W": w})[0], w)
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], W0)


def test_get_inputs_leaves_overridable_initializers_out():
    sess = onnx_ep.Session(_mul_model(), providers=["cpu_reference"])
    assert [a.name for a in sess.get_inputs()] == ["X"]
    assert list(sess.graph.overridable) == ["W"]
    assert "W" not in sess.graph.initializers


def test_before_ir4_an_initializer_listed_as_input_stays_a_constant():
    sess = onnx_ep.Session(_mul_model(ir_version=3), providers=["cpu_reference"])
    assert sess.graph.overridable == {}
    assert "W" in sess.graph.initializers


def test_an_initializer_not_listed_as_input_is_not_overridable():
    sess = onnx_ep.Session(_mul_model(listed=False), providers=["cpu_reference"])
    assert sess.graph.overridable == {}


def test_a_shape_from_an_overridable_initializer_is_not_folded():
    # Reshape's shape is shape arithmetic the planner would fold if it were a constant
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "reshape",
                              [x, s], [y], [numpy_helper.from_array(np.array([2, 3]), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = onnx_ep.Session(model, providers=["cpu_reference"])
    data = np.arange(6, dtype=np.float32)
    assert sess.run(None, {"x": data})[0].shape == (2, 3)
    assert sess.run(None, {"x": data, "s": np.array([3, 2])})[0].shape == (3, 2)
    assert sess.run(None, {"x": data})[0].shape == (2, 3)
