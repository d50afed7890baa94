"""Upcast-and-round-once helpers for narrow float types (float16, bfloat16, float8).

Reductions, normalizations and matmul-like kernels accumulate narrow floats in
float32 and round once to the output type; float32 and float64 compute in
their own type. numpy ufuncs do not all support ml_dtypes types, which is a
second reason to compute through these helpers.
"""

from __future__ import annotations

import numpy as np

from onnx_ep.providers.cpu_reference.formats import (
    E8M0,
    FORMATS,
    SUB_BYTE_INTS,
    decode,
    encode,
    encode_int,
    float_to_sub_byte_int,
    to_e8m0,
)
from onnx_ep.providers.cpu_reference.numerics import is_float


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to accumulate ``dtype`` in: float32 for narrow floats, else ``dtype``."""
    dt = np.dtype(dtype)
    if is_float(dt) and dt.itemsize < 4:
        return np.dtype(np.float32)
    return dt


def upcast(x: np.ndarray) -> np.ndarray:
    """``x`` in its :func:`compute_dtype` (no copy when already there)."""
    x = np.asarray(x)
    if x.dtype in FORMATS or x.dtype == E8M0:
        return decode(x, np.float32)
    return x.astype(compute_dtype(x.dtype), copy=False)


def float_compute(x: np.ndarray) -> np.ndarray:
    """``x`` as a float array: narrow floats to float32, integers to float64."""
    x = np.asarray(x)
    if is_float(x.dtype):
        return upcast(x)
    return x.astype(np.float64)


def round_to(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round ``y`` once to ``dtype`` and make sure the result is an ndarray, not a scalar.

    Narrow formats convert through :mod:`.formats` (the ONNX rules; float8e8m0 by Cast's
    default, sub-byte ints as Cast does), never through ml_dtypes' conversions.
    """
    dtype = np.dtype(dtype)
    if dtype in FORMATS:
        return encode(y, dtype)
    if dtype == E8M0:
        return to_e8m0(y)
    if dtype in SUB_BYTE_INTS:
        y = np.asarray(y)
        return float_to_sub_byte_int(y, dtype) if is_float(y.dtype) else encode_int(y, dtype)
    return np.asarray(np.asarray(y).astype(dtype, copy=False))
