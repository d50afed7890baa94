"""Bounded plans and one pool per device: plans evicted least recently used first with their
memory, shared workspace slots sized to the peak, quotas that cannot over-commit a device."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import SessionOptions, WorkspaceRequirement
from onnx_ep.core.memory import DeviceMemoryAuthority, DevicePool, Role, authority_for
from onnx_ep.errors import CapacityUnavailable, OptionsError, TierExhausted
from tests.helpers.fake_device import DEVICE, FakeDevicePlugin, FakeKernel
from tests.helpers.oracle import ORACLE_IR_VERSION

D = 8


def _weight() -> np.ndarray:
    return np.linspace(-1, 1, D * D, dtype=np.float32).reshape(D, D)


def _decoder() -> onnx.ModelProto:
    """x[1, L, D] -> MatMul(w) -> Relu -> Add(x): one plan per length L."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"])]
    graph = helper.make_graph(
        nodes, "decoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "L", D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "L", D])],
        initializer=[onnx.numpy_helper.from_array(_weight(), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                             ir_version=ORACLE_IR_VERSION)


def _want(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ _weight(), 0) + x


def _x(length: int) -> np.ndarray:
    return np.random.default_rng(length).standard_normal((1, length, D)).astype(np.float32)


class GrowingScratch(FakeKernel):
    """Relu through step scratch of the input's size: the step slot's peak grows with L."""

    def __init__(self) -> None:
        super().__init__("Relu", lambda x: np.maximum(x, 0))

    def workspace_requirement(self, meta: Any) -> WorkspaceRequirement:
        return WorkspaceRequirement(meta.inputs[0].nbytes)

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        assert workspace.buffer.array.nbytes == inputs[0].array.nbytes
        scratch = workspace.buffer.array.view(np.float32).reshape(inputs[0].shape)
        out, x = outputs[0].array, inputs[0].array

        def work() -> None:
            np.maximum(x, 0, out=scratch)
            out[...] = scratch

        ctx.stream.enqueue(work)


def _device_session(**options: Any) -> onnx_ep.Session:
    plugin = FakeDevicePlugin(ops=("Add", "MatMul"))
    plugin.kernels["Relu"] = GrowingScratch()
    return onnx_ep.Session(_decoder(), providers=[DEVICE, "cpu_reference"],
                           options=SessionOptions(**options), plugins=[plugin])


def test_a_host_session_keeps_at_most_plan_cache_size_plans():
    s = onnx_ep.Session(_decoder(), providers=["cpu_reference"],
                        options=SessionOptions(plan_cache_size=2))
    try:
        for length in (1, 2, 3, 4, 5, 6, 2):
            np.testing.assert_allclose(s.run(None, {"x": _x(length)})[0], _want(_x(length)),
                                       rtol=1e-6)
        report = s.resources()
        assert len(report["plans"]) == 2 and report["plan_cache"]["evictions"] == 5
        assert [p["signature"] for p in report["plans"]][-1].count("2") >= 1
        assert s.stats["plans"] == 7        # length 2 came back after it was evicted
    finally:
        s.close()


def test_a_decode_loop_over_512_growing_lengths_holds_bounded_device_memory():
    s = _device_session(plan_cache_size=4, capture="off")
    authority = s._authority
    try:
        held = []
        for length in range(1, 513):
            x = _x(length)
            (y,) = s.run(None, {"x": x})
            if length % 64 == 0 or length < 3:
                np.testing.assert_allclose(y, _want(x), rtol=1e-6)
            held.append(authority.held_by(s.holder))
        report = s.resources()
        assert len(report["plans"]) == 4 and report["plan_cache"]["evictions"] == 508
        # what 4 plans of the longest lengths hold, and the weights: not 512 arenas
        per_length = 3 * D * 4      # bytes per token of the arena's three [1, L, D] values
        weights = authority.round_up(D * D * 4)
        bound = weights + 4 * (512 * per_length + 4096) + 2 * 512 * D * 4 + 4096
        assert max(held) <= bound, (max(held), bound)
        ledger = authority.ledger()["by_holder"][s.holder]
        # one step slot, sized to the peak over the live plans (the longest length's Relu)
        assert ledger["workspace_step"] == authority.round_up(512 * D * 4)
    finally:
        s.close()
    assert s.holder not in authority.ledger()["by_holder"]


def test_the_shared_step_slot_moves_and_earlier_plans_still_compute_right():
    s = _device_session(capture="auto")
    try:
        for length in (2, 9, 2, 9, 33, 2, 9, 33, 2):   # the slot grows twice under live plans
            x = _x(length)
            for _ in range(3):                        # warm-up, record, replay
                np.testing.assert_allclose(s.run(None, {"x": x})[0], _want(x), rtol=1e-6)
        by_role = s.resources()["ledger"]["by_holder"][s.holder]
        assert by_role["workspace_step"] == s._authority.round_up(33 * D * 4)
    finally:
        s.close()


def test_plan_cache_bytes_bounds_the_plans_by_their_bytes():
    s = _device_session(plan_cache_bytes=40_000, capture="off")
    try:
        for length in (64, 65, 66, 67, 68):
            s.run(None, {"x": _x(length)})
        report = s.resources()
        assert report["plan_cache"]["bytes"] <= 40_000
        assert 1 <= len(report["plans"]) < 5
    finally:
        s.close()


def test_a_new_signature_evicts_old_plans_instead_of_being_refused():
    per_plan = 3 * 256 * D * 4 + 256 * D * 4
    limit = authority_for("fake:0", None).round_up(D * D * 4) + 3 * per_plan
    s = _device_session(memory_limit=limit, capture="off")
    try:
        for length in (250, 251, 252, 253, 254, 255):   # about two plans fit at once
            np.testing.assert_allclose(s.run(None, {"x": _x(length)})[0], _want(_x(length)),
                                       rtol=1e-6)
        assert s.resources()["plan_cache"]["evictions"] >= 3
    finally:
        s.close()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_plan_cache_size_must_be_a_positive_count(bad):
    with pytest.raises(OptionsError, match="plan_cache_size"):
        SessionOptions(plan_cache_size=bad)


# ---------------------------------------------------------------- one pool per device
def test_quotas_on_one_device_cannot_together_commit_more_than_the_device():
    pool = DevicePool("dev", 1000)
    a = DeviceMemoryAuthority("dev", 800, 1, pool)
    b = DeviceMemoryAuthority("dev", 600, 1, pool)
    ra = a.reserve(700, Role.ACTIVATIONS, "session-a")
    with pytest.raises(TierExhausted, match="across all sessions"):
        b.reserve(400, Role.ACTIVATIONS, "session-b")      # inside b's quota, not the device
    rb = b.reserve(300, Role.ACTIVATIONS, "session-b")
    assert pool.committed == 1000 and a.available == 0 and b.available == 0
    with pytest.raises(CapacityUnavailable):
        b.reserve(601, Role.ACTIVATIONS, "session-b")      # more than b's quota ever allows
    ra.release()
    assert pool.committed == 300 and b.available == 300 and a.available == 700
    ra = a.reserve(600, Role.ACTIVATIONS, "session-a")
    with pytest.raises(TierExhausted):
        b.grow(rb, 500)                  # within b's quota, but the device has 100 left
    rb.release()
    ra.release()
    assert pool.committed == 0


def test_sessions_with_different_limits_share_their_devices_pool():
    s1 = onnx_ep.Session(_decoder(), providers=["cpu_reference"],
                         options=SessionOptions(memory_limit=1 << 20))
    s2 = onnx_ep.Session(_decoder(), providers=["cpu_reference"],
                         options=SessionOptions(memory_limit=1 << 21))
    try:
        assert s1._authority is not s2._authority
        assert s1._authority.pool is s2._authority.pool
        ledger = s1.resources()["ledger"]
        assert ledger["device_committed"] >= s1._authority.committed + s2._authority.committed
    finally:
        s1.close()
        s2.close()
