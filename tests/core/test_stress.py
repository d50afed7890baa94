"""Fault stress: threads x sessions on one budget, random shapes, random cancellations and a
plugin kernel that raises at random steps. After every round of concurrent runs the ledger
is back to its baseline, and every output that came back is right."""

from __future__ import annotations

import collections
import threading
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import CaptureSupport, OpKey, Parity, RunOptions, SessionOptions, WorkspaceRequirement
from onnx_ep.errors import AdmissionRefused, NodeError, RunCancelled
from tests.helpers.oracle import ORACLE_IR_VERSION

DOMAIN = "com.onnx_ep.stress"
D = 16


class Faulty:
    """y = x, through step scratch of x's size; raises when its thread asks it to (the
    injected fault), or waits a moment so cancellations land mid-run."""

    parity = Parity.EXACT
    key = OpKey(DOMAIN, "Faulty", 1)

    def __init__(self) -> None:
        self.local = threading.local()

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.unsupported("host test kernel")

    def infer_outputs(self, meta: Any) -> list[Any]:
        return [meta.inputs[0]]

    def workspace_requirement(self, meta: Any) -> WorkspaceRequirement:
        spec = meta.inputs[0]
        return WorkspaceRequirement(spec.nbytes) if spec is not None and spec.is_static \
            else WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        (x,) = inputs
        if getattr(self.local, "fail", False):
            raise RuntimeError("injected fault")
        pause = getattr(self.local, "pause", None)
        if pause is not None:
            pause.wait(0.05)
        scratch = workspace.array(x.dtype, x.shape) if workspace is not None else x.copy()
        scratch[...] = x
        outputs[0] = scratch.copy()


class FaultyPlugin:
    def __init__(self, kernel: Faulty) -> None:
        self.kernel = kernel

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(self, register: Any) -> None:
        register(self.kernel, provider="cpu_reference")


def _weight() -> np.ndarray:
    return np.linspace(-1, 1, D * D, dtype=np.float32).reshape(D, D)


def _model() -> onnx.ModelProto:
    """x[B, D] -> MatMul(w) -> Faulty -> Relu -> Add(Expand(bias, shape)): the Expand's size
    comes from a fed shape, so each run also sizes and reserves a value at run time."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Faulty", ["m"], ["f"], domain=DOMAIN),
             helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("Expand", ["bias", "shape"], ["e"]),
             helper.make_node("Add", ["r", "e"], ["y"])]
    graph = helper.make_graph(
        nodes, "stress",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", D]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[onnx.numpy_helper.from_array(_weight(), "w"),
                     onnx.numpy_helper.from_array(np.arange(D, dtype=np.float32), "bias")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid(DOMAIN, 1)],
                             ir_version=ORACLE_IR_VERSION)


def stress(rounds: int, threads: int, sessions: int, seed: int = 0) -> collections.Counter:
    """Run ``rounds`` rounds of ``threads`` concurrent runs over ``sessions`` sessions on one
    budget; the counts of what happened."""
    kernel = Faulty()
    limit = 2 * 64 * D * 4 * 4         # the largest run needs ~21 KiB of 32: some refused
    model = _model()
    ss = [onnx_ep.Session(model, providers=["cpu_reference"], plugins=[FaultyPlugin(kernel)],
                          options=SessionOptions(memory_limit=limit, plan_cache_size=4,
                                                 admission="queue" if i % 2 else "strict",
                                                 admission_timeout=0.02))
          for i in range(sessions)]
    # the answer: the same model run alone, one run at a time (outputs must match its bytes)
    oracle = onnx_ep.Session(model, providers=["cpu_reference"], plugins=[FaultyPlugin(Faulty())])
    oracle_lock = threading.Lock()
    authority = ss[0]._authority
    baseline = authority.committed
    counts: collections.Counter = collections.Counter()
    lock = threading.Lock()
    rngs = [np.random.default_rng(seed * 1000 + t) for t in range(threads)]

    def one_run(t: int) -> None:
        rng = rngs[t]
        s = ss[int(rng.integers(sessions))]
        batch = int(rng.integers(1, 65))
        x = rng.standard_normal((batch, D)).astype(np.float32)
        opts = RunOptions()
        roll = rng.random()
        kernel.local.fail = roll < 0.1
        kernel.local.pause = None
        if 0.1 <= roll < 0.15:
            opts.terminate = True                        # cancelled before it starts
        elif 0.15 <= roll < 0.25:
            kernel.local.pause = threading.Event()       # cancelled while it runs
            threading.Timer(0.005, lambda: setattr(opts, "terminate", True)).start()
        try:
            (y,) = s.run(None, {"x": x, "shape": np.array([batch, D], np.int64)}, opts)
        except AdmissionRefused:
            what = "refusals"
        except RunCancelled:
            what = "cancellations"
        except NodeError as exc:
            assert "injected fault" in str(exc)
            what = "injected faults"
        else:
            with oracle_lock:
                (want,) = oracle.run(None, {"x": x, "shape": np.array([batch, D], np.int64)})
            close = np.allclose(want, np.maximum(x @ _weight(), 0) + np.arange(D), atol=1e-5)
            what = "runs ok" if close and y.tobytes() == want.tobytes() else "wrong outputs"
        with lock:
            counts[what] += 1
            counts["runs"] += 1

    for _ in range(rounds):
        ts = [threading.Thread(target=one_run, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert not any(t.is_alive() for t in ts)
        if authority.committed != baseline or any(
                "/run-" in h for h in authority.ledger()["by_holder"]):
            counts["leaks"] += 1
    for s in ss:
        s.close()
    oracle.close()
    if authority.ledger()["by_holder"]:
        counts["leaks"] += 1
    return counts


def _check(counts: collections.Counter) -> None:
    print("stress: " + ", ".join(f"{k} {counts[k]}" for k in (
        "runs", "runs ok", "refusals", "cancellations", "injected faults", "wrong outputs",
        "leaks")))
    assert counts["leaks"] == 0 and counts["wrong outputs"] == 0
    assert counts["runs"] == counts["runs ok"] + counts["refusals"] + \
        counts["cancellations"] + counts["injected faults"]
    for k in ("runs ok", "cancellations", "injected faults"):
        assert counts[k] > 0, f"the stress never saw {k}"


def test_stress_quick():
    _check(stress(rounds=10, threads=6, sessions=3))


@pytest.mark.slow
def test_stress_threads_sessions_faults_and_cancellations_leak_nothing():
    counts = stress(rounds=300, threads=8, sessions=4, seed=1)
    _check(counts)
    assert counts["refusals"] > 0
