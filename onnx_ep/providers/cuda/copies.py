"""Copies between host and device memory and a byte fill, each enqueued on a stream
(each function says when its bytes are ready).

Nothing here imports ``cuda`` at module import time (see :mod:`.driver`).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_ep.providers.cuda import launch
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
        launch.record(functools.partial(copy_dtod, dst_ptr, src_ptr, nbytes, stream))


#: the most buffers one :func:`copy_many` launch moves (``EP_COPY_MANY`` of kernels/copies.cu)
COPY_MANY = 48
#: threads per block and the most blocks per buffer of a :func:`copy_many` launch
_COPY_BLOCK, _COPY_MAX_BLOCKS = 256, 128


class CopyTable(ctypes.Structure):
    """``struct CopyTable`` of kernels/copies.cu, passed by value (no upload needed)."""

    _fields_ = [("src", ctypes.c_uint64 * COPY_MANY), ("dst", ctypes.c_uint64 * COPY_MANY),
                ("bytes", ctypes.c_uint64 * COPY_MANY)]


def copy_many(jobs: Sequence[tuple[int, int, int]], device: Any, stream: Stream) -> None:
    """Device-to-device copies ``(dst_ptr, src_ptr, nbytes)``, async on ``stream``: one
    launch per :data:`COPY_MANY` buffers (one buffer alone is a plain copy). The buffers
    must not overlap one another."""
    from onnx_ep.providers.cuda import nvrtc

    jobs = [j for j in jobs if j[2]]
    if len(jobs) == 1:
        copy_dtod(*jobs[0], stream)
    if len(jobs) < 2:
        return
    fn = nvrtc.get_function("copies", "copy_many", device)
    for at in range(0, len(jobs), COPY_MANY):
        chunk = jobs[at:at + COPY_MANY]
        table = CopyTable()
        for k, (dst, src, n) in enumerate(chunk):
            table.dst[k], table.src[k], table.bytes[k] = dst, src, n
        vectors = -(-max(n for _, _, n in chunk) // 16)
        blocks = max(1, min(_COPY_MAX_BLOCKS, -(-vectors // _COPY_BLOCK)))
        launch.launch_cached(fn, (blocks, len(chunk), 1), (_COPY_BLOCK, 1, 1),
                             [(table, None)], stream)


def memset_d8(ptr: int, byte: int, nbytes: int, stream: Stream) -> None:
    """Set ``nbytes`` bytes at ``ptr`` to ``byte``, async on ``stream``."""
    if nbytes:
        check(driver().cuMemsetD8Async(ptr, byte & 0xFF, nbytes, stream.handle),
              f"cuMemsetD8Async({nbytes} bytes)")
        launch.record(functools.partial(memset_d8, ptr, byte, nbytes, stream))
