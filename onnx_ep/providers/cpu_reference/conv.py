"""Conv (im2col + matmul) and ConvTranspose (matmul + col2im), N-d, grouped, dilated;
DeformConv; CausalConvWithState (ONNX's, and com.microsoft's with dilation and a
channels-last layout).

Numerics: float16/bfloat16 are multiplied and accumulated in float32 and rounded
once; float32/float64 go through numpy's BLAS in their own type, whose summation
order is unspecified, so both ops are promised to a tolerance.

Conv declares its scratch (the padded input and the im2col matrix) through
:meth:`Conv.workspace_requirement`; :func:`conv_plan` is the single size formula
used both there and in execution.

DeformConv samples bilinearly in float64 and contracts with the weights in the
compute type (float32 for float16/bfloat16) through BLAS: a tolerance.
CausalConvWithState sums k products in float32 (float16/bfloat16) or float32
itself; its fused SiLU is evaluated in float64 on that sum and rounded once.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import attrs
import ml_dtypes
import numpy as np

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    WorkspaceRequirement,
    WorkspaceView,
    tensor_nbytes,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference.base import PRODUCT_PARITY, CpuKernel, check_same_dtype
from onnx_ep.providers.cpu_reference.dot import wide
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.fused_gemm import MS_DOMAIN
from onnx_ep.providers.cpu_reference.lowfloat import compute_dtype, round_to, upcast
from onnx_ep.providers.cpu_reference.numerics import round_from_float64, sigmoid
from onnx_ep.providers.shared.windows import (
    WindowGeometry,
    node_error,
    patches,
    window_geometry,
)

#: BLAS reorders the C*K sums; narrow floats accumulate in float32.
CONV_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)
#: bilinear sampling plus a BLAS contraction over C/group * prod(kernel) terms.
DEFORM_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)


def _group_count(meta: NodeMeta, channels: int, w_shape: Sequence[int]) -> int:
    groups = int(meta.attr("group", 1))
    if groups < 1 or channels % groups:
        raise node_error(meta, f"group={groups} must be >= 1 and divide the {channels} "
                               f"input channels")
    return groups


@attrs.frozen
class ConvPlan:
    """Shapes of one Conv call and its scratch layout.

    :ivar padded: the padded input (N, C, *padded spatial), in the compute dtype.
    :ivar cols: the im2col matrix (N, group, C/group * prod(kernel), prod(out)).
    """

    geometry: WindowGeometry
    groups: int
    dtype: np.dtype
    padded: tuple[int, ...]
    cols: tuple[int, ...]

    @property
    def padded_nbytes(self) -> int:
        return tensor_nbytes(self.dtype, self.padded)

    @property
    def nbytes(self) -> int:
        """Exact workspace bytes: padded input followed by the column matrix."""
        return self.padded_nbytes + tensor_nbytes(self.dtype, self.cols)


def conv_plan(meta: NodeMeta, x_shape: Sequence[int], w_shape: Sequence[int],
              dtype: Any) -> ConvPlan:
    """THE Conv geometry and scratch-size formula (plan time and run time both call it).

    :raises NodeError: when the shapes or attributes do not describe a valid Conv.
    """
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    if len(x_shape) < 3 or len(w_shape) != len(x_shape):
        raise node_error(meta, f"X {x_shape} and W {w_shape} must have the same rank >= 3")
    n, c = x_shape[:2]
    groups = _group_count(meta, c, w_shape)
    if w_shape[1] * groups != c or w_shape[0] % groups:
        raise node_error(meta, f"W {w_shape} does not fit X {x_shape} with group={groups}: "
                               f"expected W[1] == C/group and W[0] divisible by group")
    kernel = meta.attr("kernel_shape", None) or w_shape[2:]
    if tuple(kernel) != w_shape[2:]:
        raise node_error(meta, f"kernel_shape {tuple(kernel)} differs from W's spatial "
                               f"shape {w_shape[2:]}")
    g = window_geometry(meta, x_shape[2:], kernel)
    cdt = compute_dtype(np.dtype(dtype))
    padded = (n, c) + g.padded_shape(x_shape[2:])
    cols = (n, groups, (c // groups) * int(np.prod(kernel)), int(np.prod(g.out)))
    return ConvPlan(g, groups, cdt, padded, cols)


class Conv(CpuKernel):
    """Y = W (*) X + B, as one batched matmul over im2col columns per group."""

    parity = CONV_PARITY

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        specs = meta.inputs
        if len(specs) < 2 or specs[0] is None or specs[1] is None:
            return WorkspaceRequirement.NONE
        if not (specs[0].is_static and specs[1].is_static):
            return WorkspaceRequirement.NONE
        try:
            plan = conv_plan(meta, specs[0].shape, specs[1].shape, specs[0].dtype)
        except NodeError:
            # invalid node: execution raises the same error with the run's shapes
            return WorkspaceRequirement.NONE
        return WorkspaceRequirement(plan.nbytes)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        outputs[0] = self.convolve(ctx, x, w, b, workspace)

    def run(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray,
            b: np.ndarray | None = None) -> np.ndarray:
        return self.convolve(ctx, x, w, b, None)

    def convolve(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray,
                 b: np.ndarray | None, workspace: WorkspaceView | None) -> np.ndarray:
        if w.dtype != x.dtype:
            raise self.fail(ctx, f"W is {w.dtype} but X is {x.dtype}; both must match")
        plan = conv_plan(ctx.node, x.shape, w.shape, x.dtype)
        g = plan.geometry
        m = w.shape[0]
        if b is not None and b.shape != (m,):
            raise self.fail(ctx, f"B has shape {b.shape}, expected ({m},)")
        if workspace is None:
            padded = np.empty(plan.padded, dtype=plan.dtype)
            cols = np.empty(plan.cols, dtype=plan.dtype)
        else:
            padded = workspace.array(plan.dtype, plan.padded)
            cols = workspace.array(plan.dtype, plan.cols, offset=plan.padded_nbytes)
        if padded.shape == x.shape:
            padded = upcast(x)  # nothing to pad: im2col reads X itself
        else:
            _zero_border(padded, g.pads_begin, x.shape[2:])
            inner = (slice(None), slice(None)) + tuple(
                slice(p, p + s) for p, s in zip(g.pads_begin, x.shape[2:]))
            padded[inner] = upcast(x)  # decoded by the ONNX rules, not an implicit cast
        n, c = x.shape[:2]
        nd = len(g.kernel)
        # (N, C, *out, *kernel) -> (N, group, C/group, *kernel, *out), copied into cols
        win = patches(padded, g).reshape((n, plan.groups, c // plan.groups) + g.out + g.kernel)
        order = (0, 1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(3, 3 + nd))
        np.copyto(cols.reshape((n, plan.groups, c // plan.groups) + g.kernel + g.out),
                  win.transpose(order))
        wm = upcast(w).reshape(plan.groups, m // plan.groups, -1)
        # float64 accumulation: bytes independent of the BLAS thread count (dot.py)
        y = np.matmul(wide(wm), wide(cols)).reshape((n, m) + g.out)
        if b is not None:
            y += upcast(b).reshape((m,) + (1,) * nd)
        return round_to(y, x.dtype)


def _zero_border(padded: np.ndarray, begin: Sequence[int], inner: Sequence[int]) -> None:
    """Zero the padding of ``padded`` around its (N, C, *inner) interior, not the interior
    itself (the caller overwrites that)."""
    for ax, (b, size) in enumerate(zip(begin, inner)):
        lead = (slice(None),) * (2 + ax)
        padded[lead + (slice(0, b),)] = 0
        padded[lead + (slice(b + size, None),)] = 0


class ConvTranspose(CpuKernel):
    """Gradient of Conv w.r.t. its input: matmul to columns, then col2im scatter-add."""

    parity = CONV_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray,
            b: np.ndarray | None = None) -> np.ndarray:
        meta = ctx.node
        if x.ndim < 3 or w.ndim != x.ndim:
            raise self.fail(ctx, f"X {x.shape} and W {w.shape} must have the same rank >= 3")
        n, c = x.shape[:2]
        nd = x.ndim - 2
        groups = _group_count(meta, c, w.shape)
        if w.shape[0] != c:
            raise self.fail(ctx, f"W {w.shape} must have W[0] == C = {c}")
        mg = w.shape[1]
        kernel = tuple(meta.attr("kernel_shape", None) or w.shape[2:])
        if kernel != w.shape[2:]:
            raise self.fail(ctx, f"kernel_shape {kernel} differs from W's spatial shape "
                                 f"{w.shape[2:]}")
        strides = self._ints(ctx, "strides", [1] * nd, nd)
        dil = self._ints(ctx, "dilations", [1] * nd, nd)
        out_pad = self._ints(ctx, "output_padding", [0] * nd, nd)
        ek = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
        spatial = x.shape[2:]
        # size of the full (uncropped) result along each axis
        full = [s * (i - 1) + op + e for s, i, op, e in zip(strides, spatial, out_pad, ek)]
        begin, out = self._crop(ctx, full, spatial, strides, nd)

        # columns: for every input position, its (M/group * prod(kernel)) contributions
        xg = upcast(x).reshape(n, groups, c // groups, -1)
        wg = upcast(w).reshape(groups, c // groups, mg * int(np.prod(kernel)))
        cols = np.matmul(wide(wg.transpose(0, 2, 1)), wide(xg))  # (N, group, Mg*K, P_in)
        cols = cols.reshape((n, groups * mg) + kernel + tuple(spatial))
        # accumulate into a canvas that covers both the full result and the crop
        lo = [min(0, bg) for bg in begin]
        hi = [max(f, bg + o) for f, bg, o in zip(full, begin, out)]
        canvas = np.zeros((n, groups * mg) + tuple(h - lo_ for h, lo_ in zip(hi, lo)),
                          dtype=cols.dtype)
        # loop over kernel taps (prod(kernel) iterations); each adds a whole strided slab
        for tap in np.ndindex(*kernel):
            dst = tuple(slice(t * d - l, t * d - l + (i - 1) * s + 1, s)
                        for t, d, l, i, s in zip(tap, dil, lo, spatial, strides))
            canvas[(slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + tap]
        crop = tuple(slice(bg - l, bg - l + o) for bg, l, o in zip(begin, lo, out))
        y = canvas[(slice(None), slice(None)) + crop]
        if b is not None:
            if b.shape != (groups * mg,):
                raise self.fail(ctx, f"B has shape {b.shape}, expected ({groups * mg},)")
            y = y + upcast(b).reshape((-1,) + (1,) * nd)
        return round_to(y, x.dtype)

    def _ints(self, ctx: ExecutionContext, name: str, default: list[int],
              n: int) -> list[int]:
        value = ctx.node.attr(name, None)
        value = list(default) if value is None else [int(v) for v in value]
        if len(value) != n:
            raise self.fail(ctx, f"attribute '{name}' has {len(value)} values, expected {n}")
        return value

    def _crop(self, ctx: ExecutionContext, full: list[int], spatial: Sequence[int],
              strides: list[int], nd: int) -> tuple[list[int], list[int]]:
        """Start of the output inside the full result, and the output sizes."""
        auto_pad = ctx.node.attr("auto_pad", "NOTSET") or "NOTSET"
        shape = ctx.node.attr("output_shape", None)
        if shape is not None:
            shape = [int(v) for v in shape]
            if len(shape) == nd + 2:
                shape = shape[2:]
            if len(shape) != nd:
                raise self.fail(ctx, f"output_shape {shape} must have {nd} spatial values")
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            shape = [i * s for i, s in zip(spatial, strides)]
        if shape is not None:
            total = [f - o for f, o in zip(full, shape)]
            if auto_pad == "SAME_UPPER":
                begin = [t // 2 for t in total]
            else:
                begin = [t - t // 2 for t in total]
            return begin, shape
        if auto_pad == "VALID":
            return [0] * nd, list(full)
        if auto_pad != "NOTSET":
            raise self.fail(ctx, f"auto_pad {auto_pad!r} is not one of NOTSET, SAME_UPPER, "
                                 f"SAME_LOWER, VALID")
        pads = self._ints(ctx, "pads", [0] * (2 * nd), 2 * nd)
        out = [f - pads[a] - pads[nd + a] for a, f in enumerate(full)]
        if min(out) < 1:
            raise self.fail(ctx, f"pads {pads} leave no output from a full result of {full}")
        return pads[:nd], out


# ---------------------------------------------------------------- DeformConv

class DeformConv(CpuKernel):
    """N-d deformable convolution (v1/v2): bilinear samples at offset kernel taps,
    weighted by ``mask``, contracted with W per group (im2col + matmul)."""

    parity = DEFORM_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray, offset: np.ndarray,
            b: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        dtype = check_same_dtype(self, ctx, X=x, W=w, offset=offset, B=b, mask=mask)
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


# ---------------------------------------------------------------- CausalConvWithState

class CausalConvWithState(CpuKernel):
    """Depthwise causal 1-d convolution over [past_state, input], optional fused SiLU.

    ``present_state`` is the last k-1 positions of that concatenation.
    """

    parity = PRODUCT_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray,
            bias: np.ndarray | None = None, past: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
        return self.conv(ctx, x, w, bias, past, _activation(self, ctx), 1)

    def conv(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
             past: np.ndarray | None, activation: str, dilation: int
             ) -> tuple[np.ndarray, np.ndarray]:
        """(output, present_state) of channels-first ``x``; tap j of output t reads position
        t - (k - 1 - j) * dilation of [past_state, x], whose last (k - 1) * dilation
        positions are the present state."""
        dtype = check_same_dtype(self, ctx, input=x, weight=w, bias=bias, past_state=past)
        if x.ndim != 3:
            raise self.fail(ctx, f"input must be (batch, channels, length), got {x.shape}")
        bsz, c, length = x.shape
        if w.ndim != 3 or w.shape[:2] != (c, 1) or w.shape[2] < 1:
            raise self.fail(ctx, f"weight has shape {w.shape}, expected ({c}, 1, k), k >= 1")
        k = w.shape[2]
        span = (k - 1) * dilation
        if bias is not None and bias.shape != (c,):
            raise self.fail(ctx, f"bias has shape {bias.shape}, expected ({c},)")
        if past is not None and past.shape != (bsz, c, span):
            raise self.fail(ctx, f"past_state has shape {past.shape}, expected "
                                 f"{(bsz, c, span)}")
        head = np.zeros((bsz, c, span), dtype) if past is None else past
        padded = np.concatenate([head, x], axis=2)
        windows = np.lib.stride_tricks.sliding_window_view(upcast(padded), span + 1, axis=2)
        taps = windows[..., ::dilation]                                   # (B, C, L, k)
        y = np.einsum("bclk,ck->bcl", taps, upcast(w)[:, 0, :])           # (B, C, L)
        if bias is not None:
            y += upcast(bias)[:, None]
        if activation != "none":
            y64 = y.astype(np.float64)
            out = round_from_float64(y64 * sigmoid(y64), dtype)
        else:
            out = round_to(y, dtype)
        present = np.ascontiguousarray(padded[:, :, length:])
        return out, present


def _activation(kernel: CpuKernel, ctx: ExecutionContext) -> str:
    activation = ctx.node.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise kernel.fail(ctx, f"activation {activation!r} is not 'none', 'silu' or 'swish'")
    return activation


#: com.microsoft::CausalConvWithState attributes of onnxruntime's CUDA-only extended path,
#: with the value that leaves it off
MS_CONV_CUDA_ONLY = {"state_update_capacity": 0, "state_length": 0,
                     "input_channel_offset": 0, "input_channels": 0}


class MsCausalConvWithState(CausalConvWithState):
    """com.microsoft::CausalConvWithState (onnxruntime's contrib op, which onnxruntime-genai's
    builder writes for LFM2's convolution layers): the same convolution with ``dilation``
    and a channels-last layout (``channels_last`` 1: activations ``(batch, length, d...)``,
    states ``(batch, state_length, d...)``, channels = prod(d)).

    Declined with a :exc:`NodeError` naming the attribute: ``ndim`` 2 or 3, ``state_window``
    > 0 (per-position states), and the CUDA-only extended attributes
    (:data:`MS_CONV_CUDA_ONLY`, ``state_channels_last`` other than -1 or the layout's own,
    the ``state_update`` output).
    """

    def __init__(self) -> None:
        super().__init__("CausalConvWithState", since=1, domain=MS_DOMAIN,
                         dtypes=(np.float32, np.float16, ml_dtypes.bfloat16))

    def run(self, ctx: ExecutionContext, x: np.ndarray, w: np.ndarray,
            bias: np.ndarray | None = None, past: np.ndarray | None = None
            ) -> tuple[np.ndarray, ...]:
        node = ctx.node
        ndim, dilation = int(node.attr("ndim", 1)), int(node.attr("dilation", 1))
        channels_last = int(node.attr("channels_last", 0))
        if ndim != 1:
            raise self.fail(ctx, f"ndim={ndim}: only the 1-d convolution is implemented")
        if dilation < 1:
            raise self.fail(ctx, f"dilation={dilation} must be >= 1")
        if channels_last not in (0, 1):
            raise self.fail(ctx, f"channels_last={channels_last} must be 0 or 1")
        if int(node.attr("state_window", 0)) != 0:
            raise self.fail(ctx, f"state_window={node.attr('state_window')}: per-position "
                                 f"states are not implemented (0 is)")
        for name, off in MS_CONV_CUDA_ONLY.items():
            if int(node.attr(name, off)) != off:
                raise self.fail(ctx, f"{name}={node.attr(name)} belongs to onnxruntime's "
                                     f"CUDA-only extended path, which is not implemented")
        if int(node.attr("state_channels_last", -1)) not in (-1, channels_last):
            raise self.fail(ctx, f"state_channels_last={node.attr('state_channels_last')} "
                                 f"differs from channels_last={channels_last}: not "
                                 f"implemented")
        if len(node.output_names) > 2 and node.output_names[2]:
            raise self.fail(ctx, "the state_update output (CUDA-only) is not implemented")
        activation = _activation(self, ctx)
        if not channels_last:
            return self.conv(ctx, x, w, bias, past, activation, dilation)
        if x.ndim < 3:
            raise self.fail(ctx, f"input must be (batch, length, d...), got {x.shape}")
        bsz, length, *dims = x.shape
        c = int(np.prod(dims))
        first = np.ascontiguousarray(x.reshape(bsz, length, c).transpose(0, 2, 1))
        if past is not None:
            if past.ndim != x.ndim or past.shape[0] != bsz or tuple(past.shape[2:]) != \
                    tuple(dims):
                raise self.fail(ctx, f"past_state has shape {past.shape}, expected "
                                     f"({bsz}, state_length, {', '.join(map(str, dims))})")
            past = np.ascontiguousarray(past.reshape(bsz, -1, c).transpose(0, 2, 1))
        out, present = self.conv(ctx, first, w, bias, past, activation, dilation)
        return (np.ascontiguousarray(out.transpose(0, 2, 1)).reshape(x.shape),
                np.ascontiguousarray(present.transpose(0, 2, 1)).reshape(
                    bsz, present.shape[2], *dims))


KERNELS: list[CpuKernel] = [
    Conv("Conv", since=1),
    ConvTranspose("ConvTranspose", since=1),
    DeformConv("DeformConv", since=19),
    CausalConvWithState("CausalConvWithState", since=27),
    MsCausalConvWithState(),
]
