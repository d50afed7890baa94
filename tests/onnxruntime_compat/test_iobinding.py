"""IOBinding: numpy, OrtValue and raw-address bindings, preallocated outputs."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.onnxruntime.capi import _pybind_state as C
from tests.onnxruntime_compat import models as M

SQUARES = M.W * M.W


@pytest.fixture
def sess(ort):
    return ort.InferenceSession(M.mul_1().SerializeToString(), providers=["CPUExecutionProvider"])


def test_bind_cpu_input_and_an_output_on_the_host(sess):
    io = sess.io_binding()
    io.bind_cpu_input("X", M.W)
    io.bind_output("Y")
    io.synchronize_inputs()
    sess.run_with_iobinding(io)
    io.synchronize_outputs()
    np.testing.assert_array_equal(io.copy_outputs_to_cpu()[0], SQUARES)
    (out,) = io.get_outputs()
    assert out.device_name() == "cpu" and out.shape() == [3, 2]
    np.testing.assert_array_equal(out.numpy(), SQUARES)
    assert isinstance(io.get_outputs_as_ortvaluevector(), C.OrtValueVector)


def test_raw_address_input_and_preallocated_output(sess):
    x = M.W.copy()
    y = np.zeros((3, 2), np.float32)
    io = sess.io_binding()
    io.bind_input("X", "cpu", 0, np.float32, [3, 2], x.ctypes.data)
    io.bind_output("Y", "cpu", 0, np.float32, [3, 2], y.ctypes.data)
    sess.run_with_iobinding(io)
    np.testing.assert_array_equal(y, SQUARES)
    x[...] = 1                  # bound by address: the next run reads the new values
    sess.run_with_iobinding(io)
    np.testing.assert_array_equal(y, M.W)
    io.bind_input("X", "cpu", 0, 1, [3, 2], x.ctypes.data)      # an ONNX element type
    sess.run_with_iobinding(io)


def test_ortvalue_bindings(ort, sess):
    x = ort.OrtValue.ortvalue_from_numpy(M.W)
    y = ort.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32)
    io = sess.io_binding()
    io.bind_ortvalue_input("X", x)
    io.bind_ortvalue_output("Y", y)
    sess.run_with_iobinding(io)
    np.testing.assert_array_equal(y.numpy(), SQUARES)


def test_clearing_bindings(sess):
    io = sess.io_binding()
    io.bind_cpu_input("X", M.W)
    io.bind_output("Y")
    io.clear_binding_outputs()
    sess.run_with_iobinding(io)
    assert len(io.get_outputs()) == 1       # none bound: every output, on the host
    io.clear_binding_inputs()
    with pytest.raises(ValueError, match="missing feed"):
        sess.run_with_iobinding(io)


def test_binding_errors_are_onnxruntime_types(sess):
    io = sess.io_binding()
    with pytest.raises(C.InvalidArgument):
        io.bind_cpu_input("nope", M.W)
    with pytest.raises(C.InvalidArgument):
        io.bind_output("Y", "cpu", 0, None, None, 1234)
    with pytest.raises(C.InvalidArgument):
        io.bind_cpu_input("X", np.ones((3, 2)))
        sess.run_with_iobinding(io)
