"""benchmarks/real_models.py exports models with torch and checks them against onnxruntime.

torch is not a dependency of onnx-ep: the run test skips where torch, onnxscript (the
dynamo exporter's backend) or onnxruntime is not installed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "real_models.py"


def load_script(monkeypatch):
    # the script imports benchmarks/common.py; put its folder on sys.path for this test only
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("real_models", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_help_lists_the_models_without_importing_torch(monkeypatch, capsys):
    mod = load_script(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for name in ("qwen2-decode", "bert-encoder", "vad-if", "--provider", "--rtol"):
        assert name in text


def test_unknown_model_is_a_usage_error(monkeypatch, capsys):
    mod = load_script(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--models", "no-such-model"])
    assert exc.value.code == 2
    assert "no-such-model" in capsys.readouterr().err


def test_vad_model_with_if_matches_onnxruntime_on_cpu_reference(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    mod = load_script(monkeypatch)
    out = tmp_path / "rows.json"
    rc = mod.main(["--provider", "cpu_reference", "--models", "vad-if", "--runs", "1",
                   "--warmup", "0", "--out", str(tmp_path), "--json", str(out)])
    (row,) = json.loads(out.read_text())["models"]
    assert "error" not in row, row.get("traceback")
    assert rc == 0
    assert (tmp_path / "vad-if.onnx").exists()
    assert row["exporter"] == "dynamo" and row["ops"].get("If") == 1
    # the If's two branches are counted and run on the host with the rest
    assert row["nodes_in_subgraphs"] > 0
    assert row["on_device"] == 0 and row["on_host"] == row["nodes"]
    assert row["max_rel"] <= 1e-3
    assert row["copies"]["host_to_device"]["count"] == 0
    assert "vad-if" in capsys.readouterr().out


def test_a_failing_model_is_a_row_and_a_nonzero_exit(tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnxruntime")
    mod = load_script(monkeypatch)

    def broken():
        raise RuntimeError("cannot build")

    monkeypatch.setitem(mod.MODELS, "vad-if", mod.RealModel("vad-if", "broken", broken))
    out = tmp_path / "rows.json"
    rc = mod.main(["--provider", "cpu_reference", "--models", "vad-if", "--json", str(out)])
    assert rc == 1
    (row,) = json.loads(out.read_text())["models"]
    assert row["error"] == "build: RuntimeError: cannot build"
    assert "ERROR build: RuntimeError: cannot build" in capsys.readouterr().out
