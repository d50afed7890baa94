"""Recurrent layers: RNN, GRU (linear_before_reset), LSTM (peepholes, input_forget).

All three share: directions (forward / reverse / bidirectional), ``layout`` (0: seq-major,
1: batch-major), per-batch ``sequence_lens`` (steps past a sequence's end leave the state
unchanged and write zeros to Y; reverse runs over each sequence's own valid steps),
``clip`` and configurable activations with ``activation_alpha`` / ``activation_beta``.

The Python loop runs over time steps only: step t needs the hidden state of step t-1,
so the recurrence cannot be vectorized over time; batch and hidden units are vectorized.
Numerics: computed in float64 and rounded once to the input dtype. Parity: tolerance
(matmul summation order and transcendental chains over many steps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to

Activation = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


#: name -> (number of parameters, defaults, builder)
_ACTIVATIONS: dict[str, tuple[int, tuple[float, ...], Callable[..., Activation]]] = {
    "relu": (0, (), lambda: lambda x: np.maximum(x, 0)),
    "tanh": (0, (), lambda: np.tanh),
    "sigmoid": (0, (), lambda: _sigmoid),
    "softsign": (0, (), lambda: lambda x: x / (1 + np.abs(x))),
    "softplus": (0, (), lambda: lambda x: np.logaddexp(0, x)),
    "affine": (2, (1.0, 0.0), lambda a, b: lambda x: a * x + b),
    "leakyrelu": (1, (0.01,), lambda a: lambda x: np.where(x >= 0, x, a * x)),
    "thresholdedrelu": (1, (1.0,), lambda a: lambda x: np.where(x > a, x, 0.0)),
    "scaledtanh": (2, (1.0, 1.0), lambda a, b: lambda x: a * np.tanh(b * x)),
    "hardsigmoid": (2, (0.2, 0.5), lambda a, b: lambda x: np.clip(a * x + b, 0, 1)),
    "elu": (1, (1.0,), lambda a: lambda x: np.where(x >= 0, x, a * (np.exp(x) - 1))),
}


class _Recurrent(CpuKernel):
    """Shared driver; subclasses define the gate count, defaults and one cell step."""

    parity = Parity.tolerance(1e-5, 1e-6)
    n_gates = 1
    default_activations: tuple[str, ...] = ("Tanh",)

    def _activations(self, ctx: ExecutionContext, n_dirs: int) -> list[list[Activation]]:
        node = ctx.node
        names = node.attr("activations") or list(self.default_activations) * n_dirs
        per_dir = len(self.default_activations)
        if len(names) == per_dir and n_dirs == 2:
            names = list(names) * 2
        if len(names) != per_dir * n_dirs:
            raise self.fail(ctx, f"activations {names} must list {per_dir} function(s) per "
                                 f"direction ({n_dirs} direction(s))")
        alphas = list(node.attr("activation_alpha") or [])
        betas = list(node.attr("activation_beta") or [])
        fns: list[Activation] = []
        for name in names:
            spec = _ACTIVATIONS.get(name.lower())
            if spec is None:
                raise self.fail(ctx, f"unknown activation {name!r}; supported: "
                                     f"{', '.join(sorted(_ACTIVATIONS))}")
            n_params, defaults, build = spec
            params = list(defaults)
            if n_params >= 1 and alphas:
                params[0] = alphas.pop(0)
            if n_params >= 2 and betas:
                params[1] = betas.pop(0)
            fns.append(build(*params))
        return [fns[d * per_dir:(d + 1) * per_dir] for d in range(n_dirs)]

    def cell(self, ctx: ExecutionContext, xw: np.ndarray, h: np.ndarray, c: np.ndarray | None,
             r: np.ndarray, rb: np.ndarray, wb: np.ndarray, p: np.ndarray | None,
             fns: list[Activation], clip: float | None) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def run(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
            b: np.ndarray | None = None, seq_lens: np.ndarray | None = None,
            h0: np.ndarray | None = None, c0: np.ndarray | None = None,
            p: np.ndarray | None = None) -> Any:
        node = ctx.node
        direction = node.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise self.fail(ctx, f"direction must be forward, reverse or bidirectional, got "
                                 f"{direction!r}")
        n_dirs = 2 if direction == "bidirectional" else 1
        layout = int(node.attr("layout", 0))
        dtype = x.dtype
        xs = source_value(x)
        if layout:
            xs = xs.transpose(1, 0, 2)
        seq, batch, _ = xs.shape
        g = self.n_gates
        hidden = int(node.attr("hidden_size", 0)) or r.shape[-1]
        if w.shape[0] != n_dirs or w.shape[1] != g * hidden or r.shape != (n_dirs, g * hidden,
                                                                              hidden):
            raise self.fail(ctx, f"W {w.shape} / R {r.shape} do not match {n_dirs} "
                                 f"direction(s), {g} gate(s) of hidden_size {hidden}")
        bias = (np.zeros((n_dirs, 2 * g * hidden)) if b is None else source_value(b))

        def state0(v: np.ndarray | None) -> np.ndarray:
            if v is None:
                return np.zeros((n_dirs, batch, hidden))
            v = source_value(v)
            return v.transpose(1, 0, 2) if layout else v

        h_init, c_init = state0(h0), state0(c0)
        lens = (np.full(batch, seq, dtype=np.int64) if seq_lens is None
                else np.asarray(seq_lens).astype(np.int64).reshape(-1))
        if lens.shape != (batch,) or (lens < 0).any() or (lens > seq).any():
            raise self.fail(ctx, f"sequence_lens must have {batch} entries in [0, {seq}], got "
                                 f"{lens.tolist()}")
        clip = node.attr("clip")
        fns = self._activations(ctx, n_dirs)
        y = np.zeros((seq, n_dirs, batch, hidden))
        h_last = np.zeros((n_dirs, batch, hidden))
        c_last = np.zeros((n_dirs, batch, hidden))
        steps = np.arange(seq).reshape(-1, 1)
        valid = steps < lens.reshape(1, -1)                       # (seq, batch)
        cols = np.arange(batch)
        for d in range(n_dirs):
            reverse = direction == "reverse" or d == 1
            # time index each batch entry reads at step t (reverse: within its own length)
            t_idx = np.where(valid, lens - 1 - steps, steps) if reverse else \
                np.broadcast_to(steps, (seq, batch))
            xw = xs @ source_value(w[d]).T                         # (seq, batch, g*hidden)
            wb, rb = bias[d, :g * hidden], bias[d, g * hidden:]
            rd = source_value(r[d])
            pd = None if p is None else source_value(p[d])
            h, c = h_init[d], c_init[d]
            for t in range(seq):
                m = valid[t].reshape(-1, 1)
                h_new, c_new = self.cell(ctx, xw[t_idx[t], cols], h, c, rd, rb, wb, pd,
                                         fns[d], clip)
                h = np.where(m, h_new, h)
                if c_new is not None:
                    c = np.where(m, c_new, c)
                y[t_idx[t], d, cols] = np.where(m, h_new, 0.0)
            h_last[d], c_last[d] = h, c
        if layout:
            y_out = y.transpose(2, 0, 1, 3)
            h_out, c_out = h_last.transpose(1, 0, 2), c_last.transpose(1, 0, 2)
        else:
            y_out, h_out, c_out = y, h_last, c_last
        outs = [round_to(y_out, dtype), round_to(h_out, dtype), round_to(c_out, dtype)]
        return tuple(outs[:max(1, len(node.output_names))])


def _clip(v: np.ndarray, clip: float | None) -> np.ndarray:
    return v if clip is None else np.clip(v, -clip, clip)


class RNN(_Recurrent):
    n_gates = 1
    default_activations = ("Tanh",)

    def cell(self, ctx, xw, h, c, r, rb, wb, p, fns, clip):  # type: ignore[no-untyped-def]
        return fns[0](_clip(xw + h @ r.T + wb + rb, clip)), None


class GRU(_Recurrent):
    n_gates = 3
    default_activations = ("Sigmoid", "Tanh")

    def cell(self, ctx, xw, h, c, r, rb, wb, p, fns, clip):  # type: ignore[no-untyped-def]
        f, g = fns
        n = h.shape[-1]
        xz, xr, xh = xw[:, :n] + wb[:n], xw[:, n:2 * n] + wb[n:2 * n], xw[:, 2 * n:] + wb[2 * n:]
        rz, rr, rh = r[:n], r[n:2 * n], r[2 * n:]
        z = f(_clip(xz + h @ rz.T + rb[:n], clip))
        rt = f(_clip(xr + h @ rr.T + rb[n:2 * n], clip))
        if int(ctx.node.attr("linear_before_reset", 0)):
            hh = g(_clip(xh + rt * (h @ rh.T + rb[2 * n:]), clip))
        else:
            hh = g(_clip(xh + (rt * h) @ rh.T + rb[2 * n:], clip))
        return (1 - z) * hh + z * h, None


class LSTM(_Recurrent):
    n_gates = 4
    default_activations = ("Sigmoid", "Tanh", "Tanh")

    def cell(self, ctx, xw, h, c, r, rb, wb, p, fns, clip):  # type: ignore[no-untyped-def]
        f, g, hf = fns
        n = h.shape[-1]
        gates = xw + h @ r.T + wb + rb
        gi, go, gf, gc = (gates[:, k * n:(k + 1) * n] for k in range(4))
        pi, po, pf = (np.zeros(n),) * 3 if p is None else (p[:n], p[n:2 * n], p[2 * n:])
        i = f(_clip(gi + pi * c, clip))
        if int(ctx.node.attr("input_forget", 0)):
            fg = 1 - i
        else:
            fg = f(_clip(gf + pf * c, clip))
        c_new = fg * c + i * g(_clip(gc, clip))
        o = f(_clip(go + po * c_new, clip))
        return o * hf(c_new), c_new


KERNELS: list[CpuKernel] = [
    RNN("RNN", since=7),
    GRU("GRU", since=7),
    LSTM("LSTM", since=7),
]
