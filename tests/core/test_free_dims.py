"""Free dimension overrides (core/free_dims.py, SessionOptions.free_dimension_overrides)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep.core.free_dims import fix_free_dimensions
from onnx_ep.errors import FeedError, OptionsError


def _abs_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["Dim1", "Dim2", 5])
    x.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    x.type.tensor_type.shape.dim[1].denotation = "DATA_CHANNEL"
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["Dim1", "Dim2", 5])
    graph = helper.make_graph([helper.make_node("Abs", ["x"], ["y"])], "abs", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _session(overrides) -> onnx_ep.Session:
    opts = onnx_ep.SessionOptions(free_dimension_overrides=overrides)
    return onnx_ep.Session(_abs_model(), providers=["cpu_reference"], options=opts)


def test_overrides_by_name_fix_input_and_output_dims():
    sess = _session({"Dim1": 4, "Dim2": 6})
    assert sess.get_inputs()[0].shape == [4, 6, 5]
    assert sess.get_outputs()[0].shape == [4, 6, 5]


def test_overrides_by_denotation_fix_dims():
    sess = _session({"DATA_BATCH": 3, "DATA_CHANNEL": 5})
    assert sess.get_inputs()[0].shape == [3, 5, 5]


def test_a_feed_of_another_size_is_refused_after_the_override():
    sess = _session({"Dim1": 4})
    assert sess.run(None, {"x": -np.ones((4, 2, 5), np.float32)})[0].min() == 1
    with pytest.raises(FeedError, match="dim 0 = 4"):
        sess.run(None, {"x": np.ones((2, 2, 5), np.float32)})


def test_the_callers_model_proto_is_left_untouched():
    model = _abs_model()
    fixed = fix_free_dimensions(model, {"Dim1": 2})
    assert fixed is not model
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "Dim1"
    assert fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    assert fixed.graph.input[0].type.tensor_type.shape.dim[0].denotation == "DATA_BATCH"
    assert fix_free_dimensions(model, {"nothing": 2}) is model


def test_options_keep_overrides_hashable_and_validate_them():
    opts = onnx_ep.SessionOptions(free_dimension_overrides={"b": 1, "a": 2})
    assert opts.free_dimension_overrides == (("a", 2), ("b", 1))
    hash(opts)
    with pytest.raises(OptionsError, match="free_dimension_overrides"):
        onnx_ep.SessionOptions(free_dimension_overrides={"a": -1})
