"""A numpy "device memory" for host tests of CUDA kernels' argument packing.

Tensors live at addresses the test chooses (256-byte aligned, optionally skewed), so a test
can replay a kernel's launch on these bytes and check pointers, widths and offsets against
numpy byte for byte.
"""

from __future__ import annotations

import numpy as np

UNIT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.dtype("V16")}


class ByteMemory:
    """Byte-addressed memory; each tensor lands ``skew`` bytes past a 256-byte boundary."""

    def __init__(self, nbytes: int = 1 << 22) -> None:
        self.bytes = np.zeros(nbytes, np.uint8)
        self.top = 256

    def tensor(self, array: np.ndarray, skew: int = 0) -> ByteTensor:
        t = ByteTensor(self, self.top + skew, array.dtype, array.shape)
        t.array()[...] = array
        self.top += -(-(skew + max(t.nbytes, 1)) // 256) * 256
        return t

    def empty(self, dtype, shape) -> ByteTensor:
        return self.tensor(np.zeros(shape, dtype))

    def units(self, width: int) -> np.ndarray:
        return self.bytes.view(UNIT[width])


class ByteTensor:
    """What a CUDA kernel reads of a DeviceTensor: ptr, dtype, shape, size, nbytes."""

    def __init__(self, mem: ByteMemory, ptr: int, dtype, shape) -> None:
        self.mem, self.ptr, self.dtype, self.shape = mem, ptr, np.dtype(dtype), tuple(shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.ndim, self.nbytes, self.device = len(self.shape), self.size * self.dtype.itemsize, 0

    def array(self) -> np.ndarray:
        return self.mem.bytes[self.ptr:self.ptr + self.nbytes].view(self.dtype).reshape(self.shape)
