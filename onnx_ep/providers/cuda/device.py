"""A GPU, its streams and its events: :func:`get_device`, :class:`Device`, :class:`Stream`,
:class:`Event`.

Capture rules (docs/CAPTURE.md): streams are created NON_BLOCKING so the legacy default
stream never joins a capture; :meth:`Stream.synchronize` and :meth:`Device.synchronize`
refuse to run while a stream captures (a ``cuStreamSynchronize`` there would invalidate the
capture) and raise :exc:`onnx_ep.errors.CaptureError` instead.

Nothing here imports ``cuda`` at module import time (see :mod:`.driver`).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from onnx_ep.errors import CaptureError, CudaError
from onnx_ep.providers.cuda.driver import check, driver, require_available

# ---------------------------------------------------------------- device

_devices: dict[int, Device] = {}
_devices_lock = threading.Lock()
_current = threading.local()


def get_device(ordinal: int = 0) -> Device:
    """The :class:`Device` for ``ordinal`` (one per process), its primary context current.

    The context is made current on the calling thread the first time each
    thread asks, so worker threads may call this too.

    :raises CudaError: CUDA is unavailable or ``ordinal`` does not exist.
    """
    dev = _devices.get(ordinal)
    if dev is None:
        with _devices_lock:
            dev = _devices.get(ordinal)
            if dev is None:
                require_available()
                dev = _devices[ordinal] = Device(ordinal)
    if getattr(_current, "ordinal", None) != ordinal:
        dev.set_current()
    return dev


class Device:
    """One GPU and its retained primary context. Use :func:`get_device`, not this constructor.

    :ivar ordinal: device index. :ivar name: marketing name ("NVIDIA H200").
    :ivar compute_capability: ``(major, minor)``. :ivar arch: ``"sm_90"``.
    :ivar total_bytes: device memory size.
    """

    def __init__(self, ordinal: int) -> None:
        drv = driver()
        count = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
        if not 0 <= ordinal < count:
            raise CudaError(f"CUDA device {ordinal} does not exist ({count} device(s) found)",
                            error_name="CUDA_ERROR_INVALID_DEVICE")
        self.ordinal = ordinal
        self.handle = check(drv.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
        raw = check(drv.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        self.name = raw.split(b"\0", 1)[0].decode(errors="replace")
        attr = drv.CUdevice_attribute
        major = check(drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle), "cuDeviceGetAttribute")
        minor = check(drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle), "cuDeviceGetAttribute")
        self.compute_capability = (int(major), int(minor))
        self.arch = f"sm_{major}{minor}"
        self.total_bytes = int(check(drv.cuDeviceTotalMem(self.handle), "cuDeviceTotalMem"))
        self.multiprocessors = int(check(drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.handle), "cuDeviceGetAttribute"))
        # retained once for the process's lifetime: releasing it would destroy every
        # module, stream and allocation made in it
        self.context = check(drv.cuDevicePrimaryCtxRetain(self.handle),
                             f"cuDevicePrimaryCtxRetain({ordinal})")
        self._streams: weakref.WeakSet[Stream] = weakref.WeakSet()
        self._default_stream: Stream | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Device cuda:{self.ordinal} {self.name!r} {self.arch}>"

    def set_current(self) -> None:
        """Make this device's primary context current on the calling thread."""
        check(driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        _current.ordinal = self.ordinal

    def free_bytes(self) -> int:
        """Free device memory now, from ``cuMemGetInfo`` (all processes count)."""
        self.set_current()
        free, _total = check(driver().cuMemGetInfo(), "cuMemGetInfo")
        return int(free)

    def new_stream(self) -> Stream:
        """A new NON_BLOCKING stream (never synchronizes with the legacy default stream)."""
        self.set_current()
        drv = driver()
        handle = check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                       "cuStreamCreate")
        s = Stream(self, handle, owned=True)
        self._streams.add(s)
        return s

    @property
    def default_stream(self) -> Stream:
        """The provider-wide stream of this device (created on first use, never destroyed)."""
        s = self._default_stream
        if s is None:
            with self._lock:
                if self._default_stream is None:
                    self._default_stream = self.new_stream()
                s = self._default_stream
        return s

    def new_event(self, timing: bool = False) -> Event:
        """A new event; ``timing=True`` allows :meth:`Event.elapsed_ms`."""
        self.set_current()
        drv = driver()
        flags = 0 if timing else drv.CUevent_flags.CU_EVENT_DISABLE_TIMING.value
        return Event(check(drv.cuEventCreate(flags), "cuEventCreate"))

    def synchronize(self) -> None:
        """Wait for all work on the device.

        :raises CaptureError: a stream of this device is capturing (a context
            synchronize would invalidate the capture).
        """
        for s in list(self._streams):
            if s.is_capturing():
                raise CaptureError(f"Device.synchronize() called while {s!r} is capturing; "
                                   f"synchronizing would invalidate the capture")
        self.set_current()
        check(driver().cuCtxSynchronize(), "cuCtxSynchronize")


# ---------------------------------------------------------------- streams and events

class Stream:
    """A CUDA stream. ``handle`` is the ``CUstream``; ``ptr`` its address as an int."""

    __slots__ = ("device", "handle", "ptr", "_owned", "__weakref__")

    def __init__(self, device: Device, handle: Any, owned: bool = False) -> None:
        self.device = device
        self.handle = handle
        self.ptr = int(handle)
        self._owned = owned

    def __repr__(self) -> str:
        return f"<Stream 0x{self.ptr:x} on cuda:{self.device.ordinal}>"

    def is_capturing(self) -> bool:
        """True while the stream is in capture mode (active or invalidated)."""
        return is_capturing(self)

    def synchronize(self) -> None:
        """Block the host until the stream's work is done.

        :raises CaptureError: the stream is capturing; ``cuStreamSynchronize``
            there returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates
            the capture, so this refuses before calling it.
        """
        if is_capturing(self):
            raise CaptureError(f"{self!r}.synchronize() called while the stream is capturing; "
                               f"a capture-supported kernel must not synchronize")
        check(driver().cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def wait(self, event: Event) -> None:
        """Make later work on this stream wait for ``event`` (no host block)."""
        check(driver().cuStreamWaitEvent(self.handle, event.handle, 0), "cuStreamWaitEvent")

    def close(self) -> None:
        """Destroy the stream (only streams made by :meth:`Device.new_stream`)."""
        if self._owned:
            self._owned = False
            # forget it first: a destroyed handle passed to the driver crashes the process
            self.device._streams.discard(self)
            check(driver().cuStreamDestroy(self.handle), "cuStreamDestroy")


def is_capturing(stream: Stream) -> bool:
    """Whether ``stream`` is capturing (``cuStreamIsCapturing`` status is not NONE)."""
    drv = driver()
    status = check(drv.cuStreamIsCapturing(stream.handle), "cuStreamIsCapturing")
    return status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


class Event:
    """A CUDA event: ``record`` on a stream, ``synchronize``, ``query``, ``elapsed_ms``."""

    __slots__ = ("handle",)

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def record(self, stream: Stream) -> None:
        check(driver().cuEventRecord(self.handle, stream.handle), "cuEventRecord")

    def synchronize(self) -> None:
        check(driver().cuEventSynchronize(self.handle), "cuEventSynchronize")

    def query(self) -> bool:
        """True when the recorded work has completed."""
        drv = driver()
        (err,) = drv.cuEventQuery(self.handle)
        if err == drv.CUresult.CUDA_ERROR_NOT_READY:
            return False
        check((err,), "cuEventQuery")
        return True

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both created with ``timing=True``)."""
        return float(check(driver().cuEventElapsedTime(self.handle, end.handle),
                           "cuEventElapsedTime"))

    def close(self) -> None:
        if self.handle is not None:
            check(driver().cuEventDestroy(self.handle), "cuEventDestroy")
            self.handle = None
