"""GPU parity of CUDA Softmax / LogSoftmax / LayerNormalization / RMSNormalization
against cpu_reference within each kernel's declared bound for the dtype.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_softmax.py
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.providers.cuda.kernels import softmax
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


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("cols", [33, 64, 4096])
@pytest.mark.parametrize("blocks", [None, 1], ids=["grid", "one-block"])
def test_softmax_specials(cuda_device, monkeypatch, dtype, cols, blocks):
    """Rows whose max is not finite take the float64 recipe in the fast kernels too: +inf
    next to a finite value whose float32 exp overflows (100) must still give 0 there.
    ``one-block``: the pipelined kernels' grid is one block, which walks every row."""
    monkeypatch.setattr(softmax, "PIPE_MAX_BLOCKS", blocks)
    x = random((6, cols), dtype)
    x[0, :] = -np.inf
    x[1, 5] = np.inf
    x[1, 6] = 100.0
    x[2, 9] = np.nan
    x[3, 1] = np.inf
    x[3, 2] = np.nan
    x[4, :] = np.nan
    x[5, 3] = -np.inf
    for op in ("Softmax", "LogSoftmax"):
        check(model(op, {"x": x}, {"axis": -1}, opset=13), {"x": x}, what=f"{op} {dtype}")


# fast row kernels: every pack count (1, 2, 4, 8), 1-element and 16-byte loads, warp rows
# with idle rows in the last block, 1024-thread rows, and rows too long (multi-pass kernels)
FAST_SHAPES = [(13, 64), (5, 7), (3, 1000), (2, 4097), (2, 8192), (2, 32768), (2, 65536),
               (3, 8193)]


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_fast_rows_and_fallback(cuda_device, dtype, op):
    for shape in FAST_SHAPES:
        x = random(shape, dtype, seed=7, scale=4.0)
        check(model(op, {"x": x}, {"axis": -1}, opset=13), {"x": x},
              what=f"{op} {dtype} {shape}")


@pytest.mark.parametrize("op", ["Softmax", "LayerNormalization"])
def test_fast_rows_repeat_bit_identically(cuda_device, op):
    from onnx_ep import Session

    x = random((64, 4096), np.float32, seed=8, scale=3.0)
    consts = {} if op == "Softmax" else {"s": random((4096,), np.float32, seed=9)}
    names = ["x", *consts]
    m = model(op, {"x": x}, {"axis": -1}, consts=consts, inputs=names,
              opset=13 if op == "Softmax" else 17)
    sess = Session(m, providers=["cuda"])
    first = sess.run(None, {"x": x})[0]
    for _ in range(3):
        assert sess.run(None, {"x": x})[0].tobytes() == first.tobytes()


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
@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization"])
def test_normalization_fast_rows_and_fallback(cuda_device, dtype, op):
    for shape in [(13, 64), (5, 7), (3, 1001), (4, 4096), (2, 32768), (2, 40000)]:
        x = random(shape, dtype, seed=10, scale=2.0) + dtype.type(0.5)
        consts = {"s": random(shape[-1:], dtype, seed=11)}
        if op == "LayerNormalization":
            consts["b"] = random(shape[-1:], dtype, seed=12)
        n_out = 3 if op == "LayerNormalization" else 1
        check(model(op, {"x": x}, {"axis": -1}, consts=consts, inputs=["x", *consts],
                    n_outputs=n_out, opset=17 if n_out == 3 else 23), {"x": x},
              what=f"{op} {dtype} {shape}")


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_rms_normalization(cuda_device, dtype):
    x = random((6, 512), dtype, seed=4)
    check(model("RMSNormalization", {"x": x}, {"axis": -1},
                consts={"s": random((512,), dtype, seed=5)}, inputs=["x", "s"], opset=23),
          {"x": x})


# pipelined fast rows: persistent blocks cycling through ``stages`` shared-memory buffers.
# Capping the grid at 3 blocks makes each block walk many rows (so every buffer is reused),
# with idle thread groups in the last pass, partial packs (1000 columns) and short rows
# packed several to a block. Every shape has more than 3 row groups at the default
# FAST_VALUES (the test asserts the pipelined kernel ran).
PIPE_SHAPES = [(37, 64), (50, 4096), (41, 1000), (19, 2048), (7, 4096)]
NORM_OPS = {"LayerNormalization": 17, "RMSNormalization": 23}


def _row_model(op, x, seed):
    if op not in NORM_OPS:
        return model(op, {"x": x}, {"axis": -1}, opset=13)
    consts = {"s": random(x.shape[-1:], x.dtype, seed=seed)}
    if op == "LayerNormalization":
        consts["b"] = random(x.shape[-1:], x.dtype, seed=seed + 1)
    n_out = 3 if op == "LayerNormalization" else 1
    return model(op, {"x": x}, {"axis": -1}, consts=consts, inputs=["x", *consts],
                 n_outputs=n_out, opset=NORM_OPS[op])


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", *NORM_OPS])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_pipelined_rows_keep_the_promise_and_equal_the_direct_kernels(
        cuda_device, monkeypatch, dtype, op, stages):
    """Each shape keeps the promise against cpu_reference through the pipelined kernel, and
    its bytes equal the direct kernel's (same arithmetic, other way into registers)."""
    from onnx_ep import Session
    from onnx_ep.providers.cuda.device import get_device
    from onnx_ep.providers.cuda.kernels.base import CudaKernel

    monkeypatch.setattr(softmax, "PIPE_MAX_BLOCKS", 3)
    monkeypatch.setattr(softmax, "PIPE_STAGES", stages)
    monkeypatch.setattr(softmax, "PIPE_SHARED_BYTES", 96 * 1024)
    launched = []
    real = CudaKernel.launch

    def spy(self, fn, grid, block, args, stream, shared_bytes=0):
        launched.append((fn.name, grid, shared_bytes))
        return real(self, fn, grid, block, args, stream, shared_bytes=shared_bytes)

    monkeypatch.setattr(CudaKernel, "launch", spy)
    for i, shape in enumerate(PIPE_SHAPES):
        x = random(shape, dtype, seed=20 + i, scale=3.0) + dtype.type(0.25)
        m = _row_model(op, x, seed=40 + i)
        launched.clear()
        piped = check(m, {"x": x}, what=f"{op} {dtype} {shape} stages={stages}")
        name, grid, shared = launched[-1]
        assert "_pipe_p" in name and grid[0] <= 3 and shared > 0, (shape, launched)
        monkeypatch.setattr(softmax, "PIPE_STAGES", 0)
        try:
            direct = Session(m, providers=["cuda"]).run(None, {"x": x})
        finally:
            monkeypatch.setattr(softmax, "PIPE_STAGES", stages)
        assert "_fast_v" in launched[-1][0]
        for a, b in zip(piped, direct):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (op, shape)
    get_device(0).synchronize()

