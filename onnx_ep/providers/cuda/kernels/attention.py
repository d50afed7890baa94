"""Attention (opset 23; nonpad_kv_seqlen from 24; sliding windows from 25) on CUDA.

``attention.cu`` runs one thread block per (batch, query head, query row) and replays
cpu_reference/attention.py's operations in its compute type (float32; float64 for float64
inputs or ``softmax_precision=DOUBLE``; float16 for float16 inputs unless
``softmax_precision`` asks for more), rounding where the reference rounds. Covered: 4-D
and 3-D inputs (``q_num_heads``/``kv_num_heads``), grouped-query heads, ``scale``,
``softcap``, ``is_causal``, bool or float masks broadcast to (batch, heads, q, kv) and
shorter than the keys (missing columns are masked), past_key/past_value concatenated into
present_key/present_value, the 4th output for ``qk_matmul_output_mode`` 0-3,
``nonpad_kv_seqlen`` (read on the device) and ``left/right_window_size``.

Declined (cpu_reference runs the node): Q/K/V/past dtypes that differ, other dtypes,
``nonpad_kv_seqlen`` together with past_key (the reference rejects it too), an unknown
``qk_matmul_output_mode`` with the 4th output requested, a Q head size whose row does not
fit shared memory, no keys at all.

Parity (:data:`PARITY`): a tolerance. float32 sums in float64 like the reference's GEMM
(which is float32 GEMV when a product has one row, e.g. decoding); float16 follows the
reference's float16 steps; bfloat16 rounds P to bfloat16 before P @ V as the reference
does, so a probability or the output landing on the other side of a bfloat16 rounding
boundary is the dominant error.

The step workspace holds the scores when a row of them does not fit in shared memory:
:func:`attention_plan` is the one sizing formula for planning and execution.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.kernel import NodeMeta, Parity, Support, TensorSpec, WorkspaceRequirement
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    BLOCK,
    FLOATS,
    I64,
    PTR,
    CudaKernel,
    grid_1d,
    optional_input,
    static_shape,
    struct_arg,
    suffix,
)

#: the promise per input dtype
PARITY: dict[str, Parity] = {
    "float32": Parity.tolerance(rtol=1e-5, atol=1e-5),
    "float64": Parity.tolerance(rtol=1e-10, atol=1e-12),
    "float16": Parity.tolerance(rtol=2e-3, atol=1e-3),
    "bfloat16": Parity.tolerance(rtol=1.6e-2, atol=4e-3),
}

ATT_BLOCK = 128             #: threads per row block (ATT_BLOCK in attention.cu)
MAX_ROW_BLOCKS = 4096       #: blocks in the grid; each loops over rows
#: dynamic shared memory a block may use (48 KiB default minus the 1 KiB reduction scratch
#: and headroom); a row of scores beyond it goes to the step workspace
SHARED_BUDGET = 44 * 1024

_DOUBLE = 11     # onnx.TensorProto.DOUBLE
_FLOAT16 = 10    # onnx.TensorProto.FLOAT16

#: mask dtype -> mask_kind of attention.cu
_MASK_KIND: dict[np.dtype, int] = {
    np.dtype(np.bool_): 1, np.dtype(np.float32): 2, np.dtype(np.float16): 3,
    np.dtype(np.float64): 5,
}
if BF16 is not None:
    _MASK_KIND[BF16] = 4


def compute_dtype(q_dtype: Any, softmax_precision: int | None) -> np.dtype:
    """The dtype the reference's scores matrix has (cpu_reference attention._compute_dtype)."""
    dt = np.dtype(q_dtype)
    if dt == np.float64 or softmax_precision == _DOUBLE:
        return np.dtype(np.float64)
    if dt == np.float16 and softmax_precision in (None, _FLOAT16):
        return np.dtype(np.float16)
    return np.dtype(np.float32)


def _comp_bits(q_dtype: Any, softmax_precision: int | None) -> int:
    return compute_dtype(q_dtype, softmax_precision).itemsize * 8


@attrs.frozen
class AttnDims:
    """Sizes of one Attention call (3-D inputs already split into heads)."""

    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    past_len: int
    head: int
    v_head: int
    three_d: bool

    @property
    def total(self) -> int:
        return self.past_len + self.kv_len

    @property
    def rows(self) -> int:
        return self.batch * self.q_heads * self.q_len


def attention_dims(q: Sequence[int], k: Sequence[int], v: Sequence[int],
                   past: Sequence[int] | None, attr: Any) -> AttnDims:
    """Sizes from static shapes; :raises ValueError: naming what is inconsistent."""
    if not (len(q) == len(k) == len(v)) or len(q) not in (3, 4):
        raise ValueError(f"Q, K, V must all be 3-D or all 4-D, got ranks {len(q)}, "
                         f"{len(k)}, {len(v)}")
    if len(q) == 3:
        hq, hkv = int(attr.get("q_num_heads") or 0), int(attr.get("kv_num_heads") or 0)
        if hq <= 0 or hkv <= 0 or q[2] % hq or k[2] % hkv or v[2] % hkv:
            raise ValueError(f"3-D inputs need q_num_heads/kv_num_heads dividing the hidden "
                             f"sizes, got {hq}/{hkv} for {tuple(q)}, {tuple(k)}, {tuple(v)}")
        d = AttnDims(q[0], hq, hkv, q[1], k[1], 0, q[2] // hq, v[2] // hkv, True)
        kb, vb = k[0], v[0]
        vlen = v[1]
        if k[2] // hkv != d.head:
            raise ValueError(f"K's head size {k[2] // hkv} differs from Q's {d.head}")
    else:
        d = AttnDims(q[0], q[1], k[1], q[2], k[2], 0, q[3], v[3], False)
        kb, vb = k[0], v[0]
        vlen = v[2]
        if v[1] != k[1] or k[3] != q[3]:
            raise ValueError(f"K and V need the same heads and K the head size of Q: Q "
                             f"{tuple(q)}, K {tuple(k)}, V {tuple(v)}")
    if d.kv_heads <= 0 or d.q_heads % d.kv_heads:
        raise ValueError(f"q heads {d.q_heads} must be a multiple of kv heads {d.kv_heads}")
    if kb != d.batch or vb != d.batch or vlen != d.kv_len:
        raise ValueError(f"batch and key length of Q {tuple(q)}, K {tuple(k)}, V {tuple(v)} "
                         f"disagree")
    if past is not None:
        if (len(past) != 4 or past[0] != d.batch or past[1] != d.kv_heads
                or past[3] != d.head):
            raise ValueError(f"past_key {tuple(past)} must be (batch {d.batch}, kv heads "
                             f"{d.kv_heads}, past, head {d.head})")
        d = attrs.evolve(d, past_len=int(past[2]))
    return d


@attrs.frozen
class AttnPlan:
    """Launch geometry and scratch of one call: THE sizing formula (plan and execute)."""

    grid: int
    shared_bytes: int
    workspace_bytes: int      #: 0: scores in shared memory


def attention_plan(dims: AttnDims, compute: np.dtype) -> AttnPlan:
    """Blocks, dynamic shared bytes (Q row, and the scores row when it fits) and workspace.

    :raises ValueError: the Q row alone does not fit in shared memory.
    """
    item = 8 if np.dtype(compute) == np.float64 else 4
    q_bytes = dims.head * item
    if q_bytes > SHARED_BUDGET:
        raise ValueError(f"a Q head of {dims.head} elements does not fit the "
                         f"{SHARED_BUDGET}-byte shared-memory budget")
    grid = max(1, min(dims.rows, MAX_ROW_BLOCKS))
    row_bytes = dims.total * item
    if q_bytes + row_bytes <= SHARED_BUDGET:
        return AttnPlan(grid, q_bytes + row_bytes, 0)
    return AttnPlan(grid, q_bytes, grid * row_bytes)


class AttnGeo(ctypes.Structure):
    """``struct AttnGeo`` of attention.cu (same field order; passed by value)."""

    _fields_ = ([(n, ctypes.c_int64) for n in (
        "batch", "q_heads", "kv_heads", "q_len", "kv_len", "past_len", "head", "v_head",
        "q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "v_sb", "v_sh", "v_ss",
        "y_sb", "y_sh", "y_ss", "m_sb", "m_sh", "m_sq", "mask_k", "left", "right")]
        + [("root", ctypes.c_double), ("softcap", ctypes.c_double)]
        + [(n, ctypes.c_int32) for n in ("is_causal", "mask_kind", "qk_mode", "pad_")])


def layout_strides(three_d: bool, heads: int, seq: int, dim: int) -> tuple[int, int, int]:
    """Element strides of (batch, head, seq) in a (b, h, s, d) or (b, s, h * d) tensor."""
    if three_d:
        return seq * heads * dim, dim, heads * dim
    return heads * seq * dim, seq * dim, dim


def mask_strides(shape: Sequence[int], dims: AttnDims) -> tuple[int, int, int]:
    """Strides of (batch, q head, q row) of a mask broadcast to (batch, heads, q, kv).

    :raises ValueError: the mask does not broadcast (its last dim may be shorter than
        the keys: the missing columns are masked, as in the reference).
    """
    if not 1 <= len(shape) <= 4:
        raise ValueError(f"attn_mask must have rank 1 to 4, got shape {tuple(shape)}")
    if shape[-1] > dims.total:
        raise ValueError(f"attn_mask has {shape[-1]} columns but there are only "
                         f"{dims.total} keys")
    full = (1,) * (4 - len(shape)) + tuple(int(s) for s in shape)
    target = (dims.batch, dims.q_heads, dims.q_len)
    strides = []
    step = full[3]
    for axis in (2, 1, 0):
        n = full[axis]
        if n not in (1, target[axis]):
            raise ValueError(f"attn_mask {tuple(shape)} does not broadcast to (batch "
                             f"{dims.batch}, heads {dims.q_heads}, q {dims.q_len}, kv)")
        strides.append(0 if n == 1 else step)
        step *= n
    return strides[2], strides[1], strides[0]


def _wants_qk(names: Sequence[str]) -> bool:
    return len(names) > 3 and bool(names[3])


def _add(a: Any, b: Any) -> Any:
    return a + b if isinstance(a, int) and isinstance(b, int) else None


class Attention(CudaKernel):
    """ai.onnx Attention, opset 23 on (inputs Q, K, V, attn_mask, past_key, past_value,
    nonpad_kv_seqlen; outputs Y, present_key, present_value, qk_matmul_output)."""

    source = "attention"

    def __init__(self) -> None:
        super().__init__("Attention", since=23, parity=PARITY["float32"])

    def parity_for(self, dtype: Any) -> Parity:
        if dtype is None:
            return self.parity
        return PARITY.get(np.dtype(dtype).name, self.parity)

    # ------------------------------------------------------------ placement
    def supports(self, meta: NodeMeta) -> Support:
        q, k, v = (optional_input(meta.inputs, i) for i in (0, 1, 2))
        if q is None or k is None or v is None:
            return Support.no("Q, K and V are required")
        if np.dtype(q.dtype) not in FLOATS:
            return Support.no(f"Q dtype {np.dtype(q.dtype)} is not float32, float16, "
                              f"bfloat16 or float64")
        for i, name in ((1, "K"), (2, "V"), (4, "past_key"), (5, "past_value")):
            spec = optional_input(meta.inputs, i)
            if spec is not None and np.dtype(spec.dtype) != np.dtype(q.dtype):
                return Support.no(f"{name} is {np.dtype(spec.dtype)} but Q is "
                                  f"{np.dtype(q.dtype)}")
        mask, pk, pv, nonpad = (optional_input(meta.inputs, i) for i in (3, 4, 5, 6))
        if mask is not None and np.dtype(mask.dtype) not in _MASK_KIND:
            return Support.no(f"attn_mask dtype {np.dtype(mask.dtype)} is not bool or a float")
        if (pk is None) != (pv is None):
            return Support.no("past_key and past_value must be given together")
        if nonpad is not None:
            if pk is not None:
                return Support.no("nonpad_kv_seqlen with past_key/past_value (the reference "
                                  "rejects it too)")
            if np.dtype(nonpad.dtype) != np.int64:
                return Support.no(f"nonpad_kv_seqlen must be int64, got {np.dtype(nonpad.dtype)}")
        if _wants_qk(meta.output_names) and int(meta.attr("qk_matmul_output_mode", 0)) not in (
                0, 1, 2, 3):
            return Support.no(f"qk_matmul_output_mode={meta.attr('qk_matmul_output_mode')} "
                              f"is not 0-3")
        if len(q.shape) not in (3, 4) or not len(q.shape) == len(k.shape) == len(v.shape):
            return Support.no(f"Q, K, V must all be 3-D or all 4-D, got ranks {len(q.shape)}, "
                              f"{len(k.shape)}, {len(v.shape)}")
        if len(q.shape) == 3 and not (meta.attr("q_num_heads") and meta.attr("kv_num_heads")):
            return Support.no("3-D inputs need q_num_heads and kv_num_heads")
        shapes = [static_shape(s) for s in (q, k, v)]
        if all(s is not None for s in shapes):
            past = static_shape(pk) if pk is not None else None
            if pk is not None and past is None:
                return Support.YES   # decided at run time (execute raises on bad shapes)
            try:
                dims = attention_dims(*shapes, past, meta.attrs)
                if dims.total == 0:
                    return Support.no("no keys (kv length 0)")
                if pv is not None and static_shape(pv) is not None:
                    pvs = static_shape(pv)
                    if pvs[:3] != (dims.batch, dims.kv_heads, dims.past_len) or (
                            pvs[3] != dims.v_head):
                        raise ValueError(f"past_value {pvs} does not match V")
                if mask is not None and static_shape(mask) is not None:
                    mask_strides(static_shape(mask), dims)
                attention_plan(dims, compute_dtype(q.dtype, meta.attr("softmax_precision")))
            except ValueError as exc:
                return Support.no(str(exc))
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        q, k, v, pk = (optional_input(meta.inputs, i) for i in (0, 1, 2, 4))
        n = max(len(meta.output_names), 1)
        if q is None or k is None or v is None or len(q.shape) not in (3, 4):
            return [None] * n
        if len(q.shape) == 3:
            hq, hkv = meta.attr("q_num_heads"), meta.attr("kv_num_heads")
            div = lambda a, h: a // h if isinstance(a, int) and h else None  # noqa: E731
            batch, q_len, kv_len = q.shape[0], q.shape[1], k.shape[1]
            head, v_head = div(q.shape[2], hq), div(v.shape[2], hkv)
            y = TensorSpec(q.dtype, (batch, q_len, _mul(hq, v_head)))
        else:
            batch, hq, q_len, head = q.shape
            hkv, kv_len, v_head = k.shape[1], k.shape[2], v.shape[3]
            y = TensorSpec(q.dtype, (batch, hq, q_len, v_head))
        total = _add(kv_len, pk.shape[2]) if pk is not None and len(pk.shape) == 4 else kv_len
        outs = [y, TensorSpec(q.dtype, (batch, hkv, total, head)),
                TensorSpec(q.dtype, (batch, hkv, total, v_head)),
                TensorSpec(q.dtype, (batch, hq, q_len, total))]
        return outs[:n] + [None] * (n - len(outs))

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        shapes = [static_shape(optional_input(meta.inputs, i)) for i in (0, 1, 2)]
        pk = optional_input(meta.inputs, 4)
        past = static_shape(pk) if pk is not None else None
        if any(s is None for s in shapes) or (pk is not None and past is None):
            return WorkspaceRequirement.NONE
        try:
            dims = attention_dims(*shapes, past, meta.attrs)
            plan = attention_plan(dims, compute_dtype(meta.inputs[0].dtype,
                                                      meta.attr("softmax_precision")))
        except ValueError:
            return WorkspaceRequirement.NONE
        return WorkspaceRequirement(plan.workspace_bytes)

    # ------------------------------------------------------------ execution
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        node = ctx.node
        q, k, v, mask, pk, pv, nonpad = (list(inputs) + [None] * 7)[:7]
        y, present_k, present_v, qk = (list(outputs) + [None] * 4)[:4]
        try:
            dims = attention_dims(q.shape, k.shape, v.shape,
                                  pk.shape if pk is not None else None, node.attrs)
            if pv is not None and tuple(pv.shape) != (dims.batch, dims.kv_heads,
                                                       dims.past_len, dims.v_head):
                raise ValueError(f"past_value {tuple(pv.shape)} does not match V")
            m_strides = mask_strides(mask.shape, dims) if mask is not None else (0, 0, 0)
            compute = compute_dtype(q.dtype, node.attr("softmax_precision"))
            plan = attention_plan(dims, compute)
        except ValueError as exc:
            raise self.fail(ctx, str(exc)) from None
        if dims.total == 0:
            raise self.fail(ctx, "no keys (kv length 0)")
        if nonpad is not None and tuple(nonpad.shape) != (dims.batch,):
            raise self.fail(ctx, f"nonpad_kv_seqlen must have shape ({dims.batch},), got "
                                 f"{tuple(nonpad.shape)}")
        expect = self._expected(dims, q.dtype)
        for j, t in enumerate((y, present_k, present_v, qk)):
            if t is not None and tuple(t.shape) != expect[j]:
                raise self.fail(ctx, f"output {j} is planned as {tuple(t.shape)}, expected "
                                     f"{expect[j]}")
        sfx = suffix(q.dtype)
        for present, past, new, dim in ((present_k, pk, k, dims.head),
                                        (present_v, pv, v, dims.v_head)):
            if present is None or present.size == 0:
                continue
            nsb, nsh, nss = layout_strides(dims.three_d, dims.kv_heads, dims.kv_len, dim)
            self.launch(self.function(f"attention_present_{sfx}", q), grid_1d(present.size),
                        (BLOCK, 1, 1),
                        [(past.ptr if past is not None else 0, PTR), (new.ptr, PTR),
                         (present.ptr, PTR), (dims.batch, I64), (dims.kv_heads, I64),
                         (dims.past_len, I64), (dims.kv_len, I64), (dim, I64), (nsb, I64),
                         (nsh, I64), (nss, I64)], ctx.stream)
        if y is None or dims.rows == 0:
            return
        ws_ptr = self.workspace_ptr(ctx, workspace, plan.workspace_bytes)
        g = self._geo(node, dims, q.dtype, mask, m_strides, qk is not None)
        bits = compute.itemsize * 8
        self.launch(self.function(f"attention_{sfx}_c{bits}", q), (plan.grid, 1, 1),
                    (ATT_BLOCK, 1, 1), [(q.ptr, PTR), (k.ptr, PTR), (v.ptr, PTR),
                     (pk.ptr if pk is not None else 0, PTR), (pv.ptr if pv is not None else 0, PTR),
                     (mask.ptr if mask is not None else 0, PTR),
                     (nonpad.ptr if nonpad is not None else 0, PTR), (y.ptr, PTR),
                     (qk.ptr if qk is not None else 0, PTR), (ws_ptr, PTR), struct_arg(g)],
                    ctx.stream, shared_bytes=plan.shared_bytes)

    @staticmethod
    def _expected(d: AttnDims, dtype: Any) -> list[tuple[int, ...]]:
        y = ((d.batch, d.q_len, d.q_heads * d.v_head) if d.three_d
             else (d.batch, d.q_heads, d.q_len, d.v_head))
        return [y, (d.batch, d.kv_heads, d.total, d.head),
                (d.batch, d.kv_heads, d.total, d.v_head), (d.batch, d.q_heads, d.q_len, d.total)]

    @staticmethod
    def _geo(node: Any, d: AttnDims, q_dtype: Any, mask: Any,
             m_strides: tuple[int, int, int], with_qk: bool) -> AttnGeo:
        scale = node.attr("scale")
        scale = 1.0 / np.sqrt(d.head) if scale is None else float(scale)
        qdt = np.dtype(q_dtype)
        g = AttnGeo()
        for name in ("batch", "q_heads", "kv_heads", "q_len", "kv_len", "past_len", "head",
                     "v_head"):
            setattr(g, name, int(getattr(d, name)))
        g.q_sb, g.q_sh, g.q_ss = layout_strides(d.three_d, d.q_heads, d.q_len, d.head)
        g.k_sb, g.k_sh, g.k_ss = layout_strides(d.three_d, d.kv_heads, d.kv_len, d.head)
        g.v_sb, g.v_sh, g.v_ss = layout_strides(d.three_d, d.kv_heads, d.kv_len, d.v_head)
        g.y_sb, g.y_sh, g.y_ss = layout_strides(d.three_d, d.q_heads, d.q_len, d.v_head)
        g.m_sb, g.m_sh, g.m_sq = m_strides
        g.mask_k = int(mask.shape[-1]) if mask is not None else 0
        g.left = int(node.attr("left_window_size", -1))
        g.right = int(node.attr("right_window_size", -1))
        # sqrt(scale) in float64, rounded to Q's dtype: the reference's ``root``
        g.root = float(qdt.type(np.sqrt(scale)))
        g.softcap = float(node.attr("softcap", 0.0) or 0.0)
        g.is_causal = int(bool(node.attr("is_causal", 0)))
        g.mask_kind = _MASK_KIND[np.dtype(mask.dtype)] if mask is not None else 0
        g.qk_mode = int(node.attr("qk_matmul_output_mode", 0)) if with_qk else -1
        return g


def _mul(a: Any, b: Any) -> Any:
    return a * b if isinstance(a, int) and isinstance(b, int) else None


KERNELS: list[CudaKernel] = [Attention()]
