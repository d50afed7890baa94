"""The CUDA side of weight streaming: a :class:`~onnx_ep.core.provider.StableRegion` on VMM.

The core's pager (``onnx_ep.core.pager``) decides which weight pages are resident;
this module does what it asks on the GPU through the allocator (the only module that
calls ``cuMemCreate`` / ``cuMemMap`` / ``cuMemUnmap``): one virtual range reserved once
(``cuMemAddressReserve``), physical 2 MiB pages created against the pager's
reservation, mapped and unmapped under the range, filled with ``cuMemcpyHtoDAsync`` on
the session's stream, and events as fences. A captured graph reads whatever page is
mapped at its addresses, so pages move without re-capture.
See docs/MEMORY.md.
"""

from __future__ import annotations

import numpy as np

from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import Reservation
from onnx_ep.providers.cuda import copies
from onnx_ep.providers.cuda.allocator import CudaAllocator, PhysicalMemory
from onnx_ep.providers.cuda.device import Device, Event, Stream
from onnx_ep.providers.cuda.tensor import DeviceTensor


class CudaFence:
    """An event recorded on the session's stream; recycled through its region's pool."""

    __slots__ = ("event", "_pool")

    def __init__(self, event: Event, pool: list[Event]) -> None:
        self.event = event
        self._pool = pool

    def wait(self) -> None:
        """Block the host until the work before the fence is done (``cuEventSynchronize``)."""
        self.event.synchronize()

    def done(self) -> bool:
        return self.event.query()

    def release(self) -> None:
        self._pool.append(self.event)


class CudaPagedRegion:
    """A VMM address range for one session's streamed weights.

    :ivar ptr: base address, fixed for the region's life.
    :ivar nbytes: size of the range. :ivar page_bytes: the VMM granularity.
    """

    def __init__(self, device: Device, allocator: CudaAllocator, nbytes: int,
                 holder: str) -> None:
        self._device = device
        self._allocator = allocator
        self._vm = allocator.stable_region(nbytes, holder)
        self.ptr = self._vm.ptr
        self.nbytes = self._vm.nbytes
        self.page_bytes = self._vm.granularity
        self._pages: list[PhysicalMemory] = []
        self._events: list[Event] = []      # recorded-and-released events, reusable
        self._made: list[Event] = []        # every event made, destroyed on close
        self.closed = False

    def __repr__(self) -> str:
        return f"<CudaPagedRegion 0x{self.ptr:x} {self.nbytes} bytes, {len(self._pages)} page(s)>"

    def new_page(self, reservation: Reservation) -> PhysicalMemory:
        page = self._allocator.back_physical(reservation, self.page_bytes)
        self._pages.append(page)
        return page

    def map(self, offset: int, page: PhysicalMemory) -> None:
        self._device.set_current()
        self._vm.map(offset, page)

    def unmap(self, offset: int) -> PhysicalMemory:
        self._device.set_current()
        (page,) = self._vm.unmap(offset, self.page_bytes)
        return page

    def write(self, offset: int, data: np.ndarray, stream: Stream) -> None:
        copies.copy_htod(self.ptr + offset, data, stream)

    def tensor(self, offset: int, spec: TensorSpec) -> DeviceTensor:
        if offset < 0 or offset + spec.nbytes > self.nbytes:
            raise ValueError(f"a {spec.nbytes}-byte tensor at offset {offset} does not fit in "
                             f"{self!r}")
        return DeviceTensor(self.ptr + offset, spec.dtype, spec.shape, self._device.ordinal,
                            owner=self)

    def fence(self, stream: Stream) -> CudaFence:
        if self._events:
            event = self._events.pop()
        else:
            event = self._device.new_event()
            self._made.append(event)
        event.record(stream)
        return CudaFence(event, self._events)

    def close(self) -> None:
        """Unmap every page, free the range, release the pages and events (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._device.set_current()
        try:
            self._vm.close()
        finally:
            pages, self._pages = self._pages, []
            for p in pages:
                p.release()
            events, self._made = self._made, []
            self._events.clear()
            for e in events:
                e.close()
