"""Generation on tiny decoders against a numpy re-implementation of the same model."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep import genai
from onnx_ep.errors import FeedError, ModelError
from onnx_ep.genai.model import GREEDY_OUTPUT
from onnx_ep.genai.search import filtered_probs, sample
from tests.helpers import genai_models as gm

LAYOUTS = ["growing", "shared"]
PROMPT = [5, 9, 3, 7]
EOS = 47


@pytest.fixture(params=LAYOUTS)
def model(request, folders):
    m = genai.Model(folders[request.param])
    yield m
    m.close()


def _loop(model, prompt, max_length, **search):
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=max_length, **search)
    gen = genai.Generator(model, params)
    gen.append_tokens(prompt)
    out = []
    while not gen.is_done():
        gen.generate_next_token()
        out.append(gen.get_next_tokens())
    gen.close()
    return gen, np.array(out)


def test_greedy_equals_the_numpy_greedy_loop(model, folders):
    expected = gm.reference_greedy(folders["weights"], PROMPT, 12, eos=(EOS,))
    res = genai.generate(model, PROMPT, max_new_tokens=12)
    assert res.tokens == [expected]
    # onnxruntime-genai's rule: the EOS that ends the last row is not in the sequence
    assert res.sequences[0] == PROMPT + (expected[:-1] if expected[-1] == EOS else expected)


def test_prefill_logits_match_the_oracle(model, folders):
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=8)
    gen = genai.Generator(model, params)
    gen.append_tokens(PROMPT)
    ref = gm.reference_logits(folders["weights"], np.array(PROMPT), np.ones(4, np.int64),
                              np.arange(4))[-1]
    np.testing.assert_allclose(gen.get_logits()[0], ref, rtol=1e-4, atol=1e-4)
    gen.close()


def test_stops_at_eos_and_pads_after_it(model, folders):
    expected = gm.reference_greedy(folders["weights"], PROMPT, 20, eos=(EOS,))
    assert expected[-1] == EOS and len(expected) < 20      # the fixture model meets EOS
    gen, steps = _loop(model, PROMPT, 40)
    # the EOS step is returned by get_next_tokens but not appended (onnxruntime-genai's rule)
    assert gen.is_done() and gen.length == len(PROMPT) + len(expected) - 1
    assert steps[:, 0].tolist() == expected
    assert gen.get_sequence(0).tolist() == PROMPT + expected[:-1]


def test_appending_after_the_eos_goes_on_from_the_token_before_it(model, folders):
    """The EOS that ended the generation is not in the sequence, and the model never took
    it: appended tokens follow the token before it, as a fresh prompt of the same tokens."""
    expected = gm.reference_greedy(folders["weights"], PROMPT, 20, eos=(EOS,))
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=40)
    gen = genai.Generator(model, params)
    gen.append_tokens(PROMPT)
    while not gen.is_done():
        gen.generate_next_token()
    assert gen.get_next_tokens().tolist() == [EOS]
    gen.append_tokens([11, 12])
    gen.generate_next_token()
    prefix = PROMPT + expected[:-1] + [11, 12]
    assert gen.get_sequence(0).tolist() == prefix + gen.get_next_tokens().tolist()
    assert gen.get_next_tokens().tolist() == \
        gm.reference_greedy(folders["weights"], prefix, 1, eos=(EOS,))
    gen.close()


def _generator(model, prompt, max_length=40):
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=max_length)
    gen = genai.Generator(model, params)
    gen.append_tokens(prompt)
    return gen


def _steps(gen, n):
    out = []
    for _ in range(n):
        if gen.is_done():
            break
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    return out


def test_rewind_to_goes_on_as_if_the_later_tokens_never_came(model):
    """rewind_to(n) keeps the first n tokens: greedy steps regenerate what followed, and
    appended tokens continue as a fresh prompt of the kept ones would."""
    gen = _generator(model, [5, 9, 3, 7, 11])
    first = _steps(gen, 8)
    seq = gen.get_sequence(0).tolist()
    assert len(first) >= 5 and gen.token_count() == len(seq) >= 10
    gen.rewind_to(8)
    assert gen.token_count() == 8 and gen.get_sequence(0).tolist() == seq[:8]
    assert _steps(gen, len(first) - 3) == first[3:]
    gen.rewind_to(6)
    gen.append_tokens([12, 4])
    fresh = _generator(model, seq[:6] + [12, 4])
    assert _steps(gen, 4) == _steps(fresh, 4)
    gen.rewind_to(0)
    gen.append_tokens([5, 9, 3, 7, 11])
    assert _steps(gen, 8) == first
    for g in (gen, fresh):
        g.close()


def test_rewind_to_refusals(model):
    gen = _generator(model, [5, 9, 3])
    with pytest.raises(FeedError, match="the sequence has 3 tokens"):
        gen.rewind_to(4)
    gen.close()
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=20, batch_size=2)
    two = genai.Generator(model, params)
    two.append_tokens([[5, 9, 3], [8, 4, 2]])
    with pytest.raises(FeedError, match="batch 1"):
        two.rewind_to(2)
    two.close()


def test_stops_at_max_length(model):
    gen, steps = _loop(model, PROMPT, 6)
    assert len(steps) == 2 and gen.get_sequence(0).size == 6


def test_sampling_is_deterministic_per_seed(model):
    kw = dict(max_new_tokens=10, do_sample=True, temperature=1.5, top_k=0, top_p=1.0)
    a = genai.generate(model, PROMPT, random_seed=7, **kw).tokens
    b = genai.generate(model, PROMPT, random_seed=7, **kw).tokens
    c = genai.generate(model, PROMPT, random_seed=8, **kw).tokens
    greedy = genai.generate(model, PROMPT, max_new_tokens=10).tokens
    assert a == b
    assert a != c or a != greedy


def test_top_k_one_and_tiny_top_p_are_greedy(model):
    greedy = genai.generate(model, PROMPT, max_new_tokens=8).tokens
    for kw in ({"top_k": 1}, {"top_k": 0, "top_p": 1e-6}):
        sampled = genai.generate(model, PROMPT, max_new_tokens=8, do_sample=True,
                                 random_seed=3, temperature=2.0, **kw).tokens
        assert sampled == greedy


def test_sampled_tokens_stay_inside_top_k_and_top_p():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((1, 40)).astype(np.float32)
    ids, p = filtered_probs(logits[0], 1.0, 5, 1.0)
    assert ids.tolist() == np.argsort(-logits[0])[:5].tolist()
    ids_p, p_p = filtered_probs(logits[0], 1.0, 0, 0.5)
    full = np.exp(logits[0] - logits[0].max())
    full /= full.sum()
    assert full[ids_p[:-1]].sum() < 0.5 <= full[ids_p].sum() + 1e-12
    assert np.isclose(p_p.sum(), 1.0)
    draws = {int(sample(logits, rng, top_k=5)[0]) for _ in range(200)}
    assert draws <= set(ids.tolist()) and len(draws) > 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_batch_with_different_prompt_lengths_equals_each_alone(folders, layout):
    m = genai.Model(folders[layout])
    prompts = [[5, 9, 3, 7, 11, 2], [8, 4]]
    alone = [genai.generate(m, p, max_new_tokens=8).tokens[0] for p in prompts]
    batched = genai.generate(m, prompts, max_new_tokens=8)
    assert batched.tokens == alone
    # right padding (a 2-D array padded with pad_token_id, onnxruntime-genai's rule)
    right = np.zeros((2, 6), np.int64)
    right[0], right[1, :2] = prompts[0], prompts[1]
    assert genai.generate(m, right, max_new_tokens=8).tokens == alone
    m.close()


def test_continuous_decoding_equals_one_prompt(model):
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=12)
    gen = genai.Generator(model, params)
    gen.append_tokens(PROMPT[:2])
    gen.append_tokens(PROMPT[2:])
    gen.generate_next_token()
    one = genai.generate(model, PROMPT, max_new_tokens=1).tokens[0]
    assert gen.get_next_tokens().tolist() == one
    gen.close()


def test_shared_buffer_decode_steps_have_one_signature_and_computed_feeds(folders):
    m = genai.Model(folders["shared"])
    res = genai.generate(m, [[5, 9, 3], [8]], max_new_tokens=6)
    decode = [s for s in res.stats.steps if s.kind == "decode"]
    assert len(decode) >= 4 and len({s.signature for s in decode}) == 1
    assert all(s.capture == "host" for s in res.stats.steps)     # cpu_reference: host plans
    params = genai.GeneratorParams(m)
    params.set_search_options(max_length=10, batch_size=2)
    gen = genai.Generator(m, params)
    gen.append_tokens([[5, 9, 3], [8]])
    gen.generate_next_token()
    f = gen.feeds(3, 4)
    assert f["attention_mask"].shape == (2, 10)                  # static in decode
    assert f["seqlens_k"].tolist() == [3, 1] and f["seqlens_k"].dtype == np.int32
    assert int(f["total_sequence_length"]) == 4
    assert f["position_ids"].tolist() == [[3], [1]]
    gen.close()
    m.close()


def test_growing_kv_decode_steps_grow(folders):
    res = genai.generate(genai.Model(folders["growing"]), PROMPT, max_new_tokens=4)
    assert len({s.signature for s in res.stats.steps}) == len(res.stats.steps)


def test_stream_yields_tokens_as_generate_returns_them(model):
    ts = genai.stream(model, PROMPT, max_new_tokens=6)
    streamed = list(ts)
    ts.close()
    assert streamed == genai.generate(model, PROMPT, max_new_tokens=6).tokens[0]
    d = ts.stats.as_dict()
    assert d["prefill"]["tokens"] == 4 and d["decode"]["steps"] == len(streamed) - 1
    assert d["decode"]["tokens_per_s"] > 0


def test_misuse_is_refused_with_clear_errors(model):
    params = genai.GeneratorParams(model)
    with pytest.raises(ModelError, match="num_beams"):
        params.set_search_options(num_beams=4)
    params.set_search_options(max_length=5)
    gen = genai.Generator(model, params)
    with pytest.raises(FeedError, match="append_tokens"):
        gen.generate_next_token()
    with pytest.raises(FeedError, match="max_length"):
        gen.append_tokens(list(range(1, 7)))
    with pytest.raises(FeedError, match="batch_size"):
        gen.append_tokens([[1, 2], [3, 4]])
    gen.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_greedy_ids_from_the_model_equal_the_argmax_of_its_logits(folders, layout):
    m = genai.Model(folders[layout])
    assert m.greedy_output == GREEDY_OUTPUT
    assert GREEDY_OUTPUT in [o.name for o in m.session.get_outputs()]
    params = genai.GeneratorParams(m)
    params.set_search_options(max_length=14, batch_size=2, min_length=9)
    gen = genai.Generator(m, params)
    gen.append_tokens([[5, 9, 3, 7, 11, 2], [8, 4]])          # left-padded second row
    steps = 0
    while not gen.is_done():
        if not gen._ready:
            gen._run()                      # what generate_next_token runs first
        logits = gen.get_logits()
        assert gen._greedy.tolist() == np.argmax(logits, axis=-1).tolist()
        masked = gen.length < 9
        gen.generate_next_token()
        if masked:      # min_length: the choice comes from the host's masked logits
            assert EOS not in gen.get_next_tokens().tolist()
        steps += 1
    assert steps == 14 - 6
    gen.close()
    m.close()


def test_model_without_a_greedy_output_chooses_on_the_host(folders, monkeypatch):
    m = genai.Model(folders["shared"])
    expected = genai.generate(m, PROMPT, max_new_tokens=10).tokens
    monkeypatch.setattr(genai.Model, "greedy_output", property(lambda self: None))
    assert genai.generate(m, PROMPT, max_new_tokens=10).tokens == expected
    m.close()


def test_the_greedy_output_is_added_only_where_it_fits():
    import onnx
    from onnx import TensorProto, helper

    from onnx_ep.genai.model import with_greedy_output

    def graph(opset, out="logits", extra=()):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8])
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 1, 8])
        nodes = [helper.make_node("Relu", ["x"], [out]), *extra]
        return helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                                 opset_imports=[helper.make_opsetid("", opset)])

    m = graph(17)
    with_greedy_output(m, "logits")
    assert [o.name for o in m.graph.output] == ["logits", GREEDY_OUTPUT]
    assert m.graph.node[-1].op_type == "ArgMax"
    onnx.checker.check_model(m)
    with_greedy_output(m, "logits")                       # once only
    assert len(m.graph.output) == 2
    for m in (graph(10), graph(17, out="scores"),
              graph(17, extra=[helper.make_node("Neg", ["x"], [GREEDY_OUTPUT])])):
        before = len(m.graph.node)
        with_greedy_output(m, "logits")
        assert len(m.graph.node) == before and len(m.graph.output) == 1
