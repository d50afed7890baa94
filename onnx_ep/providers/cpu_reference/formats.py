"""ONNX's narrow number formats, encoded and decoded by the specification's rules.

ml_dtypes gives the reference its storage dtypes (bfloat16 in two bytes; the float8s,
float4e2m1, the float6s and int4/uint4/int2/uint2 one element per byte, sub-byte values in
the low bits). Every value conversion into those formats goes through this module, so the
reference's answer is the ONNX specification's and does not change with the installed
ml_dtypes release (its conversions did change between releases: float -> int4 wrapped in
0.5 and gives 0 in 0.7; float64 -> float8e5m2 rounded twice in 0.5). docs/PARITY.md
("Narrow formats") states each rule and the section of the specification it follows.

- Floats are rounded once, to nearest even, from the exact float64 value (:func:`encode`):
  the float8s as the Cast operator's tables say (``saturate`` clamps to +-max first;
  without it e5m2 overflows to +-inf, e4m3fn to NaN, the fnuz formats to their one NaN);
  float4e2m1 (and the float6s) always saturate and map NaN to +max (technical/float4.md);
  bfloat16 is IEEE (overflow to +-inf, NaN keeps its sign and top payload bits, as x86's
  float64 -> float32 conversion does, then is quieted).
- Integers go into a sub-byte type by rounding to the nearest integer, ties to even, then
  keeping the low bits (technical/int4.md, int2.md); into a wider integer type by the
  rule of :func:`float_to_int`.
- Decoding is exact (:func:`decode`): a table of every code's value, NaN codes decode to
  a quiet NaN with the code's sign.
"""

from __future__ import annotations

import enum

import attrs
import ml_dtypes
import numpy as np


class Kind(enum.Enum):
    """How a format spends its top codes."""

    IEEE = "ieee"      #: all-ones exponent: infinities and NaNs (e5m2, bfloat16)
    FN = "fn"          #: no infinities; all-ones magnitude is NaN (e4m3fn)
    FNUZ = "fnuz"      #: no infinities, no -0; the code 1000...0 is the one NaN
    FINITE = "finite"  #: neither infinities nor NaN (float4e2m1, float6)


@attrs.frozen
class Format:
    """A binary float format: sign, ``ebits`` exponent bits, ``mbits`` fraction bits."""

    ebits: int
    mbits: int
    bias: int
    kind: Kind

    @property
    def sign_bit(self) -> int:
        return 1 << (self.ebits + self.mbits)

    @property
    def max_code(self) -> int:
        """The code of the largest finite magnitude."""
        all_ones = self.sign_bit - 1
        if self.kind is Kind.IEEE:
            return all_ones - (1 << self.mbits)     # exponent all ones minus one
        if self.kind is Kind.FN:
            return all_ones - 1
        return all_ones

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number (subnormals share it)."""
        return 1 - self.bias

    def value_of(self, code: int) -> float:
        """The exact value of one code (NaN codes give a NaN with the code's sign)."""
        neg = bool(code & self.sign_bit)
        mag = code & (self.sign_bit - 1)
        e, m = mag >> self.mbits, mag & ((1 << self.mbits) - 1)
        top = (1 << self.ebits) - 1
        if (self.kind is Kind.IEEE and e == top and m) or \
                (self.kind is Kind.FN and mag == self.sign_bit - 1) or \
                (self.kind is Kind.FNUZ and code == self.sign_bit):
            return -np.nan if neg else np.nan
        if self.kind is Kind.IEEE and e == top:
            v = np.inf
        elif e == 0:
            v = np.ldexp(float(m), self.emin - self.mbits)
        else:
            v = np.ldexp(float(m | (1 << self.mbits)), e - self.bias - self.mbits)
        return -v if neg else v


BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)

#: the formats :func:`encode` and :func:`decode` know, by storage dtype
FORMATS: dict[np.dtype, Format] = {
    BFLOAT16: Format(8, 7, 127, Kind.IEEE),
    np.dtype(ml_dtypes.float8_e4m3fn): Format(4, 3, 7, Kind.FN),
    np.dtype(ml_dtypes.float8_e4m3fnuz): Format(4, 3, 8, Kind.FNUZ),
    np.dtype(ml_dtypes.float8_e5m2): Format(5, 2, 15, Kind.IEEE),
    np.dtype(ml_dtypes.float8_e5m2fnuz): Format(5, 2, 16, Kind.FNUZ),
    np.dtype(ml_dtypes.float4_e2m1fn): Format(2, 1, 1, Kind.FINITE),
    np.dtype(ml_dtypes.float6_e2m3fn): Format(2, 3, 1, Kind.FINITE),
    np.dtype(ml_dtypes.float6_e3m2fn): Format(3, 2, 3, Kind.FINITE),
}

#: the float8 formats Cast's and QuantizeLinear's ``saturate`` applies to
SATURATING_FLOAT8: frozenset[np.dtype] = frozenset(np.dtype(t) for t in (
    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))

#: sub-byte integers: dtype -> (bits, signed)
SUB_BYTE_INTS: dict[np.dtype, tuple[int, bool]] = {
    np.dtype(ml_dtypes.int4): (4, True), np.dtype(ml_dtypes.uint4): (4, False),
    np.dtype(ml_dtypes.int2): (2, True), np.dtype(ml_dtypes.uint2): (2, False),
}


def _table(fmt: Format) -> np.ndarray:
    return np.array([fmt.value_of(c) for c in range(2 * fmt.sign_bit)], np.float64)


#: float64 value of every code of every byte format (bfloat16 decodes through float32)
_TABLES: dict[np.dtype, np.ndarray] = {
    dt: _table(f) for dt, f in FORMATS.items() if dt != BFLOAT16}
_TABLES[E8M0] = np.array([np.ldexp(1.0, c - 127) for c in range(255)] + [np.nan])


def max_value(dtype: np.dtype) -> float:
    """The largest finite value of a narrow float format."""
    fmt = FORMATS[np.dtype(dtype)]
    return fmt.value_of(fmt.max_code)


# ---------------------------------------------------------------- decode


def decode(x: np.ndarray, to: np.dtype | type = np.float64) -> np.ndarray:
    """The exact value of every element of a narrow float or sub-byte int array, as
    float64 (or float32, which also holds every narrow value exactly; bfloat16 then keeps
    its bits, signalling NaNs included, as the top half of the float32)."""
    x = np.asarray(x)
    dt = x.dtype
    if dt == BFLOAT16:
        wide = (x.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
        return wide if np.dtype(to) == np.float32 else wide.astype(to)
    if dt in _TABLES:
        table = _TABLES[dt]
        return table[x.view(np.uint8) & np.uint8(table.size - 1)].astype(to, copy=False)
    if dt in SUB_BYTE_INTS:
        return decode_int(x).astype(to)
    raise TypeError(f"{dt} is not a narrow format of this module")


def decode_int(x: np.ndarray) -> np.ndarray:
    """The int64 value of every element of a sub-byte integer array (low bits of each byte)."""
    x = np.asarray(x)
    bits, signed = SUB_BYTE_INTS[x.dtype]
    v = (x.view(np.uint8) & np.uint8((1 << bits) - 1)).astype(np.int64)
    if signed:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v


# ---------------------------------------------------------------- encode


def encode(x: np.ndarray, dtype: np.dtype, *, saturate: bool = False) -> np.ndarray:
    """``x`` rounded once, to nearest even, from its exact value into the float format
    ``dtype``; ``saturate`` first clamps |x| > max (infinities included) to max.

    ``x`` is any numeric array, taken at its :func:`source_value`.
    """
    dtype = np.dtype(dtype)
    fmt = FORMATS[dtype]
    x = np.asarray(x)
    if dtype == BFLOAT16 and x.dtype == np.float32 and not saturate:
        return _encode_bfloat16(x)
    y = source_value(x)
    if saturate:
        limit = max_value(dtype)
        y = np.clip(y, -limit, limit)  # NaN passes through np.clip
    if dtype == BFLOAT16:
        return _encode_bfloat16(to_float32_odd(y))
    return _encode_bytes(y, fmt).view(dtype)


def to_float32_odd(y: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded *to odd*: truncate, then set the last bit if inexact.

    Rounding that float32 to any format with at most 22 significant bits gives the
    correctly rounded result of ``y`` (the sticky bit survives in the odd bit).
    """
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = y.astype(np.float32)
        away = np.abs(f.astype(np.float64)) > np.abs(y)
        f = np.where(away, np.nextafter(f, np.float32(0)), f)
        inexact = (f.astype(np.float64) != y) & np.isfinite(y)
        bits = f.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)


def _encode_bfloat16(f: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 to nearest even (from a float32 rounded to odd, the float64's
    correct rounding); a NaN keeps its sign and top payload bits and is quieted."""
    b = np.ascontiguousarray(f).view(np.uint32)
    with np.errstate(over="ignore"):
        code = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(f)
    if nan.any():
        code = np.where(nan, (b >> np.uint32(16)) | np.uint32(0x40), code)
    return np.asarray(code.astype(np.uint16).reshape(np.shape(f)).view(BFLOAT16))


def _encode_bytes(y: np.ndarray, fmt: Format) -> np.ndarray:
    sign = np.where(np.signbit(y), fmt.sign_bit, 0).astype(np.int64)
    a = np.abs(y)
    finite = np.isfinite(a)
    af = np.where(finite, a, 0.0)
    _, ex = np.frexp(af)                          # af = m * 2^ex, m in [0.5, 1)
    e = np.maximum(ex.astype(np.int64) - 1, fmt.emin)
    # scaling by a power of two is exact; np.rint rounds half to even
    q = np.rint(np.ldexp(af, (fmt.mbits - e).astype(np.int32))).astype(np.int64)
    carry = q == 2 << fmt.mbits                   # rounded up to the next binade
    q = np.where(carry, 1 << fmt.mbits, q)
    e = e + carry
    normal = q >= 1 << fmt.mbits
    mag = np.where(normal, ((e + fmt.bias) << fmt.mbits) | (q - (1 << fmt.mbits)), q)
    over = ~finite | (mag > fmt.max_code)
    nan = np.isnan(a)
    top = fmt.sign_bit - 1
    if fmt.kind is Kind.IEEE:
        inf = top - ((1 << fmt.mbits) - 1)
        mag = np.where(over, inf, mag)
        code = sign | mag
        code = np.where(nan, sign | inf | (1 << (fmt.mbits - 1)), code)
    elif fmt.kind is Kind.FN:
        code = sign | np.where(over, top, mag)   # overflow and NaN: the NaN code
    elif fmt.kind is Kind.FNUZ:
        code = np.where(mag == 0, 0, sign | mag)  # no -0
        code = np.where(over, fmt.sign_bit, code)
    else:
        code = sign | np.where(over, fmt.max_code, mag)
        code = np.where(nan, fmt.max_code, code)  # technical/float4.md: NaN -> +max
    return np.asarray(code.astype(np.uint8))


def encode_int(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Integers (any numpy int dtype) into a sub-byte int type: keep the low bits."""
    bits, _ = SUB_BYTE_INTS[np.dtype(dtype)]
    low = np.asarray(v).astype(np.int64, copy=False) & ((1 << bits) - 1)
    return np.asarray(low.astype(np.uint8).view(np.dtype(dtype)))


def float_to_sub_byte_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Floats into a sub-byte int type: round half to even, keep the low bits
    (technical/int4.md). NaN and infinities, undefined there, give 0."""
    r = np.rint(source_value(x))
    # beyond 2^62 every float64 is a multiple of 2^10: its low bits are 0
    safe = np.isfinite(r) & (np.abs(r) < 2.0 ** 62)
    return encode_int(np.where(safe, r, 0.0).astype(np.int64), dtype)


def to_e8m0(x: np.ndarray, *, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """Round ``x`` (its :func:`source_value`) to a power of two 2^k, k in [-127, 127]
    (float8e8m0; Cast's defaults are ``saturate`` and ``up``).

    ``up`` rounds away from zero, ``down`` toward zero, ``nearest`` to the nearer
    power (ties up). The sign is ignored (negative inputs are unspecified by ONNX).
    Out of range: the closest end when saturating, else NaN; zero counts as below
    range; +-inf saturates to the largest value.
    """
    a = np.abs(source_value(x))
    mant, exp = np.frexp(a)            # a = mant * 2^exp, mant in [0.5, 1)
    k = exp.astype(np.int64) - 1        # 2^k <= a < 2^(k+1)
    if round_mode == "up":
        k = k + (mant != 0.5)
    elif round_mode == "nearest":
        k = k + (mant >= 0.75)         # a >= 1.5 * 2^k, the midpoint, rounds up
    biased = k + 127
    over = (biased > 254) | np.isinf(a)
    under = (biased < 0) | (a == 0)
    if saturate:
        code = np.where(under, 0, np.where(over, 254, np.clip(biased, 0, 254)))
    else:
        code = np.where(over | under, 255, np.clip(biased, 0, 254))
    code = np.where(np.isnan(a), 255, code)
    return np.asarray(code.astype(np.uint8).view(E8M0))


def round_to(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``y`` rounded once into any dtype, as an ndarray (never a numpy scalar): narrow
    floats by :func:`encode`, float8e8m0 by Cast's default rule (:func:`to_e8m0`),
    sub-byte ints as Cast converts into them, numpy's own dtypes by numpy."""
    dtype = np.dtype(dtype)
    y = np.asarray(y)
    if dtype in FORMATS:
        return encode(y, dtype)
    if dtype == E8M0:
        return to_e8m0(y)
    if dtype in SUB_BYTE_INTS:
        if y.dtype.kind == "f" or y.dtype in FORMATS or y.dtype == E8M0:
            return float_to_sub_byte_int(y, dtype)
        return encode_int(decode_int(y) if y.dtype in SUB_BYTE_INTS else y, dtype)
    return np.asarray(y.astype(dtype, copy=False))


# ---------------------------------------------------------------- wider integers


def float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Floats into int8..int64 / uint8..uint64: truncate toward zero.

    Out-of-range values, NaN and infinities are undefined by ONNX; the reference gives
    what x86-64's truncating conversions give (onnxruntime's on x86 too), whatever the
    platform: int64 -> INT64_MIN; int32 -> INT32_MIN; int16 / int8 / uint16 / uint8 take
    the low bits of the int32 conversion; uint32 the low 32 bits of the int64
    conversion; uint64 converts ``x - 2^63`` when ``x >= 2^63`` and flips the top bit.
    """
    dtype = np.dtype(dtype)
    y = source_value(x)
    if dtype == np.uint64:
        high = y >= 2.0 ** 63
        v = _truncate(np.where(high, y - 2.0 ** 63, y), 64).astype(np.uint64)
        return np.asarray(np.where(high, v ^ np.uint64(1 << 63), v))
    wide = _truncate(y, 64 if dtype in (np.dtype(np.int64), np.dtype(np.uint32)) else 32)
    return np.asarray(wide.astype(dtype))  # integer narrowing keeps the low bits


def _truncate(y: np.ndarray, bits: int) -> np.ndarray:
    """x86's truncating conversion to a signed ``bits``-bit integer (as int64): NaN and
    out-of-range values give the minimum ("integer indefinite")."""
    with np.errstate(invalid="ignore"):
        t = np.trunc(y)
        ok = (t >= -(2.0 ** (bits - 1))) & (t < 2.0 ** (bits - 1))  # NaN compares false
    return np.where(ok, np.where(ok, t, 0.0).astype(np.int64), np.int64(-(2 ** (bits - 1))))


# ---------------------------------------------------------------- sources


def source_value(x: np.ndarray) -> np.ndarray:
    """The float64 value a conversion rounds from: exact for every float format and
    sub-byte int; integers beyond 2^53 are rounded *to odd*, so that rounding the result
    to any format of at most 51 significant bits rounds the integer itself, once
    (:func:`int_to_float64_odd`)."""
    x = np.asarray(x)
    dt = x.dtype
    if dt in FORMATS or dt == E8M0 or dt in SUB_BYTE_INTS:
        return decode(x)
    if dt.kind in "iu":
        return int_to_float64_odd(x)
    return x.astype(np.float64)  # a copy, always: callers may work on it in place


def int_to_float64_odd(x: np.ndarray) -> np.ndarray:
    """int64 / uint64 -> float64 rounded to odd: truncate toward zero to 53 significant
    bits, then set the last kept bit when any dropped bit was set."""
    x = np.asarray(x)
    if x.dtype.itemsize < 8 or x.size == 0:
        return x.astype(np.float64)
    neg = x < 0 if x.dtype.kind == "i" else np.zeros(x.shape, bool)
    u = x.astype(np.uint64)                           # two's complement bits
    mag = np.where(neg, ~u + np.uint64(1), u)         # |x|, INT64_MIN included
    big = mag >= np.uint64(1 << 53)
    if not big.any():
        return x.astype(np.float64)
    nbits = np.zeros(x.shape, np.int64)
    rest = mag.copy()
    for step in (32, 16, 8, 4, 2, 1):                 # bit length, by halving
        hi = rest >= np.uint64(1 << step)
        nbits += np.where(hi, step, 0)
        rest = np.where(hi, rest >> np.uint64(step), rest)
    nbits += (rest > 0).astype(np.int64)
    drop = np.maximum(nbits - 53, 0).astype(np.uint64)
    kept = mag >> drop
    sticky = (mag & ((np.uint64(1) << drop) - np.uint64(1))) != 0
    odd = (kept | sticky.astype(np.uint64)).astype(np.float64)  # exact: <= 53 bits
    value = np.ldexp(odd, drop.astype(np.int32))
    return np.where(neg, -value, value)
