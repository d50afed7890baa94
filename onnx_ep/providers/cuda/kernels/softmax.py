"""Softmax, LogSoftmax, LayerNormalization and RMSNormalization on CUDA (``softmax.cu``).

Softmax and LogSoftmax keep the reference's bound ``rtol=1e-6, atol=1e-7`` for every float
type (plus one output ulp for float16/bfloat16, as a sum order can decide a rounding tie).
float64 inputs, and rows too long for the fast kernels, compute in float64 and round once,
like the reference (docs/PARITY.md). The fast kernels (float32, float16, bfloat16 rows of up
to 32 values per thread) take exp in float32 (CUDA expf, <= 2 ulp; ``__expf`` for
float16/bfloat16, whose outputs keep 11/8 bits) and sum in float64: within ~5 float32 ulps
of the reference's float64 recipe, under the 1e-6 (~8 ulp) bound; rows whose max is not
finite take the float64 recipe there too (softmax.cu). Before opset 13 the input is
flattened to 2-D at ``axis``; from 13 on the op normalizes along ``axis`` alone.

LayerNormalization (opset 17) and RMSNormalization (opset 23) replay the reference's
operations in its stash type (float32; float64 for float64 inputs) with the two statistics
accumulated in double: ``rtol=1e-4, atol=1e-5`` (+ one output ulp for float16/bfloat16).
``stash_type`` other than 1 (float) is declined; Scale and B must hold exactly one value per
normalized element.

Rows along the last axis run the fast row kernels where they fit (:func:`fast_rows` plans
them, :func:`fast_rows_kernel` picks one, :func:`launch_rows` launches it): the row read
from DRAM once into registers and written once, 16-byte loads when the row length and
pointers allow, a warp to 1024 threads per row, warp-shuffle reductions in a fixed order
(bit-identical run to run). With 16-byte packs and more row groups than the device holds
blocks at once, persistent blocks prefetch their next rows into shared memory with cp.async
while reducing the current one (same arithmetic, same bytes). Longer rows take the
multi-pass kernels (one block of <= 256 threads per row, the exp of the first 5,632 values
cached in shared memory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from onnx_ep.core.kernel import NodeMeta, Parity, Support, TensorSpec
from onnx_ep.providers.cuda.device import get_device
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
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
    prod,
    replayed,
    suffix,
)
from onnx_ep.providers.cuda.launch import max_active_blocks

SOFTMAX_PARITY = Parity.tolerance(rtol=1e-6, atol=1e-7)
NORM_PARITY = Parity.tolerance(rtol=1e-4, atol=1e-5)

MAX_GRID = 1 << 20
#: bytes of the dynamic shared-memory exp cache (48 KiB default limit minus the 2 KiB
#: reduction scratch and headroom)
CACHE_BYTES = 44 * 1024
VECTOR_BYTES = 16
#: fast kernels: values of a row each thread aims to hold, the most it may hold (registers:
#: the kernels are built for 1024-thread blocks, 64 registers), and packs per thread built
FAST_VALUES = 32
FAST_MAX_VALUES = 32
FAST_PACKS = (1, 2, 4, 8)
FAST_MAX_THREADS = 1024
#: threads per block of the fast kernels when a row takes fewer (several rows per block)
FAST_BLOCK = 256
MAX_GRID_X = (1 << 31) - 1
#: pipelined fast rows (16-byte packs): row buffers per block (2-4; 0 turns the pipelined
#: kernels off) and the dynamic shared memory a block may take for them (above 48 KiB the
#: kernel is opted in to more)
PIPE_STAGES = 2
PIPE_SHARED_BYTES = 48 * 1024
#: most blocks of a pipelined kernel's persistent grid (``None``: as many as the device holds
#: at once); tests lower it so that every block walks many rows
PIPE_MAX_BLOCKS: int | None = None


def vector_width(itemsize: int, cols: int, ptrs: tuple[int, ...]) -> int:
    """Elements per load: 16 bytes' worth when rows and pointers stay 16-byte aligned."""
    v = VECTOR_BYTES // itemsize
    if v > 1 and cols % v == 0 and all(p % VECTOR_BYTES == 0 for p in ptrs):
        return v
    return 1


def fast_geometry(cols: int, v: int) -> tuple[int, int] | None:
    """``(threads per row, packs per thread)`` of the fast row kernels for rows of ``cols``
    elements loaded ``v`` at a time, or ``None`` when a row does not fit in registers.

    Threads per row: the smallest power of two >= 32 (a warp) giving each thread at most
    :data:`FAST_VALUES` values (``8 * v`` for narrow packs), up to 1024; packs per thread: the
    smallest of :data:`FAST_PACKS` covering the row.
    """
    nv = cols // v
    target = min(FAST_VALUES, FAST_PACKS[-1] * v)
    threads = 32
    while threads < FAST_MAX_THREADS and threads * target < cols:
        threads *= 2
    for packs in FAST_PACKS:
        if packs * threads >= nv:
            return (threads, packs) if packs * v <= FAST_MAX_VALUES else None
    return None


class FastRows(NamedTuple):
    """How a fast row kernel runs: ``packs`` of ``v`` elements per thread, the direct
    kernel's ``grid`` (one block per ``block[1]`` rows) and ``block``; ``stages`` > 0 when
    the pipelined kernel (16-byte packs through cp.async stages in ``shared_bytes`` of
    shared memory) may run, on a persistent grid (:meth:`grid_for`)."""

    v: int
    packs: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    stages: int = 0
    shared_bytes: int = 0

    @property
    def direct_infix(self) -> str:
        return f"fast_v{self.v}_p{self.packs}"

    @property
    def pipe_infix(self) -> str:
        return f"pipe_p{self.packs}"

    def grid_for(self, resident: int) -> tuple[int, int, int] | None:
        """Persistent grid of the pipelined kernel when ``resident`` blocks fit on the
        device at once (every block walks the same number of row groups, the last maybe
        fewer), or ``None`` when every row group gets a block of its own anyway: nothing to
        pipeline, the direct kernel runs."""
        groups = self.grid[0]
        if not self.stages or groups <= max(1, resident):
            return None
        steps = -(-groups // resident)
        return (-(-groups // steps), 1, 1)


def pipe_stages(per_stage: int) -> int:
    """Row buffers of ``per_stage`` bytes a pipelined block takes (:data:`PIPE_STAGES` or
    fewer, so that they fit in :data:`PIPE_SHARED_BYTES`), or 0 when two do not fit."""
    stages = min(PIPE_STAGES, 4)
    while stages >= 2 and stages * per_stage > PIPE_SHARED_BYTES:
        stages -= 1
    return stages if stages >= 2 else 0


def fast_rows(outer: int, cols: int, v: int, dtype: Any) -> FastRows | None:
    """How the fast row kernels run ``outer`` rows of ``cols`` elements loaded ``v`` at a
    time, or ``None`` (float64, or rows that do not fit): the multi-pass kernels run instead.

    16-byte packs take the pipelined kernel (when :data:`PIPE_STAGES` allows and the
    buffers fit); the caller still runs the direct one when every row group gets a block of
    its own anyway (see :meth:`FastRows.grid_for`).
    """
    if np.dtype(dtype) == np.float64:
        return None
    geo = fast_geometry(cols, v)
    if geo is None:
        return None
    threads, packs = geo
    per_block = max(1, FAST_BLOCK // threads)
    blocks = -(-outer // per_block)
    if blocks > MAX_GRID_X:
        return None
    grid, block = (blocks, 1, 1), (threads, per_block, 1)
    if v * np.dtype(dtype).itemsize == VECTOR_BYTES and blocks > 1:
        per_stage = threads * per_block * packs * VECTOR_BYTES   # P 16-byte packs a thread
        stages = pipe_stages(per_stage)
        if stages:
            return FastRows(v, packs, grid, block, stages, stages * per_stage)
    return FastRows(v, packs, grid, block)


def fast_rows_kernel(rows: FastRows, function: Callable[[str], Any], device: Any
                     ) -> tuple[Any, tuple[int, int, int], int]:
    """``(function, grid, stages)`` of the kernel that runs ``rows``: the pipelined one
    (stages > 0, a persistent grid) when :meth:`FastRows.grid_for` gives it a grid on
    ``device``, else the direct one (stages 0). ``function(infix)`` loads a kernel.

    Row groups that fit one block per multiprocessor (small batches, decode steps) take the
    direct kernel without asking the occupancy: the launch path stays two lookups shorter.
    """
    sms = device.multiprocessors
    if rows.stages and rows.grid[0] > min(PIPE_MAX_BLOCKS or sms, sms):
        fn = function(rows.pipe_infix)
        per_sm = max_active_blocks(fn, rows.block[0] * rows.block[1], rows.shared_bytes)
        resident = min(per_sm * sms, PIPE_MAX_BLOCKS or per_sm * sms)
        grid = rows.grid_for(resident) if resident > 0 else None
        if grid is not None:
            return fn, grid, rows.stages
    return function(rows.direct_infix), rows.grid, 0


def launch_rows(kernel: CudaKernel, name: str, rows: FastRows, x: Any, sfx: str,
                args: list[tuple[Any, Any]], stream: Any) -> None:
    """Launch :func:`fast_rows_kernel`'s choice for ``rows`` of ``name`` (``"softmax"``,
    ``"layer_norm"``, ...) with ``args`` (a pipelined kernel also gets its stage count)."""
    fn, grid, stages = fast_rows_kernel(
        rows, lambda infix: kernel.function(f"{name}_{infix}_{sfx}", x),
        get_device(x.device))
    if stages:
        kernel.launch(fn, grid, rows.block, [*args, (stages, I32)], stream,
                      shared_bytes=rows.shared_bytes)
    else:
        kernel.launch(fn, grid, rows.block, args, stream)


def softmax_geometry(shape: tuple[int, ...], axis: int, opset: int) -> tuple[int, int, int]:
    """``(outer, axis_dim, inner)``: rows of ``axis_dim`` elements ``inner`` apart.

    Opset < 13 flattens at ``axis`` (inner is 1: one row per leading index).
    """
    if opset < 13:
        return prod(shape[:axis]), prod(shape[axis:]), 1
    return prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])


def _softmax_axis(meta: Any, rank: int) -> int | None:
    if meta.opset < 13:
        return normalize_axis(int(meta.attr("axis", 1)), max(rank, 1))
    return normalize_axis(int(meta.attr("axis", -1)), rank)


class Softmax(CudaKernel):
    """Softmax (``log=False``) and LogSoftmax (``log=True``)."""

    source = "softmax"

    def __init__(self, op_type: str, *, log: bool) -> None:
        super().__init__(op_type, since=1, parity=SOFTMAX_PARITY)
        self.log = log
        self.name = "log_softmax" if log else "softmax"

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0]
        s = dtype_support(x.dtype, FLOATS)
        if not s:
            return s
        if _softmax_axis(meta, len(x.shape)) is None:
            return Support.no(f"axis {meta.attr('axis')} is out of range for rank "
                              f"{len(x.shape)}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        return [TensorSpec(x.dtype, x.shape)]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        axis = _softmax_axis(ctx.node, x.ndim)
        if axis is None:
            raise self.fail(ctx, f"axis {ctx.node.attr('axis')} is out of range")
        outer, dim, inner = softmax_geometry(x.shape, axis, ctx.node.opset)
        sfx = suffix(x.dtype)
        if inner > 1:
            n = outer * inner
            self.launch(self.function(f"{self.name}_cols_{sfx}", x),
                        grid_1d(n, BLOCK, MAX_GRID), (BLOCK, 1, 1),
                        [(x.ptr, PTR), (y.ptr, PTR), (outer, I64), (dim, I64), (inner, I64)],
                        ctx.stream)
            return
        v = vector_width(x.dtype.itemsize, dim, (x.ptr, y.ptr))
        fast = fast_rows(outer, dim, v, x.dtype)
        if fast is not None:
            launch_rows(self, self.name, fast, x, sfx,
                        [(x.ptr, PTR), (y.ptr, PTR), (outer, I64), (dim, I64)], ctx.stream)
            return
        cache_n = 0 if self.log else min(dim, CACHE_BYTES // 8)
        self.launch(self.function(f"{self.name}_rows_v{v}_{sfx}", x), (min(outer, MAX_GRID), 1, 1),
                    (block_for(dim // v), 1, 1),
                    [(x.ptr, PTR), (y.ptr, PTR), (outer, I64), (dim, I64), (cache_n, I32)],
                    ctx.stream, shared_bytes=cache_n * 8)


class Normalization(CudaKernel):
    """LayerNormalization (``rms=False``: outputs Y, Mean, InvStdDev) and
    RMSNormalization (``rms=True``: output Y) over axes ``[axis, rank)``."""

    source = "softmax"

    def __init__(self, op_type: str, since: int, *, rms: bool) -> None:
        super().__init__(op_type, since=since, parity=NORM_PARITY)
        self.rms = rms
        self.name = "rms_norm" if rms else "layer_norm"

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0]
        s = dtype_support(x.dtype, FLOATS)
        if not s:
            return s
        if int(meta.attr("stash_type", 1)) != 1:
            return Support.no(f"stash_type={meta.attr('stash_type')} (only 1, float, is "
                              f"implemented on cuda)")
        if normalize_axis(int(meta.attr("axis", -1)), len(x.shape)) is None:
            return Support.no(f"axis {meta.attr('axis')} is out of range")
        for i in range(1, len(meta.inputs)):
            spec = meta.inputs[i]
            if spec is not None and spec.dtype != x.dtype:
                return Support.no(f"input {i} has dtype {spec.dtype}, X has {x.dtype}")
        return Support.YES

    @staticmethod
    def stash_dtype(dtype: Any) -> np.dtype:
        return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        outs: list[TensorSpec | None] = [TensorSpec(x.dtype, x.shape)]
        if not self.rms:
            a = normalize_axis(int(meta.attr("axis", -1)), len(x.shape))
            stat = tuple(x.shape[:a]) + (1,) * (len(x.shape) - a)
            outs += [TensorSpec(self.stash_dtype(x.dtype), stat)] * 2
        return outs[:max(len(meta.output_names), 1)]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 and not self.rms else None
        y = outputs[0]
        mean = outputs[1] if len(outputs) > 1 else None
        inv = outputs[2] if len(outputs) > 2 else None
        a = normalize_axis(int(ctx.node.attr("axis", -1)), x.ndim)
        rows, cols = prod(x.shape[:a]), prod(x.shape[a:])
        if rows == 0 or cols == 0:
            return
        for name, t in (("Scale", scale), ("B", bias)):
            if t is not None and t.size != cols:
                raise self.fail(ctx, f"{name} has {t.size} elements, expected one per "
                                     f"normalized element ({cols}); broadcasting is not "
                                     f"implemented on cuda")
        eps = float(ctx.node.attr("epsilon", 1e-5))
        ptrs = tuple(t.ptr for t in (x, y, scale, bias) if t is not None)
        v = vector_width(x.dtype.itemsize, cols, ptrs)
        sfx = suffix(x.dtype)
        args = [(x.ptr, PTR), (scale.ptr, PTR), (bias.ptr if bias is not None else 0, PTR),
                (y.ptr, PTR), (mean.ptr if mean is not None else 0, PTR),
                (inv.ptr if inv is not None else 0, PTR), (rows, I64), (cols, I64), (eps, F64)]
        fast = fast_rows(rows, cols, v, x.dtype)
        if fast is not None:
            launch_rows(self, self.name, fast, x, sfx, args, ctx.stream)
            return
        self.launch(self.function(f"{self.name}_v{v}_{sfx}", x), (min(rows, MAX_GRID), 1, 1),
                    (block_for(cols // v), 1, 1), args, ctx.stream)


KERNELS: list[CudaKernel] = [
    Softmax("Softmax", log=False),
    Softmax("LogSoftmax", log=True),
    Normalization("LayerNormalization", 17, rms=False),
    Normalization("RMSNormalization", 23, rms=True),
]
