"""Host-side logic of the CUDA com.microsoft RotaryEmbedding and MultiHeadAttention
kernels (no GPU): geometry, supports() decisions and their reasons, shape inference,
workspace sizing, promises, the launches each node makes, and that every symbol the host
can pick is instantiated in contrib_attention.cu."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import CaptureSupport, NodeMeta, TensorSpec
from onnx_ep.errors import NodeError
from onnx_ep.providers.cuda.kernels import contrib_attention as ca
from onnx_ep.providers.cuda.kernels.base import I64, PTR, suffix
from tests.helpers.host_tensor import HostTensor, recorded_launches, specs_of

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
I32, INT64 = np.dtype(np.int32), np.dtype(np.int64)
ROPE, MHA = "RotaryEmbedding", "MultiHeadAttention"
K = {k.key.op_type: k for k in ca.KERNELS}


def _meta(op, inputs, n_out=1, names=None, out_names=None, **attrs):
    return NodeMeta(name="n", op_type=op, domain="com.microsoft", opset=1, attrs=attrs,
                    inputs=tuple(inputs),
                    input_names=tuple(names if names is not None else
                                      ["" if t is None else f"i{i}" for i, t in enumerate(inputs)]),
                    output_names=tuple(out_names or [f"y{i}" for i in range(n_out)]))


def _spec(*shape, dtype=F16):
    return TensorSpec(dtype, shape)


# ---------------------------------------------------------------- registration and promises

def test_keys_domains_and_capture():
    for op in (ROPE, MHA):
        assert K[op].key.domain == "com.microsoft" and K[op].key.since == 1
        assert K[op].capture_support() == CaptureSupport.SUPPORTED


def test_registered_with_the_cuda_provider():
    from onnx_ep.providers import cuda

    assert ca in cuda.kernel_modules()


def test_capture_supported_kernels_keep_their_promise():
    from onnx_ep.testing import audit_capture

    found = audit_capture(list(K.values()))
    assert not found, "\n".join(map(str, found))


def test_parity_per_dtype():
    rope, mha = K[ROPE], K[MHA]
    assert rope.bind(_meta(ROPE, [_spec(1, 2, 8, dtype=F32)])).parity == ca.ROTARY_PARITY
    assert rope.bind(_meta(ROPE, [_spec(1, 2, 8)])).parity.rtol == 2.0 ** -10
    assert mha.bind(_meta(MHA, [_spec(1, 2, 8, dtype=F32)])).parity == ca.MHA_PARITY
    assert mha.bind(_meta(MHA, [_spec(1, 2, 8)])).parity.rtol == 2.0 ** -10
    assert mha.bind(_meta(MHA, [_spec(1, 2, 8, dtype=BF16)])).parity.rtol == 2.0 ** -7


def test_every_symbol_the_host_can_pick_is_instantiated():
    src = (Path(ca.__file__).parent / "contrib_attention.cu").read_text()
    suffixes = set(re.findall(r"^EP_CONTRIB\(\w+, (\w+)\)", src, re.M))
    assert {suffix(d) for d in ca.DTYPES} <= suffixes
    for name in ("contrib_rotary_", "mha_", "mha_present_"):
        assert re.search(rf"void (__launch_bounds__\(MHA_BLOCK\) )?{name}##S\(", src), name
    assert f"#define MHA_BLOCK {ca.MHA_BLOCK}" in src


# ---------------------------------------------------------------- RotaryEmbedding geometry

def test_rope_geometry_3d_and_4d():
    g = ca.rope_geometry((2, 5, 32), (2, 5), (64, 8), (64, 8), 2, 0)
    assert (g.batch, g.heads, g.seq, g.head, g.half, g.max_len) == (2, 2, 5, 16, 8, 64)
    assert (g.sb, g.sh, g.ss, g.offset) == (160, 16, 32, 0)
    g = ca.rope_geometry((2, 3, 5, 16), (1,), (64, 8), (64, 8), 0, 0)
    assert (g.batch, g.heads, g.seq, g.head, g.half) == (2, 3, 5, 16, 8)
    assert (g.sb, g.sh, g.ss, g.offset) == (240, 80, 16, 1)


def test_rope_geometry_partial_rotation_and_no_num_heads():
    g = ca.rope_geometry((1, 4, 48), (1, 4), (16, 4), (16, 4), 3, 8)
    assert (g.heads, g.head, g.half) == (3, 16, 4)
    g = ca.rope_geometry((1, 4, 48), (1,), (16, 8), (16, 8), 0, 0)  # head = 2 * half
    assert (g.heads, g.head, g.half) == (3, 16, 8)


@pytest.mark.parametrize("x,pid,cos,heads,dim,why", [
    ((1, 4, 48), (1, 4), (16, 4, 1), 3, 0, "must be equal 2-D"),
    ((1, 4, 48), (1, 4), (16, 4), 3, 0, "rotary_embedding_dim / 2"),
    ((1, 4, 48), (1, 4), (16, 4), 0, 8, "needs num_heads"),
    ((1, 4, 48), (1, 4), (16, 12), 3, 24, "rotary_embedding_dim / 2"),
    ((1, 4, 50), (1, 4), (16, 8), 3, 0, "not a multiple"),
    ((1, 4, 48), (4, 1), (16, 8), 3, 0, "position_ids must be"),
    ((1, 4), (1, 4), (16, 8), 3, 0, "3-D or 4-D"),
])
def test_rope_geometry_rejects_what_the_reference_rejects(x, pid, cos, heads, dim, why):
    with pytest.raises(ValueError, match=why):
        ca.rope_geometry(x, pid, cos, cos, heads, dim)


def _rope_inputs(dtype=F16, x=(2, 5, 32), pid=(2, 5), pid_dtype=INT64, cos=(64, 8)):
    return [_spec(*x, dtype=dtype), _spec(*pid, dtype=pid_dtype), _spec(*cos, dtype=dtype),
            _spec(*cos, dtype=dtype)]


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_rope_supports_float_types_and_symbolic_dims(dtype):
    assert K[ROPE].supports(_meta(ROPE, _rope_inputs(dtype), num_heads=2))
    sym = [TensorSpec(dtype, ("b", "s", 32)), TensorSpec(INT64, ("b", "s")),
           _spec(64, 8, dtype=dtype), _spec(64, 8, dtype=dtype)]
    assert K[ROPE].supports(_meta(ROPE, sym, num_heads=2))


@pytest.mark.parametrize("inputs,attrs,why", [
    (_rope_inputs(np.float64), {"num_heads": 2}, "dtype float64"),
    (_rope_inputs(pid_dtype=I32), {"num_heads": 2}, "int64"),
    (_rope_inputs()[:3], {"num_heads": 2}, "needs input, position_ids"),
    (_rope_inputs()[:2] + [_spec(64, 8, dtype=F32), _spec(64, 8)], {"num_heads": 2},
     "cos_cache has dtype"),
    (_rope_inputs(), {"num_heads": 2, "is_packed_batching": 1}, "is_packed_batching"),
    (_rope_inputs(x=(2, 5, 32), cos=(64, 4)), {"num_heads": 2}, "rotary_embedding_dim / 2"),
    (_rope_inputs(x=(10, 32), pid=(10,)), {"num_heads": 2}, "3-D or 4-D"),
    (_rope_inputs(pid=(5, 2)), {"num_heads": 2}, "position_ids must be"),
])
def test_rope_declines_with_a_reason(inputs, attrs, why):
    s = K[ROPE].supports(_meta(ROPE, inputs, **attrs))
    assert not s and why in s.reason, s.reason


def test_rope_infer_outputs():
    x = _spec(2, 5, 32)
    assert K[ROPE].infer_outputs(_meta(ROPE, _rope_inputs(), num_heads=2)) == [x]


# ---------------------------------------------------------------- the launches



class _Workspace:
    def __init__(self, nbytes, ptr):
        self.nbytes = nbytes
        self.buffer = type("B", (), {"ptr": ptr})()

    def require(self, nbytes):
        assert nbytes <= self.nbytes


def _run(op, inputs, outputs, monkeypatch, workspace=None, **attrs):
    """Execute the bound kernel with launches recorded instead of made."""
    meta = _meta(op, specs_of(inputs), len(outputs), **attrs)
    return recorded_launches(K[op], meta, inputs, outputs, monkeypatch, workspace)


def test_rope_launch_reads_positions_on_the_device(monkeypatch):
    x, pid = HostTensor((2, 5, 32), BF16, 4096), HostTensor((1,), INT64, 8192)
    cos, sin = HostTensor((64, 4), BF16, 16384), HostTensor((64, 4), BF16, 32768)
    y = HostTensor((2, 5, 32), BF16, 65536)
    (call,) = _run(ROPE, [x, pid, cos, sin], [y], monkeypatch, num_heads=2,
                   rotary_embedding_dim=8, interleaved=1)
    fn, grid, block, args, _ = call
    assert fn == "contrib_rotary_bf16" and block == (256, 1, 1)
    assert [a for a, t in args[:5]] == [x.ptr, pid.ptr, cos.ptr, sin.ptr, y.ptr]
    g = args[5][0]
    assert (g.heads, g.head, g.half, g.offset, g.interleaved) == (2, 16, 4, 1, 1)
    n = 2 * 2 * 5 * (16 - 4)
    assert grid[0] * block[0] >= n or grid[0] > 1


def test_rope_shapes_that_change_after_placement_raise_node_error(monkeypatch):
    x, pid = HostTensor((2, 5, 32), F16, 4096), HostTensor((3, 5), INT64, 8192)
    cos = HostTensor((64, 8), F16, 16384)
    with pytest.raises(NodeError, match="position_ids"):
        _run(ROPE, [x, pid, cos, cos], [HostTensor((2, 5, 32), F16, 1 << 20)], monkeypatch,
             num_heads=2)


# ---------------------------------------------------------------- MultiHeadAttention geometry

def test_mha_dims_plain_and_with_everything():
    d = ca.mha_dims((2, 3, 16), (2, 4, 16), (2, 4, 24), None, None, None, None, None, 2)
    assert (d.batch, d.heads, d.q_len, d.kv_len, d.past_len, d.head, d.v_head) == \
        (2, 2, 3, 4, 0, 8, 12)
    assert d.mask_kind == 0 and d.bias_strides == (0, 0) and d.total == 4
    d = ca.mha_dims((2, 3, 16), (2, 4, 16), (2, 4, 24), (56,), (2, 3, 9), (2, 1, 3, 9),
                    (2, 2, 5, 8), (2, 2, 5, 12), 2)
    assert d.past_len == 5 and d.total == 9 and d.mask_kind == 3
    assert d.bias_strides == (27, 0)
    d = ca.mha_dims((2, 3, 16), (2, 4, 16), (2, 4, 16), None, (2,), (1, 2, 3, 4), None, None, 2)
    assert d.mask_kind == 1 and d.bias_strides == (0, 12)
    d = ca.mha_dims((2, 3, 16), (2, 4, 16), (2, 4, 16), None, (2, 4), (2, 2, 3, 4), None, None,
                    2)
    assert d.mask_kind == 2 and d.bias_strides == (24, 12)


@pytest.mark.parametrize("shapes,heads,why", [
    (((2, 3, 2, 3, 8), None, None, None, None, None, None, None), 2, "packed QKV"),
    (((2, 3, 16), (2, 4, 2, 2, 8), None, None, None, None, None, None), 2, "packed KV"),
    (((2, 3, 16), (2, 2, 4, 8), (2, 2, 4, 8), None, None, None, None, None), 2, "BNSH"),
    (((2, 3, 16), (2, 4, 16), (2, 4, 16), None, None, None, None, None), 3, "num_heads=3"),
    (((2, 3, 16), (2, 4, 16), (2, 4, 16), (40,), None, None, None, None), 2, "bias must"),
    (((2, 3, 16), (2, 4, 16), (2, 4, 16), None, (8,), None, None, None), 2, "(3 * batch + 2,)"),
    (((2, 3, 16), (2, 4, 16), (2, 4, 16), None, None, (2, 2, 3, 5), None, None), 2,
     "attention_bias"),
    (((2, 3, 16), (2, 4, 16), (2, 4, 16), None, None, None, (2, 2, 1, 8), None), 2,
     "given together"),
    (((2, 3, 16), (2, 4, 16), (2, 4, 16), None, None, None, (2, 2, 1, 4), (2, 2, 1, 8)), 2,
     "must be (batch"),
    (((2, 3, 16), (2, 0, 16), (2, 0, 16), None, None, None, None, None), 2, "no keys"),
])
def test_mha_dims_rejects(shapes, heads, why):
    with pytest.raises(ValueError) as exc:
        ca.mha_dims(*shapes, heads)
    assert why in str(exc.value)


def _mha_inputs(dtype=F16, b=2, s=3, kv=4, past=0, hidden=16, v_hidden=16, bias=False,
                pad=None, ab=None, heads=2):
    head = hidden // heads
    items = [_spec(b, s, hidden, dtype=dtype), _spec(b, kv, hidden, dtype=dtype),
             _spec(b, kv, v_hidden, dtype=dtype),
             _spec(2 * hidden + v_hidden, dtype=dtype) if bias else None,
             _spec(*pad, dtype=I32) if pad is not None else None,
             _spec(*ab, dtype=dtype) if ab is not None else None,
             _spec(b, heads, past, head, dtype=dtype) if past else None,
             _spec(b, heads, past, v_hidden // heads, dtype=dtype) if past else None]
    while items and items[-1] is None:
        items.pop()
    return items


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_mha_supports_the_common_cases(dtype):
    k = K[MHA]
    assert k.supports(_meta(MHA, _mha_inputs(dtype), num_heads=2))
    full = _mha_inputs(dtype, past=5, bias=True, pad=(2, 3, 9), ab=(1, 2, 3, 9))
    assert k.supports(_meta(MHA, full, 3, num_heads=2, unidirectional=1, scale=0.5))
    sym = [TensorSpec(dtype, ("b", "s", 16)), TensorSpec(dtype, ("b", "t", 16)),
           TensorSpec(dtype, ("b", "t", 16))]
    assert k.supports(_meta(MHA, sym, num_heads=2))


def test_mha_declines_with_a_reason():
    k = K[MHA]

    def no(inputs, why, names=None, out_names=None, **attrs):
        s = k.supports(_meta(MHA, inputs, names=names, out_names=out_names,
                             **({"num_heads": 2} | attrs)))
        assert not s and why in s.reason, (why, s.reason)

    base = _mha_inputs()
    no([_spec(2, 3, 2, 3, 8)], "packed QKV")
    no([_spec(2, 3, 2, 3, 8), _spec(2, 3, 16), _spec(2, 3, 16)], "packed QKV")
    no([base[0], _spec(2, 4, 2, 2, 8), _spec(2, 4, 16)], "packed KV")
    no(_mha_inputs(np.float64), "dtype float64")
    no([base[0], _spec(2, 4, 16, dtype=F32), base[2]], "key has dtype")
    no(_mha_inputs(pad=(2, 4))[:4] + [_spec(2, 4, dtype=INT64)], "int32")
    no(_mha_inputs(pad=(8,)), "(3 * batch + 2,)")
    no(base + [None] * 5 + [_spec(2, dtype=I32)], "past_sequence_length",
       names=["q", "k", "v", "", "", "", "", "", "psl"])
    no(base + [None] * 6 + [_spec(2, 4, dtype=I32)], "cache_indirection",
       names=["q", "k", "v", "", "", "", "", "", "", "ci"])
    no(base, "qk output", out_names=["y", "", "", "qk"])
    no(base, "num_heads", num_heads=0)
    no(_mha_inputs(hidden=2 ** 14, v_hidden=16, heads=1), "shared-memory", num_heads=1)


def test_mha_infer_outputs():
    full = _mha_inputs(F16, past=5, v_hidden=24)
    outs = K[MHA].infer_outputs(_meta(MHA, full, 3, num_heads=2))
    assert outs == [_spec(2, 3, 24), _spec(2, 2, 9, 8), _spec(2, 2, 9, 12)]
    sym = [TensorSpec(F16, ("b", "s", 16)), TensorSpec(F16, ("b", "t", 16)),
           TensorSpec(F16, ("b", "t", 16))]
    outs = K[MHA].infer_outputs(_meta(MHA, sym, 1, num_heads=2))
    assert outs == [TensorSpec(F16, ("b", "s", 16))]


def test_mha_workspace_only_when_the_scores_row_leaves_shared_memory():
    k = K[MHA]
    assert k.workspace_requirement(_meta(MHA, _mha_inputs(), num_heads=2)).nbytes == 0
    long = _mha_inputs(F32, b=1, s=2, kv=20000)
    need = k.workspace_requirement(_meta(MHA, long, num_heads=2)).nbytes
    assert need == 1 * 2 * 2 * 20000 * 4     # rows (grid) x total x float32


def test_mha_launches_present_copies_then_one_row_kernel(monkeypatch):
    q, kk, v = (HostTensor((2, 3, 16), F16, 1 << 12), HostTensor((2, 4, 16), F16, 1 << 13),
                HostTensor((2, 4, 24), F16, 1 << 14))
    bias, pad = HostTensor((56,), F16, 1 << 15), HostTensor((2,), I32, 1 << 16)
    pk, pv = HostTensor((2, 2, 5, 8), F16, 1 << 17), HostTensor((2, 2, 5, 12), F16, 1 << 18)
    y, ok, ov = (HostTensor((2, 3, 24), F16, 1 << 20), HostTensor((2, 2, 9, 8), F16, 1 << 21),
                 HostTensor((2, 2, 9, 12), F16, 1 << 22))
    calls = _run(MHA, [q, kk, v, bias, pad, None, pk, pv], [y, ok, ov], monkeypatch,
                 num_heads=2, unidirectional=1, mask_filter_value=-1e9)
    assert [c[0] for c in calls] == ["mha_present_f16", "mha_present_f16", "mha_f16"]
    for (_, _, _, args, _), past, new, out, off, dim in (
            (calls[0], pk, kk, ok, 16, 8), (calls[1], pv, v, ov, 32, 12)):
        assert [a for a, t in args if t is PTR] == [past.ptr, new.ptr, bias.ptr + 2 * off,
                                                   out.ptr]
        assert [a for a, t in args if t is I64] == [2, 2, 5, 4, dim]
    fn, grid, block, args, shared = calls[2]
    assert grid == (12, 1, 1) and block == (ca.MHA_BLOCK, 1, 1)
    assert shared == (8 + 9) * 4
    assert [a for a, t in args[:10]] == [q.ptr, kk.ptr, v.ptr, bias.ptr, pad.ptr, 0, pk.ptr,
                                         pv.ptr, y.ptr, 0]
    g = args[10][0]
    assert (g.past_len, g.kv_len, g.head, g.v_head, g.mask_kind, g.causal) == (5, 4, 8, 12, 1, 1)
    assert g.scale == pytest.approx(float(np.float32(1 / np.sqrt(8))))
    assert g.mask_filter == float(np.float32(-1e9))


def test_mha_scores_in_the_workspace(monkeypatch):
    q, kk = HostTensor((1, 2, 16), F32, 1 << 12), HostTensor((1, 20000, 16), F32, 1 << 20)
    y = HostTensor((1, 2, 16), F32, 1 << 28)
    ws = _Workspace(1 * 2 * 2 * 20000 * 4, 1 << 30)
    (call,) = _run(MHA, [q, kk, kk], [y], monkeypatch, workspace=ws, num_heads=2)
    fn, grid, block, args, shared = call
    assert fn == "mha_f32" and grid == (4, 1, 1) and shared == 8 * 4
    assert args[9][0] == ws.buffer.ptr


def test_mha_without_a_workspace_it_needs_raises(monkeypatch):
    q, kk = HostTensor((1, 2, 16), F32, 1 << 12), HostTensor((1, 20000, 16), F32, 1 << 20)
    with pytest.raises(NodeError, match="workspace"):
        _run(MHA, [q, kk, kk], [HostTensor((1, 2, 16), F32, 1 << 28)], monkeypatch, num_heads=2)


def test_mha_present_only_no_row_kernel(monkeypatch):
    q, kk = HostTensor((1, 2, 16), F32, 1 << 12), HostTensor((1, 3, 16), F32, 1 << 16)
    calls = _run(MHA, [q, kk, kk], [None, HostTensor((1, 2, 3, 8), F32, 1 << 20)], monkeypatch,
                 num_heads=2)
    assert [c[0] for c in calls] == ["mha_present_f32"]
    assert calls[0][3][2][0] == 0        # no bias
