"""dtype categories and the "compute in float64, round once" rule of cpu_reference.

Transcendental kernels of float16 / bfloat16 / float32 inputs evaluate in float64 and
round once to the output dtype (docs/PARITY.md), so another provider can reproduce the
reference bit for bit by doing the same. numpy rounds float64 straight to float32 and
float16; ml_dtypes goes through float32, which would round twice, so
:func:`round_from_float64` rounds to float32 *to odd* first (the classic fix: an odd
float32 carries the sticky bit, and float32 has more than 2p+2 bits for every narrower
format, so the second rounding is then correct).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

#: float formats numpy ufuncs do not know; computed in float64 and rounded back.
ML_FLOATS: frozenset[np.dtype] = frozenset(np.dtype(t) for t in (
    ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu,
    ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn))

#: sub-byte integers of ml_dtypes (int4, uint4, int2, uint2).
ML_INTS: frozenset[np.dtype] = frozenset(np.dtype(t) for t in (
    ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2))


def is_float(dt: np.dtype) -> bool:
    """True for every floating point format, numpy's or ml_dtypes'."""
    return dt.kind == "f" or dt in ML_FLOATS


def is_int(dt: np.dtype) -> bool:
    """True for signed and unsigned integers (bool excluded)."""
    return dt.kind in "iu" or dt in ML_INTS


def is_signed_int(dt: np.dtype) -> bool:
    return dt.kind == "i" or dt in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.int2))


def to_float64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def round_from_float64(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round float64 ``y`` once to the float dtype ``dtype`` (round to nearest even)."""
    dtype = np.dtype(dtype)
    y = np.asarray(y, dtype=np.float64)
    if dtype.kind == "f":
        return np.asarray(y.astype(dtype))
    return np.asarray(to_float32_odd(y).astype(dtype))


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


def erf(x: np.ndarray) -> np.ndarray:
    """Error function of a float64 array, within about 10 float64 ulps.

    numpy has no erf and scipy is not a dependency. For ``|x| < 2`` the series
    ``erf(x) = 2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) / (2n+1)!!`` has only positive
    terms (no cancellation); beyond, ``1 - erfc(x)`` with erfc's continued fraction,
    whose error is scaled down by erfc(2) ~ 5e-3.
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.empty_like(a)
    small = a < 2.0
    xs = a[small]
    x2 = xs * xs
    term = xs.copy()
    total = xs.copy()
    # at |x| = 2 the terms fall below 1e-17 of the sum after ~45 steps
    for n in range(1, 60):
        term = term * (2.0 * x2) / (2 * n + 1)
        total = total + term
    out[small] = 2.0 / np.sqrt(np.pi) * _exp_neg_square(xs) * total
    big = ~small & ~np.isnan(a)
    out[big] = 1.0 - _erfc_tail(a[big])
    out[np.isnan(a)] = np.nan
    return np.copysign(out, x)


def erfc(x: np.ndarray) -> np.ndarray:
    """``1 - erf(x)`` without cancellation in the tail (Gelu's negative side needs it)."""
    x = np.asarray(x, dtype=np.float64)
    tail = np.abs(x) >= 2.0
    out = 1.0 - erf(np.where(tail, 0.0, x))  # erfc(x) >= erfc(2) ~ 5e-3: digits to spare
    t = _erfc_tail(np.abs(x[tail]))
    out[tail] = np.where(x[tail] > 0, t, 2.0 - t)
    return out


def _erfc_tail(a: np.ndarray) -> np.ndarray:
    """erfc for ``a >= 2`` by backward evaluation of its continued fraction:
    ``erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + 2/(a + ...)))))``.
    """
    a = np.minimum(a, 30.0)  # erfc(30) ~ 1e-393 underflows to 0 already
    frac = a.copy()
    for k in range(80, 0, -1):  # 60 terms already converge to 1 ulp at a = 2
        frac = a + (k / 2.0) / frac
    return _exp_neg_square(a) / np.sqrt(np.pi) / frac

def _exp_neg_square(x: np.ndarray) -> np.ndarray:
    """``exp(-x*x)`` without the rounding error of ``x*x`` (amplified x^2-fold by exp)."""
    hi = np.round(x * 2.0**12) / 2.0**12  # <= 14 significant bits: hi*hi is exact
    lo = x - hi
    return np.exp(-hi * hi) * np.exp(-(2.0 * hi + lo) * lo)
