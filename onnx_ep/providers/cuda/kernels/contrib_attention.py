"""onnxruntime's com.microsoft RotaryEmbedding and MultiHeadAttention on CUDA
(``contrib_attention.cu``), replaying cpu_reference/contrib_attention.py.
SkipLayerNormalization (:class:`SkipLayerNorm`) is :class:`~.normalization.RmsNorm` with
the mean subtracted and an optional beta: skip_layer_norm_* of ``normalization.cu``, beside
its RMS sibling's kernels, in float64 like the reference (only the summation order
differs) under the normalization promise ``rtol=1e-4, atol=1e-5`` (+ one output ulp for
float16/bfloat16). Declined: float64, broadcasts other than onnxruntime's skip shapes.

RotaryEmbedding (:class:`RotaryEmbedding`): one launch, one thread per rotated channel
pair or copied channel; input (batch, seq, hidden) or (batch, heads, seq, head),
position_ids the (1,) offset form or (batch, seq), read on the device (capturable; a
position outside the caches writes NaN where the reference fails the node). Rotations in
float64 from the exact values, rounded once, as the reference: within
``ROTARY_PARITY`` (bit-equal expected). ``scale`` is ignored, as the reference does.
Declined: ``is_packed_batching=1``, other dtypes, shapes the reference rejects.

MultiHeadAttention (:class:`MultiHeadAttention`): separate 3-D query, key and value with
optional bias (input 3), key_padding_mask (int32: (batch,) lengths, (batch, total) or
(batch, q_len, total) 0/1), attention_bias (batch or 1, heads or 1, q_len, total),
past_key/past_value (BNSH) with present_key/present_value, ``unidirectional``, ``scale``
and ``mask_filter_value``. float32 scores and softmax like the reference, matmuls
accumulated in float64 (:data:`MHA_PARITY`). One block per (batch, head, query row);
the scores row goes to the step workspace when it does not fit in shared memory
(:func:`~.attention.attention_plan`, the one sizing formula). Declined (the node runs on
cpu_reference): packed QKV (5-D query), packed KV (5-D key), BNSH (4-D) key/value,
past_sequence_length and cache_indirection (inputs 8, 9), the qk output (output 3), the
(3 * batch + 2,) key_padding_mask form, non-int32 masks, dtypes other than float32,
float16 and bfloat16, and a head too large for shared memory.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.kernel import (
    NodeMeta,
    OpKey,
    Parity,
    Support,
    TensorSpec,
    WorkspaceRequirement,
)
from onnx_ep.providers.cuda.kernels.attention import AttnDims, attention_plan
from onnx_ep.providers.cuda.kernels.base import (
    BLOCK,
    F32,
    I64,
    PTR,
    CudaKernel,
    block_for,
    dtype_support,
    grid_1d,
    narrow_tolerance,
    optional_input,
    prod,
    replayed,
    static_shape,
    struct_arg,
    suffix,
)
from onnx_ep.providers.cuda.kernels.fused_gemm import MS_DOMAIN
from onnx_ep.providers.cuda.kernels.gqa import DTYPES, GroupQueryAttention
from onnx_ep.providers.cuda.kernels.normalization import (
    MAX_GRID,
    RmsNorm,
    rms_vector_width,
    skip_rows,
)

#: the reference's bound for a float64 rotation rounded once (bit-equal expected)
ROTARY_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)
#: float32 softmax, float64-accumulated matmuls in another order than the reference's
#: (which is a float32 GEMV for one query row): Attention's float32 bound
MHA_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-5)
MHA_BLOCK = 128          #: threads per row block (MHA_BLOCK in contrib_attention.cu)
_F32 = np.dtype(np.float32)


def _arg(items: Sequence[Any], i: int) -> Any:
    return items[i] if len(items) > i else None


def _ptr(t: Any) -> int:
    return t.ptr if t is not None else 0


def _dtypes(meta: NodeMeta, names: dict[int, str], first: str) -> Support:
    """Input 0 of a :data:`DTYPES` type and every given input of ``names`` of that type."""
    x = meta.inputs[0] if meta.inputs else None
    if x is None:
        return Support.no(f"{first} is not a tensor of known dtype and rank")
    s = dtype_support(x.dtype, DTYPES, first)
    if not s:
        return s
    for i, name in names.items():
        if not meta.given(i):
            continue
        spec = meta.inputs[i]
        if spec is None:
            return Support.no(f"{name} is not a tensor of known dtype and rank")
        if np.dtype(spec.dtype) != np.dtype(x.dtype):
            return Support.no(f"{name} has dtype {np.dtype(spec.dtype)}, {first} has "
                              f"{np.dtype(x.dtype)} (the reference rejects mixed types)")
    return Support.YES


# ---------------------------------------------------------------- RotaryEmbedding

class RopeGeo(ctypes.Structure):
    """``struct RopeGeo`` of contrib_attention.cu (same field order; passed by value)."""

    _fields_ = ([(n, ctypes.c_int64) for n in (
        "batch", "heads", "seq", "head", "half", "max_len", "sb", "sh", "ss")]
        + [("interleaved", ctypes.c_int32), ("offset", ctypes.c_int32)])


def rope_geometry(x: Sequence[int], pid: Sequence[int], cos: Sequence[int],
                  sin: Sequence[int], num_heads: int, rotary_dim: int) -> RopeGeo:
    """The launch geometry of static shapes (``interleaved`` left 0).

    :raises ValueError: the reference's reasons for rejecting them.
    """
    if len(cos) != 2 or tuple(cos) != tuple(sin):
        raise ValueError(f"cos_cache {tuple(cos)} and sin_cache {tuple(sin)} must be equal "
                         f"2-D (max_len, rotary_dim / 2)")
    half = int(cos[1])
    if len(x) == 4:
        batch, heads, seq, head = (int(d) for d in x)
        strides = (heads * seq * head, seq * head, head)
    elif len(x) == 3:
        batch, seq, hidden = (int(d) for d in x)
        head = hidden // num_heads if num_heads > 0 else 2 * half
        if head <= 0 or hidden % head:
            raise ValueError(f"hidden size {hidden} is not a multiple of the head size {head} "
                             f"(num_heads={num_heads}, cos_cache {tuple(cos)})")
        heads = hidden // head
        strides = (seq * hidden, head, hidden)
        if rotary_dim and num_heads <= 0:
            raise ValueError("rotary_embedding_dim needs num_heads")
    else:
        raise ValueError(f"input must be 3-D or 4-D, got shape {tuple(x)}")
    if 2 * half != (rotary_dim or head) or 2 * half > head:
        raise ValueError(f"cos_cache's last dim {half} must be rotary_embedding_dim / 2 = "
                         f"{(rotary_dim or head) / 2} (head size {head})")
    if prod(pid) == 1:
        offset = 1
    elif tuple(pid) == (batch, seq):
        offset = 0
    else:
        raise ValueError(f"position_ids must be (1,) or ({batch}, {seq}), got {tuple(pid)}")
    g = RopeGeo()
    for name, value in (("batch", batch), ("heads", heads), ("seq", seq), ("head", head),
                        ("half", half), ("max_len", int(cos[0]))):
        setattr(g, name, value)
    g.sb, g.sh, g.ss = strides
    g.offset = offset
    return g


class RotaryEmbedding(CudaKernel):
    """com.microsoft::RotaryEmbedding (input, position_ids, cos_cache, sin_cache)."""

    source = "contrib_attention"

    def __init__(self) -> None:
        super().__init__("RotaryEmbedding", since=1, parity=ROTARY_PARITY)
        self.key = OpKey(MS_DOMAIN, "RotaryEmbedding", 1)

    def supports(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) < 4 or not all(meta.given(i) for i in range(4)):
            return Support.no("needs input, position_ids, cos_cache and sin_cache")
        s = _dtypes(meta, {2: "cos_cache", 3: "sin_cache"}, "input")
        if not s:
            return s
        pid = meta.inputs[1]
        if pid is None or np.dtype(pid.dtype) != np.int64:
            return Support.no("position_ids must be an int64 tensor")
        if int(meta.attr("is_packed_batching", 0) or 0):
            return Support.no("is_packed_batching=1 is not implemented (nor by the reference)")
        if len(meta.inputs[0].shape) not in (3, 4):
            return Support.no(f"input must be 3-D or 4-D, got rank {len(meta.inputs[0].shape)}")
        shapes = [static_shape(t) for t in meta.inputs[:4]]
        if all(t is not None for t in shapes):
            try:
                rope_geometry(*shapes, int(meta.attr("num_heads", 0) or 0),
                              int(meta.attr("rotary_embedding_dim", 0) or 0))
            except ValueError as exc:
                return Support.no(str(exc))
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        return [TensorSpec(x.dtype, x.shape)]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, pid, cos, sin = inputs[:4]
        y = outputs[0]
        node = ctx.node
        try:
            g = rope_geometry(x.shape, pid.shape, cos.shape, sin.shape,
                              int(node.attr("num_heads", 0) or 0),
                              int(node.attr("rotary_embedding_dim", 0) or 0))
        except ValueError as exc:
            raise self.fail(ctx, str(exc)) from None
        g.interleaved = int(bool(node.attr("interleaved", 0)))
        n = g.batch * g.heads * g.seq * (g.head - g.half)
        if n == 0:
            return
        self.launch(self.function(f"contrib_rotary_{suffix(x.dtype)}", x), grid_1d(n, BLOCK),
                    (BLOCK, 1, 1), [(x.ptr, PTR), (pid.ptr, PTR), (cos.ptr, PTR),
                                    (sin.ptr, PTR), (y.ptr, PTR), struct_arg(g)], ctx.stream)


# ---------------------------------------------------------------- MultiHeadAttention

#: MultiHeadAttention inputs not implemented, by position (the reference declines them too)
MHA_UNSUPPORTED = {8: "past_sequence_length (decoder-masked buffer sharing)",
                   9: "cache_indirection (beam search)"}


class MhaGeo(ctypes.Structure):
    """``struct MhaGeo`` of contrib_attention.cu (same field order; passed by value)."""

    _fields_ = ([(n, ctypes.c_int64) for n in (
        "batch", "heads", "q_len", "kv_len", "past_len", "head", "v_head", "ab_sb", "ab_sh")]
        + [("scale", ctypes.c_float), ("mask_filter", ctypes.c_float),
           ("mask_kind", ctypes.c_int32), ("causal", ctypes.c_int32)])


@attrs.frozen
class MhaDims:
    """Sizes of one MultiHeadAttention call and how its masks are read."""

    batch: int
    heads: int
    q_len: int
    kv_len: int
    past_len: int
    head: int
    v_head: int
    mask_kind: int = 0                       #: 0 none, 1 lengths, 2 (B, T), 3 (B, S, T)
    bias_strides: tuple[int, int] = (0, 0)   #: attention_bias strides of (batch, head)

    @property
    def total(self) -> int:
        return self.past_len + self.kv_len

    def attn(self) -> AttnDims:
        """The same sizes as :mod:`.attention`'s, for :func:`attention_plan`."""
        return AttnDims(self.batch, self.heads, self.heads, self.q_len, self.kv_len,
                        self.past_len, self.head, self.v_head, True)


def mha_dims(q: Sequence[int], k: Sequence[int] | None, v: Sequence[int] | None,
             bias: Sequence[int] | None, pad: Sequence[int] | None, ab: Sequence[int] | None,
             pk: Sequence[int] | None, pv: Sequence[int] | None, heads: int) -> MhaDims:
    """Sizes from static shapes (``None``: input absent), the reference's checks in order.

    :raises ValueError: naming what the CUDA kernel (or the reference) does not take.
    """
    if len(q) != 3 or k is None or v is None or len(k) != 3 or len(v) != 3:
        raise ValueError(f"only separate 3-D query, key and value are implemented; packed "
                         f"QKV (5-D query), packed KV (5-D key) and BNSH key/value are not "
                         f"(got query {tuple(q)}, key {None if k is None else tuple(k)}, "
                         f"value {None if v is None else tuple(v)})")
    batch, q_len, hidden = (int(d) for d in q)
    kv_len, v_hidden = int(k[1]), int(v[2])
    if heads <= 0 or hidden % heads or v_hidden % heads or k[2] != hidden or (
            k[0] != batch or tuple(v[:2]) != tuple(k[:2])):
        raise ValueError(f"query {tuple(q)}, key {tuple(k)}, value {tuple(v)} do not split "
                         f"into num_heads={heads} heads over one batch")
    head, v_head = hidden // heads, v_hidden // heads
    if bias is not None and tuple(bias) != (2 * hidden + v_hidden,):
        raise ValueError(f"bias must have shape ({2 * hidden + v_hidden},), got {tuple(bias)}")
    if (pk is None) != (pv is None):
        raise ValueError("past_key and past_value must be given together")
    past_len = 0
    if pk is not None:
        if len(pk) != 4 or tuple(pk[:2]) != (batch, heads) or pk[3] != head or (
                tuple(pv) != tuple(pk[:3]) + (v_head,)):
            raise ValueError(f"past_key {tuple(pk)} / past_value {tuple(pv)} must be (batch, "
                             f"num_heads, past, head size)")
        past_len = int(pk[2])
    total = past_len + kv_len
    kind = 0
    if pad is not None:
        forms = {(batch,): 1, (batch, total): 2, (batch, q_len, total): 3}
        kind = forms.get(tuple(pad), 0)
        if not kind:
            raise ValueError(f"key_padding_mask of shape {tuple(pad)} is not supported: use "
                             f"({batch},) lengths, ({batch}, {total}) or ({batch}, {q_len}, "
                             f"{total}) 0/1 (the (3 * batch + 2,) form is not implemented)")
    strides = (0, 0)
    if ab is not None:
        if len(ab) != 4 or ab[0] not in (1, batch) or ab[1] not in (1, heads) or (
                tuple(ab[2:]) != (q_len, total)):
            raise ValueError(f"attention_bias {tuple(ab)} must be (batch or 1, num_heads or "
                             f"1, {q_len}, {total})")
        row = q_len * total
        strides = (row * int(ab[1]) if ab[0] != 1 else 0, row if ab[1] != 1 else 0)
    if total == 0:
        raise ValueError("no keys (kv length 0 and no past)")
    return MhaDims(batch, heads, q_len, kv_len, past_len, head, v_head, kind, strides)


def _sum(a: Any, b: Any) -> Any:
    return a + b if isinstance(a, int) and isinstance(b, int) else None


def _div(a: Any, b: Any) -> Any:
    return a // b if isinstance(a, int) and isinstance(b, int) and b > 0 else None


class MultiHeadAttention(CudaKernel):
    """com.microsoft::MultiHeadAttention (query, key, value, bias, key_padding_mask,
    attention_bias, past_key, past_value; outputs output, present_key, present_value)."""

    source = "contrib_attention"

    def __init__(self) -> None:
        super().__init__("MultiHeadAttention", since=1, parity=MHA_PARITY)
        self.key = OpKey(MS_DOMAIN, "MultiHeadAttention", 1)

    def parity_for(self, dtype: Any) -> Parity:
        return self.parity if dtype is None else narrow_tolerance(dtype, MHA_PARITY)

    @staticmethod
    def _shapes(meta: NodeMeta) -> list[Any] | None:
        """Static shapes of inputs 0-7 (``None`` where absent), or ``None`` when one given
        input's shape is not static yet."""
        out = []
        for i in range(8):
            if not meta.given(i):
                out.append(None)
                continue
            shape = static_shape(meta.inputs[i])
            if shape is None:
                return None
            out.append(shape)
        return out

    # ------------------------------------------------------------ placement
    def supports(self, meta: NodeMeta) -> Support:
        for pos, what in MHA_UNSUPPORTED.items():
            if meta.given(pos):
                return Support.no(f"input {pos} {what} is not implemented")
        names = meta.output_names
        if len(names) > 3 and any(names[3:]):
            return Support.no("the qk output (output 3) is not implemented")
        if not (meta.given(1) and meta.given(2)):
            return Support.no("packed QKV (no key/value inputs) is not implemented")
        s = _dtypes(meta, {1: "key", 2: "value", 3: "bias", 5: "attention_bias",
                           6: "past_key", 7: "past_value"}, "query")
        if not s:
            return s
        if meta.given(4):
            pad = meta.inputs[4]
            if pad is None or np.dtype(pad.dtype) != np.int32:
                return Support.no("key_padding_mask must be an int32 tensor")
        if (int(meta.attr("num_heads", 0) or 0)) <= 0:
            return Support.no(f"num_heads={meta.attr('num_heads')} must be > 0")
        q, k = meta.inputs[0], meta.inputs[1]
        if len(q.shape) != 3 or len(k.shape) != 3 or len(meta.inputs[2].shape) != 3:
            return Support.no(f"only separate 3-D query, key and value are implemented; packed "
                              f"QKV (5-D query), packed KV (5-D key) and BNSH key/value are "
                              f"not (ranks {len(q.shape)}, {len(k.shape)}, "
                              f"{len(meta.inputs[2].shape)})")
        shapes = self._shapes(meta)
        if shapes is not None:
            try:
                dims = mha_dims(*shapes, int(meta.attr("num_heads")))
                attention_plan(dims.attn(), _F32)
            except ValueError as exc:
                return Support.no(str(exc))
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        q, k, v = meta.inputs[:3]
        n = max(len(meta.output_names), 1)
        heads = int(meta.attr("num_heads", 0) or 0)
        batch, q_len = q.shape[0], q.shape[1]
        head, v_head = _div(q.shape[2], heads), _div(v.shape[2], heads)
        pk = meta.inputs[6] if meta.given(6) else None
        total = _sum(k.shape[1], pk.shape[2]) if pk is not None else k.shape[1]
        outs: list[TensorSpec | None] = [
            TensorSpec(q.dtype, (batch, q_len, v.shape[2])),
            TensorSpec(q.dtype, (batch, heads, total, head)),
            TensorSpec(q.dtype, (batch, heads, total, v_head))]
        return outs[:n] + [None] * (n - len(outs))

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        shapes = self._shapes(meta)
        if shapes is None:
            return WorkspaceRequirement.NONE
        try:
            dims = mha_dims(*shapes, int(meta.attr("num_heads", 0) or 0))
            plan = attention_plan(dims.attn(), _F32)
        except ValueError:
            return WorkspaceRequirement.NONE
        return WorkspaceRequirement(plan.workspace_bytes)

    # ------------------------------------------------------------ execution
    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        node = ctx.node
        q, k, v, bias, pad, ab, pk, pv = (_arg(inputs, i) for i in range(8))
        y, present_k, present_v = (_arg(outputs, i) for i in range(3))

        def shape(t: Any) -> Any:
            return tuple(t.shape) if t is not None else None

        try:
            d = mha_dims(*(shape(t) for t in (q, k, v, bias, pad, ab, pk, pv)),
                         int(node.attr("num_heads", 0) or 0))
            plan = attention_plan(d.attn(), _F32)
        except ValueError as exc:
            raise self.fail(ctx, str(exc)) from None
        expect = [(d.batch, d.q_len, d.heads * d.v_head), (d.batch, d.heads, d.total, d.head),
                  (d.batch, d.heads, d.total, d.v_head)]
        for j, t in enumerate((y, present_k, present_v)):
            if t is not None and tuple(t.shape) != expect[j]:
                raise self.fail(ctx, f"output {j} is planned as {tuple(t.shape)}, expected "
                                     f"{expect[j]}")
        sfx = suffix(q.dtype)
        hidden = d.heads * d.head
        for present, past, new, dim, offset in ((present_k, pk, k, d.head, hidden),
                                                (present_v, pv, v, d.v_head, 2 * hidden)):
            if present is None or present.size == 0:
                continue
            bias_ptr = bias.ptr + offset * q.dtype.itemsize if bias is not None else 0
            self.launch(self.function(f"mha_present_{sfx}", q), grid_1d(present.size, BLOCK),
                        (BLOCK, 1, 1),
                        [(_ptr(past), PTR), (new.ptr, PTR), (bias_ptr, PTR), (present.ptr, PTR),
                         (d.batch, I64), (d.heads, I64), (d.past_len, I64), (d.kv_len, I64),
                         (dim, I64)], ctx.stream)
        rows = d.batch * d.heads * d.q_len
        if y is None or rows == 0:
            return
        ws_ptr = self.workspace_ptr(ctx, workspace, plan.workspace_bytes)
        self.launch(self.function(f"mha_{sfx}", q), (plan.grid, 1, 1), (MHA_BLOCK, 1, 1),
                    [(q.ptr, PTR), (k.ptr, PTR), (v.ptr, PTR), (_ptr(bias), PTR),
                     (_ptr(pad), PTR), (_ptr(ab), PTR), (_ptr(pk), PTR), (_ptr(pv), PTR),
                     (y.ptr, PTR), (ws_ptr, PTR), struct_arg(self._geo(node, d))],
                    ctx.stream, shared_bytes=plan.shared_bytes)

    @staticmethod
    def _geo(node: Any, d: MhaDims) -> MhaGeo:
        g = MhaGeo()
        for name in ("batch", "heads", "q_len", "kv_len", "past_len", "head", "v_head",
                     "mask_kind"):
            setattr(g, name, int(getattr(d, name)))
        g.ab_sb, g.ab_sh = d.bias_strides
        # the reference's float32 values of the attributes
        scale = float(node.attr("scale", 0.0) or 0.0) or 1.0 / np.sqrt(d.head)
        g.scale = float(_F32.type(scale))
        g.mask_filter = float(_F32.type(node.attr("mask_filter_value", -10000.0)))
        g.causal = int(bool(int(node.attr("unidirectional", 0) or 0)))
        return g


# ---------------------------------------------------------------- SkipLayerNormalization

class SkipLayerNorm(RmsNorm):
    """com.microsoft::SkipLayerNormalization, the mean-subtracting sibling of
    SkipSimplifiedLayerNormalization: inputs (input, skip, gamma, beta?, bias?), outputs
    (output, mean, inv_std_var, input_skip_bias_sum), the last axis, skip repeating over
    leading dims (:func:`~.normalization.skip_rows`). skip_layer_norm_* of normalization.cu
    (``source`` is RmsNorm's): one launch, one block per row, float64 arithmetic like the
    reference (only the summation order differs)."""

    def __init__(self) -> None:
        super().__init__("SkipLayerNormalization", domain="com.microsoft", skip=True)

    def _shapes_support(self, x: tuple[int, ...], a: int,
                        rest: Sequence[tuple[int, ...] | None]) -> Support:
        skip = rest[0] if rest else None
        if skip is not None and skip_rows(skip, x) is None:
            return Support.no(f"skip of shape {skip} must have input's shape {x} or its "
                              f"last two dims with any leading dims 1")
        for name, t in zip(("gamma", "beta", "bias"), rest[1:4]):
            if t is not None and t != (x[-1],):
                return Support.no(f"{name} must have shape ({x[-1]},), got {t}")
        return Support.YES

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x = inputs[0]
        if x.ndim < 1:
            raise self.fail(ctx, "input must have rank >= 1 (..., hidden_size)")
        rows, cols = prod(x.shape[:-1]), int(x.shape[-1])
        if rows == 0 or cols == 0:
            return
        s = self._shapes_support(tuple(x.shape), x.ndim - 1,
                                 [tuple(t.shape) if t is not None else None
                                  for t in inputs[1:5]])
        if not s:
            raise self.fail(ctx, s.reason)
        skip, gamma, beta, bias = (optional_input(inputs, i) for i in range(1, 5))
        y, mean, inv, total = (optional_input(outputs, i) for i in range(4))
        ptrs = [t.ptr for t in (x, skip, gamma, beta, bias, y, total) if t is not None]
        v = rms_vector_width(x.dtype.itemsize, cols, cols, ptrs)
        self.launch(self.function(f"skip_layer_norm_v{v}_{suffix(x.dtype)}", x),
                    (min(rows, MAX_GRID), 1, 1), (block_for(cols // v), 1, 1),
                    [(x.ptr, PTR), (skip.ptr, PTR), (_ptr(bias), PTR), (gamma.ptr, PTR),
                     (_ptr(beta), PTR), (_ptr(y), PTR), (_ptr(total), PTR), (_ptr(mean), PTR),
                     (_ptr(inv), PTR), (rows, I64), (cols, I64),
                     (skip_rows(tuple(skip.shape), tuple(x.shape)), I64),
                     (float(ctx.node.attr("epsilon", 1e-12)), F32)], ctx.stream)


# GroupQueryAttention lives in gqa.py (its own source and launch plan); it is listed here,
# the module named like cpu_reference's, so both providers file the op under one family
KERNELS: list[CudaKernel] = [RotaryEmbedding(), MultiHeadAttention(), SkipLayerNorm(),
                             GroupQueryAttention()]
