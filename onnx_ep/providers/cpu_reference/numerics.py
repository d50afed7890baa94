"""dtype categories and the "compute in float64, round once" rule of cpu_reference.

Transcendental kernels of float16 / bfloat16 / float32 inputs evaluate in float64 and
round once to the output dtype (docs/PARITY.md), so another provider can reproduce the
reference bit for bit by doing the same. numpy rounds float64 straight to float32 and
float16; every narrower format rounds through :mod:`.formats` (the ONNX rules, not the
installed ml_dtypes release's).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnx_ep.providers.cpu_reference.formats import (
    E8M0,
    FORMATS,
    SUB_BYTE_INTS,
    round_to,
    to_float32_odd,
)

__all__ = [
    "ML_FLOATS",
    "ML_INTS",
    "erf",
    "erfc",
    "is_float",
    "is_int",
    "is_signed_int",
    "round_from_float64",
    "sigmoid",
    "to_float32_odd",
]

#: float formats numpy ufuncs do not know; computed in float64 and rounded back.
ML_FLOATS: frozenset[np.dtype] = frozenset(FORMATS) | {E8M0}

#: sub-byte integers of ml_dtypes (int4, uint4, int2, uint2).
ML_INTS: frozenset[np.dtype] = frozenset(SUB_BYTE_INTS)


def is_float(dt: np.dtype) -> bool:
    """True for every floating point format, numpy's or ml_dtypes'."""
    dt = np.dtype(dt)
    return dt.kind == "f" or dt in ML_FLOATS


def is_int(dt: np.dtype) -> bool:
    """True for signed and unsigned integers (bool excluded)."""
    return dt.kind in "iu" or dt in ML_INTS


def is_signed_int(dt: np.dtype) -> bool:
    dt = np.dtype(dt)
    return dt.kind == "i" or SUB_BYTE_INTS.get(dt, (0, False))[1]


def round_from_float64(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round float64 ``y`` once to the float dtype ``dtype`` (round to nearest even;
    float8e8m0 by Cast's default rule, saturating and rounding up). The result never
    shares memory with ``y``."""
    y = np.asarray(y, dtype=np.float64)
    dtype = np.dtype(dtype)
    return round_to(y, dtype) if dtype in ML_FLOATS else np.asarray(y.astype(dtype))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function ``1 / (1 + exp(-x))`` of a float array: ``1 / (1 + e)`` for
    ``x >= 0`` and ``e / (1 + e)`` otherwise, with ``e = exp(-|x|)``."""
    # exp of a non-positive argument only: no overflow for large |x|; the same IEEE
    # operations as the two-branch formula, with one temporary per step instead of two
    e = np.abs(x)
    if not isinstance(e, np.ndarray):               # a scalar (0-d input)
        e = np.exp(-e)
        return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    np.negative(e, out=e)
    np.exp(e, out=e)
    d = e + 1.0
    return np.divide(np.where(x >= 0, 1.0, e), d, out=d)


# ---------------------------------------------------------------- erf / erfc
# fdlibm's s_erf.c (Sun Microsystems, 1993: "Permission to use, copy, modify, and
# distribute this software is freely granted, provided that this notice is preserved").
# Coefficients are given by their float64 bit patterns, the exact contract.

def _f64(*bits: int) -> tuple[float, ...]:
    return tuple(float(v) for v in np.array(bits, dtype=np.uint64).view(np.float64))


_ERX, _EFX, _EFX8 = _f64(0x3FEB0AC160000000, 0x3FC06EBA8214DB69, 0x3FF06EBA8214DB69)
#: |x| < 0.84375: erf(x) = x + x * PP(z)/QQ(z), z = x*x
_PP = _f64(0x3FC06EBA8214DB68, 0xBFD4CD7D691CB913, 0xBF9D2A51DBD7194F,
           0xBF77A291236668E4, 0xBEF8EAD6120016AC)
_QQ = (1.0,) + _f64(0x3FD97779CDDADC09, 0x3FB0A54C5536CEBA, 0x3F74D022C4D36B0F,
                    0x3F215DC9221C1A10, 0xBED09C4342A26120)
#: 0.84375 <= |x| < 1.25: erf(|x|) = erx + PA(s)/QA(s), s = |x| - 1
_PA = _f64(0xBF6359B8BEF77538, 0x3FDA8D00AD92B34D, 0xBFD7D240FBB8C3F1, 0x3FD45FCA805120E4,
           0xBFBC63983D3E28EC, 0x3FA22A36599795EB, 0xBF61BF380A96073F)
_QA = (1.0,) + _f64(0x3FBB3E6618EEE323, 0x3FE14AF092EB6F33, 0x3FB2635CD99FE9A7,
                    0x3FC02660E763351F, 0x3F8BEDC26B51DD1C, 0x3F888B545735151D)
#: 1.25 <= |x| < ~1/0.35: erfc(|x|) = exp(-z*z - 0.5625) * exp((z-|x|)(z+|x|) + RA/SA) / |x|
_RA = _f64(0xBF843412600D6435, 0xBFE63416E4BA7360, 0xC0251E0441B0E726, 0xC04F300AE4CBA38D,
           0xC0644CB184282266, 0xC067135CEBCCABB2, 0xC054526557E4D2F2, 0xC023A0EFC69AC25C)
_SA = (1.0,) + _f64(0x4033A6B9BD707687, 0x4061350C526AE721, 0x407B290DD58A1A71,
                    0x40842B1921EC2868, 0x407AD02157700314, 0x405B28A3EE48AE2C,
                    0x401A47EF8E484A93, 0xBFAEEFF2EE749A62)
#: ~1/0.35 <= |x| < 28 (erf: < 6): the same with RB/SB
_RB = _f64(0xBF84341239E86F4A, 0xBFE993BA70C285DE, 0xC031C209555F995A, 0xC064145D43C5ED98,
           0xC083EC881375F228, 0xC09004616A2E5992, 0xC07E384E9BDC383F)
_SB = (1.0,) + _f64(0x403E568B261D5190, 0x40745CAE221B9F0A, 0x409802EB189D5118,
                    0x40A8FFB7688C246A, 0x40A3F219CEDF3BE6, 0x407DA874E79FE763,
                    0xC03670E242712D62)
#: range bounds: fdlibm compares the high word, i.e. |x| against these exact values
_TINY = 2.0 ** -28
_SUBNORMAL = 2.0 ** -1022
_ERF_RB, _ERFC_RB = _f64(0x4006DB6E00000000, 0x4006DB6D00000000)  # ~2.857143, 1/0.35


def _horner(t: np.ndarray, c: tuple[float, ...]) -> np.ndarray:
    """``c[0] + t*(c[1] + t*(... + t*c[-1]))``: innermost product first, in place."""
    acc = t * c[-1]
    acc += c[-2]
    for k in c[-3::-1]:
        acc *= t
        acc += k
    return acc


def _small_y(x: np.ndarray) -> np.ndarray:
    """``PP(z)/QQ(z)`` with ``z = x*x`` (|x| < 0.84375)."""
    z = x * x
    y = _horner(z, _PP)
    y /= _horner(z, _QQ)
    return y


def _mid_ratio(a: np.ndarray) -> np.ndarray:
    """``PA(s)/QA(s)`` with ``s = a - 1`` (0.84375 <= a < 1.25)."""
    s = a - 1.0
    p = _horner(s, _PA)
    p /= _horner(s, _QA)
    return p


def _tail_r(a: np.ndarray, bound: float) -> np.ndarray:
    """``a * erfc(a)`` for 1.25 <= a < 28: RA/SA below ``bound``, RB/SB from it on."""
    s = 1.0 / (a * a)
    low = a < bound
    ratio = np.empty_like(a)
    for mask, r, q in ((low, _RA, _SA), (~low, _RB, _SB)):
        _fill(ratio, s, mask, lambda v, r=r, q=q: _horner(v, r) / _horner(v, q))
    # z: a with the low 32 bits cleared, so z*z is exact (21 x 21 significant bits)
    z = (a.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
    e1 = z * z
    np.negative(e1, out=e1)
    e1 -= 0.5625
    np.exp(e1, out=e1)
    e2 = z - a
    e2 *= z + a
    e2 += ratio
    np.exp(e2, out=e2)
    e1 *= e2
    return e1


def _fill(out: np.ndarray, v: np.ndarray, mask: np.ndarray,
          fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """``out[mask] = fn(v[mask])``, skipping the gather/scatter when the mask is all/none."""
    n = int(np.count_nonzero(mask))
    if n == v.size:
        out[...] = fn(v)
    elif n:
        out[mask] = fn(v[mask])


#: elements per block: a block's float64 temporaries stay in cache and come from
#: malloc's pool, where whole-tensor temporaries would be fresh pages (page faults)
_BLOCK = 32768


def _blockwise(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """Elementwise ``fn`` over the flattened float64 ``x``, :data:`_BLOCK` elements at a time."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    if flat.size <= _BLOCK:
        return fn(flat).reshape(x.shape)
    out = np.empty_like(flat)
    for start in range(0, flat.size, _BLOCK):
        out[start:start + _BLOCK] = fn(flat[start:start + _BLOCK])
    return out.reshape(x.shape)


def erf(x: np.ndarray) -> np.ndarray:
    """Error function of a float64 array: fdlibm's ``erf`` (s_erf.c), range by range.

    With ``a = |x|``, every step one float64 operation in the order written (no FMA,
    no reassociation), ``P(t)`` by Horner's rule innermost first
    (``c0 + t*(c1 + t*(... + t*cn))``), and x's sign copied onto the result:

    - ``a < 2**-1022``: ``0.125 * (8*a + efx8*a)``; ``a < 2**-28``: ``a + efx*a``;
    - ``a < 0.84375``: ``z = a*a``, ``y = PP(z) / QQ(z)``, ``a + a*y``;
    - ``a < 1.25``: ``s = a - 1``, ``erx + PA(s) / QA(s)``;
    - ``a < 6``: ``s = 1 / (a*a)``; ``R/S = RA(s) / SA(s)`` for ``a <`` the float64
      ``0x4006DB6E00000000`` (~2.857143), else ``RB(s) / SB(s)``; ``z`` = ``a`` with
      the low 32 bits of its encoding zeroed (``z*z`` is exact);
      ``r = exp(-(z*z) - 0.5625) * exp((z - a)*(z + a) + R/S)``; ``1 - r/a``;
    - ``a >= 6`` (and inf): 1; NaN: NaN.

    ``exp`` is numpy's (the platform libm). The coefficients (erx, efx, efx8, PP, QQ, PA,
    QA, RA, SA, RB, SB) are this module's ``_ERX``... as float64 bit patterns. Against
    mpmath the result is within 0.87 float64 ulp (1 ulp from glibc's ``math.erf``).

    Evaluation: the block is split by range; the |x| < 0.84375 formula (the cheapest and
    usually most of the elements) runs over the whole block, the other ranges over
    gathered sub-arrays that then overwrite their elements. Results do not depend on it.
    """
    return _blockwise(_erf_block, x)


def _erf_block(v: np.ndarray) -> np.ndarray:
    a = np.abs(v)
    with np.errstate(all="ignore"):  # the small-range formula also meets |x| >= 0.84375
        out = _small_y(a)
        out *= a
        out += a  # NaN stays NaN
    _fix_tiny(out, a)
    rest = np.flatnonzero(a >= 0.84375)
    if rest.size:
        ra = a[rest]
        res = np.ones_like(ra)  # a >= 6 (and inf)
        _fill(res, ra, ra < 1.25, lambda t: _ERX + _mid_ratio(t))
        _fill(res, ra, (ra >= 1.25) & (ra < 6.0), lambda t: 1.0 - _tail_r(t, _ERF_RB) / t)
        out[rest] = res
    return np.copysign(out, v, out=out)


def _fix_tiny(out: np.ndarray, a: np.ndarray) -> None:
    """``a < 2**-28``: ``a + efx*a`` (and the underflow-free form for subnormal a)."""
    tiny = a < _TINY
    if tiny.any():
        t = a[tiny]
        out[tiny] = np.where(t < _SUBNORMAL, 0.125 * (8.0 * t + _EFX8 * t), t + _EFX * t)


def erfc(x: np.ndarray) -> np.ndarray:
    """``1 - erf(x)`` without cancellation: fdlibm's ``erfc``, range by range.

    With ``a = |x|`` and the polynomials and ``r`` of :func:`erf`:

    - ``a < 0.84375``: ``y = PP(x*x) / QQ(x*x)``; ``x < 0.25``: ``1 - (x + x*y)``;
      else ``0.5 - (x*y + (x - 0.5))``;
    - ``a < 1.25``: ``s = a - 1``; ``x >= 0``: ``(1 - erx) - PA(s)/QA(s)``;
      ``x < 0``: ``1 + (erx + PA(s)/QA(s))``;
    - ``a < 28`` and ``x > -6``: ``r`` with RA/SA below the float64
      ``0x4006DB6D00000000`` (~1/0.35; erf's bound is one step above), RB/SB from it
      on; ``x > 0``: ``r/a``; ``x < 0``: ``2 - r/a``;
    - ``x <= -6``: 2; ``x >= 28`` (and inf): 0; NaN: NaN.

    Against mpmath the result is within 2.4 float64 ulp (``0.5 - ...`` near x = 0.84
    cancels; glibc's ``math.erfc`` is within 2.9 there). Blocks are evaluated as in
    :func:`erf`.
    """
    return _blockwise(_erfc_block, x)


def _erfc_block(v: np.ndarray) -> np.ndarray:
    a = np.abs(v)
    with np.errstate(all="ignore"):  # the small-range formula also meets |x| >= 0.84375
        y = _small_y(v)
        low = v < 0.25
        out = np.where(low, 1.0 - (v + v * y), 0.5 - (v * y + (v - 0.5)))  # NaN stays NaN
    rest = np.flatnonzero(a >= 0.84375)
    if rest.size:
        rv = v[rest]
        ra = a[rest]
        res = np.where(rv > 0, 0.0, 2.0)  # x >= 28 and x <= -6 (and inf)
        _fill(res, rv, ra < 1.25, _erfc_mid)
        _fill(res, rv, (ra >= 1.25) & (rv > -6.0) & (rv < 28.0), _erfc_tail)
        out[rest] = res
    return out


def _erfc_mid(x: np.ndarray) -> np.ndarray:
    ratio = _mid_ratio(np.abs(x))
    return np.where(x >= 0, (1.0 - _ERX) - ratio, 1.0 + (_ERX + ratio))


def _erfc_tail(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    q = _tail_r(a, _ERFC_RB)
    q /= a
    return np.where(x > 0, q, 2.0 - q)
