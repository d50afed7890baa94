"""Det: determinant of the last two axes through LU factorization (numpy / LAPACK).

Computed in float64 and rounded once. Parity: tolerance (pivoting order).
"""

from __future__ import annotations

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to


class Det(CpuKernel):
    parity = Parity.tolerance(1e-5, 1e-6)

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise self.fail(ctx, f"input must be (..., M, M), got shape {x.shape}")
        return round_to(np.linalg.det(source_value(x)), x.dtype)


KERNELS: list[CpuKernel] = [Det("Det", since=11)]
