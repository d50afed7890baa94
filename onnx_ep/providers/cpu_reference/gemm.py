"""MatMul and Gemm.

Numerics: float operands (float16, bfloat16, float32) are multiplied and accumulated
in float64 and rounded once (see ``dot.py``: deterministic across BLAS thread counts);
float64 uses dgemm, whose summation order is unspecified, so results are promised to a
tolerance. Integer products accumulate in the input type (wrapping) and are exact.
"""

from __future__ import annotations

import copy

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.dot import Prepared, matmul, prepare_wide, wide
from onnx_ep.providers.cpu_reference.lowfloat import round_to

#: another provider's accumulation order differs from the float64-accumulated reference
MATMUL_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)


def _matmul_shape_error(a: np.ndarray, b: np.ndarray) -> str | None:
    """Why ``a @ b`` is invalid under ONNX (numpy) matmul broadcasting, or None."""
    if a.ndim == 0 or b.ndim == 0:
        return f"MatMul needs inputs of rank >= 1, got shapes {a.shape} and {b.shape}"
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        return f"inner dimensions differ: A {a.shape} has K={k_a}, B {b.shape} has K={k_b}"
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    try:
        np.broadcast_shapes(batch_a, batch_b)
    except ValueError:
        return f"batch dimensions {batch_a} and {batch_b} do not broadcast"
    return None


class _WidensConstantB(CpuKernel):
    """Binds a constant float B (the weight) widened to float64 once (``dot.py``)."""

    _b: Prepared | None = None

    def bind(self, meta: NodeMeta) -> _WidensConstantB | None:
        prepared = prepare_wide(meta.constant(1))
        if prepared is None:
            return None
        bound = copy.copy(self)
        bound._b = prepared
        return bound

    def prepared_nbytes(self) -> int:
        return 0 if self._b is None else self._b.nbytes

    def wide_b(self, b: np.ndarray) -> np.ndarray | None:
        return None if self._b is None else self._b.of(b)


class MatMul(_WidensConstantB):
    """numpy matmul semantics (1-D operands promoted then squeezed; batch broadcast)."""

    parity = MATMUL_PARITY

    def run(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype != b.dtype:
            raise self.fail(ctx, f"A is {a.dtype} but B is {b.dtype}; both must match")
        why = _matmul_shape_error(a, b)
        if why:
            raise self.fail(ctx, why)
        return matmul(a, b, wide_b=self.wide_b(b))


class Gemm(_WidensConstantB):
    """Y = alpha * A' B' + beta * C, with A' = A^T if transA, B' = B^T if transB."""

    parity = MATMUL_PARITY

    def run(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray,
            c: np.ndarray | None = None) -> np.ndarray:
        if a.ndim != 2 or b.ndim != 2:
            raise self.fail(ctx, f"A and B must be 2-D, got shapes {a.shape} and {b.shape}")
        wb = self.wide_b(b)
        if ctx.node.attr("transA", 0):
            a = a.T
        if ctx.node.attr("transB", 0):
            b = b.T
            wb = None if wb is None else wb.T
        if a.shape[1] != b.shape[0]:
            raise self.fail(ctx, f"inner dimensions differ: A' is {a.shape}, B' is {b.shape}")
        alpha = ctx.node.attr("alpha", 1.0)
        beta = ctx.node.attr("beta", 1.0)
        m, n = a.shape[0], b.shape[1]
        wa, wb = wide(a), wide(b) if wb is None else wb
        acc = np.matmul(wa, wb)
        if wa.dtype.kind in "iu":
            # integer Gemm: scale in float64 only when alpha/beta are not 1, then truncate
            acc = acc if alpha == 1.0 else acc * alpha
        else:
            acc = acc * wa.dtype.type(alpha)
        if c is not None:
            try:
                cb = np.broadcast_to(wide(c), (m, n))
            except ValueError:
                raise self.fail(ctx, f"C of shape {c.shape} does not broadcast to "
                                     f"({m}, {n})") from None
            acc = acc + (cb if beta == 1.0 else cb * (beta if wa.dtype.kind in "iu"
                                                      else wa.dtype.type(beta)))
        return round_to(acc, a.dtype)


KERNELS: list[CpuKernel] = [
    MatMul("MatMul", since=1),
    Gemm("Gemm", since=1),
]
