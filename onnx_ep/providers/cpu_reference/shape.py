"""Shape and constant ops: Reshape, Shape, Size, Flatten, Squeeze, Unsqueeze, Expand,
Transpose, Identity, Constant, ConstantOfShape, EyeLike, Range.

Parity: EXACT. These ops only move or create values; Range computes
``start + i * delta`` in the output dtype, as ``numpy.arange`` does.
String tensors (dtype object) pass through every data-movement op here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import is_float, round_to


def int_list(ctx: ExecutionContext, value: Any, what: str) -> list[int]:
    """A 1-D (or scalar) integer tensor or attribute as a list of Python ints."""
    arr = np.asarray(value)
    if arr.ndim > 1:
        raise CpuKernel.fail(ctx, f"{what} must be 1-D, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise CpuKernel.fail(ctx, f"{what} must be integers, got dtype {arr.dtype}")
    return [int(v) for v in arr.reshape(-1)]


def normalize_axes(ctx: ExecutionContext, axes: list[int], rank: int,
                   what: str = "axes") -> list[int]:
    """Normalize ``axes`` into ``[0, rank)``; duplicates are a NodeError."""
    out = [normalize_axis(ctx, a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise CpuKernel.fail(ctx, f"{what} {axes} contain duplicates")
    return out


def axes_arg(ctx: ExecutionContext, axes_input: Any, since_input: int,
             attr: str = "axes") -> list[int] | None:
    """Axes from the attribute before opset ``since_input``, from the input after."""
    if ctx.node.opset < since_input:
        value = ctx.node.attr(attr)
        return None if value is None else [int(a) for a in value]
    if axes_input is None:
        return None
    return int_list(ctx, axes_input, attr)


class Reshape(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, shape: Any = None) -> np.ndarray:
        if ctx.node.opset < 5:
            target = [int(d) for d in ctx.node.attr("shape", [])]
        else:
            if shape is None:
                raise self.fail(ctx, "the shape input is required")
            target = int_list(ctx, shape, "shape")
        allowzero = ctx.node.attr("allowzero", 0)
        out = list(target)
        if allowzero and 0 in out and -1 in out:
            raise self.fail(ctx, f"shape {target} has both 0 and -1 while allowzero=1")
        for i, d in enumerate(target):
            if d == 0 and not allowzero:
                if i >= data.ndim:
                    raise self.fail(ctx, f"shape {target}: 0 at position {i} copies a "
                                         f"dim the input (rank {data.ndim}) does not have")
                out[i] = data.shape[i]
            elif d < -1:
                raise self.fail(ctx, f"shape {target} has invalid dim {d}")
        if out.count(-1) > 1:
            raise self.fail(ctx, f"shape {target} has more than one -1")
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
            if known == 0 or data.size % known:
                raise self.fail(ctx, f"cannot reshape input of shape {data.shape} "
                                     f"({data.size} elements) to {target}")
            out[out.index(-1)] = data.size // known
        if int(np.prod(out, dtype=np.int64)) != data.size:
            raise self.fail(ctx, f"cannot reshape input of shape {data.shape} "
                                 f"({data.size} elements) to {target}")
        return data.reshape(out)


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


class Flatten(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> np.ndarray:
        axis = ctx.node.attr("axis", 1)
        r = data.ndim
        if not -r <= axis <= r:
            raise self.fail(ctx, f"axis {axis} is out of range for rank {r} "
                                 f"(expected {-r} <= axis <= {r})")
        axis = axis + r if axis < 0 else axis
        outer = int(np.prod(data.shape[:axis], dtype=np.int64))
        inner = int(np.prod(data.shape[axis:], dtype=np.int64))
        return data.reshape(outer, inner)


class Squeeze(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, axes: Any = None) -> np.ndarray:
        ax = axes_arg(ctx, axes, 13)
        if not ax:
            # An empty axes input means "all unit dims", as when axes are omitted (ORT).
            return data.reshape([d for d in data.shape if d != 1])
        ax = normalize_axes(ctx, ax, data.ndim)
        for a in ax:
            if data.shape[a] != 1:
                raise self.fail(ctx, f"cannot squeeze axis {a} of shape {data.shape}: "
                                     f"dim is {data.shape[a]}, expected 1")
        return data.reshape([d for i, d in enumerate(data.shape) if i not in ax])


class Unsqueeze(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, axes: Any = None) -> np.ndarray:
        ax = axes_arg(ctx, axes, 13)
        if ax is None:
            raise self.fail(ctx, "axes are required")
        r_out = data.ndim + len(ax)
        ax = normalize_axes(ctx, ax, r_out)
        dims = iter(data.shape)
        return data.reshape([1 if i in ax else next(dims) for i in range(r_out)])


class Expand(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray, shape: np.ndarray) -> np.ndarray:
        target = int_list(ctx, shape, "shape")
        try:
            out_shape = np.broadcast_shapes(data.shape, tuple(target))
        except ValueError:
            raise self.fail(ctx, f"input shape {data.shape} cannot be broadcast with "
                                 f"shape {target}") from None
        return np.array(np.broadcast_to(data, out_shape))


class Transpose(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> np.ndarray:
        perm = ctx.node.attr("perm")
        if perm is None:
            perm = list(range(data.ndim))[::-1]
        if sorted(perm) != list(range(data.ndim)):
            raise self.fail(ctx, f"perm {perm} is not a permutation of "
                                 f"0..{data.ndim - 1} (input shape {data.shape})")
        return np.transpose(data, perm).copy()


class Identity(CpuKernel):
    def run(self, ctx: ExecutionContext, data: Any) -> Any:
        # Sequences (lists) and empty optionals (None) pass through unchanged.
        if isinstance(data, np.ndarray):
            return data.copy()
        if isinstance(data, list):
            return list(data)
        return data


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


KERNELS: list[CpuKernel] = [
    Reshape("Reshape", since=1),
    Shape("Shape", since=1),
    Size("Size", since=1),
    Flatten("Flatten", since=1),
    Squeeze("Squeeze", since=1),
    Unsqueeze("Unsqueeze", since=1),
    Expand("Expand", since=8),
    Transpose("Transpose", since=1),
    Identity("Identity", since=1),
    Constant("Constant", since=1),
    ConstantOfShape("ConstantOfShape", since=9),
    EyeLike("EyeLike", since=9),
    Range("Range", since=11),
]
