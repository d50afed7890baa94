"""Graph building: topological order, inferred types, symbolic dims, subgraph scope."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_ep.core.graph import build_graph
from onnx_ep.core.kernel import TensorSpec
from onnx_ep.errors import ModelError
from tests.helpers.models import mlp_model


def test_nodes_are_topologically_sorted_even_when_the_file_is_not():
    model = mlp_model()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    order = [n.name for n in build_graph(model).nodes]
    assert order == ["mm1", "add1", "relu", "mm2", "add2"]


def test_inferred_types_and_symbolic_dims():
    g = build_graph(mlp_model())
    assert g.inputs[0].spec == TensorSpec(np.float32, ("batch", 8))
    assert g.values["h2"].spec == TensorSpec(np.float32, ("batch", 16))
    assert g.weight_bytes == (8 * 16 + 16 + 16 * 4 + 4) * 4


def test_initializers_are_not_inputs_unless_listed_as_overridable_ones():
    g = build_graph(mlp_model())
    assert [v.name for v in g.inputs] == ["x"] and g.overridable == {}
    model = mlp_model()
    model.graph.input.append(helper.make_tensor_value_info("w1", TensorProto.FLOAT, [8, 16]))
    g = build_graph(model)
    # listed as an input too (IR >= 4): a default a feed may replace, last among the inputs
    assert [v.name for v in g.inputs] == ["x", "w1"]
    assert list(g.overridable) == ["w1"] and "w1" not in g.initializers


def test_subgraph_outer_scope_values_become_implicit_inputs():
    then_g = helper.make_graph([helper.make_node("Relu", ["outer"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["outer"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["outer"]),
         helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)],
        "top",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    graph = build_graph(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    if_node = graph.nodes[1]
    assert if_node.implicit_inputs == ("outer",)
    assert [sg.outer_names for sg in if_node.subgraphs] == [("outer",), ("outer",)]


def test_model_without_graph_is_rejected():
    with pytest.raises(ModelError, match="no graph"):
        build_graph(onnx.ModelProto())


def test_output_that_nothing_produces_is_rejected():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    with pytest.raises(ModelError, match="'z' is not produced"):
        build_graph(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_constant_nodes_are_folded_into_initializers():
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0]),
         helper.make_node("Constant", [], ["k"], value_int=3),
         helper.make_node("Add", ["x", "c"], ["y"])], "consts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [])])
    graph = build_graph(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.op_type for n in graph.nodes] == ["Add"]
    np.testing.assert_array_equal(graph.initializers["c"], np.array([1, 2], np.float32))
    assert graph.initializers["k"].dtype == np.int64 and graph.initializers["k"].shape == ()

    import onnx_ep
    y, k = onnx_ep.Session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).run(
        None, {"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(y, [2, 3])
    assert k == 3 and k.dtype == np.int64


def test_a_long_1d_input_does_not_make_shape_inference_crawl():
    import time

    import onnx_ep

    n = 1 << 22
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "long",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
                          initializer=[onnx.numpy_helper.from_array(
                              np.ones(n, np.float32), "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    t0 = time.perf_counter()
    s = onnx_ep.Session(model)           # plans the static signature at load
    (y,) = s.run(None, {"x": np.ones(n, np.float32)})
    # onnx's data propagation evaluates 1-D tensors element by element: minutes at this size
    assert time.perf_counter() - t0 < 20
    assert y[0] == 2 and s.graph.values["y"].spec.shape == (n,)


# ---------------------------------------------------------------- invalid models refused


def _one(nodes, out_type=None, ir=None):
    """x float[2] -> nodes -> y [2] of ``out_type`` (float by default)."""
    from onnx import TensorProto, helper

    from tests.helpers.oracle import ORACLE_IR_VERSION

    out = helper.make_tensor_value_info("y", out_type or TensorProto.FLOAT, [2])
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [2])], [out])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ir or ORACLE_IR_VERSION)


def _refused(model, match):
    import onnx_ep
    from onnx_ep.errors import ModelError

    with pytest.raises(ModelError, match=match):
        onnx_ep.Session(model, providers=["cpu_reference"])


def test_a_value_defined_twice_is_refused():
    from onnx import helper
    _refused(_one([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])]),
             r"value 'y' is defined twice")
    _refused(_one([helper.make_node("Relu", ["x"], ["x"])]), r"value 'x' is defined twice")


def test_an_attribute_a_standard_op_does_not_define_is_refused():
    from onnx import helper
    _refused(_one([helper.make_node("Relu", ["x"], ["y"], alpha=0.5)]),
             r"Relu \(opset \d+\) has no attribute 'alpha'")


def test_an_ir_version_onnx_does_not_know_is_refused():
    from onnx import helper
    _refused(_one([helper.make_node("Relu", ["x"], ["y"])], ir=99), r"IR version 99 is newer")


def test_a_declared_type_inference_contradicts_is_refused():
    from onnx import TensorProto, helper
    _refused(_one([helper.make_node("Relu", ["x"], ["y"])], out_type=TensorProto.INT64),
             r"contradicts onnx's shape inference: .*elem type")


def test_a_required_attribute_missing_or_an_initializer_defined_twice_is_refused():
    from onnx import helper, numpy_helper

    _refused(_one([helper.make_node("LRN", ["x"], ["y"])]), r"requires attribute 'size'")
    m = _one([helper.make_node("Add", ["x", "k"], ["y"])])
    for v in (1.0, 2.0):
        m.graph.initializer.append(numpy_helper.from_array(np.array([v, v], np.float32), "k"))
    _refused(m, r"initializer 'k' is defined twice")


def test_onnx_checker_refuses_a_malformed_standard_node():
    from onnx import helper

    _refused(_one([helper.make_node("Relu", ["x", "x"], ["y"])]),
             r"onnx's checker refuses it: .*input size 2")
    _refused(_one([helper.make_node("LeakyRelu", ["x"], ["y"], alpha="steep")]),
             r"onnx's checker refuses it: .*attribute type")


def test_onnx_checker_lets_through_what_onnxruntime_runs():
    from onnx import helper

    import onnx_ep

    # onnxruntime's contrib op in the default domain: the registry decides, not the checker
    m = _one([helper.make_node("SimplifiedLayerNormalization", ["x", "x"], ["y"])])
    (y,) = onnx_ep.Session(m, providers=["cpu_reference"]).run(
        None, {"x": np.array([3, 4], np.float32)})
    np.testing.assert_allclose(y, np.array([3, 4]) / np.sqrt(12.5) * [3, 4], rtol=1e-5)


def test_an_intermediate_shape_hint_inference_contradicts_is_dropped_as_onnxruntime_does(
        caplog):
    """onnxruntime-genai's builder declares every Constant output a scalar whatever its
    shape: such intermediate hints are ignored (with a warning), the model loads and runs."""
    vi = helper.make_tensor_value_info
    c = helper.make_tensor("c", TensorProto.FLOAT, [2], [1.0, 2.0])
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=c),
         helper.make_node("Add", ["x", "k"], ["y"])], "hint",
        [vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])],
        value_info=[vi("k", TensorProto.FLOAT, [])])          # the builder's scalar hint
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    import logging

    import onnx_ep
    with caplog.at_level(logging.WARNING, logger="onnx_ep"):
        s = onnx_ep.Session(m, providers=["cpu_reference"])
    assert any("contradict" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(s.run(None, {"x": np.zeros(2, np.float32)})[0], [1, 2])
    # a graph output declared unlike what its producer makes is still refused
    bad = onnx.ModelProto()
    bad.CopyFrom(m)
    bad.graph.output[0].CopyFrom(vi("y", TensorProto.FLOAT, [3]))
    with pytest.raises(ModelError, match="contradicts"):
        build_graph(bad)
