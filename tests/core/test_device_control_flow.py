"""Control flow on a device (core/control_flow.py, core/subgraphs.py): ``If``, ``Loop`` and
``Scan`` placed on the device run their bodies there as plans of their own, planned and
admitted with the caller's signature; values stay on the device; the only read-backs are
the conditions. On the fake device, checked against the CPU reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep.core.admission import AdmissionDecision
from onnx_ep.core.control_flow import NOT_CAPTURED
from onnx_ep.errors import AdmissionRefused, NodeError
from tests.helpers.fake_device import FakeDevicePlugin
from tests.helpers.oracle import ORACLE_IR_VERSION

F = TensorProto.FLOAT
n = helper.make_node
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "cf", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def _if_model(else_op: str = "Mul") -> onnx.ModelProto:
    """z = Relu(If(c, then: x + y, else: x <else_op> y))."""
    then = helper.make_graph([n("Add", ["x", "y"], ["t"], name="then_add")], "then", [],
                             [vi("t", F, [2, 3])])
    other = helper.make_graph([n(else_op, ["x", "y"], ["e"], name="else_op")], "else", [],
                              [vi("e", F, [2, 3])])
    return _model([n("If", ["c"], ["o"], then_branch=then, else_branch=other, name="if"),
                   n("Relu", ["o"], ["z"], name="relu")],
                  [vi("c", TensorProto.BOOL, [1]), vi("x", F, [2, 3]), vi("y", F, [2, 3])],
                  [vi("z", F, [2, 3])])


def _plugin(**kw: Any) -> FakeDevicePlugin:
    return FakeDevicePlugin(ops=("Add", "Relu", "Mul"), control_flow=True, **kw)


X = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
Y = np.array([[2, 2, -1], [3, -1, 1]], np.float32)


@pytest.mark.parametrize("cond", [True, False])
def test_if_runs_its_chosen_branch_on_the_device(cond):
    plugin = _plugin()
    s = onnx_ep.Session(_if_model(), providers=["fake"], plugins=[plugin])
    assert s.placement_summary() == {"fake": 2}
    want = np.maximum(X + Y if cond else X * Y, 0)
    ref = onnx_ep.Session(_if_model(), providers=["cpu_reference"])
    feeds = {"c": np.array([cond]), "x": X, "y": Y}
    np.testing.assert_array_equal(ref.run(None, feeds)[0], want)
    before = plugin.runtime.downloads
    np.testing.assert_array_equal(s.run(None, feeds)[0], want)
    # one read-back for the condition, one for the fetched output: nothing else
    assert plugin.runtime.downloads - before == 2
    # both branches were planned with the caller's signature, each on the device
    bodies = s.resources()["bodies"]
    assert sorted(b["body"] for b in bodies) == ["else", "then"]
    assert all(b["nodes"]["by_provider"] == {"fake": 1} and not b["nodes"]["host"]
               for b in bodies)
    (plan,) = s.resources()["plans"]
    assert plan["copies"]["device_to_host"]["count"] == 1


def test_if_alternating_branches_with_capture_keeps_answers_and_declares_the_seam():
    plugin = _plugin()
    s = onnx_ep.Session(_if_model(), providers=["fake"], plugins=[plugin],
                        options=onnx_ep.SessionOptions(capture="auto"))
    for cond in (True, False) * 5:
        got = s.run(None, {"c": np.array([cond]), "x": X, "y": Y})[0]
        np.testing.assert_array_equal(got, np.maximum(X + Y if cond else X * Y, 0))
    assert NOT_CAPTURED in repr(s.capture_report())
    # each branch records its own graph once it has run under the caller's schedule
    for body in s.resources()["bodies"]:
        assert body["capture"]["state"] == "recorded" and body["capture"]["replays"] >= 2
    # a run with capture off runs the bodies eagerly too, with the same answers
    off = onnx_ep.RunOptions(capture="off")
    before = [b["capture"]["replays"] for b in s.resources()["bodies"]]
    got = s.run(None, {"c": np.array([False]), "x": X, "y": Y}, off)[0]
    np.testing.assert_array_equal(got, np.maximum(X * Y, 0))
    assert [b["capture"]["replays"] for b in s.resources()["bodies"]] == before


def test_a_body_node_the_device_cannot_run_falls_back_inside_the_body():
    plugin = _plugin()
    s = onnx_ep.Session(_if_model(else_op="Sub"), providers=["fake"], plugins=[plugin])
    got = s.run(None, {"c": np.array([False]), "x": X, "y": Y})[0]
    np.testing.assert_array_equal(got, np.maximum(X - Y, 0))
    (other,) = [b for b in s.resources()["bodies"] if b["body"] == "else"]
    assert other["nodes"]["by_provider"] == {"cpu_reference": 1}
    (host,) = other["nodes"]["host"]
    assert host["node"] == "else_op" and "fake" in host["reason"]


def _loop_model(scan_output: bool = False) -> onnx.ModelProto:
    """Three iterations of s = s + x (x from the outer scope); optionally Relu(s) per step."""
    body_nodes = [n("Add", ["s", "x"], ["s2"], name="body_add")]
    body_outs = [vi("cond_in", TensorProto.BOOL, []), vi("s2", F, [2, 3])]
    if scan_output:
        body_nodes.append(n("Relu", ["s2"], ["r"], name="body_relu"))
        body_outs.append(vi("r", F, [2, 3]))
    body = helper.make_graph(body_nodes, "body",
                             [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
                              vi("s", F, [2, 3])], body_outs)
    outs = ["final"] + (["rows"] if scan_output else [])
    return _model([n("Loop", ["M", "", "s0"], outs, body=body, name="loop"),
                   n("Relu", ["final"], ["z"], name="relu")],
                  [vi("s0", F, [2, 3]), vi("x", F, [2, 3])],
                  [vi("z", F, [2, 3])] + ([vi("rows", F, [3, 2, 3])] if scan_output else []),
                  [helper.make_tensor("M", TensorProto.INT64, [], [3])])


def test_loop_with_a_constant_trip_count_reads_nothing_back():
    plugin = _plugin()
    s = onnx_ep.Session(_loop_model(), providers=["fake"], plugins=[plugin])
    assert s.placement_summary() == {"fake": 2}
    before = plugin.runtime.downloads
    got = s.run(None, {"s0": Y, "x": X})[0]
    np.testing.assert_array_equal(got, np.maximum(Y + 3 * X, 0))
    assert plugin.runtime.downloads - before == 1          # the fetched output only
    np.testing.assert_array_equal(s.run(None, {"s0": X, "x": Y})[0], np.maximum(X + 3 * Y, 0))


def test_loop_scan_outputs_are_written_row_by_row_when_the_plan_sizes_them():
    model = _loop_model(scan_output=True)
    ref = onnx_ep.Session(model, providers=["cpu_reference"]).run(None, {"s0": Y, "x": X})
    s = onnx_ep.Session(model, providers=["fake"], plugins=[_plugin()])
    got = s.run(None, {"s0": Y, "x": X})
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    (plan,) = s.resources()["plans"]
    # onnx's inference leaves the scan output's length open: the Loop is sized on the host
    # at this signature, or on the device; either way the answer and the report agree
    on_host = {h["node"] for h in plan["nodes"]["host"]}
    assert ("loop" in on_host) == (plan["nodes"]["by_provider"].get("cpu_reference", 0) > 0)


def _scan_model(in_dir: int = 0, out_dir: int = 0) -> onnx.ModelProto:
    """Running sums of the rows of X (4 x 3) from s0, and their Relu per row."""
    body = helper.make_graph(
        [n("Add", ["s", "xt"], ["s2"], name="body_add"), n("Relu", ["s2"], ["y"], name="relu_t")],
        "scan_body", [vi("s", F, [3]), vi("xt", F, [3])], [vi("s2", F, [3]), vi("y", F, [3])])
    return _model([n("Scan", ["s0", "X"], ["final", "Y"], body=body, num_scan_inputs=1,
                     scan_input_directions=[in_dir], scan_output_directions=[out_dir],
                     name="scan")],
                  [vi("s0", F, [3]), vi("X", F, [4, 3])],
                  [vi("final", F, [3]), vi("Y", F, [4, 3])])


@pytest.mark.parametrize("in_dir,out_dir", [(0, 0), (1, 0), (0, 1)])
def test_scan_walks_its_rows_on_the_device(in_dir, out_dir):
    model = _scan_model(in_dir, out_dir)
    feeds = {"s0": np.array([1, -1, 0], np.float32),
             "X": np.arange(12, dtype=np.float32).reshape(4, 3) - 5}
    ref = onnx_ep.Session(model, providers=["cpu_reference"]).run(None, feeds)
    plugin = _plugin()
    s = onnx_ep.Session(model, providers=["fake"], plugins=[plugin])
    assert s.placement_summary() == {"fake": 1}
    before = plugin.runtime.downloads
    got = s.run(None, feeds)
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    assert plugin.runtime.downloads - before == 2          # the two fetched outputs
    (plan,) = s.resources()["plans"]
    assert plan["nodes"]["by_provider"] == {"fake": 1}


def test_a_scan_over_another_axis_stays_on_the_host_with_its_reason():
    model = _scan_model()
    model.graph.node[0].attribute.append(helper.make_attribute("scan_input_axes", [1]))
    model.graph.input[1].CopyFrom(vi("X", F, [3, 4]))
    s = onnx_ep.Session(model, providers=["fake"], plugins=[_plugin()])
    assert s.placement_summary() == {"cpu_reference": 1}
    feeds = {"s0": np.zeros(3, np.float32), "X": np.ones((3, 4), np.float32)}
    np.testing.assert_array_equal(s.run(None, feeds)[0], np.full(3, 4, np.float32))
    (plan,) = s.resources()["plans"]
    assert "scan_input_axes" in plan["nodes"]["host"][0]["reason"]


class RefuseBodies:
    """Admits everything but a control-flow body's plan."""

    name = "refuse-bodies"

    def admit(self, request: Any, ledger: Any) -> AdmissionDecision:
        if request.holder.endswith("/body"):
            return AdmissionDecision(AdmissionRefused("no room for a body", requested=1))
        return AdmissionDecision()


class RefusePlugin(FakeDevicePlugin):
    @onnx_ep.hookimpl
    def onnx_ep_select_admission_strategy(self, options: Any) -> Any:
        return RefuseBodies()


def test_a_body_that_is_not_admitted_is_refused_up_front_and_frees_what_it_took():
    """Static inputs: the session plans at load, its bodies with it; the refusal comes then
    and leaves no device memory behind."""
    plugin = RefusePlugin(ops=("Add", "Relu", "Mul"), control_flow=True)
    with pytest.raises(AdmissionRefused, match="no room for a body"):
        onnx_ep.Session(_if_model(), providers=["fake"], plugins=[plugin])
    assert plugin.runtime.live == 0
    assert plugin.kernels["Relu"].calls == 0


def test_a_refused_body_at_a_new_signature_leaves_the_session_as_it_was():
    model = _if_model()
    for v in (*model.graph.input[1:], *model.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "n"
    plugin = RefusePlugin(ops=("Add", "Relu", "Mul"), control_flow=True)
    s = onnx_ep.Session(model, providers=["fake"], plugins=[plugin])
    held = s.resources()["held_by_session"]
    with pytest.raises(AdmissionRefused, match="no room for a body"):
        s.run(None, {"c": np.array([True]), "x": X, "y": Y})
    assert plugin.kernels["Relu"].calls == 0
    assert s.resources()["held_by_session"] == held


def test_a_branch_that_breaks_its_declared_shape_is_refused_at_load():
    """A branch whose value contradicts the type the model declares for it is an invalid
    model (onnxruntime refuses it too): a ModelError naming what inference found."""
    from onnx_ep.errors import ModelError

    model = _if_model()
    (then,) = [a.g for a in model.graph.node[0].attribute if a.name == "then_branch"]
    then.node[0].CopyFrom(n("Add", ["x", "x3"], ["t"], name="then_add"))
    model.graph.input.append(vi("x3", F, [2, 1, 3]))
    with pytest.raises(ModelError, match="contradicts onnx's shape inference.*then_add"):
        onnx_ep.Session(model, providers=["fake"], plugins=[_plugin()])


def test_a_body_value_of_another_shape_than_the_planned_buffer_is_refused_by_name():
    from onnx_ep.core.control_flow import If
    from onnx_ep.core.kernel import ExecutionContext
    from tests.helpers.fake_device import FakeStream, FakeTensor

    plugin = _plugin()
    kernel = If(lambda: plugin.runtime, 1)
    graph = onnx_ep.Session(_if_model(), providers=["cpu_reference"]).graph
    meta = graph.nodes[0]
    from onnx_ep.core.placement import node_meta
    ctx = ExecutionContext(node_meta(meta, graph), stream=FakeStream(), provider="fake",
                           run_subgraph=lambda g, feeds: [FakeTensor(np.zeros((2, 2), "f4"))])
    out = [FakeTensor(np.zeros((2, 3), "f4"))]
    with pytest.raises(NodeError, match=r"then_branch output 0: the body made "
                                        r"float32\[2, 2\] but the plan sized float32\[2, 3\]"):
        kernel.execute_with_workspace(ctx, [FakeTensor(np.array([True]))], out, None)


def _same_named_initializers() -> onnx.ModelProto:
    """Both branches add an initializer each names ``k`` (exporters reuse such names per
    graph): then gives x + 1, else x + 10."""
    def branch(name: str, value: float) -> onnx.GraphProto:
        k = helper.make_tensor("k", F, [], [value])
        return helper.make_graph([n("Add", ["x", "k"], [f"{name}_out"])], name, [],
                                 [vi(f"{name}_out", F, [2, 3])], initializer=[k])
    return _model([n("If", ["c"], ["z"], then_branch=branch("then", 1.0),
                     else_branch=branch("else", 10.0))],
                  [vi("c", TensorProto.BOOL, [1]), vi("x", F, [2, 3])], [vi("z", F, [2, 3])])


def test_branches_naming_their_initializers_alike_each_get_their_own():
    s = onnx_ep.Session(_same_named_initializers(), providers=["fake"], plugins=[_plugin()])
    for cond, add in ((True, 1), (False, 10), (True, 1)):
        np.testing.assert_array_equal(s.run(None, {"c": np.array([cond]), "x": X})[0], X + add)
    assert all(b["nodes"]["by_provider"] == {"fake": 1} for b in s.resources()["bodies"])


def _nonzero_if(out_shape: list | None) -> onnx.ModelProto:
    then = helper.make_graph([n("NonZero", ["x"], ["nz"])], "then", [],
                             [vi("nz", TensorProto.INT64, None)])
    other = helper.make_graph([n("NonZero", ["y"], ["nz2"])], "else", [],
                              [vi("nz2", TensorProto.INT64, None)])
    return _model([n("If", ["c"], ["z"], then_branch=then, else_branch=other, name="if")],
                  [vi("c", TensorProto.BOOL, [1]), vi("x", F, [2, 3]), vi("y", F, [2, 3])],
                  [vi("z", TensorProto.INT64, out_shape)])


def test_an_if_of_unknown_output_size_runs_on_the_host_with_why():
    s = onnx_ep.Session(_nonzero_if(None), providers=["fake"], plugins=[_plugin()])
    got = s.run(None, {"c": np.array([True]), "x": X, "y": Y})[0]
    np.testing.assert_array_equal(got, np.array(np.nonzero(X)))
    (plan,) = s.resources()["plans"]
    (host,) = [h for h in plan["nodes"]["host"] if h["node"] == "if"]
    assert "size is unknown" in host["reason"]


def test_an_if_whose_branch_cannot_deliver_on_the_device_runs_on_the_host_with_why():
    """The model declares the If's value [2, 6], but its branches make it on the host with a
    data-dependent size (NonZero) that the device cannot pre-bind inside the body: the If
    goes to the host at this signature, saying why."""
    s = onnx_ep.Session(_nonzero_if([2, 6]), providers=["fake"], plugins=[_plugin()])
    got = s.run(None, {"c": np.array([True]), "x": X, "y": Y})[0]
    np.testing.assert_array_equal(got, np.array(np.nonzero(X)))
    (plan,) = s.resources()["plans"]
    (host,) = [h for h in plan["nodes"]["host"] if h["node"] == "if"]
    assert "a body cannot run on fake here" in host["reason"]


def test_a_body_kernel_reads_a_value_its_caller_knows():
    """The branch sums over ``axes``, an initializer of the main graph (what exporters
    share between branches): the device kernel needs that value, when the body is placed
    and planned and when it runs, as it would in the main graph."""
    from tests.core.test_deferred_placement import AxesSum

    def branch(name: str, keep: int) -> onnx.GraphProto:
        return helper.make_graph([n("ReduceSum", ["x", "axes"], [f"{name}_out"], keepdims=keep,
                                    name=f"{name}_sum")], name, [],
                                 [vi(f"{name}_out", F, [2] if not keep else [2, 1])])
    model = _model([n("If", ["c"], ["z"], then_branch=branch("then", 0),
                      else_branch=branch("else", 0), name="if")],
                   [vi("c", TensorProto.BOOL, [1]), vi("x", F, [2, 3])], [vi("z", F, [2])],
                   [helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    model.opset_import[0].version = 13
    plugin = _plugin()
    plugin.kernels["ReduceSum"] = AxesSum()
    s = onnx_ep.Session(model, providers=["fake"], plugins=[plugin])
    np.testing.assert_array_equal(s.run(None, {"c": np.array([True]), "x": X})[0], X.sum(1))
    assert plugin.kernels["ReduceSum"].seen == [(1,)]
    assert all(b["nodes"]["by_provider"] == {"fake": 1} for b in s.resources()["bodies"])


def test_a_branch_may_hand_back_an_outer_value_or_a_constant():
    then = helper.make_graph([], "then", [], [vi("x", F, [2, 3])])          # x as is
    other = helper.make_graph(
        [n("Constant", [], ["k"], value=helper.make_tensor("kv", F, [2, 3], [1.0] * 6)),
         n("Add", ["k", "y"], ["e"], name="else_add")], "else", [], [vi("e", F, [2, 3])])
    model = _model([n("If", ["c"], ["o"], then_branch=then, else_branch=other, name="if"),
                    n("Relu", ["o"], ["z"], name="relu")],
                   [vi("c", TensorProto.BOOL, [1]), vi("x", F, [2, 3]), vi("y", F, [2, 3])],
                   [vi("z", F, [2, 3])])
    s = onnx_ep.Session(model, providers=["fake"], plugins=[_plugin()])
    ref = onnx_ep.Session(model, providers=["cpu_reference"])
    for cond, want in ((True, np.maximum(X, 0)), (False, np.maximum(Y + 1, 0))):
        feeds = {"c": np.array([cond]), "x": X, "y": Y}
        np.testing.assert_array_equal(ref.run(None, feeds)[0], want)
        np.testing.assert_array_equal(s.run(None, feeds)[0], want)
    assert s.placement_summary() == {"fake": 2}


def test_a_loop_that_runs_zero_times_hands_back_its_initial_state():
    model = _loop_model()
    model.graph.initializer[0].CopyFrom(helper.make_tensor("M", TensorProto.INT64, [], [0]))
    s = onnx_ep.Session(model, providers=["fake"], plugins=[_plugin()])
    np.testing.assert_array_equal(s.run(None, {"s0": Y, "x": X})[0], np.maximum(Y, 0))


def test_an_if_inside_a_loop_body_runs_on_the_device_too():
    """Each iteration adds x or multiplies by y, chosen by the iteration's parity (the
    condition read back inside the body's own plan)."""
    two = helper.make_tensor("two", TensorProto.INT64, [], [2])
    zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    inner_then = helper.make_graph([n("Add", ["s", "x"], ["t"])], "even", [], [vi("t", F, [2, 3])])
    inner_else = helper.make_graph([n("Mul", ["s", "y"], ["e"])], "odd", [], [vi("e", F, [2, 3])])
    body = helper.make_graph(
        [n("Mod", ["i", "two"], ["r"]), n("Equal", ["r", "zero"], ["even"]),
         n("If", ["even"], ["s2"], then_branch=inner_then, else_branch=inner_else,
           name="inner_if")], "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
         vi("s", F, [2, 3])], [vi("cond_in", TensorProto.BOOL, []), vi("s2", F, [2, 3])],
        initializer=[two, zero])
    g = helper.make_graph([n("Loop", ["M", "", "s0"], ["final"], body=body, name="loop")],
                          "nested", [vi("s0", F, [2, 3]), vi("x", F, [2, 3]),
                                     vi("y", F, [2, 3])], [vi("final", F, [2, 3])],
                          initializer=[helper.make_tensor("M", TensorProto.INT64, [], [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=ORACLE_IR_VERSION)
    want = ((Y + X) * Y) + X
    ref = onnx_ep.Session(model, providers=["cpu_reference"]).run(None, {"s0": Y, "x": X,
                                                                        "y": Y})[0]
    np.testing.assert_array_equal(ref, want)
    s = onnx_ep.Session(model, providers=["fake"], plugins=[_plugin()])
    for _ in range(2):
        np.testing.assert_array_equal(s.run(None, {"s0": Y, "x": X, "y": Y})[0], want)
    assert s.placement_summary() == {"fake": 1}
    names = {b["body"] for b in s.resources()["bodies"]}
    assert {"body", "even", "odd"} <= names


def test_a_scan_over_no_rows_hands_back_its_initial_state_and_empty_outputs():
    model = _scan_model()
    model.graph.input[1].CopyFrom(vi("X", F, [0, 3]))
    model.graph.output[1].CopyFrom(vi("Y", F, [0, 3]))
    s = onnx_ep.Session(model, providers=["fake"], plugins=[_plugin()])
    s0 = np.array([1, -1, 0], np.float32)
    final, ys = s.run(None, {"s0": s0, "X": np.zeros((0, 3), np.float32)})
    np.testing.assert_array_equal(final, s0)
    assert ys.shape == (0, 3)


def test_a_carried_value_nobody_reads_ping_pongs_through_scratch():
    """The final state is unused (output name ""): the loop carries it through its scratch
    and writes only the per-iteration rows."""
    model = _loop_model(scan_output=True)
    loop = model.graph.node[0]
    del loop.output[:]
    loop.output.extend(["", "rows"])
    del model.graph.node[1]                     # the Relu of the final state
    del model.graph.output[0]
    ref = onnx_ep.Session(model, providers=["cpu_reference"]).run(None, {"s0": Y, "x": X})[0]
    want = np.stack([np.maximum(Y + k * X, 0) for k in (1, 2, 3)])
    np.testing.assert_array_equal(ref, want)
    s = onnx_ep.Session(model, providers=["fake"], plugins=[_plugin()])
    for _ in range(2):
        np.testing.assert_array_equal(s.run(None, {"s0": Y, "x": X})[0], want)
    (plan,) = s.resources()["plans"]
    assert plan["nodes"]["by_provider"] == {"fake": 1} and not plan["nodes"]["host"]


def test_a_dropped_device_session_frees_its_memory_at_once():
    """No reference cycle through the bodies' planner: a session nobody holds is freed by
    reference counting, with its device memory, not at some later garbage collection."""
    import gc
    import weakref

    plugin = _plugin()
    s = onnx_ep.Session(_if_model(), providers=["fake"], plugins=[plugin],
                        options=onnx_ep.SessionOptions(capture="auto"))
    for cond in (True, False) * 3:
        s.run(None, {"c": np.array([cond]), "x": X, "y": Y})
    gone = weakref.ref(s)
    was = gc.isenabled()
    gc.disable()
    try:
        del s
        assert gone() is None
        assert plugin.runtime.live == 0
    finally:
        if was:
            gc.enable()
