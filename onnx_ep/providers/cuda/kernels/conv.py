"""Conv (2-D, and 1-D as 2-D with height 1): im2col into the step workspace, then cuBLASLt.

Per image: ``im2col`` (conv.cu) writes the (C*KH*KW, OH*OW) column matrix into the
workspace, then one GEMM, strided-batched over groups, computes
``Y[n, g] (M/g x P) = W[g] (M/g x C/g*KH*KW) @ cols[g]``. A 1x1 kernel with unit
strides and no padding skips im2col (the image is its own column matrix). The bias
is broadcast into Y first (``broadcast_rows`` in gemm.cu) and the GEMM adds onto it
(beta = 1): float32 sum, one rounding, as the reference does.

:func:`conv_geometry` and :func:`conv_workspace` are the single sizing formula used
by ``workspace_requirement`` and by execution: the columns come first, the GEMM's
cuBLASLt workspace follows at the next 256-byte boundary.

Numerics: float32 accumulation (see blas.py): :data:`blas.GEMM_PARITY`.
3-D convolutions are declined (cpu_reference runs them).

ConvTranspose (1-3 spatial dims, grouped, dilated, pads / auto_pad / output_shape /
output_padding) is a direct loop in conv.cu, one thread per output element, products
and sums in float64 like the reference: :data:`CONV_TRANSPOSE_PARITY`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    Support,
    TensorSpec,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cuda import blas, copies
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    I64,
    PTR,
    FloatKernel,
    grid_1d,
    prod,
    static_shape,
    suffix,
)
from onnx_ep.providers.cuda.kernels.gemm import problem_alignment
from onnx_ep.providers.shared.windows import window_geometry


@attrs.frozen
class ConvGeometry:
    """One Conv call as 2-D: input (n, c, h, w), weights (m, c/groups, kh, kw), output
    (n, m, oh, ow), with ``out_shape`` the ONNX output shape (1-D convs drop h)."""

    dtype: str
    n: int
    c: int
    h: int
    w: int
    m: int
    groups: int
    kh: int
    kw: int
    oh: int
    ow: int
    stride_h: int
    stride_w: int
    pad_h: int
    pad_w: int
    dil_h: int
    dil_w: int
    out_shape: tuple[int, ...]

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize if self.dtype != "bfloat16" else 2

    @property
    def positions(self) -> int:
        return self.oh * self.ow

    @property
    def direct(self) -> bool:
        """A 1x1, stride-1, unpadded kernel: the image itself is the column matrix."""
        return (self.kh == self.kw == 1 and self.stride_h == self.stride_w == 1
                and self.pad_h == self.pad_w == 0 and (self.oh, self.ow) == (self.h, self.w))

    @property
    def cols_elements(self) -> int:
        return 0 if self.direct else self.c * self.kh * self.kw * self.positions

    @property
    def problem(self) -> blas.GemmProblem:
        """Per image: Y[g] (m/g x P) = W[g] (m/g x c/g*kh*kw) @ cols[g], batched over g."""
        mg, kg, p = self.m // self.groups, (self.c // self.groups) * self.kh * self.kw, \
            self.positions
        strides = (mg * kg, kg * p, mg * p) if self.groups > 1 else ()
        # images after the first start at n * (m * P) in Y and, when direct, n * (c*h*w) in X
        image = (self.m * p, self.c * self.h * self.w if self.direct else 0) if self.n > 1 else ()
        align = problem_alignment(self.itemsize, strides + image)
        if self.groups == 1:
            return blas.GemmProblem(self.dtype, mg, p, kg, alignment=align)
        return blas.GemmProblem(self.dtype, mg, p, kg, batch=self.groups, stride_a=strides[0],
                                stride_b=strides[1], stride_d=strides[2], alignment=align)


def conv_geometry(meta: NodeMeta, x: Sequence[int], w: Sequence[int], dtype: Any) -> ConvGeometry:
    """THE Conv geometry (plan time and execution both call it).

    :raises NodeError: invalid shapes or attributes, or a 3-D (or higher) convolution.
    """
    x, w = tuple(int(d) for d in x), tuple(int(d) for d in w)
    if len(x) not in (3, 4) or len(w) != len(x):
        raise NodeError(f"X {x} and W {w} must both have rank 3 or 4 (1-D or 2-D Conv; the "
                        f"cuda provider runs no 3-D Conv)", node=meta.name, op_type="Conv")
    n, c = x[:2]
    m = w[0]
    groups = int(meta.attr("group", 1))
    if groups < 1 or c % groups or m % groups or w[1] * groups != c:
        raise NodeError(f"W {w} does not fit X {x} with group={groups}: expected W[1] == "
                        f"C/group and W[0] divisible by group", node=meta.name, op_type="Conv")
    kernel = tuple(int(k) for k in (meta.attr("kernel_shape", None) or w[2:]))
    if kernel != w[2:]:
        raise NodeError(f"kernel_shape {kernel} differs from W's spatial shape {w[2:]}",
                        node=meta.name, op_type="Conv")
    g = window_geometry(meta, x[2:], kernel)
    out_shape = (n, m) + tuple(g.out)
    if len(x) == 3:
        return ConvGeometry(np.dtype(dtype).name, n, c, 1, x[2], m, groups, 1, kernel[0], 1,
                            g.out[0], 1, g.strides[0], 0, g.pads_begin[0], 1, g.dilations[0],
                            out_shape)
    return ConvGeometry(np.dtype(dtype).name, n, c, x[2], x[3], m, groups, kernel[0], kernel[1],
                        g.out[0], g.out[1], g.strides[0], g.strides[1], g.pads_begin[0],
                        g.pads_begin[1], g.dilations[0], g.dilations[1], out_shape)


@attrs.frozen
class ConvWorkspace:
    """Byte layout of a Conv's workspace: columns at 0, the GEMM's workspace after them."""

    cols_nbytes: int
    gemm_offset: int
    gemm_nbytes: int

    @property
    def nbytes(self) -> int:
        return self.gemm_offset + self.gemm_nbytes if self.gemm_nbytes else self.cols_nbytes


def conv_workspace(geometry: ConvGeometry, gemm_workspace: int) -> ConvWorkspace:
    """THE Conv workspace formula, given the GEMM plan's exact workspace bytes."""
    cols = geometry.cols_elements * geometry.itemsize
    return ConvWorkspace(cols, blas.align_up(cols) if gemm_workspace else cols,
                         int(gemm_workspace))


def _sizes(geometry: ConvGeometry) -> ConvWorkspace:
    gemm = 0
    if geometry.n and geometry.positions and geometry.m:
        gemm = blas.workspace_bytes(geometry.problem)
    return conv_workspace(geometry, gemm)


class _GeometryKernel(FloatKernel):
    """A kernel whose output shape is its :meth:`geometry` of X's and W's shapes."""

    source = "conv"

    def geometry(self, meta: NodeMeta, x: Sequence[int], w: Sequence[int]) -> Any:
        """THE geometry (an object with ``out_shape``); :raises NodeError: invalid."""
        raise NotImplementedError

    def static_geometry(self, meta: NodeMeta) -> Any:
        """:meth:`geometry` of the static X and W shapes, ``None`` where either is dynamic."""
        sx, sw = static_shape(meta.inputs[0]), static_shape(meta.inputs[1])
        return None if sx is None or sw is None else self.geometry(meta, sx, sw)

    def check_geometry(self, meta: NodeMeta) -> Support:
        try:
            self.static_geometry(meta)
        except NodeError as e:
            return Support.no(e.detail)
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        g = self.static_geometry(meta)
        if g is None:
            return [None]
        return [TensorSpec(meta.inputs[0].dtype, g.out_shape)]


class Conv(_GeometryKernel):
    """Y = W (*) X + B via im2col + cuBLASLt, per image, batched over groups."""

    def __init__(self) -> None:
        super().__init__("Conv", since=1, parities=blas.GEMM_PARITY)

    def check(self, meta: NodeMeta) -> Support:
        if not blas.support():
            return blas.support()
        if len(meta.inputs) < 2 or meta.inputs[1] is None:
            return Support.no("Conv needs X and W")
        rank = len(meta.inputs[0].shape)
        if rank not in (3, 4):
            return Support.no(f"X of rank {rank}: the cuda Conv runs 1-D and 2-D only")
        return self.check_geometry(meta)

    def geometry(self, meta: NodeMeta, x: Sequence[int], w: Sequence[int]) -> ConvGeometry:
        return conv_geometry(meta, x, w, meta.inputs[0].dtype)

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        def size() -> WorkspaceRequirement:
            try:
                g = conv_geometry(meta, meta.inputs[0].shape, meta.inputs[1].shape,
                                  meta.inputs[0].dtype)
            except NodeError:
                return WorkspaceRequirement.NONE   # execution raises it with the run's shapes
            return WorkspaceRequirement(_sizes(g).nbytes)
        return self.plan_time(meta, size)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        meta = ctx.node
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        y = outputs[0]
        try:
            g = conv_geometry(meta, x.shape, w.shape, x.dtype)
        except NodeError as e:
            raise self.fail(ctx, e.detail) from None
        if b is not None and tuple(b.shape) != (g.m,):
            raise self.fail(ctx, f"B has shape {tuple(b.shape)}, expected ({g.m},)")
        if y.nbytes == 0:
            return
        layout = _sizes(g)
        ws_ptr = self.workspace_ptr(ctx, workspace, layout.nbytes)
        stream, isz = ctx.stream, g.itemsize
        if g.c * g.kh * g.kw == 0:
            copies.memset_d8(y.ptr, 0, y.nbytes, stream)   # an empty sum
        beta = 0.0
        if b is not None:
            fn = self.function(f"broadcast_rows_{suffix(y.dtype)}", y, source="gemm")
            total = g.n * g.m * g.positions
            if total > 0:
                self.launch(fn, grid_1d(total), (BLOCK, 1, 1),
                            [(y.ptr, PTR), (b.ptr, PTR), (total, I64), (g.m, I64),
                             (g.positions, I64), (1, I64), (0, I64)], stream)
            beta = 1.0
        if g.c * g.kh * g.kw == 0:
            return
        im2col = None if g.direct else self.function(f"im2col_{suffix(x.dtype)}", x)
        gemm_ptr = ws_ptr + layout.gemm_offset if layout.gemm_nbytes else 0
        x_image, y_image = g.c * g.h * g.w * isz, g.m * g.positions * isz
        for i in range(g.n):
            x_ptr = x.ptr + i * x_image
            if im2col is None:
                cols = x_ptr
            else:
                cols = ws_ptr
                if g.cols_elements > 0:
                    self.launch(im2col, grid_1d(g.cols_elements), (BLOCK, 1, 1),
                                [(x_ptr, PTR), (cols, PTR), (g.c, I64), (g.h, I64), (g.w, I64),
                                 (g.kh, I64), (g.kw, I64), (g.oh, I64), (g.ow, I64),
                                 (g.stride_h, I64), (g.stride_w, I64), (g.pad_h, I64),
                                 (g.pad_w, I64), (g.dil_h, I64), (g.dil_w, I64)], stream)
            blas.run(g.problem, w.ptr, cols, y.ptr + i * y_image, stream, gemm_ptr,
                     layout.gemm_nbytes, beta=beta, ordinal=x.device)


# ---------------------------------------------------------------- ConvTranspose

#: float64 products and sums like the reference, another order of the float64 additions,
#: one rounding: the reference's tolerance for float32, one output ulp for narrow floats
CONV_TRANSPOSE_PARITY: dict[str, Parity] = {
    "float32": Parity.tolerance(rtol=1e-5, atol=1e-6),
    "float16": Parity.tolerance(rtol=2.0 ** -10, atol=1e-6),
    "bfloat16": Parity.tolerance(rtol=2.0 ** -7, atol=1e-6),
}


@attrs.frozen
class ConvTransposeGeometry:
    """One ConvTranspose as 3-D (leading unit axes): per spatial axis the input and output
    sizes, kernel, stride, dilation and ``begin`` (the output's start inside the full,
    uncropped result); ``out_shape`` is the ONNX output."""

    n: int
    c: int
    m: int
    groups: int
    axes: tuple[tuple[int, int, int, int, int, int], ...]   # (in, out, k, s, d, begin) x 3
    out_shape: tuple[int, ...]

    def launch_args(self) -> list[int]:
        return [v for axis in self.axes for v in axis]


def _ints(meta: NodeMeta, name: str, default: list[int], n: int) -> list[int]:
    value = meta.attr(name, None)
    value = list(default) if value is None else [int(v) for v in value]
    if len(value) != n:
        raise NodeError(f"attribute '{name}' has {len(value)} values, expected {n}",
                        node=meta.name, op_type=meta.op_type)
    return value


def conv_transpose_geometry(meta: NodeMeta, x: Sequence[int],
                            w: Sequence[int]) -> ConvTransposeGeometry:
    """THE ConvTranspose geometry, as cpu_reference's ConvTranspose crops its full result.

    :raises NodeError: shapes or attributes the reference rejects.
    """
    def invalid(msg: str) -> NodeError:   # plan time too: there is no ctx here
        return NodeError(msg, node=meta.name, op_type=meta.op_type)

    x, w = tuple(int(v) for v in x), tuple(int(v) for v in w)
    if not 3 <= len(x) <= 5 or len(w) != len(x):
        raise invalid(f"X {x} and W {w} must have the same rank 3, 4 or 5")
    n, c = x[:2]
    nd = len(x) - 2
    groups = int(meta.attr("group", 1))
    if groups < 1 or c % groups or w[0] != c:
        raise invalid(f"group={groups} must divide C={c} and W {w} must have W[0] == C")
    kernel = tuple(int(v) for v in (meta.attr("kernel_shape", None) or w[2:]))
    if kernel != w[2:]:
        raise invalid(f"kernel_shape {kernel} differs from W's spatial shape {w[2:]}")
    strides = _ints(meta, "strides", [1] * nd, nd)
    dil = _ints(meta, "dilations", [1] * nd, nd)
    out_pad = _ints(meta, "output_padding", [0] * nd, nd)
    spatial = x[2:]
    full = [s * (i - 1) + op + (k - 1) * d + 1
            for s, i, op, k, d in zip(strides, spatial, out_pad, kernel, dil)]
    auto_pad = meta.attr("auto_pad", "NOTSET") or "NOTSET"
    shape = meta.attr("output_shape", None)
    if shape is not None:
        shape = [int(v) for v in shape]
        shape = shape[2:] if len(shape) == nd + 2 else shape
        if len(shape) != nd:
            raise invalid(f"output_shape {shape} must have {nd} spatial values")
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        shape = [i * s for i, s in zip(spatial, strides)]
    if shape is not None:
        total = [f - o for f, o in zip(full, shape)]
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
        out = shape
    elif auto_pad == "VALID":
        begin, out = [0] * nd, list(full)
    elif auto_pad == "NOTSET":
        pads = _ints(meta, "pads", [0] * (2 * nd), 2 * nd)
        out = [f - pads[a] - pads[nd + a] for a, f in enumerate(full)]
        begin = pads[:nd]
        if min(out) < 1:
            raise invalid(f"pads {pads} leave no output from a full result of {full}")
    else:
        raise invalid(f"auto_pad {auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    lead = 3 - nd
    axes = tuple([(1, 1, 1, 1, 1, 0)] * lead + [
        (spatial[a], out[a], kernel[a], strides[a], dil[a], begin[a]) for a in range(nd)])
    m = w[1] * groups
    return ConvTransposeGeometry(n, c, m, groups, axes, (n, m) + tuple(out))


class ConvTranspose(_GeometryKernel):
    """Direct loop (conv.cu's conv_transpose), 1-3 spatial dims, grouped, dilated."""

    def __init__(self) -> None:
        super().__init__("ConvTranspose", since=1, parities=CONV_TRANSPOSE_PARITY)

    def check(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) < 2 or meta.inputs[1] is None:
            return Support.no("ConvTranspose needs X and W")
        if not 3 <= len(meta.inputs[0].shape) <= 5:
            return Support.no(f"X of rank {len(meta.inputs[0].shape)}: needs rank 3, 4 or 5")
        return self.check_geometry(meta)

    def geometry(self, meta: NodeMeta, x: Sequence[int],
                 w: Sequence[int]) -> ConvTransposeGeometry:
        return conv_transpose_geometry(meta, x, w)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        x, w, y = inputs[0], inputs[1], outputs[0]
        b = inputs[2] if len(inputs) > 2 else None
        try:
            g = conv_transpose_geometry(ctx.node, x.shape, w.shape)
        except NodeError as e:
            raise self.fail(ctx, e.detail) from None
        if tuple(y.shape) != g.out_shape:
            raise self.fail(ctx, f"output Y was planned as {tuple(y.shape)} but X "
                                 f"{tuple(x.shape)} and W {tuple(w.shape)} give "
                                 f"{g.out_shape}")
        if b is not None and tuple(b.shape) != (g.m,):
            raise self.fail(ctx, f"B has shape {tuple(b.shape)}, expected ({g.m},)")
        fn = self.function(f"conv_transpose_{suffix(x.dtype)}", x)
        args = [(x.ptr, PTR), (w.ptr, PTR),
                (b.ptr if b is not None else 0, PTR), (y.ptr, PTR)]
        args += [(v, I64) for v in (g.n, g.c, g.m, g.groups, *g.launch_args())]
        n = prod(g.out_shape)
        if n > 0:
            self.launch(fn, grid_1d(n), (BLOCK, 1, 1), args, ctx.stream)


KERNELS: list[Any] = [Conv(), ConvTranspose()]
