"""GPU parity of CUDA com.microsoft::GroupQueryAttention against cpu_reference within the
kernel's promise per dtype (gqa.PARITY): decode over a shared buffer (updated in place) and
over a growing cache, first prompts (right-padded batches), subsequent prompts, rotary
(half-split, interleaved, partial, position_ids), local windows, softcap, attention_bias,
head_sink / smooth_softmax, packed QKV, presents left out, a Qwen2-0.5B-like geometry
(14 q heads, 2 kv heads) at head sizes 64 and 128; a shared-buffer decode loop through an
IOBinding; captured replays byte-identical to eager runs.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_gqa.py
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from tests.helpers import gqa_cases as gc
from tests.helpers.cuda_family import BF16, check_replays_match_eager, record_launches

pytestmark = pytest.mark.cuda
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
QWEN = dict(hq=14, hkv=2)


def _promise(dtype):
    from onnx_ep.providers.cuda.kernels.gqa import PARITY

    return PARITY[np.dtype(dtype).name]


def _on_cuda(m, **kw):
    from onnx_ep import Session

    sess = Session(m, providers=["cuda"], **kw)
    assert sess.placement_summary() == {"cuda": 1}, sess.placement_summary()
    return sess


def check(case: gc.GqaCase, what: str = "", eager: bool = False) -> list[np.ndarray]:
    """Run ``case`` on cuda (``eager``: capture off) and on cpu_reference; every output
    within the promise."""
    from onnx_ep import RunOptions, Session
    from onnx_ep.testing.ulp import judge

    m, feeds = case.model(), case.feeds()
    sess = _on_cuda(m)
    try:
        opts = RunOptions(capture="off") if eager else None
        got = [np.asarray(g) for g in sess.run(None, feeds, opts)]
    finally:
        sess.close()
    ref = Session(m, providers=["cpu_reference"]).run(None, feeds)
    promise = _promise(case.dtype)
    assert len(got) == len(ref)
    for i, (g, r) in enumerate(zip(got, ref)):
        r = np.asarray(r)
        assert g.dtype == r.dtype and g.shape == r.shape, (what, i, g.shape, r.shape)
        d = judge(g, r, promise)
        assert d.kept, (f"{what or case} output {i}: {d.reason} (promise {promise}; max ulp "
                        f"{d.max_ulp}, max abs {d.max_abs})")
    return got


DT = [F16, F32]
IDS = ["f16", "f32"]


# ---------------------------------------------------------------- decode

@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("head", [64, 128])
@pytest.mark.parametrize("rotary", [None, 0, 1], ids=["no-rope", "rope", "rope-interleaved"])
def test_decode_shared_buffer(cuda_device, dtype, head, rotary):
    check(gc.decode((1000,), 1024, dtype=dtype, head=head, rotary=rotary, **QWEN))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("head", [64, 128])
def test_decode_shared_batch_of_different_lengths(cuda_device, dtype, head):
    check(gc.decode((5, 700, 1024), 1024, dtype=dtype, head=head, rotary=0, **QWEN))
    check(gc.decode((1, 33, 300), 512, total=300, dtype=dtype, head=head, rotary=1, **QWEN))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("head", [64, 128])
def test_decode_growing_cache(cuda_device, dtype, head):
    check(gc.decode_growing((7, 64, 33), dtype=dtype, head=head, rotary=0, **QWEN))
    check(gc.decode_growing((129,), dtype=dtype, head=head, **QWEN))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_decode_long_context_splits(cuda_device, dtype):
    check(gc.decode((4000, 4096, 1), 4096, dtype=dtype, rotary=0, **QWEN))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("window", [1, 32, 4096])
def test_decode_local_window(cuda_device, dtype, window):
    check(gc.decode((2000, 20), 2048, dtype=dtype, rotary=0,
                    attrs={"local_window_size": window}, **QWEN))


# ---------------------------------------------------------------- prompts

@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("head", [64, 128])
@pytest.mark.parametrize("capacity", [0, 256], ids=["no-past", "shared"])
def test_first_prompt_right_padded(cuda_device, dtype, head, capacity):
    check(gc.first_prompt((37, 9, 1), capacity=capacity, dtype=dtype, head=head, rotary=0,
                          **QWEN))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_long_first_prompt(cuda_device, dtype):
    check(gc.first_prompt((300,), capacity=512, dtype=dtype, rotary=1, **QWEN))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("head", [64, 128])
@pytest.mark.parametrize("capacity", [0, 160], ids=["growing", "shared"])
def test_subsequent_prompt(cuda_device, dtype, head, capacity):
    check(gc.next_prompt(9, (120, 47), capacity=capacity, dtype=dtype, head=head, rotary=0,
                         **QWEN))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_prompt_local_window_and_bidirectional(cuda_device, dtype):
    check(gc.first_prompt((64, 40), dtype=dtype, attrs={"local_window_size": 16}, **QWEN))
    check(gc.first_prompt((24, 24), dtype=dtype, attrs={"causal": 0}, **QWEN))


# ---------------------------------------------------------------- options

OPTIONS = {
    "softcap": dict(attrs={"softcap": 2.0}),
    "scale": dict(attrs={"scale": 0.05}),
    "bias_sink": dict(bias=True, sink=True),
    "smooth_softmax": dict(attrs={"smooth_softmax": 1}),
    "packed": dict(packed=True, rotary=1),
    "position_ids64": dict(rotary=0, position_ids="int64"),
    "position_ids32": dict(rotary=1, position_ids="int32"),
    "partial_rotary": dict(rotary=0, rotary_dim=32),
    "y_only": dict(outputs=("y",)),
    "mha_heads": dict(hq=4, hkv=4),
    "head80": dict(head=80, rotary=0),
    "head256": dict(head=256, hq=8, hkv=2, rotary=1),
}


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_options_in_decode_and_prompt(cuda_device, dtype, name):
    kw = QWEN | OPTIONS[name]
    check(gc.decode((300, 77), 320, dtype=dtype, **kw), f"{name} decode")
    check(gc.next_prompt(5, (60, 12), dtype=dtype, **kw), f"{name} prompt")
    check(gc.first_prompt((21, 8), dtype=dtype, **kw), f"{name} first prompt")


@pytest.mark.parametrize("maker", [
    lambda: gc.decode((900, 20), 1024, rotary=1, **QWEN),
    lambda: gc.next_prompt(7, (80, 9), rotary=0, **QWEN),
    lambda: gc.first_prompt((33, 5), capacity=64, rotary=0, head=128, **QWEN),
], ids=["decode", "prompt", "first-prompt"])
def test_bfloat16(cuda_device, maker):
    check(attrs.evolve(maker(), dtype=BF16))


# ---------------------------------------------------------------- launches and routes

def test_a_shared_decode_step_is_two_launches_writing_one_row(cuda_device, monkeypatch):
    from onnx_ep import RunOptions
    from onnx_ep.providers.cuda.kernels.base import grid_1d

    launched = record_launches(monkeypatch)

    def launches_of(case):
        sess = _on_cuda(case.model())
        try:
            launched.clear()
            sess.run(None, case.feeds(), RunOptions(capture="off"))
        finally:
            sess.close()
        return [x[:3] for x in launched]

    # in place: the new key/value rows only (1 x 2 kv heads x 64), then the one-block
    # decode kernel (256 rows fit it): one block per (batch 1 x 2 kv heads)
    assert launches_of(gc.decode((200,), 256, dtype=F16, rotary=0, **QWEN)) == [
        ("gqa_kv_f16", grid_1d(2 * 64), (256, 1, 1)),
        ("gqa_decode_short_f16_d64", (1, 2, 1), (256, 1, 1))]
    # more rows: the split decode kernel, ceil(1025 / 32) splits x (batch 1 x 2 kv heads)
    assert launches_of(gc.decode((1000,), 1024, dtype=F16, rotary=0, **QWEN)) == [
        ("gqa_kv_f16", grid_1d(2 * 64), (256, 1, 1)),
        ("gqa_decode_f16_d64", (33, 2, 1), (128, 1, 1))]


# ---------------------------------------------------------------- the decode kernel

@pytest.fixture
def launches(monkeypatch):
    """The symbols CudaKernel.launch is called with (capture off: every run launches)."""
    return record_launches(monkeypatch)


def present_rows(case: gc.GqaCase) -> int:
    """Rows of the call's present buffers (the workspace's, past + new, when left out)."""
    if "present_key" not in case.outputs:
        return case.capacity + case.q_len
    return case.total if case.cache == "growing" else case.capacity


def check_decode(case: gc.GqaCase, launches: list, what: str = "") -> None:
    """``case`` within the promise, its attention run by the decode kernel of its present
    rows: gqa_decode_short_<sfx>_d<head> up to SHORT_MAX_KEYS, else gqa_decode_<sfx>_d<head>."""
    from onnx_ep.providers.cuda.kernels.base import suffix
    from onnx_ep.providers.cuda.kernels.gqa_plan import SHORT_MAX_KEYS

    launches.clear()
    check(case, what, eager=True)
    short = present_rows(case) <= SHORT_MAX_KEYS
    want = f"gqa_decode_{'short_' if short else ''}{suffix(np.dtype(case.dtype))}_d{case.head}"
    names = [x[0] for x in launches if x[0].startswith(("gqa_decode", "gqa_attend"))]
    assert names == [want], (what, names)


DT3, IDS3 = [F16, BF16, F32], ["f16", "bf16", "f32"]


@pytest.mark.parametrize("dtype", DT3, ids=IDS3)
@pytest.mark.parametrize("head", [64, 128])
@pytest.mark.parametrize("keys", [1, 200, 4096])
@pytest.mark.parametrize("rotary", [None, 0, 1], ids=["no-rope", "rope", "rope-interleaved"])
def test_decode_kernel_keys(cuda_device, launches, dtype, head, keys, rotary):
    check_decode(gc.decode((keys,), max(keys, 64), dtype=dtype, head=head, rotary=rotary,
                           **QWEN), launches, f"{keys} keys")


@pytest.mark.parametrize("dtype", DT3, ids=IDS3)
@pytest.mark.parametrize("head", [64, 128])
def test_decode_kernel_batch_of_different_lengths(cuda_device, launches, dtype, head):
    check_decode(gc.decode((1, 200, 4096), 4096, dtype=dtype, head=head, rotary=0, **QWEN),
                 launches, "batch 3 shared")
    check_decode(gc.decode((130, 255, 7), 256, dtype=dtype, head=head, rotary=1, **QWEN),
                 launches, "batch 3 qwen capacity")
    check_decode(gc.decode_growing((7, 64, 33), dtype=dtype, head=head, rotary=0, **QWEN),
                 launches, "batch 3 growing")


@pytest.mark.parametrize("dtype", DT3, ids=IDS3)
@pytest.mark.parametrize("window", [1, 31, 200, 5000])
@pytest.mark.parametrize("capacity", [4096, 256])
def test_decode_kernel_windows(cuda_device, launches, dtype, window, capacity):
    check_decode(gc.decode((capacity, 200, 1), capacity, dtype=dtype, rotary=1,
                           attrs={"local_window_size": window}, **QWEN), launches)


DECODE_OPTIONS = {
    "softcap_scale": dict(attrs={"softcap": 2.0, "scale": 0.05}),
    "bias_sink": dict(bias=True, sink=True),
    "smooth_softmax": dict(attrs={"smooth_softmax": 1}),
    "packed": dict(packed=True, rotary=1),
    "position_ids": dict(rotary=0, position_ids="int64"),
    "partial_rotary": dict(rotary=1, rotary_dim=32),
    "y_only": dict(outputs=("y",)),
    "bidirectional": dict(attrs={"causal": 0}),
    "mha_heads": dict(hq=4, hkv=4),
    "rep8": dict(hq=16, hkv=2, head=128),
}


@pytest.mark.parametrize("dtype", DT3, ids=IDS3)
@pytest.mark.parametrize("name", sorted(DECODE_OPTIONS))
@pytest.mark.parametrize("capacity", [256, 320], ids=["short", "split"])
def test_decode_kernel_options(cuda_device, launches, dtype, name, capacity):
    kw = QWEN | DECODE_OPTIONS[name]
    check_decode(gc.decode((250, 77, 1), capacity, dtype=dtype, **kw), launches, name)


def test_decode_heads_it_does_not_cover_use_the_attend_kernel(cuda_device, launches):
    for kw in (dict(head=80, rotary=0), dict(hq=18, hkv=2), dict(head=256, hq=8, hkv=2)):
        launches.clear()
        check(gc.decode((300, 77), 320, dtype=F16, **(QWEN | kw)), str(kw), eager=True)
        names = [x[0] for x in launches]
        assert not any(n.startswith("gqa_decode") for n in names), (kw, names)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_shared_buffer_decode_loop_through_an_io_binding(cuda_device, dtype):
    """Decode steps with one device buffer bound as past input and present output (what
    genai's SharedKV does), against the reference fed its own presents back."""
    import onnx_ep
    from onnx_ep.testing.ulp import judge

    case = gc.decode((40, 7), 64, dtype=dtype, rotary=0, **QWEN)
    m = case.model()
    arrays = case.arrays()
    sess = _on_cuda(m)
    ref_sess = onnx_ep.Session(m, providers=["cpu_reference"])
    cache = {n: onnx_ep.Tensor.from_numpy(arrays[n], "cuda") for n in ("past_key", "past_value")}
    ref_cache = {n: arrays[n].copy() for n in ("past_key", "past_value")}
    rng = np.random.default_rng(11)
    lengths = np.array(case.lengths)
    promise = _promise(dtype)
    try:
        for step in range(6):
            feeds = {n: rng.standard_normal(arrays[n].shape).astype(dtype)
                     for n in ("query", "key", "value")}
            feeds["seqlens_k"] = (lengths - 1).astype(np.int32)
            b = sess.io_binding()
            for n, a in feeds.items():
                b.bind_input(n, a)
            b.bind_output("y")     # first: get_outputs() follows the binding order
            for past, present in (("past_key", "present_key"), ("past_value", "present_value")):
                b.bind_input(past, cache[past])
                b.bind_output(present, cache[past])
            sess.run_with_iobinding(b)
            y = np.asarray(b.get_outputs()[0].numpy())
            want = ref_sess.run(None, {**feeds, **ref_cache})
            d = judge(y, np.asarray(want[0]), promise)
            assert d.kept, f"step {step}: {d.reason}"
            ref_cache = {"past_key": np.asarray(want[1]), "past_value": np.asarray(want[2])}
            lengths = lengths + 1
        for n in ("past_key", "past_value"):
            d = judge(cache[n].numpy(), ref_cache[n], promise)
            assert d.kept, f"{n}: {d.reason}"
    finally:
        sess.close()


@pytest.mark.parametrize("dtype", [F16, F32, BF16], ids=["f16", "f32", "bf16"])
@pytest.mark.parametrize("maker", [
    lambda d: gc.decode((1000, 3), 1024, dtype=d, rotary=0, **QWEN),
    lambda d: gc.decode((4096, 200, 1), 4096, dtype=d, rotary=1, **QWEN),
    lambda d: gc.decode((255,), 256, dtype=d, head=128, rotary=0, sink=True, **QWEN),
    lambda d: gc.decode_growing((70, 9), dtype=d, rotary=1, **QWEN),
    lambda d: gc.first_prompt((40, 11), capacity=64, dtype=d, rotary=0, **QWEN),
], ids=["decode-shared", "decode-4096", "decode-head128-sink", "decode-growing",
        "first-prompt"])
def test_captured_replays_equal_eager_runs_bit_for_bit(cuda_device, dtype, maker):

    case = maker(dtype)
    feeds = case.feeds()
    check_replays_match_eager(case.model(), feeds)
