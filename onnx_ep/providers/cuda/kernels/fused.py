"""Ops of the fusion pass's own domain (:data:`onnx_ep.core.fusion.FUSED_DOMAIN`) on CUDA,
the counterpart of cpu_reference/fused.py.

RotaryHalf(X, cos, sin) -> Y = X * cos + rotate_half(X) * sin (``rotary.cu``): one launch,
one thread per pair (j, j + D/2) of a row of X, so X is read once. X and Y are contiguous;
cos and sin are read through broadcast strides, a :class:`~.base.Geo` each over the pair
space ``X.shape[:-1] + (D/2,)`` (:func:`rotary_geometry`), so any numpy broadcast to X's
shape works, up to :data:`~.base.MAX_DIMS` dims after coalescing.

float32 / float16 / bfloat16. Parity: EXACT. The kernel computes in double as the reference
does (both products exact, one addition, rounded once to T): float32 arithmetic would round
each product and the sum, off by an ulp or more where the two terms cancel. Per element
that is three double operations and a few conversions against one read and one write.

Bound nodes replay a prebuilt launch per (stream, pointers, shapes)
(:class:`~.base.BoundLaunch`): no allocation, synchronization or host copy, so the kernel
is capture-supported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, OpKey, Parity, Support, TensorSpec
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    I32,
    I64,
    MAX_DIMS,
    PTR,
    BoundLaunch,
    BoundRow,
    CudaKernel,
    Geo,
    contiguous_strides,
    dtype_support,
    launch_geometry,
    struct_arg,
    suffix,
)

SOURCE = "rotary"
ROTARY_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float16, BF16))
_INPUTS = ("X", "cos", "sin")


# ---------------------------------------------------------------- geometry


@attrs.frozen
class RotaryGeometry:
    """What ``rotary_half_<suffix>`` needs besides the pointers.

    :ivar pairs: threads' work items, rows of X times ``half``.
    :ivar half: D/2.
    :ivar sizes, cos_strides, sin_strides: the coalesced pair space (one for both) and the
        element strides cos and sin are read with (0 on broadcast dims).
    :ivar cos_step, sin_step: from element j to element j + D/2 (half x the stride of D).
    """

    pairs: int
    half: int
    sizes: tuple[int, ...]
    cos_strides: tuple[int, ...]
    sin_strides: tuple[int, ...]
    cos_step: int
    sin_step: int

    @property
    def shared(self) -> bool:
        """sin's pair p sits at cos's offset (same strides; the steps are passed apart)."""
        return self.cos_strides == self.sin_strides

    def geos(self) -> tuple[Geo, Geo]:
        """The cos and sin geometries as ``ep::Geo`` kernel arguments."""
        return Geo.of(self.sizes, self.cos_strides), Geo.of(self.sizes, self.sin_strides)


def broadcast_strides(name: str, shape: Sequence[int], x_shape: Sequence[int]) -> list[int]:
    """Element strides that read ``shape`` at each index of ``x_shape`` (0 on broadcast dims).

    :raises ValueError: ``shape`` does not broadcast to ``x_shape`` (numpy's rules, with the
        result being ``x_shape``).
    """
    if len(shape) > len(x_shape):
        raise ValueError(f"{name} of shape {tuple(shape)} does not broadcast to X's shape "
                         f"{tuple(x_shape)}: its rank {len(shape)} exceeds X's {len(x_shape)}")
    lead = len(x_shape) - len(shape)
    own = contiguous_strides(shape)
    strides = [0] * len(x_shape)
    for k, (n, st) in enumerate(zip(shape, own)):
        want = int(x_shape[lead + k])
        if int(n) == want and n != 1:
            strides[lead + k] = st
        elif int(n) != 1:
            raise ValueError(f"{name} of shape {tuple(shape)} does not broadcast to X's "
                             f"shape {tuple(x_shape)}: dim {lead + k} is {n}, expected 1 or "
                             f"{want}")
    return strides


def rotary_geometry(x_shape: Sequence[int], cos_shape: Sequence[int],
                    sin_shape: Sequence[int]) -> RotaryGeometry:
    """The launch geometry of RotaryHalf for concrete shapes.

    Size-1 dims are dropped and neighbouring dims whose strides make one run in both cos
    and sin are merged, so a Qwen-like ``[B, H, S, D]`` with cos ``[B, 1, S, D]`` needs
    three dims whatever the batch.

    :raises ValueError: X is a scalar or has an odd last dim, cos or sin does not broadcast
        to X, or more than :data:`~.base.MAX_DIMS` dims remain after coalescing.
    """
    x_shape = tuple(int(d) for d in x_shape)
    if not x_shape:
        raise ValueError("X must have rank >= 1 (a last dim D to rotate), got a scalar")
    d = x_shape[-1]
    if d % 2:
        raise ValueError(f"the last dim of X (D={d}) must be even, X has shape {x_shape}")
    half = d // 2
    cos_st = broadcast_strides("cos", tuple(int(v) for v in cos_shape), x_shape)
    sin_st = broadcast_strides("sin", tuple(int(v) for v in sin_shape), x_shape)
    cos_step, sin_step = half * cos_st[-1], half * sin_st[-1]
    sizes: list[int] = []
    cs: list[int] = []
    ss: list[int] = []
    for n, a, b in zip(x_shape[:-1] + (half,), cos_st, sin_st):
        if n == 1:
            continue
        if sizes and cs[-1] == a * n and ss[-1] == b * n:
            sizes[-1] *= n
            cs[-1], ss[-1] = a, b
            continue
        sizes.append(n)
        cs.append(a)
        ss.append(b)
    if len(sizes) > MAX_DIMS:
        raise ValueError(f"cos {tuple(cos_shape)} and sin {tuple(sin_shape)} read at X's shape "
                         f"{x_shape} need {len(sizes)} dims after coalescing; the kernel "
                         f"takes {MAX_DIMS}")
    pairs = 1
    for n in x_shape[:-1]:
        pairs *= n
    return RotaryGeometry(pairs * half, half, tuple(sizes), tuple(cs), tuple(ss), cos_step,
                          sin_step)


def _known_shape_problem(x: Sequence[Any], cos: Sequence[Any], sin: Sequence[Any]) -> str | None:
    """What the known dims of possibly symbolic shapes already rule out, or ``None``."""
    if all(isinstance(v, int) for s in (x, cos, sin) for v in s):
        try:
            rotary_geometry(x, cos, sin)
        except ValueError as exc:
            return str(exc)
        return None
    if not x:
        return "X must have rank >= 1 (a last dim D to rotate), got a scalar"
    if isinstance(x[-1], int) and x[-1] % 2:
        return f"the last dim of X (D={x[-1]}) must be even, X has shape {tuple(x)}"
    if len(x) > MAX_DIMS:
        return (f"X of rank {len(x)} with symbolic dims; the kernel takes {MAX_DIMS} dims "
                f"after coalescing")
    for name, shape in (("cos", cos), ("sin", sin)):
        if len(shape) > len(x):
            return (f"{name} of shape {tuple(shape)} does not broadcast to X's shape "
                    f"{tuple(x)}: its rank {len(shape)} exceeds X's {len(x)}")
        for k in range(1, len(shape) + 1):
            a, b = shape[-k], x[-k]
            if isinstance(a, int) and isinstance(b, int) and a not in (1, b):
                return (f"{name} of shape {tuple(shape)} does not broadcast to X's shape "
                        f"{tuple(x)}: dim {len(x) - k} is {a}, expected 1 or {b}")
    return None


# ---------------------------------------------------------------- the kernel


class RotaryHalf(BoundRow):
    """``onnx_ep.fused::RotaryHalf``: Y = X * cos + rotate_half(X) * sin (see the module)."""

    source = SOURCE

    def __init__(self) -> None:
        super().__init__("RotaryHalf", since=1, parity=Parity.EXACT)
        self.key = OpKey(FUSED_DOMAIN, "RotaryHalf", 1)

    def supports(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) != 3:
            return Support.no(f"RotaryHalf takes 3 inputs (X, cos, sin), got "
                              f"{len(meta.inputs)}")
        for name, spec in zip(_INPUTS, meta.inputs):
            if spec is None:
                return Support.no(f"input {name} is not a tensor of known dtype and rank")
        x, cos, sin = meta.inputs
        assert x is not None and cos is not None and sin is not None
        ok = dtype_support(x.dtype, ROTARY_DTYPES, "X")
        if not ok:
            return ok
        for name, spec in (("cos", cos), ("sin", sin)):
            if spec.dtype != x.dtype:
                return Support.no(f"input {name} is {spec.dtype} but X is {x.dtype}; they "
                                  f"must match")
        problem = _known_shape_problem(x.shape, cos.shape, sin.shape)
        return Support.no(problem) if problem else Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        return [TensorSpec(x.dtype, x.shape) if x is not None else None]

    def bind(self, meta: NodeMeta) -> BoundRotary:
        x = meta.inputs[0]
        assert x is not None
        return BoundRotary(self, np.dtype(x.dtype))


class BoundRotary(BoundLaunch):
    """One RotaryHalf node: the symbol of its dtype and a prebuilt launch per shapes."""

    source = SOURCE

    def __init__(self, row: RotaryHalf, dtype: np.dtype) -> None:
        super().__init__(row, f"rotary_half_{suffix(dtype)}")
        self.dtype = dtype

    def check(self, ctx: ExecutionContext, inputs: Sequence[Any], y: Any) -> None:
        """Raise a NodeError unless ``inputs`` and ``y`` make a RotaryHalf of the bound
        dtype (run once per launch key, before its launch is built)."""
        if len(inputs) != 3 or any(t is None for t in inputs):
            raise self.fail(ctx, "RotaryHalf takes 3 inputs (X, cos, sin)")
        for name, t in zip(_INPUTS, inputs):
            if np.dtype(t.dtype) != self.dtype:
                raise self.fail(ctx, f"input {name} is {np.dtype(t.dtype)}, the node was "
                                     f"placed for {self.dtype}")
        x = inputs[0]
        if tuple(y.shape) != tuple(x.shape) or np.dtype(y.dtype) != self.dtype:
            raise self.fail(ctx, f"output is {np.dtype(y.dtype)} {tuple(y.shape)}, expected "
                                 f"X's {self.dtype} {tuple(x.shape)}")
        try:
            rotary_geometry(x.shape, inputs[1].shape, inputs[2].shape)
        except ValueError as exc:
            raise self.fail(ctx, str(exc)) from None

    def launch_key(self, stream: Any, inputs: Sequence[Any], y: Any) -> tuple[Any, ...]:
        """The stream, output and input pointers and shapes."""
        x, cos, sin = inputs
        return (stream, y.ptr, y.shape, x.ptr, x.shape, cos.ptr, cos.shape, sin.ptr, sin.shape)

    def geometry(self, n: int, inputs: Sequence[Any], y: Any
                 ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """One thread per pair: ``n // 2`` work items in a grid-stride loop."""
        return launch_geometry(n // 2)

    def arguments(self, n: int, inputs: Sequence[Any], y: Any) -> list[tuple[Any, Any]]:
        x, cos, sin = inputs
        g = rotary_geometry(x.shape, cos.shape, sin.shape)
        cos_geo, sin_geo = g.geos()
        return [(int(x.ptr), PTR), (int(cos.ptr), PTR), (int(sin.ptr), PTR), (int(y.ptr), PTR),
                (g.pairs, I64), (g.half, I64), struct_arg(cos_geo), struct_arg(sin_geo),
                (g.cos_step, I64), (g.sin_step, I64), (int(g.shared), I32)]


KERNELS: list[CudaKernel] = [RotaryHalf()]
