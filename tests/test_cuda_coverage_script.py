"""scripts/cuda_coverage.py predicts node-suite CUDA coverage without a GPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "cuda_coverage.py"


def test_coverage_script_places_cases_and_explains_declines(tmp_path, monkeypatch, capsys):
    from onnx_ep.providers.cuda import driver

    # the script forces CUDA's availability for placement; put the real one back afterwards
    monkeypatch.setattr(driver, "is_available", driver.is_available)
    spec = importlib.util.spec_from_file_location("cuda_coverage", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "cov.json"
    assert mod.main(["-k", r"^test_(abs|string_split_basic|loop11)$", "--ops",
                     "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "static CUDA coverage: 1 of 3 cases entirely on cuda" in text
    per_case = json.loads(out.read_text())
    assert per_case["test_abs"] == []
    assert any(op == "StringSplit" and "no cuda kernel" in why
               for op, why in per_case["test_string_split_basic"])
    assert any(op == "Loop" for op, _ in per_case["test_loop11"])


def test_coverage_script_lists_cases_not_on_cuda(monkeypatch, capsys):
    from onnx_ep.providers.cuda import driver

    monkeypatch.setattr(driver, "is_available", driver.is_available)
    spec = importlib.util.spec_from_file_location("cuda_coverage", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["-k", r"^test_(abs|loop11)$", "--cases"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("test_loop11 | Loop") for line in lines)
    assert not any(line.startswith("test_abs ") for line in lines)


def test_coverage_script_plans_cases_at_their_input_shapes(monkeypatch, capsys):
    from onnx_ep.providers.cuda import driver

    monkeypatch.setattr(driver, "is_available", driver.is_available)
    spec = importlib.util.spec_from_file_location("cuda_coverage", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # an expanded function whose constants are uploaded: sized at plan time, all on cuda
    assert mod.main(["-k", r"^test_celu_expanded$", "--plan"]) == 0
    assert "planned CUDA coverage: 1 of 1 cases" in capsys.readouterr().out


def test_coverage_script_reports_one_models_host_steps_and_copies(tmp_path, monkeypatch,
                                                                   capsys):
    from onnx_ep.providers.cuda import driver

    monkeypatch.setattr(driver, "is_available", driver.is_available)
    spec = importlib.util.spec_from_file_location("cuda_coverage", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = Path(__file__).resolve().parent / "models" / "exported_transformer.onnx"
    out = tmp_path / "model.json"
    assert mod.main(["--model", str(model), "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert sum(rep["placement"].values()) == rep["nodes"] <= rep["model_nodes"]
    host = rep["placement"].get("cpu_reference", 0)
    # every node on the host is listed with the device's reason (control flow: subgraphs)
    assert len([h for h in rep["host_steps"] if "subgraphs" not in h["reason"]]) == host
    assert all(h["reason"].startswith("cuda: ") for h in rep["host_steps"]
               if "subgraphs" not in h["reason"])
    if host:
        assert rep["copies"].get("cuda->cpu", 0) > 0
    assert f"{rep['model_nodes']} nodes" in capsys.readouterr().out
