"""Provider-side contracts: what an execution provider gives the core.

A kernel author reads ``core/kernel.py``; a provider author also reads this file:
:class:`Provider` (registered through ``onnx_ep_register_providers``), the
:class:`DeviceRuntime` a device provider returns, and the :class:`StableRegion` a runtime
makes for weight streaming.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs
import numpy as np

from onnx_ep.core.kernel import Support, TensorSpec


def _always_available() -> Support:
    return Support.YES


class StableRegion(Protocol):
    """A device address range that never moves while physical pages are mapped under it.

    Made by the optional ``DeviceRuntime.stable_region(nbytes, holder)``; the core's
    weight pager (``onnx_ep.core.pager``, docs/MEMORY.md) drives it. Tensors viewed in it
    keep their addresses for the region's life, so a captured graph stays valid while
    pages move. Reserving the range costs no budget; each page backs part of a
    reservation the core made.

    :ivar ptr: base address. :ivar nbytes: size, a multiple of ``page_bytes``.
    :ivar page_bytes: the mapping granule (2 MiB on an H200).
    """

    ptr: int
    nbytes: int
    page_bytes: int

    def new_page(self, reservation: Any) -> Any:
        """Physical memory of ``page_bytes`` backing part of ``reservation`` (not charged again)."""
        ...

    def map(self, offset: int, page: Any) -> None:
        """Map ``page`` at ``ptr + offset`` (page-aligned, nothing mapped there)."""
        ...

    def unmap(self, offset: int) -> Any:
        """Unmap the page at ``offset`` and return it; its bytes survive for a later map.

        Synchronous for the host but NOT ordered with streams: the caller first makes
        sure no queued work still reads the page (see :meth:`fence`).
        """
        ...

    def write(self, offset: int, data: np.ndarray, stream: Any) -> None:
        """Copy host ``data`` (uint8, contiguous) to ``ptr + offset``, async on ``stream``."""
        ...

    def tensor(self, offset: int, spec: TensorSpec) -> Any:
        """A device tensor of ``spec`` at ``ptr + offset`` (valid while its pages are mapped)."""
        ...

    def fence(self, stream: Any) -> Any:
        """Mark the work queued on ``stream`` so far. The result has ``wait()`` (block the
        host until that work is done), ``done() -> bool`` and ``release()`` (recycle it)."""
        ...

    def close(self) -> None:
        """Unmap everything, free every page and the range (idempotent; the caller has
        waited for the work that reads it)."""
        ...


class DeviceAllocation(Protocol):
    """Physical device memory backing one reservation."""

    ptr: int
    nbytes: int

    def free(self) -> None: ...


class DeviceRuntime(Protocol):
    """What the core needs from a device provider (one object per device).

    The core keeps the budget and the ledger (``onnx_ep.core.memory``); the runtime
    only backs reservations with physical memory, makes tensors, streams and copies.

    :ivar device: the ledger's device name (``"cuda:0"``).
    :ivar granularity: bytes per accounting granule of this device's allocator.

    Optional, for ``weight_streaming`` on the device: ``stable_region(nbytes: int,
    holder: str) -> StableRegion``. A runtime without it refuses streaming at load.
    """

    device: str
    granularity: int

    def budget(self) -> int:
        """Bytes the device can grant now (free memory); used when no memory_limit is set."""
        ...

    def new_stream(self) -> Any:
        """A stream for one session's steps."""
        ...

    def allocate(self, reservation: Any) -> DeviceAllocation:
        """Back ``reservation`` (made by the core) with device memory."""
        ...

    def tensor(self, allocation: DeviceAllocation, offset: int, spec: TensorSpec) -> Any:
        """A device tensor of ``spec`` at byte ``offset`` of ``allocation`` (no allocation)."""
        ...

    def upload(self, array: np.ndarray, out: Any, stream: Any) -> Any:
        """Copy host ``array`` into device tensor ``out`` on ``stream``; return ``out``."""
        ...

    def download(self, tensor: Any, stream: Any) -> np.ndarray:
        """Copy a device tensor to a new host array and wait for it."""
        ...

    def synchronize(self, stream: Any) -> None: ...

    # Optional, for onnx_ep.Tensor and IOBinding (device feeds and outputs):
    #   copy(src, dst, stream) -> dst        device-to-device copy of equal dtype/shape
    #   from_dlpack(obj) -> device tensor    zero-copy import of a DLPack producer
    #   default_stream() -> stream           the stream from_dlpack orders producers before
    #   prepare(kernels)                      before a program's first run, get ready what
    #                                         its device kernels need (CUDA: compile their
    #                                         kernel families in parallel)
    #   copy_many([(src, dst), ...], stream)  several such copies at once (one launch on
    #                                         CUDA): device feeds into their input buffers
    #                                         and outputs out of the arena use it
    #   fence(stream) -> fence                mark the work queued so far: fence.wait()
    #                                         blocks until it is done, fence.release()
    #                                         recycles it (device_io.readback; without it
    #                                         a readback waits for the whole stream)
    #
    # Optional, for CUDA-graph capture (core/capture.py, docs/CAPTURE.md); without them every
    # plan is declined:
    #   begin_capture(stream)                 start recording the stream (this thread only)
    #   capture_failure(stream) -> str|None   the error name once the capture is invalidated
    #   end_capture(stream) -> graph          end and instantiate: graph.replay(stream),
    #                                         graph.close(), graph.nodes; raises on failure
    #   abort_capture(stream)                 end a failed capture, keep nothing, never raise
    #   graph_bytes(steps) -> int             device bytes to charge per instantiated graph
    #
    # Optional, for device time in profiles (core/profiling.py, docs/PROFILING.md); without
    # them a profile has host times only:
    #   timing_event() -> event               a new event that can time: event.record(stream)
    #                                         marks the stream's position (never while it
    #                                         captures), event.close() frees it
    #   elapsed_ms(start, end) -> float       device milliseconds between two recorded
    #                                         events; waits for ``end`` to complete


@attrs.frozen
class Provider:
    """An execution provider, registered through ``onnx_ep_register_providers``.

    :ivar name: what users write in ``providers=[...]`` (``"cpu_reference"``).
    :ivar device: ``"cpu"`` for providers whose tensors are numpy arrays, else a
        device type (``"cuda"``); placement inserts copies where values change device.
    :ivar priority: order among providers when ``providers=None`` (higher first).
    :ivar is_available: returns :data:`Support.YES` or why the provider cannot run here.
    :ivar runtime: for device providers, returns the :class:`DeviceRuntime`
        (called only once the provider is selected and available).
    :ivar description: one line for ``onnx-ep providers``.
    :ivar sealed: the provider is an oracle (``cpu_reference``): kernels for the ops it
        implements come from its own plugin only (:exc:`KernelConflictError` otherwise).
    """

    name: str
    device: str = "cpu"
    priority: int = 0
    is_available: Callable[[], Support] = _always_available
    runtime: Callable[[], DeviceRuntime] | None = None
    description: str = ""
    #: the provider is an oracle: no plugin but the one that registered it may register a
    #: kernel for an op it implements (any version); others may only add ops it lacks
    sealed: bool = False
