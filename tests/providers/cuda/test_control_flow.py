"""If, Loop and Scan on the GPU: bodies run as device plans, every node on cuda, answers
equal to the CPU reference; the condition reads are the only read-backs.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_control_flow.py
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from tests.core.test_device_control_flow import _if_model, _loop_model, _scan_model
from tests.helpers.oracle import ORACLE_IR_VERSION

pytestmark = pytest.mark.cuda
F = TensorProto.FLOAT
n = helper.make_node
vi = helper.make_tensor_value_info
X = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
Y = np.array([[2, 2, -1], [3, -1, 1]], np.float32)


def _same(model: onnx.ModelProto, feeds: dict, **kw) -> onnx_ep.Session:
    """Run ``model`` on cuda and on the reference; equal outputs; every node on cuda."""
    want = onnx_ep.Session(model, providers=["cpu_reference"]).run(None, feeds)
    s = onnx_ep.Session(model, providers=["cuda"], **kw)
    for _ in range(3):
        got = s.run(None, feeds)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    for plan in s.resources()["plans"]:
        assert not plan["nodes"]["host"], plan["nodes"]
    for body in s.resources()["bodies"]:
        assert not body["nodes"]["host"], body
    return s


@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.parametrize("capture", ["off", "auto"])
def test_if(cuda_device, cond, capture):
    s = _same(_if_model(), {"c": np.array([cond]), "x": X, "y": Y},
              options=onnx_ep.SessionOptions(capture=capture))
    assert len(s.resources()["bodies"]) == 2


def _if_on_device_condition() -> onnx.ModelProto:
    """The condition is computed on the device: If(ReduceSum(x) > 0, x * 2, x - 1)."""
    two = helper.make_tensor("two", F, [], [2.0])
    one = helper.make_tensor("one", F, [], [1.0])
    zero = helper.make_tensor("zero", F, [], [0.0])
    then = helper.make_graph([n("Mul", ["x", "two"], ["t"])], "then", [], [vi("t", F, ["n", 3])])
    other = helper.make_graph([n("Sub", ["x", "one"], ["e"])], "else", [],
                              [vi("e", F, ["n", 3])])
    g = helper.make_graph(
        [n("ReduceSum", ["x"], ["s"], keepdims=0), n("Greater", ["s", "zero"], ["c"]),
         n("If", ["c"], ["y"], then_branch=then, else_branch=other)], "ifdev",
        [vi("x", F, ["n", 3])], [vi("y", F, ["n", 3])], initializer=[two, one, zero])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


@pytest.mark.parametrize("sign", [1, -1])
def test_if_on_a_condition_the_device_computes(cuda_device, sign):
    _same(_if_on_device_condition(), {"x": sign * np.abs(X)})


def test_loop_with_a_constant_trip_count(cuda_device):
    _same(_loop_model(), {"s0": Y, "x": X})


def test_loop_with_scan_outputs(cuda_device):
    _same(_loop_model(scan_output=True), {"s0": Y, "x": X})


def _while_model() -> onnx.ModelProto:
    """while sum(s) < 100: s = s * 2 (a condition the body computes and the loop reads)."""
    two = helper.make_tensor("two", F, [], [2.0])
    limit = helper.make_tensor("limit", F, [], [100.0])
    body = helper.make_graph(
        [n("Mul", ["s", "two"], ["s2"]), n("ReduceSum", ["s2"], ["t"], keepdims=0),
         n("Less", ["t", "limit"], ["go"])], "body",
        [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("s", F, [3])],
        [vi("go", TensorProto.BOOL, []), vi("s2", F, [3])])
    g = helper.make_graph([n("Loop", ["", "c0", "s0"], ["final"], body=body)], "while",
                          [vi("c0", TensorProto.BOOL, []), vi("s0", F, [3])],
                          [vi("final", F, [3])], initializer=[two, limit])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def test_loop_until_its_body_says_stop(cuda_device):
    _same(_while_model(), {"c0": np.array(True), "s0": np.array([1, 2, 0.5], np.float32)})


@pytest.mark.parametrize("in_dir,out_dir", [(0, 0), (1, 1)])
def test_scan(cuda_device, in_dir, out_dir):
    _same(_scan_model(in_dir, out_dir), {"s0": np.array([1, -1, 0], np.float32),
                                         "X": np.arange(12, dtype=np.float32).reshape(4, 3) - 5})
