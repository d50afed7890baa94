"""Normalizations: Hardmax, BatchNormalization, InstanceNormalization, GroupNormalization,
LpNormalization, MeanVarianceNormalization, LRN, and onnxruntime's RMS normalizations
SimplifiedLayerNormalization (default domain) and com.microsoft::SkipSimplifiedLayerNormalization.
(The row-normalising ops Softmax, LogSoftmax, LayerNormalization and RMSNormalization are in
:mod:`.softmax`.)

Numerics: Hardmax selects and is exact. LRN (pow) is computed in float64 and rounded
once to the output type. The statistics-based normalizations accumulate
float16/bfloat16 in float32 (or in ``stash_type`` where the op has one) and round
once; float32/float64 compute in their own type. The two onnxruntime RMS normalizations
compute every step (the skip sum included) in float64 from the exact input values and round
each output once. Sums reorder additions, so all but Hardmax are promised to a tolerance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import (
    CpuKernel,
    broadcasts_to,
    check_same_dtype,
    normalize_axis,
)
from onnx_ep.providers.cpu_reference.formats import BFLOAT16, source_value
from onnx_ep.providers.cpu_reference.lowfloat import float_compute, round_to, stash_dtype, upcast
from onnx_ep.providers.cpu_reference.softmax import NORM_PARITY, SOFTMAX_PARITY, softmax_view


class Hardmax(CpuKernel):
    """1 at the first maximum along the axis, 0 elsewhere (exact)."""

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        if x.size == 0:
            return x.copy()
        v, axis = softmax_view(ctx, x)
        idx = np.expand_dims(np.argmax(v, axis=axis), axis)
        y = np.zeros(v.shape, dtype=x.dtype)
        np.put_along_axis(y, idx, np.ones((), dtype=x.dtype), axis=axis)
        return y.reshape(x.shape)


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel vector against an N, C, ... tensor."""
    return (-1,) + (1,) * (x.ndim - 2)


class BatchNormalization(CpuKernel):
    """Inference: per-channel affine with the running statistics. Training
    (``training_mode=1``, opset 14+) also returns the updated running mean and variance."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, scale: np.ndarray, bias: np.ndarray,
            mean: np.ndarray, var: np.ndarray) -> Any:
        if x.ndim < 2:
            raise self.fail(ctx, f"X must have rank >= 2 (N, C, ...), got shape {x.shape}")
        eps = ctx.node.attr("epsilon", 1e-5)
        n_out = len(ctx.node.output_names)
        training = bool(ctx.node.attr("training_mode", 0)) if ctx.node.opset >= 14 else False
        if ctx.node.opset < 14 and n_out > 1:
            raise self.fail(ctx, "training outputs of BatchNormalization before opset 14 "
                                 "are not supported; use opset 14+ with training_mode=1")
        v = float_compute(x)
        dt = v.dtype
        cs = _channel_shape(x)
        if training:
            axes = (0,) + tuple(range(2, x.ndim))
            use_mean = np.mean(v, axis=axes)
            use_var = np.mean((v - use_mean.reshape(cs)) ** 2, axis=axes)
        else:
            use_mean, use_var = upcast(mean).astype(dt), upcast(var).astype(dt)
        # per channel: gain = scale / sqrt(var + eps) in float64, rounded once to dt; then
        # three in-place passes (x - mean) * gain + bias over X instead of five
        gain = (source_value(scale) / np.sqrt(use_var.astype(np.float64) + eps)).astype(dt)
        y = np.subtract(v, use_mean.reshape(cs))
        y *= gain.reshape(cs)
        y += upcast(bias).astype(dt).reshape(cs)
        y = round_to(y, x.dtype)
        if not training:
            return y if n_out == 1 else (y,) + (None,) * (n_out - 1)
        mom = dt.type(ctx.node.attr("momentum", 0.9))
        run_mean = upcast(mean).astype(dt) * mom + use_mean * (1 - mom)
        run_var = upcast(var).astype(dt) * mom + use_var * (1 - mom)
        outs = (y, round_to(run_mean, mean.dtype), round_to(run_var, var.dtype))
        return outs[:n_out]


class InstanceNormalization(CpuKernel):
    """Per (N, C) normalization over the spatial axes, then a per-channel affine."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, scale: np.ndarray,
            bias: np.ndarray) -> np.ndarray:
        if x.ndim < 3:
            raise self.fail(ctx, f"X must have rank >= 3 (N, C, D1, ...), got {x.shape}")
        eps = ctx.node.attr("epsilon", 1e-5)
        v = float_compute(x)
        dt = v.dtype
        axes = tuple(range(2, x.ndim))
        mean = np.mean(v, axis=axes, keepdims=True)
        var = np.mean((v - mean) ** 2, axis=axes, keepdims=True)
        cs = _channel_shape(x)
        y = ((v - mean) / np.sqrt(var + dt.type(eps)) * upcast(scale).astype(dt).reshape(cs)
             + upcast(bias).astype(dt).reshape(cs))
        return round_to(y, x.dtype)


class GroupNormalization(CpuKernel):
    """Normalize each of ``num_groups`` channel groups; scale/bias are per group
    before opset 21 and per channel from 21 on."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, scale: np.ndarray,
            bias: np.ndarray) -> np.ndarray:
        groups = ctx.node.attr("num_groups", None)
        if groups is None or groups <= 0 or x.ndim < 2 or x.shape[1] % groups:
            raise self.fail(ctx, f"num_groups={groups} must be > 0 and divide the channel "
                                 f"count of X (shape {x.shape})")
        eps = ctx.node.attr("epsilon", 1e-5)
        dt = stash_dtype(ctx, x)
        n, c = x.shape[:2]
        g = upcast(x).astype(dt).reshape(n, groups, -1)
        mean = np.mean(g, axis=2, keepdims=True)
        var = np.mean((g - mean) ** 2, axis=2, keepdims=True)
        normed = ((g - mean) / np.sqrt(var + dt.type(eps))).reshape(x.shape)
        per = c if ctx.node.opset >= 21 else groups
        if scale.size != per or bias.size != per:
            raise self.fail(ctx, f"scale and bias must have {per} elements at opset "
                                 f"{ctx.node.opset}, got {scale.size} and {bias.size}")
        if per != c:
            scale = np.repeat(scale, c // groups)
            bias = np.repeat(bias, c // groups)
        cs = _channel_shape(x)
        y = normed * upcast(scale).astype(dt).reshape(cs) + upcast(bias).astype(dt).reshape(cs)
        return round_to(y, x.dtype)


class LpNormalization(CpuKernel):
    """x / ||x||_p along ``axis`` (p in {1, 2}); a zero norm gives 0."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        axis = normalize_axis(ctx, ctx.node.attr("axis", -1), x.ndim)
        p = ctx.node.attr("p", 2)
        if p not in (1, 2):
            raise self.fail(ctx, f"p must be 1 or 2, got {p}")
        v = float_compute(x)
        if p == 1:
            norm = np.sum(np.abs(v), axis=axis, keepdims=True)
        else:
            norm = np.sqrt(np.sum(v * v, axis=axis, keepdims=True))
        with np.errstate(invalid="ignore", divide="ignore"):
            y = np.where(norm == 0, 0, v / norm)
        return round_to(y, x.dtype)


class MeanVarianceNormalization(CpuKernel):
    """(X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9) over ``axes`` (default [0, 2, 3])."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        axes = tuple(normalize_axis(ctx, a, x.ndim)
                     for a in ctx.node.attr("axes", [0, 2, 3]))
        v = float_compute(x)
        mean = np.mean(v, axis=axes, keepdims=True)
        # the spec's formula, E[X^2] - E[X]^2, not the two-pass variance
        std = np.sqrt(np.mean(v * v, axis=axes, keepdims=True) - mean * mean)
        return round_to((v - mean) / (std + v.dtype.type(1e-9)), x.dtype)


class LRN(CpuKernel):
    """Local response normalization across channels (computed in float64)."""

    parity = SOFTMAX_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        size = ctx.node.attr("size", None)
        if size is None or size <= 0:
            raise self.fail(ctx, f"attribute 'size' must be a positive int, got {size}")
        if x.ndim < 3:
            raise self.fail(ctx, f"X must have rank >= 3 (N, C, D1, ...), got {x.shape}")
        alpha = ctx.node.attr("alpha", 1e-4)
        beta = ctx.node.attr("beta", 0.75)
        bias = ctx.node.attr("bias", 1.0)
        v = source_value(x)
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        pad = [(0, 0)] * x.ndim
        pad[1] = (lo, hi)
        sq = np.pad(v * v, pad)
        # channel c sums squares of channels [c - lo, c + hi]
        windows = np.lib.stride_tricks.sliding_window_view(sq, size, axis=1)
        square_sum = windows.sum(axis=-1)
        y = v / (bias + (alpha / size) * square_sum) ** beta
        return round_to(y, x.dtype)


# ---------------------------------------------------------------- onnxruntime's RMS norms

#: the float types onnxruntime's schemas allow for X, scale and input (T, V)
RMS_DTYPES = frozenset(np.dtype(d) for d in (np.float32, np.float16, np.float64, BFLOAT16))


def rms_normalize(s: np.ndarray, axes: tuple[int, ...],
                  eps: float) -> tuple[np.ndarray, np.ndarray]:
    """``(s * inv, inv)`` with ``inv = 1 / sqrt(mean(s^2) + eps)`` over ``axes`` (kept as 1),
    all in ``s``'s dtype (float64 here)."""
    n = int(np.prod([s.shape[a] for a in axes], dtype=np.int64))
    with np.errstate(invalid="ignore", divide="ignore"):
        # sum / n rather than np.mean: an empty normalized shape gives NaN without a warning
        ms = np.sum(s * s, axis=axes, keepdims=True) / n
        inv = 1.0 / np.sqrt(ms + eps)
    return s * inv, inv


def skip_broadcasts(skip: tuple[int, ...], x: tuple[int, ...]) -> bool:
    """Whether ``skip`` may be added to an ``x`` of this shape: ``x``'s shape, or a suffix of
    it holding at least its last two dims (any leading dims of ``skip`` being 1), as
    onnxruntime accepts (batch, seq, hidden), (1, seq, hidden) or (seq, hidden) for a 3-D
    input; ``skip`` then repeats every ``prod(skip)`` elements of ``x``."""
    keep = min(2, len(x))
    core = list(skip)
    while len(core) > keep and core[0] == 1:
        core.pop(0)
    return (len(skip) <= len(x) and len(core) >= keep
            and tuple(core) == tuple(x[len(x) - len(core):]))


def check_skip_inputs(kernel: CpuKernel, ctx: ExecutionContext, x: np.ndarray,
                      skip: np.ndarray, **params: np.ndarray | None) -> None:
    """The Skip*LayerNormalization checks: one dtype, input of rank >= 1, a skip that
    broadcasts to it, and each of ``params`` (gamma, beta, bias) of shape (hidden_size,)."""
    check_same_dtype(kernel, ctx, input=x, skip=skip, **params)
    if x.ndim < 1:
        raise kernel.fail(ctx, "input must have rank >= 1 (..., hidden_size)")
    hidden = x.shape[-1]
    if not skip_broadcasts(skip.shape, x.shape):
        raise kernel.fail(ctx, f"skip of shape {skip.shape} must have input's shape "
                               f"{x.shape}, or its last two dims with any leading dims 1")
    for name, t in params.items():
        if t is not None and t.shape != (hidden,):
            raise kernel.fail(ctx, f"{name} must have shape ({hidden},) (hidden_size), got "
                                   f"{t.shape}")


class SimplifiedLayerNormalization(CpuKernel):
    """onnxruntime's RMS normalization, registered in the default domain although ONNX has
    no such op: Y = X / sqrt(mean(X^2) + epsilon) * scale over axes [axis, rank), with
    ``scale`` broadcast to X and Y in scale's type (V); the optional inv_std_var is
    1 / sqrt(mean(X^2) + epsilon) with the reduced axes kept as 1, in ``stash_type`` (U:
    float32 by default, or float64)."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, scale: np.ndarray) -> Any:
        if scale.dtype not in RMS_DTYPES:
            raise self.fail(ctx, f"scale must be float16, float32, float64 or bfloat16, got "
                                 f"{scale.dtype}")
        axis = normalize_axis(ctx, ctx.node.attr("axis", -1), x.ndim)
        stash = int(ctx.node.attr("stash_type", 1))
        if stash not in (1, 11):
            raise self.fail(ctx, f"stash_type must be 1 (float) or 11 (double), got {stash}")
        if not broadcasts_to(scale.shape, x.shape):
            raise self.fail(ctx, f"scale of shape {scale.shape} does not broadcast to X's "
                                 f"shape {x.shape}")
        eps = float(ctx.node.attr("epsilon", 1e-5))
        normed, inv = rms_normalize(source_value(x), tuple(range(axis, x.ndim)), eps)
        y = round_to(normed * source_value(scale), scale.dtype)
        u = np.float32 if stash == 1 else np.float64
        return (y, round_to(inv, u))[:len(ctx.node.output_names)]


class SkipSimplifiedLayerNormalization(CpuKernel):
    """com.microsoft: s = input + skip (+ bias), output = s / sqrt(mean(s^2) + epsilon) *
    gamma over the last axis. Outputs: output, mean (onnxruntime computes none for the RMS
    form and returns zeros: so does this), inv_std_var (float32, the last axis kept as 1)
    and input_skip_bias_sum = s in the input's type. The output normalizes the exact ``s``,
    not ``s`` rounded to the input type."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, skip: np.ndarray, gamma: np.ndarray,
            bias: np.ndarray | None = None) -> Any:
        check_skip_inputs(self, ctx, x, skip, gamma=gamma, bias=bias)
        s = source_value(x) + source_value(skip)
        if bias is not None:
            s += source_value(bias)
        normed, inv = rms_normalize(s, (x.ndim - 1,), float(ctx.node.attr("epsilon", 1e-12)))
        y = round_to(normed * source_value(gamma), x.dtype)
        outs = (y, np.zeros(inv.shape, np.float32), round_to(inv, np.float32),
                round_to(s, x.dtype))
        return outs[:len(ctx.node.output_names)]


KERNELS: list[CpuKernel] = [
    Hardmax("Hardmax", since=1),
    BatchNormalization("BatchNormalization", since=1),
    InstanceNormalization("InstanceNormalization", since=1),
    GroupNormalization("GroupNormalization", since=18),
    LpNormalization("LpNormalization", since=1),
    MeanVarianceNormalization("MeanVarianceNormalization", since=9),
    LRN("LRN", since=1),
    SimplifiedLayerNormalization("SimplifiedLayerNormalization", since=1, dtypes=RMS_DTYPES),
    SkipSimplifiedLayerNormalization("SkipSimplifiedLayerNormalization", since=1,
                                     domain="com.microsoft", dtypes=RMS_DTYPES),
]
