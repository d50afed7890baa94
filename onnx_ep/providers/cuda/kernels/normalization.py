"""Hardmax, LpNormalization, InstanceNormalization, GroupNormalization, BatchNormalization
and onnxruntime's RMS normalizations (SimplifiedLayerNormalization,
com.microsoft::SkipSimplifiedLayerNormalization) on CUDA (``normalization.cu``, which also
holds com.microsoft::SkipLayerNormalization's skip_layer_norm_*).

Each replays cpu_reference/normalization.py in its compute type W (float32 for float32 and
narrower, float64 for float64), one IEEE operation per reference step:

- Hardmax: EXACT (1 at the first maximum, the first NaN winning like ``np.argmax``).
- BatchNormalization inference: EXACT (gain = scale / sqrt(var + eps) in float64 rounded
  once to W, then (x - mean) * gain + bias in W). Training mode (opset 14+,
  ``training_mode=1``): batch statistics summed in double in another order than numpy's,
  so the reference's ``rtol=1e-4, atol=1e-5`` (+ one output ulp for float16/bfloat16).
- LpNormalization, InstanceNormalization, GroupNormalization: statistics summed in double
  and rounded once to W (the reference sums in W): ``rtol=1e-4, atol=1e-5`` (+ one ulp).

- SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization (:class:`RmsNorm`):
  float32 arithmetic throughout (the reference computes in float64): ``rtol=1e-4,
  atol=1e-5`` (+ one ulp for float16/bfloat16). float32, float16 and bfloat16 only, one
  launch per call, one block per row.
- com.microsoft::SkipLayerNormalization: skip_layer_norm_* of normalization.cu, the same
  machinery with the mean subtracted and an optional beta, in float64 like the reference;
  its kernel class, :class:`~.contrib_attention.SkipLayerNorm`, is registered beside
  cpu_reference's (contrib_attention.py).

Scale, B, mean and var must have X's dtype (declined otherwise). Statistics use one block
per row/channel with a fixed reduction tree: deterministic, no atomics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import NodeMeta, OpKey, Parity, Support, TensorSpec
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    BLOCK,
    F32,
    F64,
    FLOATS,
    I32,
    I64,
    PTR,
    CudaKernel,
    block_for,
    dtype_support,
    grid_1d,
    normalize_axis,
    optional_input,
    prod,
    replayed,
    static_shape,
    suffix,
)
from onnx_ep.providers.cuda.kernels.softmax import NORM_PARITY, softmax_geometry, vector_width

MAX_GRID = 65535 * 32


def _same_dtype(meta: NodeMeta, first: int = 1) -> Support:
    """Every present input from ``first`` on has input 0's dtype."""
    x = meta.inputs[0]
    for i in range(first, len(meta.inputs)):
        spec = meta.inputs[i]
        if meta.input_names and i < len(meta.input_names) and not meta.input_names[i]:
            continue
        if spec is None:
            return Support.no(f"input {i} is not a tensor of known dtype and rank")
        if spec.dtype != x.dtype:
            return Support.no(f"input {i} has dtype {spec.dtype}, X has {x.dtype}")
    return Support.YES


def _float_x(meta: NodeMeta, min_rank: int = 0) -> Support:
    x = meta.inputs[0] if meta.inputs else None
    if x is None:
        return Support.no("input is not a tensor of known dtype and rank")
    s = dtype_support(x.dtype, FLOATS)
    if not s:
        return s
    if len(x.shape) < min_rank:
        return Support.no(f"X must have rank >= {min_rank}, got {len(x.shape)}")
    return Support.YES


class _SameShape(CudaKernel):
    source = "normalization"

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        return [TensorSpec(x.dtype, x.shape)]

    def _axis(self, ctx: Any, a: int | None) -> int:
        if a is None:
            raise self.fail(ctx, f"axis {ctx.node.attr('axis')} is out of range")
        return a

    def _launch_rows(self, ctx: Any, prefix: str, x: Any, y: Any, outer: int, dim: int,
                     inner: int, extra: Sequence[tuple[Any, Any]] = ()) -> None:
        """One thread per (outer, inner) row of ``dim`` values, x to y."""
        self.launch(self.function(f"{prefix}_{suffix(x.dtype)}", x), grid_1d(outer * inner, BLOCK),
                    (BLOCK, 1, 1), [(x.ptr, PTR), (y.ptr, PTR), (outer, I64), (dim, I64),
                                    (inner, I64), *extra], ctx.stream)


def _axis_support(meta: NodeMeta, a: int | None) -> Support:
    if a is None:
        return Support.no(f"axis {meta.attr('axis')} is out of range")
    return Support.YES


class Hardmax(_SameShape):
    def __init__(self) -> None:
        super().__init__("Hardmax", since=1, parity=Parity.EXACT)

    @staticmethod
    def axis(meta: Any, rank: int) -> int | None:
        if meta.opset < 13:
            return normalize_axis(int(meta.attr("axis", 1)), max(rank, 1))
        return normalize_axis(int(meta.attr("axis", -1)), rank)

    def supports(self, meta: NodeMeta) -> Support:
        s = _float_x(meta)
        if not s:
            return s
        return _axis_support(meta, self.axis(meta, len(meta.inputs[0].shape)))

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        axis = self._axis(ctx, self.axis(ctx.node, x.ndim))
        outer, dim, inner = softmax_geometry(tuple(x.shape), axis, ctx.node.opset)
        self._launch_rows(ctx, "hardmax", x, y, outer, dim, inner)


class LpNormalization(_SameShape):
    def __init__(self) -> None:
        super().__init__("LpNormalization", since=1, parity=NORM_PARITY)

    def supports(self, meta: NodeMeta) -> Support:
        s = _float_x(meta)
        if not s:
            return s
        if int(meta.attr("p", 2)) not in (1, 2):
            return Support.no(f"p must be 1 or 2, got {meta.attr('p')}")
        return _axis_support(meta, normalize_axis(int(meta.attr("axis", -1)),
                                                  len(meta.inputs[0].shape)))

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        a = self._axis(ctx, normalize_axis(int(ctx.node.attr("axis", -1)), x.ndim))
        outer, dim, inner = prod(x.shape[:a]), int(x.shape[a]), prod(x.shape[a + 1:])
        self._launch_rows(ctx, "lp_norm", x, y, outer, dim, inner,
                          [(int(ctx.node.attr("p", 2)), I32)])


class GroupNorm(_SameShape):
    """InstanceNormalization (``groups`` = C, per-channel affine) and GroupNormalization
    (``num_groups``; scale/bias per group before opset 21, per channel from 21)."""

    def __init__(self, op_type: str, since: int) -> None:
        super().__init__(op_type, since=since, parity=NORM_PARITY)
        self.instance = op_type == "InstanceNormalization"

    def supports(self, meta: NodeMeta) -> Support:
        s = _float_x(meta, 3 if self.instance else 2)
        if not s:
            return s
        if not self.instance:
            if int(meta.attr("stash_type", 1)) != 1:
                return Support.no(f"stash_type={meta.attr('stash_type')} (only 1, float, is "
                                  f"implemented on cuda)")
            if int(meta.attr("num_groups", 0) or 0) <= 0:
                return Support.no(f"num_groups={meta.attr('num_groups')} must be > 0")
        return _same_dtype(meta)

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, scale, bias, y = inputs[0], inputs[1], inputs[2], outputs[0]
        if y.size == 0:
            return
        n, c = int(x.shape[0]), int(x.shape[1])
        spatial = prod(x.shape[2:])
        if self.instance:
            groups, per_group = c, False
        else:
            groups = int(ctx.node.attr("num_groups"))
            if c % groups:
                raise self.fail(ctx, f"num_groups={groups} must divide the channel count "
                                     f"of X (shape {tuple(x.shape)})")
            per_group = ctx.node.opset < 21
        per = groups if per_group else c
        if scale.size != per or bias.size != per:
            raise self.fail(ctx, f"scale and bias must have {per} elements, got "
                                 f"{scale.size} and {bias.size}")
        rows = n * groups
        self.launch(self.function(f"group_norm_{suffix(x.dtype)}", x),
                    (max(1, min(rows, MAX_GRID)), 1, 1), (BLOCK, 1, 1),
                    [(x.ptr, PTR), (scale.ptr, PTR), (bias.ptr, PTR), (y.ptr, PTR), (rows, I64),
                     (c // groups * spatial, I64), (groups, I64), (c // groups, I64),
                     (spatial, I64), (int(per_group), I32),
                     (float(ctx.node.attr("epsilon", 1e-5)), F64)], ctx.stream)


class BatchNormalization(CudaKernel):
    source = "normalization"

    def __init__(self) -> None:
        super().__init__("BatchNormalization", since=1, parity=NORM_PARITY)

    @staticmethod
    def training(meta: Any) -> bool:
        return meta.opset >= 14 and bool(meta.attr("training_mode", 0))

    def bind(self, meta: NodeMeta) -> CudaKernel:
        bound = super().bind(meta)
        if not self.training(meta):
            bound.parity = Parity.EXACT
        return bound

    def supports(self, meta: NodeMeta) -> Support:
        s = _float_x(meta, 2)
        if not s:
            return s
        if len(meta.inputs) != 5:
            return Support.no(f"needs 5 inputs, got {len(meta.inputs)}")
        n_out = len(meta.output_names)
        if n_out > 1 and not self.training(meta):
            return Support.no("extra outputs without training_mode (opset 14+) are not "
                              "implemented on cuda")
        if n_out > 3:
            return Support.no("the saved mean/var outputs of opset < 14 are not implemented")
        return _same_dtype(meta)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        outs: list[TensorSpec | None] = [TensorSpec(x.dtype, x.shape)]
        for spec in meta.inputs[3:5]:
            outs.append(TensorSpec(spec.dtype, spec.shape) if spec is not None else None)
        return outs[:max(len(meta.output_names), 1)]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, scale, bias, mean, var = inputs[:5]
        y = outputs[0]
        mean_out = outputs[1] if len(outputs) > 1 else None
        var_out = outputs[2] if len(outputs) > 2 else None
        if y.size == 0:
            return
        n, c = int(x.shape[0]), int(x.shape[1])
        for name, t in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
            if t.size != c:
                raise self.fail(ctx, f"{name} has {t.size} elements, expected C={c}")
        self.launch(self.function(f"batch_norm_{suffix(x.dtype)}", x),
                    (max(1, min(c, MAX_GRID)), 1, 1), (BLOCK, 1, 1),
                    [(x.ptr, PTR), (scale.ptr, PTR), (bias.ptr, PTR), (mean.ptr, PTR),
                     (var.ptr, PTR), (y.ptr, PTR),
                     (mean_out.ptr if mean_out is not None else 0, PTR),
                     (var_out.ptr if var_out is not None else 0, PTR), (n, I64), (c, I64),
                     (prod(x.shape[2:]), I64), (float(ctx.node.attr("epsilon", 1e-5)), F64),
                     (int(self.training(ctx.node)), I32),
                     (float(ctx.node.attr("momentum", 0.9)), F64)], ctx.stream)


# ---------------------------------------------------------------- RMS normalization

#: the dtypes rms_norm_* is built for (the reference runs float64)
RMS_FLOATS: frozenset[np.dtype] = frozenset(
    np.dtype(d) for d in (np.float32, np.float16, BF16))


def scale_period(scale: tuple[int, ...], x: tuple[int, ...], axis: int) -> int | None:
    """Elements of a normalized row after which ``scale`` repeats: the kernel reads scale
    element ``column % period``. ``None`` when ``scale`` is not, after its leading 1s, a
    suffix of the normalized shape ``x[axis:]`` (such broadcasts run on cpu_reference)."""
    norm = tuple(x[axis:])
    core = list(scale)
    while core and core[0] == 1:
        core.pop(0)
    if len(scale) > len(x) or len(core) > len(norm):
        return None
    if tuple(core) != norm[len(norm) - len(core):]:
        return None
    return prod(core)


def skip_rows(skip: tuple[int, ...], x: tuple[int, ...]) -> int | None:
    """Rows of ``x[-1]`` values that ``skip`` holds (row ``r`` of ``x`` adds skip row
    ``r % rows``), or ``None`` when onnxruntime would not add it: ``skip`` must be ``x``'s
    shape or a suffix of it keeping its last two dims, any leading dims 1 (for a 3-D input:
    (batch, seq, hidden), (1, seq, hidden) or (seq, hidden))."""
    keep = min(2, len(x))
    core = list(skip)
    while len(core) > keep and core[0] == 1:
        core.pop(0)
    if len(skip) > len(x) or len(core) < keep or tuple(core) != tuple(x[len(x) - len(core):]):
        return None
    return prod(core[:-1])


def rms_vector_width(itemsize: int, cols: int, period: int, ptrs: Sequence[int]) -> int:
    """Elements per load of rms_norm_*: 16 bytes' worth when rows, the scale period and
    every pointer keep 16-byte alignment, else 1."""
    v = vector_width(itemsize, cols, tuple(ptrs))
    return v if period % v == 0 else 1


class RmsNorm(CudaKernel):
    """SimplifiedLayerNormalization (``skip=False``; any ``axis``, scale a suffix of the
    normalized shape) and com.microsoft::SkipSimplifiedLayerNormalization (``skip=True``;
    the last axis, skip repeating over leading dims, optional bias): rms_norm_* of
    normalization.cu, launched once per call with one block per row."""

    source = "normalization"

    def __init__(self, op_type: str, *, domain: str, skip: bool) -> None:
        super().__init__(op_type, since=1, parity=NORM_PARITY)
        self.key = OpKey(domain, op_type, 1)
        self.skip = skip

    def axis(self, meta: Any, rank: int) -> int | None:
        if self.skip:
            return rank - 1 if rank >= 1 else None
        return normalize_axis(int(meta.attr("axis", -1)), rank)

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0] if meta.inputs else None
        if x is None:
            return Support.no("input 0 is not a tensor of known dtype and rank")
        s = dtype_support(x.dtype, RMS_FLOATS)
        if not s:
            return Support.no(f"{s.reason} (float64 runs on cpu_reference)")
        needed = 3 if self.skip else 2
        if len(meta.inputs) < needed:
            return Support.no(f"needs at least {needed} inputs, got {len(meta.inputs)}")
        names = meta.input_names
        for i, spec in enumerate(meta.inputs[1:], start=1):
            if names and i < len(names) and not names[i]:
                continue
            if spec is None:
                return Support.no(f"input {i} is not a tensor of known dtype and rank")
            if spec.dtype != x.dtype:
                return Support.no(f"input {i} has dtype {spec.dtype}, input 0 has {x.dtype} "
                                  f"(mixed types are not implemented on cuda)")
        a = self.axis(meta, len(x.shape))
        if a is None:
            return Support.no(f"axis {meta.attr('axis', -1)} is out of range for rank "
                              f"{len(x.shape)}")
        if not self.skip and int(meta.attr("stash_type", 1)) != 1:
            return Support.no(f"stash_type={meta.attr('stash_type')} (only 1, float, is "
                              f"implemented on cuda)")
        xs = static_shape(x)
        if xs is None:
            return Support.YES
        return self._shapes_support(xs, a, [static_shape(t) if t is not None else None
                                            for t in meta.inputs[1:]])

    def _shapes_support(self, x: tuple[int, ...], a: int,
                        rest: Sequence[tuple[int, ...] | None]) -> Support:
        """Shape checks of the inputs after X (``None``: unknown or missing, not checked)."""
        if not self.skip:
            scale = rest[0] if rest else None
            if scale is not None and scale_period(scale, x, a) is None:
                return Support.no(f"scale of shape {scale} is not a suffix of the normalized "
                                  f"shape {x[a:]} (other broadcasts run on cpu_reference)")
            return Support.YES
        skip = rest[0] if rest else None
        if skip is not None and skip_rows(skip, x) is None:
            return Support.no(f"skip of shape {skip} must have input's shape {x} or its "
                              f"last two dims with any leading dims 1")
        for name, t in zip(("gamma", "bias"), rest[1:3]):
            if t is not None and t != (x[-1],):
                return Support.no(f"{name} must have shape ({x[-1]},), got {t}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        rank = len(x.shape)
        a = self.axis(meta, rank)
        stat = TensorSpec(np.float32, tuple(x.shape[:a]) + (1,) * (rank - a))
        y = TensorSpec(x.dtype, x.shape)
        outs: list[TensorSpec | None] = [y, stat, stat, y] if self.skip else [y, stat]
        return outs[:max(len(meta.output_names), 1)]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x = inputs[0]
        a = self._axis(ctx, self.axis(ctx.node, x.ndim))
        rows, cols = prod(x.shape[:a]), prod(x.shape[a:])
        if rows == 0:
            return
        shapes = [tuple(t.shape) if t is not None else None for t in inputs[1:]]
        s = self._shapes_support(tuple(x.shape), a, shapes)
        if not s:
            raise self.fail(ctx, s.reason)
        if self.skip:
            skip, gamma, bias = inputs[1], inputs[2], optional_input(inputs, 3)
            y, mean, inv, total = (optional_input(outputs, i) for i in range(4))
            n_skip, period = skip_rows(tuple(skip.shape), tuple(x.shape)), cols
        else:
            skip, gamma, bias = None, inputs[1], None
            y, inv = outputs[0], optional_input(outputs, 1)
            mean = total = None
            n_skip, period = 1, scale_period(tuple(gamma.shape), tuple(x.shape), a)
        ptrs = [t.ptr for t in (x, skip, bias, gamma, y, total) if t is not None]
        v = rms_vector_width(x.dtype.itemsize, cols, period, ptrs)
        eps = float(ctx.node.attr("epsilon", 1e-12 if self.skip else 1e-5))

        def ptr(t: Any) -> int:
            return t.ptr if t is not None else 0

        self.launch(self.function(f"rms_norm_v{v}_{suffix(x.dtype)}", x),
                    (min(rows, MAX_GRID), 1, 1), (block_for(cols // v), 1, 1),
                    [(x.ptr, PTR), (ptr(skip), PTR), (ptr(bias), PTR), (gamma.ptr, PTR),
                     (ptr(y), PTR), (ptr(total), PTR), (ptr(mean), PTR), (ptr(inv), PTR),
                     (rows, I64), (cols, I64), (n_skip, I64), (period, I64), (eps, F32)],
                    ctx.stream)

    def _axis(self, ctx: Any, a: int | None) -> int:
        if a is None:
            raise self.fail(ctx, f"axis {ctx.node.attr('axis', -1)} is out of range")
        return a


KERNELS: list[CudaKernel] = [
    Hardmax(),
    LpNormalization(),
    GroupNorm("InstanceNormalization", 1),
    GroupNorm("GroupNormalization", 18),
    BatchNormalization(),
    RmsNorm("SimplifiedLayerNormalization", domain="", skip=False),
    RmsNorm("SkipSimplifiedLayerNormalization", domain="com.microsoft", skip=True),
]
