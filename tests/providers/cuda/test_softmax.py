"""GPU parity of CUDA Softmax / LogSoftmax / LayerNormalization / RMSNormalization
against cpu_reference within each kernel's declared bound for the dtype.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_softmax.py
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.cuda_family import FLOATS, check, model, random

pytestmark = pytest.mark.cuda
DT = list(FLOATS.values())
IDS = list(FLOATS)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((4, 1000), -1), ((3, 7), 1), ((2, 4, 8192), -1),
                                        ((2, 5, 6), 1), ((3, 4, 5), 0), ((16, 4100), 1)])
def test_softmax_opset_13_axis(cuda_device, dtype, op, shape, axis):
    x = random(shape, dtype, scale=4.0)
    check(model(op, {"x": x}, {"axis": axis}, opset=13), {"x": x},
          what=f"{op} {dtype} {shape} axis={axis}")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_flattens_before_opset_13(cuda_device, op):
    x = random((2, 3, 4, 5), np.float32)
    for axis in (1, 2, -1):
        check(model(op, {"x": x}, {"axis": axis}, opset=11), {"x": x})


def test_softmax_specials(cuda_device):
    x = random((4, 33), np.float32)
    x[0, :] = -np.inf
    x[1, 5] = np.inf
    x[2, 9] = np.nan
    for op in ("Softmax", "LogSoftmax"):
        check(model(op, {"x": x}, {"axis": -1}, opset=13), {"x": x}, what=op)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("shape,axis", [((4, 768), -1), ((2, 3, 20), 1), ((8, 33), -1),
                                        ((2, 4096), 1)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_normalization_with_statistics(cuda_device, dtype, shape, axis, with_bias):
    x = random(shape, dtype, seed=1, scale=3.0) + dtype.type(1.0)
    norm = shape[axis:] if axis >= 0 else shape[axis:]
    consts = {"s": random(norm, dtype, seed=2)}
    names = ["x", "s"]
    if with_bias:
        consts["b"] = random(norm, dtype, seed=3)
        names.append("b")
    check(model("LayerNormalization", {"x": x}, {"axis": axis, "epsilon": 1e-5},
                consts=consts, inputs=names, n_outputs=3, opset=17), {"x": x},
          what=f"LayerNormalization {dtype} {shape}")


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_rms_normalization(cuda_device, dtype):
    x = random((6, 512), dtype, seed=4)
    check(model("RMSNormalization", {"x": x}, {"axis": -1},
                consts={"s": random((512,), dtype, seed=5)}, inputs=["x", "s"], opset=23),
          {"x": x})
