"""The CUDA execution provider (cuda-python: driver API, NVRTC, cuBLASLt).

Registered through the same hooks a third party uses. Importing this package
does not import ``cuda``: :func:`is_available` answers without a GPU (and
without cuda-python) with the reason, and the runtime modules import the
bindings on first use.

Kernel modules live in ``kernels/`` and are listed in :data:`MODULES`; each
defines ``KERNELS: list`` of kernel instances.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import Provider, Support
from onnx_ep.plugins.hookspecs import RegisterKernel, RegisterProvider, hookimpl

NAME = "cuda"

#: kernel modules under ``providers/cuda/kernels/``; each defines ``KERNELS: list``.
MODULES: tuple[str, ...] = (
    "cast",
    "elementwise",
    "movement",
    "shape",
    "reduce",
    "softmax",
    "gemm",
    "conv",
    "pool",
    "attention",
    "loss",
    "normalization",
    "resize",
    "indexing",
    "einsum",
    "quantize",
)

#: the holder that host <-> device transfers of the provider are charged to
TRANSFER_HOLDER = "transfer"


def is_available() -> Support:
    """Whether CUDA runs here (lazy: imports the runtime, which imports cuda on first call)."""
    from onnx_ep.providers.cuda import runtime

    return runtime.is_available()


def default_stream() -> Any:
    """The provider-wide stream of device 0."""
    from onnx_ep.providers.cuda import runtime

    return runtime.get_device(0).default_stream


def device_runtime() -> Any:
    """The :class:`~onnx_ep.providers.cuda.device_runtime.CudaRuntime` of device 0."""
    from onnx_ep.providers.cuda.device_runtime import runtime_for

    return runtime_for(0)


def default_allocator() -> Any:
    """The allocator of device 0 with the device's free memory as budget."""
    from onnx_ep.providers.cuda import runtime
    from onnx_ep.providers.cuda.allocator import CudaAllocator

    return CudaAllocator.for_device(runtime.get_device(0), None)


def to_host(tensor: Any, stream: Any = None) -> np.ndarray:
    """Copy a DeviceTensor to a new numpy array (copy, then synchronize the stream)."""
    return tensor.numpy(stream if stream is not None else default_stream())


def from_host(array: np.ndarray, stream: Any = None) -> Any:
    """Upload ``array`` to device 0 into a block charged to ``"transfer"`` as activations."""
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    return DeviceTensor.from_numpy(array, default_allocator(),
                                   stream if stream is not None else default_stream(),
                                   holder=TRANSFER_HOLDER, role=Role.ACTIVATIONS)


PROVIDER = Provider(name=NAME, device="cuda", priority=100, is_available=is_available,
                    runtime=device_runtime,
                    description="NVIDIA GPUs through cuda-python (NVRTC kernels, cuBLASLt)")


@hookimpl
def onnx_ep_register_providers(register: RegisterProvider) -> None:
    register(PROVIDER)


@hookimpl
def onnx_ep_register_kernels(register: RegisterKernel) -> None:
    from onnx_ep.plugins.manager import register_kernel_modules

    register_kernel_modules(register, f"{__name__}.kernels", MODULES, NAME)
