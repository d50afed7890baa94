"""kernels.base.replayed: a launch-only execute is recorded once per pointers/shapes and
replayed after (no GPU: the recorded "launches" are Python callables)."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_ep
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec, WorkspaceView
from onnx_ep.providers.cuda import launch
from onnx_ep.providers.cuda.kernels.base import replayed
from onnx_ep.testing.decoder import TINY, build_decoder


class _T:
    """A device tensor as the memo sees it: a pointer, a shape and a dtype."""

    def __init__(self, ptr: int, shape=(4,), dtype=np.float32) -> None:
        self.ptr, self.shape, self.dtype = ptr, shape, np.dtype(dtype)


class _Kernel:
    def __init__(self) -> None:
        self.bodies = 0
        self.enqueued: list[tuple[int, ...]] = []

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        self.bodies += 1
        job = (inputs[0].ptr, getattr(outputs[0], "ptr", 0))

        def enqueue() -> None:
            self.enqueued.append(job)

        enqueue()
        launch.record(enqueue)          # what launch_cached / copies / blas.run do


class _View(_Kernel):
    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        self.bodies += 1
        outputs[0] = inputs[0]          # an aliasing kernel replaces its output


def _ctx() -> ExecutionContext:
    meta = NodeMeta(name="n", op_type="Relu", domain="", opset=17, attrs={}, inputs=())
    return ExecutionContext(meta, stream=object())


def test_the_second_call_at_the_same_pointers_replays_without_running_the_body():
    k, ctx = _Kernel(), _ctx()
    x, y = _T(0x1000), _T(0x2000)
    for _ in range(3):
        k.execute_with_workspace(ctx, [x], [y], None)
    assert k.bodies == 1 and k.enqueued == [(0x1000, 0x2000)] * 3
    # another pointer, shape, workspace or node is another key: the body runs again
    k.execute_with_workspace(ctx, [_T(0x1100)], [y], None)
    k.execute_with_workspace(ctx, [_T(0x1000, (2, 2))], [y], None)
    ws = WorkspaceView(_T(0x9000), 256)
    k.execute_with_workspace(ctx, [x], [y], ws)
    k.execute_with_workspace(_ctx(), [x], [y], None)
    assert k.bodies == 5
    k.execute_with_workspace(ctx, [x], [y], ws)
    assert k.bodies == 5 and len(k.enqueued) == 8


def test_host_values_and_replaced_outputs_are_never_memoized():
    k, ctx = _Kernel(), _ctx()
    host = np.zeros(4, np.float32)
    for _ in range(2):
        k.execute_with_workspace(ctx, [_T(0x1000)], [_T(0x2000)], None)
    assert k.bodies == 1
    for _ in range(2):
        k.execute_with_workspace(ctx, [_T(0x1000)], [host], None)   # unkeyable: always runs
    assert k.bodies == 3
    v = _View()
    spec = TensorSpec(np.float32, (4,))
    for _ in range(2):
        outs = [spec]
        v.execute_with_workspace(ctx, [_T(0x1000)], outs, None)
        assert outs[0].ptr == 0x1000
    assert v.bodies == 2


def test_a_failing_call_is_not_memoized_and_recordings_nest():
    class Flaky(_Kernel):
        fail = True

        @replayed
        def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
            self.bodies += 1
            launch.record(lambda: None)
            if Flaky.fail:
                raise RuntimeError("bad shapes")

    k, ctx = Flaky(), _ctx()
    x, y = _T(0x1000), _T(0x2000)
    for _ in range(2):
        try:
            k.execute_with_workspace(ctx, [x], [y], None)
        except RuntimeError:
            pass
    assert k.bodies == 2
    with launch.Recording() as outer:
        launch.record(lambda: None)
        with launch.Recording() as inner:
            launch.record(lambda: None)
            launch.record(lambda: None)
    assert len(outer.calls) == 1 and len(inner.calls) == 2
    launch.record(lambda: None)          # no recording open: nothing kept, no error


@pytest.mark.cuda
def test_eager_runs_replaying_recorded_launches_keep_the_promise_on_the_gpu(cuda_device):
    """The Qwen-shaped decoder, eager only, six runs at one signature with new values:
    runs 2-6 replay recorded launches and must agree with the reference each time."""
    model = build_decoder(TINY)
    model = model[0] if isinstance(model, tuple) else model
    sess = onnx_ep.Session(model, providers=["cuda", "cpu_reference"],
                           options=onnx_ep.SessionOptions(capture="off"))
    ref = onnx_ep.Session(model, providers=["cpu_reference"])
    rng = np.random.default_rng(0)
    for _ in range(6):
        feeds = {}
        for v in sess.get_inputs():
            shape = [d if isinstance(d, int) else 3 for d in v.shape]
            if "int" in v.type:
                feeds[v.name] = rng.integers(0, 8, shape).astype(np.int64)
            else:
                feeds[v.name] = rng.standard_normal(shape).astype(np.float32)
        for got, want in zip(sess.run(None, feeds), ref.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4)


def test_the_same_objects_are_found_by_identity_and_equal_new_ones_by_pointer():
    k, ctx = _Kernel(), _ctx()
    x, y = _T(0x1000), _T(0x2000)
    k.execute_with_workspace(ctx, [x], [y], None)
    k.execute_with_workspace(ctx, [x], [y], None)
    assert len(k._replays_by_id) == 1 and k.bodies == 1
    # new objects at the same pointers, shapes and dtypes replay the same launches
    k.execute_with_workspace(ctx, [_T(0x1000)], [_T(0x2000)], None)
    assert k.bodies == 1 and k.enqueued == [(0x1000, 0x2000)] * 3
    # another pointer is another launch
    k.execute_with_workspace(ctx, [_T(0x3000)], [y], None)
    assert k.bodies == 2 and k.enqueued[-1] == (0x3000, 0x2000)
