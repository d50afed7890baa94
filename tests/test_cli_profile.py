"""``onnx-ep run --profile`` and ``--capture-report``'s text, driven through ``main``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import onnx_ep
from onnx_ep import SessionOptions
from onnx_ep.cli import main
from onnx_ep.core.report import capture_text
from tests.core.test_capture import CHAIN, _feed, _model
from tests.helpers.fake_device import DEVICE, FakeDevicePlugin
from tests.test_cli import _gather_model


def test_run_profile_writes_a_trace_of_every_run_and_prints_its_path(tmp_path: Path,
                                                                     capsys) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    prefix = tmp_path / "out" / "trace"
    prefix.parent.mkdir()
    assert main(["run", str(model), "--random-inputs", "--repeat", "2", "--profile",
                 str(prefix)]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("profile: ")]
    path = line.split()[1]
    assert path.startswith(str(prefix) + "_") and path.endswith(".json")
    events = json.loads(Path(path).read_text())
    runs = 3                                  # the first run and two repeats
    nodes = Counter(e["name"] for e in events if e["cat"] == "Node")
    assert set(nodes.values()) == {runs} and len(nodes) == 2       # Gather, Transpose
    assert sum(e["name"] == "model_run" for e in events) == runs


def test_run_profile_without_a_prefix_writes_into_the_working_directory(
        tmp_path: Path, capsys, monkeypatch) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["run", str(model), "--random-inputs", "--repeat", "0", "--json",
                 "--profile"]) == 0
    res = json.loads(capsys.readouterr().out)
    (written,) = work.iterdir()
    assert res["profile"] == written.name and written.name.startswith("onnx_ep_profile_")


def test_run_without_profile_writes_no_trace(tmp_path: Path, capsys, monkeypatch) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(model), "--random-inputs", "--json"]) == 0
    assert "profile" not in json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.onnx"]


def test_capture_report_text_on_the_host_and_on_a_device(tmp_path: Path, capsys) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    assert main(["run", str(model), "--random-inputs", "--capture-report"]) == 0
    assert "capture (auto): no device plan (nothing to capture)" in capsys.readouterr().out
    s = onnx_ep.Session(_model(CHAIN), providers=[DEVICE, "cpu_reference"],
                        options=SessionOptions(),
                        plugins=[FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))])
    for i in range(3):
        s.run(None, {"x": _feed(i)})
    lines = capture_text(s.capture_report()).splitlines()
    assert lines[0].startswith("capture (auto) float32[2, 4]: recorded, 1 segments, 5 of 7 "
                               "steps captured")
    assert lines[1] == "  segment mm .. out (5 steps, recorded)"
