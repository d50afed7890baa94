"""The newest ai.onnx ops (opsets 22-28): BitCast, CumProd, SwiGLU, TensorScatter,
DeformConv, LinearAttention, CausalConvWithState.

Numerics (docs/PARITY.md):

- BitCast and TensorScatter move bits and are exact.
- SwiGLU is computed in float64 and rounded once to the input type (exact for a
  provider that does the same).
- CumProd multiplies sequentially along the axis; float16/bfloat16 accumulate in
  float32 and round once, integers wrap in their own type. A parallel scan
  reorders the products, so floats are promised to a tolerance.
- DeformConv samples bilinearly in float64 and contracts with the weights in the
  compute type (float32 for float16/bfloat16) through BLAS: a tolerance.
- CausalConvWithState sums k products in float32 (float16/bfloat16) or float32
  itself; its fused SiLU is evaluated in float64 on that sum and rounded once.
- LinearAttention runs its recurrence in float32 for every input type, as the
  spec's reference does; a chunk-parallel implementation reorders it: a tolerance.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import onnx

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import compute_dtype, round_to, upcast
from onnx_ep.providers.cpu_reference.numerics import is_float, round_from_float64
from onnx_ep.providers.cpu_reference.windows import window_geometry

#: sequential products / dot products reordered by parallel implementations.
PRODUCT_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)
#: bilinear sampling plus a BLAS contraction over C/group * prod(kernel) terms.
DEFORM_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)
#: a float32 recurrence over T steps; chunked (WY) algorithms reassociate it.
RECURRENCE_PARITY = Parity.tolerance(rtol=1e-4, atol=1e-5)

#: ONNX bit widths of the sub-byte types ml_dtypes stores one per byte (low bits).
_SUB_BYTE_BITS: dict[np.dtype, int] = {
    **{np.dtype(t): 4 for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn)},
    **{np.dtype(t): 2 for t in (ml_dtypes.int2, ml_dtypes.uint2)},
}


def _bits(dt: np.dtype) -> int:
    return _SUB_BYTE_BITS.get(dt, dt.itemsize * 8)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of a non-positive argument only: no overflow for large |x|
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _check_same_dtype(kernel: CpuKernel, ctx: ExecutionContext,
                      **arrays: np.ndarray | None) -> np.dtype:
    """The common dtype of the given (present) inputs, or a NodeError naming the odd one."""
    present = {k: v for k, v in arrays.items() if v is not None}
    first, ref = next(iter(present.items()))
    for name, a in present.items():
        if a.dtype != ref.dtype:
            raise kernel.fail(ctx, f"input '{name}' is {a.dtype} but '{first}' is "
                                   f"{ref.dtype}; they must match")
    if not is_float(ref.dtype):
        raise kernel.fail(ctx, f"{ctx.node.op_type} takes float tensors, got {ref.dtype}")
    return ref.dtype


# ------------------------------------------------------------------ BitCast


class BitCast(CpuKernel):
    """Reinterpret the bits of each element as ``to`` (same bit width, little endian)."""

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        to = ctx.node.attr("to", None)
        if to is None:
            raise self.fail(ctx, "attribute 'to' is required")
        if to == onnx.TensorProto.STRING or x.dtype.kind in "OUS":
            raise self.fail(ctx, "BitCast does not take or produce strings")
        try:
            target = np_dtype(int(to))
        except (KeyError, ValueError, TypeError) as e:
            raise self.fail(ctx, f"'to'={to} is not an ONNX tensor element type") from e
        if _bits(x.dtype) != _bits(target):
            raise self.fail(ctx, f"cannot bitcast {x.dtype} ({_bits(x.dtype)} bits) to "
                                 f"{target} ({_bits(target)} bits); widths must be equal")
        if x.dtype.byteorder == ">":
            x = x.astype(x.dtype.newbyteorder("<"))
        # a C-contiguous copy only when needed (np.ascontiguousarray would make 0-d 1-d)
        x = np.asarray(x, order="C")
        if target in _SUB_BYTE_BITS:
            # ml_dtypes keeps a sub-byte value in the low bits of its byte (int4 -1 is
            # 0x0f), so masking to the width gives the bit pattern of any sub-byte type
            raw = x.view(np.uint8) & np.uint8((1 << _bits(target)) - 1)
            return np.asarray(raw.view(target))
        # numpy's native order is little endian on every platform we run on
        return np.asarray(x.view(target))


# ------------------------------------------------------------------ CumProd


class CumProd(CpuKernel):
    """Cumulative product along ``axis`` (a 0-d input), with ``exclusive`` and ``reverse``."""

    parity = PRODUCT_PARITY
    _TYPES = frozenset(np.dtype(t) for t in (np.uint32, np.uint64, np.int32, np.int64,
                                             np.float16, np.float32, np.float64,
                                             ml_dtypes.bfloat16))

    def run(self, ctx: ExecutionContext, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
        if x.dtype not in self._TYPES:
            raise self.fail(ctx, f"x dtype {x.dtype} is not supported (takes uint32, uint64, "
                                 f"int32, int64, float16, bfloat16, float, double)")
        a = np.asarray(axis)
        if a.dtype.kind not in "iu" or a.size != 1:
            raise self.fail(ctx, f"axis must be one int32/int64 value, got {a.dtype} "
                                 f"of shape {a.shape}")
        if x.ndim == 0:
            raise self.fail(ctx, "x must have rank >= 1")
        ax = normalize_axis(ctx, int(a.reshape(-1)[0]), x.ndim)
        reverse = bool(ctx.node.attr("reverse", 0))
        work = upcast(x)
        if reverse:
            work = np.flip(work, axis=ax)
        if ctx.node.attr("exclusive", 0) and work.shape[ax]:
            # element j is the product of the j elements before it: shift by one, pad with 1
            ones = np.ones_like(np.take(work, [0], axis=ax))
            head = np.take(work, np.arange(work.shape[ax] - 1), axis=ax)
            work = np.concatenate([ones, head], axis=ax)
        out = np.cumprod(work, axis=ax, dtype=work.dtype)
        if reverse:
            out = np.flip(out, axis=ax)
        return round_to(out, x.dtype)


# ------------------------------------------------------------------ SwiGLU


class SwiGLU(CpuKernel):
    """``Y = A * sigmoid(alpha * A) * B``; A and B of one shape, no broadcasting."""

    def run(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dtype = _check_same_dtype(self, ctx, A=a, B=b)
        if a.shape != b.shape:
            raise self.fail(ctx, f"A {a.shape} and B {b.shape} must have the same shape "
                                 f"(SwiGLU does not broadcast)")
        alpha = float(ctx.node.attr("alpha", 1.0))
        a64, b64 = source_value(a), source_value(b)
        with np.errstate(all="ignore"):
            y = a64 * _sigmoid(alpha * a64) * b64
        return round_from_float64(y, dtype)


# ------------------------------------------------------------------ TensorScatter


class TensorScatter(CpuKernel):
    """Write ``update`` into a copy of ``past_cache`` at per-batch sequence offsets."""

    def run(self, ctx: ExecutionContext, past: np.ndarray, update: np.ndarray,
            write_indices: np.ndarray | None = None) -> np.ndarray:
        mode = ctx.node.attr("mode", "linear")
        if mode not in ("linear", "circular"):
            raise self.fail(ctx, f"mode {mode!r} is not 'linear' or 'circular'")
        if past.ndim < 2:
            raise self.fail(ctx, f"past_cache must have rank >= 2, got shape {past.shape}")
        if update.dtype != past.dtype:
            raise self.fail(ctx, f"update is {update.dtype} but past_cache is {past.dtype}")
        axis = normalize_axis(ctx, ctx.node.attr("axis", -2), past.ndim)
        if axis == 0:
            raise self.fail(ctx, "axis must not be 0 (the batch dimension)")
        max_len = past.shape[axis]
        fits = update.ndim == past.ndim and update.shape[axis] <= max_len and all(
            u == p for d, (u, p) in enumerate(zip(update.shape, past.shape)) if d != axis)
        if not fits:
            raise self.fail(ctx, f"update {update.shape} must equal past_cache {past.shape} "
                                 f"except along axis {axis}, where it may not exceed "
                                 f"{max_len}")
        batch, seq_len = past.shape[0], update.shape[axis]
        if write_indices is None:
            starts = np.zeros(batch, dtype=np.int64)
        else:
            starts = np.asarray(write_indices).astype(np.int64).reshape(-1)
            if starts.shape != (batch,):
                raise self.fail(ctx, f"write_indices has shape {np.shape(write_indices)}, "
                                     f"expected ({batch},)")
        if (starts < 0).any():
            raise self.fail(ctx, f"write_indices {starts.tolist()} must be >= 0")
        pos = starts[:, None] + np.arange(seq_len)[None, :]
        if mode == "circular":
            pos %= max(max_len, 1)
        elif (pos >= max_len).any():
            raise self.fail(ctx, f"linear mode needs write_indices + {seq_len} <= {max_len}, "
                                 f"got write_indices {starts.tolist()}")
        present = past.copy()
        # a view with the sequence axis next to the batch: (B, max_len, ...)
        view = np.moveaxis(present, axis, 1)
        view[np.arange(batch)[:, None], pos] = np.moveaxis(update, axis, 1)
        return present


# ------------------------------------------------------------------ DeformConv


class DeformConv(CpuKernel):
    """N-d deformable convolution (v1/v2): bilinear samples at offset kernel taps,
    weighted by ``mask``, contracted with W per group (im2col + matmul)."""

    parity = DEFORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray, offset: np.ndarray,
            b: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        dtype = _check_same_dtype(self, ctx, X=x, W=w, offset=offset, B=b, mask=mask)
        if x.ndim < 3 or w.ndim != x.ndim:
            raise self.fail(ctx, f"X {x.shape} and W {w.shape} must have one rank >= 3")
        n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
        nd, m, kernel = len(spatial), w.shape[0], w.shape[2:]
        ks = ctx.node.attr("kernel_shape", None)
        if ks is not None and tuple(ks) != kernel:
            raise self.fail(ctx, f"kernel_shape {tuple(ks)} differs from W's spatial "
                                 f"shape {kernel}")
        groups = int(ctx.node.attr("group", 1))
        ogroups = int(ctx.node.attr("offset_group", 1))
        if groups < 1 or w.shape[1] * groups != c or m % groups:
            raise self.fail(ctx, f"W {w.shape} does not fit X {x.shape} with group={groups}: "
                                 f"expected W[1] == C/group and W[0] divisible by group")
        if ogroups < 1 or c % ogroups:
            raise self.fail(ctx, f"offset_group={ogroups} must be >= 1 and divide C={c}")
        g = window_geometry(ctx.node, spatial, kernel)
        kp, op = int(np.prod(kernel)), int(np.prod(g.out))
        if offset.shape != (n, ogroups * kp * nd) + g.out:
            raise self.fail(ctx, f"offset has shape {offset.shape}, expected "
                                 f"{(n, ogroups * kp * nd) + g.out}")
        if mask is not None and mask.shape != (n, ogroups * kp) + g.out:
            raise self.fail(ctx, f"mask has shape {mask.shape}, expected "
                                 f"{(n, ogroups * kp) + g.out}")
        if b is not None and b.shape != (m,):
            raise self.fail(ctx, f"B has shape {b.shape}, expected ({m},)")

        # Sampling positions (N, OG, Kp, nd, Op): window origin + dilated tap + offset.
        kidx = np.indices(kernel).reshape(nd, kp)
        oidx = np.indices(g.out).reshape(nd, op)
        base = np.stack([-g.pads_begin[d] + g.strides[d] * oidx[d][None, :]
                         + g.dilations[d] * kidx[d][:, None] for d in range(nd)], axis=1)
        pos = source_value(offset).reshape(n, ogroups, kp, nd, op) + base
        lo = np.floor(pos)
        frac = pos - lo
        lo = lo.astype(np.int64)

        cpg = c // ogroups
        data = source_value(x).reshape(n, ogroups, cpg, -1)
        cols = np.zeros((n, ogroups, cpg, kp * op))
        strides = np.cumprod((1,) + spatial[::-1])[:nd][::-1]
        for corner in itertools.product((0, 1), repeat=nd):
            weight = np.ones(pos.shape[:3] + (op,))
            valid = np.ones(weight.shape, dtype=bool)
            flat = np.zeros(weight.shape, dtype=np.int64)
            for d, bit in enumerate(corner):
                idx = lo[:, :, :, d] + bit
                weight *= frac[:, :, :, d] if bit else 1.0 - frac[:, :, :, d]
                valid &= (idx >= 0) & (idx < spatial[d])
                flat += np.clip(idx, 0, spatial[d] - 1) * strides[d]
            # out-of-range neighbours read zero padding
            vals = np.take_along_axis(data, flat.reshape(n, ogroups, 1, kp * op), axis=3)
            cols += vals * np.where(valid, weight, 0.0).reshape(n, ogroups, 1, kp * op)
        if mask is not None:
            cols *= source_value(mask).reshape(n, ogroups, 1, kp * op)

        cdt = compute_dtype(dtype)
        cols = cols.astype(cdt).reshape(n, groups, (c // groups) * kp, op)
        y = np.matmul(upcast(w).reshape(groups, m // groups, -1), cols).reshape((n, m) + g.out)
        if b is not None:
            y += upcast(b).reshape((m,) + (1,) * nd)
        return round_to(y, dtype)


# ------------------------------------------------------------------ LinearAttention

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
        dtype = _check_same_dtype(self, ctx, query=q, key=k, value=v, decay=decay, beta=beta)
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


# ------------------------------------------------------------------ CausalConvWithState


class CausalConvWithState(CpuKernel):
    """Depthwise causal 1-d convolution over [past_state, input], optional fused SiLU.

    ``present_state`` is the last k-1 positions of that concatenation.
    """

    parity = PRODUCT_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray,
            bias: np.ndarray | None = None, past: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
        activation = ctx.node.attr("activation", "none")
        if activation not in ("none", "silu", "swish"):
            raise self.fail(ctx, f"activation {activation!r} is not 'none', 'silu' or 'swish'")
        dtype = _check_same_dtype(self, ctx, input=x, weight=w, bias=bias, past_state=past)
        if x.ndim != 3:
            raise self.fail(ctx, f"input must be (batch, channels, length), got {x.shape}")
        bsz, c, length = x.shape
        if w.ndim != 3 or w.shape[:2] != (c, 1) or w.shape[2] < 1:
            raise self.fail(ctx, f"weight has shape {w.shape}, expected ({c}, 1, k), k >= 1")
        k = w.shape[2]
        if bias is not None and bias.shape != (c,):
            raise self.fail(ctx, f"bias has shape {bias.shape}, expected ({c},)")
        if past is not None and past.shape != (bsz, c, k - 1):
            raise self.fail(ctx, f"past_state has shape {past.shape}, expected "
                                 f"{(bsz, c, k - 1)}")
        head = np.zeros((bsz, c, k - 1), dtype) if past is None else past
        padded = np.concatenate([head, x], axis=2)
        windows = np.lib.stride_tricks.sliding_window_view(upcast(padded), k, axis=2)
        y = np.einsum("bclk,ck->bcl", windows, upcast(w)[:, 0, :])  # (B, C, L)
        if bias is not None:
            y += upcast(bias)[:, None]
        if activation != "none":
            y64 = y.astype(np.float64)
            out = round_from_float64(y64 * _sigmoid(y64), dtype)
        else:
            out = round_to(y, dtype)
        present = np.ascontiguousarray(padded[:, :, length:])
        return out, present


KERNELS: list[CpuKernel] = [
    DeformConv("DeformConv", since=19),
    TensorScatter("TensorScatter", since=24),
    BitCast("BitCast", since=26),
    CumProd("CumProd", since=26),
    LinearAttention("LinearAttention", since=27),
    CausalConvWithState("CausalConvWithState", since=27),
    SwiGLU("SwiGLU", since=28),
]
