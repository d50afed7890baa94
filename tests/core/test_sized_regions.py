"""Run-sized values on a device (core/dynamic.py): a kernel that sizes its outputs at run
time (NonZero) runs on the device, and the nodes that depend on its values move into an
``onnx_ep::SizedRegion`` whose body is planned per size on the same device. On the fake
device, checked against the CPU reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import CaptureSupport, Support, TensorSpec, WorkspaceRequirement
from onnx_ep.core import subgraphs
from onnx_ep.core.kernel import WorkspaceLifetime
from tests.helpers.fake_device import FakeDevicePlugin, FakeKernel
from tests.helpers.oracle import ORACLE_IR_VERSION

F = TensorProto.FLOAT
n = helper.make_node
vi = helper.make_tensor_value_info


class FakeNonZero(FakeKernel):
    """NonZero sized at run time: coordinates into worst-case scratch, a view of the count
    it found (the fake 'reads back' the count: counted in ``reads``)."""

    sizes_at_run = True

    def __init__(self) -> None:
        super().__init__("NonZero", None, since=9)
        self.reads = 0

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.unsupported("reads its count back")

    def workspace_requirement(self, meta: Any) -> WorkspaceRequirement:
        x = meta.inputs[0]
        return WorkspaceRequirement(max(8, 8 * len(x.shape) * int(np.prod(x.shape))),
                                    WorkspaceLifetime.SESSION_PERSISTENT)

    def infer_outputs(self, meta: Any) -> list[TensorSpec | None]:
        return [None]

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        assert outputs[0] is None, "a run-sized output is never pre-bound"
        self.calls += 1
        self.reads += 1
        idx = np.array(np.nonzero(inputs[0].array), dtype=np.int64)
        out = workspace.buffer.view(np.int64, idx.shape, 0)
        out.array[...] = idx
        outputs[0] = out


class FakeCast(FakeKernel):
    """Cast int64 -> float32 on the fake device."""

    def __init__(self) -> None:
        super().__init__("Cast", lambda x: x.astype(np.float32), since=13)

    def supports(self, meta: Any) -> Support:
        return Support.YES


def _plugin(region: bool = True) -> FakeDevicePlugin:
    p = FakeDevicePlugin(ops=("Add", "Relu"), control_flow=region)
    p.kernels["NonZero"] = FakeNonZero()
    p.kernels["Cast"] = FakeCast()
    return p


def _model() -> onnx.ModelProto:
    """r = Relu(x); c = Cast(NonZero(r)); out = c + c; outputs r and out."""
    g = helper.make_graph(
        [n("Relu", ["x"], ["r"], name="relu"), n("NonZero", ["r"], ["nz"], name="nonzero"),
         n("Cast", ["nz"], ["c"], to=F, name="cast"), n("Add", ["c", "c"], ["out"], name="add")],
        "nz", [vi("x", F, [2, 3])], [vi("r", F, [2, 3]), vi("out", F, [2, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def _want(x: np.ndarray) -> list[np.ndarray]:
    r = np.maximum(x, 0)
    c = np.array(np.nonzero(r), dtype=np.float32)
    return [r, c + c]


XS = [np.array([[1, -2, 3], [-4, 5, -6]], np.float32),
      np.array([[1, 2, 3], [4, 5, 6]], np.float32),
      np.zeros((2, 3), np.float32),
      np.array([[0, 0, 1], [0, 0, 0]], np.float32)]


def test_the_nodes_after_a_run_sized_value_stay_on_the_device():
    plugin = _plugin()
    s = onnx_ep.Session(_model(), providers=["fake"], plugins=[plugin])
    # the cone (Cast, Add) is one region node on the device; nothing runs on the host
    assert s.placement_summary() == {"fake": 3}
    ref = onnx_ep.Session(_model(), providers=["cpu_reference"])
    for x in XS + XS:
        got = s.run(None, {"x": x})
        for a, b, w in zip(got, ref.run(None, {"x": x}), _want(x)):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, w)
    assert plugin.kernels["NonZero"].reads == 8        # one size read-back per run
    bodies = s.resources()["bodies"]
    assert len(bodies) == len(XS)                       # one body plan per size met
    assert all(b["nodes"]["by_provider"] == {"fake": 2} for b in bodies)
    (plan,) = s.resources()["plans"]
    assert not plan["nodes"]["host"]


def test_an_iobinding_output_of_a_region_stays_on_the_device():
    s = onnx_ep.Session(_model(), providers=["fake"], plugins=[_plugin()])
    b = s.io_binding()
    b.bind_cpu_input("x", XS[0])
    b.bind_output("out", "fake")
    s.run_with_iobinding(b)
    (out,) = b.get_outputs()
    assert out.device_type == "fake"
    np.testing.assert_array_equal(out.numpy(), _want(XS[0])[1])


def test_plans_of_one_region_are_bounded_and_free_their_memory(monkeypatch):
    monkeypatch.setattr(subgraphs, "PLANS_PER_BODY", 2)
    plugin = _plugin()
    s = onnx_ep.Session(_model(), providers=["fake"], plugins=[plugin])
    s.run(None, {"x": XS[0]})
    s.run(None, {"x": XS[1]})
    held = s.resources()["held_by_session"]
    live = plugin.runtime.live
    for x in XS[2:] + XS[:2]:
        np.testing.assert_array_equal(s.run(None, {"x": x})[1], _want(x)[1])
    assert len(s.resources()["bodies"]) == 2
    assert plugin.runtime.live == live
    assert s.resources()["held_by_session"] <= held + 64


def test_without_a_region_kernel_the_dependent_nodes_run_on_the_host_with_why():
    plugin = _plugin(region=False)
    s = onnx_ep.Session(_model(), providers=["fake"], plugins=[plugin])
    for x in XS:
        for a, w in zip(s.run(None, {"x": x}), _want(x)):
            np.testing.assert_array_equal(a, w)
    (plan,) = s.resources()["plans"]
    host = {h["node"]: h["reason"] for h in plan["nodes"]["host"]}
    assert set(host) == {"cast", "add"} and all("size is unknown" in r for r in host.values())
    assert plugin.kernels["NonZero"].calls == len(XS)


def test_a_host_session_is_not_rewritten():
    s = onnx_ep.Session(_model(), providers=["cpu_reference"])
    assert [nd.op_type for nd in s.graph.nodes] == ["Relu", "NonZero", "Cast", "Add"]
    for a, w in zip(s.run(None, {"x": XS[0]}), _want(XS[0])):
        np.testing.assert_array_equal(a, w)


@pytest.mark.parametrize("capture", ["auto", "off"])
def test_regions_under_capture_keep_their_answers(capture):
    s = onnx_ep.Session(_model(), providers=["fake"], plugins=[_plugin()],
                        options=onnx_ep.SessionOptions(capture=capture))
    for x in XS * 3:
        for a, w in zip(s.run(None, {"x": x}), _want(x)):
            np.testing.assert_array_equal(a, w)
