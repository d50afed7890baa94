"""ULP distance and per-value verdicts (onnx_ep/testing/ulp.py), checked on raw bit patterns."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from onnx_ep import Parity
from onnx_ep.testing.ulp import float_format, judge, max_ulp, ulp_distance

FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(dtype, *patterns: int) -> np.ndarray:
    """An array of ``dtype`` from raw bit patterns."""
    dt = np.dtype(dtype)
    return np.array(patterns, dtype=UINT[dt.itemsize]).view(dt)


def sign_bit(dtype) -> int:
    return 1 << (np.dtype(dtype).itemsize * 8 - 1)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_neighbouring_floats_are_one_ulp_apart(dtype) -> None:
    one = np.array([1.0, -1.0, 1e-3, 100.0], np.float32).astype(dtype)
    up = (one.view(UINT[one.itemsize]) + 1).view(one.dtype)   # one step away from zero
    assert max_ulp(one, up) == 1
    assert ulp_distance(one, up).tolist() == [1.0] * 4
    assert max_ulp(one, one) == 0


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_plus_and_minus_zero_are_zero_ulp_apart(dtype) -> None:
    assert max_ulp(bits(dtype, 0), bits(dtype, sign_bit(dtype))) == 0


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_sign_crossing_counts_the_floats_between(dtype) -> None:
    s = sign_bit(dtype)
    # -denorm_min .. +denorm_min: two steps through zero
    assert max_ulp(bits(dtype, s | 1), bits(dtype, 1)) == 2
    # -x .. +x is twice the distance of x from zero
    one = np.array([1.0], np.float32).astype(dtype)
    pattern = int(one.view(UINT[one.itemsize])[0])
    assert max_ulp(-one, one) == 2 * pattern
    assert max_ulp(one, -one) == 2 * pattern


def test_float64_extremes_are_exact_beyond_int64() -> None:
    big = np.finfo(np.float64).max
    assert max_ulp(np.array([-big]), np.array([big])) == 2 * 0x7FEF_FFFF_FFFF_FFFF
    # the float64 array view is exact up to 2**53 and rounds beyond
    assert ulp_distance(np.array([-big]), np.array([big]))[0] == float(2 * 0x7FEF_FFFF_FFFF_FFFF)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_nan_matches_nan_with_any_payload_and_nothing_else(dtype) -> None:
    nan = np.array([np.nan], np.float32).astype(dtype)
    other_payload = (nan.view(UINT[nan.itemsize]) + 1).view(nan.dtype)
    assert np.isnan(other_payload.astype(np.float32)).all()
    assert max_ulp(nan, other_payload) == 0
    assert max_ulp(nan, np.array([1.0], np.float32).astype(dtype)) == math.inf
    assert ulp_distance(np.array([1.0], np.float32).astype(dtype), nan)[0] == np.inf


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_infinities_must_be_equal(dtype) -> None:
    inf = np.array([np.inf, -np.inf], np.float32).astype(dtype)
    assert max_ulp(inf, inf) == 0
    # the largest finite float is one bit pattern below inf, but has no ULP distance to it
    big = (inf.view(UINT[inf.itemsize]) - 1).view(inf.dtype)
    assert np.isfinite(big.astype(np.float64)).all()
    assert max_ulp(inf, big) == math.inf
    assert max_ulp(inf, inf[::-1].copy()) == math.inf


def test_narrow_and_complex_floats() -> None:
    e4 = np.array([1.0, -2.0], np.float32).astype(ml_dtypes.float8_e4m3fn)
    assert max_ulp(e4, (e4.view(np.uint8) + 1).view(e4.dtype)) == 1
    assert float_format(ml_dtypes.float4_e2m1fn) == (4, True)
    assert float_format(ml_dtypes.float8_e8m0fnu) == (8, False)
    c = np.array([1 + 1j], np.complex64)
    c2 = c.copy()
    c2.view(np.float32)[1] = np.nextafter(np.float32(1), np.float32(2))
    assert max_ulp(c, c2) == 1


def test_ulp_needs_floats_of_one_dtype_and_shape() -> None:
    for x, ref in [(np.array([1], np.int32), np.array([1], np.int32)),
                   (np.array([1.0], np.float32), np.array([1.0], np.float64)),
                   (np.array([1.0, 2.0]), np.array([1.0]))]:
        with pytest.raises(TypeError):
            max_ulp(x, ref)
    assert float_format(np.int32) is None and float_format(np.bool_) is None


# ---------------------------------------------------------------- verdicts


def test_exact_compares_bytes_so_minus_zero_breaks_it_but_nan_payloads_do_not() -> None:
    z = judge(np.array([-0.0], np.float32), np.array([0.0], np.float32), Parity.EXACT)
    assert not z.bytes_equal and not z.kept and z.max_ulp == 0 and z.max_abs == 0
    assert judge(np.array([-0.0], np.float32), np.array([0.0], np.float32), Parity.ulp(0)).kept
    nan = bits(np.float32, 0x7FC00000)
    payload = bits(np.float32, 0x7FC00001)
    # NaN sign and payload follow the host CPU's SIMD paths, not the math
    d = judge(nan, payload, Parity.EXACT)
    assert d.kept and not d.bytes_equal
    assert not judge(nan, np.array([1.0], np.float32), Parity.EXACT).kept
    assert judge(nan, payload, Parity.ulp(0)).kept
    assert judge(nan, payload, Parity.tolerance(0.0)).kept


def test_ulp_promise_is_a_bound_on_the_max() -> None:
    x = np.array([1.0, 2.0], np.float32)
    y = np.nextafter(np.nextafter(x, np.float32(3)), np.float32(3))
    d = judge(y, x, Parity.ulp(2))
    assert (d.kept, d.bytes_equal, d.max_ulp, d.differing) == (True, False, 2, 2)
    d = judge(y, x, Parity.ulp(1))
    assert not d.kept and d.reason == "max ulp 2 > 1"


def test_tolerance_is_asymmetric_in_the_reference() -> None:
    ref = np.array([100.0, 0.0], np.float32)
    assert judge(np.array([100.1, 0.0], np.float32), ref, Parity.tolerance(1e-3)).kept
    d = judge(np.array([100.0, 1e-3], np.float32), ref, Parity.tolerance(1e-3))
    assert not d.kept and d.max_rel == math.inf and "1 of 2 elements" in d.reason
    assert judge(np.array([100.0, 1e-3], np.float32), ref, Parity.tolerance(1e-3, 2e-3)).kept


def test_nan_or_infinity_mismatch_breaks_every_promise() -> None:
    ref = np.array([1.0, np.inf], np.float32)
    for promise in (Parity.ulp(1000), Parity.tolerance(1.0, 1.0)):
        d = judge(np.array([np.nan, np.inf], np.float32), ref, promise)
        assert not d.kept and "NaN at 1 element" in d.reason and d.max_ulp == math.inf
        d = judge(np.array([1.0, -np.inf], np.float32), ref, promise)
        assert not d.kept and "unequal infinities" in d.reason and d.max_abs == math.inf


def test_non_floats_compare_bytes_whatever_the_promise() -> None:
    d = judge(np.array([1, 2], np.int64), np.array([1, 3], np.int64), Parity.tolerance(1.0, 10))
    assert not d.kept and d.max_ulp is None and d.max_abs == 1.0 and d.differing == 1
    assert judge(np.array([True]), np.array([True]), Parity.ulp(3)).kept
    s = judge(np.array(["a", "b"], object), np.array(["a", "c"], object), Parity.EXACT)
    assert not s.kept and s.reason == "1 of 2 strings differ"


def test_dtype_shape_and_sequence_mismatches() -> None:
    a = np.zeros((2, 3), np.float32)
    assert judge(a, a.astype(np.float16), Parity.ulp(9)).reason == \
        "dtype float32 != reference float16"
    assert judge(a, a.T, Parity.ulp(9)).reason == "shape [2, 3] != reference [3, 2]"
    assert judge([a, a], [a, a], Parity.EXACT).kept
    assert judge([a], [a, a], Parity.EXACT).reason == "sequence of 1 != reference's 2"
    seq = judge([a, a + 1], [a, np.nextafter(a + 1, np.float32(9))], Parity.ulp(1))
    assert seq.kept and seq.max_ulp == 1 and not seq.bytes_equal
    assert judge(None, None, Parity.EXACT).kept and not judge(a, None, Parity.EXACT).kept


def test_bytes_equal_agrees_with_judge_without_measuring():
    from onnx_ep.core.kernel import Parity
    from onnx_ep.testing.ulp import bytes_equal, judge

    a = np.array([1.0, np.nan, -0.0], np.float32)
    pairs = [(a, a.copy()), (a, np.array([1.0, np.nan, 0.0], np.float32)),
             (a, a.astype(np.float64)), (a, a[:2]),
             (np.array(["x", "y"], object), np.array(["x", "y"], object)),
             (np.array(["x"], object), np.array(["z"], object))]
    for x, ref in pairs:
        assert bytes_equal(x, ref) == judge(x, ref, Parity.EXACT).bytes_equal, (x, ref)
    assert bytes_equal(None, None) and not bytes_equal(a, None)
