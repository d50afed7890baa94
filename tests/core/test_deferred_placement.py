"""Placement settled per signature: a device kernel that declined a node at load while part
of its meta was unknown (a rank, a size, a value computed from shapes) is asked again when a
signature is planned, with that signature's specs and folded values, and runs the node on
the device where it accepts (on the fake device, so every machine runs it)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import OpKey, Parity, Support, TensorSpec
from onnx_ep.errors import NoKernelError
from tests.helpers.fake_device import FakeDevicePlugin, FakeKernel
from tests.helpers.oracle import ORACLE_IR_VERSION


class RankedRelu(FakeKernel):
    """A device Relu that needs its input's rank and sizes, as most CUDA kernels do."""

    def __init__(self) -> None:
        super().__init__("Relu", lambda x: np.maximum(x, 0))

    def supports(self, meta: Any) -> Support:
        x = meta.inputs[0]
        if x is None:
            return Support.no("input is not a tensor of known dtype and rank")
        return super().supports(meta)


class AxesSum(FakeKernel):
    """ReduceSum(x, axes, keepdims=0) on the device: the output's rank depends on the value
    of ``axes``, so it needs that value when the node is planned and when it runs."""

    def __init__(self) -> None:
        super().__init__("ReduceSum", None, since=13)
        self.seen: list[Any] = []

    def supports(self, meta: Any) -> Support:
        if meta.constant(1) is None:
            return Support.no("axes is not known when the node is planned")
        return Support.YES

    def infer_outputs(self, meta: Any) -> list[TensorSpec | None]:
        x, axes = meta.inputs[0], meta.constant(1)
        shape = tuple(n for d, n in enumerate(x.shape) if d not in set(axes.tolist()))
        return [TensorSpec(x.dtype, shape)]

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        axes = tuple(int(a) for a in ctx.node.constant(1))   # the value this plan folded
        self.seen.append(axes)
        x, out = inputs[0].array, outputs[0].array
        ctx.stream.enqueue(lambda: out.__setitem__(..., x.sum(axis=axes)))


class HostTwice:
    """A host op onnx's inference does not know: its output has no type at load."""

    key = OpKey("test.deferred", "Twice", 1)
    parity = Parity.EXACT

    def infer_outputs(self, meta: Any) -> list[TensorSpec | None]:
        return [meta.inputs[0]]

    def workspace_requirement(self, meta: Any) -> onnx_ep.WorkspaceRequirement:
        return onnx_ep.WorkspaceRequirement.NONE

    def capture_support(self) -> onnx_ep.CaptureSupport:
        return onnx_ep.CaptureSupport.UNSUPPORTED

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        outputs[0] = inputs[0] * 2


class Plugin(FakeDevicePlugin):
    def __init__(self) -> None:
        super().__init__(ops=("Add",))
        self.kernels["Relu"] = RankedRelu()
        self.kernels["ReduceSum"] = AxesSum()

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(self, register: Any) -> None:
        super().onnx_ep_register_kernels(register)
        register(HostTwice(), provider="cpu_reference")


def _unknown_rank_model():
    """y = Relu(Twice(x)) + x: Relu's input has no type until a signature is planned."""
    n = helper.make_node
    g = helper.make_graph(
        [n("Twice", ["x"], ["t"], domain="test.deferred", name="twice"),
         n("Relu", ["t"], ["r"], name="relu"), n("Add", ["r", "x"], ["y"], name="add")], "ur",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("test.deferred", 1)],
                             ir_version=ORACLE_IR_VERSION)


def _computed_axes_model():
    """y = ReduceSum(x, axes = rank(x) - 1, keepdims=0) + b: the axes come from shapes."""
    n = helper.make_node
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    g = helper.make_graph(
        [n("Shape", ["x"], ["s"]), n("Shape", ["s"], ["rank"]), n("Sub", ["rank", "one"], ["ax"]),
         n("ReduceSum", ["x", "ax"], ["r"], keepdims=0, name="sum"),
         n("Add", ["r", "b"], ["y"], name="add")], "ca",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "k"]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[one])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def test_a_node_of_unknown_rank_at_load_runs_on_the_device_once_its_signature_sizes_it(caplog):
    plugin = Plugin()
    with caplog.at_level(logging.INFO, logger="onnx_ep"):
        s = onnx_ep.Session(_unknown_rank_model(), providers=["fake"], plugins=[plugin])
    # at load the device kernel could not see Relu's input: the host has it, for now
    assert s.placement_summary() == {"cpu_reference": 2, "fake": 1}
    (line,) = [r.getMessage() for r in caplog.records if "'relu'" in r.getMessage()]
    assert "not a tensor of known dtype and rank" in line and "asked again" in line
    x = np.array([[-1, 2, 3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(2 * x, 0) + x)
    assert plugin.kernels["Relu"].calls == 1
    assert s.placement_summary() == {"cpu_reference": 1, "fake": 2}
    (plan,) = s.resources()["plans"]
    assert plan["nodes"]["promoted"] == ["relu"]
    assert plan["nodes"]["by_provider"] == {"cpu_reference": 1, "fake": 2}
    assert plan["nodes"]["host"] == [{"node": "twice", "op": "test.deferred::Twice",
                                      "provider": "cpu_reference", "reason": "fake: no kernel"}]
    # a second signature settles on its own; the first keeps its plan
    x3 = np.ones((3, 3), np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x3})[0], 3 * x3)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(2 * x, 0) + x)
    assert plugin.kernels["Relu"].calls == 3


def test_an_axes_input_computed_from_shapes_is_read_when_the_signature_is_planned():
    plugin = Plugin()
    s = onnx_ep.Session(_computed_axes_model(), providers=["fake"], plugins=[plugin])
    fallbacks = {f[0]: f[3] for f in s._program.placement.fallbacks}
    assert "axes is not known" in fallbacks["sum"]
    rng = np.random.default_rng(0)
    for shape in ((2, 5), (4, 1), (2, 5)):
        x = rng.standard_normal(shape).astype(np.float32)
        b = rng.standard_normal(shape[0]).astype(np.float32)
        (y,) = s.run(None, {"x": x, "b": b})
        np.testing.assert_allclose(y, x.sum(axis=1) + b, rtol=1e-6)
    # the device kernel ran every time, with the axes the plan folded (rank 2 -> axis 1)
    assert plugin.kernels["ReduceSum"].seen == [(1,), (1,), (1,)]
    # the shape arithmetic is folded away at each signature: nothing else runs on the host
    assert s.placement_summary() == {"cpu_reference": 3, "fake": 2}
    assert [p["nodes"] for p in s.resources()["plans"]] == [
        {"by_provider": {"fake": 2}, "folded": 3, "promoted": ["sum"], "host": []}] * 2


def test_a_strict_session_refuses_at_load_as_before():
    """Deferring needs a host provider to hold the node meanwhile: a strict session keeps
    refusing at load, naming the device's reason."""
    n = helper.make_node
    g = helper.make_graph([n("Relu", ["x"], ["y"], name="relu")], "r",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                          ir_version=ORACLE_IR_VERSION)
    strict = onnx_ep.SessionOptions(disable_fallback=True)
    with pytest.raises(NoKernelError, match="Relu") as info:
        onnx_ep.Session(m, providers=["fake"], plugins=[Plugin()], options=strict)
    assert "known dtype and rank" in str(info.value)
    plugin = Plugin()
    s = onnx_ep.Session(m, providers=["fake"], plugins=[plugin])
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(x, 0))
    assert plugin.kernels["Relu"].calls == 1


def test_fully_known_nodes_are_not_deferred():
    """A node the device declines with its whole meta known stays on the host, unasked."""
    plugin = Plugin()
    m = _unknown_rank_model()
    del m.graph.node[0]
    m.graph.node[0].input[0] = "x"
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    s = onnx_ep.Session(m, providers=["fake"], plugins=[plugin])
    placed = [st for st in s._program.placement.steps if hasattr(st, "deferred")]
    assert placed and not any(st.deferred for st in placed)
    x = np.ones((2, 3))
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], 2 * x)
    assert s.resources()["plans"][0]["nodes"]["promoted"] == []


def test_onnx_inference_of_one_node_sizes_it_from_the_plans_specs_and_values():
    """What whole-model inference could not size at load (a shape computed at run time) is
    sized per node once a plan knows the inputs' sizes and the shape's value."""
    from onnx_ep.core.graph import build_graph, infer_node

    n = helper.make_node
    g = helper.make_graph(
        [n("Reshape", ["x", "s"], ["y"], name="r"), n("Add", ["y", "y"], ["z"], name="a"),
         n("Twice", ["z"], ["w"], domain="test.deferred", name="t")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("test.deferred", 1)],
                          ir_version=ORACLE_IR_VERSION)
    graph = build_graph(m)
    reshape, add, twice = graph.nodes
    x, s = TensorSpec(np.float32, (2, 6)), TensorSpec(np.int64, (2,))
    assert infer_node(reshape, 17, (x, s), {1: np.array([3, 4])}) == \
        [TensorSpec(np.float32, (3, 4))]
    assert infer_node(reshape, 17, (x, s), {}) == [None]           # the value decides
    y = TensorSpec(np.float32, (3, 4))
    assert infer_node(add, 17, (y, y), {}) == [y]
    assert infer_node(add, 17, (y, None), {}) == [None]            # an input unsized
    assert infer_node(twice, 1, (y,), {}) == [None]                # not an onnx op


class HostThrice(HostTwice):
    """A host op nobody can size before it runs (no ``infer_outputs``)."""

    key = OpKey("test.deferred", "Thrice", 1)
    infer_outputs = None

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        outputs[0] = inputs[0] * 3


class DeviceThrice(FakeKernel):
    """The same op on the device: it needs its input's type, and sizes its output."""

    def __init__(self) -> None:
        super().__init__("Thrice", lambda x: 3 * x)
        self.key = OpKey("test.deferred", "Thrice", 1)

    def supports(self, meta: Any) -> Support:
        if meta.inputs[0] is None:
            return Support.no("input is not a tensor of known dtype and rank")
        return super().supports(meta)

    def infer_outputs(self, meta: Any) -> list[TensorSpec | None]:
        return [meta.inputs[0]]


def test_promotion_repeats_until_no_node_changes_side():
    """Twice (host) -> Thrice -> Relu: Thrice is promoted once Twice sizes its input; only
    then can its device kernel size Relu's input, so Relu is promoted in a second round."""
    plugin = Plugin()
    plugin.kernels["Thrice"] = DeviceThrice()
    n = helper.make_node
    g = helper.make_graph(
        [n("Twice", ["x"], ["t"], domain="test.deferred", name="twice"),
         n("Thrice", ["t"], ["u"], domain="test.deferred", name="thrice"),
         n("Relu", ["u"], ["y"], name="relu")], "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("test.deferred", 1)],
                          ir_version=ORACLE_IR_VERSION)

    class Hosts:
        @onnx_ep.hookimpl
        def onnx_ep_register_kernels(self, register: Any) -> None:
            register(HostThrice(), provider="cpu_reference")

    s = onnx_ep.Session(m, providers=["fake", "cpu_reference"], plugins=[plugin, Hosts()])
    x = np.array([[-1, 2, 3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(6 * x, 0))
    (plan,) = s.resources()["plans"]
    assert sorted(plan["nodes"]["promoted"]) == ["relu", "thrice"]
    assert plugin.kernels["Relu"].calls == 1 and plugin.kernels["Thrice"].calls == 1
