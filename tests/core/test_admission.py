"""Admission through the Session: refusals before work, races, release on error and cancel."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import onnx_ep
from onnx_ep import RunOptions, SessionOptions
from onnx_ep.core.memory import authority_for
from onnx_ep.errors import CapacityUnavailable, NodeError, RunCancelled, TierExhausted
from tests.helpers.memory import ScratchKernel, ScratchPlugin, scratch_model


def _session(kernel: ScratchKernel, limit: int, **opts) -> onnx_ep.Session:
    return onnx_ep.Session(scratch_model(), plugins=[ScratchPlugin(kernel)],
                           options=SessionOptions(memory_limit=limit, **opts))


def test_run_that_can_never_fit_is_refused_before_any_step():
    k = ScratchKernel()
    s = _session(k, limit=1 << 16)
    with pytest.raises(CapacityUnavailable) as e:
        s.run(None, {"x": np.ones(1 << 15, np.float32)})    # 128 KiB of scratch
    assert k.calls == 0
    assert e.value.http_status == 429 and e.value.requested > 1 << 16
    assert s.resources()["committed"] == authority_for("cpu", 1 << 16).committed
    (y,) = s.run(None, {"x": np.ones(16, np.float32)})     # the session is still usable
    np.testing.assert_array_equal(y, np.full(16, 2, np.float32))


def test_two_sessions_racing_for_one_budget_never_over_commit():
    limit = 128 * 1024
    gate = threading.Event()
    ka, kb = ScratchKernel(), ScratchKernel()
    ka.gate = gate
    sa, sb = _session(ka, limit), _session(kb, limit)
    # 48 KiB of scratch and 48 KiB of output per run: one fits, two do not
    x = np.ones(12 * 1024, np.float32)
    authority = authority_for("cpu", limit)
    errors: list[BaseException] = []

    def run_a() -> None:
        try:
            sa.run(None, {"x": x})
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run_a)
    t.start()
    assert ka.started.wait(10)
    assert authority.committed <= authority.budget
    with pytest.raises(TierExhausted) as e:
        sb.run(None, {"x": x})
    assert kb.calls == 0 and e.value.available < e.value.requested
    gate.set()
    t.join()
    assert not errors
    (y,) = sb.run(None, {"x": x})            # fits once A has released its reservations
    np.testing.assert_array_equal(y, x * 2)
    assert authority.peak_committed <= authority.budget


def test_kernel_failure_releases_every_step_reservation():
    k = ScratchKernel()
    s = _session(k, limit=1 << 20)
    authority = authority_for("cpu", 1 << 20)
    baseline = authority.committed
    k.fail = True
    with pytest.raises(NodeError, match="injected kernel failure"):
        s.run(None, {"x": np.ones(1024, np.float32)})
    assert authority.committed == baseline
    k.fail = False
    s.run(None, {"x": np.ones(1024, np.float32)})
    assert authority.committed == baseline


def test_cancelled_run_releases_every_step_reservation():
    k = ScratchKernel()
    s = _session(k, limit=1 << 21)
    authority = authority_for("cpu", 1 << 21)
    baseline = authority.committed
    opts = RunOptions()
    k.gate = threading.Event()
    result: list[BaseException] = []

    def run() -> None:
        try:
            s.run(None, {"x": np.ones(4096, np.float32)}, run_options=opts)
        except BaseException as exc:
            result.append(exc)

    t = threading.Thread(target=run)
    t.start()
    assert k.started.wait(10)
    assert authority.committed > baseline     # the run holds its reservations mid-way
    opts.terminate = True
    k.gate.set()
    t.join()
    # the model has one step; use a two-step model to see cancellation between steps
    assert authority.committed == baseline
    assert not result or isinstance(result[0], RunCancelled)


def test_cancellation_between_steps_raises_and_releases():
    from tests.helpers.models import add_chain_model

    s = onnx_ep.Session(add_chain_model(5), options=SessionOptions(memory_limit=1 << 22))
    authority = authority_for("cpu", 1 << 22)
    baseline = authority.committed
    with pytest.raises(RunCancelled, match="before step 0"):
        s.run(None, {"x": np.ones(1, np.float32)}, run_options=RunOptions(terminate=True))
    assert authority.committed == baseline
    (y,) = s.run(None, {"x": np.ones(1, np.float32)})
    assert y[0] == 6


def test_headroom_admission_keeps_a_fraction_free():
    k = ScratchKernel()
    limit = 128 * 1024
    x = np.ones(14 * 1024, np.float32)        # 56 KiB of scratch and 56 of output: 112 KiB
    s_strict = _session(k, limit)
    s_strict.run(None, {"x": x})
    s_head = _session(ScratchKernel(), limit, admission="headroom", headroom_fraction=0.25)
    with pytest.raises(CapacityUnavailable, match="headroom"):
        s_head.run(None, {"x": x})


def test_session_persistent_workspace_grows_through_a_grant_and_is_kept():
    from onnx_ep import WorkspaceLifetime

    k = ScratchKernel(lifetime=WorkspaceLifetime.SESSION_PERSISTENT)
    s = _session(k, limit=1 << 23)
    s.run(None, {"x": np.ones(256, np.float32)})
    held_small = s.resources()["ledger"]["by_holder"][s.holder]["workspace_session"]
    s.run(None, {"x": np.ones(4096, np.float32)})
    held_big = s.resources()["ledger"]["by_holder"][s.holder]["workspace_session"]
    assert held_small == 1024 and held_big == 4096 * 4
    s.run(None, {"x": np.ones(256, np.float32)})       # a smaller run reuses the slot
    assert s.resources()["ledger"]["by_holder"][s.holder]["workspace_session"] == held_big
    s.close()
    assert s.holder not in authority_for("cpu", 1 << 23).ledger()["by_holder"]


def test_each_persistent_workspace_keeps_its_own_contents_across_runs():
    from onnx import TensorProto, helper

    from onnx_ep import WorkspaceLifetime
    from tests.helpers.memory import DOMAIN
    from tests.helpers.oracle import ORACLE_IR_VERSION

    class Tagger:
        """Writes its tag into its persistent workspace; outputs what the last run left there."""

        from onnx_ep import CaptureSupport, OpKey, Parity
        parity = Parity.EXACT

        def __init__(self, op: str, tag: int) -> None:
            from onnx_ep import OpKey
            self.key = OpKey(DOMAIN, op, 1)
            self.tag = tag

        def capture_support(self):
            return self.CaptureSupport.unsupported("host")

        def workspace_requirement(self, meta):
            from onnx_ep import WorkspaceRequirement
            return WorkspaceRequirement(8, WorkspaceLifetime.SESSION_PERSISTENT)

        def execute_with_workspace(self, ctx, inputs, outputs, workspace):
            cell = workspace.array(np.int64, (1,))
            outputs[0] = cell.copy()
            cell[0] = self.tag

    class P:
        @onnx_ep.hookimpl
        def onnx_ep_register_kernels(self, register):
            register(Tagger("TagA", 111), provider="cpu_reference")
            register(Tagger("TagB", 222), provider="cpu_reference")

    g = helper.make_graph(
        [helper.make_node("TagA", ["x"], ["a"], domain=DOMAIN),
         helper.make_node("TagB", ["x"], ["b"], domain=DOMAIN)], "tags",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("a", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("b", TensorProto.INT64, [1])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid(DOMAIN, 1)],
                              ir_version=ORACLE_IR_VERSION)
    s = onnx_ep.Session(model, plugins=[P()])
    s.run(None, {"x": np.ones(1, np.float32)})
    a, b = s.run(None, {"x": np.ones(1, np.float32)})
    assert (a[0], b[0]) == (111, 222)


def test_a_kernel_error_during_a_cancellable_run_names_the_failing_node():
    from tests.helpers.models import add_chain_model

    s = onnx_ep.Session(add_chain_model(3), options=SessionOptions(memory_limit=1 << 22))

    def boom(ctx, inputs, outputs, ws):
        raise RuntimeError("kernel exploded")

    s._program.steps[1].call = boom      # the second node fails; RunOptions takes the slow loop
    with pytest.raises(NodeError, match="add1.*kernel exploded"):
        s.run(None, {"x": np.ones(1, np.float32)}, run_options=RunOptions())


def _relu_model(dim0):
    from onnx import TensorProto, helper

    from tests.helpers.oracle import ORACLE_IR_VERSION

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "big",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim0, 1000])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim0, 1000])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


def test_a_static_plan_that_can_never_fit_is_refused_at_load():
    limit = 1_000_003          # an authority of its own: nothing else on this ledger
    authority = authority_for("cpu", limit)
    before = authority.committed
    with pytest.raises(CapacityUnavailable) as info:
        onnx_ep.Session(_relu_model(1000), providers=["cpu_reference"],
                        options=SessionOptions(memory_limit=limit))
    msg = str(info.value)
    assert "no run could ever be admitted" in msg and "activations 4000000" in msg
    assert info.value.http_status == 429 and info.value.requested > limit
    assert authority.committed == before


def test_a_plan_that_fits_or_depends_on_the_inputs_is_not_refused_at_load():
    limit = 1_000_033
    onnx_ep.Session(_relu_model(10), providers=["cpu_reference"],
                    options=SessionOptions(memory_limit=limit))
    s = onnx_ep.Session(_relu_model("n"), providers=["cpu_reference"],
                        options=SessionOptions(memory_limit=limit))
    with pytest.raises(CapacityUnavailable):             # refused at the run instead
        s.run(None, {"x": np.zeros((1000, 1000), np.float32)})
    np.testing.assert_array_equal(s.run(None, {"x": np.ones((10, 1000), np.float32)})[0],
                                  np.ones((10, 1000), np.float32))
