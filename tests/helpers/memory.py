"""Kernels and plugins for memory tests: a blocking kernel, a failing kernel, a scratch user."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import CaptureSupport, OpKey, Parity, WorkspaceLifetime, WorkspaceRequirement
from tests.helpers.oracle import ORACLE_IR_VERSION

DOMAIN = "com.onnx_ep.memtest"


class ScratchKernel:
    """y = x * 2 computed through a workspace of ``x.nbytes`` (declared exactly).

    ``calls`` counts executions; ``gate`` (an Event) makes it block until set;
    ``fail`` makes it raise after touching its workspace.
    """

    parity = Parity.EXACT

    def __init__(self, op: str = "Scratch",
                 lifetime: WorkspaceLifetime = WorkspaceLifetime.STEP_SCOPED) -> None:
        self.key = OpKey(DOMAIN, op, 1)
        self.lifetime = lifetime
        self.calls = 0
        self.started = threading.Event()
        self.gate: threading.Event | None = None
        self.fail = False

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.unsupported("host test kernel")

    @staticmethod
    def scratch_bytes(shape: Any, dtype: Any) -> int:
        return int(np.prod(shape)) * np.dtype(dtype).itemsize

    def infer_outputs(self, meta: Any) -> list[Any]:
        return [meta.inputs[0]]          # y is x's shape: the plan's arena holds it

    def workspace_requirement(self, meta: Any) -> WorkspaceRequirement:
        spec = meta.inputs[0]
        if spec is None or not spec.is_static:
            return WorkspaceRequirement.NONE
        return WorkspaceRequirement(self.scratch_bytes(spec.shape, spec.dtype), self.lifetime)

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        (x,) = inputs
        self.calls += 1
        self.started.set()
        if self.gate is not None:
            self.gate.wait(10)
        tmp = workspace.array(x.dtype, x.shape)
        np.multiply(x, 2, out=tmp)
        if self.fail:
            raise RuntimeError("injected kernel failure")
        outputs[0] = tmp.copy()


class ScratchPlugin:
    def __init__(self, kernel: ScratchKernel) -> None:
        self.kernel = kernel

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(self, register: Any) -> None:
        register(self.kernel, provider="cpu_reference")


def scratch_model(op: str = "Scratch", weight_elems: int = 0) -> onnx.ModelProto:
    """x[n] -> Scratch -> (+ w if weight_elems) -> y."""
    nodes = [helper.make_node(op, ["x"], ["s"], domain=DOMAIN)]
    inits = []
    out = "s"
    if weight_elems:
        nodes.append(helper.make_node("Add", ["s", "w"], ["y"]))
        inits.append(onnx.numpy_helper.from_array(np.ones(weight_elems, np.float32), "w"))
        out = "y"
    g = helper.make_graph(nodes, "scratch",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["n"])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(DOMAIN, 1)],
                             ir_version=ORACLE_IR_VERSION)
