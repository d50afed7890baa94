"""Copies between host and device memory and a byte fill, each enqueued on a stream
(each function says when its bytes are ready).

Nothing here imports ``cuda`` at module import time (see :mod:`.driver`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onnx_ep.providers.cuda.driver import check, driver
from onnx_ep.providers.cuda.graphs import refuse_while_capturing

if TYPE_CHECKING:
    from onnx_ep.providers.cuda.device import Stream


def _host_ptr(arr: np.ndarray) -> int:
    if not arr.flags.c_contiguous:
        raise ValueError("host array must be C-contiguous for a device copy")
    return int(arr.ctypes.data)


def copy_htod(dst_ptr: int, src: np.ndarray, stream: Stream) -> None:
    """Copy ``src`` (C-contiguous) to device address ``dst_ptr``, async on ``stream``.

    From pageable memory the driver stages the bytes before returning, so
    ``src`` may be reused once this returns.
    """
    refuse_while_capturing("upload from the host")
    if src.nbytes:
        check(driver().cuMemcpyHtoDAsync(dst_ptr, _host_ptr(src), src.nbytes, stream.handle),
              f"cuMemcpyHtoDAsync({src.nbytes} bytes)")


def copy_dtoh(dst: np.ndarray, src_ptr: int, stream: Stream) -> None:
    """Copy ``dst.nbytes`` from device address ``src_ptr`` into ``dst``, async on ``stream``.

    ``dst`` is complete only after ``stream.synchronize()``.
    """
    refuse_while_capturing("read back to the host")
    if not dst.flags.writeable:
        raise ValueError("destination array is read-only")
    if dst.nbytes:
        check(driver().cuMemcpyDtoHAsync(_host_ptr(dst), src_ptr, dst.nbytes, stream.handle),
              f"cuMemcpyDtoHAsync({dst.nbytes} bytes)")


def copy_dtod(dst_ptr: int, src_ptr: int, nbytes: int, stream: Stream) -> None:
    """Device-to-device copy of ``nbytes``, async on ``stream``."""
    if nbytes:
        check(driver().cuMemcpyDtoDAsync(dst_ptr, src_ptr, nbytes, stream.handle),
              f"cuMemcpyDtoDAsync({nbytes} bytes)")


def memset_d8(ptr: int, byte: int, nbytes: int, stream: Stream) -> None:
    """Set ``nbytes`` bytes at ``ptr`` to ``byte``, async on ``stream``."""
    if nbytes:
        check(driver().cuMemsetD8Async(ptr, byte & 0xFF, nbytes, stream.handle),
              f"cuMemsetD8Async({nbytes} bytes)")
