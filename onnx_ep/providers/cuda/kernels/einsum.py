"""Einsum on CUDA (einsum.cu): one thread per output element, float64 sums, one rounding.

The equation is parsed on the host with the real input shapes (``...`` broadcast from
the right as numpy does, repeated letters in one operand take a diagonal, implicit
output = ellipsis dims then the letters used once, sorted) into :class:`EinsumGeo`: the
letters' sizes and each operand's stride per letter. Up to 4 operands and 16 letters;
float32, float16, bfloat16, float64.

Parity: the reference runs numpy's einsum in float32 (narrow floats widened) in its own
order, promised to ``rtol=1e-5, atol=1e-6``; the float64 sums here stay within that
(narrow outputs: one more output ulp).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import attrs

from onnx_ep.core.kernel import NodeMeta, Parity, Support, TensorSpec
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    FLOATS,
    I64,
    PTR,
    CudaKernel,
    contiguous_strides,
    dtype_support,
    grid_1d,
    prod,
    struct_arg,
    suffix,
)

LETTERS = 16
OPERANDS = 4
EINSUM_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)


class EinsumGeo(ctypes.Structure):
    """``struct EinsumGeo`` of einsum.cu."""

    _fields_ = [("size", ctypes.c_int64 * LETTERS),
                ("stride", (ctypes.c_int64 * LETTERS) * OPERANDS),
                ("n_out", ctypes.c_int32), ("n_sum", ctypes.c_int32), ("n_ops", ctypes.c_int32)]


@attrs.frozen
class EinsumPlan:
    """Letters (output ones first), their sizes, each operand's stride per letter."""

    letters: tuple[str, ...]
    sizes: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]
    n_out: int

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.sizes[: self.n_out]

    @property
    def n_sum(self) -> int:
        return prod(self.sizes[self.n_out:])

    def geo(self) -> EinsumGeo:
        g = EinsumGeo()
        for i, s in enumerate(self.sizes):
            g.size[i] = s
        for k, row in enumerate(self.strides):
            for i, s in enumerate(row):
                g.stride[k][i] = s
        g.n_out, g.n_sum, g.n_ops = self.n_out, len(self.sizes) - self.n_out, len(self.strides)
        return g


def _labels(term: str, rank: int, ell_rank: int) -> list[str]:
    if "..." not in term:
        if len(term) != rank:
            raise ValueError(f"term {term!r} has {len(term)} letters for rank {rank}")
        return list(term)
    head, _, tail = term.partition("...")
    n_ell = rank - len(head) - len(tail)
    if n_ell < 0 or "." in head + tail:
        raise ValueError(f"term {term!r} does not fit rank {rank}")
    return list(head) + [f"@{ell_rank - n_ell + t}" for t in range(n_ell)] + list(tail)


def einsum_plan(equation: str, shapes: Sequence[Sequence[int]]) -> EinsumPlan:
    """THE Einsum geometry for ``equation`` on ``shapes``.

    :raises ValueError: the equation does not fit the shapes, or exceeds the kernel's
        4 operands / 16 letters.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"equation {equation!r} has {len(terms)} operands, got {len(shapes)}")
    if len(shapes) > OPERANDS:
        raise ValueError(f"{len(shapes)} operands (the cuda Einsum takes at most {OPERANDS})")
    ell_rank = max([len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)
                    if "..." in t] or [0])
    labels = [_labels(t, len(s), ell_rank) for t, s in zip(terms, shapes)]
    sizes: dict[str, int] = {}
    for lab, shape in zip(labels, shapes):
        for name, dim in zip(lab, shape):
            dim = int(dim)
            old = sizes.get(name, 1)
            if old != dim and 1 not in (old, dim):
                raise ValueError(f"letter {name!r} has sizes {old} and {dim}")
            sizes[name] = max(old, dim) if 1 in (old, dim) else dim
    ell = [f"@{t}" for t in range(ell_rank)]
    if arrow:
        out = _labels(rhs, len(rhs.replace("...", "")) + ell_rank, ell_rank) \
            if "..." in rhs else list(rhs)
        for name in out:
            if name not in sizes:
                raise ValueError(f"output letter {name!r} is not in any input")
    else:
        counts: dict[str, int] = {}
        for lab in labels:
            for name in lab:
                counts[name] = counts.get(name, 0) + 1
        out = ell + sorted(n for n, c in counts.items() if c == 1 and not n.startswith("@"))
    if len(set(out)) != len(out):
        raise ValueError(f"output {rhs!r} repeats a letter")
    summed = [n for n in sizes if n not in out]
    order = list(out) + summed
    if len(order) > LETTERS:
        raise ValueError(f"{len(order)} letters (the cuda Einsum takes at most {LETTERS})")
    strides = []
    for lab, shape in zip(labels, shapes):
        st = dict.fromkeys(order, 0)
        for name, dim, s in zip(lab, shape, contiguous_strides(shape)):
            if int(dim) != 1:
                st[name] += s
        strides.append(tuple(st[n] for n in order))
    return EinsumPlan(tuple(order), tuple(sizes[n] for n in order), tuple(strides), len(out))


class Einsum(CudaKernel):
    source = "einsum"
    parity = EINSUM_PARITY

    def supports(self, meta: NodeMeta) -> Support:
        if not meta.inputs or any(s is None for s in meta.inputs):
            return Support.no("every input must be a tensor")
        dt = meta.inputs[0].dtype
        s = dtype_support(dt, FLOATS)
        if not s:
            return s
        if any(x.dtype != dt for x in meta.inputs):
            return Support.no("inputs must share one dtype")
        if len(meta.inputs) > OPERANDS:
            return Support.no(f"{len(meta.inputs)} operands (at most {OPERANDS} on cuda)")
        if not meta.attr("equation"):
            return Support.no("attribute 'equation' is required")
        if all(all(isinstance(d, int) for d in x.shape) for x in meta.inputs):
            try:
                einsum_plan(str(meta.attr("equation")), [x.shape for x in meta.inputs])
            except ValueError as e:
                return Support.no(str(e))
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        if not all(all(isinstance(d, int) for d in x.shape) for x in meta.inputs):
            return [None]
        plan = einsum_plan(str(meta.attr("equation")), [x.shape for x in meta.inputs])
        return [TensorSpec(meta.inputs[0].dtype, plan.out_shape)]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        y = outputs[0]
        try:
            plan = einsum_plan(str(ctx.node.attr("equation")), [x.shape for x in inputs])
        except ValueError as e:
            raise self.fail(ctx, str(e)) from None
        if tuple(y.shape) != plan.out_shape:
            raise self.fail(ctx, f"output was planned as {tuple(y.shape)}, the equation "
                                 f"gives {plan.out_shape}")
        if y.size == 0:
            return
        ptrs: list[Any] = [x.ptr for x in inputs] + [0] * (OPERANDS - len(inputs))
        n = y.size
        self.launch(self.function(f"einsum_{suffix(y.dtype)}", y),
                    grid_1d(n), (BLOCK, 1, 1),
                    [*((p, PTR) for p in ptrs), (y.ptr, PTR), struct_arg(plan.geo()), (n, I64),
                     (plan.n_sum, I64)], ctx.stream)


KERNELS: list[CudaKernel] = [Einsum("Einsum", since=12)]
