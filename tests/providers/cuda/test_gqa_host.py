"""Host-side logic of the CUDA com.microsoft::GroupQueryAttention kernel (no GPU): supports()
decisions, output shapes, the shared-buffer aliasing, the one plan formula, that every
symbol and struct the host uses matches gqa.cu, and the whole host path (geometry,
pointers, workspace layout, in-place and growing routes) run against gqa.cu replayed in
numpy on a fake device (tests/helpers/gqa_replay.py), compared with cpu_reference."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import attrs
import numpy as np
import pytest

from onnx_ep.core.kernel import (
    CaptureSupport,
    ExecutionContext,
    NodeMeta,
    TensorSpec,
    WorkspaceView,
)
from onnx_ep.providers.cuda.kernels import gqa
from onnx_ep.providers.cuda.kernels.base import BF16, grid_1d, suffix
from onnx_ep.testing.ulp import judge
from tests.helpers import gqa_cases as gc
from tests.helpers.gqa_replay import FakeDevice, launcher

K = gqa.GroupQueryAttention()
SRC = (Path(gqa.__file__).parent / "gqa.cu").read_text()
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)


def _meta(specs, outputs=("y", "pk", "pv"), constants=None, out_specs=(), **attrs_):
    names = tuple(f"i{i}" if s is not None else "" for i, s in enumerate(specs))
    return NodeMeta(name="gqa", op_type="GroupQueryAttention", domain=gqa.MS_DOMAIN, opset=1,
                    attrs={"num_heads": 14, "kv_num_heads": 2} | attrs_,
                    inputs=tuple(None if s is None else TensorSpec(*s) for s in specs),
                    outputs=tuple(out_specs), input_names=names,
                    output_names=tuple(outputs), constants=dict(constants or {}))


def _decode_specs(dtype=F16, b=1, cap=4096, d=64, hq=14, hkv=2, s=1):
    return [(dtype, (b, s, hq * d)), (dtype, (b, s, hkv * d)), (dtype, (b, s, hkv * d)),
            (dtype, (b, hkv, cap, d)), (dtype, (b, hkv, cap, d)), (I32, (b,)), (I32, ())]


# ---------------------------------------------------------------- registration

def test_key_capture_and_registration():
    from onnx_ep.core.plugin_manager import build_plugins
    from onnx_ep.testing import audit_capture

    assert K.key.domain == "com.microsoft" and K.key.op_type == "GroupQueryAttention"
    assert K.key.since == 1 and K.capture_support() == CaptureSupport.SUPPORTED
    registered = [e.kernel for e in build_plugins(entry_points=False).registry.entries("cuda")
                  if e.kernel.key == K.key]
    assert len(registered) == 1 and isinstance(registered[0], gqa.GroupQueryAttention)
    assert not audit_capture([K])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_parity_per_dtype(dtype):
    bound = K.bind(_meta(_decode_specs(np.dtype(dtype) if dtype != "bfloat16" else BF16)))
    assert bound.parity == gqa.PARITY[dtype]


def test_every_symbol_the_host_can_pick_is_instantiated():
    built = set(re.findall(r"^EP_GQA\((\w+), (\w+)\)", SRC, re.M))
    sfx = {s for _, s in built}
    assert {suffix(d) for d in gqa.DTYPES} <= sfx
    rows = re.findall(r"EP_GQA_ATTEND\(T, S, (\d+), (\d+), (\d+), (\d+)\)", SRC)
    assert {int(dm): (int(tk), int(rpw)) for dm, _, tk, rpw in rows} == gqa.VARIANTS
    assert all(int(ns) * 32 == int(dm) for dm, ns, _, _ in rows)
    assert "extern \"C\" __global__ void gqa_kv_##S(" in SRC
    assert "gqa_attend_##S##_d##DMAX(" in SRC
    decode = re.search(r"#define EP_GQA\(T, S\)(.*?)\n\n", SRC, re.S).group(1)
    assert tuple(int(x) for x in re.findall(r"EP_GQA_DECODE\(T, S, (\d+)\)", decode)) == (
        gqa.DECODE_HEADS)
    assert "gqa_decode_##S##_d##D(" in SRC
    assert tuple(int(x) for x in re.findall(r"EP_GQA_DECODE_SHORT\(T, S, (\d+)\)",
                                            decode)) == gqa.DECODE_HEADS
    assert "gqa_decode_short_##S##_d##D(" in SRC
    from onnx_ep.providers.cuda.kernels import gqa_plan
    for name, value in (("GQA_THREADS", gqa.THREADS), ("GQA_MAX_SPLITS", gqa.MAX_SPLITS),
                        ("GQA_DEC_REP", gqa.DECODE_MAX_REP),
                        ("GQA_DEC_MAX_SPLITS", gqa.DECODE_MAX_SPLITS),
                        ("GQA_SHORT_THREADS", gqa_plan.SHORT_THREADS),
                        ("GQA_SHORT_KEYS", gqa_plan.SHORT_MAX_KEYS)):
        assert re.search(rf"#define {name} {value}\b", SRC)


def test_the_launch_struct_matches_gqa_cu():
    body = re.search(r"struct GqaGeo \{(.*?)\n\};", SRC, re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    fields = []
    for ctype, names in re.findall(r"(long long|int|float)\s+([^;]+);", body):
        fields += [(ctype, n.strip()) for n in names.split(",")]
    kinds = {ctypes.c_int64: "long long", ctypes.c_int32: "int", ctypes.c_float: "float"}
    assert fields == [(kinds[t], n) for n, t in gqa.GqaGeo._fields_]
    assert ctypes.sizeof(gqa.GqaGeo) == 24 * 8 + 8 * 4 + 2 * 4


# ---------------------------------------------------------------- supports

def test_supports_decode_prefill_packed_and_symbolic():
    assert K.supports(_meta(_decode_specs()))
    assert K.supports(_meta(_decode_specs(F32, b=3, s=17, d=128)))
    packed = _decode_specs(BF16)
    packed[0] = (BF16, (1, 1, 18 * 64))
    packed[1] = packed[2] = None
    assert K.supports(_meta(packed))
    sym = _decode_specs()
    sym[0] = (F16, ("batch", "seq", 896))
    assert K.supports(_meta(sym))


@pytest.mark.parametrize("change,reason", [
    (lambda s, a: s.__setitem__(0, (np.float64, (1, 1, 896))), "query dtype"),
    (lambda s, a: s.__setitem__(1, (F32, (1, 1, 128))), "key is float32"),
    (lambda s, a: s.extend([None] * 5 + [(F32, (1,))]), "input 12 k_scale"),
    (lambda s, a: s.extend([None] * 9 + [(I32, (1,))]), "input 16 query_seqlens"),
    (lambda s, a: a.update(sliding_window_cache=1), "sliding_window_cache"),
    (lambda s, a: a.update(qk_output=1), "qk_output"),
    (lambda s, a: a.update(k_quant_type="PER_TENSOR"), "quantized"),
    (lambda s, a: a.update(num_heads=3), "multiple of kv_num_heads"),
    (lambda s, a: s.__setitem__(5, (I64, (1,))), "seqlens_k must be an int32"),
    (lambda s, a: s.__setitem__(3, None), "in pairs"),
    (lambda s, a: a.update(do_rotary=1), "cos_cache"),
    (lambda s, a: s.__setitem__(0, (F16, (1, 1, 1, 896))), "3-D"),
    (lambda s, a: s.__setitem__(5, (I32, (2,))), "seqlens_k must have shape"),
    (lambda s, a: s.__setitem__(3, (F16, (1, 2, 4096, 32))), "past_key"),
    (lambda s, a: s.__setitem__(1, (F16, (1, 1, 3 * 64))), "do not hold"),
])
def test_supports_declines_with_a_reason(change, reason):
    specs, attrs_ = _decode_specs(), {}
    change(specs, attrs_)
    s = K.supports(_meta(specs, **attrs_))
    assert not s and reason in s.reason, s.reason


def test_supports_head_sizes():
    for d in (16, 64, 80, 128, 256):
        assert K.supports(_meta(_decode_specs(d=d)))
    s = K.supports(_meta(_decode_specs(d=320)))
    assert not s and "above 256" in s.reason
    sym = _decode_specs(d=320)
    sym[0] = (F16, ("batch", "seq", 14 * 320))
    s = K.supports(_meta(sym))
    assert not s and "above 256" in s.reason


def test_supports_rotary_inputs_bias_and_sink():
    base = _decode_specs(b=2, s=3)
    cos = (F16, (4096, 32))
    ok = base + [cos, cos, (I64, (2, 3)), (F16, (2, 14, 3, 4096)), (F16, (14,))]
    assert K.supports(_meta(ok, do_rotary=1))
    for i, spec, why in ((8, (F16, (4096, 16)), "cos_cache"), (7, (F16, (4096, 40)), "cos_cache"),
                         (9, (I64, (3, 3)), "broadcast"), (9, (F32, (2, 3)), "int32 or int64"),
                         (10, (F16, (2, 3, 3, 4096)), "attention_bias"),
                         (11, (F16, (7,)), "head_sink")):
        bad = list(ok)
        bad[i] = spec
        s = K.supports(_meta(bad, do_rotary=1))
        assert not s and why in s.reason, (i, s.reason)
    assert K.supports(_meta(base + [cos, cos, (I32, (1,))], do_rotary=1))
    assert K.supports(_meta(base + [cos, cos, (I64, (2, 1))], do_rotary=1))


# ---------------------------------------------------------------- shapes and aliasing

def test_infer_outputs_follows_the_reference_lengths():
    shared = _meta(_decode_specs(cap=64), constants={6: np.array(64, np.int32)})
    y, pk, pv = K.infer_outputs(shared)
    assert y == TensorSpec(F16, (1, 1, 896)) and pk == pv == TensorSpec(F16, (1, 2, 64, 64))
    growing = _meta(_decode_specs(cap=63), constants={6: np.array(64, np.int32)})
    assert K.infer_outputs(growing)[1].shape == (1, 2, 64, 64)
    # no past: the first prompt's total
    first = _decode_specs(s=5)
    first[3] = first[4] = None
    assert K.infer_outputs(_meta(first, constants={6: np.array([5], np.int32)}))[2].shape == (
        1, 2, 5, 64)
    # unknown or impossible totals leave the presents unsized (the host runs the node)
    assert K.infer_outputs(_meta(_decode_specs(cap=64)))[1:] == [None, None]
    assert K.infer_outputs(_meta(_decode_specs(cap=64),
                                 constants={6: np.array(70, np.int32)}))[1:] == [None, None]
    assert len(K.infer_outputs(_meta(_decode_specs(), outputs=("y",)))) == 1


def _planned(specs, total, outputs=("y", "pk", "pv"), constants=None):
    consts = {6: np.array(total, np.int32)} | dict(constants or {})
    meta = _meta(specs, outputs, consts)
    bound = K.bind(meta)
    meta = attrs.evolve(meta, outputs=tuple(bound.infer_outputs(meta)))
    req = bound.workspace_requirement(meta)
    return bound, meta, req


def test_aliases_only_for_a_shared_buffer():
    specs = _decode_specs(cap=64)
    bound, meta, _ = _planned(specs, 64)
    assert bound.aliases_at(list(meta.inputs)) == {1: 3, 2: 4}
    # another signature of the same node: growing presents, no alias
    grow = _decode_specs(cap=63)
    _, meta2, _ = _planned(grow, 64)
    bound.workspace_requirement(meta2)
    assert bound.aliases_at(list(meta2.inputs)) is None
    assert bound.aliases_at(list(meta.inputs)) == {1: 3, 2: 4}
    # a signature never planned, a past that is a weight, presents left out: no alias
    assert bound.aliases_at(list(_meta(_decode_specs(cap=32)).inputs)) is None
    b2, m2, _ = _planned(specs, 64, constants={3: np.zeros(1), 4: np.zeros(1)})
    assert b2.aliases_at(list(m2.inputs)) is None
    b3, m3, _ = _planned(specs, 64, outputs=("y",))
    assert b3.aliases_at(list(m3.inputs)) is None
    assert K.aliases is None


# ---------------------------------------------------------------- the plan

def test_decode_plan_splits_the_keys_to_fill_the_gpu():
    d = gqa.GqaDims(1, 1, 14, 2, 64, 4096, False)
    p = gqa.gqa_plan(d, 2, scratch=False)
    assert (p.dmax, p.tile_rows, p.tiles, p.splits, p.counters) == (64, 16, 1, 64, 2)
    assert p.partial_bytes == 2 * 64 * 16 * 66 * 4
    assert p.workspace_bytes == p.counter_offset + 8 and p.partial_offset == 0
    # batch 64: enough blocks without splitting far
    p64 = gqa.gqa_plan(attrs.evolve(d, batch=64), 2, scratch=False)
    assert p64.splits == 2
    # a short cache: one split per 32-key tile at most
    assert gqa.gqa_plan(attrs.evolve(d, past_len=40), 2, False).splits == 2


def test_prefill_plan_needs_no_workspace():
    d = gqa.GqaDims(1, 512, 14, 2, 64, 0, False)
    p = gqa.gqa_plan(d, 2, scratch=False)
    assert (p.tiles, p.splits, p.workspace_bytes) == (224, 1, 0)   # x 2 kv heads
    # presents left out: their rows live in the workspace
    s = gqa.gqa_plan(d, 2, scratch=True)
    assert s.scratch_bytes == 2 * 512 * 64 * 2 and s.workspace_bytes == 2 * s.scratch_bytes
    big = gqa.gqa_plan(attrs.evolve(d, head=256, q_heads=16, kv_heads=4), 4, False)
    assert (big.dmax, big.tile_rows) == (256, 8)
    assert gqa.gqa_plan(attrs.evolve(d, head=80, q_heads=16), 4, False).dmax == 128
    with pytest.raises(ValueError, match="above 256"):
        gqa.gqa_plan(attrs.evolve(d, head=257), 4, False)
    with pytest.raises(ValueError, match="grid"):
        gqa.gqa_plan(attrs.evolve(d, batch=40000), 2, False)


def test_broadcast_strides():
    assert gqa.broadcast_strides((2, 3), (2, 3)) == (3, 1)
    assert gqa.broadcast_strides((1,), (2, 3)) == (0, 0)
    assert gqa.broadcast_strides((2, 1), (2, 3)) == (1, 0)
    assert gqa.broadcast_strides((3,), (2, 3)) == (0, 1)
    assert gqa.broadcast_strides((), (2, 3)) == (0, 0)
    assert gqa.broadcast_strides((3, 3), (2, 3)) is None


# ---------------------------------------------------------------- the replay

def run_replay(case: gc.GqaCase, order_seed: int = 0):
    """Plan and execute ``case`` as the device session would, on the fake device; the
    outputs, the reference's, the bound kernel and the launches made."""
    from onnx_ep import Session

    arrays = case.arrays()
    names = [n if n in arrays else "" for n in gc.INPUTS]
    while not names[-1]:
        names.pop()
    attrs_ = dict(num_heads=case.hq, kv_num_heads=case.hkv, **case.attrs)
    if case.rotary is not None:
        attrs_.update(do_rotary=1, rotary_interleaved=case.rotary)
    specs = tuple(TensorSpec(arrays[n].dtype, arrays[n].shape) if n else None for n in names)
    meta = NodeMeta(name="gqa", op_type="GroupQueryAttention", domain=gqa.MS_DOMAIN, opset=1,
                    attrs=attrs_, inputs=specs, input_names=tuple(names),
                    output_names=case.outputs,
                    constants={i: arrays[n] for i, n in enumerate(names)
                               if n and n not in gc.FED})
    assert K.supports(meta), K.supports(meta).reason
    bound = K.bind(meta)
    meta = attrs.evolve(meta, outputs=tuple(bound.infer_outputs(meta)))
    req = bound.workspace_requirement(meta)
    aliases = bound.aliases_at(list(specs)) or {}
    dev = FakeDevice()
    inputs = [dev.put(arrays[n]) if n else None for n in names]
    outputs = []
    for j, name in enumerate(case.outputs):
        spec = meta.outputs[j]
        outputs.append(None if not name else spec if j in aliases
                       else dev.empty(spec.dtype, spec.shape))
    ws = WorkspaceView(dev.alloc(req.nbytes), req.nbytes) if req.nbytes else None
    calls: list = []
    bound.function = lambda symbol, tensor: symbol
    bound.launch = launcher(dev, calls, order_seed)
    bound.execute_with_workspace(ExecutionContext(meta), inputs, outputs, ws)
    if aliases:
        assert outputs[1].ptr == inputs[3].ptr and outputs[2].ptr == inputs[4].ptr
    got = [o.read() for o in outputs if o is not None]
    ref = Session(case.model(), providers=["cpu_reference"]).run(None, case.feeds())
    return got, ref, bound, calls, bool(aliases)


def assert_parity(case, got, ref, parity):
    assert len(got) == len(ref)
    for i, (g, r) in enumerate(zip(got, ref)):
        r = np.asarray(r)
        assert g.dtype == r.dtype and g.shape == r.shape, (i, g.shape, r.shape)
        d = judge(g, r, parity)
        assert d.kept, f"{case} output {i}: {d.reason} (max abs {d.max_abs})"


SMALL = dict(hq=6, hkv=2, head=16)
REPLAY_CASES = {
    "decode_shared": gc.decode((5, 40, 64), 64, **SMALL),
    "decode_shared_genai_total": gc.decode((30,), 48, rotary=0, **SMALL),
    "decode_shared_total_max": gc.decode((3, 17), 32, total=17, rotary=1, **SMALL),
    "decode_growing": gc.decode_growing((7, 40, 23), rotary=0, **SMALL),
    "first_prompt": gc.first_prompt((9, 4, 1), rotary=0, **SMALL),
    "first_prompt_shared": gc.first_prompt((9, 5), capacity=24, rotary=1, **SMALL),
    "next_prompt_growing": gc.next_prompt(5, (20, 11), rotary=1, **SMALL),
    "next_prompt_shared": gc.next_prompt(4, (21, 6), capacity=32, **SMALL),
    "window": gc.decode((50, 9), 64, attrs={"local_window_size": 7}, **SMALL),
    "window_prefill": gc.first_prompt((12, 7), attrs={"local_window_size": 3}, **SMALL),
    "softcap_scale": gc.next_prompt(3, (19,), attrs={"softcap": 1.5, "scale": 0.4}, **SMALL),
    "bias_sink": gc.next_prompt(3, (12, 8), bias=True, sink=True, **SMALL),
    "smooth_softmax": gc.decode((10, 3), 16, attrs={"smooth_softmax": 1}, **SMALL),
    "bidirectional": gc.first_prompt((8, 6), attrs={"causal": 0}, **SMALL),
    "packed_rotary": gc.decode((11, 30), 32, packed=True, rotary=1, **SMALL),
    "position_ids64": gc.next_prompt(2, (9, 5), rotary=0, position_ids="int64", **SMALL),
    "position_ids32_first": gc.first_prompt((6, 4), rotary=1, position_ids="int32", **SMALL),
    "partial_rotary": gc.decode((13,), 16, rotary=0, rotary_dim=8, **SMALL),
    "y_only": gc.decode((12, 5), 16, outputs=("y",), **SMALL),
    "y_only_no_past": gc.first_prompt((7, 3), outputs=("y",), **SMALL),
    "present_value_left_out": gc.decode_growing((6, 9), outputs=("y", "pk", ""), **SMALL),
    "mha_heads": gc.decode((20,), 24, hq=2, hkv=2, head=16),
    "head80": gc.decode((17, 4), 20, hq=4, hkv=1, head=80, rotary=0),
    "head256": gc.next_prompt(3, (10,), hq=4, hkv=2, head=256, rotary=1),
    "long_decode_splits": gc.decode((300, 290), 320, hq=4, hkv=2, head=16),
    # the decode kernel (q_len 1, head 64 / 128, at most 8 q heads per kv head)
    "dec_qwen_batch": gc.decode((1, 200, 131), 256, rotary=0, hq=14, hkv=2),
    "dec_one_key": gc.decode((1,), 64, rotary=1, hq=4, hkv=1),
    "dec_head128": gc.decode((90, 7, 64), 96, hq=8, hkv=2, head=128, rotary=1),
    "dec_window": gc.decode((200, 40, 3), 256, attrs={"local_window_size": 33}, hq=6,
                            hkv=2),
    "dec_window_one": gc.decode((70, 5), 96, attrs={"local_window_size": 1}, hq=6, hkv=2),
    "dec_softcap_bias_sink": gc.decode((150, 60), 160, bias=True, sink=True, rotary=0,
                                       attrs={"softcap": 3.0, "scale": 0.2}, hq=8, hkv=2),
    "dec_smooth_position_ids": gc.decode((40, 9), 48, attrs={"smooth_softmax": 1}, rotary=0,
                                         position_ids="int64", hq=4, hkv=2),
    "dec_growing_packed": gc.decode_growing((33, 80), packed=True, rotary=1, hq=4, hkv=2),
    "dec_y_only_bidirectional": gc.decode((50, 20), 64, outputs=("y",),
                                          attrs={"causal": 0}, hq=4, hkv=2),
    "dec_total_below_capacity": gc.decode((3, 17), 32, total=17, rotary=1, hq=6, hkv=2),
    "dec_rep_above_8_falls_back": gc.decode((30,), 32, hq=16, hkv=1),
}


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("name", sorted(REPLAY_CASES))
@pytest.mark.parametrize("route", ["short", "split"])
def test_replay_matches_the_reference(name, dtype, route, monkeypatch):
    from onnx_ep.providers.cuda.kernels import gqa_plan

    if route == "split":         # decode steps take the split kernel however short
        monkeypatch.setattr(gqa_plan, "SHORT_MAX_KEYS", 0)
    case = attrs.evolve(REPLAY_CASES[name], dtype=dtype)
    got, ref, bound, calls, aliased = run_replay(case, order_seed=len(name))
    assert_parity(name, got, ref, bound.parity)
    # a shared buffer is updated in place: only the S new rows are written
    outs = (tuple(case.outputs) + ("", ""))[:3]
    shared = case.cache == "shared" and all(outs)
    assert aliased == shared
    scratch = not all(outs)
    rows = case.q_len if shared else (case.present_len if outs[1] or outs[2]
                                      else case.past_len + case.q_len)
    d = gqa.GqaDims(case.batch, case.q_len, case.hq, case.hkv, case.head, case.past_len,
                    case.packed)
    plan = gqa.gqa_plan(d, np.dtype(dtype).itemsize, scratch)
    n_write = case.batch * case.hkv * rows * case.head
    if plan.dec_splits:
        present = case.present_len if outs[1] or outs[2] else case.past_len + case.q_len
        if gqa_plan.decode_short(d, present):
            assert [c[0] for c in calls] == [f"gqa_kv_{suffix(dtype)}",
                                             f"gqa_decode_short_{suffix(dtype)}_d{case.head}"]
            assert calls[0][1] == grid_1d(n_write)
            assert calls[1][1:] == ((1, case.batch * case.hkv, 1), (256, 1, 1))
            return
        assert route == "split" or present > gqa_plan.SHORT_MAX_KEYS
        assert [c[0] for c in calls] == [f"gqa_kv_{suffix(dtype)}",
                                         f"gqa_decode_{suffix(dtype)}_d{case.head}"]
        assert calls[0][1] == grid_1d(max(n_write, plan.dec_counters))
        assert calls[1][1] == (plan.dec_splits, case.batch * case.hkv, 1)
        return
    assert [c[0] for c in calls] == [f"gqa_kv_{suffix(dtype)}",
                                     f"gqa_attend_{suffix(dtype)}_d{plan.dmax}"]
    assert calls[0][1] == grid_1d(max(n_write, plan.counters))
    assert calls[1][1] == (plan.splits, plan.tiles, case.batch * case.hkv)


def test_replay_of_a_decode_step_uses_the_splits():
    case = gc.decode((300, 290), 320, hq=4, hkv=2, head=16)
    _, _, _, calls, _ = run_replay(case)
    fn, grid, block = calls[1]
    assert fn == "gqa_attend_f32_d64" and block == (128, 1, 1)
    assert grid == (11, 1, 4)     # ceil((320 + 1) / 32) splits, one tile, 2 x 2 kv heads
    assert calls[0][1] == grid_1d(2 * 2 * 1 * 16)


def test_replay_of_the_qwen_decode_shape():
    case = gc.decode((1000,), 1024, dtype=F16, rotary=0)
    got, ref, bound, calls, aliased = run_replay(case)
    assert_parity("qwen decode", got, ref, bound.parity)
    assert aliased and [c[0] for c in calls] == ["gqa_kv_f16", "gqa_decode_f16_d64"]
    assert calls[1][1:] == ((33, 2, 1), (128, 1, 1))     # ceil(1025 / 32) splits
    assert calls[0][1] == grid_1d(2 * 64)
    # a buffer of at most SHORT_MAX_KEYS rows: one block per (batch, kv head)
    case = gc.decode((200,), 256, dtype=F16, rotary=1)
    got, ref, bound, calls, aliased = run_replay(case)
    assert_parity("qwen decode, short", got, ref, bound.parity)
    assert aliased and [c[0] for c in calls] == ["gqa_kv_f16", "gqa_decode_short_f16_d64"]
    assert calls[1][1:] == ((1, 2, 1), (256, 1, 1))


@pytest.mark.parametrize("lengths,cap", [((4096,), 4096), ((1, 2000, 4096), 4096)])
def test_replay_of_long_decode_steps(lengths, cap):
    case = gc.decode(lengths, cap, dtype=F16, rotary=1, hq=14, hkv=2)
    got, ref, bound, calls, _ = run_replay(case, order_seed=3)
    assert_parity("long decode", got, ref, bound.parity)
    splits = gqa.DECODE_MAX_SPLITS if len(lengths) == 1 else 44
    assert calls[1][0] == "gqa_decode_f16_d64" and calls[1][1] == (splits, 2 * len(lengths), 1)


def test_decode_plan():
    d = gqa.GqaDims(1, 1, 14, 2, 64, 256, False)
    p = gqa.gqa_plan(d, 2, scratch=False)
    assert (p.dec_splits, p.dec_counters) == (9, 2)       # ceil(257 / 32) splits
    assert p.dec_partial_bytes == 2 * 9 * 7 * 66 * 4
    assert p.workspace_bytes >= p.partial_offset + max(p.partial_bytes, p.dec_partial_bytes)
    assert gqa.gqa_plan(attrs.evolve(d, past_len=4095), 2, False).dec_splits == 64
    assert gqa.gqa_plan(attrs.evolve(d, batch=3, past_len=4095), 2, False).dec_splits == 44
    # one block per (batch, kv head) already fills the GPU: no splits, no counters
    big = gqa.gqa_plan(attrs.evolve(d, batch=200), 2, False)
    assert (big.dec_splits, big.dec_counters, big.dec_partial_bytes) == (1, 0, 0)
    for other in (dict(q_len=2), dict(head=80), dict(head=256, q_heads=8),
                  dict(q_heads=18, kv_heads=2)):
        assert gqa.gqa_plan(attrs.evolve(d, **other), 2, False).dec_splits == 0, other


def test_misaligned_presents_fall_back_to_the_attend_kernel():
    # one kv head, 65 rows of 128 bytes: the scratch present_value has 128 bytes of slack
    case = gc.decode((40,), 64, dtype=F16, rotary=0, outputs=("y", "pk", ""), hq=4, hkv=1)
    got, ref, bound, calls, _ = run_replay(case)
    assert calls[1][0] == "gqa_decode_short_f16_d64"
    real = gqa._align
    try:       # the scratch present_value 8 bytes off a 16-byte boundary
        gqa._align = lambda n: real(n) + 8
        got, ref, bound, calls, _ = run_replay(case)
    finally:
        gqa._align = real
    assert calls[1][0] == "gqa_attend_f16_d64"
    assert_parity("misaligned", got, ref, bound.parity)


# ---------------------------------------------------------------- through a session

def _fake_session(model, **options):
    import onnx_ep
    from tests.helpers.gqa_replay import FakeGqaPlugin

    plug = FakeGqaPlugin()
    sess = onnx_ep.Session(model, providers=["fake", "cpu_reference"],
                           options=onnx_ep.SessionOptions(**options), plugins=plug.plugins())
    return sess, plug


@pytest.mark.parametrize("name,in_place", [("decode_shared", 1), ("decode_growing", 0),
                                           ("first_prompt_shared", 1), ("first_prompt", 0),
                                           ("next_prompt_shared", 1), ("y_only", 0)])
def test_a_session_plans_the_shared_buffer_in_place(name, in_place):
    """The planner asks aliases_at after sizing the presents: a shared buffer's presents
    are views of the pasts (the kernels write the new rows only), others get buffers."""
    import onnx_ep

    case = REPLAY_CASES[name]
    m, feeds = case.model(), case.feeds()
    sess, plug = _fake_session(m, capture="off")
    try:
        assert sess.placement_summary() == {"fake": 1}
        got = sess.run(None, feeds)
    finally:
        sess.close()
    ref = onnx_ep.Session(m, providers=["cpu_reference"]).run(None, feeds)
    assert_parity(name, [np.asarray(g) for g in got], ref, gqa.PARITY["float32"])
    assert plug.kernel.launches == [("gqa_kv_f32", in_place), ("gqa_attend_f32_d64", in_place)]


def test_a_total_the_plan_does_not_know_runs_on_the_host():
    import onnx

    case = REPLAY_CASES["decode_growing"]
    m = case.model()
    total = next(t for t in m.graph.initializer if t.name == "total_sequence_length")
    m.graph.initializer.remove(total)
    m.graph.input.append(onnx.helper.make_tensor_value_info(
        "total_sequence_length", onnx.TensorProto.INT32, []))
    sess, plug = _fake_session(m, capture="off")
    try:
        feeds = case.feeds() | {"total_sequence_length": np.array(case.total_len, np.int32)}
        sess.run(None, feeds)
        assert sess.placement_summary() == {"cpu_reference": 1} and not plug.kernel.launches
    finally:
        sess.close()


@pytest.mark.parametrize("name", ["decode_shared", "dec_qwen_batch"])
def test_captured_replays_on_the_fake_device_equal_eager_runs(name):
    import onnx_ep

    case = REPLAY_CASES[name]
    feeds = case.feeds()
    sess, _ = _fake_session(case.model(), capture="require")
    try:
        eager = sess.run(None, feeds, onnx_ep.RunOptions(capture="off"))
        for _ in range(3):
            replay = sess.run(None, feeds)
            assert all(np.asarray(a).tobytes() == np.asarray(b).tobytes()
                       for a, b in zip(replay, eager))
        assert sum(p["replays"] for p in sess.capture_report()["plans"]) >= 2
    finally:
        sess.close()


def test_a_genai_shared_buffer_model_generates_like_the_oracle():
    """tests/helpers/genai_models' GroupQueryAttention model (seqlens_k and
    total_sequence_length computed from attention_mask in the graph) fed as genai's
    SharedKV does: one buffer per layer bound as past input and present output."""
    import onnx_ep
    from tests.helpers import genai_models as gm

    w = gm.weights()
    sess, plug = _fake_session(gm.build_model(w, "gqa"))
    rt, cfg, max_length, prompt = plug.runtime, gm.CFG, 32, [5, 9, 3, 7]
    shape = (1, cfg["kv_heads"], max_length, cfg["head"])
    cache = {f"past_key_values.{i}.{kv}": onnx_ep.Tensor.from_numpy(
        np.zeros(shape, np.float32), "fake", runtime=rt)
        for i in range(cfg["layers"]) for kv in ("key", "value")}
    seq, out = list(prompt), []
    feeds = {"input_ids": np.array([prompt]), "attention_mask": np.ones((1, len(prompt)),
                                                                         np.int64),
             "position_ids": np.arange(len(prompt))[None]}
    try:
        for _ in range(8):
            b = sess.io_binding()
            for n, a in feeds.items():
                b.bind_input(n, a)
            b.bind_output("logits")
            for past, t in cache.items():
                b.bind_input(past, t)
                b.bind_output(past.replace("past_key_values", "present"), t)
            sess.run_with_iobinding(b)
            logits = b.get_outputs()[0].numpy()
            tok = int(np.argmax(logits[0, -1]))
            out.append(tok)
            seq.append(tok)
            mask = np.zeros((1, max_length), np.int64)
            mask[0, :len(seq)] = 1
            feeds = {"input_ids": np.array([[tok]]), "attention_mask": mask,
                     "position_ids": np.array([[len(seq) - 1]])}
        assert sess.placement_summary().get("fake") == cfg["layers"]
    finally:
        sess.close()
    assert out == gm.reference_greedy(w, prompt, 8)
    # every step updated the shared buffers in place
    assert {p for _, p in plug.kernel.launches} == {1}
