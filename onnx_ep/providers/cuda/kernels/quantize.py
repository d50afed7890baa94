"""CUDA QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (``quantize.cu``).

Per-tensor, per-axis and blocked scales / zero points; quantized types int8, uint8, int16,
uint16, int4, uint4, int2, uint2 (one element per byte, as ml_dtypes stores them), the four
float8s and float4e2m1; DequantizeLinear also reads int32. Parity: exact, in the
arithmetic of cpu_reference/quantize.py (see quantize.cu). Where the reference raises
on values (a non-zero float8 zero point), the kernels cannot look at the device data:
they compute as if it were zero.
"""

from __future__ import annotations

import ctypes
from typing import Any

import ml_dtypes
import numpy as np

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Support,
    TensorSpec,
    WorkspaceRequirement,
)
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    I32,
    I64,
    PTR,
    CudaKernel,
    dtype_names,
    launch_geometry,
    normalize_axis,
    prod,
    struct_arg,
    suffixes_of,
)

SOURCE = "quantize"


def _dt(t: Any) -> np.dtype:
    return np.dtype(t)


#: quantized types -> symbol suffix (this and the tables below: rows of base.TYPES)
QUANTIZED: dict[np.dtype, str] = suffixes_of((
    np.int8, np.uint8, np.int16, np.uint16, ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2,
    ml_dtypes.uint2, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn))
#: DequantizeLinear's inputs: the quantized types and int32
DEQUANTIZABLE: dict[np.dtype, str] = {**QUANTIZED, **suffixes_of((np.int32,))}
#: QuantizeLinear's x
QUANTIZABLE: dict[np.dtype, str] = suffixes_of((
    np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int32))
#: scale dtypes -> the kernels' run-time code
SCALES: dict[np.dtype, int] = {_dt(np.float32): 0, _dt(np.float16): 1,
                               _dt(ml_dtypes.bfloat16): 2, _dt(np.float64): 3}
#: DequantizeLinear outputs -> symbol suffix
OUTPUTS: dict[np.dtype, str] = suffixes_of((np.float32, np.float16, ml_dtypes.bfloat16,
                                            np.float64))
FLOAT8 = frozenset(_dt(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                    ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))


class QGeo(ctypes.Structure):
    """``struct QGeo`` of quantize.cu (by value)."""

    _fields_ = [("n", ctypes.c_int64), ("D", ctypes.c_int64), ("inner", ctypes.c_int64),
                ("block", ctypes.c_int64), ("nb", ctypes.c_int64), ("mode", ctypes.c_int32)]


def param_geometry(x_shape: tuple[int, ...], p_shape: tuple[int, ...], axis: int,
                   block: int) -> QGeo:
    """How a scale / zero point of ``p_shape`` applies to ``x_shape`` (the reference's
    ``_broadcast_param``): per tensor, per axis or blocked.

    :raises ValueError: the shapes do not fit (the message says how).
    """
    g = QGeo()
    g.n = prod(x_shape)
    size = prod(p_shape)
    if len(p_shape) == 0 or (size == 1 and not block):
        g.mode, g.D, g.inner, g.block, g.nb = 0, 1, 1, 1, 1
        return g
    if not x_shape:
        raise ValueError(f"a parameter of shape {p_shape} cannot apply to a scalar input")
    a = normalize_axis(axis, len(x_shape))
    if a is None:
        raise ValueError(f"axis {axis} is out of range for rank {len(x_shape)}")
    g.D, g.inner = int(x_shape[a]), prod(x_shape[a + 1:])
    if not block:
        if len(p_shape) != 1 or p_shape[0] != x_shape[a]:
            raise ValueError(f"per-axis parameter must be 1-D of length {x_shape[a]} (axis "
                             f"{a} of {x_shape}), got shape {p_shape}")
        g.mode, g.block, g.nb = 1, 1, 1
        return g
    if block < 0:
        raise ValueError(f"block_size must be >= 0, got {block}")
    nb = -(-int(x_shape[a]) // block)
    want = tuple(x_shape[:a]) + (nb,) + tuple(x_shape[a + 1:])
    if tuple(p_shape) != want:
        raise ValueError(f"blocked parameter must have shape {want} for input {x_shape}, "
                         f"axis {a}, block_size {block}; got {p_shape}")
    g.mode, g.block, g.nb = 2, block, nb
    return g


def _zero_point(meta: NodeMeta) -> tuple[bool, TensorSpec | None]:
    """(present, spec) of input 2; present with a ``None`` spec means unknown."""
    names = meta.input_names
    present = len(meta.inputs) > 2 and (meta.inputs[2] is not None
                                        or (len(names) > 2 and bool(names[2])))
    return present, (meta.inputs[2] if present else None)


def _static_check(meta: NodeMeta, x: TensorSpec, p: TensorSpec | None) -> Support:
    """Decline parameter shapes that cannot fit, where the shapes are known. The kernels
    index the zero point like the scale, so their shapes must agree."""
    zp = _zero_point(meta)[1]
    if zp is not None and p is not None and zp.is_static and p.is_static:
        if tuple(zp.shape) != tuple(p.shape) and not (prod(zp.shape) == prod(p.shape) == 1):
            return Support.no(f"zero point shape {tuple(zp.shape)} differs from the scale's "
                              f"{tuple(p.shape)}")
    if p is None or not x.is_static or not p.is_static:
        return Support.YES
    try:
        param_geometry(tuple(x.shape), tuple(p.shape), int(meta.attr("axis", 1)),
                       int(meta.attr("block_size", 0)))
    except ValueError as exc:
        return Support.no(str(exc))
    return Support.YES


class _Quant(CudaKernel):
    source = SOURCE

    def out_dtype(self, meta: NodeMeta) -> np.dtype | None:
        raise NotImplementedError

    def _operands(self, meta: NodeMeta, scale_name: str,
                  x_table: dict[np.dtype, str]) -> Support:
        """x and the scale are known, of dtypes the kernels instantiate."""
        if len(meta.inputs) < 2 or meta.inputs[0] is None or meta.inputs[1] is None:
            return Support.no(f"needs x and {scale_name} of known dtype and rank")
        x, s = meta.inputs[0], meta.inputs[1]
        if np.dtype(x.dtype) not in x_table:
            return Support.no(f"x dtype {x.dtype} not in ({dtype_names(x_table)})")
        if np.dtype(s.dtype) not in SCALES:
            return Support.no(f"scale dtype {s.dtype} not in ({dtype_names(SCALES)})")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x, out = meta.inputs[0], self.out_dtype(meta)
        assert x is not None and out is not None
        return [TensorSpec(out, x.shape)]

    def _launch(self, ctx: ExecutionContext, inputs: Any, outputs: Any, prefix: str,
                x_table: dict[np.dtype, str], y_table: dict[np.dtype, str],
                extra: list[tuple[Any, Any]]) -> None:
        """Launch ``{prefix}_{x suffix}_{y suffix}`` over x (scale, optional zero point)."""
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 else None
        y = outputs[0]
        symbol = f"{prefix}_{x_table[np.dtype(x.dtype)]}_{y_table[np.dtype(y.dtype)]}"
        node = ctx.node
        try:
            g = param_geometry(tuple(x.shape), tuple(scale.shape), int(node.attr("axis", 1)),
                               int(node.attr("block_size", 0)))
        except ValueError as exc:
            raise self.fail(ctx, str(exc)) from exc
        if g.n == 0:
            return
        grid, block = launch_geometry(g.n)
        args = [(int(x.ptr), PTR), (int(scale.ptr), PTR),
                (SCALES[np.dtype(scale.dtype)], I32),
                (int(zp.ptr) if zp is not None else 0, PTR), (int(y.ptr), PTR),
                struct_arg(g), *extra]
        self.launch(self.function(symbol, y), grid, block, args, ctx.stream)


class QuantizeLinear(_Quant):
    """``saturate(round(x / scale) + zero_point)``; the output type is the zero point's,
    else ``output_dtype``, else uint8."""

    def out_dtype(self, meta: NodeMeta) -> np.dtype | None:
        present, zp = _zero_point(meta)
        attr = int(meta.attr("output_dtype", 0) or 0)
        if present:
            return None if zp is None else np.dtype(zp.dtype)
        return np_dtype(attr) if attr else np.dtype(np.uint8)

    def supports(self, meta: NodeMeta) -> Support:
        ok = self._operands(meta, "y_scale", QUANTIZABLE)
        if not ok:
            return ok
        x, s = meta.inputs[0], meta.inputs[1]
        out = self.out_dtype(meta)
        if out is None:
            return Support.no("the zero point's dtype is unknown")
        attr = int(meta.attr("output_dtype", 0) or 0)
        if attr and _zero_point(meta)[0] and np_dtype(attr) != out:
            return Support.no(f"output_dtype {np_dtype(attr)} differs from the zero point's "
                              f"dtype {out}")
        if out not in QUANTIZED:
            return Support.no(f"output dtype {out} not in ({dtype_names(QUANTIZED)})")
        return _static_check(meta, x, s)

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        saturate = int(bool(int(ctx.node.attr("saturate", 1))))
        self._launch(ctx, inputs, outputs, "quantize", QUANTIZABLE, QUANTIZED,
                     [(saturate, I32)])


class DequantizeLinear(_Quant):
    """``(x - zero_point) * scale`` in float64, rounded once to the scale's dtype (or
    ``output_dtype``)."""

    def out_dtype(self, meta: NodeMeta) -> np.dtype | None:
        attr = int(meta.attr("output_dtype", 0) or 0)
        if attr:
            return np_dtype(attr)
        s = meta.inputs[1] if len(meta.inputs) > 1 else None
        return None if s is None else np.dtype(s.dtype)

    def supports(self, meta: NodeMeta) -> Support:
        ok = self._operands(meta, "x_scale", DEQUANTIZABLE)
        if not ok:
            return ok
        x, s = meta.inputs[0], meta.inputs[1]
        present, zp = _zero_point(meta)
        if present and (zp is None or np.dtype(zp.dtype) != np.dtype(x.dtype)):
            return Support.no(f"zero point dtype {None if zp is None else zp.dtype} is not "
                              f"x's {x.dtype}")
        out = self.out_dtype(meta)
        if out not in OUTPUTS:
            return Support.no(f"output dtype {out} not in ({dtype_names(OUTPUTS)})")
        return _static_check(meta, x, s)

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        self._launch(ctx, inputs, outputs, "dequantize", DEQUANTIZABLE, OUTPUTS, [])


class DynamicQuantizeLinear(CudaKernel):
    """uint8 quantization with scale and zero point from the data (float32 x): one block
    folds min / max, then an elementwise pass. The float zero point lives in 4 bytes of
    workspace between the two launches."""

    source = SOURCE
    WORKSPACE = 4

    def supports(self, meta: NodeMeta) -> Support:
        if not meta.inputs or meta.inputs[0] is None:
            return Support.no("needs x of known dtype and rank")
        if np.dtype(meta.inputs[0].dtype) != np.float32:
            return Support.no(f"x dtype {meta.inputs[0].dtype} is not float32")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        assert x is not None
        return [TensorSpec(np.uint8, x.shape), TensorSpec(np.float32, ()),
                TensorSpec(np.uint8, ())]

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        return WorkspaceRequirement(self.WORKSPACE)

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x = inputs[0]
        y, scale, zp = outputs
        zp_f = self.workspace_ptr(ctx, workspace, self.WORKSPACE)
        n = prod(x.shape)
        self.launch(self.function("dql_range", y), (1, 1, 1), (BLOCK, 1, 1),
                    [(int(x.ptr), PTR), (n, I64), (int(scale.ptr), PTR), (int(zp.ptr), PTR),
                     (zp_f, PTR)], ctx.stream)
        if n == 0:
            return
        grid, block = launch_geometry(n)
        self.launch(self.function("dql_apply", y), grid, block,
                    [(int(x.ptr), PTR), (int(scale.ptr), PTR), (zp_f, PTR), (int(y.ptr), PTR),
                     (n, I64)], ctx.stream)


KERNELS: list[CudaKernel] = [
    QuantizeLinear("QuantizeLinear", since=10),
    DequantizeLinear("DequantizeLinear", since=10),
    DynamicQuantizeLinear("DynamicQuantizeLinear", since=11),
]
