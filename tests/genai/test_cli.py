"""``onnx-ep generate``: streaming, JSON, sampling flags, refusals, --help."""

from __future__ import annotations

import json

import pytest

from onnx_ep import cli, genai


def test_generate_streams_ids_and_prints_rates(folders, capsys):
    assert cli.main(["generate", str(folders["growing"]), "--prompt-ids", "5,9,3,7",
                     "--max-new-tokens", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    expected = genai.generate(genai.Model(folders["growing"]), [5, 9, 3, 7], 5).tokens[0]
    assert out[0].split() == [str(t) for t in expected]
    assert "prefill: 4 tokens" in out[1] and "tokens/s" in out[1] and "decode:" in out[1]


def test_generate_json_and_sampling_flags(folders, capsys):
    args = ["generate", str(folders["shared"]), "--prompt-ids", "5,9,3", "--max-new-tokens",
            "6", "--json", "--do-sample", "--temperature", "1.3", "--top-k", "10",
            "--top-p", "0.9", "--seed", "5"]
    assert cli.main(args) == 0
    a = json.loads(capsys.readouterr().out)
    assert cli.main(args) == 0
    b = json.loads(capsys.readouterr().out)
    assert a["tokens"] == b["tokens"] and a["prompt_ids"] == [5, 9, 3]
    assert a["stats"]["decode"]["signatures"] == 1 and a["text"] is None


def test_generate_json_through_an_eos(folders, capsys):
    """The EOS that ends the generation is streamed (the last token) but not in the
    generator's sequence: the prompt ids printed are still the prompt's."""
    assert cli.main(["generate", str(folders["growing"]), "--prompt-ids", "5,9,3,7",
                     "--max-new-tokens", "40", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["tokens"][-1] == 47 and len(res["tokens"]) < 40
    assert res["prompt_ids"] == [5, 9, 3, 7]


def test_generate_refusals_exit_2(folders, capsys):
    assert cli.main(["generate", str(folders["growing"]), "--prompt", "hi"]) == 2
    assert "tokenizer.json" in capsys.readouterr().err
    assert cli.main(["generate", str(folders["growing"]), "--prompt-ids", "1,2",
                     "--max-new-tokens", "100", "--memory-limit", "1000", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "CapacityUnavailable"
    # --capture reaches the session: 'require' refuses a plan that runs on the host
    assert cli.main(["generate", str(folders["growing"]), "--prompt-ids", "1,2",
                     "--max-new-tokens", "2", "--capture", "require", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "CaptureError"


def test_generate_help_names_its_options(capsys):
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    text = capsys.readouterr().out
    for flag in ("--prompt", "--prompt-ids", "--max-new-tokens", "--provider", "--json",
                 "--do-sample", "--temperature", "--top-k", "--top-p", "--seed", "--capture"):
        assert flag in text
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "generate" in capsys.readouterr().out
