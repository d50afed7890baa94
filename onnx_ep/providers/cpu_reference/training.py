"""ai.onnx.preview.training optimizers: Adagrad, Adam, Momentum (standard and nesterov).

Inputs are ``R, T, X_1..X_n, G_1..G_n, <state>_1..n``; each tensor group updates
independently. Computed in float64 and rounded once to each tensor's dtype.
Parity: tolerance (sqrt / pow chains).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel

DOMAIN = "ai.onnx.preview.training"


class _Optimizer(CpuKernel):
    parity = Parity.tolerance(1e-6, 1e-7)
    n_states = 1

    def run(self, ctx: ExecutionContext, r: np.ndarray, t: np.ndarray, *groups: Any) -> Any:
        per = 2 + self.n_states
        if len(groups) % per:
            raise self.fail(ctx, f"expected R, T then {per} equal groups (X, G, states), got "
                                 f"{len(groups)} tensors after R and T")
        n = len(groups) // per
        cols = [groups[k * n:(k + 1) * n] for k in range(per)]
        rate = float(np.asarray(r).reshape(-1)[0])
        step = int(np.asarray(t).reshape(-1)[0])
        outs: list[list[np.ndarray]] = [[] for _ in range(1 + self.n_states)]
        for i in range(n):
            x = cols[0][i]
            new = self.update(ctx, rate, step, *(np.asarray(c[i], dtype=np.float64)
                                                 for c in cols))
            for k, v in enumerate(new):
                outs[k].append(np.asarray(v).astype(cols[0 if k == 0 else k + 1][i].dtype))
            if outs[0][-1].shape != x.shape:
                raise self.fail(ctx, f"X_{i} and its gradient/state shapes differ")
        return tuple(v for group in outs for v in group)

    def update(self, ctx: ExecutionContext, rate: float, step: int,
               *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        raise NotImplementedError


class Adagrad(_Optimizer):
    n_states = 1

    def update(self, ctx, rate, step, x, g, h):  # type: ignore[no-untyped-def]
        a = ctx.node.attr
        r = rate / (1 + step * float(a("decay_factor", 0.0)))
        g = float(a("norm_coefficient", 0.0)) * x + g
        h = h + g * g
        return x - r * g / (np.sqrt(h) + float(a("epsilon", 0.0))), h


class Adam(_Optimizer):
    n_states = 2

    def update(self, ctx, rate, step, x, g, v, h):  # type: ignore[no-untyped-def]
        a = ctx.node.attr
        alpha, beta = float(a("alpha", 0.9)), float(a("beta", 0.999))
        g = float(a("norm_coefficient", 0.0)) * x + g
        v = alpha * v + (1 - alpha) * g
        h = beta * h + (1 - beta) * g * g
        r = rate * np.sqrt(1 - beta ** step) / (1 - alpha ** step) if step > 0 else rate
        x = x - r * (v / (np.sqrt(h) + float(a("epsilon", 0.0))))
        return (1 - float(a("norm_coefficient_post", 0.0))) * x, v, h


class Momentum(_Optimizer):
    n_states = 1

    def update(self, ctx, rate, step, x, g, v):  # type: ignore[no-untyped-def]
        a = ctx.node.attr
        mode = a("mode", "standard")
        if mode not in ("standard", "nesterov"):
            raise self.fail(ctx, f"mode must be 'standard' or 'nesterov', got {mode!r}")
        alpha, beta = float(a("alpha")), float(a("beta"))
        g = float(a("norm_coefficient")) * x + g
        v = alpha * v + (beta if step > 0 else 1.0) * g
        if mode == "nesterov":
            return x - rate * (g + alpha * v), v
        return x - rate * v, v


KERNELS: list[CpuKernel] = [
    Adagrad("Adagrad", since=1, domain=DOMAIN),
    Adam("Adam", since=1, domain=DOMAIN),
    Momentum("Momentum", since=1, domain=DOMAIN),
]
