"""CUDA graph capture on the GPU: replays byte-identical to eager (demo transformer, a
64-step decode loop with presents fed back as pasts), and kernels that break the capture
promise on a real stream are quarantined with the driver's error while answers stay right."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import (
    CaptureSupport,
    OpKey,
    Parity,
    RunOptions,
    SessionOptions,
    Support,
    WorkspaceRequirement,
)
from onnx_ep.demo import build_demo_model, demo_feeds
from onnx_ep.testing.decoder import TINY, build_decoder, cache_names, empty_cache

pytestmark = pytest.mark.cuda
OFF = RunOptions(capture="off")


def _replays(sess: onnx_ep.Session) -> int:
    return sum(p["replays"] for p in sess.capture_report()["plans"])


def test_demo_transformer_replays_byte_identical_to_eager(cuda_device):
    sess = onnx_ep.Session(build_demo_model(), providers=["cuda", "cpu_reference"])
    try:
        for seed in range(6):
            feeds = demo_feeds(seq=16, seed=seed)
            captured = sess.run(None, feeds)[0]
            eager = sess.run(None, feeds, OFF)[0]
            assert captured.tobytes() == eager.tobytes(), f"seed {seed}"
        (plan,) = sess.capture_report()["plans"]
        assert plan["records"] >= 1 and plan["replays"] >= 4
        assert len(plan["segments"]) == 1, plan["seams"]
    finally:
        sess.close()


def _decode(sess: onnx_ep.Session, steps: int, run_options: RunOptions | None) -> list[bytes]:
    """``steps`` greedy-free decode steps with device pasts fed back as device presents."""
    rng = np.random.default_rng(7)
    names = cache_names(TINY)
    cache = {p: onnx_ep.Tensor.from_numpy(a, "cuda") for p, a in empty_cache(TINY).items()}
    out = []
    for t in range(steps):
        b = sess.io_binding()
        b.bind_input("input_ids", rng.integers(0, TINY["vocab"], (1, 1), dtype=np.int64))
        b.bind_input("pos", np.array([t], np.int64))
        for past, _ in names:
            b.bind_input(past, cache[past])
        b.bind_output("logits")
        for _, present in names:
            b.bind_output(present, "cuda")
        sess.run_with_iobinding(b, run_options)
        logits, *presents = b.get_outputs()
        out.append(logits.numpy().tobytes())
        cache = {past: p for (past, _), p in zip(names, presents)}
    out.append(b"".join(cache[p].numpy().tobytes() for p, _ in names))
    return out


def test_a_64_step_decode_loop_with_state_fed_back_replays_byte_identical(cuda_device):
    sess = onnx_ep.Session(build_decoder(TINY), providers=["cuda", "cpu_reference"])
    try:
        captured = _decode(sess, 64, None)
        assert _replays(sess) >= 62
        eager = _decode(sess, 64, OFF)
        assert captured == eager
        (plan,) = sess.capture_report()["plans"]
        assert len(plan["segments"]) == 1, plan["seams"]
    finally:
        sess.close()


# ---------------------------------------------------------------- lying kernels

DOMAIN = "test.capture"


class _CudaLiar:
    """Copies its input (a capturable device-to-device copy) and breaks the promise it gave
    by answering SUPPORTED while its stream captures."""

    parity = Parity.EXACT

    def __init__(self, how: str) -> None:
        self.key = OpKey(DOMAIN, "Liar", 1)
        self.how = how

    def supports(self, meta: Any) -> Support:
        return Support.YES

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.SUPPORTED

    def workspace_requirement(self, meta: Any) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE

    def infer_outputs(self, meta: Any) -> list[Any]:
        return [meta.inputs[0]]

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        from onnx_ep.providers.cuda import copies, driver, graphs
        from onnx_ep.providers.cuda.device_runtime import cuda_runtime

        x, y = inputs[0], outputs[0]
        if graphs.capturing_here():
            drv = driver.driver()
            if self.how == "synchronize":
                ctx.stream.synchronize()
            elif self.how == "driver synchronize":      # past our guard: the driver refuses
                driver.check(drv.cuStreamSynchronize(ctx.stream.handle), "cuStreamSynchronize")
            elif self.how == "driver allocate":
                ptr = driver.check(drv.cuMemAlloc(4096), "cuMemAlloc")
                drv.cuMemFree(ptr)
            elif self.how == "allocate":
                from onnx_ep.core.memory import Role
                cuda_runtime().allocator.allocate(4096, Role.ACTIVATIONS, "liar").free()
            elif self.how == "read back":
                x.numpy(ctx.stream)
            elif self.how == "raise":
                raise RuntimeError("cannot run while capturing")
        copies.copy_dtod(y.ptr, x.ptr, x.nbytes, ctx.stream)


class _LiarPlugin:
    def __init__(self, how: str) -> None:
        self.kernel = _CudaLiar(how)

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(self, register: Any) -> None:
        register(self.kernel, provider="cuda")


def _liar_model() -> Any:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"),
             helper.make_node("Liar", ["a"], ["b"], name="liar", domain=DOMAIN),
             helper.make_node("Sigmoid", ["b"], ["c"], name="c"),
             helper.make_node("Add", ["c", "a"], ["y"], name="y")]
    # onnx's shape inference cannot see through the custom op: say what it makes, so the
    # nodes after it are sized at load and placed on the device
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 256])],
                          value_info=[helper.make_tensor_value_info("b", TensorProto.FLOAT,
                                                                    [8, 256])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(DOMAIN, 1)])


@pytest.mark.parametrize("how,error", [
    ("synchronize", "CaptureError"),
    ("driver synchronize", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    ("driver allocate", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    ("allocate", "CaptureError"),
    ("read back", "CaptureError"),
    ("raise", "RuntimeError"),
])
def test_a_lying_kernel_is_quarantined_and_every_run_stays_right(cuda_device, how, error):
    sess = onnx_ep.Session(_liar_model(), providers=["cuda", "cpu_reference"],
                           plugins=[_LiarPlugin(how)])
    try:
        rng = np.random.default_rng(0)
        for _ in range(5):
            x = rng.standard_normal((8, 256)).astype(np.float32)
            got = sess.run(None, {"x": x})[0]
            eager = sess.run(None, {"x": x}, OFF)[0]
            assert got.tobytes() == eager.tobytes()
            a = np.maximum(x, 0)
            np.testing.assert_allclose(got, 1 / (1 + np.exp(-a)) + a, rtol=1e-5)
        report = sess.capture_report()
        (plan,) = report["plans"]
        assert plan["failures"][0]["node"] == "liar"
        assert plan["failures"][0]["kernel"] == "_CudaLiar"
        assert plan["failures"][0]["error"] == error
        assert "liar" in report["quarantined"]
        # the nodes around the quarantined one are replayed
        assert [(s["first"], s["last"]) for s in plan["segments"]] == [("a", "a"), ("c", "y")]
        assert all(s["recorded"] for s in plan["segments"]) and plan["replays"] >= 3
        # the stream is usable: nothing is left capturing
        from onnx_ep.providers.cuda import graphs
        assert not graphs.capturing_here()
        assert not sess._device.stream.is_capturing()
    finally:
        sess.close()


def test_require_runs_the_demo_as_one_graph_and_capture_off_never_records(cuda_device):
    on = onnx_ep.Session(build_demo_model(), providers=["cuda", "cpu_reference"],
                         options=SessionOptions(capture="require"))
    off = onnx_ep.Session(build_demo_model(), providers=["cuda", "cpu_reference"],
                          options=SessionOptions(capture="off"))
    try:
        feeds = demo_feeds(seq=16, seed=1)
        for _ in range(3):
            a, b = on.run(None, feeds)[0], off.run(None, feeds)[0]
            assert a.tobytes() == b.tobytes()
        assert _replays(on) >= 1 and _replays(off) == 0
        assert off.capture_report()["plans"][0]["records"] == 0
    finally:
        on.close()
        off.close()
