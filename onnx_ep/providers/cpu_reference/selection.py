"""Data-dependent selection ops: Compress, NonZero, Unique.

Parity: EXACT (outputs are copies and int64 positions). Output shapes depend on
values, so other providers must compute them the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis


class Compress(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray,
            condition: np.ndarray) -> np.ndarray:
        cond = np.asarray(condition).astype(bool)
        if cond.ndim != 1:
            raise self.fail(ctx, f"condition must be 1-D, got shape {cond.shape}")
        axis = ctx.node.attr("axis")
        x = data.reshape(-1) if axis is None else data
        axis = 0 if axis is None else normalize_axis(ctx, axis, data.ndim)
        dim = x.shape[axis]
        if cond.size > dim:
            # Extra entries are harmless only when they select nothing.
            if cond[dim:].any():
                raise self.fail(ctx, f"condition has {cond.size} entries; entries past the "
                                     f"axis dim {dim} must be false")
            cond = cond[:dim]
        return np.compress(cond, x, axis=axis)


class NonZero(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> np.ndarray:
        if data.ndim == 0:
            # onnxruntime (and numpy 1.x) treat a scalar as a 1-element vector: (1, nnz).
            data = data.reshape(1)
        mask = data != "" if data.dtype == object else data.astype(bool)
        return np.array(np.nonzero(mask), dtype=np.int64).reshape(data.ndim, -1)


class Unique(CpuKernel):
    def run(self, ctx: ExecutionContext, data: np.ndarray) -> tuple[np.ndarray, ...]:
        axis = ctx.node.attr("axis")
        if axis is None:
            x, ax = data.reshape(-1), 0
            y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                                  return_counts=True)
        else:
            ax = normalize_axis(ctx, axis, data.ndim)
            x = data
            y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                                  return_counts=True, axis=ax)
        inverse = np.asarray(inverse).reshape(-1)
        if not ctx.node.attr("sorted", 1):
            # Order by first occurrence instead of by value.
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = np.take(y, order, axis=ax)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        outs: tuple[Any, ...] = (y.astype(data.dtype, copy=False),
                                 first.astype(np.int64), inverse.astype(np.int64),
                                 counts.astype(np.int64))
        return outs[: max(len(ctx.node.output_names), 1)]


KERNELS: list[CpuKernel] = [
    Compress("Compress", since=9),
    NonZero("NonZero", since=9),
    Unique("Unique", since=11),
]
