"""cpu_reference's com.microsoft transformer ops (GroupQueryAttention, MultiHeadAttention,
RotaryEmbedding, SkipLayerNormalization) against onnxruntime CPU on random shapes.

Tolerances (docs/PARITY.md, "Contrib ops: attention"): onnxruntime computes float32
attention with float32 GEMMs and float16 attention partly in float16; the reference
accumulates in float64 and widens float16 to float32, so float32 compares within
``rtol=1e-4, atol=2e-5`` and float16 within a few float16 ulps of the output's magnitude.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.errors import NodeError
from tests.helpers.oracle import ORACLE_IR_VERSION, ort_version, run_ort, run_ours

MS = "com.microsoft"
TOL = {np.float32: dict(rtol=1e-4, atol=2e-5), np.float16: dict(rtol=4e-3, atol=4e-3)}
GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k",
              "total_sequence_length", "cos_cache", "sin_cache", "position_ids",
              "attention_bias", "head_sink")


def _seed(*parts: Any) -> int:
    """A per-case seed stable across processes (``hash`` of a str is salted)."""
    return zlib.crc32(repr(parts).encode())


def _needs_ort() -> None:
    pytest.importorskip("onnxruntime")
    if ort_version() < (1, 32):
        pytest.skip("the contrib attention ops were checked against onnxruntime 1.32")


def _model(op: str, inputs: Sequence[tuple[str, np.ndarray | None]], outputs: Sequence[str],
           **attrs: Any) -> onnx.ModelProto:
    """A one-node com.microsoft model; an input given as None is a missing optional."""
    names = [n if a is not None else "" for n, a in inputs]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, list(outputs), domain=MS, **attrs)
    graph = helper.make_graph(
        [node], f"{op}_test",
        [helper.make_tensor_value_info(n, onnx_elem_type(a.dtype), a.shape)
         for n, a in inputs if a is not None],
        [helper.make_empty_tensor_value_info(o) for o in outputs if o])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", 21),
                                            helper.make_opsetid(MS, 1)])


def _both(model: onnx.ModelProto, inputs: Sequence[tuple[str, np.ndarray | None]]):
    feeds = {n: a for n, a in inputs if a is not None}
    return run_ours(model, feeds), run_ort(model, feeds)


def _close(ours: np.ndarray, ref: np.ndarray, dtype: Any, what: str) -> None:
    assert ours.dtype == ref.dtype and ours.shape == ref.shape, what
    np.testing.assert_allclose(ours.astype(np.float64), ref.astype(np.float64),
                               err_msg=what, **TOL[dtype])


# ---------------------------------------------------------------- GroupQueryAttention

def _caches(rng: np.random.Generator, rows: int, half: int, dtype: Any):
    theta = rng.uniform(0, 1, half) ** 2
    angles = np.arange(rows)[:, None] * theta[None, :]
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


class GqaCase:
    """One GQA configuration, run as a prefill and then decode steps on both runtimes,
    each feeding its own present back as past."""

    def __init__(self, rng: np.random.Generator, *, dtype: Any, batch: int, hq: int, hkv: int,
                 head: int, packed: bool, shared: int, rotary: int | None = None,
                 **attrs: Any) -> None:
        self.rng, self.dtype, self.batch, self.hq, self.hkv = rng, dtype, batch, hq, hkv
        self.head, self.packed, self.shared, self.attrs = head, packed, shared, attrs
        self.caches = None
        if rotary is not None:
            self.attrs.update(do_rotary=1, rotary_interleaved=rotary)
            self.caches = _caches(rng, 64, head // 2, dtype)

    def _x(self, *shape: int) -> np.ndarray:
        return self.rng.standard_normal(shape).astype(self.dtype)

    def inputs(self, q_len: int, past: Any, lengths: np.ndarray, total: int) -> list[Any]:
        b, h = self.batch, self.head
        if self.packed:
            qkv = [self._x(b, q_len, (self.hq + 2 * self.hkv) * h), None, None]
        else:
            qkv = [self._x(b, q_len, self.hq * h), self._x(b, q_len, self.hkv * h),
                   self._x(b, q_len, self.hkv * h)]
        rest = [None, None] if past is None else list(past)
        rest += [(lengths - 1).astype(np.int32), np.array(total, np.int32)]
        rest += list(self.caches) if self.caches else []
        return list(zip(GQA_INPUTS, qkv + rest))

    def step(self, q_len, past_ours, past_ort, lengths, total, extra=()):
        inputs = self.inputs(q_len, past_ours, lengths, total) + list(extra)
        model = _model("GroupQueryAttention", inputs, ["y", "pk", "pv"], num_heads=self.hq,
                       kv_num_heads=self.hkv, **self.attrs)
        feeds = {n: a for n, a in inputs if a is not None}
        ours = run_ours(model, feeds)
        if past_ort is not None:
            feeds.update(past_key=past_ort[0], past_value=past_ort[1])
        return ours, run_ort(model, feeds)

    def check(self, ours, ref, q_valid: np.ndarray, kv_valid: np.ndarray, what: str) -> None:
        """Output rows of valid queries; present rows of valid keys (padding unspecified)."""
        for b in range(self.batch):
            _close(ours[0][b, :q_valid[b]], ref[0][b, :q_valid[b]], self.dtype,
                   f"{what}: output, entry {b}")
            for i, name in ((1, "present_key"), (2, "present_value")):
                assert ours[i].shape == ref[i].shape, f"{what}: {name} shape"
                _close(ours[i][b, :, :kv_valid[b]], ref[i][b, :, :kv_valid[b]], self.dtype,
                       f"{what}: {name}, entry {b}")

    def run(self, lengths: Sequence[int], decode_steps: int = 2, capacity: int = 0) -> None:
        """Prefill right-padded prompts of ``lengths``, then ``decode_steps`` tokens each."""
        lengths = np.array(lengths)
        prompt = int(lengths.max())
        past = None
        if self.shared:
            zeros = np.zeros((self.batch, self.hkv, capacity, self.head), self.dtype)
            past = (zeros, zeros.copy())
        ours, ref = self.step(prompt, past, past, lengths, prompt)
        self.check(ours, ref, lengths, lengths, "prefill")
        for step in range(decode_steps):
            lengths = lengths + 1
            ours, ref = self.step(1, ours[1:], ref[1:], lengths, int(lengths.max()))
            self.check(ours, ref, np.ones_like(lengths), lengths, f"decode {step}")


GQA_CASES = {
    "basic": dict(),
    "packed": dict(packed=True),
    "rotary": dict(rotary=0),
    "rotary_interleaved": dict(rotary=1),
    "packed_rotary": dict(packed=True, rotary=1),
    "window": dict(local_window_size=3),
    "softcap": dict(softcap=2.5),
    "scale": dict(scale=0.3),
    "smooth_softmax": dict(smooth_softmax=1),
    "mha_heads": dict(hq=2, hkv=2),
    "bidirectional": dict(causal=0),
    "everything": dict(packed=True, rotary=0, local_window_size=4, softcap=3.0, scale=0.2),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shared", [0, 1], ids=["growing", "shared_buffer"])
@pytest.mark.parametrize("name", sorted(GQA_CASES))
def test_gqa_prefill_then_decode_matches_ort(name: str, shared: int, dtype: Any) -> None:
    _needs_ort()
    rng = np.random.default_rng(_seed(name, shared, np.dtype(dtype).name))
    kw = dict(batch=1, hq=4, hkv=2, head=16, packed=False) | GQA_CASES[name]
    case = GqaCase(rng, dtype=dtype, shared=shared, **kw)
    case.run([int(rng.integers(2, 7))], capacity=12)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shared", [0, 1], ids=["growing", "shared_buffer"])
@pytest.mark.parametrize("extra", [{}, {"rotary": 0}, {"local_window_size": 2, "packed": True}])
def test_gqa_batch_of_different_lengths_matches_ort(extra, shared: int, dtype: Any) -> None:
    _needs_ort()
    rng = np.random.default_rng(7 + shared)
    kw = dict(batch=3, hq=6, hkv=2, head=16, packed=False) | extra
    GqaCase(rng, dtype=dtype, shared=shared, **kw).run([5, 2, 4], decode_steps=3, capacity=10)


@pytest.mark.parametrize("seed", range(6))
def test_gqa_random_shapes_match_ort(seed: int) -> None:
    _needs_ort()
    rng = np.random.default_rng(100 + seed)
    hkv = int(rng.integers(1, 3))
    kw = dict(batch=int(rng.integers(1, 4)), hkv=hkv, hq=hkv * int(rng.integers(1, 4)),
              head=int(rng.choice([16, 32])), packed=bool(rng.integers(0, 2)),
              shared=int(rng.integers(0, 2)), dtype=np.float32)
    if rng.integers(0, 2):
        kw["rotary"] = int(rng.integers(0, 2))
    if rng.integers(0, 2):
        kw["local_window_size"] = int(rng.integers(1, 6))
    case = GqaCase(rng, **kw)
    lengths = rng.integers(1, 8, case.batch)
    case.run(lengths.tolist(), decode_steps=2, capacity=int(lengths.max()) + 4)


def test_gqa_attention_bias_and_head_sink_match_ort() -> None:
    _needs_ort()
    rng = np.random.default_rng(3)
    case = GqaCase(rng, dtype=np.float32, batch=2, hq=4, hkv=2, head=16, packed=False,
                   shared=0, softcap=2.0)
    bias = rng.standard_normal((2, 1, 5, 5)).astype(np.float32)
    sink = rng.standard_normal(4).astype(np.float32)
    extra = [("cos_cache", None), ("sin_cache", None), ("position_ids", None),
             ("attention_bias", bias), ("head_sink", sink)]
    ours, ref = case.step(5, None, None, np.array([5, 5]), 5, extra)
    case.check(ours, ref, np.array([5, 5]), np.array([5, 5]), "bias + sink")


def test_gqa_rotary_position_ids_match_ort() -> None:
    _needs_ort()
    rng = np.random.default_rng(4)
    case = GqaCase(rng, dtype=np.float32, batch=2, hq=2, hkv=1, head=16, packed=False,
                   shared=0, rotary=0)
    pids = np.array([[7], [3]], np.int64)
    extra = [("position_ids", pids)]
    past = tuple(rng.standard_normal((2, 1, 4, 16)).astype(np.float32) for _ in range(2))
    ours, ref = case.step(1, past, past, np.array([5, 5]), 5, extra)
    case.check(ours, ref, np.array([1, 1]), np.array([5, 5]), "position_ids")


def _resident(t: int, capacity: int, window: int) -> int:
    """Rows a windowed cache holds after ``t`` positions (onnxruntime's rule, restated)."""
    reclaim = capacity - window + 1
    return t if t <= capacity else t - reclaim * -(-(t - capacity) // reclaim)


#: (q_len of each step): a prompt longer than the cache, decodes across its reclaim
#: boundaries, a chunk, more decodes
WINDOWED_STEPS = (7, 1, 1, 1, 1, 1, 1, 3, 1, 1, 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("window,slack,extra", [
    (4, 0, {}), (4, 3, {"rotary": 0}), (3, 2, {"packed": True, "softcap": 2.0}),
    (5, 1, {"rotary": 1, "smooth_softmax": 1})])
def test_gqa_windowed_cache_matches_ort_and_a_full_cache(window, slack, extra, dtype) -> None:
    """sliding_window_cache=1: a cache of C = W + slack rows holding the newest positions.
    Each step's output equals onnxruntime's and equals the same node over a full-length
    cache without the attribute; the present's resident rows equal onnxruntime's."""
    _needs_ort()
    rng = np.random.default_rng(_seed(window, slack, sorted(extra), np.dtype(dtype).name))
    cap = window + slack
    kw = dict(batch=1, hq=4, hkv=2, head=16, packed=False, shared=1) | extra
    case = GqaCase(rng, dtype=dtype, local_window_size=window, sliding_window_cache=1, **kw)
    full = GqaCase(rng, dtype=dtype, local_window_size=window, **kw)
    zeros = np.zeros((1, case.hkv, cap, case.head), dtype)
    past_ours = past_ort = (zeros, zeros.copy())
    long = np.zeros((1, case.hkv, sum(WINDOWED_STEPS), case.head), dtype)
    past_full = (long, long.copy())
    t = 0
    for i, q_len in enumerate(WINDOWED_STEPS):
        t += q_len
        inputs = case.inputs(q_len, past_ours, np.array([t]), t)
        feeds = {n: a for n, a in inputs if a is not None}
        model = _model("GroupQueryAttention", inputs, ["y", "pk", "pv"], num_heads=case.hq,
                       kv_num_heads=case.hkv, **case.attrs)
        ours = run_ours(model, feeds)
        ref = run_ort(model, feeds | {"past_key": past_ort[0], "past_value": past_ort[1]})
        long_in = [(n, dict(past_key=past_full[0], past_value=past_full[1]).get(n, a))
                   for n, a in inputs]
        whole = run_ours(_model("GroupQueryAttention", long_in, ["y", "pk", "pv"],
                                num_heads=full.hq, kv_num_heads=full.hkv, **full.attrs),
                         {n: a for n, a in long_in if a is not None})
        what = f"step {i} (S={q_len}, T={t})"
        _close(ours[0], ref[0], dtype, f"{what}: output vs onnxruntime")
        _close(ours[0], whole[0], dtype, f"{what}: output vs a full cache")
        rows = _resident(t, cap, window)
        for j in (1, 2):
            assert ours[j].shape == ref[j].shape == (1, case.hkv, cap, case.head)
            _close(ours[j][:, :, :rows], ref[j][:, :, :rows], dtype, f"{what}: present {j}")
            np.testing.assert_array_equal(ours[j][:, :, :rows], whole[j][:, :, t - rows:t])
        past_ours, past_ort, past_full = tuple(ours[1:]), tuple(ref[1:]), tuple(whole[1:])


@pytest.mark.parametrize("attrs,cap,match", [
    ({"local_window_size": 4}, 3, "capacity \\(3\\) must be at least local_window_size"),
    ({"local_window_size": -1}, 4, "local_window_size > 0"),
])
def test_gqa_windowed_cache_refusals(attrs, cap, match) -> None:
    rng = np.random.default_rng(6)
    case = GqaCase(rng, dtype=np.float32, batch=1, hq=2, hkv=1, head=16, packed=False,
                   shared=1, sliding_window_cache=1, **attrs)
    past = tuple(np.zeros((1, 1, cap, 16), np.float32) for _ in range(2))
    inputs = case.inputs(2, past, np.array([2]), 2)
    model = _model("GroupQueryAttention", inputs, ["y", "pk", "pv"], num_heads=2,
                   kv_num_heads=1, **case.attrs)
    with pytest.raises(NodeError, match=match):
        run_ours(model, {n: a for n, a in inputs if a is not None})


@pytest.mark.parametrize("extra,attrs,match", [
    ({"k_scale": np.ones(1, np.float32)}, {}, "k_scale"),
    ({"query_seqlens": np.array([3], np.int32)}, {}, "query_seqlens"),
    ({}, {"qk_output": 1}, "qk_output"),
    ({}, {"sliding_window_cache": 1, "local_window_size": 2}, "needs past_key"),
    ({}, {"num_heads": 3, "kv_num_heads": 2}, "multiple of kv_num_heads"),
])
def test_gqa_rejects_unsupported_forms(extra, attrs, match) -> None:
    rng = np.random.default_rng(5)
    case = GqaCase(rng, dtype=np.float32, batch=1, hq=2, hkv=1, head=16, packed=False,
                   shared=0)
    names = list(GQA_INPUTS) + ["k_scale", "v_scale", "q_norm_weight", "k_norm_weight",
                                "query_seqlens"]
    given = dict(case.inputs(3, None, np.array([3]), 3)) | extra
    ins = [(n, given.get(n)) for n in names]
    model = _model("GroupQueryAttention", ins, ["y"],
                   **({"num_heads": 2, "kv_num_heads": 1} | attrs))
    with pytest.raises(NodeError, match=match):
        run_ours(model, {n: a for n, a in ins if a is not None})


# ---------------------------------------------------------------- MultiHeadAttention

MHA_INPUTS = ("query", "key", "value", "bias", "key_padding_mask", "attention_bias",
              "past_key", "past_value")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("form", ["basic", "causal", "past", "causal_past", "bias",
                                  "mask_lengths", "mask_2d", "attention_bias", "cross"])
def test_mha_matches_ort(form: str, dtype: Any) -> None:
    _needs_ort()
    rng = np.random.default_rng(_seed(form, np.dtype(dtype).name))
    b, s, heads, head = 2, int(rng.integers(1, 6)), 2, 8
    kv = int(rng.integers(1, 6)) if form == "cross" else s
    past_len = 3 if "past" in form else 0
    total = past_len + kv

    def x(*shape):
        return rng.standard_normal(shape).astype(dtype)

    ins = dict(query=x(b, s, heads * head), key=x(b, kv, heads * head),
               value=x(b, kv, heads * head))
    if form == "bias":
        ins["bias"] = x(3 * heads * head)
    if form == "mask_lengths":
        ins["key_padding_mask"] = rng.integers(1, total + 1, b).astype(np.int32)
    if form == "mask_2d":
        mask = rng.integers(0, 2, (b, total)).astype(np.int32)
        mask[:, 0] = 1
        ins["key_padding_mask"] = mask
    if form == "attention_bias":
        ins["attention_bias"] = x(1, heads, s, total)
    if past_len:
        ins["past_key"], ins["past_value"] = x(b, heads, 3, head), x(b, heads, 3, head)
    inputs = [(n, ins.get(n)) for n in MHA_INPUTS]
    outputs = ["y", "pk", "pv"] if past_len else ["y"]
    model = _model("MultiHeadAttention", inputs, outputs, num_heads=heads,
                   unidirectional=int("causal" in form))
    ours, ref = _both(model, inputs)
    for i, (a, r) in enumerate(zip(ours, ref)):
        _close(a, r, dtype, f"{form} output {i}")


def test_mha_rejects_packed_qkv() -> None:
    q = np.zeros((1, 3, 2, 3, 8), np.float32)
    model = _model("MultiHeadAttention", [("query", q)], ["y"], num_heads=2)
    with pytest.raises(NodeError, match="packed QKV"):
        run_ours(model, {"query": q})


# ---------------------------------------------------------------- RotaryEmbedding

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["bsh", "bnsh", "bsh_partial", "bsh_no_heads"])
@pytest.mark.parametrize("pid_form", ["offset", "per_token"])
def test_rotary_embedding_matches_ort(layout: str, interleaved: int, pid_form: str,
                                      dtype: Any) -> None:
    _needs_ort()
    rng = np.random.default_rng(_seed(layout, interleaved, pid_form))
    b, s, heads, head = 2, int(rng.integers(1, 6)), 3, 16
    rot = 8 if layout == "bsh_partial" else head
    x = rng.standard_normal((b, heads, s, head) if layout == "bnsh"
                            else (b, s, heads * head)).astype(dtype)
    pid = (np.array([int(rng.integers(0, 8))], np.int64) if pid_form == "offset"
           else rng.integers(0, 16, (b, s)).astype(np.int64))
    cos, sin = _caches(rng, 20, rot // 2, dtype)
    attrs = dict(interleaved=interleaved)
    if layout == "bsh_partial":
        attrs |= dict(num_heads=heads, rotary_embedding_dim=rot)
    elif layout == "bsh":
        attrs |= dict(num_heads=heads)
    inputs = [("x", x), ("pid", pid), ("cos", cos), ("sin", sin)]
    (ours,), (ref,) = _both(_model("RotaryEmbedding", inputs, ["y"], **attrs), inputs)
    _close(ours, ref, dtype, "rotary")


# ---------------------------------------------------------------- SkipLayerNormalization

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("beta,bias", [(False, False), (True, False), (True, True),
                                       (False, True)])
@pytest.mark.parametrize("skip_shape", ["full", "broadcast"])
def test_skip_layer_normalization_all_outputs_match_ort(beta, bias, skip_shape, dtype) -> None:
    _needs_ort()
    rng = np.random.default_rng(11)
    b, s, hidden = 2, 3, 48

    def x(*shape):
        return rng.standard_normal(shape).astype(dtype)

    inputs = [("x", x(b, s, hidden)), ("skip", x(b, s, hidden) if skip_shape == "full"
                                       else x(s, hidden)),
              ("gamma", x(hidden)), ("beta", x(hidden) if beta else None),
              ("bias", x(hidden) if bias else None)]
    model = _model("SkipLayerNormalization", inputs, ["y", "mean", "inv", "sum"],
                   epsilon=1e-5)
    ours, ref = _both(model, inputs)
    for i, (a, r) in enumerate(zip(ours, ref)):
        tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 or i in (1, 2) else TOL[dtype]
        assert a.dtype == r.dtype and a.shape == r.shape, f"output {i}"
        np.testing.assert_allclose(a.astype(np.float64), r.astype(np.float64),
                                   err_msg=f"output {i}", **tol)
