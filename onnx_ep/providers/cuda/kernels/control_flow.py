"""``If``, ``Loop`` and ``Scan`` on CUDA: the core's device control flow
(:mod:`onnx_ep.core.control_flow`) over this provider's runtime.

The condition (and a ``Loop``'s trip count) is read back once per decision; bodies run as
device plans of their own, their outputs copied device-to-device into the node's buffers.
"""

from __future__ import annotations

from typing import Any

from onnx_ep.core.control_flow import device_control_flow


def _runtime() -> Any:
    from onnx_ep.providers.cuda.device_runtime import cuda_runtime

    return cuda_runtime(0)


KERNELS = device_control_flow(_runtime)
