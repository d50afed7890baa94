"""scripts/run_ort_api_tests.py runs a checkout's test file with ``import onnxruntime``
resolving to the compatibility module."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAKE_TESTS = '''
import unittest

import onnxruntime
from onnxruntime.capi.onnxruntime_pybind11_state import Fail


class TestCompat(unittest.TestCase):
    def test_is_the_compatibility_module(self):
        self.assertEqual(onnxruntime.__name__, "onnx_ep.onnxruntime")
        self.assertTrue(issubclass(Fail, RuntimeError))

    def test_fails(self):
        self.assertIn("CUDAExecutionProvider", onnxruntime.get_available_providers()[-1:])
'''


def test_the_script_runs_a_checkouts_test_file(tmp_path):
    folder = tmp_path / "onnxruntime" / "test" / "python"
    folder.mkdir(parents=True)
    (folder / "onnxruntime_test_python.py").write_text(textwrap.dedent(FAKE_TESTS))
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "run_ort_api_tests.py"),
                           str(tmp_path), "--json", str(out)], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert proc.returncode == 1, proc.stderr
    assert json.loads(out.read_text()) == {"test_is_the_compatibility_module": "passed",
                                           "test_fails": "failed"}
    assert "1 passed, 1 failed, 0 skipped of 2" in proc.stdout


def test_the_script_takes_the_test_files_folder_and_checks_what_it_imported(tmp_path):
    """A folder holding the file (substitute test data beside it) is accepted too, and the
    run says which onnxruntime its ``import onnxruntime`` got."""
    (tmp_path / "onnxruntime_test_python.py").write_text(textwrap.dedent(FAKE_TESTS))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "run_ort_api_tests.py"),
                           str(tmp_path), "-k", "compatibility"], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "onnx_ep" in proc.stdout.splitlines()[0]
    assert "1 passed, 0 failed, 0 skipped of 1" in proc.stdout
    missing = subprocess.run([sys.executable, str(REPO / "scripts" / "run_ort_api_tests.py"),
                              str(tmp_path / "nothing")], capture_output=True, text=True,
                             cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert missing.returncode == 2 and "no onnxruntime_test_python.py" in missing.stderr
