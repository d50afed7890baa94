"""GPU parity of CUDA com.microsoft::RotaryEmbedding and com.microsoft::MultiHeadAttention
against cpu_reference within each kernel's promise for the dtype: random shapes over the
attribute and optional-input combinations, positions read on the device (a captured
replay with new position values), scores in the workspace, and captured replays
byte-identical to eager runs.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_contrib_attention.py
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.helpers.cuda_family import FLOATS, check, check_replays_match_eager, random
from tests.helpers.oracle import ORACLE_IR_VERSION

pytestmark = pytest.mark.cuda
DT = list(FLOATS.values())
IDS = list(FLOATS)
MS = "com.microsoft"
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)


def _model(op: str, inputs: Sequence[tuple[str, np.ndarray | None]], n_outputs: int,
           **attrs: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One com.microsoft node; every given input fed (``None``: an omitted optional)."""
    names = [n if a is not None else "" for n, a in inputs]
    while names and names[-1] == "":
        names.pop()
    feeds = {n: a for n, a in inputs if a is not None}
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, domain=MS, name=op.lower(), **attrs)
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                        list(a.shape)) for n, a in feeds.items()]
    graph = helper.make_graph([node], op.lower(), vi,
                              [onnx.ValueInfoProto(name=o) for o in outs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                helper.make_opsetid(MS, 1)],
                          ir_version=ORACLE_IR_VERSION)
    return m, feeds


def _parity(op: str, dtype: Any):
    from onnx_ep.providers.cuda.kernels import contrib_attention as ca

    (k,) = [k for k in ca.KERNELS if k.key.op_type == op]
    return k.parity_for(dtype)


def _check(op, m, feeds, dtype, what):
    from onnx_ep import Session

    sess = Session(m, providers=["cuda"])
    try:
        assert sess.placement_summary() == {"cuda": 1}, sess.placement_summary()
    finally:
        sess.close()
    return check(m, feeds, _parity(op, dtype), what=what)


# ---------------------------------------------------------------- RotaryEmbedding

ROPE = "RotaryEmbedding"
# (input shape, num_heads, rotary_embedding_dim, max_len)
ROPE_SHAPES = [
    ((2, 5, 64), 4, 0, 32),          # (batch, seq, hidden), full rotation
    ((1, 1, 128), 2, 0, 64),         # one decode token
    ((2, 7, 96), 3, 16, 16),         # partial rotation: 16 of 32 channels
    ((2, 4, 5, 64), 0, 0, 16),       # (batch, heads, seq, head)
    ((1, 2, 3, 80), 0, 32, 8),       # 4-D, partial
    ((3, 9, 48), 0, 0, 24),          # no num_heads: head = 2 * cos_cache.shape[1]
]


def _rope(shape, heads, dim, max_len, dtype, interleaved, offset, seed=0):
    head = shape[-1] if len(shape) == 4 else (shape[2] // heads if heads else None)
    half = (dim or head) // 2 if head else 12
    if head is None:
        head = 2 * half
    batch, seq = shape[0], shape[2] if len(shape) == 4 else shape[1]
    rng = np.random.default_rng(seed)
    x = random(shape, dtype, seed=seed)
    cos, sin = random((max_len, half), dtype, seed=seed + 1), random((max_len, half), dtype,
                                                                     seed=seed + 2)
    if offset:
        pid = np.array([rng.integers(0, max_len - seq + 1)], I64)
    else:
        pid = rng.integers(0, max_len, (batch, seq)).astype(I64)
    attrs = {"interleaved": int(interleaved)}
    if heads:
        attrs["num_heads"] = heads
    if dim:
        attrs["rotary_embedding_dim"] = dim
    return _model(ROPE, [("x", x), ("pid", pid), ("cos", cos), ("sin", sin)], 1, **attrs)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("shape,heads,dim,max_len", ROPE_SHAPES)
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("offset", [False, True], ids=["pid-bs", "pid-offset"])
def test_rotary_embedding(cuda_device, dtype, shape, heads, dim, max_len, interleaved, offset):
    m, feeds = _rope(shape, heads, dim, max_len, dtype, interleaved, offset, seed=len(shape))
    _check(ROPE, m, feeds, dtype, f"{ROPE} {dtype} {shape} heads={heads} dim={dim} "
                                  f"interleaved={interleaved} offset={offset}")


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_rotary_captured_replays_read_new_positions_on_the_device(cuda_device, dtype):
    from onnx_ep import RunOptions, Session, SessionOptions

    m, feeds = _rope((2, 3, 64), 2, 0, 32, dtype, False, True, seed=7)
    ref = Session(m, providers=["cpu_reference"])
    sess = Session(m, providers=["cuda"], options=SessionOptions(capture="require"))
    try:
        for start in (0, 5, 29, 5):
            feeds = dict(feeds, pid=np.array([start], I64))
            eager = sess.run(None, feeds, RunOptions(capture="off"))
            replay = sess.run(None, feeds)
            assert np.asarray(replay[0]).tobytes() == np.asarray(eager[0]).tobytes()
            from onnx_ep.testing.ulp import judge

            d = judge(np.asarray(replay[0]), np.asarray(ref.run(None, feeds)[0]),
                      _parity(ROPE, dtype))
            assert d.kept, f"position {start}: {d.reason}"
        assert sum(p["replays"] for p in sess.capture_report()["plans"]) >= 1
    finally:
        sess.close()


# ---------------------------------------------------------------- MultiHeadAttention

MHA = "MultiHeadAttention"
# (batch, q_len, kv_len, past_len, heads, head, v_head)
MHA_SHAPES = [
    (2, 5, 5, 0, 4, 16, 16),         # self-attention prompt
    (1, 1, 1, 7, 2, 32, 32),         # one decode step over a cache
    (2, 3, 6, 0, 3, 8, 12),          # cross-attention, v_head != head
    (1, 4, 3, 5, 2, 64, 64),         # chunked prefill over a cache
]
#: "+"-joined: bias (input 3), causal (unidirectional), pad-lengths / pad-2d / pad-3d (the
#: key_padding_mask forms), ab-1h / ab-b1 (attention_bias broadcast over batch / heads),
#: scale (scale and mask_filter_value set)
MHA_OPTIONS = ["", "bias", "causal", "pad-lengths", "pad-2d", "pad-3d", "ab-1h", "ab-b1",
               "bias+pad-2d+ab-1h+causal", "pad-3d+scale", "bias+pad-lengths+causal"]


def _mha(b, s, kv, past, h, d, dv, dtype, opts, seed=0, n_outputs=3):
    rng = np.random.default_rng(seed)
    opts = set(opts.split("+"))
    total = past + kv
    q = random((b, s, h * d), dtype, seed=seed)
    k = random((b, kv, h * d), dtype, seed=seed + 1)
    v = random((b, kv, h * dv), dtype, seed=seed + 2)
    bias = random((2 * h * d + h * dv,), dtype, seed=seed + 3) if "bias" in opts else None
    pad = None
    if "pad-lengths" in opts:
        pad = rng.integers(1, total + 1, (b,)).astype(I32)
    elif "pad-2d" in opts:
        pad = rng.integers(0, 2, (b, total)).astype(I32)
    elif "pad-3d" in opts:
        pad = rng.integers(0, 2, (b, s, total)).astype(I32)
    ab = None
    if "ab-1h" in opts:
        ab = random((1, h, s, total), dtype, seed=seed + 4)
    elif "ab-b1" in opts:
        ab = random((b, 1, s, total), dtype, seed=seed + 4)
    pk = random((b, h, past, d), dtype, seed=seed + 5) if past else None
    pv = random((b, h, past, dv), dtype, seed=seed + 6) if past else None
    attrs: dict[str, Any] = {"num_heads": h}
    if "causal" in opts:
        attrs["unidirectional"] = 1
    if "scale" in opts:
        attrs["scale"] = 0.3
        attrs["mask_filter_value"] = -1e4 / 3
    return _model(MHA, [("q", q), ("k", k), ("v", v), ("bias", bias), ("pad", pad),
                        ("attn_bias", ab), ("past_key", pk), ("past_value", pv)],
                  n_outputs, **attrs)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("dims", MHA_SHAPES, ids=[str(s) for s in MHA_SHAPES])
@pytest.mark.parametrize("opts", MHA_OPTIONS)
def test_multi_head_attention(cuda_device, dtype, dims, opts):
    m, feeds = _mha(*dims, dtype, opts, seed=sum(dims))
    got = _check(MHA, m, feeds, dtype, f"{MHA} {dtype} {dims} {opts}")
    b, s, kv, past, h, d, dv = dims
    assert [g.shape for g in got] == [(b, s, h * dv), (b, h, past + kv, d),
                                      (b, h, past + kv, dv)]


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_multi_head_attention_output_only(cuda_device, dtype):
    m, feeds = _mha(2, 3, 4, 0, 2, 16, 16, dtype, "bias", seed=3, n_outputs=1)
    _check(MHA, m, feeds, dtype, f"{MHA} {dtype} output only")


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_multi_head_attention_scores_in_the_workspace(cuda_device, dtype):
    # 12,000 keys: a float32 scores row (48 KB) does not fit the shared-memory budget
    m, feeds = _mha(1, 2, 12000, 0, 2, 16, 16, dtype, "bias+pad-2d", seed=4)
    _check(MHA, m, feeds, dtype, f"{MHA} {dtype} scores in the workspace")


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_multi_head_attention_captured_replays_equal_eager_runs(cuda_device, dtype):

    m, feeds = _mha(2, 1, 1, 6, 2, 32, 32, dtype, "bias+pad-lengths+causal", seed=5)
    check_replays_match_eager(m, feeds)
