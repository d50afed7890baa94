"""Same greedy tokens as onnxruntime-genai itself, when it is installed (slow; skipped
otherwise: onnx-ep never needs it)."""

from __future__ import annotations

import pytest

from onnx_ep import genai

PROMPT = [5, 9, 3, 7]


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["growing", "shared"])
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
