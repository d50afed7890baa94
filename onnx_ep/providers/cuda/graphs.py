"""CUDA graphs for the core's capture segments: record a stream's work, instantiate, replay.

The core (``core/capture.py``) drives this through the runtime's optional capture methods
(:class:`~onnx_ep.providers.cuda.device_runtime.CudaRuntime`): :func:`begin` puts the
session's stream in thread-local capture mode, the segment's kernels launch as usual (the
driver records instead of running them), :func:`failure` tells after each step whether the
capture was invalidated, :func:`end` ends it and instantiates the graph, and :func:`abort`
ends a failed capture so the stream is usable again.

Thread-local mode: only calls from the capturing thread that are unsafe during capture
(``cuMemAlloc``, a synchronous copy, a context synchronize) invalidate it; other threads
keep running their own sessions. :func:`capturing_here` is the cheap thread-local flag the
allocator, the host copies and ``Stream.synchronize`` check to refuse such calls with a
:exc:`~onnx_ep.errors.CaptureError` before they reach the driver.

Nothing here imports ``cuda`` at module import time (see :mod:`.driver`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from onnx_ep.errors import CaptureError
from onnx_ep.providers.cuda.driver import check, cuda_error, driver

if TYPE_CHECKING:
    from onnx_ep.providers.cuda.device import Stream

_local = threading.local()


def capturing_here() -> bool:
    """Whether the calling thread is recording a graph (set by :func:`begin`)."""
    return getattr(_local, "depth", 0) > 0


def refuse_while_capturing(what: str) -> None:
    """Raise :exc:`CaptureError` when the calling thread is recording a graph.

    Called by everything a capture-supported kernel must not do (allocate, free, copy
    between host and device, synchronize), so a kernel that breaks its promise fails
    loudly instead of baking a host address or a stale buffer into the graph.
    """
    if getattr(_local, "depth", 0) > 0:
        raise CaptureError(f"{what} while a CUDA graph is being recorded on this thread; "
                           f"a capture-supported kernel must not {what.split(' ')[0]}")


class CudaGraph:
    """An instantiated graph: :meth:`replay` launches it on a stream; :meth:`close` frees it.

    :ivar nodes: the number of nodes the driver recorded (kernel launches, copies, memsets).
    """

    __slots__ = ("_exec", "_graph", "nodes")

    def __init__(self, graph: Any, exec_: Any, nodes: int) -> None:
        self._graph = graph
        self._exec = exec_
        self.nodes = nodes

    def replay(self, stream: Stream) -> None:
        """Launch the whole graph on ``stream`` (one driver call, asynchronous)."""
        err = driver().cuGraphLaunch(self._exec, stream.handle)[0]
        if err:
            raise cuda_error(err, "cuGraphLaunch")

    def close(self) -> None:
        """Destroy the executable graph and its template (idempotent)."""
        drv = driver()
        exec_, self._exec = self._exec, None
        graph, self._graph = self._graph, None
        if exec_ is not None:
            check(drv.cuGraphExecDestroy(exec_), "cuGraphExecDestroy")
        if graph is not None:
            check(drv.cuGraphDestroy(graph), "cuGraphDestroy")

    def __repr__(self) -> str:
        return f"<CudaGraph {self.nodes} nodes{' closed' if self._exec is None else ''}>"


def begin(stream: Stream) -> None:
    """Start recording ``stream`` in thread-local mode.

    :raises CudaError: the driver refused (the stream already captures, or it is the legacy
        default stream).
    """
    drv = driver()
    mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    check(drv.cuStreamBeginCapture(stream.handle, mode), "cuStreamBeginCapture")
    _local.depth = getattr(_local, "depth", 0) + 1


def failure(stream: Stream) -> str | None:
    """The driver's error name when the capture on ``stream`` was invalidated, else None."""
    drv = driver()
    status = check(drv.cuStreamIsCapturing(stream.handle), "cuStreamIsCapturing")
    if status == drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_INVALIDATED:
        return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    if status == drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
        return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"     # someone ended it behind our back
    return None


def end(stream: Stream) -> CudaGraph:
    """End the capture on ``stream`` and instantiate what it recorded.

    The stream leaves capture mode whatever happens.

    :raises CudaError: ending failed (an invalidated capture:
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) or instantiation failed.
    """
    drv = driver()
    try:
        err, graph = drv.cuStreamEndCapture(stream.handle)
    finally:
        _local.depth = max(0, getattr(_local, "depth", 0) - 1)
    if err:
        if graph is not None and int(graph) != 0:
            drv.cuGraphDestroy(graph)
        raise cuda_error(err, "cuStreamEndCapture")
    try:
        nodes = int(check(drv.cuGraphGetNodes(graph, 0), "cuGraphGetNodes")[1])
        exec_ = check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    except BaseException:
        drv.cuGraphDestroy(graph)
        raise
    return CudaGraph(graph, exec_, nodes)


def abort(stream: Stream) -> None:
    """End a capture that failed, dropping what it recorded; a no-op when ``stream`` is not
    capturing. Never raises: it runs while another error propagates."""
    drv = driver()
    try:
        status = drv.cuStreamIsCapturing(stream.handle)
        if status[0] or status[1] == drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
            return
        err, graph = drv.cuStreamEndCapture(stream.handle)
        if not err and graph is not None and int(graph) != 0:
            drv.cuGraphDestroy(graph)
    finally:
        _local.depth = 0
