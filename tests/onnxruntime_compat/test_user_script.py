"""The example onnxruntime user script runs unchanged but for its import, and reports what
real onnxruntime reports for the same script."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "onnxruntime_user" / "script.py"


def _load(name: str, source: str):
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, str(SCRIPT), "exec"), module.__dict__)
    return module


def test_the_user_script_runs_on_onnx_ep_as_on_onnxruntime(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = SCRIPT.read_text()
    ours = _load("ours", source).main(cuda=False)
    assert ours["iobinding_equal"] and ours["profile_events"] > 0
    import sys

    for name, module in list(sys.modules.items()):
        # another test's install() may have aliased onnxruntime to the compat module
        if name.split(".")[0] == "onnxruntime" and "onnx_ep" in getattr(module, "__name__", ""):
            monkeypatch.delitem(sys.modules, name)
    ort = pytest.importorskip("onnxruntime")
    assert "onnx_ep" not in ort.__name__
    real = source.replace("import onnx_ep.onnxruntime as ort", "import onnxruntime as ort")
    theirs = _load("theirs", real).main(cuda=False)
    for key in ("providers", "producer", "input", "output_shape", "iobinding_equal", "device"):
        assert ours[key] == theirs[key], key
