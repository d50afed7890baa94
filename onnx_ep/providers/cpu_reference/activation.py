"""Activation functions: Relu family, sigmoids, Gelu, Mish, Swish, Shrink, Clip, SwiGLU.

Parity (docs/PARITY.md): float inputs (float16, bfloat16, float32, float64) are computed
in float64 and rounded once to the input dtype (:mod:`.numerics`), so every kernel here is
``Parity.EXACT`` for a provider that does the same. Integer inputs (Relu, PRelu, Shrink,
Clip) are exact. Float attribute defaults are the float32 values ONNX stores
(``LeakyRelu`` alpha is 0.009999999776482582, not 0.01). SwiGLU is computed in float64
and rounded once to the input type, too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel, check_same_dtype
from onnx_ep.providers.cpu_reference.elementwise import (
    FLOAT,
    NUMERIC,
    SIGNED,
    check_dtype,
)
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to
from onnx_ep.providers.cpu_reference.numerics import (
    erfc,
    is_float,
    round_from_float64,
    sigmoid,
)


def f32(value: float) -> float:
    """An attribute default as ONNX stores it: a float32 widened to Python float."""
    return float(np.float32(value))


Attrs = Mapping[str, Any]


class Activation(CpuKernel):
    """``y = fn(x, attrs)``, one instance per table row.

    ``fn`` receives float64 for float inputs (rounded once afterwards) and the input
    array itself for integer inputs (its result is cast back to the input dtype).

    :param defaults: attribute defaults, filled in before ``fn`` sees ``attrs``.
    :param selects: ``fn`` only selects among its inputs and constants (Relu), so numpy
        float inputs are computed in their own dtype: bit-identical to the float64
        recipe, without the two conversions.
    """

    def __init__(self, op_type: str, fn: Callable[[np.ndarray, Attrs], np.ndarray], *,
                 since: int = 1, accepts: str = FLOAT,
                 defaults: Mapping[str, Any] | None = None, selects: bool = False) -> None:
        super().__init__(op_type, since=since, parity=Parity.EXACT)
        self.fn = fn
        self.accepts = accepts
        self.defaults = dict(defaults or {})
        self.selects = selects

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        check_dtype(self, ctx, self.accepts, x)
        attrs = {**self.defaults, **ctx.node.attrs}
        with np.errstate(all="ignore"):
            if is_float(x.dtype) and not (self.selects and x.dtype.kind == "f"):
                return round_from_float64(self.fn(source_value(x), attrs), x.dtype)
            return np.asarray(self.fn(x, attrs), dtype=x.dtype)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _gelu(x: np.ndarray, a: Attrs) -> np.ndarray:
    approximate = a["approximate"]
    if approximate == "tanh":
        inner = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    # x * Phi(x) through erfc: 1 + erf(x) cancels for x << 0
    return 0.5 * x * erfc(-x / np.sqrt(2.0))


def _shrink(x: np.ndarray, a: Attrs) -> np.ndarray:
    lambd, bias = a["lambd"], a["bias"]
    x64 = x.astype(np.float64)
    return np.where(x64 < -lambd, x64 + bias, np.where(x64 > lambd, x64 - bias, 0.0))


_TABLE: list[CpuKernel] = [
    Activation("Relu", lambda x, a: np.maximum(x, x.dtype.type(0)), accepts=SIGNED,
               selects=True),
    Activation("LeakyRelu", lambda x, a: np.where(x < 0, x * a["alpha"], x),
               defaults={"alpha": f32(0.01)}),
    Activation("Elu", lambda x, a: np.where(x < 0, a["alpha"] * np.expm1(x), x),
               defaults={"alpha": 1.0}),
    Activation("Selu",
               lambda x, a: a["gamma"] * np.where(x <= 0, a["alpha"] * np.expm1(x), x),
               defaults={"alpha": f32(1.67326319217681884765625),
                         "gamma": f32(1.05070102214813232421875)}),
    Activation("Celu",
               lambda x, a: np.maximum(x, 0.0) + np.minimum(0.0, a["alpha"]
                                                            * np.expm1(x / a["alpha"])),
               since=12, defaults={"alpha": 1.0}),
    Activation("Sigmoid", lambda x, a: sigmoid(x)),
    Activation("HardSigmoid", lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0.0, 1.0),
               defaults={"alpha": f32(0.2), "beta": 0.5}),
    Activation("HardSwish", lambda x, a: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0), since=14),
    Activation("Softplus", lambda x, a: _softplus(x)),
    Activation("Softsign", lambda x, a: x / (1.0 + np.abs(x))),
    Activation("Gelu", _gelu, since=20, defaults={"approximate": "none"}),
    Activation("Mish", lambda x, a: x * np.tanh(_softplus(x)), since=18),
    Activation("ThresholdedRelu", lambda x, a: np.where(x > a["alpha"], x, 0.0), since=10,
               defaults={"alpha": 1.0}),
    Activation("Shrink", _shrink, since=9, accepts=NUMERIC,
               defaults={"lambd": 0.5, "bias": 0.0}),
    Activation("Swish", lambda x, a: x * sigmoid(a["alpha"] * x), since=24,
               defaults={"alpha": 1.0}),
]


class PRelu(CpuKernel):
    """``x < 0 ? slope * x : x``; ``slope`` broadcasts to ``x`` (unidirectionally)."""

    def run(self, ctx: ExecutionContext, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
        check_dtype(self, ctx, NUMERIC, x, slope)
        try:
            shape = np.broadcast_shapes(x.shape, slope.shape)
        except ValueError as exc:
            raise self.fail(ctx, f"slope shape {slope.shape} does not broadcast to X shape "
                                 f"{x.shape}: {exc}")
        if shape != x.shape:
            raise self.fail(ctx, f"slope shape {slope.shape} must broadcast to X shape "
                                 f"{x.shape} without growing it")
        if is_float(x.dtype):
            x64, s64 = source_value(x), source_value(slope)
            return round_from_float64(np.where(x64 < 0, x64 * s64, x64), x.dtype)
        return np.asarray(np.where(x < 0, x * slope, x), dtype=x.dtype)


class Clip(CpuKernel):
    """``min(max(x, lo), hi)``; bounds are attributes before opset 11, optional inputs after.

    When ``lo > hi`` every element becomes ``hi`` (the ONNX rule). NaN inputs stay NaN.
    """

    def run(self, ctx: ExecutionContext, x: np.ndarray, lo: Any = None,
            hi: Any = None) -> np.ndarray:
        check_dtype(self, ctx, NUMERIC, x)
        if ctx.node.opset < 11:
            lo = np.asarray(ctx.node.attr("min", -np.inf))
            hi = np.asarray(ctx.node.attr("max", np.inf))
        for name, bound in (("min", lo), ("max", hi)):
            if bound is not None and bound.size != 1:
                raise self.fail(ctx, f"{name} must be a scalar, got shape {bound.shape}")
        dtype = x.dtype
        if is_float(dtype):
            # bounds are rounded to the input dtype first, as a typed input would be
            y = source_value(x)
            if lo is not None:
                y = np.maximum(y, _as(lo, dtype))
            if hi is not None:
                y = np.minimum(y, _as(hi, dtype))
            return round_from_float64(y, dtype)
        y = x
        if lo is not None:
            y = np.maximum(y, np.asarray(lo).reshape(()).astype(dtype))
        if hi is not None:
            y = np.minimum(y, np.asarray(hi).reshape(()).astype(dtype))
        return np.asarray(y, dtype=dtype)


def _as(bound: np.ndarray, dtype: np.dtype) -> np.float64:
    return source_value(round_to(np.asarray(bound).reshape(()), dtype))


class SwiGLU(CpuKernel):
    """``Y = A * sigmoid(alpha * A) * B``; A and B of one shape, no broadcasting."""

    def run(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dtype = check_same_dtype(self, ctx, A=a, B=b)
        if a.shape != b.shape:
            raise self.fail(ctx, f"A {a.shape} and B {b.shape} must have the same shape "
                                 f"(SwiGLU does not broadcast)")
        alpha = float(ctx.node.attr("alpha", 1.0))
        a64, b64 = source_value(a), source_value(b)
        with np.errstate(all="ignore"):
            y = a64 * sigmoid(alpha * a64) * b64
        return round_from_float64(y, dtype)


KERNELS: list[CpuKernel] = [*_TABLE, PRelu("PRelu", since=1), Clip("Clip", since=1),
                            SwiGLU("SwiGLU", since=28)]
