"""Sequence and Optional ops against onnxruntime, plus position NodeError paths."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_ep.errors import NodeError
from tests.helpers.oracle import ORACLE_IR_VERSION, assert_matches_ort, run_ort, run_ours

F = TensorProto.FLOAT


def _model(nodes: list, inputs: dict, outputs: list, opset: int = 21) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in inputs.items()]
    graph = helper.make_graph(nodes, "g", ins, [helper.make_empty_tensor_value_info(o)
                                                for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=ORACLE_IR_VERSION)


FEEDS = {"a": np.arange(6, dtype=np.float32).reshape(2, 3),
         "b": np.ones((1, 3), np.float32), "pos": np.array(-1, np.int64)}


def test_construct_insert_erase_at_length_concat_match_ort() -> None:
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("SequenceInsert", ["s", "b", "pos"], ["s2"]),
             helper.make_node("SequenceErase", ["s2"], ["s3"]),
             helper.make_node("SequenceAt", ["s2", "pos"], ["at"]),
             helper.make_node("SequenceLength", ["s2"], ["n"]),
             helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=0),
             helper.make_node("SequenceConstruct", ["b", "b"], ["s4"]),
             helper.make_node("ConcatFromSequence", ["s4"], ["stk"], axis=-1, new_axis=1)]
    assert_matches_ort(_model(nodes, FEEDS, ["at", "n", "cat", "stk"]), FEEDS)


@pytest.mark.parametrize("split, keepdims", [(None, 1), (None, 0), ("scalar", 1), ("list", 1)])
def test_split_to_sequence_matches_ort(split: str | None, keepdims: int) -> None:
    feeds = {"x": np.arange(20, dtype=np.float32).reshape(5, 4)}
    inputs = ["x"]
    if split == "scalar":
        feeds["sp"] = np.array(2, np.int64)
        inputs.append("sp")
    elif split == "list":
        feeds["sp"] = np.array([1, 3, 1], np.int64)
        inputs.append("sp")
    nodes = [helper.make_node("SplitToSequence", inputs, ["s"], axis=0, keepdims=keepdims)]
    model = _model(nodes, feeds, ["s"])
    ours, ref = run_ours(model, feeds)[0], run_ort(model, feeds)[0]
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        np.testing.assert_array_equal(a, b)
        assert a.shape == b.shape


def test_sequence_at_rejects_out_of_range_position() -> None:
    feeds = {"a": FEEDS["a"], "pos": np.array(2, np.int64)}
    nodes = [helper.make_node("SequenceConstruct", ["a", "a"], ["s"]),
             helper.make_node("SequenceAt", ["s", "pos"], ["y"])]
    with pytest.raises(NodeError, match="out of range"):
        run_ours(_model(nodes, feeds, ["y"]), feeds)


def test_sequence_erase_of_empty_sequence_raises() -> None:
    nodes = [helper.make_node("SequenceEmpty", [], ["s"]),
             helper.make_node("SequenceErase", ["s"], ["s2"]),
             helper.make_node("SequenceLength", ["s2"], ["n"])]
    with pytest.raises(NodeError, match="empty"):
        run_ours(_model(nodes, {}, ["n"]), {})


def test_optional_wraps_checks_and_unwraps_like_ort() -> None:
    feeds = {"a": FEEDS["a"]}
    nodes = [helper.make_node("Optional", ["a"], ["o"]),
             helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("OptionalGetElement", ["o"], ["v"])]
    assert_matches_ort(_model(nodes, feeds, ["has", "v"], opset=18), feeds)


def test_optional_get_element_of_empty_optional_raises() -> None:
    tp = helper.make_tensor_type_proto(F, [2])
    nodes = [helper.make_node("Optional", [], ["o"], type=tp),
             helper.make_node("OptionalGetElement", ["o"], ["v"])]
    with pytest.raises(NodeError, match="empty"):
        run_ours(_model(nodes, {}, ["v"], opset=18), {})
