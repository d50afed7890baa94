"""NonZero on the GPU: coordinates sized at run time (one read-back), and the nodes that
read them kept on the device in a region planned per count; equal to numpy and to the CPU
reference.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_selection.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep.core.dtypes import onnx_elem_type
from tests.helpers.oracle import ORACLE_IR_VERSION

pytestmark = pytest.mark.cuda
n = helper.make_node
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "sel", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def _nonzero(dtype, shape) -> onnx.ModelProto:
    t = onnx_elem_type(np.dtype(dtype))
    return _model([n("NonZero", ["x"], ["y"])], [vi("x", t, list(shape))],
                  [vi("y", TensorProto.INT64, [len(shape), None])])


def _all_on_cuda(s: onnx_ep.Session) -> None:
    for plan in s.resources()["plans"]:
        assert not plan["nodes"]["host"], plan["nodes"]
    for body in s.resources()["bodies"]:
        assert not body["nodes"]["host"], body["nodes"]


RNG = np.random.default_rng(7)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64,
                                   np.int64, np.int32, np.int8, np.uint8, np.bool_])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (37, 1000), (5000, 41), ()])
def test_nonzero_matches_numpy(cuda_device, dtype, shape):
    x = (RNG.random(shape) < 0.3) * RNG.integers(1, 5, shape)
    x = np.asarray(x).astype(dtype)
    s = onnx_ep.Session(_nonzero(dtype, shape), providers=["cuda"])
    # a scalar is a one-element vector, as onnxruntime and the reference take it
    want = np.array(np.nonzero(np.atleast_1d(x)), dtype=np.int64)
    ref = onnx_ep.Session(_nonzero(dtype, shape), providers=["cpu_reference"])
    np.testing.assert_array_equal(ref.run(None, {"x": x})[0], want)
    for _ in range(2):
        (got,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(got, want)
    _all_on_cuda(s)


def test_nonzero_of_nothing_and_of_everything(cuda_device):
    s = onnx_ep.Session(_nonzero(np.float32, (4, 300)), providers=["cuda"])
    for x in (np.zeros((4, 300), np.float32), np.ones((4, 300), np.float32),
              np.full((4, 300), np.nan, np.float32), -np.zeros((4, 300), np.float32)):
        (got,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(got, np.array(np.nonzero(x), dtype=np.int64))


def _masked_select() -> onnx.ModelProto:
    """x[mask] as exporters write it: GatherND(x, Transpose(NonZero(mask))), then * 2."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    g = helper.make_graph(
        [n("NonZero", ["mask"], ["nz"]), n("Transpose", ["nz"], ["idx"], perm=[1, 0]),
         n("GatherND", ["x", "idx"], ["picked"]), n("Mul", ["picked", "two"], ["y"]),
         n("Relu", ["x"], ["r"])], "masked",
        [vi("x", TensorProto.FLOAT, [64, 48]), vi("mask", TensorProto.BOOL, [64, 48])],
        [vi("y", TensorProto.FLOAT, [None]), vi("r", TensorProto.FLOAT, [64, 48])],
        initializer=[two])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


@pytest.mark.parametrize("capture", ["off", "auto"])
def test_the_nodes_reading_nonzero_run_on_the_device(cuda_device, capture):
    model = _masked_select()
    ref = onnx_ep.Session(model, providers=["cpu_reference"])
    s = onnx_ep.Session(model, providers=["cuda"], options=onnx_ep.SessionOptions(capture=capture))
    x = RNG.standard_normal((64, 48)).astype(np.float32)
    for p in (0.1, 0.5, 0.1, 0.0, 0.5, 0.9) * 2:
        mask = RNG.random((64, 48)) < p
        got = s.run(None, {"x": x, "mask": mask})
        for a, b in zip(got, ref.run(None, {"x": x, "mask": mask})):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(got[0], x[mask] * 2)
    _all_on_cuda(s)
    assert s.resources()["bodies"], "the masked values were planned as a region"
