"""MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool (pool.cu), float32/float16/
bfloat16.

Windows come from ``providers/shared/windows.window_geometry`` (pads, auto_pad, ceil_mode,
dilations), so both providers agree on every output size; 1-D and 2-D inputs run
as 3-D with leading unit axes. One thread per output element.

Parity (see pool.cu): MaxPool and GlobalMaxPool select and are exact; AveragePool
replays the reference's float32 sum in tap order and its single division, so it is
exact too; GlobalAveragePool sums a plane in a fixed tree order in float32, against
numpy's pairwise mean: a tolerance per dtype. LpPool sums |x|^p in float64 in tap
order and rounds once: exact for p = 1, 2, one output ulp otherwise (pow). MaxPool's
optional Indices output is not implemented (declined, cpu_reference runs it).

ceil_mode: a last window that would start in the end padding is dropped (cpu_reference,
onnxruntime, PyTorch), but onnx's shape inference keeps it, and the plan pre-sizes a
device output from onnx's shape: where the two sizes differ, the node is declined
(cpu_reference runs it) instead of writing a wrongly shaped output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    Support,
    TensorSpec,
    WorkspaceView,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    F64,
    I32,
    I64,
    PTR,
    FloatKernel,
    grid_1d,
    prod,
    static_shape,
    suffix,
)
from onnx_ep.providers.shared.windows import window_geometry

#: GlobalAveragePool: float32 sums in another order than numpy's, rounded once to the dtype
GLOBAL_AVERAGE_PARITY: dict[str, Parity] = {
    "float32": Parity.tolerance(rtol=1e-5, atol=1e-6),
    "float16": Parity.tolerance(rtol=1e-3, atol=1e-6),
    "bfloat16": Parity.tolerance(rtol=8e-3, atol=1e-6),
}

MODE_MAX, MODE_AVERAGE, MODE_AVERAGE_WITH_PADS = 0, 1, 2


@attrs.frozen
class PoolGeometry:
    """A window pooling as 3-D: per axis (outermost first) the input and output sizes,
    kernel, stride, pads (begin, end) and dilation; ``out_shape`` is the ONNX output."""

    planes: int
    inputs: tuple[int, int, int]
    outputs: tuple[int, int, int]
    kernel: tuple[int, int, int]
    strides: tuple[int, int, int]
    pads_begin: tuple[int, int, int]
    pads_end: tuple[int, int, int]
    dilations: tuple[int, int, int]
    out_shape: tuple[int, ...]

    def launch_args(self) -> list[int]:
        """The window kernel's per-axis scalars, axis by axis (pool.cu's EP_DIMS_PARAMS)."""
        out: list[int] = []
        for ax in range(3):
            out += [self.inputs[ax], self.outputs[ax], self.kernel[ax], self.strides[ax],
                    self.pads_begin[ax], self.pads_end[ax], self.dilations[ax]]
        return out


def _lead(values: Sequence[int], fill: int) -> tuple[int, int, int]:
    values = tuple(int(v) for v in values)
    return (fill,) * (3 - len(values)) + values  # type: ignore[return-value]


def pool_geometry(meta: NodeMeta, x: Sequence[int]) -> PoolGeometry:
    """THE window geometry of MaxPool / AveragePool on input shape ``x``.

    :raises NodeError: rank outside 3..5, a missing ``kernel_shape``, or bad attributes.
    """
    x = tuple(int(d) for d in x)
    if not 3 <= len(x) <= 5:
        raise NodeError(f"X must have rank 3, 4 or 5 (N, C, D1, ...), got shape {x}",
                        node=meta.name, op_type=meta.op_type)
    kernel = meta.attr("kernel_shape", None)
    if kernel is None:
        raise NodeError("attribute 'kernel_shape' is required", node=meta.name,
                        op_type=meta.op_type)
    g = window_geometry(meta, x[2:], kernel, ceil_mode=bool(meta.attr("ceil_mode", 0)))
    return PoolGeometry(x[0] * x[1], _lead(x[2:], 1), _lead(g.out, 1), _lead(g.kernel, 1),
                        _lead(g.strides, 1), _lead(g.pads_begin, 0), _lead(g.pads_end, 0),
                        _lead(g.dilations, 1), x[:2] + tuple(g.out))


def ceil_mode_may_drop_a_window(meta: NodeMeta) -> bool:
    """Whether ``ceil_mode`` can drop a last window starting in the end padding for some
    input size (then onnx's shape inference gives one more output than the op has).

    The last window starts at ``ceil((i + b + e - k) / s) * s - b``, which is at least the
    input size ``i`` only if ``e + s > k`` (``k`` the dilated kernel): the sizes agree on
    every input size otherwise. ``auto_pad`` SAME_* ignores ``ceil_mode``.
    """
    if not meta.attr("ceil_mode", 0):
        return False
    auto_pad = meta.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in ("NOTSET", "VALID"):
        return False
    kernel = [int(k) for k in meta.attr("kernel_shape", None) or ()]
    n = len(kernel)
    strides = list(meta.attr("strides", None) or [1] * n)
    dilations = list(meta.attr("dilations", None) or [1] * n)
    pads = list(meta.attr("pads", None) or [0] * (2 * n)) if auto_pad == "NOTSET" \
        else [0] * (2 * n)
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        return True          # malformed: pool_geometry reports it once the shape is known
    return any(int(pads[n + a]) + int(strides[a]) > (kernel[a] - 1) * int(dilations[a]) + 1
               for a in range(n))


class _WindowPool(FloatKernel):
    source = "pool"
    mode = MODE_MAX

    def check(self, meta: NodeMeta) -> Support:
        rank = len(meta.inputs[0].shape)
        if not 3 <= rank <= 5:
            return Support.no(f"X of rank {rank}: pooling needs rank 3, 4 or 5")
        shape = static_shape(meta.inputs[0])
        try:
            if shape is not None:
                out = pool_geometry(meta, shape).out_shape
                y = meta.outputs[0] if meta.outputs else None
                planned = static_shape(y)
                if planned is not None and planned != out:
                    return Support.no(
                        f"the planned output {planned} (onnx shape inference) is not the "
                        f"{out} these windows give (ceil_mode drops a last window that "
                        f"would start in the end padding, as cpu_reference and "
                        f"onnxruntime do); the device output is sized from the plan")
            elif meta.attr("kernel_shape", None) is None:
                return Support.no("attribute 'kernel_shape' is required")
            elif ceil_mode_may_drop_a_window(meta):
                return Support.no(
                    "ceil_mode=1 with a dynamic spatial shape where a last window can start "
                    "in the end padding: onnx shape inference then sizes the output one "
                    "larger than the op's (the window is dropped), and the device output "
                    "is sized from the plan")
        except NodeError as e:
            return Support.no(e.detail)
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        shape = static_shape(meta.inputs[0])
        if shape is None:
            return [None] * max(1, len(meta.output_names))
        spec = TensorSpec(meta.inputs[0].dtype, pool_geometry(meta, shape).out_shape)
        return [spec] + [None] * (len(meta.output_names) - 1)

    #: the pool.cu kernel; its last argument is :meth:`last_argument`
    symbol = "window_pool"

    def node_mode(self, meta: NodeMeta) -> int:
        return self.mode

    def last_argument(self, meta: NodeMeta) -> tuple[Any, Any]:
        return (self.node_mode(meta), I32)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        x, y = inputs[0], outputs[0]
        try:
            g = pool_geometry(ctx.node, x.shape)
        except NodeError as e:
            raise self.fail(ctx, e.detail) from None
        if tuple(y.shape) != g.out_shape:
            # the plan sized Y (onnx shape inference); never write a differently shaped result
            raise self.fail(ctx, f"output Y was planned as {tuple(y.shape)} but the "
                                 f"windows on X {tuple(x.shape)} give {g.out_shape}")
        n = prod(g.out_shape)
        fn = self.function(f"{self.symbol}_{suffix(x.dtype)}", x)
        args = [(x.ptr, PTR), (y.ptr, PTR), (g.planes, I64)]
        args += [(v, I64) for v in g.launch_args()]
        args.append(self.last_argument(ctx.node))
        if n > 0:
            self.launch(fn, grid_1d(n), (BLOCK, 1, 1), args, ctx.stream)


class MaxPool(_WindowPool):
    """Max over each window (exact); declines the optional Indices output."""

    mode = MODE_MAX

    def __init__(self) -> None:
        super().__init__("MaxPool", since=1)

    def check(self, meta: NodeMeta) -> Support:
        if len(meta.output_names) > 1 and meta.output_names[1]:
            return Support.no("MaxPool's Indices output is not implemented on cuda")
        return super().check(meta)


class AveragePool(_WindowPool):
    """Mean over each window; float32 sum in the reference's tap order, one division (exact)."""

    def __init__(self) -> None:
        super().__init__("AveragePool", since=1)

    def node_mode(self, meta: NodeMeta) -> int:
        return MODE_AVERAGE_WITH_PADS if meta.attr("count_include_pad", 0) else MODE_AVERAGE


class GlobalPool(FloatKernel):
    """GlobalMaxPool (exact) / GlobalAveragePool (float32 tree sum): one block per plane."""

    source = "pool"

    def __init__(self, op_type: str, mode: int) -> None:
        super().__init__(op_type, since=1,
                         parities=GLOBAL_AVERAGE_PARITY if mode == MODE_AVERAGE else None)
        self.mode = mode

    def check(self, meta: NodeMeta) -> Support:
        rank = len(meta.inputs[0].shape)
        if rank < 3:
            return Support.no(f"X of rank {rank}: global pooling needs rank >= 3")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        if len(x.shape) < 3:
            return [None]
        return [TensorSpec(x.dtype, tuple(x.shape[:2]) + (1,) * (len(x.shape) - 2))]

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        x, y = inputs[0], outputs[0]
        if len(x.shape) < 3:
            raise self.fail(ctx, f"X must have rank >= 3, got shape {tuple(x.shape)}")
        planes, size = prod(x.shape[:2]), prod(x.shape[2:])
        if planes == 0:
            return
        if size == 0:
            raise self.fail(ctx, f"X {tuple(x.shape)} has no spatial elements to pool")
        fn = self.function(f"global_pool_{suffix(x.dtype)}", x)
        self.launch(fn, (min(planes, 65535 * 32), 1, 1), (BLOCK, 1, 1),
                    [(x.ptr, PTR), (y.ptr, PTR), (planes, I64), (size, I64), (self.mode, I32)],
                    ctx.stream)


class LpPool(_WindowPool):
    """(sum |x|^p)^(1/p) over each window in float64, rounded once (pool.cu's lp_pool):
    exact for p = 1 and 2 (numpy's fast paths), one output ulp for other p (pow)."""

    symbol = "lp_pool"

    def __init__(self) -> None:
        super().__init__("LpPool", since=1)

    def bind(self, meta: NodeMeta) -> LpPool:
        bound = super().bind(meta)
        bound.parity = Parity.EXACT if float(meta.attr("p", 2)) in (1.0, 2.0) else Parity.ulp(1)
        return bound

    def last_argument(self, meta: NodeMeta) -> tuple[Any, Any]:
        return (float(meta.attr("p", 2)), F64)


KERNELS: list[Any] = [
    MaxPool(),
    AveragePool(),
    LpPool(),
    GlobalPool("GlobalMaxPool", MODE_MAX),
    GlobalPool("GlobalAveragePool", MODE_AVERAGE),
]
