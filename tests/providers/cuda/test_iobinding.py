"""onnx_ep.Tensor and IOBinding on the GPU: torch shares memory through DLPack, and a
decode-style loop whose outputs feed the next step never copies to or from the host.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_iobinding.py
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import Tensor
from tests.helpers.oracle import ORACLE_IR_VERSION

pytestmark = pytest.mark.cuda
X = (np.arange(24, dtype=np.float32).reshape(6, 4) - 11) / 4


def _model() -> onnx.ModelProto:
    """y = Relu(x) + x*0.5 ; z = Relu(y)."""
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["x", "half"], ["h"]),
             helper.make_node("Add", ["r", "h"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    g = helper.make_graph(nodes, "io", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4])],
                          initializer=[half])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def _ref(x: np.ndarray) -> list[np.ndarray]:
    return onnx_ep.Session(_model(), providers=["cpu_reference"]).run(None, {"x": x})


@pytest.fixture
def host_copies(monkeypatch):
    """Counts host <-> device copies made through providers/cuda/copies.py."""
    from onnx_ep.providers.cuda import copies

    counts = {"htod": 0, "dtoh": 0}
    htod, dtoh = copies.copy_htod, copies.copy_dtoh

    def count_htod(*a, **k):
        counts["htod"] += 1
        return htod(*a, **k)

    def count_dtoh(*a, **k):
        counts["dtoh"] += 1
        return dtoh(*a, **k)

    monkeypatch.setattr(copies, "copy_htod", count_htod)
    monkeypatch.setattr(copies, "copy_dtoh", count_dtoh)
    return counts


def test_tensor_round_trip_and_ledger(cuda_device):
    t = Tensor.from_numpy(X, "cuda")
    assert t.device == "cuda:0" and t.shape == X.shape and t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), X)
    e = Tensor.empty((3,), np.float16, "cuda:0")
    assert e.nbytes == 6 and e.data_ptr != 0


def test_decode_loop_on_the_device_never_touches_the_host(cuda_device, host_copies):
    s = onnx_ep.Session(_model(), providers=["cuda"])
    x = Tensor.from_numpy(X, "cuda")
    b = s.io_binding()
    b.bind_input("x", x)
    b.bind_output("y", "cuda")
    s.run_with_iobinding(b)                 # plans the signature (uploads the constant once)
    host_copies.update(htod=0, dtoh=0)
    expected = X
    y = None
    for _ in range(5):
        s.run_with_iobinding(b)
        (y,) = b.get_outputs()
        assert y.device == "cuda:0"
        b.bind_input("x", y)
        expected = _ref(expected)[0]
    assert host_copies == {"htod": 0, "dtoh": 0}
    np.testing.assert_array_equal(y.numpy(), expected)


def test_torch_tensors_in_and_out_through_dlpack(cuda_device):
    torch = pytest.importorskip("torch")
    s = onnx_ep.Session(_model(), providers=["cuda"])
    xt = torch.from_numpy(X).cuda()
    b = s.io_binding()
    b.bind_input("x", xt)                   # zero-copy import
    out = Tensor.empty(X.shape, np.float32, "cuda")
    b.bind_output("y", out)
    b.bind_output("z", "cuda")
    s.run_with_iobinding(b)
    y, z = b.get_outputs()
    assert y is out
    ey, ez = _ref(X)
    yt = torch.from_dlpack(y)               # zero-copy export
    assert yt.device.type == "cuda" and yt.data_ptr() == out.data_ptr
    np.testing.assert_array_equal(yt.cpu().numpy(), ey)
    np.testing.assert_array_equal(torch.from_dlpack(z).cpu().numpy(), ez)
    # run() takes device Tensors too and returns numpy
    got = s.run(None, {"x": Tensor.from_dlpack(xt)})
    np.testing.assert_array_equal(got[0], ey)


def test_runs_that_do_not_wait_chain_on_the_device(cuda_device):
    """RunOptions(synchronize=False): each run feeds the next on the device without the host
    waiting; a readback taken after a run gives that run's output while later ones are
    queued; synchronize_outputs() waits for the last."""
    from onnx_ep.core.device_io import readback

    sess = onnx_ep.Session(_model(), providers=["cuda"])
    b = sess.io_binding()
    outs = [Tensor.empty((6, 4), np.float32, "cuda") for _ in range(2)]
    x = Tensor.from_numpy(X, "cuda")
    want, reads = X, []
    for i in range(6):
        b.bind_input("x", x)
        b.bind_output("y", outs[i % 2])
        sess.run_with_iobinding(b, onnx_ep.RunOptions(synchronize=False))
        reads.append(readback(sess, outs[i % 2]))
        x = outs[i % 2]
        want = _ref(want)[0]
        if i >= 1:
            np.testing.assert_array_equal(reads[i - 1](), _ref_chain(i))
    b.synchronize_outputs()
    np.testing.assert_array_equal(outs[1].numpy(), want)
    sess.close()


def _ref_chain(steps: int) -> np.ndarray:
    x = X
    for _ in range(steps):
        x = _ref(x)[0]
    return x
