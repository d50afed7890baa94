"""GPU parity of the CUDA activations (kernels/activation.py, on elementwise.cu) against
cpu_reference, byte for byte.

Each case runs one node on cpu_reference (its numpy kernel) and on the CUDA kernel (bound,
launched directly on DeviceTensors) and compares the output bytes. ``*_specials`` tests add
NaN (both signs), infinities, signed zeros and out-of-domain values. NaN sign and payload
are not compared (see test_elementwise.py). A row whose bound kernel declares a non-exact
promise (Gelu approximate="tanh") is held to that promise (onnx_ep.testing.ulp).

Run: python -m pytest -q -m cuda tests/providers/cuda/test_activation.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import ParityKind
from onnx_ep.providers.cuda.kernels import activation, elementwise
from tests.helpers.cuda_elementwise import (
    array_meta,
    assert_same_bytes,
    promise_of,
    reference,
    run_cuda,
    sample_values,
)

pytestmark = pytest.mark.cuda

BF16 = np.dtype(ml_dtypes.bfloat16)

UNARY_CASES = [(k.key.op_type, dt) for k in activation.KERNELS if k.family == "unary"
               for dt in sorted(k.dtypes, key=str)]


def _unary_attrs(op: str) -> list[dict]:
    if op == "Gelu":
        return [{}, {"approximate": "tanh"}]
    if op == "LeakyRelu":
        return [{}, {"alpha": float(np.float32(0.2))}]
    if op == "HardSigmoid":
        return [{}, {"alpha": float(np.float32(0.3)), "beta": float(np.float32(0.4))}]
    if op in ("Elu", "Selu", "Celu", "Swish"):
        return [{}, {"alpha": float(np.float32(1.5))}]
    if op == "ThresholdedRelu":
        return [{}, {"alpha": float(np.float32(-0.25))}]
    if op == "Shrink":
        return [{}, {"lambd": float(np.float32(1.25)), "bias": float(np.float32(0.3))}]
    return [{}]


@pytest.mark.parametrize("specials", [False, True], ids=["values", "specials"])
@pytest.mark.parametrize("op,dtype", UNARY_CASES, ids=[f"{o}-{d}" for o, d in UNARY_CASES])
def test_unary_activation_bytes_equal_reference(op, dtype, specials, stream, allocator):
    rng = np.random.default_rng(1)
    x = sample_values(dtype, 4099, rng, specials=specials).reshape(1, 4099)
    for attrs in _unary_attrs(op):
        meta = array_meta(op, [x], **attrs)
        assert_same_bytes(op, run_cuda(op, [x], meta, stream, allocator),
                          reference(op, [x], meta), [x], nan_payload=False,
                          promise=promise_of(op, meta))


def test_repeated_runs_are_bit_identical(stream, allocator):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((257, 129)).astype(np.float32)
    meta = array_meta("Gelu", [x])
    first = run_cuda("Gelu", [x], meta, stream, allocator)
    assert run_cuda("Gelu", [x], meta, stream, allocator).tobytes() == first.tobytes()


def test_gelu_tanh_cancellation_region_keeps_its_tolerance(stream, allocator):
    """x << 0: 1 + tanh(u) cancels; the declared tolerance (not exact) must hold there."""
    for dtype in (np.float32, np.float16, BF16):
        x = np.linspace(-9.0, -3.0, 6001).astype(dtype).reshape(1, -1)
        meta = array_meta("Gelu", [x], approximate="tanh")
        promise = promise_of("Gelu", meta)
        assert promise.kind is ParityKind.TOLERANCE
        assert_same_bytes("Gelu", run_cuda("Gelu", [x], meta, stream, allocator),
                          reference("Gelu", [x], meta), [x], promise=promise)


CLIP_DTYPES = sorted(elementwise.NUMERIC, key=str)


def _clip_bounds(dtype, lo: float, hi: float):
    return np.array(lo).astype(dtype), np.array(hi).astype(dtype)


@pytest.mark.parametrize("dtype", CLIP_DTYPES, ids=str)
def test_clip_bound_inputs_equal_reference(dtype, stream, allocator):
    rng = np.random.default_rng(7)
    x = sample_values(dtype, 3000, rng, specials=True).reshape(3, 1000)
    is_float = np.dtype(dtype).kind not in "iu"
    pairs = [(-0.5, 0.75), (0.0, 0.0), (2.0, -1.0)] if is_float else [(-3, 7), (5, 5), (9, -2)]
    if is_float:
        pairs += [(float("nan"), 1.0), (-1.0, float("-inf")), (-0.0, 0.0)]
    for lo_v, hi_v in pairs:
        lo, hi = _clip_bounds(dtype, lo_v, hi_v)
        for inputs in ([x, lo, hi], [x, lo], [x, None, hi], [x], [x, lo.reshape(1), None]):
            meta = array_meta("Clip", inputs)
            assert_same_bytes("Clip", run_cuda("Clip", inputs, meta, stream, allocator),
                              reference("Clip", inputs, meta), [x], nan_payload=False)


@pytest.mark.parametrize("dtype", sorted(elementwise.FLOATS, key=str), ids=str)
def test_clip_attribute_bounds_before_opset_11(dtype, stream, allocator):
    rng = np.random.default_rng(8)
    x = sample_values(dtype, 2000, rng, specials=True)
    for attrs in ({"min": -0.1, "max": 0.3}, {"min": 0.2}, {"max": -1e-3}, {},
                  {"min": 1.0, "max": -1.0}):
        attrs = {k: float(np.float32(v)) for k, v in attrs.items()}
        meta = array_meta("Clip", [x], opset=6, **attrs)
        assert_same_bytes("Clip", run_cuda("Clip", [x], meta, stream, allocator),
                          reference("Clip", [x], meta), [x], nan_payload=False)


PRELU_DTYPES = sorted(activation.ROWS["PRelu"].dtypes, key=str)


@pytest.mark.parametrize("dtype", PRELU_DTYPES, ids=str)
def test_prelu_slope_broadcast_equals_reference(dtype, stream, allocator):
    rng = np.random.default_rng(10)
    x = sample_values(dtype, 4 * 5 * 6, rng, specials=True).reshape(4, 5, 6)
    slope = sample_values(dtype, 4 * 5 * 6, rng, specials=True).reshape(4, 5, 6)
    for s in (slope, slope[0, :, :1], slope[0, 0], slope[0, 0, :1], slope[0, 0, 0]):
        s = np.ascontiguousarray(s)
        meta = array_meta("PRelu", [x, s])
        assert_same_bytes("PRelu", run_cuda("PRelu", [x, s], meta, stream, allocator),
                          reference("PRelu", [x, s], meta), [x, s], nan_payload=False)
