"""Gated activations of the fusion pass's own domain (:data:`onnx_ep.core.fusion.FUSED_DOMAIN`)
on CUDA, the counterpart of cpu_reference/gated.py.

SiluMul(G, U) -> Y = G * sigmoid(G) * U (``gated.cu``): G and U of one shape, one launch
per call, a grid-stride loop over 16-byte packs (ep_flat.cuh) when the three pointers are
aligned to a pack, else over elements. float32 / float16 / bfloat16.

Parity: :data:`SILU_MUL_PARITY` for float32, one output ulp for float16 / bfloat16
(:func:`~.base.narrow_tolerance`). The kernel computes in float32 with ``expf`` (at most 2
ulp) and IEEE division and products (``--fmad=false``), rounded once to T, where the
reference rounds its float64 value once. In units of eps = 2^-24 (half a float32 ulp,
relative), to first order:

- g >= 0: ``e = expf(-g)`` 4 eps, ``1 + e`` 3 eps (e's error weighted by e / (1 + e) <= 1/2,
  and one rounding), ``s = 1 / (1 + e)`` 4 eps, then ``s * u`` and ``g * (s * u)`` one
  rounding each: 6 eps;
- -87 <= g < 0: ``s = e / (1 + e)`` 8 eps, then the two products: 10 eps;
- plus the reference's own rounding to float32: at most 11 eps (6.6e-7) relative, under
  ``rtol`` = 2^-20 (16 eps);
- a subnormal ``s * u`` is off by up to 2^-150, times ``|g| <= 87``, and the final roundings
  of both sides add 2^-149: under ``atol`` = 2^-143.

``expf`` rather than ``__expf``: the fast one is off by 2 + 1.173 |g| ulp (about 100 ulp at
g = -87) and flushes subnormals; the kernel moves 3 x sizeof(T) bytes per element, so the
accurate one costs no measurable time. Where float32 cannot keep the bound, the element takes
the reference's float64 recipe instead (``silu_mul_ref`` in gated.cu): g < -87, where
``expf(g)`` is subnormal, and results that are not finite or lie within the bound of T's
overflow threshold (so the float32 rounding never turns a finite reference into inf or the
reverse, and the IEEE special cases are the reference's).

Bound nodes replay a prebuilt launch per (stream, pointers, shapes)
(:class:`~.base.BoundLaunch`): no allocation, synchronization or host copy, so the kernel
is capture-supported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, OpKey, Parity, Support, TensorSpec
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    I64,
    PTR,
    BoundLaunch,
    BoundRow,
    CudaKernel,
    dtype_support,
    flat_geometry,
    launch_geometry,
    suffix,
)

SOURCE = "gated"
SILU_MUL_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float16, BF16))
#: float32's promise (the module docstring derives it); narrow types widen it to one ulp
SILU_MUL_PARITY = Parity.tolerance(rtol=2.0 ** -20, atol=2.0 ** -143)
_INPUTS = ("G", "U")


def _shape_problem(g: Sequence[Any], u: Sequence[Any]) -> str | None:
    """Why shapes ``g`` and ``u`` are not one shape, or ``None``; symbolic dims (str or
    ``None``) are left to the run-time check."""
    if len(g) != len(u):
        return (f"G {tuple(g)} and U {tuple(u)} must have the same shape (SiluMul does not "
                f"broadcast): ranks {len(g)} and {len(u)} differ")
    for k, (a, b) in enumerate(zip(g, u)):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            return (f"G {tuple(g)} and U {tuple(u)} must have the same shape (SiluMul does "
                    f"not broadcast): dim {k} is {a} and {b}")
    return None


class SiluMul(BoundRow):
    """``onnx_ep.fused::SiluMul``: Y = G * sigmoid(G) * U (see the module)."""

    source = SOURCE

    def __init__(self) -> None:
        super().__init__("SiluMul", since=1, parity=SILU_MUL_PARITY)
        self.key = OpKey(FUSED_DOMAIN, "SiluMul", 1)

    def supports(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) != 2:
            return Support.no(f"SiluMul takes 2 inputs (G, U), got {len(meta.inputs)}")
        for name, spec in zip(_INPUTS, meta.inputs):
            if spec is None:
                return Support.no(f"input {name} is not a tensor of known dtype and rank")
        g, u = meta.inputs
        assert g is not None and u is not None
        ok = dtype_support(g.dtype, SILU_MUL_DTYPES, "G")
        if not ok:
            return ok
        if u.dtype != g.dtype:
            return Support.no(f"input U is {u.dtype} but G is {g.dtype}; they must match")
        problem = _shape_problem(g.shape, u.shape)
        return Support.no(problem) if problem else Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        g = meta.inputs[0] if meta.inputs else None
        return [TensorSpec(g.dtype, g.shape) if g is not None else None]

    def bind(self, meta: NodeMeta) -> BoundSiluMul:
        g = meta.inputs[0]
        assert g is not None
        return BoundSiluMul(self, np.dtype(g.dtype))


class BoundSiluMul(BoundLaunch):
    """One SiluMul node: the symbol of its dtype, its promise, a prebuilt launch per shapes."""

    source = SOURCE

    def __init__(self, row: SiluMul, dtype: np.dtype) -> None:
        super().__init__(row, f"silu_mul_{suffix(dtype)}")
        self.dtype = dtype
        self.parity = row.parity_for(dtype)

    def check(self, ctx: ExecutionContext, inputs: Sequence[Any], y: Any) -> None:
        """Raise a NodeError unless ``inputs`` and ``y`` make a SiluMul of the bound dtype
        (run once per launch key, before its launch is built)."""
        if len(inputs) != 2 or any(t is None for t in inputs):
            raise self.fail(ctx, "SiluMul takes 2 inputs (G, U)")
        g, u = inputs
        for name, t in zip(_INPUTS, inputs):
            if np.dtype(t.dtype) != self.dtype:
                raise self.fail(ctx, f"input {name} is {np.dtype(t.dtype)}, the node was "
                                     f"placed for {self.dtype}")
        if tuple(g.shape) != tuple(u.shape):
            raise self.fail(ctx, f"G {tuple(g.shape)} and U {tuple(u.shape)} must have the "
                                 f"same shape (SiluMul does not broadcast)")
        if tuple(y.shape) != tuple(g.shape) or np.dtype(y.dtype) != self.dtype:
            raise self.fail(ctx, f"output is {np.dtype(y.dtype)} {tuple(y.shape)}, expected "
                                 f"G's {self.dtype} {tuple(g.shape)}")

    def launch_key(self, stream: Any, inputs: Sequence[Any], y: Any) -> tuple[Any, ...]:
        """The stream, output and input pointers and shapes."""
        g, u = inputs
        return (stream, y.ptr, y.shape, g.ptr, g.shape, u.ptr, u.shape)

    def geometry(self, n: int, inputs: Sequence[Any], y: Any
                 ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """The flat path's grid when every pointer is aligned to a 16-byte pack (the
        kernel's own test), else one thread per element."""
        size = self.dtype.itemsize
        operands = [(t.ptr, size, False) for t in inputs]
        flat = flat_geometry(n, operands, (y.ptr, size), lambda: self.wave(y.device))
        return flat if flat is not None else launch_geometry(n)

    def arguments(self, n: int, inputs: Sequence[Any], y: Any) -> list[tuple[Any, Any]]:
        g, u = inputs
        return [(int(g.ptr), PTR), (int(u.ptr), PTR), (int(y.ptr), PTR), (n, I64)]


KERNELS: list[CudaKernel] = [SiluMul()]
