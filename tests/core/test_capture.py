"""Graph capture on the fake device: record once, replay byte-identical to eager, quarantine
kernels that break their promise while recording, options, the graph cache bound."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_ep
from onnx_ep import CaptureSupport, RunOptions, SessionOptions
from onnx_ep.core.capture import MAX_FAILED_ROUNDS
from onnx_ep.errors import CaptureError, NodeError
from tests.helpers.fake_device import DEVICE, FakeDevicePlugin, FakeKernel, FakeTensor


def _model(ops: list[tuple[str, str]], batch: Any = 2) -> onnx.ModelProto:
    """``x [batch, 4]`` through ``(op, name)`` steps; MatMul reads weight w [4, 4], Add and
    Mul read b [4]."""
    w = numpy_helper.from_array(_w(), "w")
    b = numpy_helper.from_array(_b(), "b")
    nodes, prev = [], "x"
    for i, (op, name) in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        ins = [prev, "w"] if op == "MatMul" else [prev, "b"] if op in ("Add", "Mul") else [prev]
        nodes.append(helper.make_node(op, ins, [out], name=name))
        prev = out
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
                          [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _w() -> np.ndarray:
    return (np.arange(16, dtype=np.float32).reshape(4, 4) - 7) / 8


def _b() -> np.ndarray:
    return np.array([0.5, -0.25, 1.0, -2.0], np.float32)


CHAIN = [("MatMul", "mm"), ("Relu", "relu"), ("Add", "add"), ("Mul", "mul"), ("Relu", "out")]


def _feed(seed: int, batch: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 4)).astype(np.float32)


def _session(model: onnx.ModelProto, plugin: FakeDevicePlugin | None = None,
             **options: Any) -> onnx_ep.Session:
    plugin = plugin or FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    return onnx_ep.Session(model, providers=[DEVICE, "cpu_reference"],
                           options=SessionOptions(**options), plugins=[plugin])


def _eager(model: onnx.ModelProto, feeds: list[np.ndarray]) -> list[np.ndarray]:
    s = _session(model, capture="off")
    try:
        return [s.run(None, {"x": x})[0] for x in feeds]
    finally:
        s.close()


def _plan(s: onnx_ep.Session) -> dict[str, Any]:
    (plan,) = s.capture_report()["plans"]
    return plan


def test_the_second_run_records_and_later_runs_replay_byte_identical_to_eager():
    model = _model(CHAIN)
    feeds = [_feed(i) for i in range(6)]
    want = _eager(model, feeds)
    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    s = _session(model, plugin)
    try:
        got = []
        for i, x in enumerate(feeds):
            got.append(s.run(None, {"x": x})[0])
            if i == 0:
                assert _plan(s)["state"] == "pending" and _plan(s)["records"] == 0
        calls = plugin.kernels["Relu"].calls
        s.run(None, {"x": feeds[0]})
        # a replay runs no kernel's Python: the calls counter stays where recording left it
        assert plugin.kernels["Relu"].calls == calls == 4        # 2 Relu nodes x (warm-up + record)
        for a, b in zip(got, want):
            assert a.tobytes() == b.tobytes()
        plan = _plan(s)
        assert plan["state"] == "recorded" and plan["records"] == 1 and plan["replays"] == 5
        assert plan["segments"] == [{"first": "mm", "last": "out", "nodes": 5,
                                     "recorded": True, "graph_nodes": 5}]
        assert s.capture_report()["graphs"] == 1
    finally:
        s.close()


def test_run_options_capture_off_runs_eagerly_in_the_same_session():
    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    s = _session(_model(CHAIN), plugin)
    try:
        for i in range(3):
            s.run(None, {"x": _feed(i)})
        calls = plugin.kernels["Relu"].calls
        eager = s.run(None, {"x": _feed(9)}, RunOptions(capture="off"))[0]
        assert plugin.kernels["Relu"].calls == calls + 2
        replayed = s.run(None, {"x": _feed(9)})[0]
        assert plugin.kernels["Relu"].calls == calls + 2
        assert eager.tobytes() == replayed.tobytes()
    finally:
        s.close()


def test_capture_off_never_records_but_still_reports_the_layout():
    s = _session(_model(CHAIN), capture="off")
    try:
        for i in range(3):
            s.run(None, {"x": _feed(i)})
        plan = _plan(s)
        assert plan["records"] == 0 and plan["replays"] == 0 and plan["state"] == "pending"
        assert plan["segments"][0]["nodes"] == 5
    finally:
        s.close()


def test_bad_capture_options_are_refused():
    with pytest.raises(onnx_ep.errors.OptionsError, match="capture"):
        SessionOptions(capture="sometimes")
    with pytest.raises(onnx_ep.errors.OptionsError, match="capture_graphs"):
        SessionOptions(capture_graphs=0)
    with pytest.raises(onnx_ep.errors.OptionsError, match="RunOptions.capture"):
        RunOptions(capture="require")


# ---------------------------------------------------------------- lying kernels


class _Liar(FakeKernel):
    """Says SUPPORTED, computes like Relu, and breaks the promise while its stream captures."""

    def __init__(self, how: str, runtime: Any) -> None:
        super().__init__("Relu", lambda x: np.maximum(x, 0))
        self.how = how
        self.runtime = runtime

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        if ctx.stream.recording is not None:
            if self.how == "synchronize":
                self.runtime.synchronize(ctx.stream)
            elif self.how == "allocate":
                self.runtime.malloc(64)
            elif self.how == "read back":
                self.runtime.download(inputs[0], ctx.stream)
            elif self.how == "raise":
                raise RuntimeError("this kernel cannot run while capturing")
        super().execute_with_workspace(ctx, inputs, outputs, workspace)


def _liar_plugin(how: str) -> FakeDevicePlugin:
    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    plugin.kernels["Relu"] = _Liar(how, plugin.runtime)
    return plugin


@pytest.mark.parametrize("how,error", [
    ("synchronize", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    ("allocate", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    ("read back", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    ("raise", "RuntimeError"),
])
def test_a_kernel_that_breaks_its_promise_is_quarantined_and_answers_stay_right(how, error):
    model = _model(CHAIN)
    feeds = [_feed(i) for i in range(6)]
    want = _eager(model, feeds)
    s = _session(model, _liar_plugin(how))
    try:
        got = [s.run(None, {"x": x})[0] for x in feeds]
        for a, b in zip(got, want):
            assert a.tobytes() == b.tobytes()
        report = s.capture_report()
        plan = report["plans"][0]
        # the first Relu failed first: quarantined, then the second one on the next round
        assert set(report["quarantined"]) == {"relu", "out"}
        assert all(error in r and "_Liar" in r for r in report["quarantined"].values())
        first = plan["failures"][0]
        assert (first["node"], first["kernel"], first["error"]) == ("relu", "_Liar", error)
        quarantined = [x for x in plan["seams"] if x["kind"] == "quarantined"]
        assert [x["step"] for x in quarantined] == ["relu", "out"]
        # what is left between the quarantined nodes replays
        assert plan["state"] == "recorded" and plan["replays"] >= 2
        assert [(g["first"], g["last"]) for g in plan["segments"]] == [("mm", "mm"),
                                                                       ("add", "mul")]
        assert all(g["recorded"] for g in plan["segments"])
    finally:
        s.close()


def test_a_plan_gives_up_after_a_bounded_number_of_failed_recordings():
    ops = [("MatMul", "mm")] + [("Relu", f"r{i}") for i in range(MAX_FAILED_ROUNDS + 2)]
    model = _model(ops)
    feeds = [_feed(i) for i in range(MAX_FAILED_ROUNDS + 4)]
    want = _eager(model, feeds)
    s = _session(model, _liar_plugin("synchronize"))
    try:
        got = [s.run(None, {"x": x})[0] for x in feeds]
        for a, b in zip(got, want):
            assert a.tobytes() == b.tobytes()
        plan = _plan(s)
        assert plan["state"] == "eager" and "recordings failed" in plan["given_up"]
        assert len(plan["failures"]) == MAX_FAILED_ROUNDS
        assert s.capture_report()["graphs"] == 0
    finally:
        s.close()


class _Declines(FakeKernel):
    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.unsupported("reads a length back to the host")


def test_require_refuses_at_planning_and_lists_every_decline():
    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    plugin.kernels["Add"] = _Declines("Add", np.add)
    # a static signature is planned at load; a dynamic one at its first run
    with pytest.raises(CaptureError, match="add: reads a length back to the host"):
        _session(_model(CHAIN), plugin, capture="require")
    assert plugin.runtime.live == 0                   # the refused load released its memory
    s = _session(_model(CHAIN, batch="B"), plugin, capture="require")
    try:
        with pytest.raises(CaptureError, match="2 segments, 1 declines: add: reads a length"):
            s.run(None, {"x": _feed(0)})
        assert s.resources()["plans"] == []          # refused before its memory was taken
    finally:
        s.close()


def test_require_accepts_a_plan_that_is_one_segment_between_its_feeds_and_outputs():
    s = _session(_model(CHAIN), capture="require")
    try:
        for i in range(3):
            s.run(None, {"x": _feed(i)})
        assert _plan(s)["records"] == 1
    finally:
        s.close()


def test_require_on_a_host_only_session_raises():
    with pytest.raises(CaptureError, match="runs on the host"):
        onnx_ep.Session(_model(CHAIN), providers=["cpu_reference"],
                        options=SessionOptions(capture="require"))
    s = onnx_ep.Session(_model(CHAIN), providers=["cpu_reference"])
    s.run(None, {"x": _feed(0)})
    assert s.capture_report()["plans"] == []


def test_a_declining_kernel_splits_the_plan_and_both_sides_replay():
    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    plugin.kernels["Add"] = _Declines("Add", np.add)
    model = _model(CHAIN)
    feeds = [_feed(i) for i in range(4)]
    want = _eager(model, feeds)
    s = _session(model, plugin)
    try:
        for x, w in zip(feeds, want):
            assert s.run(None, {"x": x})[0].tobytes() == w.tobytes()
        plan = _plan(s)
        assert [(g["first"], g["last"]) for g in plan["segments"]] == [("mm", "relu"),
                                                                       ("mul", "out")]
        assert {"step": "add", "reason": "reads a length back to the host",
                "kind": "kernel"} in plan["seams"]
        assert plan["records"] == 2 and plan["replays"] == 4
    finally:
        s.close()


class _FreshBuffer(FakeKernel):
    """An eager seam whose output view moves every run (a new buffer each time)."""

    aliases = {0: 0}

    def __init__(self) -> None:
        super().__init__("Reshape", None, since=5)

    def supports(self, meta: Any) -> Any:
        return onnx_ep.Support.YES

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.unsupported("test: allocates its own output")

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        outputs[0] = FakeTensor(inputs[0].array.reshape(outputs[0].shape).copy())


def test_a_segment_whose_input_moved_runs_eagerly_and_is_not_replayed_on_stale_bytes():
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    shape = numpy_helper.from_array(np.array([2, 4], np.int64), "shape")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"),
             helper.make_node("Reshape", ["a", "shape"], ["b"], name="moves"),
             helper.make_node("MatMul", ["b", "w"], ["y"], name="mm")]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                          [w, shape])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    plugin = FakeDevicePlugin(ops=("Relu", "MatMul"))
    plugin.kernels["Reshape"] = _FreshBuffer()
    s = _session(model, plugin)
    try:
        for i in range(8):
            x = _feed(i)
            np.testing.assert_allclose(s.run(None, {"x": x})[0],
                                       np.maximum(x, 0) @ np.ones((4, 4), np.float32),
                                       rtol=1e-6)
        plan = _plan(s)
        assert plan["moved_inputs"] >= 1
    finally:
        s.close()


def test_weight_streaming_declines_capture_with_its_reason():
    model = _model(CHAIN)
    feeds = [_feed(i) for i in range(3)]
    want = _eager(model, feeds)
    s = _session(model, memory_policy="weight_streaming")
    try:
        for x, w in zip(feeds, want):
            assert s.run(None, {"x": x})[0].tobytes() == w.tobytes()
        plan = _plan(s)
        assert plan["state"] == "declined" and "weight streaming" in plan["declined"]
        assert plan["records"] == 0
    finally:
        s.close()


def test_the_graph_cache_is_bounded_and_evictions_are_counted():
    model = _model(CHAIN, batch="B")
    s = _session(model, capture_graphs=1)
    try:
        for i in range(4):
            for batch in (1, 2):
                x = _feed(i, batch)
                want = np.maximum((np.maximum(x @ _w(), 0) + _b()) * _b(), 0)
                np.testing.assert_allclose(s.run(None, {"x": x})[0], want, rtol=1e-6)
        report = s.capture_report()
        assert report["graphs"] <= 1 and report["evictions"] >= 2
        assert sum(p["evictions"] for p in report["plans"]) == report["evictions"]
    finally:
        s.close()


def test_graph_memory_is_reserved_through_the_authority_and_released_on_close():
    s = _session(_model(CHAIN))
    authority = s._authority
    for i in range(3):
        s.run(None, {"x": _feed(i)})
    assert s.resources()["ledger"]["by_role"]["graphs"] > 0
    s.close()
    assert authority.ledger()["by_role"]["graphs"] == 0


def test_a_failing_seam_after_replays_leaves_the_session_usable():
    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    s = _session(_model(CHAIN), plugin)
    try:
        for i in range(3):
            s.run(None, {"x": _feed(i)})
        with pytest.raises(onnx_ep.errors.FeedError):
            s.run(None, {"x": _feed(0).astype(np.float64)})
        assert s.run(None, {"x": _feed(1)})[0].tobytes() == _eager(
            _model(CHAIN), [_feed(1)])[0].tobytes()
    finally:
        s.close()


def test_a_decode_loop_feeding_its_state_back_is_byte_identical_to_eager_for_64_steps():
    # h' = relu(h @ w + x) * w-ish: the state is an output fed back as the next input
    w = numpy_helper.from_array((np.eye(4, dtype=np.float32) * 0.5 + 0.1), "w")
    nodes = [helper.make_node("MatMul", ["h", "w"], ["hw"], name="hw"),
             helper.make_node("Add", ["hw", "x"], ["s"], name="s"),
             helper.make_node("Relu", ["s"], ["h_next"], name="h_next"),
             helper.make_node("Mul", ["h_next", "h_next"], ["y"], name="y")]
    g = helper.make_graph(
        nodes, "decode",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("h_next", TensorProto.FLOAT, [1, 4])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    def loop(**options: Any) -> list[bytes]:
        s = _session(model, **options)
        try:
            h, out = np.zeros((1, 4), np.float32), []
            for t in range(64):
                y, h = s.run(None, {"h": h, "x": _feed(t, 1)})
                out.append(y.tobytes() + h.tobytes())
            return out
        finally:
            s.close()

    captured, eager = loop(), loop(capture="off")
    assert captured == eager


def test_a_kernel_error_while_recording_that_eager_repeats_reaches_the_caller():
    class Broken(FakeKernel):
        fail = False

        def execute_with_workspace(self, ctx, inputs, outputs, workspace):
            if self.fail:
                raise ValueError("broken input")
            super().execute_with_workspace(ctx, inputs, outputs, workspace)

    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    broken = plugin.kernels["Mul"] = Broken("Mul", np.multiply)
    model = _model(CHAIN)
    s = _session(model, plugin)
    try:
        s.run(None, {"x": _feed(0)})
        broken.fail = True
        with pytest.raises(NodeError, match="broken input") as err:
            s.run(None, {"x": _feed(1)})      # fails recording, then fails eagerly
        assert err.value.node == "mul"
        assert s.capture_report()["quarantined"] == {"mul": "ValueError while recording (Broken)"}
        broken.fail = False                   # the session stays usable
        for i in range(3):
            assert s.run(None, {"x": _feed(i)})[0].tobytes() == _eager(
                model, [_feed(i)])[0].tobytes()
        assert _plan(s)["replays"] >= 2
    finally:
        s.close()
