"""Upcast-and-round-once helpers for narrow float types (float16, bfloat16, float8).

Reductions, normalizations and matmul-like kernels accumulate narrow floats in
float32 and round once to the output type; float32 and float64 compute in
their own type. numpy ufuncs do not all support ml_dtypes types, which is a
second reason to compute through these helpers.
"""

from __future__ import annotations

import numpy as np

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.formats import E8M0, FORMATS, decode, round_to
from onnx_ep.providers.cpu_reference.numerics import is_float

# round_to and is_float are re-exported: kernels take their rounding helpers from here
__all__ = ["compute_dtype", "float_compute", "is_float", "round_to", "stash_dtype",
           "upcast"]


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


def stash_dtype(ctx: ExecutionContext, x: np.ndarray) -> np.dtype:
    """The accumulation dtype: ``stash_type`` (default float) or at least float32."""
    stash = np_dtype(int(ctx.node.attr("stash_type", 1)))
    work = float_compute(x).dtype
    return stash if stash.itemsize >= work.itemsize else work
