"""The generated docs (docs/OPERATORS.md, the parity table in docs/PARITY.md) are current.

Regenerated in memory from the kernel registry and the committed
docs/node_suite_results.json; the node suite itself is not run.
"""

from __future__ import annotations

import pytest

from onnx_ep.core.plugin_manager import build_plugins
from onnx_ep.testing import docs


@pytest.fixture(scope="module")
def registry():
    return build_plugins(entry_points=False).registry


def test_generated_docs_are_current(registry):
    import onnx

    recorded = docs.load_results()["onnx"]
    if onnx.__version__ != recorded:
        # the pages describe one onnx release's schemas; .ci/run's newest-releases run has it
        pytest.skip(f"docs are generated from onnx {recorded}; onnx {onnx.__version__} is "
                    f"installed")
    diffs = docs.stale_diffs(registry=registry)
    assert not diffs, (
        f"generated docs are stale (a kernel was added or changed); regenerate with "
        f"`{docs.GENERATE_COMMAND}` and commit the result "
        f"(`{docs.REFRESH_COMMAND}` also re-runs the node suite):\n" + "".join(diffs)[:4000])


def test_results_file_covers_the_registry(registry):
    results = docs.load_results()
    s = results["summary"]
    statuses = [c["status"] for c in results["cases"].values()]
    assert s["total"] == len(statuses)
    assert s["passed"] == statuses.count("passed")
    assert all(isinstance(c["ops"], list) for c in results["cases"].values())


def test_check_reports_a_stale_row(tmp_path, registry, capsys):
    """An edited row is caught with a diff naming the command to regenerate."""
    for rel in (docs.PARITY_MD, docs.RESULTS_JSON):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((docs.ROOT / rel).read_text())
    for rel, text in docs.expected_files(tmp_path, registry=registry).items():
        (tmp_path / rel).write_text(text)
    assert docs.stale_diffs(tmp_path, registry=registry) == []
    path = tmp_path / docs.OPERATORS_MD
    path.write_text(path.read_text().replace("| Gemm | 1-", "| Gemm | 2-", 1))
    diffs = docs.stale_diffs(tmp_path, registry=registry)
    assert len(diffs) == 1 and "-| Gemm | 2-" in diffs[0] and "+| Gemm | 1-" in diffs[0]


def test_opset_ranges_end_where_onnx_stops_defining_the_op(registry):
    rows = {r.op_type: r for r in docs.provider_rows(registry) if r.domain == ""}
    assert docs.opset_ranges(rows["Upsample"]) == "7-9"      # deprecated in opset 10
    import onnx.defs

    assert docs.opset_ranges(rows["Abs"]) == f"1-{onnx.defs.onnx_opset_version()}"


def test_cuda_results_import_counts_cases_run_entirely_on_cuda(tmp_path, registry):
    import json

    report = {"summary": {"onnx": "1.23.1", "total": 3, "passed": 2, "failed": 1, "error": 0,
                          "skipped": 0},
              "cases": [{"name": "test_add", "status": "passed", "placement": {"cuda": 1}},
                        {"name": "test_relu", "status": "passed",
                         "placement": {"cuda": 1, "cpu_reference": 1}},
                        {"name": "test_gemm", "status": "failed", "placement": {"cuda": 1}}]}
    path = tmp_path / "ns.json"
    path.write_text(json.dumps(report))
    data = docs.import_cuda_results(path, "a test machine")
    assert data["summary"]["entirely_on_cuda"] == 1
    assert [n for n, c in data["cases"].items() if c["on_cuda"]] == ["test_add"]
    results = {"cases": {"test_add": {"ops": ["Add"]}, "test_relu": {"ops": ["Add", "Relu"]},
                         "test_gemm": {"ops": ["Gemm"]}}}
    cells = docs.cuda_cells(registry, results, data)
    assert cells["Add"].endswith("; 1/2") and cells["Gemm"].endswith("; 0/1")


def test_committed_cuda_results_match_their_summary():
    data = docs.load_cuda_results()
    assert data is not None, f"{docs.CUDA_RESULTS_JSON} is missing"
    on = sum(c["on_cuda"] for c in data["cases"].values())
    assert data["summary"]["entirely_on_cuda"] == on
    assert data["summary"]["total"] == len(data["cases"])
    # the CUDA provider runs most of the suite itself; a drop below this means kernels
    # were lost (or declined) rather than a few cases changing
    assert on >= 0.6 * data["summary"]["total"]
