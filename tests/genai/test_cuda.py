"""Generation on the CUDA provider: the KV cache stays on the device, the tokens equal
cpu_reference's, and a shared buffer's decode steps replay one captured graph."""

from __future__ import annotations

import pytest

from onnx_ep import genai

pytestmark = pytest.mark.cuda
PROMPTS = [[5, 9, 3, 7], [8, 4]]


@pytest.fixture(scope="module")
def cuda() -> None:
    from onnx_ep.providers.cuda import driver

    support = driver.is_available()
    if not support:
        pytest.skip(f"CUDA unavailable: {support.reason}")


@pytest.mark.parametrize("layout", ["growing", "shared"])
def test_cuda_tokens_equal_cpu_reference_with_the_cache_on_the_device(cuda, folders, layout):
    expected = genai.generate(genai.Model(folders[layout], providers=["cpu_reference"]),
                              PROMPTS, max_new_tokens=20).tokens
    model = genai.Model(folders[layout], providers=["cuda"])
    assert model.device.startswith("cuda")
    ts = genai.stream(model, PROMPTS, max_new_tokens=20)
    steps = [t.tolist() for t in ts]
    kv = ts.generator.kv
    cache = kv.buffers[0][0] if kv.shared else next(iter(kv.pasts.values()))
    assert cache.device.startswith("cuda")
    ts.close()
    got = [[s[b] for s in steps][:len(expected[b])] for b in range(2)]
    assert got == expected
    captures = [s.capture for s in ts.stats.steps if s.kind == "decode"]
    if layout == "shared":
        assert ts.stats.as_dict()["decode"]["signatures"] == 1
        assert captures.count("captured") >= len(captures) - 3    # after warm-up and record
    assert "host" not in captures


def test_a_gqa_model_generates_on_cuda_as_on_cpu_reference(cuda, tmp_path):
    # every node on cuda (GroupQueryAttention appending to the shared buffer in place), the
    # decode steps replayed as one graph, the tokens the reference's
    import json

    import onnx

    from tests.helpers import genai_models as gm

    w = gm.weights()
    onnx.save(gm.build_model(w, "gqa"), str(tmp_path / "model.onnx"))
    (tmp_path / "genai_config.json").write_text(json.dumps(gm.genai_config("gqa")))
    model = genai.Model(tmp_path, providers=["cuda", "cpu_reference"])
    res = genai.generate(model, [5, 9, 3, 7], max_new_tokens=10, max_length=32)
    assert res.tokens == [gm.reference_greedy(w, [5, 9, 3, 7], 10, eos=(47,))]
    assert set(model.session.placement_summary()) == {"cuda"}
    captures = [s.capture for s in res.stats.steps if s.kind == "decode"]
    assert captures.count("captured") >= len(captures) - 3
