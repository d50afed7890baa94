"""onnxruntime's transformer contrib ops (com.microsoft, since 1): GroupQueryAttention,
MultiHeadAttention, RotaryEmbedding and SkipLayerNormalization, with onnxruntime CPU's
semantics (docs/PARITY.md, "Contrib ops: attention"; the window-sized KV cache's
arithmetic is in :mod:`.window_cache`).

Numerics, as :mod:`.attention` for float32: every matmul (``Q K^T``, ``P V``) accumulates
in float64 and is rounded once to float32; scale, masks, softcap and softmax run in
float32. float16 and bfloat16 are widened to float32 and the output is rounded once
(no ONNX function body fixes a float16 recipe for these ops: narrow floats accumulate in
float32, as everywhere else in the reference). Rotations are computed in float64 from the
exact values and rounded once to the input type, which is what the KV cache stores.
SkipLayerNormalization follows SkipSimplifiedLayerNormalization: float64, rounded once.

The scores matrix ``(batch, heads, q_len, kv_len)`` of both attention ops lives in the
node's workspace; :func:`scores_spec` is the one sizing formula for planning and execution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    TensorSpec,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.providers.cpu_reference import window_cache
from onnx_ep.providers.cpu_reference.base import CpuKernel, check_same_dtype
from onnx_ep.providers.cpu_reference.dot import matmul
from onnx_ep.providers.cpu_reference.formats import BFLOAT16, source_value
from onnx_ep.providers.cpu_reference.fused_gemm import MS_DOMAIN
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast
from onnx_ep.providers.cpu_reference.normalization import check_skip_inputs
from onnx_ep.providers.cpu_reference.softmax import NORM_PARITY

#: the activation types onnxruntime's schemas allow (T)
CONTRIB_DTYPES = frozenset(np.dtype(d) for d in (np.float32, np.float16, BFLOAT16))
#: matmuls in a float64 accumulator, softmax in float32: the bound of opset-23 Attention
ATTENTION_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)
#: a float32 rotation x1*cos - x2*sin (with or without FMA) against the once-rounded value
ROTARY_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)

_F32 = np.dtype(np.float32)


def scores_spec(batch: Any, heads: Any, q_len: Any, kv_len: Any) -> TensorSpec:
    """The float32 scores scratch of one attention node: THE workspace formula."""
    return TensorSpec(_F32, (batch, heads, q_len, kv_len))


def _workspace(spec: TensorSpec) -> WorkspaceRequirement:
    return WorkspaceRequirement(spec.nbytes) if spec.is_static else WorkspaceRequirement.NONE


def _scores(workspace: WorkspaceView | None, spec: TensorSpec, width: int) -> np.ndarray:
    """A contiguous scores buffer of ``spec``'s shape with ``width`` (<= its) keys, at the
    front of the workspace planned for ``spec``."""
    shape = tuple(spec.shape[:3]) + (width,)
    return workspace.array(_F32, shape) if workspace is not None else np.empty(shape, _F32)


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> np.ndarray:
    """Rotate the first ``2 * cos.shape[-1]`` channels of ``x`` (..., head): float64 from the
    exact values, rounded once to ``x``'s type. ``cos``/``sin`` broadcast to (..., dim/2)."""
    half = cos.shape[-1]
    v = source_value(x)
    rot = v[..., :2 * half]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., :half],
                                                                  rot[..., half:])
    c, s = source_value(cos), source_value(sin)
    real, imag = c * x1 - s * x2, s * x1 + c * x2
    out = v.copy()
    if interleaved:
        out[..., 0:2 * half:2], out[..., 1:2 * half:2] = real, imag
    else:
        out[..., :half], out[..., half:2 * half] = real, imag
    return round_to(out, x.dtype)


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, allowed: np.ndarray,
            scores: np.ndarray, bias: np.ndarray | None = None, softcap: float = 0.0,
            sink: np.ndarray | None = None) -> np.ndarray:
    """softmax(softcap(scale * q k^T) + bias, masked to ``allowed``) v, grouped-query.

    q (B, Hq, S, D), k and v (B, Hkv, T, D); ``allowed`` broadcasts to (B, Hq, S, T) (a
    disallowed score is replaced, never added to, so garbage there cannot leak);
    ``bias`` is added (onnxruntime's masks are additive bias values, not -inf); ``sink``
    (Hq,) adds one extra logit per head to each softmax denominator. Returns float32
    (B, Hq, S, Dv).
    """
    b, hq, s, d = q.shape
    hkv, t = k.shape[1], k.shape[2]
    rep = hq // hkv
    qs = upcast(q).reshape(b, hkv, rep, s, d)
    kt = upcast(k).swapaxes(2, 3).reshape(b, hkv, 1, d, t)
    scores.reshape(b, hkv, rep, s, t)[...] = matmul(qs, kt, out_dtype=_F32)
    np.multiply(scores, _F32.type(scale), out=scores)
    if softcap > 0:
        np.divide(scores, _F32.type(softcap), out=scores)
        np.tanh(scores, out=scores)
        np.multiply(scores, _F32.type(softcap), out=scores)
    if bias is not None:
        np.add(scores, bias, out=scores)
    np.copyto(scores, _F32.type(-np.inf), where=~np.broadcast_to(allowed, scores.shape))
    row_max = scores.max(axis=-1, keepdims=True)
    if sink is not None:
        sink = sink.astype(_F32).reshape(1, hq, 1, 1)
        row_max = np.maximum(row_max, sink)
    row_max[np.isneginf(row_max)] = 0
    np.subtract(scores, row_max, out=scores)
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True)
    if sink is not None:
        total = total + np.exp(sink - row_max)
    total[total == 0] = 1
    np.divide(scores, total, out=scores)
    probs = scores.reshape(b, hkv, rep, s, t)
    vs = upcast(v).reshape(b, hkv, 1, t, v.shape[3])
    return matmul(probs, vs, out_dtype=_F32).reshape(b, hq, s, v.shape[3])


def _merge(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """(B, H, S, D) float32 -> (B, S, H * D) rounded once to ``dtype``."""
    b, h, s, d = y.shape
    return round_to(y.transpose(0, 2, 1, 3).reshape(b, s, h * d), dtype)


def _gqa_dims(meta: NodeMeta) -> tuple[Any, ...] | None:
    """(batch, q_len, q_heads, past_len) from the node's specs, or None."""
    q = meta.inputs[0] if meta.inputs else None
    if q is None or len(q.shape) != 3:
        return None
    past = meta.inputs[3] if len(meta.inputs) > 3 else None
    past_len = past.shape[2] if past is not None and len(past.shape) == 4 else 0
    return q.shape[0], q.shape[1], meta.attr("num_heads"), past_len


def gqa_scores_spec(batch: Any, q_len: Any, heads: Any, past_len: Any) -> TensorSpec:
    """GQA attends over at most ``past_len + q_len`` keys (the present buffer's bound)."""
    kv = past_len + q_len if isinstance(past_len, int) and isinstance(q_len, int) else None
    return scores_spec(batch, heads, q_len, kv)


#: GroupQueryAttention inputs this reference does not implement, by position
_GQA_UNSUPPORTED = {12: "k_scale (quantized KV cache)", 13: "v_scale (quantized KV cache)",
                    14: "q_norm_weight (per-head Q/K RMS norm)",
                    15: "k_norm_weight (per-head Q/K RMS norm)",
                    16: "query_seqlens (right-padded query chunks)"}


class GroupQueryAttention(CpuKernel):
    """Grouped-query attention over a BNSH KV cache, causal per batch entry.

    For entry b the cache holds ``T_b = seqlens_k[b] + 1`` tokens after this step. On the
    first prompt (``S == total_sequence_length``) the S new tokens start at position 0
    (entries shorter than S are right-padded; their padded rows' outputs are unspecified);
    otherwise they sit at ``P_b = T_b - S``. present = past's rows ``[0, P_b)``, the S new
    rows at ``P_b``, zeros after, over ``max(total_sequence_length, past length)`` rows:
    with a fixed-capacity past that is the same buffer shape (past_present_share_buffer),
    without it the cache grows. Query s attends keys ``j <= P_b + s`` (all ``j < T_b``
    with ``causal=0``), and ``P_b + s - j < local_window_size`` when that is >= 0 (the
    window holds local_window_size keys, the query's own included, as onnxruntime CPU).
    Rotary (do_rotary) rotates new Q and K at positions ``P_b + s`` (or position_ids).
    """

    parity = ATTENTION_PARITY

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        dims = _gqa_dims(meta)
        return WorkspaceRequirement.NONE if dims is None else _workspace(gqa_scores_spec(*dims))

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        results = self._gqa(ctx, list(inputs) + [None] * (17 - len(inputs)), workspace)
        n = min(len(outputs), len(results))
        outputs[:n] = results[:n]

    def _check_attrs(self, ctx: ExecutionContext, inputs: list[Any]) -> tuple[int, int]:
        node = ctx.node
        for pos, what in _GQA_UNSUPPORTED.items():
            if inputs[pos] is not None:
                raise self.fail(ctx, f"input {pos} {what} is not supported by cpu_reference")
        if int(node.attr("qk_output", 0)):
            raise self.fail(ctx, f"qk_output={node.attr('qk_output')} (the output_qk output) "
                                 f"is not supported by cpu_reference; use 0")
        for name in ("k_quant_type", "v_quant_type"):
            if node.attr(name, "NONE") not in ("NONE", b"NONE"):
                raise self.fail(ctx, f"{name}={node.attr(name)!r}: quantized KV caches are "
                                     f"not supported by cpu_reference")
        hq, hkv = int(node.attr("num_heads", 0)), int(node.attr("kv_num_heads", 0))
        if hq <= 0 or hkv <= 0 or hq % hkv:
            raise self.fail(ctx, f"num_heads={hq} must be a positive multiple of "
                                 f"kv_num_heads={hkv}")
        return hq, hkv

    def _gqa(self, ctx: ExecutionContext, inputs: list[Any],
             workspace: WorkspaceView | None) -> list[Any]:
        (query, key, value, past_k, past_v, seqlens_k, total_len, cos, sin, position_ids,
         attn_bias, head_sink) = inputs[:12]
        node = ctx.node
        hq, hkv = self._check_attrs(ctx, inputs)
        dtype = check_same_dtype(self, ctx, query=query, key=key, value=value,
                                 past_key=past_k, past_value=past_v, cos_cache=cos,
                                 sin_cache=sin, attention_bias=attn_bias, head_sink=head_sink)
        if query.ndim != 3:
            raise self.fail(ctx, f"query must be 3-D (batch, seq, hidden), got {query.shape}")
        batch, q_len, hidden = query.shape
        if (key is None) != (value is None):
            raise self.fail(ctx, "key and value must both be given, or both be absent (packed "
                                 "QKV in query)")
        if key is None:
            head = hidden // (hq + 2 * hkv)
            if head * (hq + 2 * hkv) != hidden:
                raise self.fail(ctx, f"packed QKV hidden size {hidden} is not (num_heads + 2 * "
                                     f"kv_num_heads) = {hq + 2 * hkv} times a head size")
            q_part, k_part, v_part = np.split(query, [hq * head, (hq + hkv) * head], axis=2)
        else:
            head = hidden // hq
            if head * hq != hidden or key.shape != (batch, q_len, hkv * head) or (
                    value.shape != key.shape):
                raise self.fail(ctx, f"query {query.shape}, key {key.shape}, value "
                                     f"{value.shape} do not hold {hq} query and {hkv} kv heads "
                                     f"of one size over one (batch, seq)")
            q_part, k_part, v_part = query, key, value
        q, k_new, v_new = _heads(q_part, hq), _heads(k_part, hkv), _heads(v_part, hkv)

        if (past_k is None) != (past_v is None):
            raise self.fail(ctx, "past_key and past_value must be given together")
        past_len = 0 if past_k is None else past_k.shape[2]
        if past_k is not None and (past_k.shape != past_v.shape or past_k.shape[:2] != (
                batch, hkv) or past_k.shape[3] != head):
            raise self.fail(ctx, f"past_key {past_k.shape} and past_value {past_v.shape} must "
                                 f"both be (batch={batch}, kv_num_heads={hkv}, past, "
                                 f"head={head})")
        seq = np.asarray(seqlens_k)
        if seq.dtype != np.int32 or seq.shape != (batch,):
            raise self.fail(ctx, f"seqlens_k must be int32 of shape ({batch},), got "
                                 f"{seq.dtype} {seq.shape}")
        tot = np.asarray(total_len)
        if tot.dtype != np.int32 or tot.size != 1:
            raise self.fail(ctx, f"total_sequence_length must be an int32 scalar, got "
                                 f"{tot.dtype} {tot.shape}")
        total = int(tot.reshape(-1)[0])
        totals = seq.astype(np.int64) + 1
        if int(node.attr("sliding_window_cache", 0)):
            return self._windowed(ctx, q, k_new, v_new, past_k, past_v, totals, total, cos,
                                  sin, position_ids, attn_bias, head_sink, dtype, workspace)
        present_len = max(total, past_len)
        if present_len > past_len + q_len:
            raise self.fail(ctx, f"total_sequence_length={total} exceeds past length "
                                 f"{past_len} + {q_len} new tokens")
        first_prompt = q_len == total
        pasts = np.zeros(batch, np.int64) if first_prompt else totals - q_len
        if (pasts < 0).any() or (pasts + q_len > present_len).any() or (
                not first_prompt and (pasts > past_len).any()) or (totals > present_len).any():
            raise self.fail(ctx, f"seqlens_k {seq.tolist()} do not fit: with S={q_len} new "
                                 f"tokens, total_sequence_length={total} and past length "
                                 f"{past_len}, each entry needs 0 <= seqlens_k + 1 - S <= past "
                                 f"and seqlens_k + 1 <= {present_len}")

        q, k_new = self._rotary(ctx, q, k_new, pasts, first_prompt, cos, sin, position_ids)

        present_k = np.zeros((batch, hkv, present_len, head), dtype)
        present_v = np.zeros_like(present_k)
        for b in range(batch):
            p = int(pasts[b])
            if p:
                present_k[b, :, :p], present_v[b, :, :p] = past_k[b, :, :p], past_v[b, :, :p]
            present_k[b, :, p:p + q_len] = k_new[b]
            present_v[b, :, p:p + q_len] = v_new[b]

        j = np.arange(present_len).reshape(1, 1, present_len)
        qpos = pasts.reshape(batch, 1, 1) + np.arange(q_len).reshape(1, q_len, 1)
        allowed = j < totals.reshape(batch, 1, 1)
        if int(node.attr("causal", 1)):
            allowed = allowed & (j <= qpos)
        window = int(node.attr("local_window_size", -1))
        if window >= 0:
            allowed = allowed & (qpos - j < window)
        bias = None
        if attn_bias is not None:
            bias = np.zeros(attn_bias.shape[:3] + (present_len,), _F32)
            bias[..., :total] = self._bias(ctx, attn_bias, batch, hq, q_len, total)
        sink = self._sink(ctx, head_sink, hq)
        scale = float(node.attr("scale", 0.0)) or 1.0 / np.sqrt(head)
        spec = gqa_scores_spec(batch, q_len, hq, past_len)
        scores = _scores(workspace, spec, present_len)
        y = _attend(q, present_k, present_v, scale, allowed[:, None], scores, bias=bias,
                    softcap=float(node.attr("softcap", 0.0)), sink=sink)
        return [_merge(y, dtype), present_k, present_v]

    def _rotary(self, ctx: ExecutionContext, q: np.ndarray, k_new: np.ndarray,
                pasts: np.ndarray, first_prompt: bool, cos: Any, sin: Any,
                position_ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """Q and the new K rotated at positions ``pasts + s`` (or position_ids) when
        do_rotary is set, else unchanged."""
        if not int(ctx.node.attr("do_rotary", 0)):
            return q, k_new
        batch, q_len, head = q.shape[0], q.shape[2], q.shape[3]
        pos = pasts.reshape(batch, 1) + np.arange(q_len).reshape(1, q_len)   # (B, S)
        if cos is None or sin is None:
            raise self.fail(ctx, "do_rotary=1 needs cos_cache and sin_cache")
        if position_ids is not None:
            pid = np.asarray(position_ids).astype(np.int64)
            pos = (np.broadcast_to(pid.reshape(-1)[0] + np.arange(q_len), (batch, q_len))
                   if first_prompt else np.broadcast_to(pid, (batch, q_len)))
        half = cos.shape[1] if cos.ndim == 2 else -1
        if cos.shape != sin.shape or half <= 0 or 2 * half > head:
            raise self.fail(ctx, f"cos_cache {cos.shape} and sin_cache {sin.shape} must be "
                                 f"(max_len, rotary_dim / 2) with rotary_dim <= {head}")
        if (pos < 0).any() or (pos >= cos.shape[0]).any():
            raise self.fail(ctx, f"rotary positions reach {int(pos.max())}, beyond "
                                 f"cos_cache's {cos.shape[0]} rows")
        c, s = cos[pos][:, None], sin[pos][:, None]                     # (B, 1, S, half)
        inter = bool(ctx.node.attr("rotary_interleaved", 0))
        return rotate(q, c, s, inter), rotate(k_new, c, s, inter)

    def _bias(self, ctx: ExecutionContext, attn_bias: np.ndarray, batch: int, hq: int,
              q_len: int, total: int) -> np.ndarray:
        """attention_bias as float32, checked: (batch or 1, num_heads or 1, S, total)."""
        if attn_bias.ndim != 4 or attn_bias.shape[0] not in (1, batch) or (
                attn_bias.shape[1] not in (1, hq)) or attn_bias.shape[2:] != (q_len, total):
            raise self.fail(ctx, f"attention_bias {attn_bias.shape} must be (batch or 1, "
                                 f"num_heads or 1, {q_len}, {total})")
        return upcast(attn_bias)

    def _sink(self, ctx: ExecutionContext, head_sink: Any, hq: int) -> np.ndarray | None:
        """Each head's extra softmax logit: head_sink, zeros for smooth_softmax, or None."""
        if head_sink is not None:
            if head_sink.shape != (hq,):
                raise self.fail(ctx, f"head_sink must have shape ({hq},), got {head_sink.shape}")
            return upcast(head_sink)
        if int(ctx.node.attr("smooth_softmax", 0)) == 1:
            return np.zeros(hq, _F32)
        return None

    def _windowed(self, ctx: ExecutionContext, q: np.ndarray, k_new: np.ndarray,
                  v_new: np.ndarray, past_k: Any, past_v: Any, totals: np.ndarray,
                  total: int, cos: Any, sin: Any, position_ids: Any, attn_bias: Any,
                  head_sink: Any, dtype: np.dtype, workspace: WorkspaceView | None
                  ) -> list[Any]:
        """``sliding_window_cache=1`` (:mod:`.window_cache`): the past's length is the
        cache's capacity C >= W = local_window_size; each query attends what it would over a
        full-length cache, rotary and attention_bias at absolute positions."""
        node = ctx.node
        batch, hq, q_len, head = q.shape
        window = int(node.attr("local_window_size", -1))
        if window <= 0:
            raise self.fail(ctx, "sliding_window_cache=1 needs local_window_size > 0 (the "
                                 "cache keeps that many positions)")
        if past_k is None:
            raise self.fail(ctx, "sliding_window_cache=1 needs past_key and past_value: "
                                 "their length is the cache's capacity")
        cap = past_k.shape[2]
        if cap < window:
            raise self.fail(ctx, f"sliding_window_cache: KV cache capacity ({cap}) must be at "
                                 f"least local_window_size ({window})")
        pasts = totals - q_len
        if (pasts < 0).any() or int(totals.max()) > total:
            raise self.fail(ctx, f"seqlens_k {(totals - 1).tolist()} do not fit: each needs "
                                 f"seqlens_k + 1 >= sequence_length {q_len} and <= "
                                 f"total_sequence_length {total}")
        q, k_new = self._rotary(ctx, q, k_new, pasts, False, cos, sin, position_ids)
        bias = None if attn_bias is None else self._bias(ctx, attn_bias, batch, hq, q_len,
                                                         total)
        sink, softcap = self._sink(ctx, head_sink, hq), float(node.attr("softcap", 0.0))
        scale = float(node.attr("scale", 0.0)) or 1.0 / np.sqrt(head)
        spec = gqa_scores_spec(1, q_len, hq, cap)     # one entry at a time

        def attend(qb, keys, vals, allowed, b_bias):
            scores = _scores(workspace, spec, keys.shape[2])
            return _attend(qb, keys, vals, scale, allowed, scores, bias=b_bias,
                           softcap=softcap, sink=sink)

        y, present_k, present_v = window_cache.step(
            q, k_new, v_new, past_k, past_v, pasts, totals, window,
            bool(int(node.attr("causal", 1))), bias, attend, dtype)
        return [_merge(y, dtype), present_k, present_v]


#: MultiHeadAttention inputs this reference does not implement, by position
_MHA_UNSUPPORTED = {8: "past_sequence_length (decoder-masked buffer sharing)",
                    9: "cache_indirection (beam search)"}


def _mha_dims(meta: NodeMeta) -> tuple[Any, ...] | None:
    specs = list(meta.inputs) + [None] * (8 - len(meta.inputs))
    q, k, past = specs[0], specs[1], specs[6]
    if q is None or k is None or len(q.shape) != 3 or len(k.shape) != 3:
        return None
    past_len = past.shape[2] if past is not None and len(past.shape) == 4 else 0
    kv = k.shape[1] + past_len if isinstance(k.shape[1], int) and isinstance(
        past_len, int) else None
    return q.shape[0], meta.attr("num_heads"), q.shape[1], kv


class MultiHeadAttention(CpuKernel):
    """Multi-head attention on separate (batch, seq, hidden) Q, K, V with onnxruntime's
    additive masks: a masked key (key_padding_mask 0, past its length, or causal) gets
    ``mask_filter_value`` (once, whatever masks it) added to its scaled score, then
    attention_bias is added. past_key/past_value (BNSH) are concatenated before the new
    keys; present outputs are that concatenation."""

    parity = ATTENTION_PARITY

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        dims = _mha_dims(meta)
        return WorkspaceRequirement.NONE if dims is None else _workspace(scores_spec(*dims))

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        results = self._mha(ctx, list(inputs) + [None] * (10 - len(inputs)), workspace)
        n = min(len(outputs), len(results))
        outputs[:n] = results[:n]

    def _mha(self, ctx: ExecutionContext, inputs: list[Any],
             workspace: WorkspaceView | None) -> list[Any]:
        query, key, value, bias, pad_mask, attn_bias, past_k, past_v = inputs[:8]
        node = ctx.node
        for pos, what in _MHA_UNSUPPORTED.items():
            if inputs[pos] is not None:
                raise self.fail(ctx, f"input {pos} {what} is not supported by cpu_reference")
        if len(node.output_names) > 3 and node.output_names[3]:
            raise self.fail(ctx, "the qk output is not supported by cpu_reference")
        heads = int(node.attr("num_heads", 0))
        if query.ndim != 3 or key is None or value is None or key.ndim != 3 or value.ndim != 3:
            raise self.fail(ctx, f"only separate 3-D query, key and value (batch, seq, hidden) "
                                 f"are supported by cpu_reference; packed QKV (5-D query), "
                                 f"packed KV (5-D key) and BNSH key/value are not (got query "
                                 f"{query.shape}, key {None if key is None else key.shape}, "
                                 f"value {None if value is None else value.shape})")
        dtype = check_same_dtype(self, ctx, query=query, key=key, value=value, bias=bias,
                                 attention_bias=attn_bias, past_key=past_k, past_value=past_v)
        batch, q_len, hidden = query.shape
        kv_len, v_hidden = key.shape[1], value.shape[2]
        if heads <= 0 or hidden % heads or v_hidden % heads or key.shape[2] != hidden or (
                key.shape[0] != batch or value.shape[:2] != key.shape[:2]):
            raise self.fail(ctx, f"query {query.shape}, key {key.shape}, value {value.shape} "
                                 f"do not split into num_heads={heads} heads over one batch")
        head, v_head = hidden // heads, v_hidden // heads
        q, k, v = (source_value(t) for t in (query, key, value))
        if bias is not None:
            if bias.shape != (2 * hidden + v_hidden,):
                raise self.fail(ctx, f"bias must have shape ({2 * hidden + v_hidden},), got "
                                     f"{bias.shape}")
            bq, bk, bv = np.split(source_value(bias), [hidden, 2 * hidden])
            q, k, v = q + bq, k + bk, v + bv
        q, k, v = (_heads(round_to(t, dtype), heads) for t in (q, k, v))
        if (past_k is None) != (past_v is None):
            raise self.fail(ctx, "past_key and past_value must be given together")
        if past_k is not None:
            if past_k.shape[:2] != (batch, heads) or past_k.shape[3] != head or (
                    past_v.shape != past_k.shape[:3] + (v_head,)):
                raise self.fail(ctx, f"past_key {past_k.shape} / past_value {past_v.shape} "
                                     f"must be (batch, num_heads, past, head size)")
            k = np.concatenate([past_k, k], axis=2)
            v = np.concatenate([past_v, v], axis=2)
        past_len = 0 if past_k is None else past_k.shape[2]
        total = past_len + kv_len

        masked = np.zeros((batch, 1, q_len, total), bool)
        if pad_mask is not None:
            masked |= self._padding(ctx, np.asarray(pad_mask), batch, q_len, kv_len, total)
        if int(node.attr("unidirectional", 0)):
            j = np.arange(total).reshape(1, total)
            masked |= j > past_len + np.arange(q_len).reshape(q_len, 1)
        add = np.where(masked, _F32.type(node.attr("mask_filter_value", -10000.0)),
                       _F32.type(0))
        if attn_bias is not None:
            if attn_bias.ndim != 4 or attn_bias.shape[0] not in (1, batch) or (
                    attn_bias.shape[1] not in (1, heads)) or attn_bias.shape[2:] != (q_len,
                                                                                   total):
                raise self.fail(ctx, f"attention_bias {attn_bias.shape} must be (batch or 1, "
                                     f"num_heads or 1, {q_len}, {total})")
            add = add + upcast(attn_bias)
        scale = float(node.attr("scale", 0.0)) or 1.0 / np.sqrt(head)
        spec = scores_spec(batch, heads, q_len, total)
        y = _attend(q, k, v, scale, np.ones((1, 1, 1, 1), bool),
                    _scores(workspace, spec, total), bias=add)
        return [_merge(y, dtype), k, v]

    def _padding(self, ctx: ExecutionContext, mask: np.ndarray, batch: int, q_len: int,
                 kv_len: int, total: int) -> np.ndarray:
        """key_padding_mask as a boolean (batch, 1, q or 1, total) 'masked'."""
        if mask.dtype != np.int32:
            raise self.fail(ctx, f"key_padding_mask must be int32, got {mask.dtype}")
        j = np.arange(total)
        if mask.shape == (batch,):
            return (j.reshape(1, total) >= mask.reshape(batch, 1)).reshape(batch, 1, 1, total)
        if mask.shape in ((batch, total), (batch, kv_len)) and mask.shape[1] == total:
            return (mask == 0).reshape(batch, 1, 1, total)
        if mask.shape == (batch, q_len, total):
            return (mask == 0).reshape(batch, 1, q_len, total)
        raise self.fail(ctx, f"key_padding_mask of shape {mask.shape} is not supported: use "
                             f"({batch},) lengths, ({batch}, {total}) or ({batch}, {q_len}, "
                             f"{total}) 0/1 (the (3 * batch + 2,) form is not supported)")


class RotaryEmbedding(CpuKernel):
    """com.microsoft::RotaryEmbedding: input (batch, seq, hidden) or (batch, heads, seq,
    head); position_ids (1,) (an offset: position = id + s) or (batch, seq); caches
    (max_len, rotary_dim / 2). The first rotary_dim channels of each head rotate, the rest
    pass through. ``scale`` is not applied (onnxruntime CPU ignores it too)."""

    parity = ROTARY_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, position_ids: np.ndarray,
            cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        node = ctx.node
        check_same_dtype(self, ctx, input=x, cos_cache=cos, sin_cache=sin)
        if int(node.attr("is_packed_batching", 0)):
            raise self.fail(ctx, "is_packed_batching=1 is not supported by cpu_reference")
        if cos.ndim != 2 or cos.shape != sin.shape:
            raise self.fail(ctx, f"cos_cache {cos.shape} and sin_cache {sin.shape} must be "
                                 f"equal 2-D (max_len, rotary_dim / 2)")
        half = cos.shape[1]
        heads, dim = int(node.attr("num_heads", 0)), int(node.attr("rotary_embedding_dim", 0))
        if x.ndim == 4:
            batch, heads, seq, head = x.shape
            view = x
        elif x.ndim == 3:
            batch, seq, hidden = x.shape
            head = hidden // heads if heads > 0 else 2 * half
            if head <= 0 or hidden % head:
                raise self.fail(ctx, f"hidden size {hidden} is not a multiple of the head size "
                                     f"{head} (num_heads={heads}, cos_cache {cos.shape})")
            view = x.reshape(batch, seq, hidden // head, head).transpose(0, 2, 1, 3)
        else:
            raise self.fail(ctx, f"input must be 3-D or 4-D, got shape {x.shape}")
        if dim and heads <= 0 and x.ndim == 3:
            raise self.fail(ctx, "rotary_embedding_dim needs num_heads")
        if 2 * half != (dim or head) or 2 * half > head:
            raise self.fail(ctx, f"cos_cache's last dim {half} must be rotary_embedding_dim / "
                                 f"2 = {(dim or head) / 2} (head size {head})")
        pid = np.asarray(position_ids)
        if pid.dtype != np.int64:
            raise self.fail(ctx, f"position_ids must be int64, got {pid.dtype}")
        if pid.size == 1:
            pos = np.broadcast_to(pid.reshape(-1)[0] + np.arange(seq), (batch, seq))
        elif pid.shape == (batch, seq):
            pos = pid
        else:
            raise self.fail(ctx, f"position_ids must be (1,) or ({batch}, {seq}), got "
                                 f"{pid.shape}")
        if (pos < 0).any() or (pos >= cos.shape[0]).any():
            raise self.fail(ctx, f"position_ids must lie in [0, {cos.shape[0]})")
        y = rotate(view, cos[pos][:, None], sin[pos][:, None],
                   bool(node.attr("interleaved", 0)))
        if x.ndim == 3:
            return np.ascontiguousarray(y.transpose(0, 2, 1, 3)).reshape(x.shape)
        return y


class SkipLayerNormalization(CpuKernel):
    """s = input + skip (+ bias); output = (s - mean(s)) / sqrt(var(s) + epsilon) * gamma
    (+ beta) over the last axis. Outputs: output, mean and inv_std_var (float32, the last
    axis kept as 1), input_skip_bias_sum = s in the input's type. Computed in float64 from
    the exact values (the output normalizes the exact ``s``); each output rounded once."""

    parity = NORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, skip: np.ndarray, gamma: np.ndarray,
            beta: np.ndarray | None = None, bias: np.ndarray | None = None) -> Any:
        check_skip_inputs(self, ctx, x, skip, gamma=gamma, beta=beta, bias=bias)
        hidden = x.shape[-1]
        s = source_value(x) + source_value(skip)
        if bias is not None:
            s += source_value(bias)
        eps = float(ctx.node.attr("epsilon", 1e-12))
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.sum(s, axis=-1, keepdims=True) / hidden
            var = np.sum((s - mean) ** 2, axis=-1, keepdims=True) / hidden
            inv = 1.0 / np.sqrt(var + eps)
        y = (s - mean) * inv * source_value(gamma)
        if beta is not None:
            y += source_value(beta)
        outs = (round_to(y, x.dtype), round_to(mean, np.float32), round_to(inv, np.float32),
                round_to(s, x.dtype))
        return outs[:len(ctx.node.output_names)]


KERNELS: list[CpuKernel] = [
    GroupQueryAttention("GroupQueryAttention", domain=MS_DOMAIN, dtypes=CONTRIB_DTYPES),
    MultiHeadAttention("MultiHeadAttention", domain=MS_DOMAIN, dtypes=CONTRIB_DTYPES),
    RotaryEmbedding("RotaryEmbedding", domain=MS_DOMAIN, dtypes=CONTRIB_DTYPES),
    SkipLayerNormalization("SkipLayerNormalization", domain=MS_DOMAIN, dtypes=CONTRIB_DTYPES),
]
