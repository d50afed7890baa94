"""The models of ``benchmarks/real_models.py``: randomly initialised torch/transformers
modules (fixed seeds, no download) with the example inputs and the dynamic dims they are
exported with. That script's docstring says which family each stands for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

PAST = 32                  # KV-cache positions before the decode step / the chunk
LLM_LAYERS = 4


@attrs.frozen
class Exportable:
    """A module in eval mode with the example inputs it is exported and run with."""

    module: Any                         # torch.nn.Module
    args: tuple[Any, ...]               # torch tensors, in input_names order
    input_names: list[str]
    output_names: list[str]
    #: symbolic dims, as exported models ship them (``{input or output: {axis: name}}``);
    #: size-1 dims stay static (the exporter specialises them)
    dynamic_axes: dict[str, dict[int, str]] | None = None


@attrs.frozen
class RealModel:
    name: str
    family: str
    build: Callable[[], Exportable]


# ---------------------------------------------------------------- models

def _generator(seed: int) -> Any:
    import torch

    return torch.Generator().manual_seed(seed)


def _qwen2(seq: int) -> Exportable:
    import torch
    from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(hidden_size=256, num_hidden_layers=LLM_LAYERS, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=512, vocab_size=1000,
                      max_position_embeddings=256)
    torch.manual_seed(0)
    lm = Qwen2ForCausalLM(cfg).eval()

    class FlatCache(torch.nn.Module):
        """Flat past tensors in, flat presents out: the cache object stays inside."""

        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache(config=cfg)
            for i in range(LLM_LAYERS):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.lm(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, past_key_values=cache, use_cache=True)
            presents = []
            for layer in out.past_key_values.layers:
                presents += [layer.keys, layer.values]
            return (out.logits, *presents)

    g = _generator(1)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    ids = torch.randint(0, cfg.vocab_size, (1, seq), generator=g)
    mask = torch.ones(1, PAST + seq, dtype=torch.int64)
    pos = torch.arange(PAST, PAST + seq).unsqueeze(0)
    past = [torch.randn(1, cfg.num_key_value_heads, PAST, head_dim, generator=g)
            for _ in range(2 * LLM_LAYERS)]
    kv = [f"{kind}_{i}" for i in range(LLM_LAYERS) for kind in ("key", "value")]
    dyn: dict[str, dict[int, str]] = {"attention_mask": {1: "total"}}
    dyn |= {f"past_{n}": {2: "past"} for n in kv} | {f"present_{n}": {2: "total"} for n in kv}
    if seq > 1:
        dyn |= {"input_ids": {1: "seq"}, "position_ids": {1: "seq"}, "logits": {1: "seq"}}
    return Exportable(FlatCache().eval(), (ids, mask, pos, *past),
                      ["input_ids", "attention_mask", "position_ids"] + [f"past_{n}" for n in kv],
                      ["logits"] + [f"present_{n}" for n in kv], dyn)


def _bert() -> Exportable:
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=512, max_position_embeddings=128)
    torch.manual_seed(0)
    bert = BertModel(cfg).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    seq = 64
    ids = torch.randint(0, cfg.vocab_size, (1, seq), generator=_generator(1))
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[:, -8:] = 0                                  # a padded batch row
    types = torch.zeros(1, seq, dtype=torch.int64)
    types[:, seq // 2:] = 1
    return Exportable(Encoder().eval(), (ids, mask, types),
                      ["input_ids", "attention_mask", "token_type_ids"],
                      ["last_hidden_state", "pooler_output"],
                      {n: {1: "seq"} for n in ("input_ids", "attention_mask", "token_type_ids",
                                               "last_hidden_state")})


def _vit() -> Exportable:
    import torch
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=256, image_size=64, patch_size=8, num_channels=3)
    torch.manual_seed(0)
    vit = ViTModel(cfg).eval()

    class Image(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.vit = vit

        def forward(self, pixel_values):
            out = self.vit(pixel_values=pixel_values)
            return out.last_hidden_state, out.pooler_output

    pixels = torch.randn(1, 3, 64, 64, generator=_generator(1))
    return Exportable(Image().eval(), (pixels,), ["pixel_values"],
                      ["last_hidden_state", "pooler_output"])


def _whisper_encoder() -> Exportable:
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    # the decoder's settings (vocabulary, token ids) stay at Whisper's: the encoder ignores them
    cfg = WhisperConfig(d_model=128, encoder_layers=2, encoder_attention_heads=4,
                        encoder_ffn_dim=256, num_mel_bins=80, max_source_positions=100)
    torch.manual_seed(0)
    encoder = WhisperEncoder(cfg).eval()

    class Audio(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_features):
            return self.encoder(input_features=input_features).last_hidden_state

    # the encoder insists on 2 x max_source_positions frames (its two convolutions halve it)
    mel = torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=_generator(1))
    return Exportable(Audio().eval(), (mel,), ["input_features"], ["last_hidden_state"])


def _vad_if() -> Exportable:
    import torch
    from torch import nn

    hidden = 64

    def front_end(kernel: int) -> nn.Module:
        return nn.Sequential(nn.Conv1d(1, 32, kernel, stride=kernel // 2), nn.ReLU(),
                             nn.Conv1d(32, hidden, 3, stride=2), nn.ReLU())

    class VadIf(nn.Module):
        """Per-rate front end and LSTM cell chosen by ``torch.cond`` on ``sr``."""

        def __init__(self) -> None:
            super().__init__()
            self.front16k, self.front8k = front_end(32), front_end(16)
            self.cell16k, self.cell8k = nn.LSTMCell(hidden, hidden), nn.LSTMCell(hidden, hidden)
            self.head = nn.Linear(hidden, 1)

        def forward(self, x, state, sr):
            # the branches take ``state`` whole: its two halves as operands would alias
            # each other, which torch.cond refuses
            def at16k(x, state):
                return self.cell16k(self.front16k(x.unsqueeze(1)).mean(-1), (state[0], state[1]))

            def at8k(x, state):
                return self.cell8k(self.front8k(x.unsqueeze(1)).mean(-1), (state[0], state[1]))

            h, c = torch.cond(sr[0] == 16000, at16k, at8k, (x, state))
            prob = torch.sigmoid(self.head(torch.relu(h)))
            return prob, torch.stack([h, c])

    torch.manual_seed(0)
    g = _generator(1)
    x = torch.randn(1, 512, generator=g)
    state = torch.randn(2, 1, hidden, generator=g) * 0.5
    sr = torch.tensor([16000], dtype=torch.int64)
    return Exportable(VadIf().eval(), (x, state, sr), ["input", "state", "sr"],
                      ["output", "stateN"])


MODELS = {m.name: m for m in (
    RealModel("qwen2-decode", "decoder LLM with KV cache, one token", lambda: _qwen2(1)),
    RealModel("qwen2-chunk", "decoder LLM with KV cache, 16-token chunk", lambda: _qwen2(16)),
    RealModel("bert-encoder", "text encoder", _bert),
    RealModel("vit", "vision transformer", _vit),
    RealModel("whisper-encoder", "Conv1D + transformer audio encoder", _whisper_encoder),
    RealModel("vad-if", "recurrent VAD with If", _vad_if),
)}
