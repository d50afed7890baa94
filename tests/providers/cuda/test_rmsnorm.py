"""GPU parity of CUDA SimplifiedLayerNormalization and
com.microsoft::SkipSimplifiedLayerNormalization against cpu_reference within each kernel's
declared bound for the dtype, one launch per call, and captured replays byte-identical to
eager runs.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_rmsnorm.py
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.helpers.cuda_family import FLOATS, check, check_replays_match_eager, model, random
from tests.helpers.oracle import ORACLE_IR_VERSION

pytestmark = pytest.mark.cuda
DT = list(FLOATS.values())
IDS = list(FLOATS)
SIMPLIFIED = "SimplifiedLayerNormalization"
SKIP = "SkipSimplifiedLayerNormalization"
MS = "com.microsoft"
ALL_OUTPUTS = ("y", "mean", "inv", "sum")


def _simplified(x: np.ndarray, scale: np.ndarray, n_outputs: int = 2,
                **attrs) -> onnx.ModelProto:
    return model(SIMPLIFIED, {"x": x}, attrs, consts={"s": scale}, inputs=["x", "s"],
                 n_outputs=n_outputs, opset=17)


def _skip(x: np.ndarray, skip: np.ndarray, gamma: np.ndarray, bias: np.ndarray | None = None,
          outputs: Sequence[str] = ALL_OUTPUTS, **attrs) -> onnx.ModelProto:
    """x and skip fed, gamma (and bias) initializers; ``""`` in ``outputs`` skips one."""
    consts = {"gamma": gamma, **({"bias": bias} if bias is not None else {})}
    node = helper.make_node(SKIP, ["x", "skip", *consts], list(outputs), domain=MS,
                            name="skip_norm", **attrs)
    feeds = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                           list(a.shape)) for n, a in (("x", x), ("skip", skip))]
    graph = helper.make_graph(
        [node], "skip_norm", feeds, [onnx.ValueInfoProto(name=o) for o in outputs if o],
        initializer=[numpy_helper.from_array(a, n) for n, a in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(MS, 1)],
                             ir_version=ORACLE_IR_VERSION)


def _data(shape: Sequence[int], dtype, seed: int) -> np.ndarray:
    return random(shape, dtype, seed=seed, scale=2.0) + dtype.type(0.25)


# rows of the decoder widths (896, 4864) from one token to a prefill; rows whose length or
# scale period rules out 16-byte packs (7, 1001, 20 for 2-byte types); inner axes
SIMPLIFIED_CASES = [
    ((1, 896), -1, (896,)), ((7, 896), -1, (896,)), ((3, 5, 896), -1, (896,)),
    ((300, 896), -1, (896,)), ((1, 4864), -1, (4864,)), ((4, 4864), -1, (4864,)),
    ((5, 7), -1, (7,)), ((3, 1001), -1, (1001,)), ((2, 3, 20), 1, (3, 20)),
    ((2, 3, 20), 1, (20,)), ((2, 3, 8), 0, (2, 3, 8)), ((4, 64), -1, (1,)),
]


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("shape,axis,scale_shape", SIMPLIFIED_CASES)
def test_simplified_layer_normalization(cuda_device, dtype, shape, axis, scale_shape):
    x = _data(shape, dtype, seed=1)
    m = _simplified(x, random(scale_shape, dtype, seed=2), axis=axis, epsilon=1e-6)
    check(m, {"x": x}, what=f"{SIMPLIFIED} {dtype} {shape} axis={axis} scale {scale_shape}")


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_simplified_layer_normalization_y_only_and_a_zero_row(cuda_device, dtype):
    x = _data((6, 896), dtype, seed=3)
    x[2] = 0
    check(_simplified(x, random((896,), dtype, seed=4), n_outputs=1), {"x": x})


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("hidden", [896, 4864])
@pytest.mark.parametrize("layout", ["same", "seq", "one-batch", "tokens"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_skip_simplified_layer_normalization(cuda_device, dtype, hidden, layout, bias):
    shape, skip_shape = {"same": ((2, 3, hidden), (2, 3, hidden)),
                         "seq": ((2, 3, hidden), (3, hidden)),
                         "one-batch": ((2, 3, hidden), (1, 3, hidden)),
                         "tokens": ((5, hidden), (5, hidden))}[layout]
    x, skip = _data(shape, dtype, seed=5), random(skip_shape, dtype, seed=6)
    m = _skip(x, skip, random((hidden,), dtype, seed=7),
              random((hidden,), dtype, seed=8) if bias else None, epsilon=1e-6)
    check(m, {"x": x, "skip": skip}, what=f"{SKIP} {dtype} {shape} skip {skip_shape}")


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("outputs", [("y",), ("y", "", "", "sum"), ("y", "", "inv"),
                                     ("y", "mean")])
def test_skip_simplified_layer_normalization_optional_outputs(cuda_device, dtype, outputs):
    x, skip = _data((3, 4, 896), dtype, seed=9), random((3, 4, 896), dtype, seed=10)
    m = _skip(x, skip, random((896,), dtype, seed=11), random((896,), dtype, seed=12),
              outputs=outputs)
    got = check(m, {"x": x, "skip": skip}, what=f"{SKIP} {dtype} outputs {outputs}")
    assert len(got) == len([o for o in outputs if o])


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_skip_rows_not_16_byte_aligned(cuda_device, dtype):
    x, skip = _data((4, 1001), dtype, seed=13), random((4, 1001), dtype, seed=14)
    check(_skip(x, skip, random((1001,), dtype, seed=15)), {"x": x, "skip": skip})


@pytest.mark.parametrize("op", [SIMPLIFIED, SKIP])
def test_one_launch_per_call_with_16_byte_packs(cuda_device, monkeypatch, op):
    from onnx_ep import Session
    from onnx_ep.providers.cuda.kernels.base import CudaKernel

    launched = []
    real = CudaKernel.launch

    def spy(self, fn, grid, block, args, stream, shared_bytes=0):
        launched.append((fn.name, grid, block))
        return real(self, fn, grid, block, args, stream, shared_bytes=shared_bytes)

    monkeypatch.setattr(CudaKernel, "launch", spy)
    dtype = FLOATS["float16"]
    x = _data((4, 896), dtype, seed=16)
    feeds = {"x": x}
    if op == SIMPLIFIED:
        m = _simplified(x, random((896,), dtype, seed=17))
    else:
        feeds["skip"] = random((4, 896), dtype, seed=18)
        m = _skip(x, feeds["skip"], random((896,), dtype, seed=19))
    sess = Session(m, providers=["cuda"])
    try:
        launched.clear()
        sess.run(None, feeds, _eager())
    finally:
        sess.close()
    assert [(name, grid, block) for name, grid, block in launched] == \
        [("rms_norm_v8_f16", (4, 1, 1), (128, 1, 1))]


def _eager():
    from onnx_ep import RunOptions

    return RunOptions(capture="off")


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_captured_replays_equal_eager_runs_bit_for_bit(cuda_device, dtype):
    x, skip = _data((8, 896), dtype, seed=20), random((8, 896), dtype, seed=21)
    m = _skip(x, skip, random((896,), dtype, seed=22), random((896,), dtype, seed=23))
    check_replays_match_eager(m, {"x": x, "skip": skip})
