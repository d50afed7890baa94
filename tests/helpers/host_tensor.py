"""A device tensor's host-visible face (address, shape, dtype) for the CUDA host tests, which
record a kernel's launches instead of making them."""

from __future__ import annotations

import numpy as np


class HostTensor:
    """What a kernel's execute reads of a device tensor: its address, shape and dtype."""

    def __init__(self, shape, dtype, ptr):
        self.shape, self.dtype, self.ptr, self.device = tuple(shape), np.dtype(dtype), ptr, 0

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))


def specs_of(tensors):
    """The TensorSpec of each tensor (None for a missing optional one)."""
    from onnx_ep.core.kernel import TensorSpec

    return [TensorSpec(t.dtype, t.shape) if t is not None else None for t in tensors]


def recorded_launches(kernel, meta, inputs, outputs, monkeypatch, workspace=None):
    """``kernel`` bound to ``meta`` and executed with its launches recorded instead of made:
    ``[(symbol, grid, block, args, shared_bytes), ...]`` in launch order."""
    from onnx_ep.core.kernel import ExecutionContext

    bound = kernel.bind(meta)
    calls = []
    monkeypatch.setattr(bound, "function", lambda symbol, tensor: symbol)
    monkeypatch.setattr(bound, "launch", lambda fn, grid, block, args, stream, shared_bytes=0:
                        calls.append((fn, grid, block, args, shared_bytes)))
    bound.execute_with_workspace(ExecutionContext(meta), inputs, outputs, workspace)
    return calls
