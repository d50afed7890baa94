"""GPU parity of CUDA com.microsoft::SkipLayerNormalization against cpu_reference within
the kernel's promise for the dtype (every optional input and output, broadcast skips,
rows not 16-byte aligned), one launch per call, and captured replays byte-identical to
eager runs.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_skip_layernorm.py
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
import pytest
from onnx import helper, numpy_helper

from tests.helpers.cuda_family import (
    FLOATS,
    check,
    check_replays_match_eager,
    random,
    record_launches,
)
from tests.helpers.oracle import ORACLE_IR_VERSION

pytestmark = pytest.mark.cuda
DT = list(FLOATS.values())
IDS = list(FLOATS)
OP = "SkipLayerNormalization"
MS = "com.microsoft"
ALL_OUTPUTS = ("y", "mean", "inv", "sum")


def _model(x, skip, gamma, beta=None, bias=None, outputs: Sequence[str] = ALL_OUTPUTS,
           **attrs) -> onnx.ModelProto:
    """x and skip fed; gamma, beta, bias initializers (``None``: left out); ``""`` in
    ``outputs`` skips one."""
    consts = {"gamma": gamma, "beta": beta, "bias": bias}
    names = ["x", "skip"] + [n if a is not None else "" for n, a in consts.items()]
    while names[-1] == "":
        names.pop()
    node = helper.make_node(OP, names, list(outputs), domain=MS, name="skip_ln", **attrs)
    feeds = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                           list(a.shape)) for n, a in (("x", x), ("skip", skip))]
    graph = helper.make_graph(
        [node], "skip_ln", feeds, [onnx.ValueInfoProto(name=o) for o in outputs if o],
        initializer=[numpy_helper.from_array(a, n) for n, a in consts.items() if a is not None])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(MS, 1)],
                             ir_version=ORACLE_IR_VERSION)


def _parity(dtype):
    from onnx_ep.providers.cuda.kernels.contrib_attention import SkipLayerNorm

    return SkipLayerNorm().parity_for(dtype)


def _data(shape, dtype, seed):
    return random(shape, dtype, seed=seed, scale=2.0) + dtype.type(0.25)


def _check(m, feeds, dtype, what):
    from onnx_ep import Session

    sess = Session(m, providers=["cuda"])
    try:
        assert sess.placement_summary() == {"cuda": 1}, sess.placement_summary()
    finally:
        sess.close()
    return check(m, feeds, _parity(dtype), what=what)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("hidden", [768, 896, 4864])
@pytest.mark.parametrize("layout", ["same", "seq", "one-batch", "tokens"])
@pytest.mark.parametrize("optional", ["none", "beta", "bias", "beta+bias"])
def test_skip_layer_normalization(cuda_device, dtype, hidden, layout, optional):
    shape, skip_shape = {"same": ((2, 3, hidden), (2, 3, hidden)),
                         "seq": ((2, 3, hidden), (3, hidden)),
                         "one-batch": ((2, 3, hidden), (1, 3, hidden)),
                         "tokens": ((5, hidden), (5, hidden))}[layout]
    x, skip = _data(shape, dtype, seed=1), random(skip_shape, dtype, seed=2)
    m = _model(x, skip, random((hidden,), dtype, seed=3),
               random((hidden,), dtype, seed=4) if "beta" in optional else None,
               random((hidden,), dtype, seed=5) if "bias" in optional else None, epsilon=1e-5)
    _check(m, {"x": x, "skip": skip}, dtype, f"{OP} {dtype} {shape} skip {skip_shape} "
                                             f"{optional}")


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("outputs", [("y",), ("y", "", "", "sum"), ("y", "", "inv"),
                                     ("y", "mean"), ("y", "mean", "inv")])
def test_optional_outputs(cuda_device, dtype, outputs):
    x, skip = _data((3, 4, 896), dtype, seed=6), random((3, 4, 896), dtype, seed=7)
    m = _model(x, skip, random((896,), dtype, seed=8), random((896,), dtype, seed=9),
               random((896,), dtype, seed=10), outputs=outputs)
    got = _check(m, {"x": x, "skip": skip}, dtype, f"{OP} {dtype} outputs {outputs}")
    assert len(got) == len([o for o in outputs if o])


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("hidden", [1, 7, 1001])
def test_rows_not_16_byte_aligned(cuda_device, dtype, hidden):
    x, skip = _data((4, hidden), dtype, seed=11), random((4, hidden), dtype, seed=12)
    _check(_model(x, skip, random((hidden,), dtype, seed=13), random((hidden,), dtype, seed=14)),
           {"x": x, "skip": skip}, dtype, f"{OP} {dtype} hidden {hidden}")


def test_one_launch_per_call_with_16_byte_packs(cuda_device, monkeypatch):
    from onnx_ep import RunOptions, Session
    launched = record_launches(monkeypatch)
    dtype = FLOATS["float16"]
    x, skip = _data((4, 896), dtype, seed=15), random((4, 896), dtype, seed=16)
    sess = Session(_model(x, skip, random((896,), dtype, seed=17)), providers=["cuda"])
    try:
        launched.clear()
        sess.run(None, {"x": x, "skip": skip}, RunOptions(capture="off"))
    finally:
        sess.close()
    assert [x[:3] for x in launched] == [("skip_layer_norm_v8_f16", (4, 1, 1), (128, 1, 1))]


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_captured_replays_equal_eager_runs_bit_for_bit(cuda_device, dtype):

    x, skip = _data((8, 896), dtype, seed=18), random((8, 896), dtype, seed=19)
    m = _model(x, skip, random((896,), dtype, seed=20), random((896,), dtype, seed=21),
               random((896,), dtype, seed=22))
    feeds = {"x": x, "skip": skip}
    check_replays_match_eager(m, feeds)
