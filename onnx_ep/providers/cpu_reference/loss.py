"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12+).

Numerics: log-softmax is computed in float64 and rounded once; the gather, weighting
and reductions accumulate in float64 and round once to the input dtype.
Parity: tolerance (reductions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to

_REDUCTIONS = ("none", "sum", "mean")


def _nll(kernel: CpuKernel, ctx: ExecutionContext, logp: np.ndarray, target: np.ndarray,
         weight: np.ndarray | None, out_dtype: np.dtype) -> np.ndarray:
    """The NLL of float64 log-probabilities ``logp`` (N, C, d...) at ``target`` (N, d...)."""
    reduction = ctx.node.attr("reduction", "mean")
    if reduction not in _REDUCTIONS:
        raise kernel.fail(ctx, f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if logp.ndim < 2 or target.shape != (logp.shape[0], *logp.shape[2:]):
        raise kernel.fail(ctx, f"input must be (N, C, d1, ...) and target (N, d1, ...); got "
                               f"{logp.shape} and {target.shape}")
    n_classes = logp.shape[1]
    ignore = ctx.node.attr("ignore_index")
    target = target.astype(np.int64)
    valid = np.ones(target.shape, dtype=bool) if ignore is None else target != ignore
    bad = valid & ((target < 0) | (target >= n_classes))
    if bad.any():
        raise kernel.fail(ctx, f"target values must lie in [0, {n_classes}) or equal "
                               f"ignore_index={ignore}, got {target[bad][:5].tolist()}")
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(logp, safe[:, None], axis=1)[:, 0]
    w = valid.astype(np.float64)
    if weight is not None:
        w = w * source_value(weight)[safe]
    loss = -picked * w
    if reduction == "none":
        return round_to(loss, out_dtype)
    if reduction == "sum":
        return round_to(loss.sum(), out_dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return round_to(loss.sum() / w.sum(), out_dtype)


class NegativeLogLikelihoodLoss(CpuKernel):
    parity = Parity.tolerance(1e-6, 1e-7)

    def run(self, ctx: ExecutionContext, x: np.ndarray, target: np.ndarray,
            weight: np.ndarray | None = None) -> np.ndarray:
        return _nll(self, ctx, source_value(x), target, weight, x.dtype)


class SoftmaxCrossEntropyLoss(CpuKernel):
    parity = Parity.tolerance(1e-6, 1e-7)

    def run(self, ctx: ExecutionContext, scores: np.ndarray, labels: np.ndarray,
            weights: np.ndarray | None = None) -> Any:
        x = source_value(scores)
        shifted = x - x.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = _nll(self, ctx, logp, labels, weights, scores.dtype)
        if len(ctx.node.output_names) > 1:
            return loss, round_to(logp, scores.dtype)
        return loss


KERNELS: list[CpuKernel] = [
    NegativeLogLikelihoodLoss("NegativeLogLikelihoodLoss", since=12),
    SoftmaxCrossEntropyLoss("SoftmaxCrossEntropyLoss", since=12),
]
