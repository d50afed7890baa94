"""Small models built with onnx.helper for core tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.helpers.oracle import ORACLE_IR_VERSION


def mlp_model(d_in: int = 8, d_hidden: int = 16, d_out: int = 4, seed: int = 0,
              batch: str | int = "batch") -> onnx.ModelProto:
    """x[batch, d_in] -> MatMul+Add -> Relu -> MatMul+Add -> y[batch, d_out]."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((d_in, d_hidden)).astype(np.float32)
    b1 = rng.standard_normal(d_hidden).astype(np.float32)
    w2 = rng.standard_normal((d_hidden, d_out)).astype(np.float32)
    b2 = rng.standard_normal(d_out).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="mm1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="add1"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="mm2"),
        helper.make_node("Add", ["h3", "b2"], ["y"], name="add2"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d_out])],
        initializer=[onnx.numpy_helper.from_array(a, n)
                     for n, a in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def add_chain_model(n: int, shape: tuple[int, ...] = (1,)) -> onnx.ModelProto:
    """x -> Add(x, one) repeated ``n`` times."""
    nodes = []
    prev = "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, "one"], [out], name=f"add{i}"))
        prev = out
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        initializer=[onnx.numpy_helper.from_array(np.ones(shape, np.float32), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def two_input_model() -> onnx.ModelProto:
    """a[n, 'k'] + b['k'] with a symbolic dim shared by both inputs."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "two",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, "k"]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["k"])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, "k"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)
