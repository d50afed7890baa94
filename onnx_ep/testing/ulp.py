"""Comparing one provider's array with the reference's: ULP distance, abs/rel error, verdicts.

The rules are docs/PARITY.md's "How a harness compares": dtype and shape must match;
non-float values compare byte for byte; NaN must be NaN where the reference is NaN and
infinities must be equal; then ``exact`` compares bytes, ``ulp`` the largest ULP
distance and ``tolerance`` ``abs(x - ref) <= atol + rtol * abs(ref)``.

ULP distance: floats of one sign are ordered like their bit patterns, so mapping a
sign-magnitude pattern to the integer ``+magnitude`` or ``-magnitude`` puts every
float of a type on one integer line where neighbours are 1 apart and ``+0`` and ``-0``
coincide. The distance is the difference of the two integers, so it also counts the
floats between values of opposite signs (``-denorm_min`` to ``+denorm_min`` is 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.kernel import Parity, ParityKind

#: what a ULP distance is when there is none (NaN against a number, unequal infinities)
INFINITE_ULP = math.inf


def float_format(dtype: Any) -> tuple[int, bool] | None:
    """``(bits, signed)`` of a binary floating-point dtype, ``None`` for anything else.

    Covers float16/32/64 and ml_dtypes' bfloat16, float8 and float4 types (a float4
    occupies the low 4 bits of a byte). ``signed`` is False for float8_e8m0fnu.
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (dt.itemsize * 8, True) if dt.itemsize <= 8 else None   # not longdouble
    if dt.kind != "V" or dt.fields is not None:
        return None
    import ml_dtypes

    try:
        info = ml_dtypes.finfo(dt)
    except (ValueError, TypeError):
        return None
    return int(info.bits), float(info.min) < 0


def _components(a: np.ndarray) -> np.ndarray:
    """Complex arrays as their real and imaginary floats; anything else unchanged."""
    if a.dtype.kind == "c":
        part = np.float32 if a.dtype.itemsize == 8 else np.float64
        return np.ascontiguousarray(a).view(part)
    return a


def _ordered(a: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    """Bit patterns mapped onto the monotonic integer line (int64)."""
    u = np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))
    if bits == 64:
        mag = (u & np.uint64(0x7FFF_FFFF_FFFF_FFFF)).astype(np.int64)
        return np.where((u >> np.uint64(63)).astype(bool), -mag, mag)
    u = u.astype(np.int64) & ((1 << bits) - 1)
    if not signed:
        return u
    mag = u & ((1 << (bits - 1)) - 1)
    return np.where(u >> (bits - 1) != 0, -mag, mag)


def _special(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NaN mask and the sign of infinities (+1, -1, 0) of a float array."""
    wide = a if a.dtype.kind == "f" else a.astype(np.float32)
    isinf = np.isinf(wide)
    return np.isnan(wide), np.where(isinf, np.sign(wide), 0).astype(np.int8)


def _raw_distance(x: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact distances (uint64) and the mask of elements that have none."""
    bits, signed = float_format(x.dtype)  # type: ignore[misc]
    kx, kr = _ordered(x, bits, signed), _ordered(ref, bits, signed)
    ux, ur = kx.view(np.uint64), kr.view(np.uint64)
    # modular uint64 subtraction is exact because the true difference is in [0, 2**64)
    dist = np.where(kx >= kr, ux - ur, ur - ux)
    nan_x, inf_x = _special(x)
    nan_r, inf_r = _special(ref)
    both_nan = nan_x & nan_r
    incomparable = (nan_x != nan_r) | (inf_x != inf_r)
    dist = np.where(both_nan | incomparable, np.uint64(0), dist)
    return dist, incomparable


def ulp_distance(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Elementwise ULP distance of two float arrays of one dtype and shape, as float64.

    NaN against NaN is 0 (any payload); NaN against a number, and infinities that
    are not equal (sign included), have no distance: ``inf``. Exact up to 2**53;
    :func:`max_ulp` is exact everywhere.

    :raises TypeError: for non-float dtypes or unequal dtypes/shapes.
    """
    x, ref = _check_pair(x, ref)
    dist, bad = _raw_distance(x, ref)
    return np.where(bad, np.inf, dist.astype(np.float64))


def max_ulp(x: np.ndarray, ref: np.ndarray) -> int | float:
    """Largest ULP distance as a Python int (0 for empty arrays), or ``math.inf``."""
    x, ref = _check_pair(x, ref)
    dist, bad = _raw_distance(x, ref)
    if bad.any():
        return INFINITE_ULP
    return int(dist.max()) if dist.size else 0


def _check_pair(x: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, ref = np.asarray(x), np.asarray(ref)
    if x.dtype != ref.dtype or x.shape != ref.shape:
        raise TypeError(f"ULP distance needs one dtype and shape, got {x.dtype}{list(x.shape)} "
                        f"and {ref.dtype}{list(ref.shape)}")
    x, ref = _components(x), _components(ref)
    if float_format(x.dtype) is None:
        raise TypeError(f"ULP distance is defined for binary floats, not {x.dtype}")
    return x, ref


# ---------------------------------------------------------------- one value against the reference


@attrs.frozen
class Diff:
    """How one value differs from the reference's, and whether a promise holds.

    :ivar bytes_equal: same dtype, shape and bytes (strings: same values).
    :ivar differing: elements whose bit patterns differ (``None`` when incomparable).
    :ivar max_ulp: largest ULP distance (floats only; ``math.inf`` when some element has
        none), else ``None``.
    :ivar max_abs, max_rel: largest ``abs(x - ref)`` and ``abs(x - ref) / abs(ref)`` in
        float64 (numbers only; equal NaNs and infinities count 0).
    :ivar kept: the promise holds. :ivar reason: why not, else ``""``.
    """

    bytes_equal: bool
    kept: bool
    reason: str = ""
    differing: int | None = None
    max_ulp: int | float | None = None
    max_abs: float | None = None
    max_rel: float | None = None


def judge(x: Any, ref: Any, promise: Parity) -> Diff:
    """Compare a provider's value with the reference's under ``promise``.

    Tensors (numpy arrays), sequences of tensors (lists) and empty optionals (``None``)
    are accepted; a sequence is judged element by element.
    """
    if isinstance(ref, (list, tuple)) or isinstance(x, (list, tuple)):
        return _judge_sequence(x, ref, promise)
    if x is None or ref is None:
        same = x is None and ref is None
        return Diff(same, same, "" if same else "an empty optional on one side only")
    x, ref = np.asarray(x), np.asarray(ref)
    if x.dtype != ref.dtype:
        return Diff(False, False, f"dtype {x.dtype} != reference {ref.dtype}")
    if x.shape != ref.shape:
        return Diff(False, False, f"shape {list(x.shape)} != reference {list(ref.shape)}")
    if x.dtype.kind in "OUS":
        neq = np.asarray(x != ref)
        n = int(np.count_nonzero(neq))
        return Diff(n == 0, n == 0, "" if n == 0 else f"{n} of {x.size} strings differ", n)
    bytes_equal = _same_bytes(x, ref)
    xf, rf = _components(x), _components(ref)
    fmt = float_format(xf.dtype)
    if fmt is None:
        return _judge_bytes(xf, rf, bytes_equal)
    differing = int(np.count_nonzero(_ordered_bits(xf) != _ordered_bits(rf)))
    dist, bad = _raw_distance(xf, rf)
    ulp: int | float = INFINITE_ULP if bad.any() else (int(dist.max()) if dist.size else 0)
    abs_err, rel_err = _errors(xf, rf)
    max_abs = float(abs_err.max()) if abs_err.size else 0.0
    max_rel = float(rel_err.max()) if rel_err.size else 0.0
    kept, reason = _keeps(promise, xf, rf, bytes_equal, differing, ulp, abs_err, bad)
    return Diff(bytes_equal, kept, reason, differing, ulp, max_abs, max_rel)


def _same_bytes(x: np.ndarray, ref: np.ndarray) -> bool:
    return np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(ref).tobytes()


def bytes_equal(x: Any, ref: Any) -> bool:
    """Same dtype, shape and bytes (strings: the same values): :func:`judge`'s
    ``bytes_equal`` without measuring any error. Two missing values are equal."""
    if x is None or ref is None:
        return x is None and ref is None
    x, ref = np.asarray(x), np.asarray(ref)
    if x.dtype != ref.dtype or x.shape != ref.shape:
        return False
    if x.dtype.kind in "OUS":
        return not np.any(x != ref)
    return _same_bytes(x, ref)


def _ordered_bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


def _errors(x: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """abs and rel error in float64; equal NaNs and equal infinities are 0, unequal ones inf."""
    xd, rd = x.astype(np.float64), ref.astype(np.float64)
    with np.errstate(all="ignore"):
        abs_err = np.abs(xd - rd)
        same = (xd == rd) | (np.isnan(xd) & np.isnan(rd))
        abs_err = np.where(same, 0.0, np.where(np.isnan(abs_err), np.inf, abs_err))
        mag = np.abs(rd)
        rel_err = np.where(abs_err == 0, 0.0,
                           np.where((mag == 0) | ~np.isfinite(mag), np.inf, abs_err / mag))
    return abs_err, rel_err


def _only_nans_differ(x: np.ndarray, ref: np.ndarray) -> bool:
    """Every element whose bytes differ is a NaN on both sides."""
    n = x.size
    xb = np.ascontiguousarray(x).reshape(n).view(np.uint8).reshape(n, -1)
    rb = np.ascontiguousarray(ref).reshape(n).view(np.uint8).reshape(n, -1)
    differ = (xb != rb).any(axis=1)
    nan_x, _ = _special(x)
    nan_r, _ = _special(ref)
    both_nan = (nan_x & nan_r).reshape(n)
    return not bool((differ & ~both_nan).any())


def _keeps(promise: Parity, x: np.ndarray, ref: np.ndarray, bytes_equal: bool,
           differing: int, ulp: int | float, abs_err: np.ndarray,
           incomparable: np.ndarray) -> tuple[bool, str]:
    if bytes_equal:
        return True, ""
    if promise.kind is ParityKind.EXACT:
        if x.dtype.kind in "fcV" and x.size and _only_nans_differ(x, ref):
            # NaN payloads and signs are not part of the promise: they follow the host
            # CPU's SIMD paths (numpy on AVX-512 differs from AVX2), not the math
            return True, ""
        return False, f"{differing} of {x.size} elements differ; exact promised"
    if incomparable.any():
        nan_x, inf_x = _special(x)
        nan_r, inf_r = _special(ref)
        n_nan = int(np.count_nonzero(nan_x != nan_r))
        n_inf = int(np.count_nonzero(inf_x != inf_r))
        what = [f"NaN at {n_nan} element(s) where the other side is not NaN"] if n_nan else []
        what += [f"unequal infinities at {n_inf} element(s)"] if n_inf else []
        return False, "; ".join(what)
    if promise.kind is ParityKind.ULP:
        if ulp <= promise.max_ulp:
            return True, ""
        return False, f"max ulp {ulp} > {promise.max_ulp}"
    with np.errstate(all="ignore"):
        bound = promise.atol + promise.rtol * np.abs(ref.astype(np.float64))
        over = abs_err > bound
    n = int(np.count_nonzero(over))
    if n == 0:
        return True, ""
    return False, (f"{n} of {x.size} elements exceed atol + rtol * |ref| "
                   f"(worst abs error {float(abs_err[over].max()):.3g})")


def _judge_bytes(x: np.ndarray, ref: np.ndarray, bytes_equal: bool) -> Diff:
    """Integers and bool: a tolerance never applies."""
    differing = int(np.count_nonzero(_ordered_bits(x) != _ordered_bits(ref)))
    max_abs = max_rel = None
    if x.dtype.kind in "iu" and x.size:
        abs_err, rel_err = _errors(x, ref)
        max_abs, max_rel = float(abs_err.max()), float(rel_err.max())
    reason = "" if bytes_equal else f"{differing} of {x.size} elements differ ({x.dtype})"
    return Diff(bytes_equal, bytes_equal, reason, differing, None, max_abs, max_rel)


def _judge_sequence(x: Any, ref: Any, promise: Parity) -> Diff:
    if not isinstance(x, (list, tuple)) or not isinstance(ref, (list, tuple)):
        return Diff(False, False, "a sequence on one side only")
    if len(x) != len(ref):
        return Diff(False, False, f"sequence of {len(x)} != reference's {len(ref)}")
    parts = [judge(a, b, promise) for a, b in zip(x, ref)]
    bad = next((i for i, p in enumerate(parts) if not p.kept), None)
    return Diff(all(p.bytes_equal for p in parts), bad is None,
                "" if bad is None else f"element {bad}: {parts[bad].reason}",
                _agg([p.differing for p in parts], sum), _agg([p.max_ulp for p in parts], max),
                _agg([p.max_abs for p in parts], max), _agg([p.max_rel for p in parts], max))


def _agg(values: Sequence[Any], how: Any) -> Any:
    present = [v for v in values if v is not None]
    return how(present) if present else None
