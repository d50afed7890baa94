"""``onnx_ep.fused::MatMulAdd(A, B, bias) -> Y``: the fusion pass's node for
``Add(MatMul(A, B), bias)``, the biased projections of a transformer.

Y = MatMul(A, B) + bias, with ONNX MatMul semantics (numpy matmul: 1-D operands promoted
then squeezed, batch dims broadcast) and the bias unidirectionally broadcastable to the
product (numpy rules, the result keeping the product's shape). A, B and bias share one
float dtype: float16, bfloat16, float32 or float64. No attributes.

Numerics: narrow and float32 operands are widened to float64, where the products are exact;
the K-sum (dgemm) and the bias addition are float64, and the result is rounded once to T.
Unlike the unfused MatMul then Add, nothing is rounded between the product and the sum.
float64 operands stay float64 (dgemm's summation order is unspecified), so other providers
are held to a tolerance.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Support
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.dot import wide
from onnx_ep.providers.cpu_reference.gemm import MATMUL_PARITY, _matmul_shape_error
from onnx_ep.providers.cpu_reference.lowfloat import round_to

MATMUL_ADD_DTYPES = frozenset(np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32,
                                                    np.float64))
_INPUTS = ("A", "B", "bias")


def _names(dtypes: frozenset[np.dtype]) -> str:
    return ", ".join(sorted(str(d) for d in dtypes))


class MatMulAdd(CpuKernel):
    """``MatMul(A, B) + bias`` summed in float64 and rounded once to the inputs' dtype."""

    parity = MATMUL_PARITY

    def __init__(self) -> None:
        super().__init__("MatMulAdd", since=1, domain=FUSED_DOMAIN)

    def supports(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) != 3:
            return Support.no(f"MatMulAdd takes 3 inputs (A, B, bias), got {len(meta.inputs)}")
        specs = meta.inputs
        if specs[0] is None:
            return Support.no("input A is not a tensor of known dtype")
        dtype = specs[0].dtype
        if dtype not in MATMUL_ADD_DTYPES:
            return Support.no(f"A dtype {dtype} is not one of {_names(MATMUL_ADD_DTYPES)}")
        for name, spec in zip(_INPUTS[1:], specs[1:]):
            if spec is not None and spec.dtype != dtype:
                return Support.no(f"input {name} is {spec.dtype} but A is {dtype}; they must "
                                  f"match")
        return Support.YES

    def run(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray,
            bias: np.ndarray) -> np.ndarray:
        a, b, bias = np.asarray(a), np.asarray(b), np.asarray(bias)
        for name, x in zip(_INPUTS[1:], (b, bias)):
            if x.dtype != a.dtype:
                raise self.fail(ctx, f"input {name} is {x.dtype} but A is {a.dtype}; they must "
                                     f"match")
        if a.dtype not in MATMUL_ADD_DTYPES:
            raise self.fail(ctx, f"A dtype {a.dtype} is not one of {_names(MATMUL_ADD_DTYPES)}")
        why = _matmul_shape_error(a, b)
        if why:
            raise self.fail(ctx, why)
        product = np.matmul(wide(a), wide(b))
        try:
            fits = np.broadcast_shapes(bias.shape, product.shape) == product.shape
        except ValueError:
            fits = False
        if not fits:
            raise self.fail(ctx, f"bias of shape {bias.shape} does not broadcast to the MatMul "
                                 f"output {product.shape} (the sum must keep the product's "
                                 f"shape)")
        return round_to(product + wide(bias), a.dtype)


KERNELS: list[CpuKernel] = [MatMulAdd()]
