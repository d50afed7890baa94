"""Einsum through ``numpy.einsum``.

Numerics: float16/bfloat16 operands are widened to float32 and the result rounded
once to the input dtype; numpy picks the contraction and summation order, so the op
keeps the reductions' tolerance (:data:`.reduce.SUM_PARITY`), not bit for bit.
"""

from __future__ import annotations

import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast
from onnx_ep.providers.cpu_reference.reduce import SUM_PARITY


class Einsum(CpuKernel):
    """Einsum through numpy (narrow floats computed in float32, rounded once)."""

    parity = SUM_PARITY

    def run(self, ctx: ExecutionContext, *xs: np.ndarray) -> np.ndarray:
        eq = ctx.node.attr("equation", None)
        if not eq:
            raise self.fail(ctx, "attribute 'equation' is required")
        eq = eq.replace(" ", "")
        dtype = xs[0].dtype
        for i, x in enumerate(xs):
            if x.dtype != dtype:
                raise self.fail(ctx, f"input {i} has dtype {x.dtype}, expected {dtype}")
        try:
            out = np.einsum(eq, *[upcast(x) for x in xs])
        except ValueError as e:
            raise self.fail(ctx, f"equation {eq!r} does not fit the inputs: {e}") from e
        return round_to(out, dtype)


KERNELS: list[CpuKernel] = [Einsum("Einsum", since=12)]
