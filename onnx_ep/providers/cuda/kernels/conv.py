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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Support,
    TensorSpec,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference.windows import window_geometry
from onnx_ep.providers.cuda import blas
from onnx_ep.providers.cuda.kernels.float_base import FloatKernel, function, launch, static_shape
from onnx_ep.providers.cuda.kernels.gemm import problem_alignment


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


class Conv(FloatKernel):
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
        sx, sw = static_shape(meta.inputs[0]), static_shape(meta.inputs[1])
        if sx is not None and sw is not None:
            try:
                conv_geometry(meta, sx, sw, meta.inputs[0].dtype)
            except NodeError as e:
                return Support.no(e.detail)
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        sx, sw = static_shape(meta.inputs[0]), static_shape(meta.inputs[1])
        if sx is None or sw is None:
            return [None]
        g = conv_geometry(meta, sx, sw, meta.inputs[0].dtype)
        return [TensorSpec(meta.inputs[0].dtype, g.out_shape)]

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
        from onnx_ep.providers.cuda import runtime

        meta = ctx.node
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        y = outputs[0]
        try:
            g = conv_geometry(meta, x.shape, w.shape, x.dtype)
        except NodeError as e:
            raise self.fail(meta, e.detail) from None
        if b is not None and tuple(b.shape) != (g.m,):
            raise self.fail(meta, f"B has shape {tuple(b.shape)}, expected ({g.m},)")
        if y.nbytes == 0:
            return
        layout = _sizes(g)
        ws_ptr = 0
        if layout.nbytes:
            if workspace is None:
                raise self.fail(meta, f"needs {layout.nbytes} workspace bytes but got none")
            workspace.require(layout.nbytes)
            ws_ptr = int(workspace.buffer.ptr)
        stream, isz = ctx.stream, g.itemsize
        if g.c * g.kh * g.kw == 0:
            runtime.memset_d8(y.ptr, 0, y.nbytes, stream)   # an empty sum
        beta = 0.0
        if b is not None:
            fn = function("gemm", "broadcast_rows", y.dtype, y.device)
            total = g.n * g.m * g.positions
            launch(fn, total, [(y.ptr, runtime.PTR), (b.ptr, runtime.PTR),
                               (total, runtime.I64), (g.m, runtime.I64),
                               (g.positions, runtime.I64), (1, runtime.I64), (0, runtime.I64)],
                   stream)
            beta = 1.0
        if g.c * g.kh * g.kw == 0:
            return
        im2col = None if g.direct else function("conv", "im2col", x.dtype, x.device)
        gemm_ptr = ws_ptr + layout.gemm_offset if layout.gemm_nbytes else 0
        x_image, y_image = g.c * g.h * g.w * isz, g.m * g.positions * isz
        for i in range(g.n):
            x_ptr = x.ptr + i * x_image
            if im2col is None:
                cols = x_ptr
            else:
                cols = ws_ptr
                launch(im2col, g.cols_elements,
                       [(x_ptr, runtime.PTR), (cols, runtime.PTR), (g.c, runtime.I64),
                        (g.h, runtime.I64), (g.w, runtime.I64), (g.kh, runtime.I64),
                        (g.kw, runtime.I64), (g.oh, runtime.I64), (g.ow, runtime.I64),
                        (g.stride_h, runtime.I64), (g.stride_w, runtime.I64),
                        (g.pad_h, runtime.I64), (g.pad_w, runtime.I64),
                        (g.dil_h, runtime.I64), (g.dil_w, runtime.I64)], stream)
            blas.run(g.problem, w.ptr, cols, y.ptr + i * y_image, stream, gemm_ptr,
                     layout.gemm_nbytes, beta=beta, ordinal=x.device)


KERNELS: list[Any] = [Conv()]
