"""One decode step in flight (docs/GENAI.md): on a device, a greedy step queues the next
step, fed with its own ids on the device, before it waits for them.

Run on the fake device of tests/helpers/fake_device.py made to lag like a real one (work
runs only when something waits for it), with GroupQueryAttention, MatMul and the added
ArgMax on the device and the rest on cpu_reference: a read that does not wait gets stale
bytes, and with ``overrun`` (a wait also runs work queued after it) an ids buffer written
again before it is read gives the next step's ids. Every generation is compared with the
same generator on cpu_reference, where nothing is queued ahead.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import onnx_ep
from onnx_ep import genai
from tests.helpers import genai_models as gm
from tests.helpers.gqa_replay import FakeGqaPlugin

PROMPT = [5, 9, 3, 7]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("in_flight")
    return path, gm.write_folder(path, "gqa")


def _fake(path, overrun=False, **options):
    plug = FakeGqaPlugin(ops=("MatMul", "ArgMax"), lag=True)
    plug.runtime.overrun = overrun
    model = genai.Model(path, providers=["fake", "cpu_reference"], plugins=plug.plugins(),
                        options=onnx_ep.SessionOptions(**options) if options else None)
    return model, plug


def _decode(stats):
    return [s for s in stats.steps if s.kind == "decode"]


@pytest.mark.parametrize("overrun", [False, True])
@pytest.mark.parametrize("capture", ["off", "auto"])
def test_greedy_decode_with_a_step_in_flight_gives_the_oracles_tokens(folder, overrun,
                                                                       capture):
    path, w = folder
    model, plug = _fake(path, overrun, capture=capture)
    assert model.device == "fake:0" and model.session.placement_summary()["fake"] >= 9
    res = genai.generate(model, PROMPT, max_new_tokens=14, max_length=32)
    assert res.tokens == [gm.reference_greedy(w, PROMPT, 14, eos=(47,))]
    decode = _decode(res.stats)
    # the first decode step follows the prompt's ids, read on the host; every later one
    # was queued before the previous step's ids were read
    assert [s.ahead for s in decode] == [False] + [True] * (len(decode) - 1)
    assert res.stats.as_dict()["decode"]["ahead"] == len(decode) - 1
    assert len({s.signature for s in decode}) == 1
    assert {p for _, p in plug.kernel.launches} == {1}      # the cache written in place


def _pair(path, **search):
    """The same generation on the lagging fake device and on cpu_reference."""
    model, _ = _fake(path, overrun=True)
    oracle = genai.Model(path, providers=["cpu_reference"])
    return model, oracle


def _generator(model, prompts, **search):
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=32, batch_size=len(prompts), **search)
    gen = genai.Generator(model, params)
    gen.append_tokens(prompts)
    return gen


def _run(model, prompts, steps, eos=None, **search):
    if eos is not None:
        model.config = attrs.evolve(model.config, eos_token_ids=eos)
    gen = _generator(model, prompts, **search)
    logits = []
    for _ in range(steps):
        if gen.is_done():
            break
        gen.generate_next_token()
        logits.append(gen.get_logits())
    out = [gen.get_sequence(b).tolist() for b in range(len(prompts))]
    ahead = sum(s.ahead for s in _decode(gen.stats))
    gen.close()
    return out, logits, ahead


def test_a_batch_with_a_row_ending_early_matches_the_oracle(folder):
    path, _ = folder
    model, oracle = _pair(path)
    prompts = [[5, 9, 3, 7], [8, 4, 2, 6, 1]]
    plain, _, _ = _run(oracle, prompts, 12, eos=())
    # an EOS that row 0 meets at its 4th new token: row 0 stops, row 1 goes on
    eos = (plain[0][len(plain[0]) - 12 + 3],)
    want, _, _ = _run(oracle, prompts, 12, eos=eos)
    got, _, ahead = _run(model, prompts, 12, eos=eos)
    assert got == want and ahead >= 1
    assert want[0].count(eos[0]) >= 1 and want[0][-1] == 0      # padded after its EOS


def test_a_step_queued_on_the_final_eos_is_dropped(folder):
    """The step queued on the token that turns out to be the EOS ending the generation ran,
    but that EOS is not appended (onnxruntime-genai's rule): appending afterwards gives the
    oracle's tokens, as if the queued step had never run."""
    path, _ = folder
    model, oracle = _pair(path)
    plain, _, _ = _run(oracle, [PROMPT], 12, eos=())
    eos = (plain[0][len(PROMPT) + 5],)            # the 6th new token ends the generation
    results = []
    for m in (oracle, model):
        m.config = attrs.evolve(m.config, eos_token_ids=eos)
        gen = _generator(m, [PROMPT])
        while not gen.is_done():
            gen.generate_next_token()
        assert gen.get_next_tokens().tolist() == [eos[0]]
        gen.append_tokens([11, 12])
        for _ in range(4):
            gen.generate_next_token()
        results.append((gen.get_sequence(0).tolist(), _decode(gen.stats)))
        gen.close()
    (want, _), (got, decode) = results
    assert got == want and want[:len(PROMPT) + 7] == plain[0][:len(PROMPT) + 5] + [11, 12]
    assert sum(s.ahead for s in decode) >= 4      # the EOS step's was queued, then dropped


def test_rewind_with_a_step_in_flight(folder):
    """rewind_to while the next step is queued ahead: it waits for it, then the kept tokens
    go on as on cpu_reference."""
    path, _ = folder
    model, oracle = _pair(path)
    results = []
    for m in (oracle, model):
        m.config = attrs.evolve(m.config, eos_token_ids=())
        gen = _generator(m, [PROMPT])
        for _ in range(6):
            gen.generate_next_token()
        gen.rewind_to(7)
        gen.append_tokens([11, 12])
        for _ in range(4):
            gen.generate_next_token()
        results.append((gen.get_sequence(0).tolist(), sum(s.ahead for s in _decode(gen.stats))))
        gen.close()
    (want, _), (got, ahead) = results
    assert got == want and len(got) == 13 and ahead >= 4


@pytest.mark.parametrize("search", [{"do_sample": True, "top_k": 5, "random_seed": 3},
                                    {"min_length": 9}], ids=["sampling", "min_length"])
def test_steps_chosen_from_logits_are_not_queued_ahead_while_they_are(folder, search):
    path, _ = folder
    model, oracle = _pair(path)
    if "min_length" in search:
        # an EOS greedy never meets: the mask changes no token but reads the logits
        plain, _, _ = _run(oracle, [PROMPT], 12, eos=())
        search = {**search, "eos": (min(set(range(gm.CFG["vocab"])) - set(plain[0])),)}
    want, want_logits, _ = _run(oracle, [PROMPT], 12, **search)
    got, got_logits, ahead = _run(model, [PROMPT], 12, **search)
    assert got == want
    if "do_sample" in search:
        assert ahead == 0
    else:       # EOS masked until min_length (9 of 32 columns), greedy ahead after it
        assert 0 < ahead < 11
    _same_logits(got_logits, want_logits)


def _same_logits(got, want):
    assert len(got) == len(want) and [g is None for g in got] == [w is None for w in want]
    for a, b in zip(got, want):
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_logits_are_read_as_without_a_step_in_flight(folder):
    """get_logits() after a prompt gives the logits the first token comes from; between
    tokens, none are computed yet (the queued step's are not waited for), as on a
    generator that queues nothing."""
    path, _ = folder
    model, oracle = _pair(path)
    want, want_logits, _ = _run(oracle, [PROMPT], 8)
    got, got_logits, ahead = _run(model, [PROMPT], 8)
    assert got == want and ahead > 0
    _same_logits(got_logits, want_logits)
    first = []
    for m in (model, oracle):
        gen = _generator(m, [PROMPT])
        first.append(gen.get_logits())
        gen.close()
    np.testing.assert_allclose(first[0], first[1], rtol=1e-5, atol=1e-5)


def test_appending_after_generating_takes_the_queued_step(folder):
    """Continuous decoding: the step queued on the last token ran on that token, so the
    appended prompt follows it."""
    path, _ = folder
    model, oracle = _pair(path)
    out = []
    for m in (model, oracle):
        gen = _generator(m, [PROMPT])
        for _ in range(5):
            gen.generate_next_token()
        gen.append_tokens([11, 12])
        for _ in range(5):
            gen.generate_next_token()
        out.append(gen.get_sequence(0).tolist())
        gen.close()
    assert out[0] == out[1]


def test_close_waits_for_the_queued_step(folder):
    path, _ = folder
    model, plug = _fake(path)
    gen = _generator(model, [PROMPT])
    for _ in range(4):
        gen.generate_next_token()
    assert gen._queued          # a step on the last token is queued
    stream = model.session._device.stream
    assert stream.pending
    gen.close()
    assert not stream.pending and not gen._queued


def test_the_lagging_fake_device_catches_a_read_that_does_not_wait(folder):
    """The harness can fail: an output read before synchronize_outputs() is stale."""
    path, _ = folder
    model, plug = _fake(path)
    sess = model.session
    feeds = {"input_ids": np.array([PROMPT]), "attention_mask": np.ones((1, 4), np.int64),
             "position_ids": np.arange(4)[None]}
    b = sess.io_binding()
    for n, a in feeds.items():
        b.bind_input(n, a)
    b.bind_output(model.greedy_output, "fake")
    for name in sess.get_outputs():
        if name.name.startswith("present"):
            b.bind_output(name.name, "fake")
    for i in range(gm.CFG["layers"]):
        for kv in ("key", "value"):
            b.bind_input(f"past_key_values.{i}.{kv}", np.zeros(
                (1, gm.CFG["kv_heads"], 32, gm.CFG["head"]), np.float32))
    sess.run_with_iobinding(b, onnx_ep.RunOptions(synchronize=False))
    ids = b.get_outputs()[0]
    early = ids.numpy().copy()
    b.synchronize_outputs()
    late = ids.numpy()
    want = genai.Model(path, providers=["cpu_reference"]).session.run(
        [model.greedy_output], {**feeds, **{f"past_key_values.{i}.{kv}": np.zeros(
            (1, gm.CFG["kv_heads"], 32, gm.CFG["head"]), np.float32)
            for i in range(gm.CFG["layers"]) for kv in ("key", "value")}})[0]
    assert late.tolist() == want.tolist()
    assert early.tolist() != want.tolist()
