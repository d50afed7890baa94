"""A shared-buffer model written the way onnxruntime-genai's builder writes it:
com.microsoft::GroupQueryAttention over one ``[batch, kv_heads, max_length, head]`` buffer
per layer, ``seqlens_k`` / ``total_sequence_length`` computed from ``attention_mask`` in the
graph, a ``[batch, max_length]`` mask in decode steps (one shape signature).

The model is checked against the numpy oracle on onnxruntime CPU (so the layout the
generator feeds is what GroupQueryAttention expects), then generated with onnx-ep on
cpu_reference and, on a GPU, on cuda (where GroupQueryAttention falls back to the
reference until the CUDA provider has a kernel for it).
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep import genai
from tests.helpers import genai_models as gm

PROMPT = [5, 9, 3, 7]


@pytest.fixture(scope="module")
def gqa_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gqa")
    return folder, gm.write_folder(folder, "gqa")


def _ort_greedy(model_path, prompt, new, max_length):
    """The generator's feeding rules, by hand, on onnxruntime CPU."""
    ort = pytest.importorskip("onnxruntime")
    s = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    past = {f"past_key_values.{i}.{k}": np.zeros((1, 2, max_length, 8), np.float32)
            for i in range(2) for k in ("key", "value")}
    seq, out = list(prompt), []
    feeds = {"input_ids": np.array([prompt]), "attention_mask": np.ones((1, len(prompt)),
                                                                         np.int64),
             "position_ids": np.arange(len(prompt))[None]}
    for _ in range(new):
        r = dict(zip(names, s.run(None, {**feeds, **past})))
        tok = int(np.argmax(r["logits"][0, -1]))
        out.append(tok)
        seq.append(tok)
        past = {n: r[n.replace("past_key_values", "present")] for n in past}
        mask = np.zeros((1, max_length), np.int64)
        mask[0, :len(seq)] = 1
        feeds = {"input_ids": np.array([[tok]]), "attention_mask": mask,
                 "position_ids": np.array([[len(seq) - 1]])}
    return out


def test_the_gqa_model_and_the_static_decode_mask_on_onnxruntime(gqa_folder):
    folder, w = gqa_folder
    assert _ort_greedy(folder / "model.onnx", PROMPT, 10, 32) == gm.reference_greedy(
        w, PROMPT, 10)


def test_gqa_shared_buffer_generation_on_cpu_reference(gqa_folder):
    folder, w = gqa_folder
    model = genai.Model(folder, providers=["cpu_reference"])
    res = genai.generate(model, PROMPT, max_new_tokens=10, max_length=32)
    assert res.tokens == [gm.reference_greedy(w, PROMPT, 10, eos=(47,))]
    decode = [s for s in res.stats.steps if s.kind == "decode"]
    assert len({s.signature for s in decode}) == 1
    batched = genai.generate(model, [[5, 9, 3, 7], [8, 4, 2, 6]], max_new_tokens=6)
    alone = [genai.generate(model, p, max_new_tokens=6).tokens[0]
             for p in ([5, 9, 3, 7], [8, 4, 2, 6])]
    assert batched.tokens == alone



def test_a_window_sized_cache_generates_what_a_full_one_does(tmp_path):
    """Layer 0 attends a window of 3 over a window-sized cache (sliding_window_cache, the
    config's sliding_window with cache_slack 2: 5 rows), layer 1 the whole sequence: the
    cache of layer 0 reclaims rows as the sequence passes 5, and every token equals the
    oracle's, which recomputes the whole sequence with the window."""
    w = gm.write_folder(tmp_path, "gqa", window=3, cache_slack=2)
    model = genai.Model(tmp_path, providers=["cpu_reference"])
    assert model.config.decoder.window_layers == (0,)
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=32)
    gen = genai.Generator(model, params)
    assert gen.kv.rows == [5, 32]
    assert [tuple(t.shape) for t in gen.kv.buffers[0]] == [(1, 2, 5, 8)] * 2
    gen.close()
    res = genai.generate(model, PROMPT, max_new_tokens=20, max_length=32)
    assert res.tokens == [gm.reference_greedy(w, PROMPT, 20, eos=(47,), window=3)]
    assert res.tokens != [gm.reference_greedy(w, PROMPT, 20, eos=(47,))]   # it matters
