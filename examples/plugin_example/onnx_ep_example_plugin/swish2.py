"""``com.example::Swish2``: ``y = x * sigmoid(beta * x)``, a kernel with no onnx-ep base class.

onnx-ep's Kernel protocol is a :class:`typing.Protocol`: any object with the
attributes ``key`` and ``parity`` and the three methods below is a kernel.
This class imports only onnx-ep's *value types* to show that nothing has to
be inherited. See onnx-ep's docs/KERNELS.md.

Operator (domain ``com.example``, since version 1):

- input ``X``: float16, float32 or float64 tensor, any shape;
- attribute ``beta``: float, default 1.0;
- output ``Y``: same dtype and shape as ``X``, ``X * sigmoid(beta * X)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep import (
    CaptureSupport,
    ExecutionContext,
    NodeMeta,
    OpKey,
    Parity,
    Support,
    WorkspaceRequirement,
    WorkspaceView,
)

DOMAIN = "com.example"
FLOAT_DTYPES = frozenset(np.dtype(d) for d in ("float16", "float32", "float64"))


def scratch_bytes(meta: NodeMeta) -> int:
    """Workspace bytes for one node: room for ``sigmoid(beta * x)`` at the input's shape.

    The single sizing formula: :meth:`Swish2.workspace_requirement` calls it at
    plan time and :meth:`Swish2.execute_with_workspace` gets exactly that many
    bytes. 0 when the input shape is not known statically (the kernel then
    takes its allocating route).
    """
    spec = meta.inputs[0] if meta.inputs else None
    if spec is None or not spec.is_static:
        return 0
    return spec.nbytes


class Swish2:
    """The Swish2 kernel. One instance serves every Swish2 node of every session.

    No base class: ``key`` and ``parity`` are plain attributes, the methods plain methods.
    """

    key = OpKey(DOMAIN, "Swish2", since=1)
    # Registered on cpu_reference, this kernel *is* the reference for Swish2:
    # another provider's Swish2 would be held to these bytes (or to its own bound).
    parity = Parity.EXACT

    def __repr__(self) -> str:
        return f"Swish2({self.key})"

    # -- optional: decline nodes with a reason ----------------------------------
    def supports(self, meta: NodeMeta) -> Support:
        """Accept floating-point inputs only; the reason shows up in NoKernelError."""
        if len(meta.inputs) != 1:
            return Support.no(f"Swish2 takes one input, got {len(meta.inputs)}")
        x = meta.inputs[0]
        if x is not None and x.dtype not in FLOAT_DTYPES:
            return Support.no(f"Swish2 needs a float input, got {x.dtype}")
        return Support.YES

    # -- the Kernel protocol -----------------------------------------------------
    def capture_support(self) -> CaptureSupport:
        """numpy runs on the host, so there is no stream to record into."""
        return CaptureSupport.unsupported("numpy kernel runs on the host")

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        """Scratch for the gate ``sigmoid(beta * x)``, freed when the run ends."""
        nbytes = scratch_bytes(meta)
        return WorkspaceRequirement(nbytes) if nbytes else WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        """Compute ``Y`` from ``X``; the gate lives in ``workspace`` when one was planned."""
        (x,) = inputs
        beta = float(ctx.node.attr("beta", 1.0))
        if workspace is not None:
            gate = workspace.array(x.dtype, x.shape)    # raises if the plan was too small
            np.multiply(x, x.dtype.type(beta), out=gate)
        else:
            gate = x * x.dtype.type(beta)
        # y = x / (1 + exp(-beta * x)), the gate built in place on the scratch buffer.
        # exp overflows to inf for very negative beta * x (y is then -0.0, as it should
        # be) and underflows to 0 for very positive beta * x (y is then x): both are exact.
        with np.errstate(over="ignore", under="ignore"):
            np.negative(gate, out=gate)
            np.exp(gate, out=gate)
        np.add(gate, 1, out=gate)
        outputs[0] = x / gate
