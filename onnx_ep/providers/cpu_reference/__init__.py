"""The numpy CPU reference provider: the oracle every other provider is held to.

Kernels live in op-family modules (``elementwise``, ``nn``, ...) each exposing a
``KERNELS`` list; this module registers them through the same hooks a third
party uses. Bodies read like the ONNX spec (see docs/PARITY.md for numerics).
"""

from __future__ import annotations


from onnx_ep.core.kernel import Provider
from onnx_ep.plugins.hookspecs import RegisterKernel, RegisterProvider, hookimpl

NAME = "cpu_reference"

#: op-family modules of this package; each defines ``KERNELS: list[CpuKernel]``.
MODULES: tuple[str, ...] = (
    "attention",
    "activation",
    "cast",
    "control_flow",
    "conv",
    "detection",
    "elementwise",
    "flex_attention",
    "gather_scatter",
    "gemm",
    "grid",
    "image",
    "movement",
    "normalization",
    "linalg",
    "loss",
    "ml",
    "optional",
    "pool",
    "recent",
    "quantize",
    "random_ops",
    "reduce",
    "resize",
    "rnn",
    "selection",
    "sequence",
    "shape",
    "spectral",
    "text",
    "tfidf",
    "training",
)

PROVIDER = Provider(name=NAME, device="cpu", priority=0,
                    description="numpy reference kernels (the parity oracle)")


@hookimpl
def onnx_ep_register_providers(register: RegisterProvider) -> None:
    register(PROVIDER)


@hookimpl
def onnx_ep_register_kernels(register: RegisterKernel) -> None:
    from onnx_ep.plugins.manager import register_kernel_modules

    register_kernel_modules(register, __name__, MODULES, NAME)
