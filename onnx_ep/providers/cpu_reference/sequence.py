"""Sequence ops. A sequence value is a Python ``list`` of numpy arrays.

Kernels never mutate an input list (values may be shared by several readers); they
return new lists. Everything here is data movement: ``Parity.EXACT``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, FnKernel, normalize_axis


def _seq(ctx: ExecutionContext, value: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise CpuKernel.fail(ctx, f"expected a sequence (list of tensors), got "
                                  f"{type(value).__name__}")
    return list(value)


def _position(ctx: ExecutionContext, pos: Any, n: int, *, insert: bool) -> int:
    """Validate a sequence position: [-n, n-1], or [-n, n] when inserting."""
    p = int(np.asarray(pos).reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise CpuKernel.fail(ctx, f"position {p} is out of range for a sequence of length "
                                  f"{n} (expected {-n} <= position <= {hi})")
    return p + n if p < 0 else p


def _construct(ctx: ExecutionContext, *tensors: Any) -> list[Any]:
    dtypes = {np.asarray(t).dtype for t in tensors}
    if len(dtypes) > 1:
        raise CpuKernel.fail(ctx, f"all inputs must share one dtype, got "
                                  f"{sorted(map(str, dtypes))}")
    return [np.asarray(t) for t in tensors]


def _empty(ctx: ExecutionContext) -> list[Any]:
    return []


def _at(ctx: ExecutionContext, seq: Any, pos: Any) -> np.ndarray:
    s = _seq(ctx, seq)
    return s[_position(ctx, pos, len(s), insert=False)]


def _insert(ctx: ExecutionContext, seq: Any, tensor: Any, pos: Any = None) -> list[Any]:
    s = _seq(ctx, seq)
    if s and np.asarray(s[0]).dtype != np.asarray(tensor).dtype:
        raise CpuKernel.fail(ctx, f"tensor dtype {np.asarray(tensor).dtype} differs from the "
                                  f"sequence's {np.asarray(s[0]).dtype}")
    p = len(s) if pos is None else _position(ctx, pos, len(s), insert=True)
    s.insert(p, np.asarray(tensor))
    return s


def _erase(ctx: ExecutionContext, seq: Any, pos: Any = None) -> list[Any]:
    s = _seq(ctx, seq)
    if not s:
        raise CpuKernel.fail(ctx, "cannot erase from an empty sequence")
    p = len(s) - 1 if pos is None else _position(ctx, pos, len(s), insert=False)
    del s[p]
    return s


def _length(ctx: ExecutionContext, seq: Any) -> np.ndarray:
    return np.array(len(_seq(ctx, seq)), dtype=np.int64)


def _split_to_sequence(ctx: ExecutionContext, x: np.ndarray, split: Any = None) -> list[Any]:
    axis = normalize_axis(ctx, int(ctx.node.attr("axis", 0)), x.ndim)
    dim = x.shape[axis]
    if split is None:
        parts = np.split(x, dim, axis=axis) if dim else []
        if not int(ctx.node.attr("keepdims", 1)):
            parts = [np.squeeze(p, axis=axis) for p in parts]
        return parts
    split = np.asarray(split).astype(np.int64)
    if split.ndim == 0:
        size = int(split)
        if size <= 0:
            raise CpuKernel.fail(ctx, f"scalar split must be > 0, got {size}")
        bounds = list(range(size, dim, size))
    else:
        if (split < 0).any() or int(split.sum()) != dim:
            raise CpuKernel.fail(ctx, f"split {split.tolist()} must be non-negative and sum to "
                                      f"the axis length {dim}")
        bounds = np.cumsum(split)[:-1].tolist()
    return np.split(x, bounds, axis=axis)


def _concat_from_sequence(ctx: ExecutionContext, seq: Any) -> np.ndarray:
    s = [np.asarray(t) for t in _seq(ctx, seq)]
    if not s:
        raise CpuKernel.fail(ctx, "cannot concatenate an empty sequence")
    axis = int(ctx.node.attr("axis"))
    if int(ctx.node.attr("new_axis", 0)):
        return np.stack(s, axis=normalize_axis(ctx, axis, s[0].ndim + 1))
    return np.concatenate(s, axis=normalize_axis(ctx, axis, s[0].ndim))


class SequenceMap(CpuKernel):
    def run(self, ctx: ExecutionContext, seq: Any, *extra: Any) -> Any:
        body = ctx.node.attr("body")
        s = _seq(ctx, seq)
        for e in extra:
            if isinstance(e, (list, tuple)) and len(e) != len(s):
                raise self.fail(ctx, f"additional sequence has length {len(e)}, expected "
                                     f"{len(s)} (the first input's length)")
        if ctx.run_subgraph is None:
            raise self.fail(ctx, "the executor gave this node no run_subgraph callback")
        results: list[list[Any]] = [[] for _ in body.outputs]
        for i, item in enumerate(s):
            feeds = [item] + [e[i] if isinstance(e, (list, tuple)) else e for e in extra]
            for k, y in enumerate(ctx.run_subgraph(body, feeds)):
                results[k].append(np.asarray(y))
        return tuple(results)


KERNELS: list[CpuKernel] = [
    FnKernel("SequenceConstruct", _construct, since=11),
    FnKernel("SequenceEmpty", _empty, since=11),
    FnKernel("SequenceAt", _at, since=11),
    FnKernel("SequenceInsert", _insert, since=11),
    FnKernel("SequenceErase", _erase, since=11),
    FnKernel("SequenceLength", _length, since=11),
    FnKernel("SplitToSequence", _split_to_sequence, since=11),
    FnKernel("ConcatFromSequence", _concat_from_sequence, since=11),
    SequenceMap("SequenceMap", since=17),
]
