"""com.microsoft::GroupQueryAttention on CUDA (``gqa.cu``), replaying
cpu_reference/contrib_attention.py's GroupQueryAttention for LLM prefill and decode.

Two launches per call, capturable: neither reads seqlens_k or total_sequence_length back
(the kernels read them on the device), allocates or synchronizes.

- ``gqa_kv_<sfx>`` writes present_key / present_value. When present is past's own buffer
  (past_present_share_buffer: :meth:`GroupQueryAttention.aliases_at` makes the presents
  views of the pasts) it writes only the S new rows at each entry's position; otherwise
  it copies past's rows ``[0, P_b)``, appends the new rows and zeroes the rest, as the
  reference does. New keys are rotated (``do_rotary``) on the way.
- ``gqa_attend_<sfx>_d<64|128|256>`` (the smallest head bound >= head size): one block
  per (key-range split, row tile, batch * kv head); a tile holds the query rows of up to
  16 (8 for heads > 128) (query, q head) pairs of one kv head's group, so the group's q
  heads share each K/V load. Q is rotated into shared memory, K/V stream through it, the
  softmax runs online in float32. A decode step (few rows) cuts the key range into
  ``splits`` chunks (flash decoding, :func:`gqa_plan`): partial results go to the step
  workspace and the last block of each tile combines them in split order, so the output
  is the same bytes run to run.
- ``gqa_decode_<sfx>_d<64|128>`` replaces it for a decode step (q_len == 1, head 64 or
  128, at most 8 q heads per kv head, 16-byte aligned presents): one block per (key
  split, batch * kv head) with all the group's q heads, K/V rows loaded once in 16-byte
  vectors, splits sized by :func:`~gqa_plan.decode_splits` (about two blocks per SM).
- ``gqa_decode_short_<sfx>_d<64|128>`` takes those decode steps whose present buffers
  have at most :data:`~gqa_plan.SHORT_MAX_KEYS` rows: one block per (batch, kv head), every
  key's scores in shared memory, no splits to combine (:func:`~gqa_plan.decode_short`).

Covered: separate or packed QKV, past/present (shared buffer or growing), first prompt
(right-padded batches), subsequent prompts, decode, batch entries of different lengths,
``do_rotary`` with ``rotary_interleaved``, position_ids (int32/int64), ``scale``,
``softcap``, ``local_window_size``, ``causal=0``, attention_bias, head_sink and
``smooth_softmax``, present outputs left out (their rows then live in the workspace),
float32 / float16 / bfloat16 with float32 accumulation.

Differences from the reference, on inputs it accepts: in place, a shared buffer's rows after
an entry's new tokens keep what past held there (the reference's fresh present has zeros;
no query reads them, and genai's buffer is zeroed); the update mutates past's buffer, so
GroupQueryAttention must be its last reader (as in every genai model). Inputs it rejects
(seqlens_k out of range, rotary positions past the caches) are clamped, not reported.

Declined (cpu_reference runs the node, and rejects most of these too): inputs 12-16
(quantized KV scales, Q/K norm weights, query_seqlens), ``sliding_window_cache``,
``qk_output``, quantized KV types, mixed dtypes, head sizes above 256, position_ids that do
not broadcast to (batch, seq), grids past CUDA's limits. A present output whose length
depends on a total_sequence_length the plan does not know stays unsized
(:meth:`~GroupQueryAttention.infer_outputs`), so the signature falls back to the host.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import NodeMeta, OpKey, Parity, Support, TensorSpec, WorkspaceRequirement
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    I64,
    PTR,
    CudaKernel,
    dtype_support,
    grid_1d,
    replayed,
    static_shape,
    struct_arg,
    suffix,
)
from onnx_ep.providers.cuda.kernels.fused_gemm import MS_DOMAIN
from onnx_ep.providers.cuda.kernels.gqa_plan import (  # noqa: F401 (re-exported)
    ALIGN,
    DECODE_HEADS,
    DECODE_MAX_REP,
    DECODE_MAX_SPLITS,
    MAX_GRID_YZ,
    MAX_SPLITS,
    SHORT_THREADS,
    TARGET_BLOCKS,
    THREADS,
    VARIANTS,
    WARPS,
    GqaDims,
    GqaPlan,
    _align,
    decode_short,
    decode_splits,
    gqa_dims,
    gqa_plan,
    variant,
)
from onnx_ep.providers.cuda.kernels.known_values import known_ints

#: what the contrib attention kernels are built for (onnxruntime's T)
DTYPES: frozenset[np.dtype] = frozenset(np.dtype(d) for d in (np.float32, np.float16, BF16))
#: the promise per dtype: float32 scores summed in float32 (the reference: float64), an
#: online softmax; narrow types are rounded once at the end (one output ulp of slack)
PARITY: dict[str, Parity] = {
    "float32": Parity.tolerance(rtol=5e-5, atol=2e-5),
    "float16": Parity.tolerance(rtol=2e-3, atol=1e-3),
    "bfloat16": Parity.tolerance(rtol=1.6e-2, atol=4e-3),
}
#: inputs neither the reference nor this kernel implements, by position
UNSUPPORTED = {12: "k_scale", 13: "v_scale", 14: "q_norm_weight", 15: "k_norm_weight",
               16: "query_seqlens"}
#: float inputs that must share query's dtype, by position
SAME_DTYPE = {1: "key", 2: "value", 3: "past_key", 4: "past_value", 7: "cos_cache",
              8: "sin_cache", 10: "attention_bias", 11: "head_sink"}
I32, I64_DT = np.dtype(np.int32), np.dtype(np.int64)


class GqaGeo(ctypes.Structure):
    """``struct GqaGeo`` of gqa.cu (same field order; passed by value)."""

    _fields_ = ([(n, ctypes.c_int64) for n in (
        "batch", "q_len", "q_heads", "kv_heads", "head", "present_len", "past_len",
        "q_sb", "q_ss", "k_sb", "k_ss", "v_sb", "v_ss", "rot_half", "cos_rows",
        "pid_sb", "pid_ss", "bias_sb", "bias_sh", "bias_ss", "bias_cols",
        "tiles", "splits", "write_rows")]
        + [(n, ctypes.c_int32) for n in (
            "total_val", "pid_kind", "interleaved", "causal", "window", "has_sink",
            "in_place", "pad_")]
        + [("scale", ctypes.c_float), ("softcap", ctypes.c_float)])


def broadcast_strides(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...] | None:
    """Element strides of a contiguous ``shape`` read as ``target`` (numpy broadcasting,
    right-aligned; 0 on broadcast dims), or None when it does not broadcast."""
    full = (1,) * (len(target) - len(shape)) + tuple(int(s) for s in shape)
    if len(full) != len(target):
        return None
    strides, step = [], 1
    for n, want in zip(reversed(full), reversed(tuple(target))):
        if n not in (1, want):
            return None
        strides.append(step if n != 1 else 0)
        step *= n
    return tuple(reversed(strides))


def _bias_strides(shape: Sequence[int], batch: int, hq: int, q_len: int
                  ) -> tuple[int, int, int, int] | None:
    """(batch, head, seq strides, columns) of attention_bias (batch or 1, num_heads or 1,
    q_len, total), or None for another shape."""
    if len(shape) != 4 or shape[0] not in (1, batch) or shape[1] not in (1, hq) or (
            shape[2] != q_len):
        return None
    bb, bh, _, cols = (int(s) for s in shape)
    return (bh * q_len * cols if bb > 1 else 0, q_len * cols if bh > 1 else 0, cols, cols)


def _attr(meta: Any, name: str, default: Any) -> Any:
    value = meta.attr(name, default)
    return default if value is None else value


def _scratch_flags(meta: NodeMeta) -> tuple[bool, bool]:
    """Whether present_key / present_value are left out (their rows go to the workspace)."""
    names = tuple(meta.output_names or ())
    return tuple(len(names) <= j or not names[j] for j in (1, 2))  # type: ignore[return-value]


class GroupQueryAttention(CudaKernel):
    """com.microsoft::GroupQueryAttention (inputs query, key, value, past_key, past_value,
    seqlens_k, total_sequence_length, cos_cache, sin_cache, position_ids, attention_bias,
    head_sink; outputs output, present_key, present_value)."""

    source = "gqa"
    #: at a shared buffer's shape the presents are the pasts, appended to in place: the
    #: planner keeps that alias only where this node is the past's sole reader
    writes_in_place = True

    def __init__(self) -> None:
        super().__init__("GroupQueryAttention", parity=PARITY["float32"])
        self.key = OpKey(MS_DOMAIN, "GroupQueryAttention", 1)
        self._shared: dict[tuple[Any, ...], bool] = {}
        self._views: dict[tuple[int, TensorSpec], tuple[Any, Any]] = {}
        self._past_const = False

    def parity_for(self, dtype: Any) -> Parity:
        if dtype is None:
            return self.parity
        return PARITY.get(np.dtype(dtype).name, self.parity)

    def bind(self, meta: NodeMeta) -> GroupQueryAttention:
        bound = super().bind(meta)
        bound._shared, bound._views = {}, {}
        # never update a weight in place
        bound._past_const = 3 in meta.constants or 4 in meta.constants
        return bound  # type: ignore[return-value]

    # ------------------------------------------------------------ placement
    def supports(self, meta: NodeMeta) -> Support:
        spec = list(meta.inputs) + [None] * (17 - len(meta.inputs))
        q = spec[0]
        if q is None:
            return Support.no("query is not a tensor of known dtype")
        s = dtype_support(q.dtype, DTYPES, "query")
        if not s:
            return s
        for i, name in SAME_DTYPE.items():
            if spec[i] is not None and np.dtype(spec[i].dtype) != np.dtype(q.dtype):
                return Support.no(f"{name} is {np.dtype(spec[i].dtype)} but query is "
                                  f"{np.dtype(q.dtype)} (the reference rejects mixed types)")
        for i, name in UNSUPPORTED.items():
            if spec[i] is not None:
                return Support.no(f"input {i} {name} is not supported (nor by cpu_reference)")
        for name in ("sliding_window_cache", "qk_output"):
            if int(_attr(meta, name, 0)):
                return Support.no(f"{name}={meta.attr(name)} is not supported")
        for name in ("k_quant_type", "v_quant_type"):
            if _attr(meta, name, "NONE") not in ("NONE", b"NONE"):
                return Support.no(f"{name}={meta.attr(name)!r}: quantized KV caches")
        hq, hkv = int(_attr(meta, "num_heads", 0)), int(_attr(meta, "kv_num_heads", 0))
        if hq <= 0 or hkv <= 0 or hq % hkv:
            return Support.no(f"num_heads={hq} must be a positive multiple of "
                              f"kv_num_heads={hkv}")
        if len(q.shape) != 3:
            return Support.no(f"query must be 3-D, got rank {len(q.shape)}")
        if (spec[1] is None) != (spec[2] is None) or (spec[3] is None) != (spec[4] is None):
            return Support.no("key/value and past_key/past_value must be given in pairs")
        for i, name in ((5, "seqlens_k"), (6, "total_sequence_length")):
            if spec[i] is None or np.dtype(spec[i].dtype) != I32:
                return Support.no(f"{name} must be an int32 tensor")
        rotary = bool(int(_attr(meta, "do_rotary", 0)))
        if rotary and (spec[7] is None or spec[8] is None or len(spec[7].shape) != 2):
            return Support.no("do_rotary=1 needs 2-D cos_cache and sin_cache")
        if rotary and spec[9] is not None and np.dtype(spec[9].dtype) not in (I32, I64_DT):
            return Support.no(f"position_ids must be int32 or int64, got "
                              f"{np.dtype(spec[9].dtype)}")
        shapes = [static_shape(x) if x is not None else None for x in spec[:12]]
        if any(x is not None and shapes[i] is None for i, x in enumerate(spec[:12])):
            # symbolic dims: the rest is checked at run time, the head size now
            hidden, heads = q.shape[2], hq + (2 * hkv if spec[1] is None else 0)
            if isinstance(hidden, int) and variant(hidden // heads) is None:
                return Support.no(f"head size {hidden // heads} is above {max(VARIANTS)}")
            return Support.YES
        try:
            d = gqa_dims(shapes[0], shapes[1], shapes[2], shapes[3], shapes[4], hq, hkv)
            gqa_plan(d, np.dtype(q.dtype).itemsize, any(_scratch_flags(meta)))
        except ValueError as exc:
            return Support.no(str(exc))
        return self._check_extras(shapes, d, rotary)

    @staticmethod
    def _check_extras(shapes: list[Any], d: GqaDims, rotary: bool) -> Support:
        """Shapes of seqlens_k, the caches, position_ids, attention_bias and head_sink."""
        if shapes[5] != (d.batch,):
            return Support.no(f"seqlens_k must have shape ({d.batch},), got {shapes[5]}")
        if math.prod(shapes[6]) != 1:
            return Support.no(f"total_sequence_length must hold one value, got {shapes[6]}")
        if rotary:
            cos, sin = shapes[7], shapes[8]
            if cos != sin or cos[1] <= 0 or 2 * cos[1] > d.head or cos[0] <= 0:
                return Support.no(f"cos_cache {cos} and sin_cache {sin} must be (max_len, "
                                  f"rotary_dim / 2) with rotary_dim <= {d.head}")
            if shapes[9] is not None and (len(shapes[9]) > 2 or broadcast_strides(
                    shapes[9], (d.batch, d.q_len)) is None):
                return Support.no(f"position_ids {shapes[9]} does not broadcast to "
                                  f"({d.batch}, {d.q_len})")
        if shapes[10] is not None and _bias_strides(shapes[10], d.batch, d.q_heads,
                                                    d.q_len) is None:
            return Support.no(f"attention_bias {shapes[10]} must be (batch or 1, num_heads or "
                              f"1, {d.q_len}, total_sequence_length)")
        if shapes[11] is not None and shapes[11] != (d.q_heads,):
            return Support.no(f"head_sink must have shape ({d.q_heads},), got {shapes[11]}")
        return Support.YES

    # ------------------------------------------------------------ planning
    def _dims(self, meta: Any) -> GqaDims | None:
        spec = list(meta.inputs) + [None] * (5 - len(meta.inputs))
        shapes = [static_shape(x) if x is not None else None for x in spec[:5]]
        if shapes[0] is None or any(x is not None and s is None
                                    for x, s in zip(spec[:5], shapes)):
            return None
        try:
            return gqa_dims(*shapes, int(_attr(meta, "num_heads", 0)),
                            int(_attr(meta, "kv_num_heads", 0)))
        except ValueError:
            return None

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        n = max(len(meta.output_names), 1)
        d = self._dims(meta)
        if d is None:
            return [None] * n
        dtype = meta.inputs[0].dtype
        outs: list[TensorSpec | None] = [
            TensorSpec(dtype, (d.batch, d.q_len, d.q_heads * d.head)), None, None]
        total = known_ints(meta, 6)
        if total is not None and len(total) == 1:
            # the reference: max(total, past length) rows, total at most past + new
            length = max(total[0], d.past_len)
            if d.q_len <= total[0] and length <= d.span:
                outs[1] = outs[2] = TensorSpec(dtype, (d.batch, d.kv_heads, length, d.head))
        return outs[:n] + [None] * (n - len(outs))

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        d = self._dims(meta)
        if d is None:
            return WorkspaceRequirement.NONE
        self._note_sharing(meta)
        try:
            plan = gqa_plan(d, np.dtype(meta.inputs[0].dtype).itemsize,
                            any(_scratch_flags(meta)))
        except ValueError:
            return WorkspaceRequirement.NONE
        return WorkspaceRequirement(plan.workspace_bytes)

    def _note_sharing(self, meta: NodeMeta) -> None:
        """Remember, for this signature's input shapes, whether the planned presents have
        the pasts' shapes (a shared buffer): :meth:`aliases_at` answers from it. Asked by
        the planner before it lays out the arena, with the outputs it sized."""
        spec = list(meta.inputs) + [None] * (5 - len(meta.inputs))
        outs = list(meta.outputs) + [None] * (3 - len(meta.outputs))
        past_k, past_v = spec[3], spec[4]
        shared = (past_k is not None and past_v is not None and not self._past_const
                  and all(o is not None and o.is_static for o in outs[1:3])
                  and outs[1].shape == past_k.shape and outs[2].shape == past_v.shape
                  and not any(_scratch_flags(meta)))
        self._shared[_sharing_key(spec)] = bool(shared)

    def aliases_at(self, inputs: Sequence[TensorSpec | None]) -> dict[int, int] | None:
        """present_key / present_value are views of past_key / past_value (updated in
        place) where this signature plans them with the pasts' shapes."""
        spec = list(inputs) + [None] * (5 - len(inputs))
        if self._past_const or not self._shared.get(_sharing_key(spec)):
            return None
        return {1: 3, 2: 4}

    # ------------------------------------------------------------ execution
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        outs = list(outputs) + [None] * (3 - len(outputs))
        for j, i in ((1, 3), (2, 4)):
            if isinstance(outs[j], TensorSpec):     # a view at this signature (aliases_at)
                outs[j] = outputs[j] = self._view(ctx, inputs[i] if len(inputs) > i else None,
                                                  outs[j])
        self._run(ctx, list(inputs) + [None] * (12 - len(inputs)), outs, workspace)

    def _view(self, ctx: Any, past: Any, spec: TensorSpec) -> Any:
        if past is None or tuple(past.shape) != tuple(spec.shape) or (
                np.dtype(past.dtype) != np.dtype(spec.dtype)):
            raise self.fail(ctx, f"present planned as a view {spec} of past "
                                 f"{None if past is None else (past.dtype, past.shape)}")
        key = (id(past), spec)
        hit = self._views.get(key)
        if hit is not None and hit[0] is past:
            return hit[1]
        view = past.view(spec.dtype, spec.shape)
        if len(self._views) >= 64:
            self._views.clear()
        self._views[key] = (past, view)
        return view

    @replayed
    def _run(self, ctx, inputs, outputs, workspace) -> None:
        q, k, v, pk, pv, seqlens, total, cos, sin, pid, bias, sink = inputs[:12]
        y, ok, ov = outputs[:3]
        node = ctx.node
        try:
            d = gqa_dims(q.shape, _shape(k), _shape(v), _shape(pk), _shape(pv),
                         int(_attr(node, "num_heads", 0)), int(_attr(node, "kv_num_heads", 0)))
            present_len = self._present_len(d, ok, ov)
            plan = gqa_plan(d, q.dtype.itemsize, ok is None or ov is None)
        except ValueError as exc:
            raise self.fail(ctx, str(exc)) from None
        if tuple(seqlens.shape) != (d.batch,) or np.dtype(seqlens.dtype) != I32:
            raise self.fail(ctx, f"seqlens_k must be int32 of shape ({d.batch},), got "
                                 f"{np.dtype(seqlens.dtype)} {tuple(seqlens.shape)}")
        in_place = ok is not None and pk is not None and ok.ptr == pk.ptr
        if in_place != (ov is not None and pv is not None and ov.ptr == pv.ptr):
            raise self.fail(ctx, "present_key and present_value must both share their past "
                                 "buffers, or neither")
        ws = self.workspace_ptr(ctx, workspace, plan.workspace_bytes)
        pk_out = ok.ptr if ok is not None else ws
        pv_out = ov.ptr if ov is not None else ws + _align(plan.scratch_bytes)
        # the decode kernel loads K/V rows in 16-byte vectors
        dec = plan.dec_splits if (pk_out | pv_out) % 16 == 0 else 0
        short = bool(dec) and decode_short(d, present_len)
        n_counters = 0 if short else plan.dec_counters if dec else plan.counters
        counters = ws + plan.counter_offset if n_counters else 0
        g = self._geo(ctx, d, plan, present_len, in_place, inputs)
        if dec:
            g.tiles, g.splits = 1, dec
        total_ptr = getattr(total, "ptr", None) or 0
        sfx, item = suffix(q.dtype), q.dtype.itemsize
        k_ptr = k.ptr if k is not None else q.ptr + d.q_heads * d.head * item
        v_ptr = v.ptr if v is not None else q.ptr + (d.q_heads + d.kv_heads) * d.head * item
        rope = (_ptr(cos), _ptr(sin), _ptr(pid)) if g.rot_half else (0, 0, 0)
        n_write = d.batch * d.kv_heads * g.write_rows * d.head
        self.launch(self.function(f"gqa_kv_{sfx}", q), grid_1d(max(n_write, n_counters)),
                    (256, 1, 1),
                    [(k_ptr, PTR), (v_ptr, PTR), (_ptr(pk), PTR), (_ptr(pv), PTR),
                     (pk_out, PTR), (pv_out, PTR), (seqlens.ptr, PTR), (total_ptr, PTR),
                     *((p, PTR) for p in rope), (counters, PTR), (n_counters, I64),
                     struct_arg(g)], ctx.stream)
        if y is None or d.rows == 0:
            return
        threads = THREADS
        if short:
            name, grid = f"gqa_decode_short_{sfx}_d{d.head}", (1, d.batch * d.kv_heads, 1)
            threads = SHORT_THREADS
        elif dec:
            name, grid = f"gqa_decode_{sfx}_d{d.head}", (dec, d.batch * d.kv_heads, 1)
        else:
            name = f"gqa_attend_{sfx}_d{plan.dmax}"
            grid = (plan.splits, plan.tiles, d.batch * d.kv_heads)
        self.launch(self.function(name, q), grid, (threads, 1, 1),
                    [(q.ptr, PTR), (pk_out, PTR), (pv_out, PTR), (seqlens.ptr, PTR),
                     (total_ptr, PTR), *((p, PTR) for p in rope), (_ptr(bias), PTR),
                     (_ptr(sink), PTR), (y.ptr, PTR), (ws + plan.partial_offset, PTR),
                     (counters, PTR), struct_arg(g)], ctx.stream)

    @staticmethod
    def _present_len(d: GqaDims, ok: Any, ov: Any) -> int:
        """Rows of the present buffers: the outputs' (both alike), else the workspace's."""
        want = None
        for t in (ok, ov):
            if t is None:
                continue
            shape = tuple(t.shape)
            if len(shape) != 4 or shape[:2] != (d.batch, d.kv_heads) or shape[3] != d.head or (
                    want is not None and shape[2] != want):
                raise ValueError(f"present output {shape} is not (batch={d.batch}, "
                                 f"kv_num_heads={d.kv_heads}, length, head={d.head}) like "
                                 f"its sibling")
            want = shape[2]
        if want is None:
            return d.span
        if want < d.q_len or ((ok is None or ov is None) and want > d.span):
            raise ValueError(f"present length {want} does not fit {d.q_len} new tokens over "
                             f"{d.past_len} past ones")
        return want

    def _geo(self, ctx: Any, d: GqaDims, plan: GqaPlan, present_len: int, in_place: bool,
             inputs: Sequence[Any]) -> GqaGeo:
        node = ctx.node
        total, cos, sin, pid, bias, sink = (inputs[i] for i in (6, 7, 8, 9, 10, 11))
        g = GqaGeo()
        g.batch, g.q_len, g.q_heads, g.kv_heads, g.head = (
            d.batch, d.q_len, d.q_heads, d.kv_heads, d.head)
        g.present_len, g.past_len = present_len, d.past_len
        g.q_sb, g.q_ss = d.q_len * d.q_row, d.q_row
        kv_row = d.q_row if d.packed else d.kv_heads * d.head
        g.k_sb = g.v_sb = d.q_len * kv_row
        g.k_ss = g.v_ss = kv_row
        if int(_attr(node, "do_rotary", 0)):
            if cos is None or sin is None or len(cos.shape) != 2 or (
                    tuple(sin.shape) != tuple(cos.shape)) or 2 * int(cos.shape[1]) > d.head:
                raise self.fail(ctx, "do_rotary=1 needs cos_cache/sin_cache (max_len, "
                                     "rotary_dim / 2) with rotary_dim <= head size")
            g.rot_half, g.cos_rows = int(cos.shape[1]), int(cos.shape[0])
            g.interleaved = int(bool(int(_attr(node, "rotary_interleaved", 0))))
            if pid is not None:
                strides = broadcast_strides(pid.shape, (d.batch, d.q_len))
                if strides is None or len(pid.shape) > 2:
                    raise self.fail(ctx, f"position_ids {tuple(pid.shape)} does not "
                                         f"broadcast to ({d.batch}, {d.q_len})")
                g.pid_kind = 1 if np.dtype(pid.dtype) == I32 else 2
                g.pid_sb, g.pid_ss = strides
        if bias is not None:
            strides = _bias_strides(bias.shape, d.batch, d.q_heads, d.q_len)
            if strides is None:
                raise self.fail(ctx, f"attention_bias {tuple(bias.shape)} must be (batch or "
                                     f"1, num_heads or 1, {d.q_len}, total)")
            g.bias_sb, g.bias_sh, g.bias_ss, g.bias_cols = strides
        if sink is not None and tuple(sink.shape) != (d.q_heads,):
            raise self.fail(ctx, f"head_sink must have shape ({d.q_heads},), got "
                                 f"{tuple(sink.shape)}")
        g.tiles, g.splits = plan.tiles, plan.splits
        g.write_rows = d.q_len if in_place else present_len
        if getattr(total, "ptr", None) is None:      # a host value (folded by the plan)
            g.total_val = int(np.asarray(total).reshape(-1)[0])
        g.causal = int(bool(int(_attr(node, "causal", 1))))
        g.window = int(_attr(node, "local_window_size", -1))
        g.has_sink = int(sink is not None or int(_attr(node, "smooth_softmax", 0)) == 1)
        g.in_place = int(in_place)
        g.scale = float(_attr(node, "scale", 0.0)) or 1.0 / math.sqrt(d.head)
        g.softcap = float(_attr(node, "softcap", 0.0))
        return g


def _sharing_key(spec: Sequence[Any]) -> tuple[Any, ...]:
    """What fixes the sharing decision: the shapes of query .. past_value."""
    return tuple(None if s is None else tuple(s.shape) for s in spec[:5])


def _shape(t: Any) -> tuple[int, ...] | None:
    return None if t is None else tuple(t.shape)


def _ptr(t: Any) -> int:
    return t.ptr if t is not None else 0

