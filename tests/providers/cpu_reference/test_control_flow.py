"""If / Loop / Scan against onnxruntime, plus their NodeError paths."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_ep.errors import NodeError
from tests.helpers.oracle import ORACLE_IR_VERSION, assert_matches_ort, run_ours

F = TensorProto.FLOAT


def _model(nodes: list, inputs: list, outputs: list, opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=ORACLE_IR_VERSION)


def _if_model() -> onnx.ModelProto:
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return _model([node], [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", F, [3])],
                  [helper.make_tensor_value_info("y", F, [3])])


@pytest.mark.parametrize("cond", [True, False])
def test_if_runs_the_chosen_branch_like_ort(cond: bool) -> None:
    feeds = {"c": np.array(cond), "x": np.array([1.0, -2.0, 3.5], np.float32)}
    assert_matches_ort(_if_model(), feeds)


def test_if_rejects_a_multi_element_condition() -> None:
    feeds = {"c": np.array([True, False]), "x": np.zeros(3, np.float32)}
    model = _if_model()
    model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 2
    with pytest.raises(NodeError, match="single-element"):
        run_ours(model, feeds)


def _loop_model() -> onnx.ModelProto:
    """Carries a running sum; emits sum * i as a scan output; stops when the sum > limit."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x"], ["s_out"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=F),
         helper.make_node("Mul", ["s_out", "i_f"], ["scan"]),
         helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
         helper.make_node("Less", ["tot", "limit"], ["c_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_in", F, [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", F, [2]),
         helper.make_tensor_value_info("scan", F, [2])])
    node = helper.make_node("Loop", ["M", "c", "s0"], ["s_final", "scans"], body=body)
    return _model([node], [helper.make_tensor_value_info("M", TensorProto.INT64, []),
                           helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("s0", F, [2]),
                           helper.make_tensor_value_info("x", F, [2]),
                           helper.make_tensor_value_info("limit", F, [])],
                  [helper.make_tensor_value_info("s_final", F, [2]),
                   helper.make_tensor_value_info("scans", F, [None, 2])])


@pytest.mark.parametrize("trips, limit", [(5, 100.0), (10, 7.0), (0, 100.0)])
def test_loop_carries_state_and_stacks_scan_outputs_like_ort(trips: int, limit: float) -> None:
    feeds = {"M": np.array(trips, np.int64), "c": np.array(True),
             "s0": np.array([0.5, 1.0], np.float32), "x": np.array([1.0, 2.0], np.float32),
             "limit": np.array(limit, np.float32)}
    ours = assert_matches_ort(_loop_model(), feeds)
    assert ours[1].shape[1:] == (2,)


def _scan_model(reverse_in: int, out_axis: int) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["emit"])],
        "body",
        [helper.make_tensor_value_info("acc_in", F, [3]),
         helper.make_tensor_value_info("row", F, [3])],
        [helper.make_tensor_value_info("acc_out", F, [3]),
         helper.make_tensor_value_info("emit", F, [3])])
    node = helper.make_node("Scan", ["init", "xs"], ["final", "ys"], body=body,
                            num_scan_inputs=1, scan_input_axes=[1],
                            scan_input_directions=[reverse_in], scan_output_axes=[out_axis])
    return _model([node], [helper.make_tensor_value_info("init", F, [3]),
                           helper.make_tensor_value_info("xs", F, [3, 4])],
                  [helper.make_tensor_value_info("final", F, [3]),
                   helper.make_tensor_value_info("ys", F, None)])


@pytest.mark.parametrize("reverse_in, out_axis", [(0, 0), (1, 1), (1, -1)])
def test_scan_axes_and_directions_match_ort(reverse_in: int, out_axis: int) -> None:
    feeds = {"init": np.zeros(3, np.float32),
             "xs": np.arange(12, dtype=np.float32).reshape(3, 4)}
    assert_matches_ort(_scan_model(reverse_in, out_axis), feeds)


def test_scan_opset8_honours_sequence_lens_per_batch() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "r"], ["b"]), helper.make_node("Identity", ["b"], ["e"])],
        "body", [helper.make_tensor_value_info("a", F, [2]),
                 helper.make_tensor_value_info("r", F, [2])],
        [helper.make_tensor_value_info("b", F, [2]), helper.make_tensor_value_info("e", F, [2])])
    node = helper.make_node("Scan", ["lens", "init", "xs"], ["final", "ys"], body=body,
                            num_scan_inputs=1)
    model = _model([node], [helper.make_tensor_value_info("lens", TensorProto.INT64, [2]),
                            helper.make_tensor_value_info("init", F, [2, 2]),
                            helper.make_tensor_value_info("xs", F, [2, 3, 2])],
                   [helper.make_tensor_value_info("final", F, [2, 2]),
                    helper.make_tensor_value_info("ys", F, [2, 3, 2])], opset=8)
    xs = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    final, ys = run_ours(model, {"lens": np.array([3, 1], np.int64),
                                 "init": np.zeros((2, 2), np.float32), "xs": xs})
    np.testing.assert_array_equal(final, [xs[0].sum(0), xs[1, 0]])
    np.testing.assert_array_equal(ys[1], [xs[1, 0], [0, 0], [0, 0]])   # padded past length
    np.testing.assert_array_equal(ys[0], np.cumsum(xs[0], axis=0))
