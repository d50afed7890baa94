"""Small models for the onnxruntime compatibility tests, built with onnx.helper: the same
shapes of model onnxruntime's own Python API tests load from their test data."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
#: mul_1's weight: Y = X * W, and the tests feed X = W
W = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=np.float32)


def _model(nodes, inputs, outputs, inits=(), opset: int = OPSET, **kw) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, kw.pop("graph_name", "test"), inputs, outputs,
                              initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   *kw.pop("extra_opsets", [])], **kw)


def _t(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def mul_1(listed_weight: bool = False) -> onnx.ModelProto:
    """Y[3,2] = X[3,2] * W (W an initializer; an overridable one with ``listed_weight``)."""
    inputs = [_t("X", TensorProto.FLOAT, [3, 2])]
    if listed_weight:
        inputs.append(_t("W", TensorProto.FLOAT, [3, 2]))
    return _model([helper.make_node("Mul", ["X", "W"], ["Y"])], inputs,
                  [_t("Y", TensorProto.FLOAT, [3, 2])], [numpy_helper.from_array(W, "W")])


def matmul(symbolic: bool = False) -> onnx.ModelProto:
    """Y = X @ [[1], [2]]; X is [3, 2] or ["None", 2] (a dim named "None")."""
    rows = "None" if symbolic else 3
    return _model([helper.make_node("MatMul", ["X", "B"], ["Y"])],
                  [_t("X", TensorProto.FLOAT, [rows, 2])], [_t("Y", TensorProto.FLOAT, [rows, 1])],
                  [numpy_helper.from_array(np.array([[1.0], [2.0]], np.float32), "B")])


def logical_and() -> onnx.ModelProto:
    return _model([helper.make_node("And", ["input1:0", "input:0"], ["output:0"])],
                  [_t("input1:0", TensorProto.BOOL, [2, 2]),
                   _t("input:0", TensorProto.BOOL, [2, 2])],
                  [_t("output:0", TensorProto.BOOL, [2, 2])])


def identity_string() -> onnx.ModelProto:
    return _model([helper.make_node("Identity", ["input:0"], ["output:0"])],
                  [_t("input:0", TensorProto.STRING, [2, 2])],
                  [_t("output:0", TensorProto.STRING, [2, 2])])


def identity_optional_sequence() -> onnx.ModelProto:
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [5]))
    opt = helper.make_optional_type_proto(seq)
    return _model([helper.make_node("Identity", ["x"], ["y"])],
                  [helper.make_value_info("x", opt)], [helper.make_value_info("y", opt)])


def _seq(name: str, elem: int) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(elem, None)))


def sequence_length() -> onnx.ModelProto:
    return _model([helper.make_node("SequenceLength", ["X"], ["Y"])],
                  [_seq("X", TensorProto.FLOAT)], [_t("Y", TensorProto.INT64, [])])


def sequence_construct() -> onnx.ModelProto:
    return _model([helper.make_node("SequenceConstruct", ["tensor1", "tensor2"],
                                    ["output_sequence"])],
                  [_t("tensor1", TensorProto.INT64, [2, 3]),
                   _t("tensor2", TensorProto.INT64, [2, 3])],
                  [_seq("output_sequence", TensorProto.INT64)])


def sequence_insert() -> onnx.ModelProto:
    return _model([helper.make_node("SequenceInsert", ["input_seq", "tensor"],
                                    ["output_sequence"])],
                  [_seq("input_seq", TensorProto.INT64), _t("tensor", TensorProto.INT64, [2, 3])],
                  [_seq("output_sequence", TensorProto.INT64)])


def abs_free_dimensions() -> onnx.ModelProto:
    """x[Dim1 (DATA_BATCH), Dim2 (DATA_CHANNEL), 5] -> Abs."""
    x = _t("x", TensorProto.FLOAT, ["Dim1", "Dim2", 5])
    x.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    x.type.tensor_type.shape.dim[1].denotation = "DATA_CHANNEL"
    return _model([helper.make_node("Abs", ["x"], ["y"])], [x],
                  [_t("y", TensorProto.FLOAT, ["Dim1", "Dim2", 5])])


def pad_with_external_pads(location: str = "Pads_not_on_disk.bin") -> onnx.ModelProto:
    """Pad whose ``Pads_not_on_disk`` initializer lives in an external file that is not
    there: the session needs it from SessionOptions."""
    pads = TensorProto(name="Pads_not_on_disk", data_type=TensorProto.INT64, dims=[4])
    pads.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "32")):
        pads.external_data.add(key=k, value=v)
    return _model([helper.make_node("Pad", ["x", "Pads_not_on_disk"], ["y"])],
                  [_t("x", TensorProto.FLOAT, [1, 2])], [_t("y", TensorProto.FLOAT, None)], [pads])


def add_mul_add() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add_0"),
             helper.make_node("Mul", ["s", "b"], ["p"], name="mul_0"),
             helper.make_node("Add", ["p", "a"], ["y"], name="add_1")]
    return _model(nodes, [_t("a", TensorProto.FLOAT, [2]), _t("b", TensorProto.FLOAT, [2])],
                  [_t("y", TensorProto.FLOAT, [2])])


def with_ort_config(config: dict) -> onnx.ModelProto:
    model = mul_1()
    helper.set_model_props(model, {"ort_config": json.dumps(config)})
    return model


def passthrough() -> onnx.ModelProto:
    """An input that is also an output, beside input + 10."""
    shape = [1, 2, 2, 2]
    return _model([helper.make_node("Add", ["input_0", "ten"], ["plus_10"])],
                  [_t("input_0", TensorProto.FLOAT, shape)],
                  [_t("plus_10", TensorProto.FLOAT, shape),
                   _t("input_0", TensorProto.FLOAT, shape)],
                  [numpy_helper.from_array(np.array(10, np.float32), "ten")])


def tree_ensemble(modes, values, true_ids, false_ids, class_nodeids, weights,
                  base_values=(-0.405,)) -> onnx.ModelProto:
    """A one-tree binary TreeEnsembleClassifier with a LOGISTIC post transform."""
    n = len(modes)
    node = helper.make_node(
        "TreeEnsembleClassifier", ["X"], ["label", "probs"], domain="ai.onnx.ml",
        nodes_treeids=[0] * n, nodes_nodeids=list(range(n)), nodes_featureids=[0] * n,
        nodes_values=list(values), nodes_modes=list(modes), nodes_truenodeids=list(true_ids),
        nodes_falsenodeids=list(false_ids), nodes_missing_value_tracks_true=[0] * n,
        nodes_hitrates=[1.0] * n, class_treeids=[0] * len(weights),
        class_nodeids=list(class_nodeids), class_ids=[0] * len(weights),
        class_weights=list(weights), classlabels_int64s=[0, 1], post_transform="LOGISTIC",
        base_values=list(base_values))
    return _model([node], [_t("X", TensorProto.FLOAT, [None, 3])],
                  [_t("label", TensorProto.INT64, [None]),
                   _t("probs", TensorProto.FLOAT, [None, 2])],
                  opset=15, extra_opsets=[helper.make_opsetid("ai.onnx.ml", 3)])
