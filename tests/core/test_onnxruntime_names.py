"""onnxruntime's spellings in the native API: provider names and the (name, options) form,
``run([], feeds)``, and Python lists and scalars as feeds (core/feeds.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep.errors import FeedError


def _model(elem: int = TensorProto.FLOAT, shape=(3, 2), op: str = "Identity") -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", elem, list(shape))
    y = helper.make_tensor_value_info("y", elem, list(shape))
    z = helper.make_tensor_value_info("z", elem, list(shape))
    nodes = [helper.make_node(op, ["x"], ["y"]), helper.make_node("Identity", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "g", [x], [y, z])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("providers", [["CPUExecutionProvider"],
                                       [("CPUExecutionProvider", {"arena": "1"})],
                                       [("cpu_reference", {})]])
def test_onnxruntime_provider_names_select_the_builtins(providers):
    sess = onnx_ep.Session(_model(), providers=providers)
    assert sess.get_providers() == ["cpu_reference"]


def test_options_accept_the_tuple_form():
    opts = onnx_ep.SessionOptions(providers=[("CPUExecutionProvider", {"x": 1})])
    assert opts.providers == ("CPUExecutionProvider",)
    assert onnx_ep.Session(_model(), options=opts).get_providers() == ["cpu_reference"]


def test_an_empty_output_list_returns_every_output():
    sess = onnx_ep.Session(_model(), providers=["cpu_reference"])
    x = np.ones((3, 2), np.float32)
    assert len(sess.run([], {"x": x})) == 2
    assert len(sess.run(["z"], {"x": x})) == 1


def test_a_list_feed_takes_the_inputs_element_type():
    sess = onnx_ep.Session(_model(), providers=["cpu_reference"])
    y, _ = sess.run(None, {"x": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]})
    assert y.dtype == np.float32 and y.shape == (3, 2)


def test_string_and_bool_lists_convert():
    sess = onnx_ep.Session(_model(TensorProto.STRING, (2,)), providers=["cpu_reference"])
    assert list(sess.run(None, {"x": ["a", "b"]})[0]) == ["a", "b"]
    sess = onnx_ep.Session(_model(TensorProto.BOOL, (2,), "Not"), providers=["cpu_reference"])
    assert list(sess.run(None, {"x": [True, False]})[0]) == [False, True]


def test_a_python_scalar_feed_is_a_0d_tensor_of_the_inputs_type():
    sess = onnx_ep.Session(_model(TensorProto.INT64, ()), providers=["cpu_reference"])
    y, _ = sess.run(None, {"x": 3})
    assert y.dtype == np.int64 and y.shape == () and int(y) == 3


def test_a_numpy_array_of_another_dtype_is_still_refused():
    sess = onnx_ep.Session(_model(), providers=["cpu_reference"])
    with pytest.raises(FeedError, match="expects dtype float32"):
        sess.run(None, {"x": np.ones((3, 2), np.float64)})


def test_a_list_that_does_not_convert_names_the_input():
    sess = onnx_ep.Session(_model(), providers=["cpu_reference"])
    with pytest.raises(FeedError, match="input 'x'"):
        sess.run(None, {"x": [["a", "b"], ["c", "d"], ["e", "f"]]})
