"""Indexing on CUDA: Pad, GatherElements, GatherND, ScatterElements (and Scatter),
ScatterND, CumSum, CumProd, TopK, Dropout (inference), ReverseSequence; DepthToSpace and
SpaceToDepth are listed here too (their code is in :mod:`.space_depth`).

Parity: EXACT against cpu_reference for every op here. Movement ops copy bytes; the
arithmetic ones (scatter reductions, CumSum, CumProd) run sequentially in the
reference's order and precision (``indexing.cu`` says how, per dtype); TopK selects.

Device inputs that steer indexing (Pad's pads/constant_value/axes, the indices of the
gathers and scatters, the scans' axis, ReverseSequence's lengths) are read by the
kernels through pointers; output shapes come from the pre-bound outputs (TopK's K is
``outputs[0].shape[axis]``; ``infer_outputs`` sizes them from K when the plan knows its
value, ``meta.constant(1)``). Indices outside ``[-dim, dim)`` are not checked on cuda
(the reference raises; a kernel cannot without a host sync): GatherElements and
GatherND write zeros for them, the scatters skip them, ReverseSequence clamps lengths into
``[0, time]``; no kernel reads or writes out of bounds.

Dropout runs inference only (a copy and an all-true mask); a ``training_mode`` input
is accepted when the plan knows it is false (``meta.constant(2)``), else the node
declines (the random mask of training cannot match the reference's generator anyway).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Support, TensorSpec
from onnx_ep.providers.cuda import copies
from onnx_ep.providers.cuda.kernels import known_values as kv
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    BLOCK,
    I32,
    I64,
    MAX_DIMS,
    PTR,
    U64,
    CudaKernel,
    Geo,
    contiguous_strides,
    grid_1d,
    normalize_axis,
    prod,
    replayed,
    struct_arg,
    suffixes_of,
)
from onnx_ep.providers.cuda.kernels.movement_plan import block_copy_width
from onnx_ep.providers.cuda.kernels.space_depth import (  # noqa: F401 (DepthToSpace's home)
    SpaceDepth,
    space_depth_plan,
)

#: element sizes of the movement kernels (``pad_x4`` ...)
SIZES = (1, 2, 4, 8)

#: dtype -> symbol suffix of the typed kernels; ``_SCATTER``/``_SCAN``/``_TOPK`` say which
#: families instantiate it (rows of base.TYPES)
_SUFFIX: dict[np.dtype, str] = suffixes_of(d for d in (
    np.float32, np.float16, np.float64, np.int64, np.int32, np.int16, np.int8, np.uint8,
    np.uint16, np.uint32, np.uint64, np.bool_, BF16) if d is not None)


def _dtypes(*suffixes: str) -> frozenset[np.dtype]:
    return frozenset(d for d, s in _SUFFIX.items() if s in suffixes)


SCATTER_TYPES = _dtypes("f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "u8", "b8")
SCAN_TYPES = _dtypes("f32", "f16", "bf16", "f64", "i64", "i32", "u32", "u64")
TOPK_TYPES = _dtypes("f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "u8", "u16",
                     "u32", "u64")
INDEX_TYPES = frozenset({np.dtype(np.int32), np.dtype(np.int64)})

#: scatter reduction -> (kernel code, first opset)
REDUCTIONS = {"none": (0, 1), "add": (1, 16), "mul": (2, 16), "max": (3, 18), "min": (4, 18)}
PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


def bits_of(value: Any, dtype: Any) -> int:
    """``value`` cast to ``dtype``, its bytes as a little-endian uint64 (the kernels copy
    the low ``itemsize`` bytes)."""
    raw = np.asarray(value, dtype=np.float64).astype(np.dtype(dtype)).tobytes()
    return int.from_bytes(raw.ljust(8, b"\0")[:8], "little")


def _spec_no(spec: TensorSpec | None, what: str) -> Support:
    if spec is None:
        return Support.no(f"{what} is not a tensor (sequence, optional or missing)")
    return Support.YES


def _input(inputs: Any, i: int) -> Any:
    return inputs[i] if len(inputs) > i else None


def _elementwise_indices(meta: NodeMeta) -> Support:
    """GatherElements/ScatterElements: indices as deep as the data, a valid axis."""
    x, idx = meta.inputs[0], meta.inputs[1]
    if len(idx.shape) != len(x.shape) or not x.shape:
        return Support.no(f"indices rank {len(idx.shape)} must equal data rank "
                          f"{len(x.shape)} (>= 1)")
    if normalize_axis(int(meta.attr("axis", 0)), len(x.shape)) is None:
        return Support.no(f"axis {meta.attr('axis', 0)} is out of range")
    return Support.YES


class _Indexing(CudaKernel):
    source = "indexing"

    def _sized(self, spec: TensorSpec | None, what: str = "input") -> Support:
        s = _spec_no(spec, what)
        if not s:
            return s
        if spec.dtype.kind in "OUSc" or spec.dtype.itemsize not in SIZES:
            return Support.no(f"{what} dtype {spec.dtype} cannot live on cuda")
        if len(spec.shape) > MAX_DIMS:
            return Support.no(f"{what} rank {len(spec.shape)} > {MAX_DIMS}")
        return Support.YES

    def _indexed(self, meta: NodeMeta, what: str) -> Support:
        """The data input is sized and input 1 is an integer tensor of indices."""
        s = self._sized(meta.inputs[0] if meta.inputs else None)
        if not s:
            return s
        idx = _input(meta.inputs, 1)
        if idx is None or idx.dtype not in INDEX_TYPES:
            return Support.no(f"indices must be {what}")
        return Support.YES

    def _typed(self, meta: NodeMeta, allowed: frozenset[np.dtype], family: str) -> Support:
        """The data input is sized and its dtype is one ``family``'s kernels instantiate."""
        x = meta.inputs[0] if meta.inputs else None
        s = self._sized(x)
        if not s:
            return s
        if x.dtype not in allowed:
            return Support.no(f"dtype {x.dtype} is not instantiated for {family}")
        return Support.YES

    def _launch(self, ctx: ExecutionContext, symbol: str, like: Any, n: int,
                args: list[tuple[Any, Any]]) -> None:
        """One grid-stride launch of ``symbol`` over ``n`` elements."""
        self.launch(self.function(symbol, like), grid_1d(n), (BLOCK, 1, 1), args, ctx.stream)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        return [TensorSpec(x.dtype, x.shape)]


# ---------------------------------------------------------------- Pad

def pad_attr_lists(meta: Any, rank: int) -> tuple[list[int], list[int]] | None:
    """Opset < 11: (begins, ends) from the ``pads``/``paddings`` attribute, or ``None``."""
    raw = meta.attr("pads" if meta.opset >= 2 else "paddings")
    raw = [int(p) for p in (raw or [])]
    if len(raw) != 2 * rank:
        return None
    return raw[:rank], raw[rank:]


class Pad(_Indexing):
    def supports(self, meta: NodeMeta) -> Support:
        s = self._sized(meta.inputs[0] if meta.inputs else None)
        if not s:
            return s
        mode = meta.attr("mode", "constant")
        if mode not in PAD_MODES or (mode == "wrap" and meta.opset < 19):
            return Support.no(f"mode {mode!r} is not supported at opset {meta.opset}")
        if meta.opset < 11:
            if pad_attr_lists(meta, len(meta.inputs[0].shape)) is None:
                return Support.no("attribute pads must have 2 entries per axis")
            return Support.YES
        pads = _input(meta.inputs, 1)
        if pads is None or pads.dtype != np.int64:
            return Support.no("input pads must be an int64 tensor")
        cv = _input(meta.inputs, 2)
        if cv is not None and cv.dtype != meta.inputs[0].dtype:
            return Support.no(f"constant_value dtype {cv.dtype} differs from the data's")
        axes = _input(meta.inputs, 3)
        if axes is not None and axes.dtype not in INDEX_TYPES:
            return Support.no("input axes must be int32 or int64")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        if not all(isinstance(d, int) for d in x.shape):
            return [None]
        if meta.opset >= 11:
            be = kv.pad_const_lists(meta, len(x.shape))   # pads (and axes) the plan knows
        else:
            be = pad_attr_lists(meta, len(x.shape))
        if be is None:
            return [None]                       # pads computed on the device: unsized
        return [TensorSpec(x.dtype, tuple(d + b + e for d, b, e in zip(x.shape, *be)))]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        if y.ndim != x.ndim:
            raise self.fail(ctx, f"output rank {y.ndim} differs from input rank {x.ndim}")
        mode = PAD_MODES[ctx.node.attr("mode", "constant")]
        rank = max(x.ndim, 1)
        pads_ptr, axes_ptr, axes64, k, cv_ptr = 0, 0, 1, 0, 0
        attr = Geo.of([0] * rank, [0] * rank)
        if ctx.node.opset < 11:
            be = pad_attr_lists(ctx.node, x.ndim)
            if be is None:
                raise self.fail(ctx, "attribute pads must have 2 entries per axis")
            if x.ndim:
                attr = Geo.of(be[0], be[1])
            cbits = bits_of(ctx.node.attr("value", 0.0), x.dtype)
        else:
            pads = inputs[1]
            pads_ptr, k = pads.ptr, pads.size // 2
            cv = _input(inputs, 2)
            if cv is not None and cv.size:
                cv_ptr = cv.ptr
            axes = _input(inputs, 3)
            if axes is not None:
                axes_ptr, axes64 = axes.ptr, int(axes.dtype == np.int64)
                if axes.size != k:
                    raise self.fail(ctx, f"pads has {pads.size} entries for {axes.size} axes")
            cbits = 0
        es = x.dtype.itemsize
        out = Geo.of(y.shape or [1], [0] * rank)
        ing = Geo.of(x.shape or [1], contiguous_strides(x.shape) or [1])
        self._launch(ctx, f"pad_x{es}", x, y.size, [
            (x.ptr, PTR), (y.ptr, PTR), struct_arg(out), struct_arg(ing), (pads_ptr, PTR),
            struct_arg(attr), (axes_ptr, PTR), (axes64, I32), (k, I32), (cv_ptr, PTR),
            (cbits, U64), (mode, I32), (y.size, I64)])


# ---------------------------------------------------------------- GatherElements

class GatherElements(_Indexing):
    def supports(self, meta: NodeMeta) -> Support:
        s = self._indexed(meta, "int32 or int64")
        return _elementwise_indices(meta) if s else s

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        return [TensorSpec(meta.inputs[0].dtype, meta.inputs[1].shape)]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, idx, y = inputs[0], inputs[1], outputs[0]
        if y.size == 0:
            return
        a = normalize_axis(int(ctx.node.attr("axis", 0)), x.ndim)
        g = Geo.of(idx.shape, contiguous_strides(x.shape))
        self._launch(ctx, f"gather_elements_x{x.dtype.itemsize}", x, y.size, [
            (x.ptr, PTR), (idx.ptr, PTR), (int(idx.dtype == np.int64), I32), (y.ptr, PTR),
            struct_arg(g), (a, I32), (x.shape[a], I64), (y.size, I64)])


# ---------------------------------------------------------------- GatherND

def gather_nd_shape(data: tuple[Any, ...], indices: tuple[Any, ...], b: int
                    ) -> tuple[Any, ...] | None:
    """``indices.shape[:-1] + data.shape[b + m:]`` (dims may be symbolic), or ``None``
    when the index depth ``m`` is unknown or the shapes do not fit ``batch_dims=b``
    (ONNX: ``1 <= m <= rank - b``)."""
    if not indices or not 0 <= b < min(len(data), len(indices)):
        return None
    m = indices[-1]
    if not isinstance(m, int) or not 1 <= m <= len(data) - b:
        return None
    return tuple(indices[:-1]) + tuple(data[b + m:])


def gather_nd_plan(data: tuple[int, ...], indices: tuple[int, ...], b: int, itemsize: int,
                   ptrs: tuple[int, int]) -> tuple[int, Geo, int, int, int, int]:
    """``(width, indexed dims, per_batch, batch_stride, inner, n)`` of ``gather_nd_x<width>``:
    the copied slices widened to ``width`` bytes where their length and the pointers allow
    (every offset is a multiple of a slice, so all counts divide by the widening)."""
    m = indices[-1]
    inner = prod(data[b + m:])
    w = block_copy_width(itemsize, inner, (), ptrs)
    f = w // itemsize
    strides = [s // f for s in contiguous_strides(data[b:])[:m]]
    per_batch = prod(indices[b:-1])
    n = prod(data[:b]) * per_batch * inner // f
    return (w, Geo.of(data[b:b + m], strides), per_batch, prod(data[b:]) // f, inner // f,
            n)


class GatherND(_Indexing):
    """GatherND (``batch_dims`` from opset 12): one thread per output element copies its
    element of the slice its index tuple names; slices are copied in words of up to 16
    bytes. Indices are read on the device (int64 as ONNX says; int32 too, as the other
    cuda gathers and ScatterND take it). Negative entries wrap. A tuple with an entry
    outside ``[-dim, dim)`` is not reported (the reference raises; a kernel cannot without
    a host sync): its slice of the output is zeros, as Gather and GatherElements write,
    and nothing is read out of bounds.
    """

    def _batch_dims(self, meta: Any) -> int:
        return int(meta.attr("batch_dims", 0)) if meta.opset >= 12 else 0

    def supports(self, meta: NodeMeta) -> Support:
        s = self._indexed(meta, "an int64 (or int32) tensor")
        if not s:
            return s
        x, idx = meta.inputs[0], meta.inputs[1]
        b = self._batch_dims(meta)
        if not idx.shape:
            return Support.no("indices must have rank >= 1")
        if not 0 <= b < min(len(x.shape), len(idx.shape)):
            return Support.no(f"batch_dims={b} must be in [0, min(data rank {len(x.shape)}, "
                              f"indices rank {len(idx.shape)}))")
        m = idx.shape[-1]
        if not isinstance(m, int):
            return Support.no(f"indices last dim {m!r} is not a known size: the index depth "
                              f"decides the output rank")
        if not 1 <= m <= len(x.shape) - b:
            return Support.no(f"indices last dim {m} must be in [1, data rank "
                              f"{len(x.shape)} - batch_dims {b}]")
        for d, (dx, di) in enumerate(zip(x.shape[:b], idx.shape[:b])):
            if isinstance(dx, int) and isinstance(di, int) and dx != di:
                return Support.no(f"batch dim {d} is {dx} in data and {di} in indices")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x, idx = meta.inputs[0], meta.inputs[1]
        shape = gather_nd_shape(tuple(x.shape), tuple(idx.shape), self._batch_dims(meta))
        return [None if shape is None else TensorSpec(x.dtype, shape)]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, idx, y = inputs[0], inputs[1], outputs[0]
        b = self._batch_dims(ctx.node)
        shape = gather_nd_shape(tuple(x.shape), tuple(idx.shape), b)
        if shape is None or tuple(x.shape[:b]) != tuple(idx.shape[:b]):
            raise self.fail(ctx, f"indices {tuple(idx.shape)} do not index data "
                                 f"{tuple(x.shape)} with batch_dims={b}")
        if tuple(y.shape) != shape:
            raise self.fail(ctx, f"output planned as {tuple(y.shape)}, GatherND gives {shape}")
        if y.size == 0:
            return
        w, g, per_batch, batch_stride, inner, n = gather_nd_plan(
            tuple(x.shape), tuple(idx.shape), b, x.dtype.itemsize, (x.ptr, y.ptr))
        self._launch(ctx, f"gather_nd_x{w}", x, n, [
            (x.ptr, PTR), (idx.ptr, PTR), (int(idx.dtype == np.int64), I32), (y.ptr, PTR),
            struct_arg(g), (per_batch, I64), (batch_stride, I64), (inner, I64), (n, I64)])


# ---------------------------------------------------------------- scatters

class _Scatter(_Indexing):
    def supports(self, meta: NodeMeta) -> Support:
        s = self._typed(meta, SCATTER_TYPES, "scatters")
        if not s:
            return s
        x = meta.inputs[0]
        idx, upd = _input(meta.inputs, 1), _input(meta.inputs, 2)
        if idx is None or idx.dtype not in INDEX_TYPES:
            return Support.no("indices must be int32 or int64")
        if upd is None or upd.dtype != x.dtype:
            return Support.no("updates must be a tensor of the data's dtype")
        red = meta.attr("reduction", "none")
        if red not in REDUCTIONS or meta.opset < REDUCTIONS[red][1]:
            return Support.no(f"reduction {red!r} is not supported at opset {meta.opset}")
        if red != "none" and x.dtype == np.bool_:
            return Support.no(f"reduction {red!r} on bool is not implemented on cuda")
        return self._shapes(meta)

    def _shapes(self, meta: NodeMeta) -> Support:
        return Support.YES


class ScatterElements(_Scatter):
    def _shapes(self, meta: NodeMeta) -> Support:
        return _elementwise_indices(meta)

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, idx, upd, y = inputs[0], inputs[1], inputs[2], outputs[0]
        if y.size == 0:
            return
        if upd.shape != idx.shape:
            raise self.fail(ctx, f"updates shape {upd.shape} must equal indices shape "
                                 f"{idx.shape}")
        a = normalize_axis(int(ctx.node.attr("axis", 0)), x.ndim)
        red = REDUCTIONS[ctx.node.attr("reduction", "none")][0]
        self._launch(ctx, f"scatter_elements_{_SUFFIX[x.dtype]}", x, y.size, [
            (x.ptr, PTR), (idx.ptr, PTR), (int(idx.dtype == np.int64), I32),
            (upd.ptr, PTR), (y.ptr, PTR), struct_arg(Geo.of(x.shape, [0] * x.ndim)),
            struct_arg(Geo.of(idx.shape, contiguous_strides(idx.shape))), (a, I32),
            (red, I32), (y.size, I64)])


class ScatterND(_Scatter):
    def _shapes(self, meta: NodeMeta) -> Support:
        x, idx = meta.inputs[0], meta.inputs[1]
        if not idx.shape:
            return Support.no("indices must have rank >= 1")
        m = idx.shape[-1]
        if not isinstance(m, int) or m > len(x.shape):
            return Support.no(f"indices last dim {m} must be a known size <= data rank "
                              f"{len(x.shape)}")
        return Support.YES

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, idx, upd, y = inputs[0], inputs[1], inputs[2], outputs[0]
        if y.size == 0:
            return
        m = idx.shape[-1]
        expected = tuple(idx.shape[:-1]) + tuple(x.shape[m:])
        if tuple(upd.shape) != expected:
            raise self.fail(ctx, f"updates shape {upd.shape} must be indices.shape[:-1] + "
                                 f"data.shape[{m}:] = {expected}")
        red = REDUCTIONS[ctx.node.attr("reduction", "none")][0]
        dims = list(x.shape[:m]) or [1]
        self._launch(ctx, f"scatter_nd_{_SUFFIX[x.dtype]}", x, y.size, [
            (x.ptr, PTR), (idx.ptr, PTR), (int(idx.dtype == np.int64), I32),
            (upd.ptr, PTR), (y.ptr, PTR), struct_arg(Geo.of(dims, [0] * len(dims))),
            (m, I32), (prod(idx.shape[:-1]), I64), (prod(x.shape[m:]), I64), (red, I32),
            (y.size, I64)])


# ---------------------------------------------------------------- CumSum, CumProd

class Cumulative(_Indexing):
    """CumSum (``product=False``) and CumProd; the axis is a device scalar."""

    def __init__(self, op_type: str, since: int, product: bool) -> None:
        super().__init__(op_type, since)
        self.product = product

    def supports(self, meta: NodeMeta) -> Support:
        s = self._typed(meta, SCAN_TYPES, self.key.op_type)
        if not s:
            return s
        if not meta.inputs[0].shape:
            return Support.no("input must have rank >= 1")
        axis = _input(meta.inputs, 1)
        if axis is None or axis.dtype not in INDEX_TYPES:
            return Support.no("axis must be an int32 or int64 tensor")
        return Support.YES

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, axis, y = inputs[0], inputs[1], outputs[0]
        if y.size == 0:
            return
        if axis.size != 1:
            raise self.fail(ctx, f"axis must hold one value, got shape {axis.shape}")
        self._launch(ctx, f"cumulative_{_SUFFIX[x.dtype]}", x, x.size, [
            (x.ptr, PTR), (y.ptr, PTR), struct_arg(Geo.of(x.shape, [0] * x.ndim)),
            (axis.ptr, PTR), (int(axis.dtype == np.int64), I32), (int(self.product), I32),
            (int(bool(ctx.node.attr("exclusive", 0))), I32),
            (int(bool(ctx.node.attr("reverse", 0))), I32), (x.size, I64)])


# ---------------------------------------------------------------- TopK

class TopK(_Indexing):
    def supports(self, meta: NodeMeta) -> Support:
        s = self._typed(meta, TOPK_TYPES, "TopK")
        if not s:
            return s
        x = meta.inputs[0]
        if normalize_axis(int(meta.attr("axis", -1)), len(x.shape)) is None:
            return Support.no(f"axis {meta.attr('axis', -1)} is out of range")
        if meta.opset < 10 and meta.attr("k") is None:
            return Support.no("attribute k is required before opset 10")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        a = normalize_axis(int(meta.attr("axis", -1)), len(x.shape))
        k = kv.top_k_value(meta)
        if a is None or k is None:
            return [None, None]                 # K is a device value the plan does not know
        dim = x.shape[a]
        if meta.opset >= 10 and (k < 0 or (isinstance(dim, int) and k > dim)):
            return [None, None]                 # the reference rejects this K when it runs
        shape = list(x.shape)
        shape[a] = k
        return [TensorSpec(x.dtype, tuple(shape)), TensorSpec(np.dtype(np.int64), tuple(shape))]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, vals, ind = inputs[0], outputs[0], outputs[1] if len(outputs) > 1 else None
        if vals is None or ind is None:
            raise self.fail(ctx, "both TopK outputs must be bound on cuda")
        a = normalize_axis(int(ctx.node.attr("axis", -1)), x.ndim)
        k = vals.shape[a]
        if vals.size == 0:
            return
        dim = x.shape[a]
        if k > dim:
            raise self.fail(ctx, f"K={k} exceeds axis {a} of size {dim}")
        self._launch(ctx, f"top_k_{_SUFFIX[x.dtype]}", x, x.size, [
            (x.ptr, PTR), (vals.ptr, PTR), (ind.ptr, PTR), (prod(x.shape[:a]), I64),
            (dim, I64), (prod(x.shape[a + 1:]), I64), (k, I64),
            (int(bool(ctx.node.attr("largest", 1))), I32)])


# ---------------------------------------------------------------- Dropout

def dropout_mask_dtype(opset: int, x_dtype: Any) -> np.dtype:
    return np.dtype(np.bool_) if opset >= 10 else np.dtype(x_dtype)


class Dropout(_Indexing):
    def supports(self, meta: NodeMeta) -> Support:
        s = self._sized(meta.inputs[0] if meta.inputs else None)
        if not s:
            return s
        if meta.opset >= 12 and _input(meta.inputs, 2) is not None:
            training = meta.constant(2)
            if training is None:
                return Support.no("training_mode is a device input whose value the plan "
                                  "does not know (training draws a random mask the host "
                                  "generator defines): runs on the host")
            if np.asarray(training).size != 1 or bool(np.asarray(training).reshape(-1)[0]):
                return Support.no("training_mode is true: training draws a random mask the "
                                  "host generator defines (runs on the host)")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        out: list[TensorSpec | None] = [TensorSpec(x.dtype, x.shape)]
        if len(meta.output_names) > 1:
            out.append(TensorSpec(dropout_mask_dtype(meta.opset, x.dtype), x.shape))
        return out

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, y = inputs[0], outputs[0]
        if y is not None:
            copies.copy_dtod(y.ptr, x.ptr, y.nbytes, ctx.stream)
        mask = outputs[1] if len(outputs) > 1 else None
        if mask is None or mask.size == 0:
            return
        es = mask.dtype.itemsize
        self._launch(ctx, f"fill_x{es}", mask, mask.size, [
            (mask.ptr, PTR), (bits_of(1, mask.dtype), U64), (mask.size, I64)])


# ---------------------------------------------------------------- ReverseSequence

class ReverseSequence(_Indexing):
    def _axes(self, meta: Any) -> tuple[int, int]:
        return int(meta.attr("batch_axis", 1)), int(meta.attr("time_axis", 0))

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0] if meta.inputs else None
        s = self._sized(x)
        if not s:
            return s
        if len(x.shape) < 2:
            return Support.no("input must have rank >= 2")
        if set(self._axes(meta)) != {0, 1}:
            return Support.no(f"batch_axis and time_axis {self._axes(meta)} must be 0 and 1")
        lens = _input(meta.inputs, 1)
        if lens is None or lens.dtype != np.int64:
            return Support.no("sequence_lens must be an int64 tensor")
        return Support.YES

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, lens, y = inputs[0], inputs[1], outputs[0]
        if y.size == 0:
            return
        b_axis, t_axis = self._axes(ctx.node)
        if lens.size != x.shape[b_axis]:
            raise self.fail(ctx, f"sequence_lens has {lens.size} entries for a batch of "
                                 f"{x.shape[b_axis]}")
        dims = [x.shape[0], x.shape[1], prod(x.shape[2:])]
        self._launch(ctx, f"reverse_sequence_x{x.dtype.itemsize}", x, y.size, [
            (x.ptr, PTR), (y.ptr, PTR), (lens.ptr, PTR), (t_axis, I32),
            struct_arg(Geo.of(dims, [0, 0, 0])), (y.size, I64)])


KERNELS: list[CudaKernel] = [
    Pad("Pad", since=1),
    GatherElements("GatherElements", since=11),
    GatherND("GatherND", since=11),
    ScatterElements("ScatterElements", since=11),
    ScatterElements("Scatter", since=9),
    ScatterND("ScatterND", since=11),
    Cumulative("CumSum", since=11, product=False),
    Cumulative("CumProd", since=26, product=True),
    TopK("TopK", since=1),
    Dropout("Dropout", since=1),
    ReverseSequence("ReverseSequence", since=10),
    SpaceDepth("DepthToSpace", since=1),
    SpaceDepth("SpaceToDepth", since=1),
]
