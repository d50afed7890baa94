"""The reference's matrix product: floats accumulate in float64 and round once.

numpy's float32 BLAS (sgemm) splits the K-sum differently with 1 thread than with
several, so float32 products change bits with the thread count. Its float64 path
(dgemm) does not on the BLAS builds we measured, and a float64 sum of float32
products rounded once to float32 is insensitive to the order of the sum except in
the rare case where it lands within 2^-29 relative of a float32 rounding boundary.
Every matmul-shaped reference kernel (MatMul, Gemm, Conv and ConvTranspose via
im2col, Attention) goes through :func:`matmul`, which makes the reference
deterministic across thread counts and more accurate than single-precision
accumulation, at about twice the cost of sgemm. The exception is a float32
matrix-vector product (one row of ``a`` or one column of ``b``: every decode step):
sgemv computes each output element in one thread, so it is deterministic as it is,
and widening the weight matrix on every call would double the cost of a
memory-bound product. Integer products accumulate in their own type (wrapping),
exactly.

A constant float weight is widened once, when its node is bound (:func:`prepare_wide`,
charged to the session's ledger through the kernel's ``prepared_nbytes``), instead of on
every call: the same float64 values go into the same dgemm, so the bits do not change.
"""

from __future__ import annotations

import numpy as np

from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to


def wide(a: np.ndarray) -> np.ndarray:
    """``a`` as float64 when it is any float type; integers and float64 unchanged."""
    if a.dtype == np.float64 or a.dtype.kind in "iub":
        return a
    return source_value(a)


class Prepared:
    """A float64 array derived at bind from a constant input (:attr:`source`), used in
    place of deriving it on each call while that input is still :attr:`source`."""

    __slots__ = ("source", "value")

    def __init__(self, source: np.ndarray, value: np.ndarray) -> None:
        self.source = source
        self.value = value

    def of(self, x: np.ndarray | None) -> np.ndarray | None:
        """:attr:`value` when ``x`` is the source (the same memory, shape and strides; a
        streamed weight arrives in a window buffer and is derived again), else None."""
        s = self.source
        if x is s or (isinstance(x, np.ndarray) and x.dtype == s.dtype and x.shape == s.shape
                      and x.strides == s.strides and x.ctypes.data == s.ctypes.data):
            return self.value
        return None

    @property
    def nbytes(self) -> int:
        return int(self.value.nbytes)


def prepare_wide(value: object) -> Prepared | None:
    """The float64 copy of a constant narrow-float matrix operand that :func:`matmul` would
    widen on every call (float16, bfloat16, float8 of rank >= 2), else None.

    float32 weights are widened per call instead: a float64 copy would triple the memory of
    the reference's most common models, and their decode steps take the sgemv path above,
    which never widens.
    """
    if not isinstance(value, np.ndarray) or value.ndim < 2 or value.size == 0:
        return None
    if value.dtype in (np.float64, np.float32) or value.dtype.kind in "iubc" or (
            value.dtype == object):
        return None
    wide_value = wide(value)
    wide_value.flags.writeable = False
    return Prepared(value, wide_value)


def _is_gemv(a: np.ndarray, b: np.ndarray) -> bool:
    """A matrix-vector product: ``a`` has one row, or ``b`` one column."""
    return a.ndim == 1 or b.ndim == 1 or a.shape[-2] == 1 or b.shape[-1] == 1


def matmul(a: np.ndarray, b: np.ndarray, out_dtype: np.dtype | None = None,
           out: np.ndarray | None = None, wide_b: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` (numpy broadcasting) accumulated wide, rounded once to ``out_dtype``.

    :param out_dtype: result dtype; ``a.dtype`` by default.
    :param out: optional float64 buffer for the wide product (a workspace view).
    :param wide_b: ``wide(b)`` when the caller has it already (prepared at bind).
    """
    dt = np.dtype(out_dtype) if out_dtype is not None else a.dtype
    if out is None and a.dtype == b.dtype == dt == np.float32 and _is_gemv(a, b):
        # one row (or column) per product: BLAS gives each output element to one thread
        # (sgemv splits the outputs, never the K-sum), so float32 stays deterministic
        # and avoids widening the whole weight matrix on every decode step
        return np.matmul(a, b)
    wb = wide(b) if wide_b is None else wide_b
    if out is not None:
        y = np.matmul(wide(a), wb, out=out)
    else:
        y = np.matmul(wide(a), wb)
    return round_to(y, dt) if y.dtype != dt else y
