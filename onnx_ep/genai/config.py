"""``genai_config.json``: onnxruntime-genai's description of a decoder model folder.

The file is what onnxruntime-genai's model builder writes next to ``model.onnx``
(``python -m onnxruntime_genai.models.builder``); its fields are read here into frozen
values (docs/GENAI.md). Only what a decoder-only generation loop needs is read; unknown
fields are ignored, as onnxruntime-genai ignores them.

::

    {"model": {"decoder": {"filename": "model.onnx", "head_size": 64, "hidden_size": 896,
                           "num_attention_heads": 14, "num_key_value_heads": 2,
                           "num_hidden_layers": 24,
                           "inputs": {"input_ids": "input_ids", ...,
                                      "past_key_names": "past_key_values.%d.key", ...},
                           "outputs": {"logits": "logits", ...},
                           "session_options": {"provider_options": [{"cuda": {}}]}},
               "eos_token_id": [151643, 151645], "pad_token_id": 151643,
               "context_length": 32768, "vocab_size": 151936, "type": "qwen2"},
     "search": {"max_length": 32768, "do_sample": false, "past_present_share_buffer": true,
                "num_beams": 1, "temperature": 1.0, "top_k": 1, "top_p": 1.0}}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from onnx_ep.errors import ModelError

CONFIG_NAME = "genai_config.json"

#: onnxruntime-genai's provider names (``provider_options`` keys) -> onnx-ep providers
PROVIDER_NAMES = {"cpu": "cpu_reference", "cuda": "cuda"}


def _ids(value: Any) -> tuple[int, ...]:
    """An id or a list of ids (``eos_token_id`` is either) as a tuple."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    return (int(value),)


#: genai_config.json's layer_types whose only state is the KV cache, and the convolution
#: layers' type (a state fed back from step to step)
ATTENTION_LAYERS = frozenset(("full_attention", "sliding_attention", "attention"))
CONV_LAYER = "conv"


@attrs.frozen
class SearchOptions:
    """The ``search`` section: defaults a :class:`GeneratorParams` starts from."""

    max_length: int = 0                    #: prompt + new tokens; 0: the context length
    min_length: int = 0
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    num_beams: int = 1
    num_return_sequences: int = 1
    past_present_share_buffer: bool = False
    random_seed: int = -1                  #: -1: seeded from the OS
    batch_size: int = 1

    def evolve(self, **changes: Any) -> SearchOptions:
        """A copy with ``changes``, checked (:meth:`check`)."""
        unknown = set(changes) - {a.name for a in attrs.fields(SearchOptions)}
        if unknown:
            raise TypeError(f"unknown search option(s) {', '.join(sorted(unknown))}; known: "
                            f"{', '.join(a.name for a in attrs.fields(SearchOptions))}")
        out = attrs.evolve(self, **changes)
        out.check()
        return out

    def check(self) -> None:
        """:raises ModelError: a value onnx-ep cannot search with (beam search among them)."""
        if self.num_beams != 1:
            raise ModelError(f"num_beams={self.num_beams}: onnx_ep.genai runs greedy search "
                             f"and sampling only (num_beams 1); beam search is not implemented")
        if self.num_return_sequences != 1:
            raise ModelError(f"num_return_sequences={self.num_return_sequences}: only 1 is "
                             f"supported")
        if self.temperature <= 0:
            raise ModelError(f"temperature must be > 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ModelError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0 or self.batch_size < 1 or self.max_length < 0:
            raise ModelError(f"top_k {self.top_k}, batch_size {self.batch_size} and "
                             f"max_length {self.max_length} must be non-negative (batch >= 1)")


@attrs.frozen
class DecoderConfig:
    """``model.decoder``: the ONNX file, the names of its inputs and outputs, the shapes."""

    filename: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_size: int
    hidden_size: int = 0
    input_ids: str = "input_ids"
    attention_mask: str = "attention_mask"
    position_ids: str = "position_ids"
    past_key_names: str = "past_key_values.%d.key"
    past_value_names: str = "past_key_values.%d.value"
    seqlens_k: str = "seqlens_k"
    total_sequence_length: str = "total_sequence_length"
    logits: str = "logits"
    present_key_names: str = "present.%d.key"
    present_value_names: str = "present.%d.value"
    #: onnxruntime-genai provider names from ``session_options.provider_options``
    providers: tuple[str, ...] = ()
    #: ``sliding_window``: the window of the layers in ``window_layers`` (0: none), whose
    #: GroupQueryAttention keeps a window-sized cache (``sliding_window_cache=1``), and the
    #: rows such a cache holds beyond the window (``cache_slack``; 0 takes the default)
    window_size: int = 0
    window_layers: tuple[int, ...] = ()
    cache_slack: int = 0
    #: ``layer_types`` (empty: every layer attention) and the names of the convolution
    #: layers' states (LFM2): ``[batch, channels, conv_cache_size]``, each step's present
    #: the next step's past
    layer_types: tuple[str, ...] = ()
    past_conv_names: str = "past.%d.conv"
    present_conv_names: str = "present.%d.conv"
    conv_cache_size: int = 0

    @property
    def kv_layers(self) -> tuple[int, ...]:
        """The layers with a KV cache (attention layers)."""
        return tuple(i for i in range(self.num_hidden_layers)
                     if not self.layer_types or self.layer_types[i] in ATTENTION_LAYERS)

    @property
    def conv_layers(self) -> tuple[int, ...]:
        """The convolution layers, whose state is fed back step by step."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == CONV_LAYER)

    def conv_names(self, layer: int) -> tuple[str, str]:
        return self.past_conv_names % layer, self.present_conv_names % layer

    def past_names(self, layer: int) -> tuple[str, str]:
        return self.past_key_names % layer, self.past_value_names % layer

    def present_names(self, layer: int) -> tuple[str, str]:
        return self.present_key_names % layer, self.present_value_names % layer


@attrs.frozen
class GenaiConfig:
    """A model folder's ``genai_config.json``."""

    folder: Path
    decoder: DecoderConfig
    search: SearchOptions
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    pad_token_id: int = 0
    context_length: int = 0
    vocab_size: int = 0
    model_type: str = ""

    @property
    def model_path(self) -> Path:
        return self.folder / self.decoder.filename

    def onnx_ep_providers(self) -> list[str]:
        """The config's providers as onnx-ep names (``cpu_reference`` when none is listed,
        as onnxruntime-genai runs on the CPU then); unknown names pass through unchanged, so
        the session names what is available."""
        names = [PROVIDER_NAMES.get(p, p) for p in self.decoder.providers]
        return names or ["cpu_reference"]


def load_config(folder: str | os.PathLike[str]) -> GenaiConfig:
    """Read ``folder/genai_config.json``.

    :raises ModelError: no such file, malformed JSON, a missing required field, search
        options onnx-ep does not run (``num_beams`` > 1), or ``layer_types`` other than
        attention and convolution layers.
    """
    folder = Path(folder)
    path = folder / CONFIG_NAME
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelError(f"{folder} has no {CONFIG_NAME}; a model folder is what "
                         f"onnxruntime-genai's builder writes (docs/GENAI.md)") from None
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from exc
    try:
        return _parse(folder, raw)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ModelError):
            raise
        raise ModelError(f"{path}: missing or malformed field {exc}; see onnxruntime-genai's "
                         f"config reference") from exc


def _parse(folder: Path, raw: dict[str, Any]) -> GenaiConfig:
    model = raw["model"]
    dec = model["decoder"]
    inputs, outputs = dec.get("inputs", {}), dec.get("outputs", {})
    provider_options = dec.get("session_options", {}).get("provider_options", [])
    providers = tuple(name for entry in provider_options for name in entry)
    names = {k: v for k, v in {**inputs, **outputs}.items() if isinstance(v, str)}
    known = {a.name for a in attrs.fields(DecoderConfig)}
    window = dec.get("sliding_window") or {}
    if window.get("slide_key_value_cache") or window.get("slide_inputs"):
        raise ModelError("sliding_window with slide_key_value_cache or slide_inputs (a cache "
                         "the runtime shifts itself, as onnxruntime-genai's QNN models have) "
                         "is not supported; models whose GroupQueryAttention keeps the "
                         "window (sliding_window_cache) are")
    kinds = tuple(str(t) for t in dec.get("layer_types", ()) or ())
    other = sorted({t for t in kinds if t not in ATTENTION_LAYERS and t != CONV_LAYER})
    if other:
        raise ModelError(f"layer_types {other}: layers that carry a state other than a KV "
                         f"cache or a convolution state are not supported by onnx_ep.genai")
    if kinds and len(kinds) != int(dec["num_hidden_layers"]):
        raise ModelError(f"layer_types has {len(kinds)} entries for "
                         f"{dec['num_hidden_layers']} layers")
    window_size = int(window.get("window_size", 0) or 0)
    window_layers = tuple(int(i) for i in window.get("layers", ()) or ())
    cache_slack = int(window.get("cache_slack", 0) or 0)
    layers = int(dec["num_hidden_layers"])
    if window_size < 0 or cache_slack < 0 or any(not 0 <= i < layers for i in window_layers):
        raise ModelError(f"sliding_window {window}: window_size and cache_slack must be >= 0 "
                         f"and layers indices of the model's {layers} layers")
    if window_size > 0 and not window_layers:   # onnxruntime-genai: every layer then
        window_layers = tuple(range(layers))
    decoder = DecoderConfig(
        window_size=window_size, window_layers=window_layers if window_size else (),
        cache_slack=cache_slack,
        filename=dec.get("filename", "model.onnx"),
        num_hidden_layers=int(dec["num_hidden_layers"]),
        num_attention_heads=int(dec["num_attention_heads"]),
        num_key_value_heads=int(dec.get("num_key_value_heads", dec["num_attention_heads"])),
        head_size=int(dec["head_size"]), hidden_size=int(dec.get("hidden_size", 0)),
        layer_types=kinds, conv_cache_size=int(dec.get("conv_cache_size", 0) or 0),
        providers=providers, **{k: v for k, v in names.items() if k in known})
    s = raw.get("search", {})
    fields = {a.name for a in attrs.fields(SearchOptions)}
    search = SearchOptions(**{k: v for k, v in s.items() if k in fields})
    search.check()
    context = int(model.get("context_length", 0))
    if search.max_length == 0 and context:
        search = attrs.evolve(search, max_length=context)
    eos = _ids(model.get("eos_token_id"))
    pad = _ids(model.get("pad_token_id"))
    bos = _ids(model.get("bos_token_id"))
    return GenaiConfig(folder=folder, decoder=decoder, search=search, eos_token_ids=eos,
                       bos_token_id=bos[0] if bos else None,
                       pad_token_id=pad[0] if pad else (eos[0] if eos else 0),
                       context_length=context, vocab_size=int(model.get("vocab_size", 0)),
                       model_type=str(model.get("type", "")))
