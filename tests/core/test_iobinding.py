"""onnx_ep.Tensor and IOBinding: device feeds and outputs that never round-trip the host
(on the fake device, so every machine runs them; tests/providers/cuda/test_iobinding.py
repeats the essentials on a GPU with torch through DLPack)."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import IOBinding, Tensor
from onnx_ep.core.memory import authority_for
from onnx_ep.errors import FeedError, ProviderUnavailable
from tests.helpers.fake_device import FakeDevicePlugin
from tests.helpers.oracle import ORACLE_IR_VERSION

X = np.arange(12, dtype=np.float32).reshape(3, 4) - 5


def _model(ops=("Relu", "Add")) -> onnx.ModelProto:
    """y = Relu(x) + x ; z = Relu(y): two outputs, both produced on the device."""
    nodes = [helper.make_node(ops[0], ["x"], ["r"]), helper.make_node(ops[1], ["r", "x"], ["y"]),
             helper.make_node("Relu", ["y"], ["z"])]
    g = helper.make_graph(nodes, "io", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def _expected(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.maximum(x, 0) + x
    return y, np.maximum(y, 0)


def _session(plugin: FakeDevicePlugin, model=None) -> onnx_ep.Session:
    return onnx_ep.Session(model or _model(), providers=["fake", "cpu_reference"],
                           plugins=[plugin])


# ---------------------------------------------------------------- Tensor on the host

def test_host_tensor_wraps_numpy_and_shares_memory_through_dlpack():
    t = Tensor.from_numpy(X)
    assert t.device == "cpu" and t.dtype == np.float32 and t.shape == (3, 4)
    assert t.numpy() is t.value
    back = np.from_dlpack(t)                          # zero copy, both ways
    back[0, 0] = 42
    assert t.numpy()[0, 0] == 42
    again = Tensor.from_dlpack(back)
    assert again.is_host and again.data_ptr == t.data_ptr
    np.testing.assert_array_equal(np.asarray(t), t.value)


def test_a_device_nobody_provides_is_a_typed_error():
    with pytest.raises(ProviderUnavailable, match="nowhere"):
        Tensor.empty((2,), np.float32, "nowhere")


# ---------------------------------------------------------------- Tensor on a device

def test_device_tensor_bytes_are_reserved_in_the_ledger_and_released_when_collected():
    plugin = FakeDevicePlugin()
    rt = plugin.runtime
    authority = authority_for(rt.device, None, rt.granularity, budget=rt.budget)
    before = authority.held_by("onnx_ep.Tensor")
    t = Tensor.from_numpy(X, "fake", runtime=rt)
    assert t.device == "fake:0" and t.device_type == "fake" and not t.is_host
    assert authority.held_by("onnx_ep.Tensor") >= before + X.nbytes
    assert rt.uploads == 1
    np.testing.assert_array_equal(t.numpy(), X)
    with pytest.raises(TypeError, match="numpy"):
        np.asarray(t)                                  # no silent device -> host copy
    live = rt.live
    del t
    gc.collect()
    assert rt.live == live - 1 and authority.held_by("onnx_ep.Tensor") == before


# ---------------------------------------------------------------- run() with device feeds

def test_a_device_feed_is_copied_device_to_device_not_uploaded():
    plugin = FakeDevicePlugin()
    s = _session(plugin)
    rt = plugin.runtime
    x = Tensor.from_numpy(X, "fake", runtime=rt)
    uploads = rt.uploads
    y, z = s.run(None, {"x": x})
    ey, ez = _expected(X)
    np.testing.assert_array_equal(y, ey)
    np.testing.assert_array_equal(z, ez)
    assert rt.uploads == uploads and rt.copies == 1
    # the same signature with a host feed reuses the plan
    y2, _ = s.run(None, {"x": X})
    np.testing.assert_array_equal(y2, ey)
    assert s.stats["plans"] == 1


def test_a_device_feed_read_by_a_host_node_is_downloaded_for_it():
    plugin = FakeDevicePlugin(ops=("Add",))           # Relu runs on cpu_reference
    s = _session(plugin)
    x = Tensor.from_numpy(X, "fake", runtime=plugin.runtime)
    y, z = s.run(None, {"x": x})
    ey, ez = _expected(X)
    np.testing.assert_array_equal(y, ey)
    np.testing.assert_array_equal(z, ez)


# ---------------------------------------------------------------- IOBinding

def test_iobinding_keeps_outputs_on_the_device_and_a_loop_never_touches_the_host():
    plugin = FakeDevicePlugin()
    s = _session(plugin)
    rt = plugin.runtime
    b = s.io_binding()
    assert isinstance(b, IOBinding)
    b.bind_input("x", Tensor.from_numpy(X, "fake", runtime=rt))
    b.bind_output("y", "fake")
    uploads, downloads = rt.uploads, rt.downloads
    expected = X
    for _ in range(4):                                 # feed y back as x: a decode loop
        s.run_with_iobinding(b)
        (y,) = b.get_outputs()
        assert y.device == "fake:0"
        expected = _expected(expected)[0]
        b.bind_input("x", y)
    assert rt.uploads == uploads and rt.downloads == downloads
    np.testing.assert_array_equal(y.numpy(), expected)


def test_iobinding_outputs_on_host_device_and_into_preallocated_tensors():
    plugin = FakeDevicePlugin()
    s = _session(plugin)
    rt = plugin.runtime
    ey, ez = _expected(X)
    b = s.io_binding()
    b.bind_cpu_input("x", X)
    z_out = Tensor.empty(X.shape, np.float32, "fake", runtime=rt)
    b.bind_output("z", z_out)
    b.bind_output("y", "cpu")
    s.run_with_iobinding(b)
    z, y = b.get_outputs()
    assert z is z_out and y.is_host
    np.testing.assert_array_equal(z_out.numpy(), ez)
    np.testing.assert_array_equal(y.numpy(), ey)
    host_out = Tensor.empty(X.shape, np.float32)
    b.clear_binding_outputs()
    b.bind_output("y", host_out)
    s.run_with_iobinding(b)
    assert b.get_outputs()[0] is host_out
    np.testing.assert_array_equal(host_out.numpy(), ey)
    # onnxruntime's spelling of a device output
    b.clear_binding_outputs()
    b.bind_output("y", device_type="fake", device_id=0)
    s.run_with_iobinding(b)
    b.synchronize_outputs()
    (y_dev,) = b.get_outputs()
    assert y_dev.device == "fake:0"
    np.testing.assert_array_equal(y_dev.numpy(), ey)
    # nothing bound: every output, on the host
    b.clear_binding_outputs()
    s.run_with_iobinding(b)
    np.testing.assert_array_equal(b.copy_outputs_to_cpu()[1], ez)


def test_iobinding_errors_are_typed_and_leave_the_session_usable():
    plugin = FakeDevicePlugin()
    s = _session(plugin)
    rt = plugin.runtime
    b = s.io_binding()
    with pytest.raises(FeedError, match="no run yet"):
        b.get_outputs()
    with pytest.raises(FeedError, match="unknown output 'nope'"):
        b.bind_output("nope", "cpu")
    with pytest.raises(FeedError, match="unknown input 'nope'"):
        b.bind_input("nope", X)
    b.bind_input("x", X)
    b.bind_output("y", Tensor.empty((5, 4), np.float32, "fake", runtime=rt))
    with pytest.raises(FeedError, match=r"float32\[5, 4\] but the run produces float32\[3, 4\]"):
        s.run_with_iobinding(b)
    b.clear_binding_outputs()
    b.bind_output("y", "elsewhere")
    with pytest.raises(FeedError, match="wanted on 'elsewhere'"):
        s.run_with_iobinding(b)
    b.bind_input("x", X.astype(np.float64))
    with pytest.raises(FeedError, match="expects dtype float32"):
        s.run_with_iobinding(b)
    # still usable, and nothing reserved by the failed runs is left behind
    b.clear_binding_outputs()
    b.bind_input("x", X)
    b.bind_output("y", "fake")
    s.run_with_iobinding(b)
    np.testing.assert_array_equal(b.get_outputs()[0].numpy(), _expected(X)[0])
    holders = s.resources()["ledger"]["by_holder"]
    assert not [h for h in holders if "/run-" in h], holders


def test_a_host_session_downloads_device_feeds():
    plugin = FakeDevicePlugin()
    x = Tensor.from_numpy(X, "fake", runtime=plugin.runtime)
    s = onnx_ep.Session(_model(), providers=["cpu_reference"])
    y, _ = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, _expected(X)[0])


# ---------------------------------------------------------------- runs that do not wait

def test_a_run_that_does_not_wait_is_complete_after_synchronize_outputs():
    """RunOptions(synchronize=False) on a fake device that lags like a real one (work runs
    only when waited for): outputs read early are stale, after synchronize_outputs() right;
    a second run queues behind the first, and a readback taken after the first waits for
    the first only."""
    from onnx_ep.core.device_io import readback

    plugin = FakeDevicePlugin(lag=True)
    sess = _session(plugin)
    y_t = Tensor.empty((3, 4), np.float32, "fake", runtime=plugin.runtime)
    z_t = Tensor.empty((3, 4), np.float32, "fake", runtime=plugin.runtime)
    y_t.copy_from(np.zeros((3, 4), np.float32))
    b = sess.io_binding()
    b.bind_input("x", Tensor.from_numpy(X, "fake", runtime=plugin.runtime))
    b.bind_output("y", y_t)
    b.bind_output("z", z_t)
    sess.run_with_iobinding(b, onnx_ep.RunOptions(synchronize=False))
    assert not y_t.numpy().any()                       # nothing ran yet
    read_first = readback(sess, y_t)
    b.bind_input("x", Tensor.from_numpy(2 * X, "fake", runtime=plugin.runtime))
    sess.run_with_iobinding(b, onnx_ep.RunOptions(synchronize=False))
    stream = sess._device.stream
    np.testing.assert_array_equal(read_first(), _expected(X)[0])   # the first run's y
    assert stream.pending                              # the second run still queued
    b.synchronize_outputs()
    assert not stream.pending
    np.testing.assert_array_equal(y_t.numpy(), _expected(2 * X)[0])
    np.testing.assert_array_equal(z_t.numpy(), _expected(2 * X)[1])
    # a run that waits (the default) is complete on return, on the lagging device too
    b.bind_input("x", Tensor.from_numpy(3 * X, "fake", runtime=plugin.runtime))
    sess.run_with_iobinding(b)
    assert not stream.pending
    np.testing.assert_array_equal(y_t.numpy(), _expected(3 * X)[0])
    sess.close()


def test_a_device_feed_read_on_the_host_waits_for_the_run_that_wrote_it():
    """A device output of a queued run fed to a node on the host: the session waits for its
    stream before it reads the feed (a run queued without waiting may still be writing)."""
    plugin = FakeDevicePlugin(ops=("Add",), lag=True)       # Relu runs on the host
    nodes = [helper.make_node("Add", ["x", "x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 4]) for n in "xyz"]
    model = helper.make_model(helper.make_graph(nodes, "g", vi[:1], vi[1:]),
                              opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=ORACLE_IR_VERSION)
    sess = _session(plugin, model)
    b = sess.io_binding()
    b.bind_input("x", Tensor.from_numpy(X, "fake", runtime=plugin.runtime))
    b.bind_output("y", "fake")
    sess.run_with_iobinding(b, onnx_ep.RunOptions(synchronize=False))
    (y,) = b.get_outputs()
    assert sess._device.stream.pending                  # the Add is still queued
    z = sess.run(["z"], {"x": y})[0]                    # Relu(2x) on the host
    np.testing.assert_array_equal(z, np.maximum(X + X, 0))
    sess.close()


def test_the_onnxruntime_run_config_entry_turns_waiting_off():
    from onnx_ep.onnxruntime import RunOptions

    ro = RunOptions()
    assert ro.native.synchronize
    ro.add_run_config_entry("disable_synchronize_execution_providers", "1")
    assert not ro.native.synchronize
    assert ro.get_run_config_entry("disable_synchronize_execution_providers") == "1"
    ro.add_run_config_entry("disable_synchronize_execution_providers", "0")
    assert ro.native.synchronize
