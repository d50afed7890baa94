"""Text in and out through the ``tokenizers`` package, when the folder has tokenizer.json.

``tokenizers`` is imported on first use, so token ids work without it. The shape is
onnxruntime-genai's ``Tokenizer(model)``: ``encode``, ``decode``, ``encode_batch`` and
``create_stream()`` whose ``decode(token)`` returns the text a new token adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onnx_ep.errors import ModelError

TOKENIZER_NAME = "tokenizer.json"


def has_tokenizer(folder: Path) -> bool:
    return (folder / TOKENIZER_NAME).is_file()


class Tokenizer:
    """The tokenizer of a model folder (``tokenizer.json``).

    :raises ModelError: the folder has no tokenizer.json, or ``tokenizers`` is not installed.
    """

    def __init__(self, model: Any) -> None:
        folder = Path(model.folder)
        path = folder / TOKENIZER_NAME
        if not path.is_file():
            raise ModelError(f"{folder} has no {TOKENIZER_NAME}: pass token ids instead of "
                             f"text (--prompt-ids), or copy the Hugging Face tokenizer.json "
                             f"into the folder")
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError:
            raise ModelError(f"{path} needs the 'tokenizers' package to encode text: pip "
                             f"install tokenizers (or pass token ids)") from None
        self._tok = HFTokenizer.from_file(str(path))

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (int64), with the tokenizer's own special tokens."""
        return np.array(self._tok.encode(text).ids, np.int64)

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.array(e.ids, np.int64) for e in self._tok.encode_batch(list(texts))]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return str(self._tok.decode([int(i) for i in np.asarray(ids).reshape(-1)]))

    def create_stream(self) -> TokenizerStream:
        return TokenizerStream(self)


class TokenizerStream:
    """Incremental decoding: ``decode(token)`` returns the text this token adds (empty while
    a multi-byte character is incomplete)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._text = ""

    def decode(self, token: int) -> str:
        self._ids.append(int(token))
        text = self._tokenizer.decode(self._ids)
        if text.endswith("\ufffd"):         # an incomplete UTF-8 sequence: wait for more
            return ""
        new, self._text = text[len(self._text):], text
        return new
