"""The CUDA execution provider (cuda-python: driver API, NVRTC, cuBLASLt).

Registered through the same hooks a third party uses. Importing this package
does not import ``cuda``: :func:`is_available` answers without a GPU (and
without cuda-python) with the reason, and :mod:`.driver` imports the bindings
on first use.

The driver layer: :mod:`.driver` (the bindings, errors, availability),
:mod:`.device` (devices, streams, events), :mod:`.launch` (modules, functions,
launches), :mod:`.copies` (memory copies), :mod:`.nvrtc` (compilation),
:mod:`.blas` (cuBLASLt), :mod:`.allocator` and :mod:`.paging` (memory).
Op families live in ``kernels/`` (each module derives its kernels from
:class:`.kernels.base.CudaKernel` and defines ``KERNELS: list``) and are listed
in :func:`kernel_modules`.

What a third-party CUDA kernel needs is exported here (imported on first use, so this
package stays light): the one kernel base :class:`CudaKernel` (and its float-only
:class:`FloatKernel`), :class:`DeviceTensor`, the launch helpers ``BLOCK`` and
``grid_1d``, the dtype table helpers ``suffix`` and ``dtype_support``, and the geometry
struct ``Geo`` with ``struct_arg``. docs/KERNELS.md ("Adding a CUDA op") walks through them.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from onnx_ep.core.hookspecs import RegisterKernel, RegisterProvider, hookimpl
from onnx_ep.core.kernel import Support
from onnx_ep.core.provider import Provider

NAME = "cuda"

#: public name -> module that defines it (PEP 562: imported on first use)
_EXPORTS: dict[str, str] = {
    **{name: "onnx_ep.providers.cuda.kernels.base" for name in (
        "CudaKernel", "FloatKernel", "Geo", "dtype_support", "struct_arg", "suffix")},
    "BLOCK": "onnx_ep.providers.cuda.launch",
    "grid_1d": "onnx_ep.providers.cuda.launch",
    "DeviceTensor": "onnx_ep.providers.cuda.tensor",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value

#: the holder that host <-> device transfers of the provider are charged to
TRANSFER_HOLDER = "transfer"


def kernel_modules() -> tuple[ModuleType, ...]:
    """The op-family modules under ``kernels/``, each defining ``KERNELS: list``.

    Imported on the first call (registration), not with this package; none of them imports
    ``cuda`` either: the driver loads on the first launch.
    """
    from onnx_ep.providers.cuda.kernels import (
        activation,
        attention,
        cast,
        contrib_attention,
        control_flow,
        conv,
        einsum,
        elementwise,
        fused,
        fused_gemm,
        gated,
        gemm,
        indexing,
        loss,
        movement,
        normalization,
        pool,
        quant_contrib,
        quantize,
        reduce,
        resize,
        selection,
        shape,
        softmax,
    )

    return (cast, elementwise, activation, movement, shape, reduce, softmax, gemm, conv, pool,
            attention, loss, normalization, resize, indexing, einsum, quantize, fused,
            fused_gemm, gated, control_flow, selection, contrib_attention, quant_contrib)


def is_available() -> Support:
    """Whether CUDA runs here (lazy: :mod:`.driver` imports cuda on its first call)."""
    from onnx_ep.providers.cuda import driver

    return driver.is_available()


def default_stream() -> Any:
    """The provider-wide stream of device 0."""
    from onnx_ep.providers.cuda.device import get_device

    return get_device(0).default_stream


def device_runtime() -> Any:
    """The :class:`~onnx_ep.providers.cuda.device_runtime.CudaRuntime` of device 0."""
    from onnx_ep.providers.cuda.device_runtime import cuda_runtime

    return cuda_runtime(0)


def default_allocator() -> Any:
    """The allocator of device 0 with the device's free memory as budget."""
    from onnx_ep.providers.cuda.allocator import CudaAllocator
    from onnx_ep.providers.cuda.device import get_device

    return CudaAllocator.for_device(get_device(0), None)


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
    from onnx_ep.core.registry import register_kernel_modules

    register_kernel_modules(register, kernel_modules(), NAME)
