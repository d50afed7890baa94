"""onnxruntime's block-quantized weight ops: ``com.microsoft::MatMulNBits`` and
``com.microsoft::GatherBlockQuantized`` (onnxruntime's docs/ContribOperators.md), the int4
projections and the tied int4 embedding of onnxruntime-genai's models.

``MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?) -> Y``: B holds an ``[N, K]``
weight quantized in blocks of ``block_size`` along K, ``bits`` (2, 4 or 8) per code, packed
low bits first into uint8 blobs ``[N, ceil(K / block_size), block_size * bits / 8]``.
``W[n, k] = (code[n, k] - zero_point[n, b]) * scale[n, b]`` with ``b = k // block_size``
(``b = g_idx[k]`` when the deprecated act-order input is given); Y = A @ W^T (+ bias), of
A's shape with the last dim K replaced by N. Scales are A's dtype, ``[N, n_blocks]`` or
flat; zero points are uint8 packed like B (``[N, ceil(n_blocks * bits / 8)]``, or flat) or
A's dtype ``[N, n_blocks]``, and default to ``2^(bits-1)``. Codes past K in the last block
are padding and ignored. A B with a zero dimension is an omitted projection: Y is zeros
(plus the bias). ``accuracy_level`` is accepted and does not change the math (it allows an
implementation to quantize A; onnxruntime's CPU does at level 4, see docs/PARITY.md).

Numerics: each weight is dequantized in float64 (exact for integer zero points: a code
difference of at most 9 bits times a scale of at most 24 significant bits), the K-sum and
the bias are float64, and the result is rounded once to A's dtype, as ``FusedMatMul``.
When B, the scales and the zero points (and g_idx) are initializers, the float64 weights
are dequantized once at bind and held for the session (``prepared_nbytes``, charged to its
ledger): the same values in the same product as dequantizing per call. Otherwise they are
dequantized on the fly, a chunk of rows at a time, into step-scoped workspace that the plan
accounts for (:func:`nbits_plan`).

``GatherBlockQuantized(data, indices, scales, zero_points?) -> output``: Gather along
``gather_axis`` from ``data`` quantized in blocks of ``block_size`` along
``quantize_axis``; ``output = (code - zero_point) * scale`` in the scales' dtype. data is
int4/uint4 (zero point default 0) or uint8 holding ``bits`` 2, 4 or 8 codes packed along
the last axis (zero point default ``2^(bits-1)``; gather_axis 0 and quantize_axis last, as
onnxruntime requires). Indices in ``[-s, s-1]``; an index outside gives a slice of zeros,
as the contrib spec says. Only the gathered rows are dequantized (float64, exact) and
rounded once: EXACT.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import ml_dtypes
import numpy as np

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    Support,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis
from onnx_ep.providers.cpu_reference.dot import wide
from onnx_ep.providers.cpu_reference.formats import decode_int
from onnx_ep.providers.cpu_reference.fused_gemm import MS_DOMAIN
from onnx_ep.providers.cpu_reference.gemm import MATMUL_PARITY
from onnx_ep.providers.cpu_reference.lowfloat import round_to
from onnx_ep.providers.shared.nbits import NBITS_BITS, NBitsGeometry, nbits_geometry

#: A's (and scales', bias') dtypes: onnxruntime's T1 (its CPU kernel lacks bfloat16)
NBITS_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float16, ml_dtypes.bfloat16))
#: float64 weights dequantized per chunk: about 1 MiB of scratch, which stays in cache
CHUNK_ELEMENTS = 1 << 17
_INT4 = frozenset(np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4))
_U8 = np.dtype(np.uint8)


def _names(dtypes: frozenset[np.dtype]) -> str:
    return ", ".join(sorted(str(d) for d in dtypes))


def _power_of_two_block(block: int) -> str | None:
    if block < 16 or block & (block - 1):
        return f"block_size must be a power of two >= 16, got {block}"
    return None


def unpack_codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes ``[..., L]`` -> codes ``[..., L * 8 / bits]`` (uint8), low bits first."""
    if bits == 8:
        return packed
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 8 // bits,), np.uint8)
    unpack_into(packed, bits, out)
    return out


def unpack_into(packed: np.ndarray, bits: int, out: np.ndarray) -> None:
    """:func:`unpack_codes` into ``out`` (of the codes' shape), with no temporary."""
    per = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    np.bitwise_and(packed, mask, out=out[..., 0::per])
    for i in range(1, per - 1):
        np.bitwise_and(np.right_shift(packed, np.uint8(i * bits)), mask, out=out[..., i::per])
    np.right_shift(packed, np.uint8(8 - bits), out=out[..., per - 1::per])


# ---------------------------------------------------------------- MatMulNBits


@attrs.frozen
class NBitsPlan(NBitsGeometry):
    """One MatMulNBits node's geometry and scratch layout.

    :ivar rows: weight rows (outputs n) dequantized per chunk.
    """

    rows: int

    @property
    def codes_nbytes(self) -> int:
        """Unpacked codes of a chunk (8-bit codes are read from B as they are)."""
        return 0 if self.bits == 8 else self.rows * self.padded_k

    @property
    def nbytes(self) -> int:
        """Exact workspace bytes: the chunk's float64 weights, then its unpacked codes."""
        return self.rows * self.padded_k * 8 + self.codes_nbytes


def nbits_plan(meta: NodeMeta) -> NBitsPlan:
    """THE MatMulNBits attribute check (:func:`nbits_geometry`) and scratch-size formula
    (bind and run both call it).

    :raises NodeError: when K, N, bits or block_size do not describe a valid node.
    """
    g = nbits_geometry(meta)
    return NBitsPlan(g.k, g.n, g.bits, g.block,
                     max(1, min(g.n, CHUNK_ELEMENTS // g.padded_k)))


def _support_nbits(meta: NodeMeta) -> Support:
    """What the kernel cannot run, without raising (attributes the model got wrong are
    left to :func:`nbits_plan`, which names them at bind)."""
    specs = meta.inputs
    if len(specs) < 3:
        return Support.no(f"MatMulNBits takes 3 to 6 inputs, got {len(specs)}")
    a = specs[0]
    if a is not None and a.dtype not in NBITS_DTYPES:
        return Support.no(f"A dtype {a.dtype} is not one of {_names(NBITS_DTYPES)}")
    bits = meta.attr("bits", 4)
    if bits not in NBITS_BITS:
        return Support.no(f"bits={bits} is not implemented (only {NBITS_BITS})")
    if meta.attr("weight_prepacked", 0):
        return Support.no(f"weight_prepacked={meta.attr('weight_prepacked')} is an "
                          f"execution provider's private layout")
    return Support.YES


class MatMulNBits(CpuKernel):
    """``A @ dequant(B)^T (+ bias)``: float64 weights and sum, rounded once to A's dtype."""

    parity = MATMUL_PARITY

    def __init__(self, plan: NBitsPlan | None = None) -> None:
        super().__init__("MatMulNBits", since=1, domain=MS_DOMAIN, dtypes=NBITS_DTYPES)
        self.plan = plan
        #: constant (B, scales, zero_points, g_idx) and their float64 W [N, K], from bind
        self._sources: tuple[Any, ...] = ()
        self._w: np.ndarray | None = None

    def supports(self, meta: NodeMeta) -> Support:
        return _support_nbits(meta)

    def bind(self, meta: NodeMeta) -> MatMulNBits:
        bound = MatMulNBits(nbits_plan(meta))
        bound._prepare(meta)
        return bound

    def prepared_nbytes(self) -> int:
        return 0 if self._w is None else int(self._w.nbytes)

    def _prepare(self, meta: NodeMeta) -> None:
        """Dequantize constant weights once (see the module docstring); an input that is
        not constant, or that the run would refuse, leaves them to each run."""
        plan = self.plan
        sources = tuple(meta.constant(i) for i in range(1, 5))
        b, scales, zero_points, g_idx = sources
        if (plan is None or b is None or scales is None
                or (zero_points is None and len(meta.inputs) > 3 and meta.inputs[3] is not None)
                or (g_idx is None and len(meta.inputs) > 4 and meta.inputs[4] is not None)):
            return
        ctx = ExecutionContext(meta)
        try:
            self._check_b(ctx, b, plan)
            if not b.size:
                return
            # A's dtype may be unknown here: the run uses W only when A is the scales' dtype
            scale64, zp64 = self._params(ctx, np.asarray(scales), scales, zero_points, plan)
            cols = None if g_idx is None else self._g_idx(ctx, g_idx, plan)
        except NodeError:
            return
        w = np.empty((plan.n, plan.padded_k), np.float64)
        codes = np.empty((plan.rows, plan.padded_k), np.uint8)
        for r0 in range(0, plan.n, plan.rows):
            rows = slice(r0, min(plan.n, r0 + plan.rows))
            _dequantize(w[rows], b, scale64, zp64, cols, plan, rows, codes)
        self._w = np.ascontiguousarray(w[:, :plan.k]) if plan.padded_k != plan.k else w
        self._w.flags.writeable = False
        self._sources = sources

    def _prepared(self, *inputs: Any) -> np.ndarray | None:
        """The bound W when every weight input is still the constant it was made from."""
        if self._w is None:
            return None
        for x, src in zip(inputs, self._sources):
            if x is not src and not (src is not None and isinstance(x, np.ndarray)
                                     and x.shape == src.shape and x.dtype == src.dtype
                                     and x.strides == src.strides
                                     and x.ctypes.data == src.ctypes.data):
                return None
        return self._w

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        b = meta.inputs[1] if len(meta.inputs) > 1 else None
        if b is not None and b.is_static and 0 in b.shape:
            return WorkspaceRequirement.NONE   # an omitted projection dequantizes nothing
        plan = self.plan or nbits_plan(meta)
        return WorkspaceRequirement(plan.nbytes)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        padded = list(inputs) + [None] * (6 - len(inputs))
        outputs[0] = self.multiply(ctx, *padded[:6], workspace=workspace)

    def run(self, ctx: ExecutionContext, *inputs: Any) -> np.ndarray:
        padded = list(inputs) + [None] * (6 - len(inputs))
        return self.multiply(ctx, *padded[:6], workspace=None)

    def multiply(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray, scales: np.ndarray,
                 zero_points: np.ndarray | None, g_idx: np.ndarray | None,
                 bias: np.ndarray | None, *, workspace: WorkspaceView | None) -> np.ndarray:
        plan = self.plan or nbits_plan(ctx.node)
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype not in NBITS_DTYPES:
            raise self.fail(ctx, f"A dtype {a.dtype} is not one of {_names(NBITS_DTYPES)}")
        if a.ndim < 1 or a.shape[-1] != plan.k:
            raise self.fail(ctx, f"A {a.shape} must have a last dim of K={plan.k}")
        bias64 = self._bias(ctx, a, bias, plan)
        w = self._prepared(b, scales, zero_points, g_idx) if a.dtype == scales.dtype else None
        if w is not None:
            y = np.matmul(w, wide(a).reshape(-1, plan.k).T)
        else:
            self._check_b(ctx, b, plan)
            y = np.zeros((plan.n, int(np.prod(a.shape[:-1], dtype=np.int64))), np.float64)
            if b.size:
                scale64, zp64 = self._params(ctx, a, scales, zero_points, plan)
                cols = None if g_idx is None else self._g_idx(ctx, g_idx, plan)
                self._accumulate(y, wide(a).reshape(-1, plan.k), b, scale64, zp64, cols,
                                 plan, workspace)
        out = y.T
        if bias64 is not None:
            out = out + bias64
        return round_to(out.reshape(a.shape[:-1] + (plan.n,)), a.dtype)

    def _check_b(self, ctx: ExecutionContext, b: np.ndarray, plan: NBitsPlan) -> None:
        if b.dtype != _U8:
            raise self.fail(ctx, f"B must be uint8, got {b.dtype}")
        want = (plan.n, plan.n_blocks, plan.blob)
        if b.ndim != 3 or any(d not in (0, w) for d, w in zip(b.shape, want)):
            raise self.fail(ctx, f"B {b.shape} must have shape {want} (N, ceil(K / "
                                 f"block_size), block_size * bits / 8), a dim of 0 at most "
                                 f"for an omitted projection")

    def _bias(self, ctx: ExecutionContext, a: np.ndarray, bias: np.ndarray | None,
              plan: NBitsPlan) -> np.ndarray | None:
        if bias is None:
            return None
        bias = np.asarray(bias)
        if bias.dtype != a.dtype or bias.shape != (plan.n,):
            raise self.fail(ctx, f"bias must be {a.dtype} of shape ({plan.n},), got "
                                 f"{bias.dtype} {bias.shape}")
        return wide(bias)

    def _params(self, ctx: ExecutionContext, a: np.ndarray, scales: np.ndarray,
                zero_points: np.ndarray | None,
                plan: NBitsPlan) -> tuple[np.ndarray, np.ndarray | float]:
        """Scales and zero points as float64 ``[N, n_blocks]`` (a default zero point is a
        scalar)."""
        scales = np.asarray(scales)
        grid = (plan.n, plan.n_blocks)
        if scales.dtype != a.dtype or scales.size != plan.n * plan.n_blocks:
            raise self.fail(ctx, f"scales must be {a.dtype} of shape {grid} (or flat), got "
                                 f"{scales.dtype} {scales.shape}")
        scale64 = wide(scales).reshape(grid)
        if zero_points is None:
            return scale64, float(1 << (plan.bits - 1))
        zp = np.asarray(zero_points)
        if zp.dtype == _U8:
            per_row = -(-plan.n_blocks * plan.bits // 8)
            if zp.size != plan.n * per_row:
                raise self.fail(ctx, f"packed uint8 zero_points must have shape "
                                     f"({plan.n}, {per_row}) (or flat), got {zp.shape}")
            codes = unpack_codes(zp.reshape(plan.n, per_row), plan.bits)
            return scale64, codes[:, :plan.n_blocks].astype(np.float64)
        if zp.dtype != a.dtype or zp.size != plan.n * plan.n_blocks:
            raise self.fail(ctx, f"zero_points must be packed uint8 or {a.dtype} of shape "
                                 f"{grid} (or flat), got {zp.dtype} {zp.shape}")
        return scale64, wide(zp).reshape(grid)

    def _g_idx(self, ctx: ExecutionContext, g_idx: np.ndarray, plan: NBitsPlan) -> np.ndarray:
        g = np.asarray(g_idx)
        if g.dtype.kind not in "iu" or g.size != plan.k:
            raise self.fail(ctx, f"g_idx must hold K={plan.k} integers, got {g.dtype} "
                                 f"{g.shape}")
        g = g.reshape(-1).astype(np.int64)
        if g.size and (g.min() < 0 or g.max() >= plan.n_blocks):
            raise self.fail(ctx, f"g_idx values must be block indices in [0, "
                                 f"{plan.n_blocks}), got [{g.min()}, {g.max()}]")
        return g

    def _accumulate(self, y: np.ndarray, a64: np.ndarray, b: np.ndarray, scale64: np.ndarray,
                    zp64: np.ndarray | float, cols: np.ndarray | None, plan: NBitsPlan,
                    workspace: WorkspaceView | None) -> None:
        """``y[n, m] = sum_k W[n, k] * a64[m, k]``, dequantizing ``plan.rows`` rows of W at a
        time into the scratch (a chunk fits in cache: about twice as fast as the whole W)."""
        shape = (plan.rows, plan.padded_k)
        c_shape = shape if plan.codes_nbytes else (0, plan.padded_k)
        if workspace is None:
            w_buf = np.empty(shape, np.float64)
            c_buf = np.empty(c_shape, np.uint8)
        else:
            w_buf = workspace.array(np.float64, shape)
            c_buf = workspace.array(np.uint8, c_shape, offset=plan.nbytes - plan.codes_nbytes)
        for r0 in range(0, plan.n, plan.rows):
            r1 = min(plan.n, r0 + plan.rows)
            w = w_buf[: r1 - r0]
            _dequantize(w, b, scale64, zp64, cols, plan, slice(r0, r1), c_buf)
            np.matmul(w[:, : plan.k], a64.T, out=y[r0:r1])


def _dequantize(w: np.ndarray, b: np.ndarray, scale64: np.ndarray, zp64: np.ndarray | float,
                cols: np.ndarray | None, plan: NBitsPlan, rows: slice,
                c_buf: np.ndarray) -> None:
    """``w[:, :K] = (code - zero_point) * scale`` in float64 for weight ``rows`` (the
    codes are unpacked into ``c_buf``, which has room for them unless ``bits`` is 8)."""
    n = rows.stop - rows.start
    packed = b[rows].reshape(n, -1)
    if plan.bits == 8:
        codes = packed
    else:
        codes = c_buf[:n]
        unpack_into(packed, plan.bits, codes)
    zp = zp64 if np.ndim(zp64) == 0 else zp64[rows]  # type: ignore[index]
    if cols is None:
        w3 = w.reshape(n, plan.n_blocks, plan.block)
        zp_b = zp if np.ndim(zp) == 0 else zp[:, :, None]
        np.subtract(codes.reshape(w3.shape), zp_b, out=w3)
        w3 *= scale64[rows, :, None]
    else:
        wk = w[:, : plan.k]
        zp_k = zp if np.ndim(zp) == 0 else zp[:, cols]
        np.subtract(codes[:, : plan.k], zp_k, out=wk)
        wk *= scale64[rows][:, cols]


# ---------------------------------------------------------------- GatherBlockQuantized

#: output (= scales) dtypes
GBQ_DTYPES = NBITS_DTYPES


def _support_gbq(meta: NodeMeta) -> Support:
    specs = meta.inputs
    if len(specs) < 3:
        return Support.no(f"GatherBlockQuantized takes 3 or 4 inputs, got {len(specs)}")
    data, scales = specs[0], specs[2]
    if data is not None and data.dtype not in _INT4 | {_U8}:
        return Support.no(f"data dtype {data.dtype} is not implemented (int4, uint4 or "
                          f"uint8; float8/float4 data is not)")
    if scales is not None and scales.dtype not in GBQ_DTYPES:
        return Support.no(f"scales dtype {scales.dtype} is not one of {_names(GBQ_DTYPES)}")
    return Support.YES


class GatherBlockQuantized(CpuKernel):
    """Gather, then ``(code - zero_point) * scale`` in float64, rounded once: EXACT."""

    #: a float64 product of an integer and a scale, rounded once
    parity = Parity.EXACT

    def __init__(self) -> None:
        super().__init__("GatherBlockQuantized", since=1, domain=MS_DOMAIN,
                         dtypes=_INT4 | {_U8})

    def supports(self, meta: NodeMeta) -> Support:
        return _support_gbq(meta)

    def run(self, ctx: ExecutionContext, data: np.ndarray, indices: np.ndarray,
            scales: np.ndarray, zero_points: np.ndarray | None = None) -> np.ndarray:
        node = ctx.node
        data, indices, scales = np.asarray(data), np.asarray(indices), np.asarray(scales)
        block = int(node.attr("block_size", 128))
        bits = int(node.attr("bits", 4))
        why = _power_of_two_block(block)
        if why:
            raise self.fail(ctx, why)
        if scales.dtype not in GBQ_DTYPES:
            raise self.fail(ctx, f"scales dtype {scales.dtype} is not one of "
                                 f"{_names(GBQ_DTYPES)}")
        if indices.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise self.fail(ctx, f"indices must be int32 or int64, got {indices.dtype}")
        if data.ndim < 1:
            raise self.fail(ctx, "data must have rank >= 1")
        rank = data.ndim
        gax = normalize_axis(ctx, int(node.attr("gather_axis", 0)), rank)
        qax = normalize_axis(ctx, int(node.attr("quantize_axis", 1)), rank)
        packed = data.dtype == _U8
        if data.dtype in _INT4:
            shape, default_zp = data.shape, 0.0
        elif packed:
            if bits not in NBITS_BITS:
                raise self.fail(ctx, f"bits={bits} is not supported for uint8 data "
                                     f"(supported: {NBITS_BITS})")
            if gax != 0 or qax != rank - 1:
                raise self.fail(ctx, f"uint8 data needs gather_axis 0 and quantize_axis the "
                                     f"last axis ({rank - 1}), got {gax} and {qax}")
            shape = data.shape[:-1] + (data.shape[-1] * 8 // bits,)
            default_zp = float(1 << (bits - 1))
        else:
            raise self.fail(ctx, f"data dtype {data.dtype} is not int4, uint4 or uint8")
        grid = shape[:qax] + (-(-shape[qax] // block),) + shape[qax + 1:]
        if scales.shape != grid:
            raise self.fail(ctx, f"scales must have shape {grid} for data of logical shape "
                                 f"{shape}, quantize_axis {qax}, block_size {block}; got "
                                 f"{scales.shape}")
        zp = None if zero_points is None else self._zero_points(ctx, zero_points, data.dtype,
                                                                grid, bits)
        dim = shape[gax]
        idx = indices.astype(np.int64)
        idx = np.where(idx < 0, idx + dim, idx)
        valid = (idx >= 0) & (idx < dim)
        idx = np.where(valid, idx, 0)
        # gather the rows first: only they are decoded and dequantized
        codes = np.take(data, idx, axis=gax)
        codes = decode_int(codes) if data.dtype in _INT4 else \
            unpack_codes(codes, bits).astype(np.int64)
        p_idx = idx // block if gax == qax else idx
        q = idx.ndim
        out_qax = qax if qax < gax else (qax + q - 1 if qax > gax else None)
        scale = self._expand(np.take(wide(scales), p_idx, axis=gax), out_qax, block,
                             codes.shape)
        if zp is None:
            deq = (codes - default_zp) * scale
        else:
            zpg = self._expand(np.take(zp, p_idx, axis=gax), out_qax, block, codes.shape)
            deq = (codes - zpg) * scale
        if not valid.all():
            mask = valid.reshape((1,) * gax + valid.shape + (1,) * (rank - gax - 1))
            deq = np.where(mask, deq, 0.0)
        return round_to(deq, scales.dtype)

    def _zero_points(self, ctx: ExecutionContext, zero_points: np.ndarray, dtype: np.dtype,
                     grid: tuple[int, ...], bits: int) -> np.ndarray:
        """Zero points as float64 of the scales' shape."""
        zp = np.asarray(zero_points)
        if zp.dtype != dtype:
            raise self.fail(ctx, f"zero_points must have data's dtype {dtype}, got {zp.dtype}")
        if dtype in _INT4:
            if zp.shape != grid:
                raise self.fail(ctx, f"zero_points must have the scales' shape {grid}, got "
                                     f"{zp.shape}")
            return decode_int(zp).astype(np.float64)
        per = 8 // bits
        want = grid[:-1] + (-(-grid[-1] // per),)
        if zp.shape != want:
            raise self.fail(ctx, f"uint8 zero_points must have shape {want} (the scales' "
                                 f"{grid} packed {per} per byte along the last axis), got "
                                 f"{zp.shape}")
        return unpack_codes(zp, bits)[..., : grid[-1]].astype(np.float64)

    @staticmethod
    def _expand(p: np.ndarray, axis: int | None, block: int,
                shape: tuple[int, ...]) -> np.ndarray:
        """Per-block parameters repeated along the output's quantized ``axis`` (``None``:
        the gathered axis was the quantized one, already per element)."""
        if axis is None:
            return p
        return np.repeat(p, block, axis=axis)[(slice(None),) * axis + (slice(0, shape[axis]),)]


KERNELS: list[CpuKernel] = [MatMulNBits(), GatherBlockQuantized()]

