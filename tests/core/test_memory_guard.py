"""Source scan: nothing allocates device, arena or workspace memory outside the allocator modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import onnx_ep

PACKAGE = Path(onnx_ep.__file__).parent
#: the only modules allowed to create device / arena / workspace / weight-window buffers
ALLOCATOR_MODULES = {"core/memory.py", "providers/cuda/allocator.py"}
DEVICE_ALLOCATORS = {"cuMemAlloc", "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemCreate",
                     "cuMemAllocManaged", "cuMemAllocHost", "cudaMalloc", "cuMemAllocPitch"}
HOST_BUFFER_CALLS = {"empty", "zeros", "ones", "full", "bytearray", "empty_like", "zeros_like"}
#: core and plugin modules must take host buffers from core/memory.allocate_host
GOVERNED_DIRS = ("core/", "plugins/")
#: reviewed exceptions, each with its reason
ALLOWED = {("core/graph.py", "zeros"): "densifies a sparse initializer at load; the result "
                                       "is a weight, reserved as WEIGHTS by the session",
           ("core/tensor.py", "empty"): "Tensor.empty reserves device bytes in the device's "
                                        "authority before allocating; a host Tensor is the "
                                        "caller's own numpy array, not a session buffer",
           ("core/device_io.py", "empty"): "Tensor.empty for an output kept on the device: "
                                         "reserved in the device authority (onnx_ep.Tensor)"}


def _calls(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            out.append((node.lineno, name))
    return out


def _modules() -> list[tuple[str, Path]]:
    return sorted((p.relative_to(PACKAGE).as_posix(), p) for p in PACKAGE.rglob("*.py"))


def test_no_device_allocation_outside_the_allocator():
    offenders = [f"{rel}:{line} calls {name}"
                 for rel, path in _modules() if rel not in ALLOCATOR_MODULES
                 for line, name in _calls(path) if name in DEVICE_ALLOCATORS]
    assert not offenders, "device memory must be allocated through the allocator: " + \
        "; ".join(offenders)


def test_core_and_plugins_take_host_buffers_from_the_authority():
    offenders = [f"{rel}:{line} calls {name}"
                 for rel, path in _modules()
                 if rel.startswith(GOVERNED_DIRS) and rel not in ALLOCATOR_MODULES
                 for line, name in _calls(path)
                 if name in HOST_BUFFER_CALLS and (rel, name) not in ALLOWED]
    assert not offenders, "use onnx_ep.core.memory.allocate_host: " + "; ".join(offenders)


def test_the_scan_sees_an_offender(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np\nbuf = np.empty(10)\nptr = driver.cuMemAlloc(10)\n")
    names = {n for _, n in _calls(bad)}
    assert "empty" in names and "cuMemAlloc" in names


# ---------------------------------------------------------------- at run time
#: node-suite cases whose outputs only the run can size (value-sized ops, selections, control
#: flow, sequences): the quick guard; the slow one runs every case
RUN_SIZED_CASES = (r"constantofshape|_expand_|_tile|_range_|onehot|unique|nonzero|compress"
                   r"|_loop|_scan|sequence_map|optional_has|test_if_")


def _unsized_steps(pattern: str | None) -> tuple[int, dict[str, int]]:
    import warnings

    from onnx.backend.test.runner import _normalize_tensor

    from onnx_ep.backend import OnnxEpBackend
    from onnx_ep.testing.node_suite import load_cases, load_skips

    skips = load_skips()
    metered, unsized = 0, {}
    for case in load_cases(pattern):
        if case.name in skips:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = OnnxEpBackend.prepare(case.model, "CPU")
            for inputs, _ in case.data_sets:
                rep.run([_normalize_tensor(x) for x in inputs])
        stats = rep.session.stats
        metered += stats["run_sized_steps"]
        if stats["unsized_steps"]:
            unsized[case.name] = stats["unsized_steps"]
    return metered, unsized


def test_no_host_kernel_allocates_an_output_the_run_did_not_reserve_first():
    metered, unsized = _unsized_steps(RUN_SIZED_CASES)
    assert metered > 100             # the cases do meet outputs only the run can size
    assert not unsized, f"outputs charged only after they were allocated: {unsized}"


@pytest.mark.slow
def test_no_case_of_the_node_suite_allocates_an_unreserved_output():
    metered, unsized = _unsized_steps(None)
    print(f"memory guard: {metered} run-sized steps reserved before they ran, "
          f"{len(unsized)} cases with unreserved outputs")
    assert not unsized, f"outputs charged only after they were allocated: {unsized}"
