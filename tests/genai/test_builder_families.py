"""onnxruntime-genai's builder on twelve model families: tiny random checkpoints saved with
transformers, built fp32 and int4 (``accuracy_level=0``) for the CPU, and generated
greedily by onnxruntime-genai and by onnx_ep.genai on cpu_reference: the same sequences
(slow; skipped without torch, transformers and onnxruntime_genai).

The families write different graphs: SkipLayerNormalization and partial rotary (Phi-2,
Nemotron), Gelu and scaled embeddings (Gemma), softcapped logits and attention with
window-sized caches on alternate layers (Gemma-2's ``sliding_window_cache``), per-head
Q/K norms (Qwen3, LFM2), LFM2's convolution layers (com.microsoft::CausalConvWithState, a
state fed back from step to step), multipliers (Granite), and the Llama-shaped rest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
og = pytest.importorskip("onnxruntime_genai")

from onnx_ep import genai  # noqa: E402

pytestmark = pytest.mark.slow

VOCAB = 256
PROMPT = [5, 9, 3, 7, 11, 13, 40, 77]
NEW = 24
BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            vocab_size=VOCAB, max_position_embeddings=256, initializer_range=0.2,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, num_key_value_heads=2)
#: family -> (config class, model class, options): sizes the builder accepts (a rotary
#: half of at least 8 for partial rotary, a window below max_length for Gemma-2)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"max_position_embeddings": 4096,
                                                "original_max_position_embeddings": 4096}),
    "phi": ("PhiConfig", "PhiForCausalLM", {"hidden_size": 128, "num_key_value_heads": 4,
                                            "partial_rotary_factor": 0.5}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 16}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 16, "sliding_window": 16}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {}),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", {}),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", {}),
    "nemotron": ("NemotronConfig", "NemotronForCausalLM", {"hidden_size": 128}),
    # attention layers only: its short-convolution layers need com.microsoft's
    # CausalConvWithState, which onnx-ep does not have
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM", {"layer_types": ["full_attention"] * 2}),
    # a convolution layer (com.microsoft::CausalConvWithState, its state fed back) and an
    # attention layer
    "lfm2-conv": ("Lfm2Config", "Lfm2ForCausalLM", {"layer_types": ["conv",
                                                                    "full_attention"]}),
}


def _checkpoint(folder: Path, family: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    cfg_name, model_name, extra = FAMILIES[family]
    cfg = getattr(transformers, cfg_name)(**(BASE | extra))
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(cfg).eval()
    with torch.no_grad():          # pad, bos, eos: logit 0 exactly, rarely the greedy choice
        model.get_output_embeddings().weight[[0, 1, 2]] = 0
    model.save_pretrained(folder)
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t3"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="t0", bos_token="t1", eos_token="t2",
        unk_token="t3").save_pretrained(folder)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("families")


def _build(root: Path, family: str, precision: str) -> Path:
    hf, out = root / f"hf-{family}", root / f"{family}-{precision}"
    if not (hf / "config.json").exists():
        _checkpoint(hf, family)
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o",
           str(out), "-p", precision, "-e", "cpu", "-c", str(root / "cache")]
    if precision == "int4":
        cmd += ["--extra_options", "accuracy_level=0"]
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, f"the builder failed on {family} {precision}:\n" \
        f"{(p.stdout + p.stderr)[-3000:]}"
    return out


def _greedy(module, model) -> tuple[list[list[int]], list[int]]:
    params = module.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + NEW, do_sample=False)
    gen = module.Generator(model, params)
    gen.append_tokens(PROMPT)
    steps = []
    while not gen.is_done():
        gen.generate_next_token()
        steps.append([int(t) for t in gen.get_next_tokens()])
    return steps, [int(t) for t in gen.get_sequence(0)]


@pytest.mark.parametrize("precision", ["fp32", "int4"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_sequences_equal_onnxruntime_genai(root, family, precision):
    folder = _build(root, family, precision)
    theirs = _greedy(og, og.Model(str(folder)))
    model = genai.Model(folder, providers=["cpu_reference"])
    try:
        ours = _greedy(genai, model)
    finally:
        model.close()
    assert ours == theirs
    assert len(theirs[1]) > len(PROMPT) + 1          # the comparison covered tokens
    if family == "gemma2":                            # its local layer keeps a window
        assert np.asarray(genai.load_config(folder).decoder.window_layers).size > 0


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_convolution_states_in_a_padded_batch_equal_onnxruntime_genai(root, precision):
    """LFM2 with a convolution layer, two prompts of different lengths (left-padded, as both
    pad a batch): each row's states carry its own tokens."""
    folder = _build(root, "lfm2-conv", precision)
    prompts = [PROMPT, PROMPT[:3]]
    width = len(PROMPT)
    padded = np.array([[0] * (width - len(p)) + list(p) for p in prompts], np.int32)
    sequences = []
    for module, model in ((og, og.Model(str(folder))),
                          (genai, genai.Model(folder, providers=["cpu_reference"]))):
        params = module.GeneratorParams(model)
        params.set_search_options(max_length=width + NEW, do_sample=False, batch_size=2)
        gen = module.Generator(model, params)
        gen.append_tokens(padded if module is og else prompts)
        while not gen.is_done():
            gen.generate_next_token()
        sequences.append([[int(t) for t in gen.get_sequence(b)] for b in range(2)])
    assert sequences[1] == sequences[0] and len(sequences[0][1]) > width + 1
