"""Same greedy tokens as onnxruntime-genai itself, when it is installed (slow; skipped
otherwise: onnx-ep never needs it)."""

from __future__ import annotations

import pytest

from onnx_ep import genai

PROMPT = [5, 9, 3, 7]


# The shared-buffer fixture takes seqlens_k and total_sequence_length as graph inputs, which
# onnxruntime-genai 0.18 no longer feeds (its builder computes them from attention_mask
# inside the graph; test_builder_parity.py compares shared buffers on such models).
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["growing"])
def test_greedy_tokens_equal_onnxruntime_genai(folders, layout):
    og = pytest.importorskip("onnxruntime_genai")
    model = og.Model(str(folders[layout]))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + 12, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(PROMPT)
    while not gen.is_done():
        gen.generate_next_token()
    theirs = [int(t) for t in gen.get_sequence(0)]
    ours = genai.generate(genai.Model(folders[layout]), PROMPT, max_new_tokens=12)
    assert ours.sequences[0] == theirs


@pytest.mark.slow
@pytest.mark.parametrize("prompts", [[PROMPT], [PROMPT, [8, 4, 2, 6]]], ids=["one", "two"])
def test_step_by_step_tokens_and_sequences_equal_onnxruntime_genai(folders, prompts):
    """get_next_tokens at every step and get_sequence at the end, through an EOS: the step
    that ends the last row is returned but not appended; a row that ended earlier gets
    pad tokens."""
    og = pytest.importorskip("onnxruntime_genai")
    import numpy as np

    def run(module, model):
        params = module.GeneratorParams(model)
        params.set_search_options(max_length=24, do_sample=False, batch_size=len(prompts))
        gen = module.Generator(model, params)
        gen.append_tokens(np.array(prompts, np.int32) if len(prompts) > 1 else prompts[0])
        steps = []
        while not gen.is_done():
            gen.generate_next_token()
            steps.append([int(t) for t in gen.get_next_tokens()])
        return steps, [[int(t) for t in gen.get_sequence(b)] for b in range(len(prompts))]

    theirs = run(og, og.Model(str(folders["growing"])))
    ours = run(genai, genai.Model(folders["growing"]))
    assert ours == theirs
    assert 47 in [t for step in theirs[0] for t in step]      # the fixture meets its EOS


@pytest.mark.slow
def test_rewind_to_and_token_count_equal_onnxruntime_genai(folders):
    """Generate, rewind_to, append and generate again: the same tokens and counts."""
    og = pytest.importorskip("onnxruntime_genai")

    def run(module, model):
        params = module.GeneratorParams(model)
        params.set_search_options(max_length=30, do_sample=False)
        gen = module.Generator(model, params)
        gen.append_tokens(PROMPT)
        counts = []
        for _ in range(5):
            gen.generate_next_token()
        counts.append(gen.token_count())
        gen.rewind_to(6)
        counts.append(gen.token_count())
        gen.append_tokens([12, 4])
        for _ in range(4):
            gen.generate_next_token()
        counts.append(gen.token_count())
        return counts, [int(t) for t in gen.get_sequence(0)]

    theirs = run(og, og.Model(str(folders["growing"])))
    assert run(genai, genai.Model(folders["growing"])) == theirs
