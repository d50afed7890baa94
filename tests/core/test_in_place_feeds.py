"""A feed bound also as an output's target is read where it is, and a kernel that writes in
place (``writes_in_place``, GroupQueryAttention's present over its past) updates it there:
no copy in, no copy out, the same addresses every run so recorded graphs replay (on the
fake device, so every machine runs it)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import Tensor
from onnx_ep.core.kernel import TensorSpec
from tests.helpers.fake_device import FakeDevicePlugin, FakeKernel, FakeTensor
from tests.helpers.oracle import ORACLE_IR_VERSION


class _AddInPlace(FakeKernel):
    """Add whose output is its first input, written through (a KV append's shape)."""

    writes_in_place = True

    def __init__(self) -> None:
        super().__init__("Add", np.add, since=14)
        self.in_place = 0

    def aliases_at(self, inputs):
        a, b = inputs[0], inputs[1]
        return {0: 0} if a is not None and b is not None and a.shape == b.shape else None

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        if not isinstance(outputs[0], TensorSpec):
            super().execute_with_workspace(ctx, inputs, outputs, workspace)
            return
        self.in_place += 1
        past, x = inputs[0].array, inputs[1].array
        ctx.stream.enqueue(lambda: np.add(past, x, out=past))
        outputs[0] = FakeTensor(past)


def _model(other_reader: bool = False):
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Add", ["past", "x"], ["present"])]
    outs = [vi("present", TensorProto.FLOAT, [4])]
    if other_reader:
        nodes.append(helper.make_node("Relu", ["past"], ["seen"]))
        outs.append(vi("seen", TensorProto.FLOAT, [4]))
    g = helper.make_graph(nodes, "kv", [vi("past", TensorProto.FLOAT, [4]),
                                        vi("x", TensorProto.FLOAT, [4])], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def _session(capture: str = "off", other_reader: bool = False):
    plugin = FakeDevicePlugin(ops=("Relu",))
    kernel = _AddInPlace()
    plugin.kernels["Add"] = kernel
    s = onnx_ep.Session(_model(other_reader), providers=["fake", "cpu_reference"],
                        plugins=[plugin], options=onnx_ep.SessionOptions(capture=capture))
    return s, plugin.runtime, kernel


def test_a_feed_bound_as_its_output_is_updated_in_place_without_copies():
    s, rt, kernel = _session()
    start = np.arange(4, dtype=np.float32)
    cache = Tensor.from_numpy(start, "fake", runtime=rt)
    b = s.io_binding()
    b.bind_input("past", cache)
    b.bind_output("present", cache)
    copies, batches = rt.copies, list(rt.batches)
    for _ in range(3):
        b.bind_input("x", np.ones(4, np.float32))
        s.run_with_iobinding(b)
        assert b.get_outputs()[0] is cache
    assert kernel.in_place == 3
    assert rt.copies == copies and rt.batches == batches    # no device copy in or out
    np.testing.assert_array_equal(cache.numpy(), start + 3)


def test_in_place_runs_replay_recorded_graphs_on_the_same_buffer():
    s, rt, kernel = _session(capture="auto")
    start = np.arange(4, dtype=np.float32)
    cache = Tensor.from_numpy(start, "fake", runtime=rt)
    b = s.io_binding()
    b.bind_input("past", cache)
    b.bind_output("present", cache)
    seen = []
    for step in range(5):            # warm-up, record, then replays
        b.bind_input("x", np.full(4, step + 1, np.float32))
        s.run_with_iobinding(b)
        seen.append(s.last_capture())
    assert seen == ["eager", "recorded", "captured", "captured", "captured"]
    np.testing.assert_array_equal(cache.numpy(), start + 15)
    (plan,) = s.capture_report()["plans"]
    assert plan["replays"] >= 3 and plan["records"] == 1


def test_an_input_another_node_reads_is_not_written_in_place():
    s, rt, kernel = _session(other_reader=True)
    start = np.arange(-2, 2, dtype=np.float32)
    cache = Tensor.from_numpy(start, "fake", runtime=rt)
    b = s.io_binding()
    b.bind_input("past", cache)
    b.bind_input("x", np.ones(4, np.float32))
    b.bind_output("present", cache)
    b.bind_output("seen", "cpu")
    s.run_with_iobinding(b)
    present, seen = b.get_outputs()
    assert kernel.in_place == 0 and kernel.calls == 1
    np.testing.assert_array_equal(seen.numpy(), np.maximum(start, 0))
    np.testing.assert_array_equal(present.numpy(), start + 1)


def test_a_feed_bound_only_as_input_is_left_as_it_was():
    s, rt, kernel = _session()
    start = np.arange(4, dtype=np.float32)
    cache = Tensor.from_numpy(start, "fake", runtime=rt)
    b = s.io_binding()
    b.bind_input("past", cache)
    b.bind_input("x", np.ones(4, np.float32))
    b.bind_output("present", "cpu")
    s.run_with_iobinding(b)
    np.testing.assert_array_equal(b.get_outputs()[0].numpy(), start + 1)
    np.testing.assert_array_equal(cache.numpy(), start)     # the plan wrote its own copy
