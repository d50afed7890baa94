"""Convolution layers with a state (LFM2's, com.microsoft::CausalConvWithState): the
generator feeds each run's present states to the next run, on cpu_reference and with one
decode step in flight on the lagging fake device, and drops or rewinds them with the tokens.
The oracle is the numpy model of tests/helpers/genai_conv.py, which recomputes the whole
sequence per token; onnxruntime-genai itself is compared on the builder's LFM2 models in
test_builder_families.py (slow)."""

from __future__ import annotations

import json

import attrs
import pytest

from onnx_ep import genai
from onnx_ep.errors import ModelError
from tests.helpers import genai_conv as gc
from tests.helpers.gqa_replay import FakeGqaPlugin

PROMPT = [5, 9, 3, 7]


@pytest.fixture(scope="module", params=[True, False], ids=["shared", "growing"])
def folder(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("conv")
    return path, gc.write_folder(path, shared=request.param)


def _fake(path, overrun=False):
    plug = FakeGqaPlugin(ops=("MatMul", "ArgMax"), lag=True)
    plug.runtime.overrun = overrun
    return genai.Model(path, providers=["fake", "cpu_reference"], plugins=plug.plugins())


def _generator(model, prompt, eos=None):
    if eos is not None:
        model.config = attrs.evolve(model.config, eos_token_ids=eos)
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=40)
    gen = genai.Generator(model, params)
    gen.append_tokens(prompt)
    return gen


def test_greedy_tokens_equal_the_oracle(folder):
    path, w = folder
    res = genai.generate(genai.Model(path, providers=["cpu_reference"]), PROMPT,
                         max_new_tokens=16, max_length=40)
    assert res.tokens == [gc.reference_greedy(w, PROMPT, 16)]


@pytest.mark.parametrize("overrun", [False, True])
def test_with_a_step_in_flight_the_states_follow_the_tokens(folder, overrun):
    """A queued step reads the states of the step queued before it, not yet collected."""
    path, w = folder
    model = _fake(path, overrun)
    res = genai.generate(model, PROMPT, max_new_tokens=16, max_length=40)
    assert res.tokens == [gc.reference_greedy(w, PROMPT, 16)]
    ahead = res.stats.as_dict()["decode"]["ahead"]
    # ahead only where the KV cache is shared (the generator's rule)
    assert ahead >= 14 if model.config.search.past_present_share_buffer else ahead == 0


def test_a_step_queued_on_the_final_eos_leaves_the_states_as_before_it(folder):
    """The step queued on the EOS that ends the generation ran and wrote new states; they
    are dropped with it, so appending afterwards continues from the states before it."""
    path, w = folder
    plain = gc.reference_greedy(w, PROMPT, 12)
    # the first new token from the 4th on that is new: the generation ends there
    end = next(i for i in range(3, len(plain)) if plain[i] not in plain[:i])
    eos = (plain[end],)
    results = []
    for model in (genai.Model(path, providers=["cpu_reference"]), _fake(path, True)):
        gen = _generator(model, PROMPT, eos)
        while not gen.is_done():
            gen.generate_next_token()
        gen.append_tokens([11, 12])
        for _ in range(4):
            gen.generate_next_token()
        results.append(gen.get_sequence(0).tolist())
        gen.close()
    want = PROMPT + plain[:end] + [11, 12]
    want += gc.reference_greedy(w, want, 4)
    assert results == [want, want]


def test_rewind_runs_the_kept_tokens_again(folder):
    path, w = folder
    for model in (genai.Model(path, providers=["cpu_reference"]), _fake(path)):
        gen = _generator(model, PROMPT, eos=())
        for _ in range(8):
            gen.generate_next_token()
        gen.rewind_to(7)
        kept = gen.get_sequence(0).tolist()
        for _ in range(5):
            gen.generate_next_token()
        assert gen.get_sequence(0).tolist() == kept + gc.reference_greedy(w, kept, 5)
        gen.rewind_to(0)
        gen.append_tokens([8, 2])
        gen.generate_next_token()
        assert gen.get_sequence(0).tolist() == [8, 2] + gc.reference_greedy(w, [8, 2], 1)
        gen.close()


def test_a_model_without_the_state_names_is_refused(tmp_path):
    gc.write_folder(tmp_path)
    cfg = gc.genai_config(True)
    cfg["model"]["decoder"]["inputs"]["past_conv_names"] = "past_conv.%d"
    (tmp_path / "genai_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="past_conv.0"):
        genai.Model(tmp_path, providers=["cpu_reference"])


def test_a_state_length_other_than_conv_cache_size_is_refused(tmp_path):
    gc.write_folder(tmp_path)
    cfg = gc.genai_config(True)
    cfg["model"]["decoder"]["conv_cache_size"] = gc.K
    (tmp_path / "genai_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match=f"holds {gc.K - 1} positions .* conv_cache_size "
                                         f"{gc.K}"):
        genai.Model(tmp_path, providers=["cpu_reference"])
