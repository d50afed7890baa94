"""Gated activations of the fusion pass's own domain (:data:`onnx_ep.core.fusion.FUSED_DOMAIN`).

SiluMul(G, U) -> Y, the SwiGLU gate of Llama / Qwen MLPs, ``Mul(Mul(G, Sigmoid(G)), U)``::

    Y = G * sigmoid(G) * U,    sigmoid(g) = 1 / (1 + exp(-g))

G and U have the same shape (no broadcasting) and one float dtype: float16, bfloat16,
float32 or float64. Y has that shape and dtype. No attributes.

Numerics: G and U are widened to float64, sigmoid is :func:`.numerics.sigmoid` (``exp`` of
``-|g|`` only, so it never overflows: sigmoid(+inf) is 1 and sigmoid(-inf) is 0 exactly),
the products are ``(G * sigmoid(G)) * U`` in float64, and the result is rounded once to T.
IEEE special values are those of the unfused graph: ``G = -inf`` gives NaN (``-inf * 0``),
``G = +inf`` gives ``inf * U``, and ``0 * inf`` is NaN; these raise no numpy warnings.
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
from onnx_ep.providers.cpu_reference.numerics import round_from_float64, sigmoid

GATED_DTYPES = frozenset(np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32,
                                               np.float64))


def _dim(d: Any) -> int | None:
    """A dim as an int, or ``None`` when it is symbolic or unknown."""
    return int(d) if isinstance(d, (int, np.integer)) else None


def same_shape_problem(g: Sequence[Any], u: Sequence[Any]) -> str | None:
    """Why ``g`` and ``u`` are not one shape, or ``None``.

    Symbolic dims (str or ``None``) are given the benefit of the doubt: only what the known
    dims already rule out is reported (run time checks the rest).
    """
    if len(g) != len(u):
        return (f"G {tuple(g)} and U {tuple(u)} must have the same shape (SiluMul does not "
                f"broadcast): ranks {len(g)} and {len(u)} differ")
    for k, (a, b) in enumerate(zip(g, u)):
        da, db = _dim(a), _dim(b)
        if da is not None and db is not None and da != db:
            return (f"G {tuple(g)} and U {tuple(u)} must have the same shape (SiluMul does "
                    f"not broadcast): dim {k} is {da} and {db}")
    return None


def silu_mul_support(meta: NodeMeta, dtypes: frozenset[np.dtype]) -> Support:
    """Whether node ``meta`` is a SiluMul of ``dtypes`` (the checks made before any shape is
    concrete)."""
    if len(meta.inputs) != 2:
        return Support.no(f"SiluMul takes 2 inputs (G, U), got {len(meta.inputs)}")
    for name, spec in zip(("G", "U"), meta.inputs):
        if spec is None:
            return Support.no(f"input {name} is not a tensor of known dtype and rank")
    g, u = meta.inputs
    assert g is not None and u is not None
    if g.dtype not in dtypes:
        names = ", ".join(sorted(str(d) for d in dtypes))
        return Support.no(f"G dtype {g.dtype} is not one of {names}")
    if u.dtype != g.dtype:
        return Support.no(f"input U is {u.dtype} but G is {g.dtype}; they must match")
    problem = same_shape_problem(g.shape, u.shape)
    return Support.no(problem) if problem else Support.YES


class SiluMul(CpuKernel):
    """``Y = G * sigmoid(G) * U`` in float64, rounded once to G's dtype."""

    parity = Parity.EXACT

    def __init__(self) -> None:
        super().__init__("SiluMul", since=1, domain=FUSED_DOMAIN)

    def supports(self, meta: NodeMeta) -> Support:
        return silu_mul_support(meta, GATED_DTYPES)

    def run(self, ctx: ExecutionContext, g: np.ndarray, u: np.ndarray) -> np.ndarray:
        g, u = np.asarray(g), np.asarray(u)
        if u.dtype != g.dtype:
            raise self.fail(ctx, f"input U is {u.dtype} but G is {g.dtype}; they must match")
        if g.dtype not in GATED_DTYPES:
            names = ", ".join(sorted(str(d) for d in GATED_DTYPES))
            raise self.fail(ctx, f"G dtype {g.dtype} is not one of {names}")
        problem = same_shape_problem(g.shape, u.shape)
        if problem:
            raise self.fail(ctx, problem)
        g64, u64 = source_value(g), source_value(u)
        # inf and NaN results are the IEEE answers the unfused graph gives (-inf * 0,
        # 0 * inf, float64 inputs whose product overflows; float64 -> T overflow)
        with np.errstate(over="ignore", invalid="ignore"):
            return round_from_float64(g64 * sigmoid(g64) * u64, g.dtype)


KERNELS: list[CpuKernel] = [SiluMul()]
