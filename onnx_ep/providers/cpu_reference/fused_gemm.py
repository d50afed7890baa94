"""The fused GEMM nodes: ``onnx_ep.fused::MatMulAdd``, ``com.microsoft::FusedMatMul`` and
``onnx_ep.fused::GroupedMatMul`` (below).

``onnx_ep.fused::MatMulAdd(A, B, bias) -> Y``: the fusion pass's node for
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

``com.microsoft::FusedMatMul(A, B) -> Y`` (onnxruntime's contrib op; the fusion pass's node
for attention's ``Mul(MatMul(q, Transpose(k)), scale)``): Y = alpha * MatMul(op(A), op(B)).
transA / transB swap the last two axes of a matrix and leave a 1-D input alone (numpy
transposes a vector to itself; onnxruntime's shape inference ignores the flags there too).
transBatchA / transBatchB read A stored ``[M, b0, ..., bn, K]`` as ``[b0, ..., bn, M, K]``
(axis 0 moved before the last axis, then transA applies); either one needs A and B of one
rank, at least 3, as onnxruntime's MatMulComputeHelper enforces. T is float16, bfloat16,
float32 or float64 (the contrib schema's list). Numerics as MatMulAdd: the float64 product
times alpha, rounded once to T.

One deliberate difference from onnxruntime 1.32 CPU: with transA and a 1-D B it reads A's
bytes as if untransposed (``A.reshape(..., M, K) @ B``), contradicting its own shape
inference and the op's documentation; this kernel transposes as documented.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Support
from onnx_ep.providers.cpu_reference.base import CpuKernel, broadcasts_to
from onnx_ep.providers.cpu_reference.dot import wide
from onnx_ep.providers.cpu_reference.gemm import MATMUL_PARITY, _matmul_shape_error
from onnx_ep.providers.cpu_reference.lowfloat import round_to
from onnx_ep.providers.shared.grouped import grouped_shapes

MATMUL_ADD_DTYPES = frozenset(np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32,
                                                    np.float64))
_INPUTS = ("A", "B", "bias")
#: onnxruntime's contrib domain
MS_DOMAIN = "com.microsoft"
#: FusedMatMul's integer attributes (any non-zero value is true, as in onnxruntime)
FUSED_MATMUL_FLAGS = ("transA", "transB", "transBatchA", "transBatchB")


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
        if not broadcasts_to(bias.shape, product.shape):
            raise self.fail(ctx, f"bias of shape {bias.shape} does not broadcast to the MatMul "
                                 f"output {product.shape} (the sum must keep the product's "
                                 f"shape)")
        return round_to(product + wide(bias), a.dtype)


def fused_matmul_operand(x: np.ndarray, trans: bool, trans_batch: bool) -> np.ndarray:
    """``op(x)`` of FusedMatMul as a view: axis 0 moved before the last axis when
    ``trans_batch``, then the last two axes swapped when ``trans`` (a vector stays)."""
    if trans_batch:
        x = np.moveaxis(x, 0, -2)
    if trans and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    return x


def _two_products_inputs(meta: NodeMeta, op: str) -> Support:
    """Inputs A and B of a fused product: two, A of a known product dtype, B the same."""
    if len(meta.inputs) != 2:
        return Support.no(f"{op} takes 2 inputs (A, B), got {len(meta.inputs)}")
    a, b = meta.inputs
    if a is None:
        return Support.no("input A is not a tensor of known dtype")
    if a.dtype not in MATMUL_ADD_DTYPES:
        return Support.no(f"A dtype {a.dtype} is not one of {_names(MATMUL_ADD_DTYPES)}")
    if b is not None and b.dtype != a.dtype:
        return Support.no(f"input B is {b.dtype} but A is {a.dtype}; they must match")
    return Support.YES


def fused_matmul_flags(ctx: ExecutionContext) -> dict[str, bool]:
    """transA, transB, transBatchA, transBatchB of the node (default 0, non-zero is true)."""
    return {name: bool(ctx.node.attr(name, 0)) for name in FUSED_MATMUL_FLAGS}


class FusedMatMul(CpuKernel):
    """``alpha * MatMul(op(A), op(B))`` in float64, rounded once to the inputs' dtype."""

    parity = MATMUL_PARITY

    def __init__(self) -> None:
        super().__init__("FusedMatMul", since=1, domain=MS_DOMAIN, dtypes=MATMUL_ADD_DTYPES)

    def supports(self, meta: NodeMeta) -> Support:
        return _two_products_inputs(meta, "FusedMatMul")

    def run(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a), np.asarray(b)
        if b.dtype != a.dtype:
            raise self.fail(ctx, f"input B is {b.dtype} but A is {a.dtype}; they must match")
        if a.dtype not in MATMUL_ADD_DTYPES:
            raise self.fail(ctx, f"A dtype {a.dtype} is not one of {_names(MATMUL_ADD_DTYPES)}")
        if a.ndim == 0 or b.ndim == 0:
            raise self.fail(ctx, f"FusedMatMul needs inputs of rank >= 1, got shapes {a.shape} "
                                 f"and {b.shape}")
        flags = fused_matmul_flags(ctx)
        moved = [n for n in ("transBatchA", "transBatchB") if flags[n]]
        if moved and (a.ndim != b.ndim or a.ndim < 3):
            raise self.fail(ctx, f"{' and '.join(moved)} need{'s' if len(moved) == 1 else ''} "
                                 f"A and B of one rank, at least 3, got shapes {a.shape} and "
                                 f"{b.shape}")
        opa = fused_matmul_operand(a, flags["transA"], flags["transBatchA"])
        opb = fused_matmul_operand(b, flags["transB"], flags["transBatchB"])
        why = _matmul_shape_error(opa, opb)
        if why:
            if opa.shape != a.shape or opb.shape != b.shape:
                why += (f" (A {a.shape} and B {b.shape} multiply as {opa.shape} and "
                        f"{opb.shape} under {', '.join(n for n, v in flags.items() if v)})")
            raise self.fail(ctx, why)
        # alpha is a float32 attribute: exact in float64, applied before the one rounding
        alpha = float(ctx.node.attr("alpha", 1.0))
        return round_to(np.matmul(wide(opa), wide(opb)) * alpha, a.dtype)


class GroupedMatMul(CpuKernel):
    """``onnx_ep.fused::GroupedMatMul(A, B)``: grouped-query attention's product without
    repeating the key/value heads.

    A is ``[..., H, M, K]``, B ``[..., G, K, N]`` (``[..., G, N, K]`` with ``transB``), H a
    multiple of G: head h multiplies group ``h // (H / G)``. Y = alpha * (A @ op(B) with B's
    groups each repeated H / G times), ``[..., H, M, N]``: what ``MatMul(A, Reshape(Expand(
    Unsqueeze(B, 2))))`` computes, without the Expand's copy of the cache. Attributes
    ``alpha`` (1.0) and ``transB`` (0). Numerics as FusedMatMul: float64, rounded once.
    """

    parity = MATMUL_PARITY

    def __init__(self) -> None:
        super().__init__("GroupedMatMul", since=1, domain=FUSED_DOMAIN,
                         dtypes=MATMUL_ADD_DTYPES)

    def supports(self, meta: NodeMeta) -> Support:
        return _two_products_inputs(meta, "GroupedMatMul")

    def run(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a), np.asarray(b)
        if b.dtype != a.dtype or a.dtype not in MATMUL_ADD_DTYPES:
            raise self.fail(ctx, f"A and B must share one of {_names(MATMUL_ADD_DTYPES)}, "
                                 f"got {a.dtype} and {b.dtype}")
        trans_b = bool(ctx.node.attr("transB", 0))
        why = grouped_shapes(a.shape, b.shape, trans_b)
        if why:
            raise self.fail(ctx, why)
        rep = a.shape[-3] // b.shape[-3]
        wb = np.repeat(wide(b), rep, axis=-3)
        if trans_b:
            wb = np.swapaxes(wb, -1, -2)
        alpha = float(ctx.node.attr("alpha", 1.0))
        return round_to(np.matmul(wide(a), wb) * alpha, a.dtype)


KERNELS: list[CpuKernel] = [MatMulAdd(), FusedMatMul(), GroupedMatMul()]
