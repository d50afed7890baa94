"""Shape and constant ops: Shape, Size, Constant, ConstantOfShape, EyeLike, Range, Trilu.

Parity: EXACT. These ops read shapes, create values or keep a triangle of their input
(Trilu); Range computes ``start + i * delta`` in the output dtype, as ``numpy.arange``
does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, int_list
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import is_float, round_to


class Shape(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> np.ndarray:
        dims = data.shape
        start = ctx.node.attr("start", 0)
        end = ctx.node.attr("end", None)
        # Shape-15 clamps start/end into [0, rank] after adding rank to negatives.
        r = len(dims)
        start = min(max(start + r if start < 0 else start, 0), r)
        end = r if end is None else min(max(end + r if end < 0 else end, 0), r)
        return np.array(dims[start:end], dtype=np.int64)


class Size(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> np.ndarray:
        return np.array(data.size, dtype=np.int64)


_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints",
                   "value_string", "value_strings", "sparse_value")


class Constant(CpuKernel):
    def run(self, ctx: ExecutionContext) -> np.ndarray:
        given = [a for a in _CONSTANT_ATTRS if a in ctx.node.attrs]
        if len(given) != 1:
            raise self.fail(ctx, f"exactly one of {', '.join(_CONSTANT_ATTRS)} must be set, "
                                 f"got {given or 'none'}")
        name = given[0]
        v = ctx.node.attrs[name]
        if name in ("value", "sparse_value"):
            return np.array(v)
        if name == "value_float":
            return np.array(v, dtype=np.float32)
        if name == "value_floats":
            return np.array(v, dtype=np.float32).reshape(-1)
        if name == "value_int":
            return np.array(v, dtype=np.int64)
        if name == "value_ints":
            return np.array(v, dtype=np.int64).reshape(-1)
        if name == "value_string":
            return np.array(v, dtype=object)
        return np.array(list(v), dtype=object).reshape(-1)


class ConstantOfShape(CpuKernel):
    def run(self, ctx: ExecutionContext, shape: np.ndarray) -> np.ndarray:
        dims = int_list(ctx, shape, "shape")
        if any(d < 0 for d in dims):
            raise self.fail(ctx, f"shape {dims} has negative dims")
        value = ctx.node.attr("value")
        if value is None:
            value = np.zeros(1, dtype=np.float32)
        value = np.asarray(value)
        if value.size != 1:
            raise self.fail(ctx, f"value must hold one element, got shape {value.shape}")
        return np.full(dims, value.reshape(-1)[0], dtype=value.dtype)


class EyeLike(CpuKernel):
    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        if x.ndim != 2:
            raise self.fail(ctx, f"input must be 2-D, got shape {x.shape}")
        dt = ctx.node.attr("dtype")
        dtype = x.dtype if dt is None else np_dtype(dt)
        k = ctx.node.attr("k", 0)
        return round_to(np.eye(x.shape[0], x.shape[1], k=k), dtype)


class Range(CpuKernel):
    def run(self, ctx: ExecutionContext, start: np.ndarray, limit: np.ndarray,
            delta: np.ndarray) -> np.ndarray:
        for name, v in (("start", start), ("limit", limit), ("delta", delta)):
            if np.asarray(v).size != 1:
                raise self.fail(ctx, f"{name} must be a scalar, got shape {np.shape(v)}")
        dtype = np.asarray(start).dtype
        s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
        if d == 0:
            raise self.fail(ctx, "delta must not be 0")
        if is_float(dtype):
            # The element count follows the spec: ceil((limit - start) / delta) in float64.
            s64, lim64, d64 = (float(source_value(v)) for v in (s, lim, d))
            n = max(int(np.ceil((lim64 - s64) / d64)), 0)
            if dtype.itemsize < 4:
                # Narrow floats compute in stash_type (float32 unless DOUBLE=11 is asked)
                # and round once per element; numpy.arange has no bfloat16.
                cdt = np.float64 if ctx.node.attr("stash_type", 1) == 11 else np.float32
                sf, df = cdt(s64), cdt(d64)
                return round_to(sf + np.arange(n, dtype=cdt) * df, dtype)
            return s + np.arange(n, dtype=dtype) * d
        n = max(-(-(int(lim) - int(s)) // int(d)), 0)
        return (int(s) + np.arange(n, dtype=np.int64) * int(d)).astype(dtype)


class Trilu(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, k: Any = None) -> np.ndarray:
        if data.ndim < 2:
            raise self.fail(ctx, f"input must have rank >= 2, got shape {data.shape}")
        kk = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
        n, m = data.shape[-2:]
        rows, cols = np.arange(n)[:, None], np.arange(m)[None, :]
        keep = cols - rows >= kk if ctx.node.attr("upper", 1) else cols - rows <= kk
        return np.where(keep, data, np.zeros((), dtype=data.dtype))


KERNELS: list[CpuKernel] = [
    Shape("Shape", since=1),
    Size("Size", since=1),
    Constant("Constant", since=1),
    ConstantOfShape("ConstantOfShape", since=9),
    EyeLike("EyeLike", since=9),
    Range("Range", since=11),
    Trilu("Trilu", since=14),
]
