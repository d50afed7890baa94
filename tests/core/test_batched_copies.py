"""Device feeds and device outputs move in one batched call of the runtime's optional
``copy_many`` (one launch on CUDA) instead of one copy each (on the fake device)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import Tensor
from onnx_ep.core.executor import copy_all
from tests.helpers.fake_device import FakeDevicePlugin, FakeRuntime, FakeStream, FakeTensor
from tests.helpers.oracle import ORACLE_IR_VERSION

N = 6      # a small KV cache: N feeds, N outputs


def _cache_model() -> onnx.ModelProto:
    """out_i = Add(x_i, x_i) for i < N, one node per feed (the shape of a KV-cache step)."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Add", [f"x{i}", f"x{i}"], [f"y{i}"]) for i in range(N)]
    g = helper.make_graph(nodes, "cache", [vi(f"x{i}", TensorProto.FLOAT, [2, i + 1])
                                           for i in range(N)],
                          [vi(f"y{i}", TensorProto.FLOAT, [2, i + 1]) for i in range(N)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def _feeds(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, i + 1)).astype(np.float32) for i in range(N)]


def _session(plugin: FakeDevicePlugin, capture: str = "auto") -> onnx_ep.Session:
    return onnx_ep.Session(_cache_model(), providers=["fake", "cpu_reference"],
                           plugins=[plugin], options=onnx_ep.SessionOptions(capture=capture))


def test_device_feeds_are_copied_in_one_batch_and_outputs_in_another():
    plugin = FakeDevicePlugin(ops=("Add",))
    rt = plugin.runtime
    s = _session(plugin, capture="off")
    b = s.io_binding()
    for step in range(3):
        xs = _feeds(step)
        for i, x in enumerate(xs):
            b.bind_input(f"x{i}", Tensor.from_numpy(x, "fake", runtime=rt))
        for i in range(N):
            b.bind_output(f"y{i}", "fake")
        copies, batches = rt.copies, len(rt.batches)
        s.run_with_iobinding(b)
        # every feed in one call, every output in another; no copy one by one
        assert rt.batches[batches:] == [N, N] and rt.copies == copies
        for x, y in zip(xs, b.get_outputs()):
            np.testing.assert_array_equal(y.numpy(), x + x)


def test_batched_feeds_replay_byte_identical_under_capture():
    plugin = FakeDevicePlugin(ops=("Add",))
    rt = plugin.runtime
    s = _session(plugin)
    b = s.io_binding()
    for step in range(4):            # warm-up, record, then replays with new values
        xs = _feeds(10 + step)
        for i, x in enumerate(xs):
            b.bind_input(f"x{i}", Tensor.from_numpy(x, "fake", runtime=rt))
        for i in range(N):
            b.bind_output(f"y{i}", "fake")
        s.run_with_iobinding(b)
        for x, y in zip(xs, b.get_outputs()):
            assert y.numpy().tobytes() == (x + x).tobytes()
    (plan,) = s.capture_report()["plans"]
    assert plan["replays"] >= 2


def test_host_feeds_are_uploaded_one_by_one_and_mixed_feeds_batch_the_device_ones():
    plugin = FakeDevicePlugin(ops=("Add",))
    rt = plugin.runtime
    s = _session(plugin, capture="off")
    xs = _feeds(3)
    feeds = {f"x{i}": (Tensor.from_numpy(x, "fake", runtime=rt) if i % 2 else x)
             for i, x in enumerate(xs)}
    uploads, batches = rt.uploads, len(rt.batches)
    outs = s.run(None, feeds)
    assert rt.uploads - uploads == N // 2 and rt.batches[batches:] == [N - N // 2]
    for x, y in zip(xs, outs):
        np.testing.assert_array_equal(y, x + x)


def test_copy_all_uses_copy_many_when_the_runtime_has_it_and_copy_otherwise():
    rt = FakeRuntime()
    stream = FakeStream()
    srcs = [FakeTensor(np.full((3,), i, np.float32)) for i in range(4)]
    dsts = [FakeTensor(np.zeros((3,), np.float32)) for _ in range(4)]
    copy_all(rt, list(zip(srcs, dsts)), stream)
    assert rt.batches == [4] and rt.copies == 0
    assert [float(d.array[0]) for d in dsts] == [0.0, 1.0, 2.0, 3.0]

    class Plain:                      # a runtime without the optional method
        copies = 0

        def copy(self, src, dst, stream):
            np.copyto(dst.array, src.array)
            Plain.copies += 1

    dsts = [FakeTensor(np.zeros((3,), np.float32)) for _ in range(4)]
    copy_all(Plain(), list(zip(srcs, dsts)), stream)
    assert Plain.copies == 4 and [float(d.array[0]) for d in dsts] == [0.0, 1.0, 2.0, 3.0]
