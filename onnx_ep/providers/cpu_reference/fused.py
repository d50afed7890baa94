"""Ops of the fusion pass's own domain (:data:`onnx_ep.core.fusion.FUSED_DOMAIN`): one node
standing for a pattern of standard ops that the plan replaces.

RotaryHalf(X, cos, sin) -> Y, the Hugging Face "rotate_half" rotary embedding::

    Y = X * cos + rotate_half(X) * sin
    rotate_half(X)[..., j] = -X[..., j + D/2]   for j <  D/2
                           =  X[..., j - D/2]   for j >= D/2

X has shape ``[..., D]`` with D even; cos and sin broadcast to X's shape (numpy rules, the
result being X's shape: ranks may be lower, dims 1 or equal). Y has X's shape and dtype.
All three share one float dtype: float16, bfloat16, float32 or float64.

Numerics: the values are widened to float64, where both products are exact (each factor
has at most 24 significant bits), the sum is one float64 addition, and the result is
rounded once to T. A provider doing the same operations in float64 is ``EXACT``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity, Support
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.numerics import round_from_float64

ROTARY_DTYPES = frozenset(np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32,
                                                np.float64))
_INPUTS = ("X", "cos", "sin")


def _dim(d: Any) -> int | None:
    """A dim as an int, or ``None`` when it is symbolic or unknown."""
    return int(d) if isinstance(d, (int, np.integer)) else None


def rotary_shape_problem(x: Sequence[Any], cos: Sequence[Any], sin: Sequence[Any]) -> str | None:
    """Why shapes ``x``, ``cos``, ``sin`` cannot be a RotaryHalf, or ``None``.

    Symbolic dims (str or ``None``) are given the benefit of the doubt: only what the known
    dims already rule out is reported (run time checks the rest).
    """
    if len(x) == 0:
        return "X must have rank >= 1 (a last dim D to rotate), got a scalar"
    d = _dim(x[-1])
    if d is not None and d % 2:
        return f"the last dim of X (D={d}) must be even, X has shape {tuple(x)}"
    for name, shape in (("cos", cos), ("sin", sin)):
        if len(shape) > len(x):
            return (f"{name} of shape {tuple(shape)} does not broadcast to X's shape "
                    f"{tuple(x)}: its rank {len(shape)} exceeds X's {len(x)}")
        for k in range(1, len(shape) + 1):
            a, b = _dim(shape[-k]), _dim(x[-k])
            if a is not None and a != 1 and b is not None and a != b:
                return (f"{name} of shape {tuple(shape)} does not broadcast to X's shape "
                        f"{tuple(x)}: dim {len(x) - k} is {a}, expected 1 or {b}")
    return None


def rotary_support(meta: NodeMeta, dtypes: frozenset[np.dtype]) -> Support:
    """Whether node ``meta`` is a RotaryHalf of ``dtypes`` (the checks both providers make
    before any shape is concrete)."""
    if len(meta.inputs) != 3:
        return Support.no(f"RotaryHalf takes 3 inputs (X, cos, sin), got {len(meta.inputs)}")
    for name, spec in zip(_INPUTS, meta.inputs):
        if spec is None:
            return Support.no(f"input {name} is not a tensor of known dtype and rank")
    x, cos, sin = meta.inputs
    assert x is not None and cos is not None and sin is not None
    if x.dtype not in dtypes:
        names = ", ".join(sorted(str(d) for d in dtypes))
        return Support.no(f"X dtype {x.dtype} is not one of {names}")
    for name, spec in (("cos", cos), ("sin", sin)):
        if spec.dtype != x.dtype:
            return Support.no(f"input {name} is {spec.dtype} but X is {x.dtype}; they must match")
    problem = rotary_shape_problem(x.shape, cos.shape, sin.shape)
    return Support.no(problem) if problem else Support.YES


class RotaryHalf(CpuKernel):
    """``Y = X * cos + rotate_half(X) * sin`` in float64, rounded once to X's dtype."""

    parity = Parity.EXACT

    def __init__(self) -> None:
        super().__init__("RotaryHalf", since=1, domain=FUSED_DOMAIN, dtypes=ROTARY_DTYPES)

    def supports(self, meta: NodeMeta) -> Support:
        return rotary_support(meta, ROTARY_DTYPES)

    def run(self, ctx: ExecutionContext, x: np.ndarray, cos: np.ndarray,
            sin: np.ndarray) -> np.ndarray:
        arrays = (np.asarray(x), np.asarray(cos), np.asarray(sin))
        for name, a in zip(_INPUTS, arrays):
            if a.dtype != arrays[0].dtype:
                raise self.fail(ctx, f"input {name} is {a.dtype} but X is {arrays[0].dtype}; "
                                     f"they must match")
        if arrays[0].dtype not in ROTARY_DTYPES:
            names = ", ".join(sorted(str(d) for d in ROTARY_DTYPES))
            raise self.fail(ctx, f"X dtype {arrays[0].dtype} is not one of {names}")
        problem = rotary_shape_problem(*(a.shape for a in arrays))
        if problem:
            raise self.fail(ctx, problem)
        x64, cos64, sin64 = (source_value(a) for a in arrays)
        half = x64.shape[-1] // 2
        rotated = np.concatenate((-x64[..., half:], x64[..., :half]), axis=-1)
        return round_from_float64(x64 * cos64 + rotated * sin64, arrays[0].dtype)


KERNELS: list[CpuKernel] = [RotaryHalf()]
