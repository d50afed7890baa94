"""A provider "fake" (device "cpu") whose kernels are deliberately right or wrong, for the harness.

Each kernel computes the reference's float32 result and then moves it ``shift`` ulps
toward +inf, declaring some promise:

=======  =====================  ==========  =====================================
op       promise                shift       what the harness must say
=======  =====================  ==========  =====================================
Neg      exact                  0           bytes equal, kept
Add      ``Parity.ulp(1)``      1           1 ulp, kept
Mul      ``Parity.ulp(1)``      3           3 ulp, broken
Div      exact                  1           differs, broken
=======  =====================  ==========  =====================================

``PLUGIN`` registers them; pass it as ``Session(..., plugins=[PLUGIN])`` or
``compare(..., plugins=[PLUGIN])``, or point an ``onnx_ep`` entry point at
``tests.helpers.fake_provider:PLUGIN``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import onnx_ep
from onnx_ep import CaptureSupport, OpKey, Parity, Provider, WorkspaceRequirement

FAKE = "fake"


def shift_ulps(y: np.ndarray, n: int) -> np.ndarray:
    """``y`` moved ``n`` representable values toward +inf."""
    y = np.asarray(y)
    for _ in range(n):
        y = np.nextafter(y, np.asarray(np.inf, dtype=y.dtype))
    return y


class FakeKernel:
    """``outputs[0] = shift_ulps(fn(*inputs), shift)``, promising ``parity``."""

    def __init__(self, op_type: str, fn: Callable[..., Any], parity: Parity,
                 shift: int = 0) -> None:
        self.key = OpKey("", op_type, 7)
        self.fn = fn
        self.parity = parity
        self.shift = shift

    def __repr__(self) -> str:
        return f"FakeKernel({self.key.op_type}, shift={self.shift}, parity={self.parity})"

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.unsupported("host numpy")

    def workspace_requirement(self, meta: Any) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: Any, inputs: Sequence[Any], outputs: list[Any],
                               workspace: Any) -> None:
        outputs[0] = shift_ulps(self.fn(*inputs), self.shift)


KERNELS = (
    FakeKernel("Neg", np.negative, Parity.EXACT),
    FakeKernel("Add", np.add, Parity.ulp(1), shift=1),
    FakeKernel("Mul", np.multiply, Parity.ulp(1), shift=3),
    FakeKernel("Div", np.divide, Parity.EXACT, shift=1),
)


class FakePlugin:
    """Registers provider "fake" (device "cpu") and :data:`KERNELS` on it."""

    __name__ = "fake_provider"

    @onnx_ep.hookimpl
    def onnx_ep_register_providers(self, register: Any) -> None:
        register(Provider(FAKE, device="cpu", priority=-10,
                          description="test provider with deliberately wrong kernels"))

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(self, register: Any) -> None:
        for k in KERNELS:
            register(k, provider=FAKE)


PLUGIN = FakePlugin()
