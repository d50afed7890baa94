"""Attention (opset 23, 24 nonpad_kv_seqlen, 25 sliding windows), RotaryEmbedding (opset 23)
and LinearAttention (opset 27).

Numerics: Q and K are pre-scaled by sqrt(scale) in the input dtype (as the ONNX function
body does), then QK^T, softcap, bias and softmax run in float32 (float64 for float64
inputs or softmax_precision=DOUBLE; float16 inputs stay float16 throughout, as in the
function body and the ONNX expectations); the probabilities are rounded to the input dtype
before P @ V, again as the function body does. Parity: tolerance, not exact (matmul
summation order is not specified).

The attention-scores matrix ``(batch, q_heads, q_len, total_kv_len)`` lives in the node's
workspace; :func:`scores_spec` is the one sizing formula for planning and execution.

LinearAttention runs its recurrence in float32 for every input type, as the spec's
reference does; a chunk-parallel implementation reorders it: a tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    TensorSpec,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.providers.cpu_reference.base import CpuKernel, check_same_dtype
from onnx_ep.providers.cpu_reference.dot import matmul
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast
from onnx_ep.providers.cpu_reference.numerics import is_float

_DOUBLE = onnx.TensorProto.DOUBLE
_FLOAT16 = onnx.TensorProto.FLOAT16

#: a float32 recurrence over T steps; chunked (WY) algorithms reassociate it.
RECURRENCE_PARITY = Parity.tolerance(rtol=1e-4, atol=1e-5)


def _compute_dtype(q_dtype: np.dtype, softmax_precision: int | None) -> np.dtype:
    if np.dtype(q_dtype) == np.float64 or softmax_precision == _DOUBLE:
        return np.dtype(np.float64)
    if np.dtype(q_dtype) == np.float16 and softmax_precision in (None, _FLOAT16):
        # the function body keeps float16 end to end; float32 here is more accurate
        # but lands 2 ulp away from the ONNX expectations
        return np.dtype(np.float16)
    return np.dtype(np.float32)


def scores_spec(q_shape: Sequence[Any], k_shape: Sequence[Any],
                past_shape: Sequence[Any] | None, q_dtype: np.dtype,
                attrs: Any) -> TensorSpec:
    """dtype and shape of the attention-scores scratch: THE workspace formula."""
    if len(q_shape) == 3:
        batch, q_len, heads = q_shape[0], q_shape[1], attrs.get("q_num_heads")
        kv_len = k_shape[1]
    else:
        batch, heads, q_len = q_shape[0], q_shape[1], q_shape[2]
        kv_len = k_shape[2]
    past = past_shape[2] if past_shape is not None else 0
    total = kv_len + past if isinstance(kv_len, int) and isinstance(past, int) else None
    return TensorSpec(_compute_dtype(q_dtype, attrs.get("softmax_precision")),
                      (batch, heads, q_len, total))


def _to_4d(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _frontier_bias(base: np.ndarray, offset: Any, allowed_fn: Any) -> np.ndarray:
    """Add an offset-aligned (query i at absolute position i + offset) mask to ``base``.

    ``offset`` is a scalar (internal or no cache) or a per-batch vector (external cache,
    ``nonpad_kv_seqlen - q_len``); the per-batch form adds a (batch, 1, q, kv) axis.
    """
    q_len, kv_len = base.shape[-2:]
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    if np.ndim(offset) > 0:
        pos = i + np.reshape(offset, (-1, 1, 1))
        allowed = allowed_fn(pos, j)
        add = np.where(allowed, base.dtype.type(0), base.dtype.type(-np.inf))
        return base + add.reshape(add.shape[0], 1, q_len, kv_len)
    allowed = allowed_fn(i + int(offset), j)
    return base + np.where(allowed, base.dtype.type(0), base.dtype.type(-np.inf))


def _bias(mask: np.ndarray | None, *, is_causal: bool, past_len: int | None,
          nonpad: np.ndarray | None, q_len: int, kv_len: int, left: int, right: int,
          dt: np.dtype) -> np.ndarray:
    """The additive bias (broadcastable to batch, heads, q, kv) of masks, causality, windows."""
    neg_inf = dt.type(-np.inf)
    zero = dt.type(0)
    if mask is not None:
        pad = kv_len - mask.shape[-1]
        if pad > 0:
            fill = False if mask.dtype == np.bool_ else -np.inf
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=fill)
        mask = (np.where(mask, zero, neg_inf) if mask.dtype == np.bool_
                else upcast(mask).astype(dt))
    windowed = left >= 0 or right >= 0
    offset: Any = (nonpad.reshape(-1) - q_len if past_len is None and nonpad is not None
                   else (past_len or 0))
    bias = np.zeros((q_len, kv_len), dtype=dt)
    if mask is not None:
        bias = bias + mask
    if is_causal:
        bias = _frontier_bias(bias, offset, lambda p, j: j <= p)
    if windowed:
        def in_window(p: np.ndarray, j: np.ndarray) -> np.ndarray:
            ok = np.ones(np.broadcast_shapes(np.shape(p), np.shape(j)), dtype=bool)
            if left >= 0:
                ok &= p - j <= left
            if right >= 0:
                ok &= j - p <= right
            return ok
        bias = _frontier_bias(bias, offset, in_window)
    if nonpad is not None:
        keep = np.arange(kv_len) < nonpad.reshape(-1, 1)
        bias = bias + np.where(keep, zero, neg_inf).reshape(-1, 1, 1, kv_len)
    return bias


class Attention(CpuKernel):
    parity = Parity.tolerance(1e-5, 1e-6)

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        q = meta.inputs[0] if meta.inputs else None
        k = meta.inputs[1] if len(meta.inputs) > 1 else None
        past = meta.inputs[4] if len(meta.inputs) > 4 else None
        if q is None or k is None or len(q.shape) not in (3, 4):
            return WorkspaceRequirement.NONE
        spec = scores_spec(q.shape, k.shape, past.shape if past is not None else None,
                           q.dtype, meta.attrs)
        if not spec.is_static:
            return WorkspaceRequirement.NONE
        return WorkspaceRequirement(spec.nbytes)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        results = self._attention(ctx, list(inputs) + [None] * (7 - len(inputs)), workspace)
        n = min(len(outputs), len(results))
        outputs[:n] = results[:n]

    def run(self, ctx: ExecutionContext, *inputs: Any) -> Any:
        return tuple(self._attention(ctx, list(inputs) + [None] * (7 - len(inputs)), None))

    def _attention(self, ctx: ExecutionContext, inputs: list[Any],
                   workspace: WorkspaceView | None) -> list[Any]:
        q, k, v, mask, past_k, past_v, nonpad = inputs[:7]
        node = ctx.node
        if q.ndim != k.ndim or q.ndim != v.ndim or q.ndim not in (3, 4):
            raise self.fail(ctx, f"Q, K, V must all be 3-D or all 4-D, got ranks "
                                 f"{q.ndim}, {k.ndim}, {v.ndim}")
        if (past_k is None) != (past_v is None):
            raise self.fail(ctx, "past_key and past_value must be given together")
        if nonpad is not None and past_k is not None:
            raise self.fail(ctx, "nonpad_kv_seqlen cannot be combined with past_key/past_value")
        spec = scores_spec(q.shape, k.shape, None if past_k is None else past_k.shape,
                           q.dtype, node.attrs)
        if q.ndim == 3:
            hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
            if not hq or not hkv or q.shape[2] % hq or k.shape[2] % hkv or v.shape[2] % hkv:
                raise self.fail(ctx, f"3-D inputs need q_num_heads/kv_num_heads dividing the "
                                     f"hidden sizes, got {hq}/{hkv} for {q.shape}, {k.shape}, "
                                     f"{v.shape}")
            q, k, v = _to_4d(q, hq), _to_4d(k, hkv), _to_4d(v, hkv)
            three_d = True
        else:
            three_d = False
        batch, hq, q_len, head = q.shape
        hkv = k.shape[1]
        if hq % hkv or v.shape[1] != hkv or k.shape[3] != head:
            raise self.fail(ctx, f"q heads {hq} must be a multiple of kv heads {hkv} (K and V "
                                 f"alike) and Q, K head sizes must match: Q {q.shape}, "
                                 f"K {k.shape}, V {v.shape}")
        if past_k is not None:
            k = np.concatenate([past_k, k], axis=2)
            v = np.concatenate([past_v, v], axis=2)
        present_k, present_v = k, v
        kv_len = k.shape[2]
        rep = hq // hkv
        dt = spec.dtype

        scale = node.attr("scale")
        scale = 1.0 / np.sqrt(head) if scale is None else scale
        root = round_to(np.sqrt(scale), q.dtype)
        # Grouped-query attention: q head h reads kv head h // rep, done by broadcasting.
        qs = upcast(q * root).astype(dt).reshape(batch, hkv, rep, q_len, head)
        ks = upcast(k * root).astype(dt).swapaxes(2, 3).reshape(batch, hkv, 1, head, kv_len)
        if workspace is not None:
            scores = workspace.array(dt, spec.shape)
        else:
            scores = np.empty((batch, hq, q_len, kv_len), dtype=dt)
        _matmul_into(qs, ks, scores.reshape(batch, hkv, rep, q_len, kv_len))

        softcap = float(node.attr("softcap", 0.0))
        if softcap > 0:
            np.divide(scores, dt.type(softcap), out=scores)
            np.tanh(scores, out=scores)
            np.multiply(scores, dt.type(softcap), out=scores)
        mode = int(node.attr("qk_matmul_output_mode", 0))
        qk_out = scores.copy() if mode in (0, 1) and len(node.output_names) > 3 else None

        bias = _bias(mask, is_causal=bool(node.attr("is_causal", 0)),
                     past_len=None if past_k is None else past_k.shape[2],
                     nonpad=None if nonpad is None else np.asarray(nonpad).astype(np.int64),
                     q_len=q_len, kv_len=kv_len, left=int(node.attr("left_window_size", -1)),
                     right=int(node.attr("right_window_size", -1)), dt=dt)
        np.add(scores, bias, out=scores)
        if mode == 2:
            qk_out = scores.copy()

        # Softmax in place. A row whose bias is all -inf has no attendable key: its
        # probabilities are 0 (decided on the bias, not on possibly-NaN logits).
        row_max = scores.max(axis=-1, keepdims=True)
        row_max[np.isneginf(row_max)] = 0
        np.subtract(scores, row_max, out=scores)
        np.exp(scores, out=scores)
        total = scores.sum(axis=-1, keepdims=True)
        total[total == 0] = 1
        np.divide(scores, total, out=scores)
        dead = np.isneginf(bias.max(axis=-1, keepdims=True))
        if dead.any():
            scores[np.broadcast_to(dead, scores.shape)] = 0
        if mode == 3:
            qk_out = scores.copy()

        probs = upcast(round_to(scores, q.dtype)).astype(dt)
        probs = probs.reshape(batch, hkv, rep, q_len, kv_len)
        vs = upcast(v).astype(dt).reshape(batch, hkv, 1, kv_len, v.shape[3])
        y = _matmul_into(probs, vs, np.empty(probs.shape[:-1] + vs.shape[-1:], dt))
        y = round_to(y.reshape(batch, hq, q_len, v.shape[3]), q.dtype)
        if three_d:
            y = y.transpose(0, 2, 1, 3).reshape(batch, q_len, hq * v.shape[3])
        out_qk = None if qk_out is None else round_to(qk_out, q.dtype)
        return [y, present_k, present_v, out_qk]


class RotaryEmbedding(CpuKernel):
    """Rotations are basic arithmetic in the input dtype (as the spec's formula): EXACT."""

    def run(self, ctx: ExecutionContext, x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
            position_ids: np.ndarray | None = None) -> np.ndarray:
        node = ctx.node
        shape = x.shape
        if x.ndim == 4:
            x = x.transpose(0, 2, 1, 3)               # -> (batch, seq, heads, head)
        elif x.ndim == 3:
            heads = int(node.attr("num_heads", 0))
            if heads <= 0 or shape[2] % heads:
                raise self.fail(ctx, f"3-D input needs num_heads dividing hidden size "
                                     f"{shape[2]}, got {heads}")
            x = x.reshape(shape[0], shape[1], heads, shape[2] // heads)
        else:
            raise self.fail(ctx, f"input must be 3-D or 4-D, got shape {shape}")
        head = x.shape[3]
        dim = int(node.attr("rotary_embedding_dim", 0)) or head
        half = dim // 2
        if position_ids is not None:
            pid = np.asarray(position_ids).astype(np.int64)
            if (pid < 0).any() or (pid >= cos.shape[0]).any():
                raise self.fail(ctx, f"position_ids must lie in [0, {cos.shape[0]})")
            cos, sin = cos[pid], sin[pid]
        if cos.shape[-1] != half or sin.shape[-1] != half:
            raise self.fail(ctx, f"cos/sin caches must have last dim rotary_dim/2 = {half}, "
                                 f"got {cos.shape[-1]} and {sin.shape[-1]}")
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        rot, keep = x[..., :dim], x[..., dim:]
        interleaved = bool(node.attr("interleaved", 0))
        x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., :half],
                                                                      rot[..., half:])
        real = cos * x1 - sin * x2
        imag = sin * x1 + cos * x2
        if interleaved:
            rot = np.stack([real, imag], axis=-1).reshape(rot.shape)
        else:
            rot = np.concatenate([real, imag], axis=-1)
        y = np.concatenate([rot, keep], axis=-1).astype(x.dtype)
        if len(shape) == 3:
            return y.reshape(shape)
        return np.ascontiguousarray(y.transpose(0, 2, 1, 3))


# ---------------------------------------------------------------- LinearAttention

_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, T, H*D) -> (B, T, H, D) in float32."""
    b, t, hd = x.shape
    return upcast(x).astype(np.float32).reshape(b, t, heads, hd // heads)


class LinearAttention(CpuKernel):
    """Recurrent linear attention (linear / gated / delta / gated_delta rules) with GQA.

    The recurrence runs token by token (inherently sequential); every step is
    vectorized over batch, heads and the state matrix.
    """

    parity = RECURRENCE_PARITY

    def run(self, ctx: ExecutionContext, q: np.ndarray, k: np.ndarray, v: np.ndarray,
            past: np.ndarray | None = None, decay: np.ndarray | None = None,
            beta: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        rule = ctx.node.attr("update_rule", "gated_delta")
        if rule not in _UPDATE_RULES:
            raise self.fail(ctx, f"update_rule {rule!r} is not one of {', '.join(_UPDATE_RULES)}")
        hq, hkv = ctx.node.attr("q_num_heads", None), ctx.node.attr("kv_num_heads", None)
        if hq is None or hkv is None:
            raise self.fail(ctx, "attributes 'q_num_heads' and 'kv_num_heads' are required")
        if hq < 1 or hkv < 1 or hq % hkv:
            raise self.fail(ctx, f"q_num_heads={hq} must be a positive multiple of "
                                 f"kv_num_heads={hkv}")
        dtype = check_same_dtype(self, ctx, query=q, key=k, value=v, decay=decay, beta=beta)
        gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        for name, arr, needed in (("decay", decay, gated), ("beta", beta, delta)):
            if needed and arr is None:
                raise self.fail(ctx, f"update_rule {rule!r} requires the '{name}' input")
            if not needed and arr is not None:
                raise self.fail(ctx, f"update_rule {rule!r} takes no '{name}' input")
        if any(a.ndim != 3 for a in (q, k, v)):
            raise self.fail(ctx, f"query {q.shape}, key {k.shape} and value {v.shape} must "
                                 f"be rank 3 (B, T, H*D)")
        bsz, t = q.shape[:2]
        dk = q.shape[2] // hq
        dv = v.shape[2] // hkv
        if (q.shape[2] % hq or k.shape != (bsz, t, hkv * dk) or v.shape[:2] != (bsz, t)
                or v.shape[2] % hkv):
            raise self.fail(ctx, f"query {q.shape}, key {k.shape}, value {v.shape} do not "
                                 f"pack {hq} query / {hkv} kv heads over one (B, T)")
        if past is not None:
            if not is_float(past.dtype):
                raise self.fail(ctx, f"past_state must be float, got {past.dtype}")
            if past.shape != (bsz, hkv, dk, dv):
                raise self.fail(ctx, f"past_state has shape {past.shape}, expected "
                                     f"{(bsz, hkv, dk, dv)}")
        if decay is not None and decay.shape not in ((bsz, t, hkv), (bsz, t, hkv * dk)):
            raise self.fail(ctx, f"decay has shape {decay.shape}, expected "
                                 f"{(bsz, t, hkv)} or {(bsz, t, hkv * dk)}")
        if beta is not None and beta.shape not in ((bsz, t, hkv), (bsz, t, 1)):
            raise self.fail(ctx, f"beta has shape {beta.shape}, expected "
                                 f"{(bsz, t, hkv)} or {(bsz, t, 1)}")
        scale = float(ctx.node.attr("scale", 0.0)) or 1.0 / np.sqrt(dk)

        group = hq // hkv
        # query head h reads kv head h // group: (B, T, H_kv, group, d_k)
        q5 = _heads(q, hq).reshape(bsz, t, hkv, group, dk)
        k4, v4 = _heads(k, hkv), _heads(v, hkv)
        # (B, T, H_kv, d_k or 1, 1): broadcasts over the state's (d_k, d_v)
        g5 = None if decay is None else np.exp(_heads(decay, hkv))[..., None]
        b4 = None if beta is None else upcast(beta).astype(np.float32).reshape(bsz, t, -1, 1)
        state = (np.zeros((bsz, hkv, dk, dv), np.float32) if past is None
                 else upcast(past).astype(np.float32))
        out = np.empty((bsz, t, hkv, group, dv), np.float32)
        for i in range(t):  # the recurrence is sequential in time
            if g5 is not None:
                state = state * g5[:, i]
            vi = v4[:, i]
            if b4 is not None:
                # delta rule: write beta * (v - S^T k), using the decayed state
                vi = b4[:, i] * (vi - np.einsum("bhkv,bhk->bhv", state, k4[:, i]))
            state = state + k4[:, i, :, :, None] * vi[:, :, None, :]
            out[:, i] = np.einsum("bhgk,bhkv->bhgv", q5[:, i], state)
        out *= np.float32(scale)
        present_dtype = dtype if past is None else past.dtype
        return (round_to(out.reshape(bsz, t, hq * dv), dtype),
                round_to(state, present_dtype))


KERNELS: list[CpuKernel] = [
    Attention("Attention", since=23),
    RotaryEmbedding("RotaryEmbedding", since=23),
    LinearAttention("LinearAttention", since=27),
]


def _matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``a @ b`` into ``out``. float32 accumulates in float64 and rounds once (dot.py: the
    bytes then do not depend on the BLAS thread count); float16 stays in float16, which is
    what onnx's expected values for half-precision Attention assume."""
    if out.dtype == np.float32:
        out[...] = matmul(a, b, out_dtype=np.float32)
    else:
        np.matmul(a, b, out=out)
    return out
