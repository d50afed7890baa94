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
