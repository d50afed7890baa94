"""CUDA activations: Celu, Clip, Elu, Gelu, HardSigmoid, HardSwish, LeakyRelu, Mish, PRelu,
Relu, Selu, Shrink, Sigmoid, Softplus, Softsign, Swish, ThresholdedRelu (the ops of
cpu_reference/activation.py).

They are rows of the elementwise families (:class:`~.elementwise.Unary`,
:class:`~.elementwise.Binary`) and run the kernels of ``elementwise.cu`` (``relu_f32``,
``gelu_tanh_bf16``, ``clip_f16``, ...), bound and launched as every elementwise node is;
only Gelu, PRelu and Clip need a class of their own.

Parity: exact (float16 / bfloat16 / float32 evaluated in float64 and rounded once, like
cpu_reference; float64 inputs of libm-based activations are declined, see
:mod:`.elementwise`), with one exception: ``Gelu(approximate="tanh")`` promises
:func:`gelu_tanh_parity`, a tolerance. The reference's ``0.5 * x * (1 + tanh(u))`` cancels
for x << 0 (``tanh(u)`` near -1), so a one-ulp difference between CUDA's float64 ``tanh``
and numpy's (glibc's, or numpy's own SIMD one on AVX-512 hosts) becomes a large relative
difference in a result of ~1e-15 (float32 results millions of ulps apart, 4e-16 absolute,
on an H200 host).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from onnx_ep.core.kernel import NodeMeta, Parity, Support, TensorSpec
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    BoundRow,
    attr_str,
    dtype_names,
    prod,
    static_shape,
    suffix,
)
from onnx_ep.providers.cuda.kernels.elementwise import (
    FLOATS,
    NARROW_FLOATS,
    NUMERIC,
    SIGNED_INTS,
    Binary,
    BoundElementwise,
    Unary,
    broadcast_shape,
    known,
)

# ---------------------------------------------------------------- Gelu

#: |0.5 * x * (tanh_cuda(u) - tanh_ref(u))| for the |x| < 8 where 1 + tanh(u) is not 0:
#: 0.5 * 8 * (4 float64 ulps of 1), rounded up
GELU_TANH_ATOL = 1e-14


def gelu_tanh_parity(dtype: Any) -> Parity:
    """The promise of ``Gelu(approximate="tanh")`` for inputs of ``dtype``.

    Where ``1 + tanh(u)`` does not cancel, both sides round nearly the same float64 to
    the output type: equal, or one output ulp apart (``rtol`` = the type's ulp of 1, an
    upper bound of one ulp relative to the value). Where it cancels (x << 0) the float64
    results differ by up to :data:`GELU_TANH_ATOL` absolute (a few float64 ulps of
    ``tanh`` near -1, times ``0.5 * |x|``), plus that rounding; float16 also gets its
    smallest subnormal (2^-24) for results that round to 0 on one side only.
    """
    dt = np.dtype(dtype)
    if dt == np.float16:
        return Parity.tolerance(2.0 ** -10, GELU_TANH_ATOL + 2.0 ** -24)
    if dt == BF16:
        return Parity.tolerance(2.0 ** -7, GELU_TANH_ATOL)
    return Parity.tolerance(2.0 ** -23, GELU_TANH_ATOL)


class Gelu(Unary):
    """Gelu: ``approximate="tanh"`` runs ``gelu_tanh_<dtype>`` and promises
    :func:`gelu_tanh_parity`; ``"none"`` runs the erf form (exact)."""

    def supports(self, meta: NodeMeta) -> Support:
        verdict = super().supports(meta)
        if not verdict:
            return verdict
        approx = attr_str(meta.attr("approximate", "none"))
        if approx not in ("none", "tanh"):
            return Support.no(f"approximate={approx!r} is not 'none' or 'tanh'")
        return Support.YES

    def symbol_for(self, meta: NodeMeta) -> str:
        return "gelu_tanh" if attr_str(meta.attr("approximate", "none")) == "tanh" else \
            self.symbol

    def bind(self, meta: NodeMeta) -> BoundElementwise:
        bound = super().bind(meta)
        if self.symbol_for(meta) == "gelu_tanh":
            bound.parity = gelu_tanh_parity(meta.inputs[0].dtype)  # type: ignore[union-attr]
        return bound


# ---------------------------------------------------------------- PRelu


class PRelu(Binary):
    """PRelu: ``slope`` broadcasts to ``x`` without growing it (unidirectional)."""

    def supports(self, meta: NodeMeta) -> Support:
        verdict = super().supports(meta)
        if not verdict:
            return verdict
        x, slope = meta.inputs
        assert x is not None and slope is not None
        if len(slope.shape) > len(x.shape):
            return Support.no(f"slope rank {len(slope.shape)} exceeds X rank {len(x.shape)}")
        if static_shape(x) is not None and static_shape(slope) is not None and \
                broadcast_shape(x.shape, slope.shape) != tuple(x.shape):
            return Support.no(f"slope shape {tuple(slope.shape)} must broadcast to X shape "
                              f"{tuple(x.shape)} without growing it")
        return Support.YES


# ---------------------------------------------------------------- Clip


class Clip(BoundRow):
    """``min(max(x, lo), hi)``: bounds are attributes ``min``/``max`` before opset 11 and
    optional scalar inputs of x's dtype from opset 11.

    The input bounds stay on the device: the kernel reads them through their pointers (a
    null pointer is "no bound"), so nothing is copied to the host and capture is safe.
    Attribute bounds are rounded to x's dtype on the host at bind, as the reference rounds
    them. Exact for every dtype: the result is x or a bound (see elementwise.cu).
    """

    family = "clip"

    def __init__(self, op_type: str = "Clip", since: int = 1) -> None:
        super().__init__(op_type, since, Parity.EXACT)
        self.dtypes = NUMERIC

    def __repr__(self) -> str:
        return f"Clip({self.key})"

    def supports(self, meta: NodeMeta) -> Support:
        if not 1 <= len(meta.inputs) <= 3 or not known(meta.inputs[0]):
            return Support.no("needs an input x of known dtype and rank and at most two bounds")
        x = meta.inputs[0]
        assert x is not None
        if x.dtype not in self.dtypes:
            return Support.no(f"dtype {x.dtype} not in ({dtype_names(self.dtypes)})")
        if meta.opset < 11:
            if len(meta.inputs) > 1:
                return Support.no(f"opset {meta.opset} < 11 takes the bounds as attributes")
            if x.dtype not in FLOATS:
                return Support.no(f"dtype {x.dtype} before opset 11 (floats only)")
            return Support.YES
        for name, spec in zip(("min", "max"), meta.inputs[1:]):
            if spec is None:
                continue
            if spec.dtype != x.dtype:
                return Support.no(f"{name} must have x's dtype {x.dtype}, got {spec.dtype}")
            if static_shape(spec) is None or prod(spec.shape) != 1:
                return Support.no(f"{name} must be a scalar of static shape, got {spec.shape}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        x = meta.inputs[0]
        assert x is not None
        return [TensorSpec(x.dtype, x.shape)]

    def bind(self, meta: NodeMeta) -> BoundElementwise:
        dtype = meta.inputs[0].dtype  # type: ignore[union-attr]
        scalars = (-np.inf, np.inf)
        if meta.opset < 11:
            with np.errstate(all="ignore"):
                scalars = tuple(  # type: ignore[assignment]
                    float(np.asarray(meta.attr(name, default)).astype(dtype).astype(np.float64))
                    for name, default in (("min", -np.inf), ("max", np.inf)))
        return BoundElementwise(self, f"clip_{suffix(dtype)}", scalars)


# ---------------------------------------------------------------- the table


def f32(value: float) -> float:
    """An attribute default as ONNX stores it (a float32 widened), as cpu_reference uses it."""
    return float(np.float32(value))


_UNARY: list[Unary] = [
    Unary("Relu", "relu", FLOATS | SIGNED_INTS),
    Unary("LeakyRelu", "leakyrelu", FLOATS, attrs=(("alpha", f32(0.01)),)),
    Unary("HardSigmoid", "hardsigmoid", FLOATS, attrs=(("alpha", f32(0.2)), ("beta", 0.5))),
    Unary("HardSwish", "hardswish", FLOATS, since=14),
    Unary("Softsign", "softsign", FLOATS),
    Unary("ThresholdedRelu", "thresholdedrelu", FLOATS, since=10, attrs=(("alpha", 1.0),)),
    Unary("Shrink", "shrink", FLOATS, since=9, attrs=(("lambd", 0.5), ("bias", 0.0))),
    # libm functions: float64 in, rounded once; float64 inputs declined
    Unary("Elu", "elu", NARROW_FLOATS, attrs=(("alpha", 1.0),)),
    Unary("Selu", "selu", NARROW_FLOATS,
          attrs=(("alpha", f32(1.67326319217681884765625)),
                 ("gamma", f32(1.05070102214813232421875)))),
    Unary("Sigmoid", "sigmoid", NARROW_FLOATS),
    Unary("Softplus", "softplus", NARROW_FLOATS),
    Gelu("Gelu", "gelu", NARROW_FLOATS, since=20),
    Unary("Celu", "celu", NARROW_FLOATS, since=12, attrs=(("alpha", 1.0),)),
    Unary("Mish", "mish", NARROW_FLOATS, since=18),
    Unary("Swish", "swish", NARROW_FLOATS, since=24, attrs=(("alpha", 1.0),)),
]

ROWS: Mapping[str, Any] = {k.key.op_type: k for k in (*_UNARY, PRelu("PRelu", "prelu", NUMERIC))}
KERNELS: list[Any] = [*ROWS.values(), Clip()]
