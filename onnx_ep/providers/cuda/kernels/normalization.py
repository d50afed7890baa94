"""Hardmax, LpNormalization, InstanceNormalization, GroupNormalization and
BatchNormalization on CUDA (``normalization.cu``).

Each replays cpu_reference/normalization.py in its compute type W (float32 for float32 and
narrower, float64 for float64), one IEEE operation per reference step:

- Hardmax: EXACT (1 at the first maximum, the first NaN winning like ``np.argmax``).
- BatchNormalization inference: EXACT (gain = scale / sqrt(var + eps) in float64 rounded
  once to W, then (x - mean) * gain + bias in W). Training mode (opset 14+,
  ``training_mode=1``): batch statistics summed in double in another order than numpy's,
  so the reference's ``rtol=1e-4, atol=1e-5`` (+ one output ulp for float16/bfloat16).
- LpNormalization, InstanceNormalization, GroupNormalization: statistics summed in double
  and rounded once to W (the reference sums in W): ``rtol=1e-4, atol=1e-5`` (+ one ulp).

Scale, B, mean and var must have X's dtype (declined otherwise). Statistics use one block
per row/channel with a fixed reduction tree: deterministic, no atomics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnx_ep.core.kernel import NodeMeta, Parity, Support, TensorSpec
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    F64,
    FLOATS,
    I32,
    I64,
    PTR,
    CudaKernel,
    dtype_support,
    grid_1d,
    normalize_axis,
    prod,
    suffix,
)
from onnx_ep.providers.cuda.kernels.softmax import NORM_PARITY, softmax_geometry

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


KERNELS: list[CudaKernel] = [
    Hardmax(),
    LpNormalization(),
    GroupNorm("InstanceNormalization", 1),
    GroupNorm("GroupNormalization", 18),
    BatchNormalization(),
]
