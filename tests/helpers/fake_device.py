"""A fake device provider: tensors are views of host buffers, but the core cannot tell.

It exercises everything a real device provider relies on (copies at device
boundaries, weights uploaded once, outputs pre-bound from the plan's arena, device
workspaces, the device's own memory authority, graph capture) on any machine.

Capture behaves like CUDA's: while a :class:`FakeStream` records, kernels enqueue their
work instead of doing it (nothing runs until the graph is replayed), and what CUDA refuses
during a capture (synchronize, allocate, copy to or from the host) fails with error 900
and invalidates the capture.

``FakeRuntime(lag=True)`` makes the device lag like a real one: a stream's work (kernels,
uploads, copies, replays) runs only when something waits for it (``synchronize``, a
download on that stream, a ``fence(stream).wait()``), so a host read that forgot to wait
reads stale bytes and a test sees it.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

import onnx_ep
from onnx_ep import (
    CaptureSupport,
    OpKey,
    Parity,
    Provider,
    Support,
    TensorSpec,
    WorkspaceRequirement,
)

DEVICE = "fake"
_ids = itertools.count(1)


class FakeTensor:
    """A 'device' tensor: only the fake runtime and kernels look inside."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    @property
    def ptr(self) -> int:
        """The 'device address': where the bytes are (a view made anew keeps it)."""
        return int(self.array.__array_interface__["data"][0])

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    def view(self, dtype: Any, shape: tuple[int, ...], offset_bytes: int = 0) -> FakeTensor:
        """Part of this tensor's bytes as another tensor (what device control flow slices)."""
        raw = self.array.reshape(-1).view(np.uint8)
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        assert offset_bytes + n <= raw.nbytes, "view past the tensor"
        return FakeTensor(raw[offset_bytes:offset_bytes + n].view(dtype).reshape(shape))


class FakeAllocation:
    def __init__(self, nbytes: int, runtime: FakeRuntime) -> None:
        self.ptr = next(_ids)
        self.nbytes = nbytes
        self.buf = np.empty(nbytes, np.uint8)
        self.runtime = runtime
        self.freed = False

    def free(self) -> None:
        assert not self.freed, "double free"
        self.freed = True
        self.runtime.live -= 1


class FakeCaptureError(RuntimeError):
    """What the fake 'driver' raises for a call CUDA refuses during a capture."""

    def __init__(self, what: str, error_name: str) -> None:
        super().__init__(f"{what}: {error_name}")
        self.error_name = error_name


UNSUPPORTED = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
INVALIDATED = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"


class FakeStream:
    """A stream; ``recording`` is the list of enqueued work while it captures, else None."""

    def __init__(self, lag: bool = False) -> None:
        self.id = next(_ids)
        self.recording: list[Any] | None = None
        self.invalid: str | None = None
        self.lag = lag
        self.pending: list[Any] = []     # lagging: work queued and not run yet
        self.queued = 0                  # lagging: work ever queued, and run
        self.ran = 0

    def enqueue(self, work: Any) -> None:
        """Run ``work`` now (later when lagging), or record it when capturing (replayed by
        a FakeGraph)."""
        if self.recording is not None:
            self.recording.append(work)
        elif self.lag:
            self.pending.append(work)
            self.queued += 1
        else:
            work()

    def run_until(self, count: int | None = None) -> None:
        """Run the queued work, all of it or up to the ``count``-th ever queued."""
        target = self.queued if count is None else count
        while self.ran < target:
            work = self.pending.pop(0)
            self.ran += 1
            work()


class StreamFence:
    """``FakeRuntime.fence``: the work queued on a stream so far."""

    def __init__(self, stream: FakeStream, overrun: bool) -> None:
        self.stream, self.count, self.overrun = stream, stream.queued, overrun

    def wait(self) -> None:
        # overrun: the device got further than the fence (work queued since ran as well)
        self.stream.run_until(None if self.overrun else self.count)

    def done(self) -> bool:
        return self.stream.ran >= self.count

    def release(self) -> None:
        pass


class FakeGraph:
    def __init__(self, work: list[Any]) -> None:
        self.work = work
        self.nodes = len(work)
        self.replays = 0
        self.closed = False

    def replay(self, stream: FakeStream) -> None:
        assert not self.closed, "replay of a closed graph"
        self.replays += 1
        work = self.work
        stream.enqueue(lambda: [w() for w in work])

    def close(self) -> None:
        assert not self.closed, "graph closed twice"
        self.closed = True


class FakeEvent:
    """A timing event: stamped (``perf_counter_ns``) when the stream reaches it, as a CUDA
    event is; the fake stream runs its work at once, so the stamp is the host's clock."""

    def __init__(self, runtime: FakeRuntime) -> None:
        self.runtime = runtime
        self.ns: int | None = None
        self.closed = False
        runtime.events_live += 1

    def record(self, stream: FakeStream) -> None:
        assert not self.closed, "record of a closed event"
        assert stream.recording is None, "an event recorded while the stream captures"

        def stamp() -> None:
            self.ns = time.perf_counter_ns()

        stream.enqueue(stamp)

    def close(self) -> None:
        assert not self.closed, "event closed twice"
        self.closed = True
        self.runtime.events_live -= 1


class FakeRuntime:
    device = "fake:0"
    granularity = 256

    def __init__(self, budget: int = 1 << 30, lag: bool = False) -> None:
        self._budget = budget
        self.lag = lag
        #: lagging: a fence's wait also runs the work queued after the fence
        self.overrun = False
        self.allocations = 0
        self.live = 0
        self.uploads = 0
        self.downloads = 0
        self.copies = 0
        #: the number of copies of each copy_many call
        self.batches: list[int] = []
        self.regions: list[FakeRegion] = []
        self.graphs: list[FakeGraph] = []
        self.capturing: FakeStream | None = None
        #: timing events made and not closed yet (the profiler closes every one)
        self.events_live = 0

    def budget(self) -> int:
        return self._budget

    def new_stream(self) -> Any:
        return FakeStream(self.lag)

    def fence(self, stream: FakeStream) -> StreamFence:
        return StreamFence(stream, self.overrun)

    def _refuse(self, what: str) -> None:
        """CUDA's answer to an unsafe call while a stream captures: 900, capture invalid."""
        s = self.capturing
        if s is not None:
            s.invalid = INVALIDATED
            raise FakeCaptureError(what, UNSUPPORTED)

    # -- capture (the optional DeviceRuntime methods) --
    def begin_capture(self, stream: FakeStream) -> None:
        assert stream.recording is None and self.capturing is None, "nested capture"
        stream.recording, stream.invalid = [], None
        self.capturing = stream

    def capture_failure(self, stream: FakeStream) -> str | None:
        return stream.invalid

    def end_capture(self, stream: FakeStream) -> FakeGraph:
        work, invalid = stream.recording, stream.invalid
        stream.recording, stream.invalid, self.capturing = None, None, None
        assert work is not None, "end_capture without begin_capture"
        if invalid:
            raise FakeCaptureError("cuStreamEndCapture", invalid)
        g = FakeGraph(work)
        self.graphs.append(g)
        return g

    def abort_capture(self, stream: FakeStream) -> None:
        stream.recording, stream.invalid, self.capturing = None, None, None

    def graph_bytes(self, nodes: int) -> int:
        return 1024 + 64 * nodes

    # -- profiling (the optional DeviceRuntime methods) --
    def timing_event(self) -> FakeEvent:
        return FakeEvent(self)

    def elapsed_ms(self, start: FakeEvent, end: FakeEvent) -> float:
        assert start.ns is not None and end.ns is not None, "elapsed of an unrecorded event"
        return (end.ns - start.ns) / 1e6

    def malloc(self, nbytes: int) -> np.ndarray:
        """A driver allocation behind the authority's back (what a lying kernel does)."""
        self._refuse("cuMemAlloc")
        return np.empty(nbytes, np.uint8)

    def allocate(self, reservation: Any) -> FakeAllocation:
        self._refuse("cuMemAlloc")
        assert not reservation.released
        self.allocations += 1
        self.live += 1
        return FakeAllocation(reservation.nbytes, self)

    def tensor(self, allocation: FakeAllocation, offset: int, spec: TensorSpec) -> FakeTensor:
        n = spec.nbytes
        assert offset + n <= allocation.nbytes, "view past the allocation"
        return FakeTensor(allocation.buf[offset:offset + n].view(spec.dtype).reshape(spec.shape))

    def upload(self, array: np.ndarray, out: FakeTensor, stream: Any) -> FakeTensor:
        assert isinstance(out, FakeTensor) and out.shape == array.shape
        self._refuse("cuMemcpyHtoDAsync from pageable memory")
        staged = np.array(array, copy=True)      # the driver stages pageable memory at once
        stream.enqueue(lambda: np.copyto(out.array, staged))
        self.uploads += 1
        return out

    def download(self, tensor: FakeTensor, stream: Any) -> np.ndarray:
        assert isinstance(tensor, FakeTensor)
        self._refuse("cuMemcpyDtoH")
        stream.run_until()                       # after the work queued on this stream
        self.downloads += 1
        return tensor.array.copy()

    def synchronize(self, stream: Any) -> None:
        self._refuse("cuStreamSynchronize")
        stream.run_until()

    def copy(self, src: FakeTensor, dst: FakeTensor, stream: Any) -> FakeTensor:
        assert isinstance(src, FakeTensor) and isinstance(dst, FakeTensor)
        assert src.shape == dst.shape and src.dtype == dst.dtype
        stream.enqueue(lambda: np.copyto(dst.array, src.array))
        self.copies += 1
        return dst

    def copy_many(self, pairs: Any, stream: Any) -> None:
        """One "launch" for many device-to-device copies (the optional runtime method)."""
        pairs = list(pairs)
        for src, dst in pairs:
            assert isinstance(src, FakeTensor) and isinstance(dst, FakeTensor)
            assert src.shape == dst.shape and src.dtype == dst.dtype
        stream.enqueue(lambda: [np.copyto(d.array, s.array) for s, d in pairs])
        self.batches.append(len(pairs))

    #: mapping granule of the fake's stable regions (weight streaming)
    page_bytes = 4096

    def stable_region(self, nbytes: int, holder: str) -> FakeRegion:
        region = FakeRegion(nbytes, self.page_bytes)
        self.regions.append(region)
        return region


class FakePage:
    """A fake physical page: its bytes survive being unmapped."""

    def __init__(self, nbytes: int) -> None:
        self.buf = np.zeros(nbytes, np.uint8)
        self.mapped_at: int | None = None


class FakeFence:
    def __init__(self, region: FakeRegion) -> None:
        self.region = region
        self.waited = False

    def wait(self) -> None:
        self.waited = True
        self.region.log.append(("wait", id(self)))

    def done(self) -> bool:
        return False          # pretend the device lags: only a wait() completes a fence

    def release(self) -> None:
        pass


class FakeRegion:
    """A stable region that behaves like VMM: bytes live in pages, and the address range
    reads as NaN (0xFF bytes) where nothing is mapped, so reading a weight that was not
    paged in corrupts the result instead of passing silently. ``log`` records every
    map / unmap / write / fence / wait in order."""

    def __init__(self, nbytes: int, page_bytes: int) -> None:
        self.page_bytes = page_bytes
        self.nbytes = -(-nbytes // page_bytes) * page_bytes
        self.ptr = next(_ids)
        self.va = np.full(self.nbytes, 0xFF, np.uint8)
        self.mapped: dict[int, FakePage] = {}
        self.pages: list[FakePage] = []
        self.log: list[tuple[str, int]] = []
        self.closed = False

    def new_page(self, reservation: Any) -> FakePage:
        assert not reservation.released
        assert (len(self.pages) + 1) * self.page_bytes <= reservation.nbytes, \
            "more pages than the window's reservation holds"
        page = FakePage(self.page_bytes)
        self.pages.append(page)
        return page

    def map(self, offset: int, page: FakePage) -> None:
        P = self.page_bytes
        assert not self.closed and offset % P == 0 and 0 <= offset < self.nbytes
        assert offset not in self.mapped and page.mapped_at is None, "double map"
        self.va[offset:offset + P] = page.buf
        self.mapped[offset] = page
        page.mapped_at = offset
        self.log.append(("map", offset))

    def unmap(self, offset: int) -> FakePage:
        P = self.page_bytes
        page = self.mapped.pop(offset)
        page.buf[:] = self.va[offset:offset + P]
        self.va[offset:offset + P] = 0xFF
        page.mapped_at = None
        self.log.append(("unmap", offset))
        return page

    def write(self, offset: int, data: np.ndarray, stream: Any) -> None:
        P = self.page_bytes
        assert data.dtype == np.uint8 and data.ndim == 1
        for o in range(offset // P * P, offset + data.nbytes, P):
            assert o in self.mapped, f"write to unmapped page at {o}"
        self.va[offset:offset + data.nbytes] = data
        self.log.append(("write", offset))

    def tensor(self, offset: int, spec: TensorSpec) -> FakeTensor:
        n = spec.nbytes
        assert offset + n <= self.nbytes, "view past the region"
        return FakeTensor(self.va[offset:offset + n].view(spec.dtype).reshape(spec.shape))

    def fence(self, stream: Any) -> FakeFence:
        f = FakeFence(self)
        self.log.append(("fence", id(f)))
        return f

    def close(self) -> None:
        for o in list(self.mapped):
            self.unmap(o)
        self.closed = True


class FakeKernel:
    """Writes ``fn(*inputs)`` into the pre-bound output; refuses anything but FakeTensors."""

    parity = Parity.EXACT

    def __init__(self, op: str, fn: Any, since: int = 1, scratch: int = 0) -> None:
        self.key = OpKey("", op, since)
        self.fn = fn
        self.scratch = scratch
        self.calls = 0

    def supports(self, meta: Any) -> Support:
        if any(s is not None and s.dtype != np.float32 for s in meta.inputs):
            return Support.no("fake device kernels take float32 only")
        if self.key.op_type == "ArgMax" and (meta.attrs.get("keepdims", 1) != 0
                                            or meta.attrs.get("axis", 0) != -1):
            return Support.no("the fake ArgMax is the last axis's, keepdims 0")
        return Support.YES

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.SUPPORTED

    def workspace_requirement(self, meta: Any) -> WorkspaceRequirement:
        return WorkspaceRequirement(self.scratch) if self.scratch else WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        assert all(isinstance(x, FakeTensor) for x in inputs if x is not None), \
            "a host value reached a device kernel: a copy step is missing"
        assert isinstance(outputs[0], FakeTensor), "output was not pre-bound from the arena"
        if self.scratch:
            assert workspace is not None and isinstance(workspace.buffer, FakeTensor)
            assert workspace.buffer.array.nbytes == self.scratch
        self.calls += 1
        out, fn, arrays = outputs[0].array, self.fn, [x.array for x in inputs]

        def work() -> None:
            out[...] = fn(*arrays)

        ctx.stream.enqueue(work)       # recorded, not run, while the stream captures


class FakeReshape(FakeKernel):
    """Reshape without a copy: output 0 is a view of input 0 (declared through ``aliases``)."""

    aliases = {0: 0}

    def __init__(self) -> None:
        super().__init__("Reshape", None, since=5)

    def supports(self, meta: Any) -> Support:
        return Support.YES

    def execute_with_workspace(self, ctx: Any, inputs: Any, outputs: Any, workspace: Any) -> None:
        spec = outputs[0]
        assert isinstance(inputs[0], FakeTensor) and isinstance(spec, TensorSpec), \
            "an aliasing output arrives as its planned TensorSpec, not a buffer"
        self.calls += 1
        outputs[0] = FakeTensor(inputs[0].array.reshape(spec.shape))


class FakeDevicePlugin:
    """Registers provider ``fake`` (priority 50) with kernels for ``ops``."""

    def __init__(self, ops: tuple[str, ...] = ("Add", "Relu", "MatMul"), scratch: int = 0,
                 budget: int = 1 << 30, control_flow: bool = False, lag: bool = False) -> None:
        self.runtime = FakeRuntime(budget, lag)
        #: the core's device If / Loop / Scan, registered for ``fake`` when asked
        self.control_flow = control_flow
        table = {"Add": np.add, "Relu": lambda x: np.maximum(x, 0), "MatMul": np.matmul,
                 "Mul": np.multiply, "ArgMax": lambda x: np.argmax(x, axis=-1)}
        self.kernels: dict[str, FakeKernel] = {
            op: FakeReshape() if op == "Reshape" else FakeKernel(op, table[op], scratch=scratch)
            for op in ops}

    @onnx_ep.hookimpl
    def onnx_ep_register_providers(self, register: Any) -> None:
        register(Provider(name="fake", device=DEVICE, priority=50,
                          runtime=lambda: self.runtime, description="test device"))

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(self, register: Any) -> None:
        for k in self.kernels.values():
            register(k, provider="fake")
        if self.control_flow:
            from onnx_ep.core.control_flow import device_control_flow
            for k in device_control_flow(lambda: self.runtime):
                register(k, provider="fake")
