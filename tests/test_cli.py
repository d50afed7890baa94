"""The onnx-ep command, driven in-process through ``onnx_ep.cli.main``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_ep.cli import main


def _gather_model(path: Path, rows: int = 5) -> Path:
    """ids int64 [batch, 3] -> Gather(table [rows, 2]) -> Transpose -> y float32 [2, 3, batch]."""
    table = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["g"], axis=0),
         helper.make_node("Transpose", ["g"], ["y"], perm=[2, 1, 0])],
        "tiny",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, "batch"])],
        initializer=[onnx.numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, path)
    return path


def test_run_random_inputs_prints_outputs_and_timings(tmp_path: Path, capsys) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    # a Gather table of 5 rows: random ids must stay in [0, 5), not the default [0, 10)
    assert main(["run", str(model), "--random-inputs", "--dim", "batch=4", "--repeat", "2"]) == 0
    out, err = capsys.readouterr()
    assert "input ids: shape [4, 3] int64" in out
    assert "output y: shape [2, 3, 4] float32 sha256 " in out
    assert "first run (incl. planning)" in out and "2 repeats: mean" in out
    assert "run 2/2" in err


def test_run_json_is_parseable_and_reproducible(tmp_path: Path, capsys) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    docs = []
    for _ in range(2):
        assert main(["run", str(model), "--random-inputs", "--seed", "3", "--json"]) == 0
        out, err = capsys.readouterr()
        assert err == ""     # --json: no progress
        docs.append(json.loads(out))
    (o,) = docs[0]["outputs"]
    assert o["name"] == "y" and o["shape"] == [2, 3, 1] and o["dtype"] == "float32"
    assert len(o["sha256"]) == 16 and o["sha256"] == docs[1]["outputs"][0]["sha256"]
    assert docs[0]["timings"]["repeat"] == 3 and docs[0]["providers"] == ["cpu_reference"]


def test_run_reads_inputs_from_npy(tmp_path: Path, capsys) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    ids = tmp_path / "ids.npy"
    np.save(ids, np.array([[0, 1, 4]], np.int64))
    assert main(["run", str(model), "--input", f"ids={ids}", "--json"]) == 0
    (o,) = json.loads(capsys.readouterr().out)["outputs"]
    assert o["sum"] == pytest.approx(0 + 1 + 2 + 3 + 8 + 9)


def test_providers_json_lists_cpu_reference(capsys) -> None:
    assert main(["providers", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    cpu = {p["name"]: p for p in info["providers"]}["cpu_reference"]
    assert cpu["available"] is True and cpu["kernels"] > 0
    assert "onnx_ep.providers.cpu_reference" in info["plugins"]
    assert info["errors"] == []


def test_demo_json_runs_and_matches_onnxruntime(capsys) -> None:
    assert main(["demo", "--json", "--repeat", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (o,) = doc["outputs"]
    assert o["name"] == "logits" and o["shape"] == [1, 16, 256]
    if doc["onnxruntime"] is not None:
        assert doc["onnxruntime"]["max_abs_diff"] < 1e-4


def test_missing_model_exits_2_with_one_error_line(tmp_path: Path, capsys) -> None:
    assert main(["run", str(tmp_path / "nope.onnx")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and err.endswith(errors[0] + "\n") and "Traceback" not in err
    assert "nope.onnx" in errors[0]


def test_with_json_an_error_is_a_json_document_with_the_same_status(tmp_path: Path,
                                                                      capsys) -> None:
    assert main(["run", str(tmp_path / "nope.onnx"), "--json"]) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["error"] == "ModelError" and "nope.onnx" in doc["message"]
    assert err == ""


def test_a_reader_that_stops_early_ends_the_command_quietly() -> None:
    """``onnx-ep providers | head -1``: the closed pipe is not a traceback, the status 0."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "onnx_ep.cli", "providers"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                     # the reader is gone before anything is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_unknown_input_name_exits_2(tmp_path: Path, capsys) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    np.save(tmp_path / "x.npy", np.zeros(3, np.int64))
    assert main(["run", str(model), "--input", f"bogus={tmp_path / 'x.npy'}",
                 "--random-inputs"]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "bogus" in err and "ids" in err


def test_unreadable_npy_exits_2(tmp_path: Path, capsys) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    assert main(["run", str(model), "--input", f"ids={tmp_path / 'missing.npy'}"]) == 2
    assert "error: cannot read --input ids=" in capsys.readouterr().err


def test_missing_inputs_without_random_inputs_exit_2(tmp_path: Path, capsys) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    assert main(["run", str(model)]) == 2
    assert "--random-inputs" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["run"], ["run", "m.onnx", "--dim", "batch"], ["resources", "--memory-limit", "0"],
                                  ["demo", "--repeat", "-1"]])
def test_usage_errors_exit_2(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage: onnx-ep" in capsys.readouterr().err


def test_resources_on_the_demo_model_with_and_without_a_memory_limit(capsys) -> None:
    assert main(["resources", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["policy"]["name"] == "full_resident"
    assert full["ledger"]["by_role"]["weights"] >= full["weights_bytes"]
    (plan,) = full["plans"]
    assert plan["arena_bytes"] >= plan["activation_live_peak_bytes"] > 0
    assert main(["resources", "--json", "--memory-limit", "300000"]) == 0
    limited = json.loads(capsys.readouterr().out)
    assert limited["budget"] == 300000
    assert limited["policy"]["name"] == "weight_streaming"
    assert limited["policy"]["counters"]["page_ins"] > 0


def test_resources_text_output_and_a_budget_too_small(tmp_path: Path, capsys) -> None:
    model = _gather_model(tmp_path / "tiny.onnx")
    assert main(["resources", str(model), "--dim", "batch=2"]) == 0
    out = capsys.readouterr().out
    assert "policy full_resident (streaming off)" in out and "plan [int64[2, 3]]" in out
    assert main(["resources", "--memory-limit", "40000"]) == 2
    assert "error:" in capsys.readouterr().err
