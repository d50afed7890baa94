"""Plan-time folding (core/folding.py): values a shape signature fixes are computed once."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_ep
from onnx_ep import Parity, SessionOptions
from onnx_ep.core import folding
from onnx_ep.core.folding import HostKernels
from onnx_ep.core.planner import infer_specs
from onnx_ep.core.settling import plan_with_host_fallback
from tests.helpers.fake_device import FakeDevicePlugin, FakeKernel
from tests.helpers.oracle import ORACLE_IR_VERSION

D = 8                                     # model width
#: the causal-mask subgraph of a decoder (as benchmarks' qwen_decode.py builds it)
MASK_NODES = ("S", "P", "P_plus_S", "T", "P0", "qpos", "kpos", "q_col", "k_row", "future",
              "bias")


def _model(nodes: list, inputs: list, outputs: list, inits: dict, opset: int = 21
           ) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "folding", inputs, outputs,
                              initializer=[numpy_helper.from_array(np.asarray(v), k)
                                           for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=ORACLE_IR_VERSION)


def _node(op: str, ins: list[str], out: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, [out], name=out, **attrs)


def mask_model() -> onnx.ModelProto:
    """Attention over past + new keys with a Range/Less/Where causal mask, then a projection:
    x[B, S, D], past[B, P, D] -> y[B, S, D], present[B, P + S, D]."""
    n = _node
    nodes = [
        n("Shape", ["x"], "S", start=1, end=2),
        n("Shape", ["past"], "P", start=1, end=2),
        n("Add", ["P", "S"], "P_plus_S"),
        n("Squeeze", ["P_plus_S", "axis0"], "T"),
        n("Squeeze", ["P", "axis0"], "P0"),
        n("Range", ["P0", "T", "one"], "qpos"),
        n("Range", ["zero", "T", "one"], "kpos"),
        n("Unsqueeze", ["qpos", "axis1"], "q_col"),
        n("Unsqueeze", ["kpos", "axis0"], "k_row"),
        n("Less", ["q_col", "k_row"], "future"),
        n("Where", ["future", "lowest", "zero_f"], "bias"),
        n("Concat", ["past", "x"], "present", axis=1),
        n("Transpose", ["present"], "keys_t", perm=[0, 2, 1]),
        n("MatMul", ["x", "keys_t"], "scores"),
        n("Add", ["scores", "bias"], "masked"),
        n("Softmax", ["masked"], "probs", axis=-1),
        n("MatMul", ["probs", "present"], "attn"),
        n("MatMul", ["attn", "wo"], "y"),
    ]
    inits = {"axis0": np.array([0], np.int64), "axis1": np.array([1], np.int64),
             "zero": np.array(0, np.int64), "one": np.array(1, np.int64),
             "lowest": np.array(np.finfo(np.float32).min, np.float32),
             "zero_f": np.array(0, np.float32),
             "wo": np.random.default_rng(7).standard_normal((D, D), dtype=np.float32)}
    vi = helper.make_tensor_value_info
    return _model(nodes, [vi("x", TensorProto.FLOAT, ["B", "S", D]),
                          vi("past", TensorProto.FLOAT, ["B", "P", D])],
                  [vi("y", TensorProto.FLOAT, ["B", "S", D]),
                   vi("present", TensorProto.FLOAT, ["B", "T", D])], inits)


def mask_feeds(batch: int, seq: int, past: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, seq, D), dtype=np.float32),
            "past": rng.standard_normal((batch, past, D), dtype=np.float32)}


def reshape_model(batch: str | int = "n") -> onnx.ModelProto:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape feeding a MatMul:
    x[n, 2, 4] -> x.reshape(n, 8) @ w."""
    n = _node
    nodes = [n("Shape", ["x"], "sx"), n("Gather", ["sx", "zero"], "batch", axis=0),
             n("Unsqueeze", ["batch", "axis0"], "batch1"),
             n("Concat", ["batch1", "tail"], "newshape", axis=0),
             n("Reshape", ["x", "newshape"], "x2"), n("MatMul", ["x2", "w"], "y")]
    vi = helper.make_tensor_value_info
    return _model(nodes, [vi("x", TensorProto.FLOAT, [batch, 2, 4])],
                  [vi("y", TensorProto.FLOAT, None)],
                  {"zero": np.array(0, np.int64), "axis0": np.array([0], np.int64),
                   "tail": np.array([8], np.int64), "w": W}, opset=17)


W = (np.arange(32, dtype=np.float32).reshape(8, 4) - 16) / 8


def _plan(s: onnx_ep.Session):
    (plan,) = s._plans.values()
    return plan


def test_the_causal_mask_folds_away_and_outputs_are_bit_identical(monkeypatch):
    model, feeds = mask_model(), mask_feeds(2, 3, 5)
    s = onnx_ep.Session(model, providers=["cpu_reference"])
    y, present = s.run(None, feeds)
    plan = _plan(s)
    assert set(MASK_NODES) <= set(plan.folded.names)
    assert not {st.name for st in plan.program.steps} & set(MASK_NODES)
    assert len(plan.program.steps) == len(s._program.steps) - len(MASK_NODES)
    # the values: the [S, T] mask of this signature
    bias = plan.folded.values[s._program.slot_of["bias"]]
    expected_mask = np.arange(8)[None, :] > np.arange(5, 8)[:, None]
    np.testing.assert_array_equal(bias, np.where(expected_mask, np.finfo(np.float32).min, 0))
    # bit for bit what the same kernels compute when nothing folds
    monkeypatch.setattr(folding, "FOLD_MAX_BYTES", -1)
    unfolded = onnx_ep.Session(model, providers=["cpu_reference"])
    y0, present0 = unfolded.run(None, feeds)
    assert not _plan(unfolded).folded.steps
    assert len(_plan(unfolded).program.steps) == len(unfolded._program.steps)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(present, present0)
    ort = pytest.importorskip("onnxruntime")
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(y, ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(present, ref[1])


def test_the_shared_program_is_untouched_and_signatures_fold_independently():
    plugin = FakeDevicePlugin(ops=("MatMul", "Reshape"))
    s = onnx_ep.Session(reshape_model(), providers=["fake", "cpu_reference"], plugins=[plugin])
    shared = [(st.name, st.call, st.in_slots, st.frees) for st in s._program.steps]
    xs = {n: np.random.default_rng(n).standard_normal((n, 2, 4), dtype=np.float32)
          for n in (3, 5)}
    for n, x in xs.items():
        (y,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(y, x.reshape(n, 8) @ W)
    assert [(st.name, st.call, st.in_slots, st.frees) for st in s._program.steps] == shared
    p3, p5 = s._plans.values()
    slot = s._program.slot_of["newshape@fake"]
    assert p3.device_constants[slot].tolist() == [3, 8]
    assert p5.device_constants[slot].tolist() == [5, 8]
    # each plan's steps read their own upload, at one address for the plan's life
    assert p3.program.folded[slot].array.tolist() == [3, 8]
    assert p5.program.folded[slot].array.tolist() == [5, 8]
    assert p3.program.env0 is s._program.env0       # weights placed later reach both


@pytest.mark.parametrize("batch", ["n", 3], ids=["planned-at-first-run", "planned-at-load"])
def test_a_device_plan_keeps_no_host_step_or_copy_between_its_device_steps(batch):
    # a static signature is planned at load, before the memory policy places the weights
    plugin = FakeDevicePlugin(ops=("MatMul", "Reshape"))
    s = onnx_ep.Session(reshape_model(batch), providers=["fake", "cpu_reference"],
                        plugins=[plugin])
    x = np.random.default_rng(1).standard_normal((3, 2, 4), dtype=np.float32)
    (y,) = s.run(None, {"x": x})
    uploads = plugin.runtime.uploads
    for _ in range(3):
        (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, x.reshape(3, 8) @ W)
    plan = _plan(s)
    assert set(plan.folded.names) == {"sx", "batch", "batch1", "newshape",
                                      "copy:newshape->fake"}
    assert [st.name for st in plan.program.steps] == ["copy:x->fake", "x2", "y", "copy:y->cpu"]
    assert plugin.runtime.uploads - uploads == 3         # the feed, once per run
    (report,) = s.capture_report()["plans"]
    assert [seg["nodes"] for seg in report["segments"]] == [2]
    assert {seam["kind"] for seam in report["seams"]} == {"io"}
    assert report["replays"] >= 1


def range_model() -> onnx.ModelProto:
    """x[n, k] + Cast(Range(0, k)): the Range's length depends on a shape's value."""
    n = _node
    nodes = [n("Shape", ["x"], "sx"), n("Gather", ["sx", "one"], "k", axis=0),
             n("Range", ["zero", "k", "one"], "r"), n("Cast", ["r"], "rf", to=TensorProto.FLOAT),
             n("Add", ["x", "rf"], "y")]
    vi = helper.make_tensor_value_info
    return _model(nodes, [vi("x", TensorProto.FLOAT, ["n", "k"])],
                  [vi("y", TensorProto.FLOAT, None)],
                  {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)}, opset=17)


def test_a_node_reading_a_folded_range_is_sized_and_stays_on_the_device(monkeypatch):
    x = np.random.default_rng(2).standard_normal((3, 5), dtype=np.float32)
    expected = x + np.arange(5, dtype=np.float32)
    plugin = FakeDevicePlugin(ops=("Add",))
    s = onnx_ep.Session(range_model(), providers=["fake", "cpu_reference"], plugins=[plugin])
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, expected)
    assert s.placement_summary() == {"cpu_reference": 4, "fake": 1}
    assert plugin.kernels["Add"].calls == 1
    assert "r" in _plan(s).folded.names
    # unfolded, the device cannot size the Add: it runs on the host at this signature
    monkeypatch.setattr(folding, "FOLD_MAX_BYTES", -1)
    plugin = FakeDevicePlugin(ops=("Add",))
    s = onnx_ep.Session(range_model(), providers=["fake", "cpu_reference"], plugins=[plugin])
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, expected)
    assert plugin.kernels["Add"].calls == 0


def test_the_byte_cap_keeps_large_values_in_the_plan(monkeypatch):
    n = _node
    vi = helper.make_tensor_value_info
    model = _model([n("Shape", ["x"], "sx"), n("ConstantOfShape", ["sx"], "ones",
                                               value=numpy_helper.from_array(
                                                   np.array([1], np.float32))),
                    n("Add", ["x", "ones"], "y")],
                   [vi("x", TensorProto.FLOAT, [4, 8])], [vi("y", TensorProto.FLOAT, None)], {})
    x = np.zeros((4, 8), np.float32)
    monkeypatch.setattr(folding, "FOLD_MAX_BYTES", 64)     # sx is 16 bytes, ones 128
    s = onnx_ep.Session(model, providers=["cpu_reference"])
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, x + 1)
    assert _plan(s).folded.names == ("sx",)
    assert [st.name for st in _plan(s).program.steps] == ["ones", "y"]


def test_a_graph_output_is_never_folded_away():
    n = _node
    vi = helper.make_tensor_value_info
    model = _model([n("Shape", ["x"], "sx"), n("Concat", ["sx", "sx"], "twice", axis=0),
                    n("Relu", ["x"], "y")],
                   [vi("x", TensorProto.FLOAT, ["a", 3])],
                   [vi("sx", TensorProto.INT64, None), vi("twice", TensorProto.INT64, None),
                    vi("y", TensorProto.FLOAT, None)], {})
    s = onnx_ep.Session(model, providers=["cpu_reference"])
    for a in (2, 4):
        sx, twice, _ = s.run(None, {"x": np.ones((a, 3), np.float32)})
        assert sx.tolist() == [a, 3] and twice.tolist() == [a, 3, a, 3]
    for plan in s._plans.values():
        assert not plan.folded.steps
        assert [st.name for st in plan.program.steps] == ["sx", "twice", "y"]


def test_a_value_whose_last_reader_folded_dies_at_its_producer():
    n = _node
    vi = helper.make_tensor_value_info
    model = _model([n("Relu", ["x"], "r"), n("Shape", ["r"], "sr"),
                    n("Reshape", ["x", "sr"], "y")],
                   [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, None)], {})
    s = onnx_ep.Session(model, providers=["cpu_reference"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, x)
    relu, reshape = _plan(s).program.steps
    slot = s._program.slot_of
    assert relu.frees == (slot["r"],)                       # freed at once, not kept
    assert reshape.in_slots == (slot["x"], -1)             # the shape comes from the plan
    assert reshape.frees == ()


@pytest.mark.parametrize("providers", [["cpu_reference"], ["fake", "cpu_reference"]])
def test_folded_values_reach_their_readers_when_weights_stream(providers):
    feeds = mask_feeds(1, 2, 3, seed=4)
    expected = onnx_ep.Session(mask_model(), providers=providers,
                               plugins=[FakeDevicePlugin(ops=("MatMul", "Add"))],
                               options=SessionOptions(memory_policy="full_resident")
                               ).run(None, feeds)
    plugin = FakeDevicePlugin(ops=("MatMul", "Add"))
    s = onnx_ep.Session(mask_model(), providers=providers, plugins=[plugin],
                        options=SessionOptions(memory_policy="weight_streaming"))
    assert s.memory_policy.streams and s._weights is not None   # runs start from no constants
    for _ in range(2):
        out = s.run(None, feeds)
        for a, b in zip(out, expected):
            np.testing.assert_array_equal(a, b)
    assert set(MASK_NODES) <= set(_plan(s).folded.names)


class _AnyDtype(FakeKernel):
    """A fake device kernel for integer shape math too (the helper's take float32 only)."""

    def supports(self, meta):
        return onnx_ep.Support.YES


def _int_add_plugin(parity: Parity = Parity.EXACT) -> FakeDevicePlugin:
    plugin = FakeDevicePlugin(ops=("MatMul", "Reshape"))
    plugin.kernels["Add"] = _AnyDtype("Add", np.add)
    plugin.kernels["Add"].parity = parity
    return plugin


def _shape_add_model() -> onnx.ModelProto:
    """Shape(x) + [0, 0, 0] (an integer Add the device runs) as x's new shape, then
    + (b1 + b2) (a float Add of two weights on the device)."""
    n = _node
    vi = helper.make_tensor_value_info
    return _model([n("Shape", ["x"], "sx"), n("Add", ["sx", "zeros"], "shape2"),
                   n("Reshape", ["x", "shape2"], "x2"), n("Add", ["b1", "b2"], "bias"),
                   n("Add", ["x2", "bias"], "y")],
                  [vi("x", TensorProto.FLOAT, ["n", 2, 4])], [vi("y", TensorProto.FLOAT, None)],
                  {"zeros": np.zeros(3, np.int64), "b1": np.full(4, 0.25, np.float32),
                   "b2": np.full(4, 0.75, np.float32)}, opset=17)


def _plan_with_host_kernels(s: onnx_ep.Session, x: np.ndarray):
    spec = onnx_ep.TensorSpec(x.dtype, x.shape)
    specs = infer_specs(s._light, s.graph, [spec])
    host = HostKernels(s._plugins.registry, s.get_providers())
    return plan_with_host_fallback(s._build_program, ((x.dtype, x.shape),), specs, "fake",
                                   host_kernels=host)


def test_nodes_on_a_device_fold_through_the_host_kernels_the_caller_passes():
    plugin = _int_add_plugin()
    s = onnx_ep.Session(_shape_add_model(), providers=["fake", "cpu_reference"],
                        plugins=[plugin])
    assert s.placement_summary() == {"cpu_reference": 1, "fake": 4}
    x = np.ones((3, 2, 4), np.float32)
    (y,) = s.run(None, {"x": x})                 # the session passes its host kernels
    np.testing.assert_array_equal(y, x + 1)
    assert _plan(s).folded.names == ("sx", "copy:sx->fake", "shape2", "bias")
    plan = _plan_with_host_kernels(s, x)
    assert plan.folded.names == ("sx", "copy:sx->fake", "shape2", "bias")
    assert [st.name for st in plan.program.steps] == ["copy:x->fake", "x2", "y",
                                                       "copy:y->cpu"]
    # a device kernel that may round its own way keeps its float results; integers are
    # exact everywhere
    plugin = _int_add_plugin(Parity.tolerance(1e-3))
    s = onnx_ep.Session(_shape_add_model(), providers=["fake", "cpu_reference"],
                        plugins=[plugin])
    assert _plan_with_host_kernels(s, x).folded.names == ("sx", "copy:sx->fake", "shape2")


def test_an_output_viewing_a_folded_value_is_read_only_so_runs_stay_right():
    n = _node
    vi = helper.make_tensor_value_info
    # the Reshape reads the folded mask and a feed: it runs, and returns a view of the mask
    model = _model([n("Shape", ["x"], "sx"), n("ConstantOfShape", ["sx"], "ones",
                                               value=numpy_helper.from_array(
                                                   np.array([1], np.float32))),
                    n("Reshape", ["ones", "shape"], "y")],
                   [vi("x", TensorProto.FLOAT, [2, 3]), vi("shape", TensorProto.INT64, [2])],
                   [vi("y", TensorProto.FLOAT, None)], {})
    s = onnx_ep.Session(model, providers=["cpu_reference"])
    feeds = {"x": np.zeros((2, 3), np.float32), "shape": np.array([3, 2], np.int64)}
    (y,) = s.run(None, feeds)
    assert _plan(s).folded.names == ("sx", "ones")
    with pytest.raises(ValueError, match="read-only"):
        y += 1
    (y,) = s.run(None, feeds)
    np.testing.assert_array_equal(y, np.ones((3, 2), np.float32))


def test_a_failed_upload_of_folded_values_leaves_the_ledger_as_before():
    plugin = FakeDevicePlugin(ops=("MatMul", "Reshape"))
    s = onnx_ep.Session(reshape_model(), providers=["fake", "cpu_reference"], plugins=[plugin])
    rt = plugin.runtime
    before, live = s._authority.held_by(s.holder), rt.live
    real = rt.upload

    def refuse_shapes(array, out, stream):
        if array.dtype == np.int64:
            raise RuntimeError("upload failed")
        return real(array, out, stream)

    rt.upload = refuse_shapes
    x = np.ones((3, 2, 4), np.float32)
    with pytest.raises(RuntimeError, match="upload failed"):
        s.run(None, {"x": x})
    assert s._authority.held_by(s.holder) == before and rt.live == live
    rt.upload = real
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, x.reshape(3, 8) @ W)
    assert s._authority.held_by(s.holder) > before
