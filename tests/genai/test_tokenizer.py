"""Text in and out through tokenizer.json (the ``tokenizers`` package, imported lazily)."""

from __future__ import annotations

import shutil

import pytest

from onnx_ep import cli, genai

WORDS = [f"w{i}" for i in range(48)]


@pytest.fixture
def text_folder(folders, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    folder = tmp_path / "text"
    shutil.copytree(folders["growing"], folder)
    vocab = {w: i for i, w in enumerate(WORDS)}
    vocab["[UNK]"] = 2
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()       # joins words with spaces
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_text_prompt_equals_its_ids(text_folder):
    m = genai.Model(text_folder)
    ids = m.tokenizer.encode("w5 w9 w3 w7").tolist()
    assert ids == [5, 9, 3, 7]
    by_text = genai.generate(m, "w5 w9 w3 w7", max_new_tokens=5)
    by_ids = genai.generate(m, ids, max_new_tokens=5)
    assert by_text.tokens == by_ids.tokens
    assert by_text.text == [" ".join(WORDS[t] for t in by_ids.tokens[0])]
    stream = m.tokenizer.create_stream()
    assert "".join(stream.decode(t) for t in by_ids.tokens[0]).split() == \
        by_text.text[0].split()


def test_cli_streams_text(text_folder, capsys):
    assert cli.main(["generate", str(text_folder), "--prompt", "w5 w9 w3 w7",
                     "--max-new-tokens", "4"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.split()[0].startswith("w")
