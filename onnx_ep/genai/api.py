"""One-call generation: ``generate(model, prompt, max_new_tokens=...)`` and
``for token in stream(model, prompt, ...)`` (docs/GENAI.md).

A prompt is text (encoded with the folder's tokenizer.json), a list of texts (a batch), a
sequence of token ids, or a batch of them (a list of ragged lists, left-padded; or a 2-D
array padded with ``pad_token_id``). ``max_length`` is the prompt's padded length plus
``max_new_tokens`` unless given.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np

from onnx_ep.genai.generator import Generator, GeneratorParams, as_batch
from onnx_ep.genai.model import Model
from onnx_ep.genai.stats import GenerationStats


@attrs.frozen
class GenerationResult:
    """What :func:`generate` returns: the new tokens of every row (up to and including an
    EOS), their text when the folder has a tokenizer, and the generator's statistics."""

    tokens: list[list[int]]
    text: list[str] | None
    stats: GenerationStats
    #: prompt (with padding) and new tokens, per row: ``Generator.get_sequence``, which
    #: ends before the EOS that ended the last row (onnxruntime-genai's rule)
    sequences: list[list[int]]


def _model(model: Model | str | os.PathLike[str], providers: list[str] | None,
           options: Any) -> Model:
    return model if isinstance(model, Model) else Model(model, providers, options)


def _prompt_ids(model: Model, prompt: Any) -> Any:
    """Token ids (a row, or rows) for ``prompt``; text goes through the tokenizer."""
    if isinstance(prompt, str):
        return model.tokenizer.encode(prompt)
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(p, str) for p in prompt):
        return model.tokenizer.encode_batch(list(prompt))
    return prompt


class TokenStream:
    """Iterate to generate: each item is the next token id (batch 1) or the ``[batch]`` ids
    of one step. ``generator`` and ``stats`` stay readable during and after the loop."""

    def __init__(self, model: Model, prompt: Any, max_new_tokens: int,
                 **search: Any) -> None:
        self.model = model
        ids, _ = as_batch(_prompt_ids(model, prompt), model.config.pad_token_id)
        self._prompt = _prompt_ids(model, prompt)
        params = GeneratorParams(model)
        opts = {k: v for k, v in search.items() if v is not None}
        opts.setdefault("max_length", ids.shape[1] + max_new_tokens)
        opts.setdefault("batch_size", ids.shape[0])
        params.set_search_options(**opts)
        self.generator = Generator(model, params)    # reserves the KV cache: may refuse
        self.stats: GenerationStats = self.generator.stats
        self.max_new_tokens = max_new_tokens
        self.batch = ids.shape[0]
        #: columns of the (padded) prompt: where each row's new tokens start
        self.prompt_length = ids.shape[1]

    def __iter__(self) -> Iterator[Any]:
        gen = self.generator
        gen.append_tokens(self._prompt)
        for _ in range(self.max_new_tokens):
            if gen.is_done():
                break
            gen.generate_next_token()
            nxt = gen.get_next_tokens()
            yield int(nxt[0]) if self.batch == 1 else nxt

    def close(self) -> None:
        self.generator.close()


def stream(model: Model | str | os.PathLike[str], prompt: Any, max_new_tokens: int = 128, *,
           providers: list[str] | None = None, options: Any = None,
           **search: Any) -> TokenStream:
    """Generate lazily: ``for token in stream(model, "Hello", max_new_tokens=32): ...``.

    :param search: ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``random_seed``
        (or ``seed``), ``max_length``, ``past_present_share_buffer``; ``None`` keeps the
        config's default.
    :raises CapacityUnavailable: the KV cache cannot fit (before any step runs).
    """
    return TokenStream(_model(model, providers, options), prompt, max_new_tokens, **search)


def generate(model: Model | str | os.PathLike[str], prompt: Any, max_new_tokens: int = 128,
             *, providers: list[str] | None = None, options: Any = None,
             **search: Any) -> GenerationResult:
    """Generate up to ``max_new_tokens`` per row (fewer when every row met an EOS or
    ``max_length``); see :func:`stream` for the arguments."""
    ts = stream(model, prompt, max_new_tokens, providers=providers, options=options, **search)
    eos = set(ts.model.config.eos_token_ids)
    rows: list[list[int]] = [[] for _ in range(ts.batch)]
    finished = [False] * ts.batch
    try:
        for step in ts:
            for b, tok in enumerate(np.atleast_1d(step)):
                if not finished[b]:
                    rows[b].append(int(tok))
                    finished[b] = int(tok) in eos
        seqs = [ts.generator.get_sequence(b).tolist() for b in range(ts.batch)]
    finally:
        ts.close()
    text = None
    if ts.model.has_tokenizer:
        text = [ts.model.tokenizer.decode(r) for r in rows]
    return GenerationResult(rows, text, ts.stats, seqs)
