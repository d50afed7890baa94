"""A kernel's optional ``aliases_at(inputs)``: at a signature where its output is a view of
its input, the plan gives that output no arena bytes and pre-binds its spec instead (on the
fake device, so every machine runs it)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep.core.kernel import OpKey, TensorSpec
from tests.helpers.fake_device import FakeDevicePlugin, FakeKernel, FakeTensor
from tests.helpers.oracle import ORACLE_IR_VERSION


class _SwapUnit(FakeKernel):
    """Transpose(perm=[1, 0]); a view where one of the two axes has size 1."""

    def __init__(self) -> None:
        super().__init__("Transpose", lambda x: x.T.copy())
        self.key = OpKey("", "Transpose", 1)
        self.views = 0

    def aliases_at(self, inputs):
        x = inputs[0]
        return {0: 0} if x is not None and x.is_static and 1 in x.shape else None

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        if isinstance(outputs[0], TensorSpec):
            self.views += 1
            outputs[0] = FakeTensor(inputs[0].array.reshape(outputs[0].shape))
            return
        super().execute_with_workspace(ctx, inputs, outputs, workspace)


def _model():
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
             helper.make_node("Relu", ["t"], ["y"])]
    g = helper.make_graph(nodes, "t", [vi("x", TensorProto.FLOAT, ["a", "b"])],
                          [vi("y", TensorProto.FLOAT, ["b", "a"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def test_the_view_signature_gets_no_arena_bytes_and_the_copy_signature_does():
    plugin = FakeDevicePlugin(ops=("Relu",))
    swap = _SwapUnit()
    plugin.kernels["t"] = swap
    s = onnx_ep.Session(_model(), providers=["fake", "cpu_reference"], plugins=[plugin])
    assert s.placement_summary() == {"fake": 3}
    x1 = np.arange(-4, 4, dtype=np.float32).reshape(1, 8)
    x2 = np.arange(-8, 8, dtype=np.float32).reshape(2, 8)
    for x in (x1, x2, x1):
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(x, 0).T)
    assert swap.views == 2 and swap.calls == 1      # [1, 8] viewed twice, [2, 8] copied
    # buffers planned before packing, one aligned block each at both shapes: the feed's copy,
    # r and y at [1, 8] (t views r); the feed's copy, r, t and y at [2, 8]
    naive = sorted(p["activation_naive_bytes"] for p in s.resources()["plans"])
    assert naive[0] * 4 == naive[1] * 3
