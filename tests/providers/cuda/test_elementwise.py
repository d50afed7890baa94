"""GPU parity of the CUDA elementwise and Cast kernels against cpu_reference, byte for byte
(the activations: test_activation.py).

Each case runs one node on cpu_reference (its numpy kernel) and on the CUDA kernel
(bound, launched directly on DeviceTensors) and compares the output bytes. ``*_specials``
tests add NaN (both signs), infinities, signed zeros and out-of-domain values.

NaN sign and payload are not compared for computed results (unary, binary): the
reference's depend on the host CPU's numpy paths (an AVX-512 host returns -NaN for
log(-1), glibc +NaN), so a NaN must only be NaN where the reference's is; every other
element, signed zeros included, must be byte-identical. Where and Cast move or convert
bits and are compared byte for byte, NaNs included.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_elementwise.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.providers.cuda.kernels import elementwise
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


UNARY_CASES = [(k.key.op_type, dt) for k in elementwise.KERNELS if k.family == "unary"
               for dt in sorted(k.dtypes, key=str)]
BINARY_CASES = [(k.key.op_type, dt) for k in elementwise.KERNELS if k.family == "binary"
                and k.key.op_type != "BitShift"  # its own test below
                for dt in sorted(k.dtypes, key=str)]


def _unary_attrs(op: str) -> list[dict]:
    if op == "IsInf":
        return [{}, {"detect_positive": 0}, {"detect_negative": 0}]
    return [{}]


@pytest.mark.parametrize("specials", [False, True], ids=["values", "specials"])
@pytest.mark.parametrize("op,dtype", UNARY_CASES, ids=[f"{o}-{d}" for o, d in UNARY_CASES])
def test_unary_bytes_equal_reference(op, dtype, specials, stream, allocator):
    rng = np.random.default_rng(1)
    x = sample_values(dtype, 4099, rng, specials=specials).reshape(1, 4099)
    for attrs in _unary_attrs(op):
        meta = array_meta(op, [x], **attrs)
        assert_same_bytes(op, run_cuda(op, [x], meta, stream, allocator),
                          reference(op, [x], meta), [x], nan_payload=False,
                          promise=promise_of(op, meta))


def _binary_inputs(op: str, dtype, rng, specials: bool):
    a = sample_values(dtype, 64 * 33, rng, specials=specials).reshape(64, 33)
    b = sample_values(dtype, 64 * 33, rng, specials=specials).reshape(64, 33)
    if specials and np.dtype(dtype).kind == "f":
        b = np.roll(a, 7, axis=1)  # pairs of specials
        b.reshape(-1)[: 64 * 33: 5] = a.reshape(-1)[: 64 * 33: 5]  # equal operands
    if np.dtype(dtype).kind in "iu":
        if op in ("Div", "Mod"):
            b = np.where(b == 0, 3, b).astype(dtype)
        if op == "Pow":
            a = rng.integers(-5, 6, a.shape).astype(dtype)
            b = rng.integers(-3 if np.dtype(dtype).kind == "i" else 0, 9, b.shape).astype(dtype)
    return a, b


@pytest.mark.parametrize("specials", [False, True], ids=["values", "specials"])
@pytest.mark.parametrize("op,dtype", BINARY_CASES, ids=[f"{o}-{d}" for o, d in BINARY_CASES])
def test_binary_bytes_equal_reference(op, dtype, specials, stream, allocator):
    if specials and np.dtype(dtype).kind != "f":
        pytest.skip("specials are float values")
    rng = np.random.default_rng(2)
    a, b = _binary_inputs(op, dtype, rng, specials)
    attr_sets = [{}, {"fmod": 1}] if op == "Mod" else [{}]
    for attrs in attr_sets:
        for x, y in ((a, b), (a, b[:1]), (a[:, :1], b[:1]), (a[:1, 3:4].reshape(()), b)):
            meta = array_meta(op, [x, y], **attrs)
            assert_same_bytes(op, run_cuda(op, [x, y], meta, stream, allocator),
                              reference(op, [x, y], meta), [x, y], nan_payload=False)


@pytest.mark.parametrize("shapes", [
    [(2, 3, 4), (2, 3, 4)], [(2, 3, 4), (4,)], [(2, 1, 4), (1, 3, 1)],
    [(5, 1, 3, 1, 2, 1), (1, 4, 1, 2, 1, 3)], [(7,), ()]])
def test_broadcast_shapes_on_device(shapes, stream, allocator):
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    meta = array_meta("Sub", [x, y])
    assert_same_bytes("Sub", run_cuda("Sub", [x, y], meta, stream, allocator),
                      reference("Sub", [x, y], meta), [x, y])


@pytest.mark.parametrize("dtype", sorted(elementwise.ALL, key=str))
def test_where_bytes_equal_reference(dtype, stream, allocator):
    rng = np.random.default_rng(4)
    c = rng.integers(0, 2, (6, 1, 5)).astype(np.bool_)
    x = sample_values(dtype, 4 * 5, rng, specials=True).reshape(4, 5)
    y = sample_values(dtype, 6 * 4 * 1, rng).reshape(6, 4, 1)
    meta = array_meta("Where", [c, x, y])
    assert_same_bytes("Where", run_cuda("Where", [c, x, y], meta, stream, allocator),
                      reference("Where", [c, x, y], meta), [c, x, y])


CAST_DTYPES = sorted((np.dtype(t) for t in (np.float32, np.float16, BF16, np.float64, np.int64,
                                             np.int32, np.int8, np.uint8, np.bool_)), key=str)
CAST_CASES = [(s, d) for s in CAST_DTYPES for d in CAST_DTYPES]


@pytest.mark.parametrize("src,dst", CAST_CASES, ids=[f"{s}-{d}" for s, d in CAST_CASES])
def test_cast_bytes_equal_reference(src, dst, stream, allocator):
    rng = np.random.default_rng(5)
    x = sample_values(src, 3001, rng, specials=True)
    if np.dtype(src).kind == "f":
        extra = np.array([300.7, -300.7, 255.9, -129.0, 3e9, -3e9, 2.0**63, -2.0**63, 1e20,
                          2.0**31, -2.0**31, -2.0**31 - 1, 65519.0, 65520.0, 1e-8, 3.4e38])
        with np.errstate(all="ignore"):
            x[-len(extra):] = extra.astype(src)
    elif np.dtype(src) == np.int64:
        x[-4:] = [2**62 + 2**54 + 1, -(2**53) - 1, 2**24 + 1, 65520]
    meta = array_meta("Cast", [x], to=onnx_elem_type(dst))
    assert_same_bytes("Cast", run_cuda("Cast", [x], meta, stream, allocator),
                      reference("Cast", [x], meta), [x])
    like = np.zeros(1, dst)
    meta = array_meta("CastLike", [x, like])
    assert_same_bytes("CastLike", run_cuda("CastLike", [x, like], meta, stream, allocator),
                      reference("CastLike", [x, like], meta), [x])


SHIFT_DTYPES = sorted(elementwise.INTS, key=str)


@pytest.mark.parametrize("dtype", SHIFT_DTYPES, ids=str)
def test_bitshift_equals_numpy_including_counts_past_the_width(dtype, stream, allocator):
    """numpy's shifts: a count >= the width (or negative) gives 0, or -1 for a right shift
    of a negative value; the kernels must do the same, not C's undefined behaviour."""
    rng = np.random.default_rng(9)
    dt = np.dtype(dtype)
    width = 8 * dt.itemsize
    counts = np.array([0, 1, 3, width - 1, width, width + 1, 2 * width, 100,
                       *rng.integers(0, width, 24)], dtype=np.int64)
    if dt.kind == "i":
        counts = np.concatenate([counts, [-1, -width, -100]])
    counts = counts.astype(dt)
    x = sample_values(dt, 7 * counts.size, rng).reshape(7, counts.size)
    for direction in ("LEFT", "RIGHT"):
        for a, b in ((x, counts), (x, counts[None, :].repeat(7, 0)), (x[:, :1], counts)):
            meta = array_meta("BitShift", [a, b], direction=direction)
            assert_same_bytes("BitShift", run_cuda("BitShift", [a, b], meta, stream, allocator),
                              reference("BitShift", [a, b], meta), [a, b])


VARIADIC_CASES = [(k.key.op_type, dt) for k in elementwise.KERNELS if k.family == "variadic"
                  for dt in sorted(k.dtypes, key=str)]


@pytest.mark.parametrize("op,dtype", VARIADIC_CASES, ids=[f"{o}-{d}" for o, d in VARIADIC_CASES])
def test_variadic_fold_equals_reference(op, dtype, stream, allocator):
    """1, 2, 3 and 4 inputs with broadcasting; every step rounds like the reference's."""
    rng = np.random.default_rng(11)
    a = sample_values(dtype, 3 * 4 * 5, rng, specials=True).reshape(3, 4, 5)
    b = sample_values(dtype, 4 * 5, rng, specials=True).reshape(4, 5)
    c = sample_values(dtype, 3 * 4, rng).reshape(3, 4, 1)
    d = sample_values(dtype, 5, rng, specials=True)
    for arrays in ([a], [b, a], [a, b], [c, d], [a, b, c], [d, c, b, a], [a, a, a]):
        meta = array_meta(op, arrays)
        assert_same_bytes(op, run_cuda(op, arrays, meta, stream, allocator),
                          reference(op, arrays, meta), arrays, nan_payload=False)


def test_mean_rounds_the_sum_before_dividing(stream, allocator):
    """float16 Mean of 3 inputs: the sum is rounded to float16 at each step (it overflows
    to inf here), as the reference's chain of float16 adds does."""
    x = np.full((4,), 40000.0, np.float16)
    arrays = [x, x, -x]
    meta = array_meta("Mean", arrays)
    got = run_cuda("Mean", arrays, meta, stream, allocator)
    want = reference("Mean", arrays, meta)
    assert_same_bytes("Mean", got, want, arrays, nan_payload=False)


POW_MIXED = [(b, e) for b in sorted(elementwise.NARROW_FLOATS, key=str)
             for e in sorted(elementwise.POW_EXPONENTS - {b}, key=str)]


@pytest.mark.parametrize("base,exp", POW_MIXED, ids=[f"{b}-{e}" for b, e in POW_MIXED])
def test_pow_with_an_exponent_of_another_dtype(base, exp, stream, allocator):
    rng = np.random.default_rng(12)
    x = sample_values(base, 16 * 33, rng, specials=True).reshape(16, 33)
    if np.dtype(exp).kind in "iu":
        signed = np.dtype(exp).kind == "i"
        e = rng.integers(-4 if signed else 0, 9, 33).astype(exp)
        e[:6] = [0, 1, 2, 3, 5, np.iinfo(exp).max]
        e[6] = -1 if signed else np.iinfo(exp).max - 1
    else:
        e = sample_values(exp, 33, rng, specials=True)
        e[:4] = [2.0, 0.5, -1.0, 3.0]
    for a, b in ((x, e), (x, np.ascontiguousarray(e[:1])), (np.ascontiguousarray(x[:1, :1]), e)):
        meta = array_meta("Pow", [a, b])
        assert_same_bytes("Pow", run_cuda("Pow", [a, b], meta, stream, allocator),
                          reference("Pow", [a, b], meta), [a, b], nan_payload=False)


def test_integer_pow_of_minus_one_follows_the_float64_exponent(stream, allocator):
    """Negative exponents go through float64 in the reference: an odd exponent below -2^53
    rounds to an even one there, so (-1) ** e is 1."""
    e = np.array([-(2**53) - 1, -(2**53) + 1, -3, -(2**63) + 1, -2, 5], np.int64)
    x = np.array([-1, -1, -1, -1, -1, -1], np.int64)
    meta = array_meta("Pow", [x, e])
    assert_same_bytes("Pow", run_cuda("Pow", [x, e], meta, stream, allocator),
                      reference("Pow", [x, e], meta), [x, e])
