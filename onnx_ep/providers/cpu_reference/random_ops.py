"""Random generators: RandomUniform, RandomNormal (+Like), Bernoulli.

Each node draws from a fresh ``numpy.random.Generator`` (PCG64) seeded with the ``seed``
attribute, so a seeded node is deterministic run to run; without ``seed`` the spec asks
for an auto-generated one and the generator takes fresh OS entropy. Other providers
cannot reproduce the stream: parity is on dtype and shape only (tolerance "any value"
is not expressible, so this is documented rather than promised as EXACT).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to

_FLOAT = 1


def _rng(ctx: ExecutionContext) -> np.random.Generator:
    seed = ctx.node.attr("seed")
    if seed is None:
        return np.random.default_rng()
    # the attribute is a float; its bit pattern keeps distinct seeds distinct
    return np.random.default_rng(int(np.float32(seed).view(np.uint32)))


def _out_dtype(ctx: ExecutionContext, like: np.ndarray | None) -> np.dtype:
    dt = ctx.node.attr("dtype")
    if dt is not None and int(dt) != 0:
        return np_dtype(int(dt))
    return np.dtype(like.dtype) if like is not None else np_dtype(_FLOAT)


def _shape(ctx: ExecutionContext, like: np.ndarray | None) -> tuple[int, ...]:
    if like is not None:
        return like.shape
    shape = ctx.node.attr("shape")
    if shape is None or any(d < 0 for d in shape):
        raise CpuKernel.fail(ctx, f"shape attribute must list non-negative dims, got {shape}")
    return tuple(shape)


class RandomUniform(CpuKernel):
    def __init__(self, op_type: str, *, like: bool, **kw: Any) -> None:
        super().__init__(op_type, **kw)
        self.like = like

    def run(self, ctx: ExecutionContext, *inputs: Any) -> np.ndarray:
        like = inputs[0] if self.like else None
        lo, hi = float(ctx.node.attr("low", 0.0)), float(ctx.node.attr("high", 1.0))
        u = _rng(ctx).random(_shape(ctx, like))
        return round_to(lo + (hi - lo) * u, _out_dtype(ctx, like))


class RandomNormal(CpuKernel):
    def __init__(self, op_type: str, *, like: bool, **kw: Any) -> None:
        super().__init__(op_type, **kw)
        self.like = like

    def run(self, ctx: ExecutionContext, *inputs: Any) -> np.ndarray:
        like = inputs[0] if self.like else None
        mean, scale = float(ctx.node.attr("mean", 0.0)), float(ctx.node.attr("scale", 1.0))
        z = _rng(ctx).normal(mean, scale, _shape(ctx, like))
        return round_to(z, _out_dtype(ctx, like))


class Bernoulli(CpuKernel):
    def run(self, ctx: ExecutionContext, p: np.ndarray) -> np.ndarray:
        pf = source_value(p)
        if ((pf < 0) | (pf > 1)).any():
            raise self.fail(ctx, "probabilities must lie in [0, 1]")
        return round_to(_rng(ctx).random(pf.shape) < pf, _out_dtype(ctx, p))


KERNELS: list[CpuKernel] = [
    RandomUniform("RandomUniform", like=False, since=1),
    RandomUniform("RandomUniformLike", like=True, since=1),
    RandomNormal("RandomNormal", like=False, since=1),
    RandomNormal("RandomNormalLike", like=True, since=1),
    Bernoulli("Bernoulli", since=15),
]
