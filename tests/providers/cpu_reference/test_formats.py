"""The narrow formats against the ONNX specification's tables, checked with exact rational
arithmetic written here (not with ml_dtypes, whose conversions vary between releases)."""

from __future__ import annotations

import math
from bisect import bisect_left
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_ep.providers.cpu_reference import formats
from onnx_ep.providers.cpu_reference.cast import cast

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
E4M3FNUZ = np.dtype(ml_dtypes.float8_e4m3fnuz)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
E5M2FNUZ = np.dtype(ml_dtypes.float8_e5m2fnuz)
F4 = np.dtype(ml_dtypes.float4_e2m1fn)
INT4, UINT4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
INT2, UINT2 = np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2)

#: (max, smallest subnormal, NaN codes, +inf code) of technical/float8.md and float4.md
SPEC = {
    E4M3FN: (448, Fraction(1, 2 ** 9), {0x7F, 0xFF}, None),
    E4M3FNUZ: (240, Fraction(1, 2 ** 10), {0x80}, None),
    E5M2: (57344, Fraction(1, 2 ** 16), {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}, 0x7C),
    E5M2FNUZ: (57344, Fraction(1, 2 ** 17), {0x80}, None),
    F4: (6, Fraction(1, 2), set(), None),
}
BYTE_FORMATS = list(SPEC)


def _codes(dt: np.dtype) -> np.ndarray:
    return np.arange(16 if dt == F4 else 256, dtype=np.uint8)


@pytest.mark.parametrize("dt", BYTE_FORMATS, ids=lambda d: d.name)
def test_decode_follows_the_spec_table(dt: np.dtype) -> None:
    mx, tiny, nans, inf = SPEC[dt]
    v = formats.decode(_codes(dt).view(dt))
    nan_codes = set(np.flatnonzero(np.isnan(v)).tolist())
    assert nan_codes == nans
    finite = v[np.isfinite(v)]
    assert finite.max() == mx and finite.min() == -mx
    assert finite[finite > 0].min() == tiny
    if inf is not None:
        assert v[inf] == np.inf and v[inf | 0x80] == -np.inf
    else:
        assert not np.isinf(v).any()


def test_float4_values_are_the_specs_list() -> None:
    v = formats.decode(np.arange(8, dtype=np.uint8).view(F4))
    assert v.tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


# ---------------------------------------------------------------- an exact oracle


def _grid(dt: np.dtype) -> tuple[list[Fraction], dict[Fraction, int]]:
    """Every finite non-negative value with its code (the fnuz formats' one zero)."""
    v = formats.decode(_codes(dt).view(dt))
    codes = {}
    for c, x in enumerate(v.tolist()):
        if math.isfinite(x) and x >= 0 and not (x == 0 and c != 0):
            codes[Fraction(x)] = c
    return sorted(codes), codes


#: fraction bits of each format
MBITS = {E4M3FN: 3, E4M3FNUZ: 3, E5M2: 2, E5M2FNUZ: 2, F4: 1}
#: the NaN a NaN input becomes (sign added for the formats with signed NaNs)
NAN_CODE = {E4M3FN: 0x7F, E4M3FNUZ: 0x80, E5M2: 0x7E, E5M2FNUZ: 0x80, F4: 0x7}


def _spec_round(dt: np.dtype, x: float, saturate: bool) -> int:
    """The code the float8 tables (or float4's) give for float64 ``x``, by exact search."""
    mx, _, _, inf = SPEC[dt]
    fnuz = dt in (E4M3FNUZ, E5M2FNUZ)
    sign = 0 if math.copysign(1.0, x) > 0 else (0x8 if dt == F4 else 0x80)
    if math.isnan(x):
        return NAN_CODE[dt] | (sign if dt in (E4M3FN, E5M2) else 0)
    grid, codes = _grid(dt)
    a = Fraction(abs(x)) if math.isfinite(x) else None
    if a is not None and a <= mx:
        i = bisect_left(grid, a)
        lo, hi = grid[max(i - 1, 0)], grid[i]
        if a == hi or a - lo > hi - a or (a - lo == hi - a and codes[hi] % 2 == 0):
            code = codes[hi]
        else:
            code = codes[lo]
        return sign | code if code else (0 if fnuz else sign)
    # [x] > max: round as if the exponent were unbounded (the next value is one ulp of
    # max's binade above it); a tie goes to max only when max's code is even
    ulp = Fraction(2) ** (math.frexp(mx)[1] - 1 - MBITS[dt])
    mid = mx + ulp / 2
    overflow = a is None or a > mid or (a == mid and codes[Fraction(mx)] % 2)
    if not overflow or saturate or dt == F4:
        return sign | codes[Fraction(mx)]
    if dt == E4M3FN:
        return 0x7F | sign
    return inf | sign if dt == E5M2 else 0x80


def _probes(dt: np.dtype) -> np.ndarray:
    rng = np.random.default_rng(7)
    grid = formats.decode(_codes(dt).view(dt))
    fin = np.unique(np.abs(grid[np.isfinite(grid)]))
    mids = (fin[1:] + fin[:-1]) / 2
    mx = fin[-1]
    parts = [fin, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf),
             mx * np.array([1.03, 1.06, 1.07, 1.0625, 1.0625 + 2 ** -30, 1.2, 2, 1e300]),
             fin[1] * np.array([0.25, 0.5, 0.5000001, 0.4999999]),
             rng.standard_normal(300) * mx / 4, np.array([0.0, np.inf, np.nan, 5e-324])]
    x = np.concatenate(parts)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("dt", BYTE_FORMATS, ids=lambda d: d.name)
def test_cast_to_float8_and_float4_is_the_specs_rounding(dt: np.dtype, saturate: bool) -> None:
    x = _probes(dt)
    got = cast(x, dt, saturate=saturate).view(np.uint8)
    want = [_spec_round(dt, float(v), saturate) for v in x]
    bad = [(float(v), hex(int(g)), hex(w)) for v, g, w in zip(x, got, want) if g != w]
    assert not bad, bad[:8]


def test_the_issues_e5m2_value_rounds_once() -> None:
    # just below the midpoint of 40960 and 49152: 40960 (0xf9); through float32 it was 49152
    x = np.array([-45055.99999999999])
    assert cast(x, E5M2).view(np.uint8).tolist() == [0xF9]


def test_float_to_bfloat16_rounds_once_from_float64_and_from_int64() -> None:
    x = np.array([1 + 2 ** -8 + 2 ** -40, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8 + 2 ** -40)])
    assert cast(x, BF16).astype(np.float32).tolist() == [1 + 2 ** -7, 1.0, 1 + 2 ** -6,
                                                         -(1 + 2 ** -7)]
    # 2^60 + 2^53 + 2^52 - 1 is below the bfloat16 midpoint; float64 rounds it onto it
    big = np.array([2 ** 60 + 2 ** 53 + 2 ** 52 - 1, -(2 ** 63), 2 ** 63 - 1], np.int64)
    want = [2.0 ** 60 + 2.0 ** 53, -(2.0 ** 63), 2.0 ** 63]
    assert cast(big, BF16).astype(np.float64).tolist() == want
    ubig = np.array([2 ** 64 - 1, 2 ** 60 + 2 ** 53 + 2 ** 52 - 1], np.uint64)
    assert cast(ubig, BF16).astype(np.float64).tolist() == [2.0 ** 64, 2.0 ** 60 + 2.0 ** 53]


def test_bfloat16_special_values() -> None:
    x = np.array([np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, -0.0, 2.0 ** -133, 2.0 ** -134])
    bits = cast(x, BF16).view(np.uint16).tolist()
    assert bits == [0x7F80, 0xFF80, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x0001, 0x0000]
    nan = np.array([np.nan, -np.nan], np.float32)
    assert cast(nan, BF16).view(np.uint16).tolist() == [0x7FC0, 0xFFC0]


# ---------------------------------------------------------------- sub-byte integers


def _spec_sub_byte(x: float, bits: int, signed: bool) -> int:
    """technical/int4.md: round to the nearest integer, ties to even, then keep the low bits."""
    if not math.isfinite(x):
        return 0
    r = round(Fraction(x))           # Python rounds a Fraction half to even, exactly
    low = r % (1 << bits)
    return low - (1 << bits) if signed and low >= 1 << (bits - 1) else low


@pytest.mark.parametrize("dt", [INT4, UINT4, INT2, UINT2], ids=lambda d: d.name)
def test_float_to_sub_byte_int_rounds_half_to_even_then_wraps(dt: np.dtype) -> None:
    bits, signed = formats.SUB_BYTE_INTS[dt]
    x = np.concatenate([np.arange(-40, 40) / 2, [-9.0, 9.5, 1e10, 2.0 ** 62, 2.0 ** 70 + 2 ** 18,
                                                -(2.0 ** 53) - 2, np.nan, np.inf, -np.inf]])
    got = formats.decode_int(cast(x, dt)).tolist()
    assert got == [_spec_sub_byte(float(v), bits, signed) for v in x]
    assert cast(np.array([-9.0], np.float32), INT4).view(np.uint8).tolist() == [0x7]


def test_integer_to_sub_byte_int_wraps() -> None:
    x = np.array([-9, 8, 15, 16, -1, 2 ** 40 + 3], np.int64)
    assert formats.decode_int(cast(x, INT4)).tolist() == [7, -8, -1, 0, -1, 3]
    assert formats.decode_int(cast(x, UINT2)).tolist() == [3, 0, 3, 0, 3, 3]


# ---------------------------------------------------------------- wider integers


def _x86(x: float, bits: int) -> int:
    """x86-64's truncating conversion to a signed integer: NaN / out of range -> minimum."""
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if not math.isfinite(x) or not lo <= math.trunc(x) <= hi:
        return lo
    return math.trunc(x)


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                np.int64, np.uint64])
def test_float_to_int_truncates_with_x86_answers_out_of_range(dt: type) -> None:
    x = np.array([0.5, -0.5, 2.9, -2.9, 127.9, 128.0, -129.5, 300.0, 65535.7, -40000.0,
                  2.0 ** 31, -(2.0 ** 31) - 0.5, -(2.0 ** 31) - 1, 3e9, 5e9, 2.0 ** 63,
                  -(2.0 ** 63), 1.5 * 2 ** 63, 2.0 ** 64, 1e300, np.nan, np.inf, -np.inf])
    nbits = np.dtype(dt).itemsize * 8
    want = []
    for v in x.tolist():
        if dt == np.uint64:
            w = _x86(v - 2.0 ** 63, 64) ^ (1 << 63) if v >= 2.0 ** 63 else _x86(v, 64)
        else:
            w = _x86(v, 64 if dt in (np.int64, np.uint32) else 32)
        w %= 1 << nbits
        if np.dtype(dt).kind == "i" and w >= 1 << (nbits - 1):
            w -= 1 << nbits
        want.append(w)
    assert cast(x, np.dtype(dt)).tolist() == want
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)
    assert cast(x32, np.dtype(dt)).tolist() == cast(x32.astype(np.float64), np.dtype(dt)).tolist()


def test_narrow_sources_widen_exactly() -> None:
    for dt in BYTE_FORMATS + [np.dtype(ml_dtypes.float8_e8m0fnu)]:
        codes = _codes(dt).view(dt)
        wide = cast(codes, np.dtype(np.float64))
        assert wide.tobytes() == formats.decode(codes).tobytes()
    # bfloat16 is the top half of a float32: widening keeps every bit, NaN payloads too
    b = np.arange(0, 65536, dtype=np.uint32).astype(np.uint16).view(BF16)
    wide = cast(b, np.dtype(np.float32)).view(np.uint32)
    np.testing.assert_array_equal(wide, b.view(np.uint16).astype(np.uint32) << 16)


# ---------------------------------------------------------------- random bit patterns


@settings(max_examples=300, deadline=None)
@given(bits=st.integers(0, 2 ** 64 - 1), saturate=st.booleans(),
       dt=st.sampled_from(BYTE_FORMATS))
def test_any_float64_rounds_as_the_exact_search_says(bits: int, saturate: bool,
                                                     dt: np.dtype) -> None:
    x = np.array([bits], np.uint64).view(np.float64)
    got = int(cast(x, dt, saturate=saturate).view(np.uint8)[0])
    assert got == _spec_round(dt, float(x[0]), saturate), (float(x[0]), hex(got))


def _near_bf16_ties() -> st.SearchStrategy[float]:
    """Values at and one float64 ulp beside a midpoint of two bfloat16 neighbours (9
    significant bits, the last one set), where a second rounding would go wrong."""
    return st.builds(lambda m, e, step, neg: (-1 if neg else 1) * float(
        np.nextafter(np.ldexp(float(m), e), np.inf if step > 0 else -np.inf)
        if step else np.ldexp(float(m), e)),
        st.integers(256, 511), st.integers(-142, 119), st.sampled_from([-1, 0, 1]),
        st.booleans())


@settings(max_examples=400, deadline=None)
@given(x=st.one_of(st.integers(0, 2 ** 64 - 1).map(
    lambda b: float(np.array([b], np.uint64).view(np.float64)[0])), _near_bf16_ties()))
def test_any_float64_rounds_to_bfloat16_once(x: float) -> None:
    got = cast(np.array([x]), BF16).view(np.uint16)[0]
    if math.isnan(x):
        assert (got & 0x7FFF) > 0x7F80
        return
    value = cast(np.array([x]), BF16).astype(np.float64)[0]
    want = _nearest_even_bf16(x) if math.isfinite(x) else None
    if want is None or abs(want) >= 2 ** 128:      # rounds past bfloat16's largest value
        assert value == math.copysign(math.inf, x)
    else:
        assert Fraction(value) == want and math.copysign(1, value) == math.copysign(1, x)


def _nearest_even_bf16(x: float) -> Fraction:
    """Finite x rounded to 8 significant bits, ties to even, by exact arithmetic, with
    bfloat16's smallest exponent and no largest one."""
    if x == 0:
        return Fraction(0)
    a = Fraction(abs(x))
    e = max(math.frexp(abs(x))[1] - 1, -126)       # bfloat16's exponent range
    ulp = Fraction(2) ** (e - 7)
    q, r = divmod(a, ulp)
    if r * 2 > ulp or (r * 2 == ulp and q % 2 == 1):
        q += 1
    v = q * ulp
    return v if x > 0 else -v
