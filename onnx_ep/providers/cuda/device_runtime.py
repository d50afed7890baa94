"""CudaRuntime: the :class:`~onnx_ep.core.provider.DeviceRuntime` the core drives for one GPU.

The core's ``DeviceBinding`` reserves every byte in the device's authority and
then asks this object to back the reservation (:meth:`CudaRuntime.allocate`),
make tensor views of it, and copy between host and device on the session's
stream. See docs/MEMORY.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import Reservation
from onnx_ep.providers.cuda import copies, graphs
from onnx_ep.providers.cuda.allocator import BLOCK_GRANULARITY, CudaAllocator, DeviceAllocation
from onnx_ep.providers.cuda.device import Device, Event, Stream, get_device
from onnx_ep.providers.cuda.paging import CudaFence
from onnx_ep.providers.cuda.tensor import DeviceTensor

if TYPE_CHECKING:
    from onnx_ep.providers.cuda.paging import CudaPagedRegion

_runtimes: dict[int, CudaRuntime] = {}

#: what an instantiated graph is charged: a fixed part and a part per recorded step (an
#: upper bound of the kernel-parameter and node storage the driver keeps on the device)
GRAPH_BASE_BYTES = 64 * 1024
GRAPH_NODE_BYTES = 2 * 1024


def cuda_runtime(ordinal: int = 0) -> CudaRuntime:
    """The :class:`CudaRuntime` of device ``ordinal`` (one per process)."""
    rt = _runtimes.get(ordinal)
    if rt is None:
        rt = _runtimes.setdefault(ordinal, CudaRuntime(get_device(ordinal)))
    return rt


class CudaRuntime:
    """Backs core reservations with device memory; views, uploads, downloads.

    :ivar device: the ledger's device name (``"cuda:0"``).
    :ivar granularity: the allocator's accounting granule (512 bytes).
    """

    granularity = BLOCK_GRANULARITY

    def __init__(self, device: Device) -> None:
        self.cuda_device = device
        self.device = f"cuda:{device.ordinal}"
        self.allocator = CudaAllocator.for_device(device, None)
        self._fences: list[Event] = []       # released fence events, reused

    def fence(self, stream: Stream) -> CudaFence:
        """Mark the work queued on ``stream`` so far: ``wait()`` blocks the host until it is
        done (not for work queued later), ``release()`` recycles the event."""
        event = self._fences.pop() if self._fences else self.cuda_device.new_event()
        event.record(stream)
        return CudaFence(event, self._fences)

    def budget(self) -> int:
        """Free device memory now (``cuMemGetInfo``)."""
        return self.cuda_device.free_bytes()

    def new_stream(self) -> Stream:
        return self.cuda_device.new_stream()

    def allocate(self, reservation: Reservation) -> DeviceAllocation:
        return self.allocator.back(reservation)

    def tensor(self, allocation: DeviceAllocation, offset: int, spec: TensorSpec) -> DeviceTensor:
        """A view of ``spec`` at byte ``offset`` of ``allocation`` (keeps it alive)."""
        n = spec.nbytes
        if offset < 0 or offset + n > max(allocation.capacity, allocation.nbytes):
            raise ValueError(f"a {n}-byte tensor at offset {offset} does not fit in an "
                             f"allocation of {allocation.nbytes} bytes")
        return DeviceTensor(allocation.ptr + offset, spec.dtype, spec.shape,
                            self.cuda_device.ordinal, owner=allocation)

    def upload(self, array: np.ndarray, out: DeviceTensor, stream: Stream) -> DeviceTensor:
        """Copy ``array`` into ``out`` (same dtype and shape), async on ``stream``."""
        host = np.asarray(array, order="C")   # ascontiguousarray would make 0-d 1-d
        if host.dtype != out.dtype or host.shape != out.shape:
            raise ValueError(f"upload of {host.dtype}{list(host.shape)} into a device tensor "
                             f"of {out.dtype}{list(out.shape)}")
        copies.copy_htod(out.ptr, host, stream)
        return out

    def download(self, tensor: DeviceTensor, stream: Stream) -> np.ndarray:
        """Copy to a new host array and wait for it."""
        return tensor.numpy(stream)

    def synchronize(self, stream: Stream) -> None:
        stream.synchronize()

    def copy(self, src: DeviceTensor, dst: DeviceTensor, stream: Stream) -> DeviceTensor:
        """Device-to-device copy of ``src`` into ``dst`` (same dtype and shape), async."""
        if src.dtype != dst.dtype or src.shape != dst.shape:
            raise ValueError(f"copy of {src.dtype}{list(src.shape)} into a device tensor of "
                             f"{dst.dtype}{list(dst.shape)}")
        copies.copy_dtod(dst.ptr, src.ptr, src.nbytes, stream)
        return dst

    def prepare(self, kernels: Sequence[object]) -> list[str]:
        """Compile the kernel families ``kernels`` launch (and the runtime's own copies), in
        parallel, before a session's first run; the families compiled (cached ones are not).
        """
        from onnx_ep.providers.cuda import driver, nvrtc

        sources = {s for k in kernels if isinstance(s := getattr(k, "source", None), str)}
        try:
            return nvrtc.precompile(sources | {"copies"}, self.cuda_device.arch,
                                    driver.driver_version())
        except Exception as e:   # only an early start: each family still compiles on first use
            import logging

            logging.getLogger("onnx_ep").warning("compiling kernel families ahead failed "
                                                 "(%s: %s); they compile on first use",
                                                 type(e).__name__, e)
            return []

    def copy_many(self, pairs: Sequence[tuple[DeviceTensor, DeviceTensor]],
                  stream: Stream) -> None:
        """Device-to-device copies ``(src, dst)`` (same dtype and shape each, no overlap),
        async, in as few launches as :func:`.copies.copy_many` needs."""
        for src, dst in pairs:
            if src.dtype != dst.dtype or src.shape != dst.shape:
                raise ValueError(f"copy of {src.dtype}{list(src.shape)} into a device tensor "
                                 f"of {dst.dtype}{list(dst.shape)}")
        copies.copy_many([(d.ptr, s.ptr, s.nbytes) for s, d in pairs], self.cuda_device,
                          stream)

    def pooled(self, nbytes: int, holder: str) -> DeviceAllocation:
        """A block from the allocator's pool, charged to ``holder`` until the last view of it
        is dropped (then it goes back to the pool): the outputs a run returns on the device
        take one such block instead of a driver allocation each."""
        from onnx_ep.core.memory import Role

        return self.allocator.allocate(nbytes, Role.ACTIVATIONS, holder)

    def from_dlpack(self, obj: object) -> DeviceTensor:
        """Zero-copy import of a CUDA DLPack producer, ordered before :meth:`default_stream`."""
        return DeviceTensor.from_dlpack(obj, self.default_stream())

    def default_stream(self) -> Stream:
        return self.cuda_device.default_stream

    def stable_region(self, nbytes: int, holder: str) -> CudaPagedRegion:
        """A VMM address range for weight streaming (the core's pager drives it)."""
        from onnx_ep.providers.cuda.paging import CudaPagedRegion

        return CudaPagedRegion(self.cuda_device, self.allocator, nbytes, holder)

    # ------------------------------------------------------------ capture (core/capture.py)
    def begin_capture(self, stream: Stream) -> None:
        """Start recording ``stream`` into a CUDA graph (thread-local capture mode)."""
        graphs.begin(stream)

    def capture_failure(self, stream: Stream) -> str | None:
        """The driver's error name when the capture on ``stream`` was invalidated."""
        return graphs.failure(stream)

    def end_capture(self, stream: Stream) -> graphs.CudaGraph:
        """End the capture and instantiate it; ``replay(stream)`` and ``close()`` it."""
        return graphs.end(stream)

    def abort_capture(self, stream: Stream) -> None:
        """End a failed capture, keep nothing; the stream is usable afterwards."""
        graphs.abort(stream)

    def graph_bytes(self, nodes: int) -> int:
        """Device bytes to reserve for an instantiated graph of ``nodes`` steps: the driver
        keeps each node's launch parameters in device memory it allocates itself, so the
        core charges this estimate to the ledger first (docs/CAPTURE.md)."""
        return GRAPH_BASE_BYTES + GRAPH_NODE_BYTES * nodes

    # ------------------------------------------------------------ profiling (core/profiling.py)
    def timing_event(self) -> Event:
        """A new event that can time: ``record(stream)``, ``close()`` (``cuEventCreate``
        without CU_EVENT_DISABLE_TIMING)."""
        return self.cuda_device.new_event(timing=True)

    def elapsed_ms(self, start: Event, end: Event) -> float:
        """Device milliseconds from ``start`` to ``end``, both recorded; waits for ``end``
        (``cuEventElapsedTime`` answers CUDA_ERROR_NOT_READY until it completed)."""
        end.synchronize()
        return start.elapsed_ms(end)

    def reclaim(self) -> int:
        """Free the allocator's pooled blocks; bytes returned. Call on a refusal, then retry."""
        return self.allocator.trim()
