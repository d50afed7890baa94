"""Optional ops. An empty optional is ``None``; a full one is the value itself (array or list).

Pure data movement: ``Parity.EXACT``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, FnKernel


def _optional(ctx: ExecutionContext, value: Any = None) -> Any:
    return value


def _has_element(ctx: ExecutionContext, value: Any = None) -> np.ndarray:
    return np.array(value is not None)


def _get_element(ctx: ExecutionContext, value: Any = None) -> Any:
    if value is None:
        raise CpuKernel.fail(ctx, "the optional input is empty; check OptionalHasElement first")
    return value


KERNELS: list[CpuKernel] = [
    FnKernel("Optional", _optional, since=15),
    FnKernel("OptionalHasElement", _has_element, since=15),
    FnKernel("OptionalGetElement", _get_element, since=15),
]
