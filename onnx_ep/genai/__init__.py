"""Generation with onnxruntime-genai-format model folders (docs/GENAI.md).

The shape is onnxruntime-genai's Python API where that is natural::

    from onnx_ep import genai

    model = genai.Model("qwen2.5-0.5b-int4")          # genai_config.json + model.onnx
    params = genai.GeneratorParams(model)
    params.set_search_options(max_length=64, do_sample=False)
    gen = genai.Generator(model, params)              # reserves the KV cache (kv_cache role)
    gen.append_tokens(model.tokenizer.encode("Hello"))
    while not gen.is_done():
        gen.generate_next_token()
        print(gen.get_next_tokens()[0])

plus ``genai.generate(model, prompt, max_new_tokens=...)`` and
``for token in genai.stream(model, prompt, ...)``. Names are imported on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "GenaiConfig": "onnx_ep.genai.config", "SearchOptions": "onnx_ep.genai.config",
    "load_config": "onnx_ep.genai.config",
    "Model": "onnx_ep.genai.model",
    "Generator": "onnx_ep.genai.generator", "GeneratorParams": "onnx_ep.genai.generator",
    "Tokenizer": "onnx_ep.genai.tokenizer", "TokenizerStream": "onnx_ep.genai.tokenizer",
    "GenerationResult": "onnx_ep.genai.api", "TokenStream": "onnx_ep.genai.api",
    "generate": "onnx_ep.genai.api", "stream": "onnx_ep.genai.api",
    "GenerationStats": "onnx_ep.genai.stats", "StepStat": "onnx_ep.genai.stats",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'onnx_ep.genai' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
