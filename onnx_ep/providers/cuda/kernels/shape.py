"""Shape and constant ops on CUDA: Shape, Size, ConstantOfShape, EyeLike, Range, Trilu.

Parity: EXACT (values are placed, or computed as cpu_reference does: Range is
``start + i * delta`` in the dtype, float16/bfloat16 in the stash type rounded once,
integers in int64 with wraparound).

Nothing is uploaded from the host, so every kernel is capture-supported:

- Shape / Size know their values on the host at execution time (from
  ``inputs[0].shape``) and pass them to ``write_i64`` as kernel arguments (8 per launch).
- ConstantOfShape passes the ``value`` attribute's raw bits as an argument; EyeLike the
  bits of one in the output dtype.
- Range reads start/delta, Trilu reads ``k``, through device pointers.

ConstantOfShape's and Range's output sizes depend on input values: they come from the
pre-bound outputs (sized by onnx shape inference where the inputs are constants, and by
``infer_outputs`` from the values the plan knows, ``meta.constant(i)``); the host never
reads the shape / limit inputs at run time. Where nothing sizes them at plan time the
session runs the node on the host.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import NodeMeta, Support, TensorSpec
from onnx_ep.providers.cuda.kernels import known_values as kv
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    BLOCK,
    I32,
    I64,
    PTR,
    U64,
    CudaKernel,
    dtype_support,
    grid_1d,
    prod,
    struct_arg,
    suffix,
)

INT64 = np.dtype(np.int64)
#: values one ``write_i64`` launch carries
VALUES_PER_LAUNCH = 8


#: dtypes whose values fill / eye place by bits (element sizes 1, 2, 4, 8)
VALUE_DTYPES: frozenset[np.dtype] = frozenset(
    d for d in (*(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                        np.uint8, np.uint16, np.uint32, np.uint64,
                                        np.float16, np.float32, np.float64)), BF16)
    if d is not None)
#: dtypes Range computes in (ONNX's T plus the narrow floats cpu_reference accepts)
RANGE_DTYPES: frozenset[np.dtype] = frozenset(
    d for d in (*(np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int16,
                                        np.int32, np.int64)), BF16)
    if d is not None)
#: element sizes Trilu copies
TRILU_WIDTHS = (1, 2, 4, 8, 16)


class I64x8(ctypes.Structure):
    """``struct I64x8`` of ``shape.cu``: up to 8 int64 values and their count, by value."""

    _fields_ = [("v", ctypes.c_int64 * VALUES_PER_LAUNCH), ("n", ctypes.c_int32)]

    @classmethod
    def of(cls, values: Sequence[int]) -> I64x8:
        if len(values) > VALUES_PER_LAUNCH:
            raise ValueError(f"{len(values)} values (max {VALUES_PER_LAUNCH} per launch)")
        s = cls()
        for i, v in enumerate(values):
            s.v[i] = int(v)
        s.n = len(values)
        return s

    def values(self) -> list[int]:
        return [int(self.v[i]) for i in range(self.n)]


def value_chunks(values: Sequence[int]) -> list[tuple[int, I64x8]]:
    """``(first index, I64x8)`` per ``write_i64`` launch covering ``values``."""
    return [(i, I64x8.of(values[i:i + VALUES_PER_LAUNCH]))
            for i in range(0, len(values), VALUES_PER_LAUNCH)]


def shape_slice(rank: int, start: int | None, end: int | None) -> tuple[int, int]:
    """Shape-15's ``[start, end)``: negatives add ``rank``, then both clamp into [0, rank]."""
    s = 0 if start is None else int(start)
    e = rank if end is None else int(end)
    s = min(max(s + rank if s < 0 else s, 0), rank)
    e = min(max(e + rank if e < 0 else e, 0), rank)
    return s, e


def value_bits(value: Any) -> tuple[np.dtype, int]:
    """The dtype of a 1-element array and its bits as an unsigned int (native order, so
    the device's ``(T)bits`` keeps exactly the element's bytes)."""
    arr = np.ascontiguousarray(np.asarray(value).reshape(-1))
    if arr.size != 1:
        raise ValueError(f"value must hold one element, got {arr.size}")
    return arr.dtype, int.from_bytes(arr.tobytes(), sys.byteorder)


def one_bits(dtype: Any) -> int:
    """The bits of one in ``dtype`` (what ``np.eye(...).astype(dtype)`` writes)."""
    return value_bits(np.ones(1, dtype=np.float64).astype(dtype))[1]


def fill_plan(itemsize: int, bits: int, count: int, ptr: int) -> tuple[int, int, int]:
    """``(width, bits, count)`` for ``fill_x<width>``: elements of 1-4 bytes are repeated
    into 8-byte words when the byte count and the pointer allow."""
    nbytes = itemsize * count
    if itemsize < 8 and nbytes % 8 == 0 and ptr % 8 == 0:
        word = 0
        for j in range(8 // itemsize):
            word |= bits << (8 * itemsize * j)
        return 8, word, nbytes // 8
    return itemsize, bits, count


def _constant_value(meta: NodeMeta | Any) -> Any:
    value = meta.attr("value")
    return np.zeros(1, dtype=np.float32) if value is None else value


def _eye_dtype(meta: NodeMeta | Any, x_dtype: Any) -> np.dtype:
    dt = meta.attr("dtype")
    return np.dtype(x_dtype) if dt is None else np_dtype(int(dt))


def _tensor(spec: TensorSpec | None) -> Support:
    if spec is None:
        return Support.no("input is not a tensor (sequence, optional or missing)")
    if spec.dtype.kind in "OUS" or spec.dtype.itemsize not in TRILU_WIDTHS:
        return Support.no(f"dtype {spec.dtype} cannot live on cuda")
    return Support.YES


class _Shape(CudaKernel):
    source = "shape"


# ---------------------------------------------------------------- Shape, Size

class ShapeOf(_Shape):
    """Shape (with opset 15's start/end) and Size: int64 values known on the host."""

    def supports(self, meta: NodeMeta) -> Support:
        return _tensor(meta.inputs[0] if meta.inputs else None)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        if self.key.op_type == "Size":
            return [TensorSpec(INT64, ())]
        s, e = shape_slice(len(meta.inputs[0].shape), meta.attr("start"), meta.attr("end"))
        return [TensorSpec(INT64, (max(e - s, 0),))]

    def values(self, node: Any, shape: Sequence[int]) -> list[int]:
        if self.key.op_type == "Size":
            return [prod(shape)]
        s, e = shape_slice(len(shape), node.attr("start"), node.attr("end"))
        return [int(d) for d in shape[s:e]]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        y = outputs[0]
        vals = self.values(ctx.node, inputs[0].shape)
        if y.size != len(vals):
            raise self.fail(ctx, f"output holds {y.size} values, {self.key.op_type} of "
                                 f"shape {tuple(inputs[0].shape)} has {len(vals)}")
        fn = self.function("write_i64", y)
        for first, chunk in value_chunks(vals):
            self.launch(fn, (1, 1, 1), (VALUES_PER_LAUNCH, 1, 1),
                        [(y.ptr + first * 8, PTR), struct_arg(chunk)], ctx.stream)


# ---------------------------------------------------------------- ConstantOfShape, EyeLike

class ConstantOfShape(_Shape):
    def supports(self, meta: NodeMeta) -> Support:
        try:
            dt, _ = value_bits(_constant_value(meta))
        except ValueError as e:
            return Support.no(str(e))
        return dtype_support(dt, VALUE_DTYPES, "value")

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        shape = meta.inputs[0] if meta.inputs else None
        dt = np.asarray(_constant_value(meta)).dtype
        if shape is not None and tuple(shape.shape) == (0,):
            return [TensorSpec(dt, ())]             # an empty shape: a scalar
        dims = kv.known_ints(meta, 0)
        if dims is None or any(d < 0 for d in dims):
            return [None]                           # dims are device values (or rejected)
        return [TensorSpec(dt, tuple(dims))]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        y = outputs[0]
        dt, bits = value_bits(_constant_value(ctx.node))
        if y.dtype != dt:
            raise self.fail(ctx, f"output dtype {y.dtype} differs from value dtype {dt}")
        if y.size == 0:
            return
        w, word, n = fill_plan(dt.itemsize, bits, y.size, y.ptr)
        self.launch(self.function(f"fill_x{w}", y), grid_1d(n), (BLOCK, 1, 1),
                    [(y.ptr, PTR), (word, U64), (n, I64)], ctx.stream)


class EyeLike(_Shape):
    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0] if meta.inputs else None
        s = _tensor(x)
        if not s:
            return s
        if len(x.shape) != 2:
            return Support.no(f"input must be 2-D, got rank {len(x.shape)}")
        return dtype_support(_eye_dtype(meta, x.dtype), VALUE_DTYPES, "output")

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        return [TensorSpec(_eye_dtype(meta, x.dtype), x.shape)]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if x.ndim != 2 or tuple(y.shape) != tuple(x.shape):
            raise self.fail(ctx, f"output {tuple(y.shape)} must match the 2-D input "
                                 f"{tuple(x.shape)}")
        if y.size == 0:
            return
        rows, cols = y.shape
        self.launch(self.function(f"eye_x{y.dtype.itemsize}", y), grid_1d(y.size), (BLOCK, 1, 1),
                    [(y.ptr, PTR), (rows, I64), (cols, I64), (int(ctx.node.attr("k", 0)), I64),
                     (one_bits(y.dtype), U64)], ctx.stream)


# ---------------------------------------------------------------- Trilu, Range

class Trilu(_Shape):
    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0] if meta.inputs else None
        s = _tensor(x)
        if not s:
            return s
        if len(x.shape) < 2:
            return Support.no(f"input must have rank >= 2, got rank {len(x.shape)}")
        k = meta.inputs[1] if len(meta.inputs) > 1 else None
        if k is not None and k.dtype != INT64:
            return Support.no(f"k has dtype {k.dtype}, expected int64")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        return [TensorSpec(x.dtype, x.shape)]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        k = inputs[1] if len(inputs) > 1 else None
        if y.size == 0:
            return
        if k is not None and k.size != 1:
            raise self.fail(ctx, f"k must hold one value, got shape {tuple(k.shape)}")
        rows, cols = x.shape[-2:]
        self.launch(self.function(f"trilu_x{x.dtype.itemsize}", x), grid_1d(y.size), (BLOCK, 1, 1),
                    [(x.ptr, PTR), (y.ptr, PTR), (rows, I64), (cols, I64), (y.size, I64),
                     (k.ptr if k is not None else 0, PTR),
                     (int(bool(ctx.node.attr("upper", 1))), I32)], ctx.stream)


class Range(_Shape):
    def supports(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) != 3 or any(s is None for s in meta.inputs):
            return Support.no("start, limit and delta are required")
        dt = meta.inputs[0].dtype
        for name, s in zip(("start", "limit", "delta"), meta.inputs):
            if s.dtype != dt:
                return Support.no(f"{name} has dtype {s.dtype}, start has {dt}")
            if s.is_static and prod(s.shape) != 1:
                return Support.no(f"{name} must be a scalar, got shape {s.shape}")
        return dtype_support(dt, RANGE_DTYPES)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        values = [meta.constant(i) for i in range(3)]
        start = meta.inputs[0] if meta.inputs else None
        if start is None or any(v is None for v in values):
            return [None]                           # start / limit / delta on the device
        n = kv.range_count(*values)
        return [None if n is None else TensorSpec(start.dtype, (n,))]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        start, _limit, delta = inputs
        y = outputs[0]
        if y.dtype != start.dtype:
            raise self.fail(ctx, f"output dtype {y.dtype} differs from start's {start.dtype}")
        if y.size == 0:
            return
        stash64 = int(ctx.node.attr("stash_type", 1) == 11)
        self.launch(self.function(f"range_{suffix(y.dtype)}", y), grid_1d(y.size), (BLOCK, 1, 1),
                    [(start.ptr, PTR), (delta.ptr, PTR), (y.ptr, PTR), (y.size, I64),
                     (stash64, I32)], ctx.stream)


KERNELS: list[CudaKernel] = [
    ShapeOf("Shape"),
    ShapeOf("Size"),
    ConstantOfShape("ConstantOfShape", since=9),
    EyeLike("EyeLike", since=9),
    Range("Range", since=11),
    Trilu("Trilu", since=14),
]
