"""com.microsoft::GatherBlockQuantized on CUDA (``gbq_*`` of ``nbits.cu``), the counterpart
of cpu_reference/quant_contrib.py (registered by :mod:`.quant_contrib`): the tied int4
embedding of onnxruntime-genai's models.

``output = (code - zero_point) * scale`` of the rows ``indices`` picks along
``gather_axis``, data quantized in blocks of ``block_size`` along ``quantize_axis``, in the
scales' dtype (float32, float16, bfloat16). data is int4 / uint4 (one element per byte on
the device, as ml_dtypes stores them; zero point default 0, any axes) or uint8 holding
``8 / bits`` codes along the last axis (``bits`` 2, 4, 8; zero point default
``2^(bits-1)``, packed the same way; gather_axis 0 and quantize_axis last, as onnxruntime
requires). An index outside ``[-s, s-1]`` gives zeros. One thread per output element; the
product is exact in float64 and rounded once, as the reference does: EXACT.

:func:`gbq_geometry` (pure Python, tested on the CPU) checks the shapes the way the
reference does and lays the call out for the kernel.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    OpKey,
    Parity,
    Support,
    TensorSpec,
)
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    PTR,
    CudaKernel,
    dtype_names,
    launch_geometry,
    normalize_axis,
    prod,
    replayed,
    static_shape,
    struct_arg,
    suffix,
)
from onnx_ep.providers.cuda.kernels.nbits import MS_DOMAIN, NBITS_BITS

U8 = np.dtype(np.uint8)
#: data dtype -> (symbol part, signed codes)
DATA: dict[np.dtype, tuple[str, bool]] = {np.dtype(ml_dtypes.int4): ("i4", True),
                                          np.dtype(ml_dtypes.uint4): ("u4", False),
                                          U8: ("u8", False)}
INDICES = frozenset(np.dtype(t) for t in (np.int32, np.int64))
#: output (= scales) dtypes
OUTPUTS = frozenset(np.dtype(t) for t in (np.float32, np.float16, BF16))


class GbqGeo(ctypes.Structure):
    """``struct GbqGeo`` of nbits.cu (by value)."""

    _fields_ = [("total", ctypes.c_int64), ("post", ctypes.c_int64), ("nidx", ctypes.c_int64),
                ("dim", ctypes.c_int64), ("inner_q", ctypes.c_int64), ("dq", ctypes.c_int64),
                ("nb", ctypes.c_int64), ("block", ctypes.c_int64), ("per", ctypes.c_int32),
                ("bits", ctypes.c_int32), ("is_signed", ctypes.c_int32),
                ("has_zp", ctypes.c_int32), ("zp_cols", ctypes.c_int32),
                ("packed", ctypes.c_int32)]


def gbq_axes(meta: NodeMeta, rank: int) -> tuple[int, int] | None:
    """``(gather_axis, quantize_axis)`` in ``[0, rank)``, or ``None`` when out of range."""
    g = normalize_axis(int(meta.attr("gather_axis", 0)), rank)
    q = normalize_axis(int(meta.attr("quantize_axis", 1)), rank)
    return None if g is None or q is None else (g, q)


def gbq_geometry(data: Sequence[int], dtype: Any, indices: Sequence[int],
                 scales: Sequence[int], zero_points: Sequence[int] | None, gather_axis: int,
                 quantize_axis: int, block: int, bits: int
                 ) -> tuple[GbqGeo, tuple[int, ...]]:
    """THE geometry of one call: the kernel's struct and the output shape.

    :param data: data's stored shape; axes already in ``[0, rank)``.
    :raises ValueError: what the reference raises a NodeError for (the message says what).
    """
    dt = np.dtype(dtype)
    data, indices, scales = tuple(data), tuple(indices), tuple(scales)
    rank = len(data)
    if block < 16 or block & (block - 1):
        raise ValueError(f"block_size must be a power of two >= 16, got {block}")
    if dt == U8:
        if bits not in NBITS_BITS:
            raise ValueError(f"bits={bits} is not supported for uint8 data (supported: "
                             f"{NBITS_BITS})")
        if gather_axis != 0 or quantize_axis != rank - 1:
            raise ValueError(f"uint8 data needs gather_axis 0 and quantize_axis the last "
                             f"axis ({rank - 1}), got {gather_axis} and {quantize_axis}")
        per = 8 // bits
        shape = data[:-1] + (data[-1] * per,)
    else:
        per, bits = 1, 4
        shape = data
    qa, ga = quantize_axis, gather_axis
    grid = shape[:qa] + (-(-shape[qa] // block),) + shape[qa + 1:]
    if scales != grid:
        raise ValueError(f"scales must have shape {grid} for data of logical shape {shape}, "
                         f"quantize_axis {qa}, block_size {block}; got {scales}")
    zp_cols = 0
    if zero_points is not None:
        want = grid if per == 1 else grid[:-1] + (-(-grid[-1] // per),)
        if tuple(zero_points) != want:
            raise ValueError(f"zero_points must have shape {want}, got {tuple(zero_points)}")
        zp_cols = want[-1] if dt == U8 else 0
    out = shape[:ga] + indices + shape[ga + 1:]
    g = GbqGeo(prod(out), prod(shape[ga + 1:]), prod(indices), shape[ga],
               prod(shape[qa + 1:]), shape[qa], grid[qa], block, per, bits,
               int(DATA[dt][1]), int(zero_points is not None), zp_cols, int(dt == U8))
    return g, out


class GatherBlockQuantized(CudaKernel):
    """Gather, then ``(code - zero_point) * scale`` in float64, rounded once: EXACT."""

    source = "nbits"

    def __init__(self) -> None:
        super().__init__("GatherBlockQuantized", since=1, parity=Parity.EXACT)
        self.key = OpKey(MS_DOMAIN, "GatherBlockQuantized", 1)

    def supports(self, meta: NodeMeta) -> Support:
        specs = meta.inputs
        if len(specs) < 3 or any(specs[i] is None for i in range(3)):
            return Support.no("needs data, indices and scales of known dtype and rank")
        data, indices, scales = specs[:3]
        if data.dtype not in DATA:
            return Support.no(f"data dtype {data.dtype} is not one of {dtype_names(DATA)}")
        if indices.dtype not in INDICES:
            return Support.no(f"indices must be int32 or int64, got {indices.dtype}")
        if scales.dtype not in OUTPUTS:
            return Support.no(f"scales dtype {scales.dtype} is not one of "
                              f"{dtype_names(OUTPUTS)}")
        zp = specs[3] if meta.given(3) else None
        if meta.given(3) and (zp is None or zp.dtype != data.dtype):
            return Support.no(f"zero_points must have data's dtype {data.dtype}")
        if not data.shape:
            return Support.no("data must have rank >= 1")
        axes = gbq_axes(meta, len(data.shape))
        if axes is None:
            return Support.no(f"gather_axis {meta.attr('gather_axis', 0)} or quantize_axis "
                              f"{meta.attr('quantize_axis', 1)} is out of range for rank "
                              f"{len(data.shape)}")
        shapes = [static_shape(s) for s in (data, indices, scales, zp)]
        if any(s is None for s in shapes[:3]) or (zp is not None and shapes[3] is None):
            return Support.YES
        try:
            gbq_geometry(shapes[0], data.dtype, shapes[1], shapes[2], shapes[3], *axes,
                         int(meta.attr("block_size", 128)), int(meta.attr("bits", 4)))
        except ValueError as e:
            return Support.no(str(e))
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        data, indices, scales = meta.inputs[:3]
        axes = gbq_axes(meta, len(data.shape))
        if axes is None:
            return [None]
        shape = tuple(data.shape)
        if data.dtype == U8:
            per = 8 // int(meta.attr("bits", 4))
            last = shape[-1]
            shape = shape[:-1] + ((last * per) if isinstance(last, int) else None,)
            if shape[-1] is None:
                return [None]
        out = shape[:axes[0]] + tuple(indices.shape) + shape[axes[0] + 1:]
        return [TensorSpec(scales.dtype, out)]

    @replayed
    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        data, indices, scales = inputs[0], inputs[1], inputs[2]
        zp = inputs[3] if len(inputs) > 3 else None
        out = outputs[0]
        node = ctx.node
        axes = gbq_axes(node, data.ndim)
        if axes is None:
            raise self.fail(ctx, "gather_axis or quantize_axis is out of range")
        try:
            g, shape = gbq_geometry(data.shape, data.dtype, indices.shape, scales.shape,
                                    None if zp is None else zp.shape, *axes,
                                    int(node.attr("block_size", 128)), int(node.attr("bits", 4)))
        except ValueError as e:
            raise self.fail(ctx, str(e)) from None
        if tuple(out.shape) != shape:
            raise self.fail(ctx, f"output {out.shape} is not {shape}")
        if g.total == 0:
            return
        symbol = (f"gbq_{DATA[data.dtype][0]}_{suffix(indices.dtype)}_"
                  f"{suffix(scales.dtype)}")
        grid, block = launch_geometry(g.total)
        self.launch(self.function(symbol, out), grid, block,
                    [(data.ptr, PTR), (indices.ptr, PTR), (scales.ptr, PTR),
                     (zp.ptr if zp is not None else 0, PTR), (out.ptr, PTR), struct_arg(g)],
                    ctx.stream)

