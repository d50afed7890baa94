"""core/capture.py: after the first run on a device, plans are cut into capture segments
and seams by each step's capture_support(), and Session.capture_report() shows them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import CaptureSupport
from onnx_ep.core.capture import segment
from onnx_ep.errors import KernelContractError
from tests.helpers.fake_device import DEVICE, FakeDevicePlugin, FakeKernel


def _chain(*ops: str) -> onnx.ModelProto:
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [prev], [out], name=f"n{i}_{op}"))
        prev = out
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _session(model: onnx.ModelProto, **plugin_kw) -> onnx_ep.Session:
    return onnx_ep.Session(model, providers=[DEVICE, "cpu_reference"],
                           plugins=[FakeDevicePlugin(**plugin_kw)])


def test_report_is_empty_until_the_signature_has_run_once():
    s = _session(_chain("Relu", "Relu"))
    try:
        assert s.capture_report()["plans"] == []
        s.run(None, {"x": X})
        (plan,) = s.capture_report()["plans"]
        assert plan["steps"] >= 2 and plan["captured_steps"] >= 2
    finally:
        s.close()


def test_copies_at_the_device_boundary_are_seams_with_reasons():
    s = _session(_chain("Relu", "Relu"))
    try:
        s.run(None, {"x": X})
        (plan,) = s.capture_report()["plans"]
        # the graph input is uploaded and the output downloaded: both are seams, the two
        # device Relus between them one segment
        assert len(plan["segments"]) == 1 and plan["segments"][0]["nodes"] == 2
        assert plan["segments"][0]["first"] == "n0_Relu"
        assert plan["segments"][0]["last"] == "n1_Relu"
        reasons = [seam["reason"] for seam in plan["seams"]]
        assert reasons and all("copies" in r for r in reasons)
        assert {seam["kind"] for seam in plan["seams"]} == {"io"}
    finally:
        s.close()


class _Step:
    """The fields of a planner Step that segment() reads."""

    def __init__(self, name, kernel=None, device=DEVICE, copy=None):
        self.name, self.copy = name, copy
        self.placed = None if kernel is None else type(
            "Placed", (), {"kernel": kernel, "device": device, "provider": "p"})()


class _Answer(FakeKernel):
    def __init__(self, answer):
        self.answer = answer

    def capture_support(self):
        return self.answer


def test_an_unsupported_kernel_splits_segments_and_its_reason_is_kept():
    ok = _Answer(CaptureSupport.SUPPORTED)
    no = _Answer(CaptureSupport.unsupported("reads a length back to the host"))
    layout = segment([_Step("a", ok), _Step("b", ok), _Step("c", no), _Step("d", ok),
                      _Step("h", ok, device="cpu")])
    assert layout.segments == ((0, 1), (3,))
    assert [(s.name, s.reason) for s in layout.seams] == [
        ("c", "reads a length back to the host"), ("h", "runs on the host (p)")]


def test_a_capture_support_answer_of_the_wrong_type_is_a_contract_error():
    with pytest.raises(KernelContractError, match="expected a CaptureSupport"):
        segment([_Step("a", _Answer(True))])


def test_capture_support_is_asked_once_per_signature_after_its_first_run():
    plugin = FakeDevicePlugin()
    asked: list[int] = []

    def answer() -> CaptureSupport:
        asked.append(1)
        return CaptureSupport.unsupported("test: pretends to sync")

    plugin.kernels["Relu"].capture_support = answer       # type: ignore[method-assign]
    s = onnx_ep.Session(_chain("Relu", "Relu"), providers=[DEVICE, "cpu_reference"],
                        plugins=[plugin])
    try:
        assert asked == []                 # not at load, not at plan time
        for _ in range(3):
            s.run(None, {"x": X})
        assert len(asked) == 2             # two Relu steps, asked once after the first run
        (plan,) = s.capture_report()["plans"]
        assert plan["segments"] == [] and plan["captured_steps"] == 0
        assert [x["reason"] for x in plan["seams"]].count("test: pretends to sync") == 2
    finally:
        s.close()


def test_a_host_only_session_reports_no_plans():
    s = onnx_ep.Session(_chain("Relu"), providers=["cpu_reference"])
    s.run(None, {"x": X})
    assert s.capture_report()["plans"] == []
