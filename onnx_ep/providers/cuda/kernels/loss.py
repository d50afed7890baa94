"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12+) on CUDA (``loss.cu``).

Both replay cpu_reference/loss.py in float64 and round once to the input dtype.
Reductions ``sum`` and ``mean`` store one float64 loss term and one weight per
(n, d1, ...) item in the step workspace (parallel pass), then ONE thread sums them in
numpy's pairwise order and divides: no atomics, deterministic, the reference's bits.

- NegativeLogLikelihoodLoss: EXACT (negate, multiply, the same sums, one rounding).
- SoftmaxCrossEntropyLoss: the log-softmax's exp/log come from CUDA's libdevice, not the
  host's libm (within an ulp of float64), so the reference's ``rtol=1e-6, atol=1e-7``
  (+ one output ulp for float16/bfloat16). Output 1 (log_prob) is written when asked.

Labels (int32/int64) stay on the device and are read by the kernel. A label that is
neither ``ignore_index`` nor in ``[0, C)`` makes the reference raise; the device cannot,
so that item's loss (and weight) is NaN, and so are ``sum``/``mean``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import NodeMeta, Parity, Support, TensorSpec, WorkspaceRequirement
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    FLOATS,
    I32,
    I64,
    PTR,
    CudaKernel,
    dtype_support,
    grid_1d,
    prod,
    suffix,
)

REDUCTIONS = ("none", "sum", "mean")
LABELS = frozenset({np.dtype(np.int64), np.dtype(np.int32)})
SCE_PARITY = Parity.tolerance(rtol=1e-6, atol=1e-7)


def items(x_shape: tuple[int, ...]) -> int:
    """Loss items N * d1 * ... of an (N, C, d1, ...) input."""
    return prod(x_shape[:1]) * prod(x_shape[2:])


def workspace_bytes(x_shape: tuple[int, ...], reduction: str) -> int:
    """float64 loss terms and weights, one each per item, when the loss is reduced."""
    return 0 if reduction == "none" else 2 * 8 * items(x_shape)


class Loss(CudaKernel):
    """NegativeLogLikelihoodLoss (``softmax=False``) and SoftmaxCrossEntropyLoss."""

    source = "loss"

    def __init__(self, op_type: str, *, softmax: bool) -> None:
        super().__init__(op_type, since=12, parity=SCE_PARITY if softmax else Parity.EXACT)
        self.softmax = softmax

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0] if meta.inputs else None
        t = meta.inputs[1] if len(meta.inputs) > 1 else None
        if x is None or t is None:
            return Support.no("needs input and target tensors of known dtype and rank")
        s = dtype_support(x.dtype, FLOATS)
        if not s:
            return s
        s = dtype_support(t.dtype, LABELS, "target")
        if not s:
            return s
        if len(x.shape) < 2 or len(t.shape) != len(x.shape) - 1:
            return Support.no(f"input must be (N, C, d1, ...) and target (N, d1, ...); got "
                              f"ranks {len(x.shape)} and {len(t.shape)}")
        w = meta.inputs[2] if len(meta.inputs) > 2 else None
        if w is not None and w.dtype != x.dtype:
            return Support.no(f"weight dtype {w.dtype} differs from input dtype {x.dtype}")
        reduction = meta.attr("reduction", "mean")
        if reduction not in REDUCTIONS:
            return Support.no(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        if meta.attr("reduction", "mean") == "none":
            loss = TensorSpec(x.dtype, (x.shape[0], *x.shape[2:]))
        else:
            loss = TensorSpec(x.dtype, ())
        outs: list[TensorSpec | None] = [loss]
        if self.softmax:
            outs.append(TensorSpec(x.dtype, x.shape))
        return outs[:max(len(meta.output_names), 1)]

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        x = meta.inputs[0]
        if x is None or not x.is_static:
            return WorkspaceRequirement.NONE
        return WorkspaceRequirement(workspace_bytes(tuple(int(d) for d in x.shape),
                                                    meta.attr("reduction", "mean")))

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, target = inputs[0], inputs[1]
        weight = inputs[2] if len(inputs) > 2 else None
        y = outputs[0]
        log_prob = outputs[1] if self.softmax and len(outputs) > 1 else None
        reduction = ctx.node.attr("reduction", "mean")
        if x.ndim < 2 or tuple(target.shape) != (x.shape[0], *x.shape[2:]):
            raise self.fail(ctx, f"input must be (N, C, d1, ...) and target (N, d1, ...); "
                                 f"got {tuple(x.shape)} and {tuple(target.shape)}")
        n, c, d = int(x.shape[0]), int(x.shape[1]), prod(x.shape[2:])
        if weight is not None and weight.size != c:
            raise self.fail(ctx, f"weight has {weight.size} elements, expected C={c}")
        m = n * d
        ws = (self.workspace_ptr(ctx, workspace, workspace_bytes(tuple(x.shape), reduction))
              if reduction != "none" else 0)
        ignore = ctx.node.attr("ignore_index")
        sfx = f"{suffix(x.dtype)}_{suffix(target.dtype)}"
        args: list[tuple[Any, Any]] = [
            (x.ptr, PTR), (target.ptr, PTR), (weight.ptr if weight is not None else 0, PTR),
            (y.ptr if reduction == "none" else 0, PTR)]
        if self.softmax:
            args.append((log_prob.ptr if log_prob is not None else 0, PTR))
        args += [(ws, PTR), (ws + 8 * m if ws else 0, PTR), (n, I64), (c, I64), (d, I64),
                 (int(ignore) if ignore is not None else 0, I64),
                 (int(ignore is not None), I32)]
        if m > 0:
            name = "sce_terms" if self.softmax else "nll_terms"
            self.launch(self.function(f"{name}_{sfx}", x), grid_1d(m, BLOCK), (BLOCK, 1, 1), args,
                        ctx.stream)
        if reduction != "none":
            self.launch(self.function(f"loss_finish_{suffix(x.dtype)}", x), (1, 1, 1), (1, 1, 1),
                        [(ws, PTR), (ws + 8 * m if ws else 0, PTR), (y.ptr, PTR), (m, I64),
                         (int(reduction == "mean"), I32)], ctx.stream)


KERNELS: list[CudaKernel] = [
    Loss("NegativeLogLikelihoodLoss", softmax=False),
    Loss("SoftmaxCrossEntropyLoss", softmax=True),
]
