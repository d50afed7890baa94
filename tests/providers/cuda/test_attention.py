"""GPU parity of CUDA Attention against cpu_reference within the kernel's promise for the
dtype: every onnx node-suite Attention case, then larger random configurations (GQA, 3-D,
masks, past/present, softcap, causal, windows, nonpad_kv_seqlen, qk outputs, scores in
the workspace, softmax_precision).

Run: python -m pytest -q -m cuda tests/providers/cuda/test_attention.py
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.cuda_family import BF16, check, model, random
from tests.providers.cuda.test_attention_host import CASES, DECLINED

pytestmark = pytest.mark.cuda
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _on_cuda(m):
    from onnx_ep import Session

    sess = Session(m, providers=["cuda"])
    assert sess.placement_summary().get("cuda", 0) >= 1, sess.placement_summary()
    return sess


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_suite_case_matches_the_reference(cuda_device, case):
    from onnx.backend.test.runner import _normalize_tensor

    from onnx_ep import Session
    from onnx_ep.core.kernel import Parity
    from onnx_ep.providers.cuda.kernels.attention import PARITY
    from onnx_ep.testing.ulp import judge

    if case.name in DECLINED:
        pytest.skip(f"declined on cuda: {DECLINED[case.name]}")
    graph = case.model.graph
    for inputs, _ in case.data_sets:
        feeds = dict(zip([i.name for i in graph.input], [_normalize_tensor(x) for x in inputs]))
        sess = Session(case.model, providers=["cuda"])
        assert sess.placement_summary() == {"cuda": 1}, sess.placement_summary()
        got = sess.run(None, feeds)
        want = Session(case.model, providers=["cpu_reference"]).run(None, feeds)
        q = feeds[graph.node[0].input[0]]
        promise: Parity = PARITY[q.dtype.name]
        for i, (g, r) in enumerate(zip(got, want)):
            d = judge(np.asarray(g), np.asarray(r), promise)
            assert d.kept, (f"{case.name} output {i}: {d.reason} (promise {promise}; max ulp "
                            f"{d.max_ulp}, max abs {d.max_abs})")


def _attn(q, k, v, *, mask=None, past=None, nonpad=None, n_outputs=1, opset=23, **attrs):
    """A one-node Attention model and its feeds (optional inputs left out with "")."""
    feeds = {"q": q, "k": k, "v": v}
    names = ["q", "k", "v"]
    optional = [("mask", mask), ("past_key", past[0] if past else None),
                ("past_value", past[1] if past else None), ("nonpad", nonpad)]
    last = max([i for i, (_, a) in enumerate(optional) if a is not None], default=-1)
    for i, (name, arr) in enumerate(optional[:last + 1]):
        if arr is None:
            names.append("")
        else:
            names.append(name)
            feeds[name] = arr
    return model("Attention", feeds, attrs, inputs=names, n_outputs=n_outputs,
                 opset=opset), feeds


def _qkv(b, hq, hkv, sq, skv, d, dv, dtype, seed=0, three_d=False):
    q = random((b, hq, sq, d), dtype, seed=seed)
    k = random((b, hkv, skv, d), dtype, seed=seed + 1)
    v = random((b, hkv, skv, dv), dtype, seed=seed + 2)
    if three_d:
        q = np.ascontiguousarray(q.transpose(0, 2, 1, 3).reshape(b, sq, hq * d))
        k = np.ascontiguousarray(k.transpose(0, 2, 1, 3).reshape(b, skv, hkv * d))
        v = np.ascontiguousarray(v.transpose(0, 2, 1, 3).reshape(b, skv, hkv * dv))
    return q, k, v


DTYPES = [F32, F16, BF16]
IDS = ["float32", "float16", "bfloat16"]


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("three_d", [False, True], ids=["4d", "3d"])
def test_gqa_causal_with_mask_and_past(cuda_device, dtype, three_d):
    b, hq, hkv, sq, skv, past_len, d, dv = 2, 8, 2, 37, 37, 19, 64, 48
    q, k, v = _qkv(b, hq, hkv, sq, skv, d, dv, dtype, three_d=three_d)
    past = (random((b, hkv, past_len, d), dtype, seed=7),
            random((b, hkv, past_len, dv), dtype, seed=8))
    mask = random((b, 1, sq, past_len + skv), dtype, seed=9)
    attrs = {"is_causal": 1}
    if three_d:
        attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    m, feeds = _attn(q, k, v, mask=mask, past=past, n_outputs=3, **attrs)
    _on_cuda(m)
    check(m, feeds, what=f"gqa causal past {dtype} {'3d' if three_d else '4d'}")


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_qk_matmul_outputs_with_softcap_and_bool_mask(cuda_device, dtype, mode):
    q, k, v = _qkv(1, 4, 4, 9, 300, 32, 32, dtype, seed=3)
    mask = np.random.default_rng(4).random((9, 300)) > 0.3
    mask[2] = False                                   # a row with nothing to attend
    m, feeds = _attn(q, k, v, mask=mask, n_outputs=4, qk_matmul_output_mode=mode,
                     softcap=3.0, scale=0.2)
    _on_cuda(m)
    got = check(m, feeds, what=f"qk mode {mode} {dtype}")
    assert not np.asarray(got[0], np.float32)[0, :, 2].any()   # the dead row is 0


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_long_rows_use_the_workspace(cuda_device, dtype):
    # 12,000 float32 scores (48 KB) do not fit shared memory: the step workspace holds them
    from onnx_ep.providers.cuda.kernels import attention as att

    skv = 12000
    q, k, v = _qkv(1, 2, 1, 3, skv, 64, 64, dtype, seed=5)
    d = att.attention_dims(q.shape, k.shape, v.shape, None, {})
    assert att.attention_plan(d, att.compute_dtype(dtype, None)).workspace_bytes > 0
    m, feeds = _attn(q, k, v, is_causal=0)
    _on_cuda(m)
    check(m, feeds, what=f"workspace {dtype}")


def test_float_mask_of_another_dtype_short_rows_and_neg_inf(cuda_device):
    q, k, v = _qkv(2, 3, 3, 5, 20, 16, 8, F32, seed=6)
    mask = random((3, 1, 12), F16, seed=10)           # 12 < 20 columns: the rest masked
    mask[1, 0, :] = -np.inf                           # head 1: every row dead
    m, feeds = _attn(q, k, v, mask=mask, n_outputs=4, qk_matmul_output_mode=2)
    check(m, feeds, what="fp16 mask on float32")


@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
def test_nonpad_kv_seqlen_causal_decode_and_windows(cuda_device, dtype):
    q, k, v = _qkv(3, 4, 2, 1, 40, 32, 32, dtype, seed=11)
    nonpad = np.array([40, 17, 1], np.int64)
    m, feeds = _attn(q, k, v, nonpad=nonpad, is_causal=1, opset=24)
    check(m, feeds, what="nonpad decode")
    q, k, v = _qkv(3, 4, 2, 6, 40, 32, 32, dtype, seed=12)
    nonpad = np.array([30, 6, 3], np.int64)           # last batch: offset -3, early rows dead
    m, feeds = _attn(q, k, v, nonpad=nonpad, is_causal=1, opset=24)
    check(m, feeds, what="nonpad prefill")
    m, feeds = _attn(q, k, v, is_causal=1, left_window_size=5, right_window_size=-1,
                     opset=25)
    check(m, feeds, what="left window")
    m, feeds = _attn(q, k, v, left_window_size=3, right_window_size=2, opset=25)
    check(m, feeds, what="bidirectional window")


@pytest.mark.parametrize("prec", [1, 11], ids=["FLOAT", "DOUBLE"])
@pytest.mark.parametrize("dtype", [F16, BF16, F32], ids=["float16", "bfloat16", "float32"])
def test_softmax_precision(cuda_device, dtype, prec):
    q, k, v = _qkv(2, 4, 4, 7, 65, 40, 40, dtype, seed=13)
    m, feeds = _attn(q, k, v, softmax_precision=prec, is_causal=1, n_outputs=4,
                     qk_matmul_output_mode=3)
    check(m, feeds, what=f"softmax_precision={prec} {dtype}")


def test_float64(cuda_device):
    q, k, v = _qkv(1, 2, 1, 4, 33, 16, 16, np.float64, seed=14)
    m, feeds = _attn(q, k, v, is_causal=1, softcap=5.0)
    check(m, feeds, what="float64")


def test_runs_are_deterministic(cuda_device):
    from onnx_ep import Session

    q, k, v = _qkv(2, 8, 2, 33, 700, 64, 64, F32, seed=15)
    m, feeds = _attn(q, k, v, is_causal=1)
    sess = Session(m, providers=["cuda"])
    a = sess.run(None, feeds)[0]
    b = Session(m, providers=["cuda"]).run(None, feeds)[0]
    assert a.tobytes() == b.tobytes() == sess.run(None, feeds)[0].tobytes()
