"""CUDA driver runtime on ``cuda.bindings.driver``: devices, streams, events, modules, launch, copies.

Raw driver calls, not ``cuda.core``, on the launch path: DESIGN.md measured a
raw ``cuLaunchKernel`` at 4-6 µs from Python and ``cuda.core.launch`` at the
same cost, so the thinner layer wins on simplicity. Every driver result goes
through :func:`check`, which raises :exc:`onnx_ep.errors.CudaError` carrying
the driver's error name (``CUDA_ERROR_...``).

Capture rules (docs/CAPTURE.md): streams are created NON_BLOCKING so the
legacy default stream never joins a capture; :meth:`Stream.synchronize` and
:meth:`Device.synchronize` refuse to run while a stream captures (a
``cuStreamSynchronize`` there would invalidate the capture) and raise
:exc:`onnx_ep.errors.CaptureError` instead.

Nothing here imports ``cuda`` at module import time: ``import onnx_ep`` must
work without cuda-python; :func:`driver` imports it on first use.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import threading
import weakref
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from onnx_ep.core.kernel import Support
from onnx_ep.errors import CaptureError, CudaError

_init_lock = threading.Lock()
_initialized = False


def driver() -> ModuleType:
    """The ``cuda.bindings.driver`` module, imported on first use."""
    return importlib.import_module("cuda.bindings.driver")


# ---------------------------------------------------------------- errors

def error_name(result: Any) -> str:
    """The driver's name for a ``CUresult`` (``"CUDA_ERROR_OUT_OF_MEMORY"``)."""
    drv = driver()
    try:
        err, name = drv.cuGetErrorName(result)
    except RuntimeError:  # driver library missing: cuGetErrorName itself cannot run
        err, name = None, None
    if err or name is None:
        # the bindings' enum spells the same names as cuGetErrorName
        return getattr(result, "name", None) or f"CUresult({int(result)})"
    return name.decode() if isinstance(name, bytes) else str(name)


def _error_text(result: Any) -> str:
    drv = driver()
    try:
        err, text = drv.cuGetErrorString(result)
    except RuntimeError:
        return ""
    if err != drv.CUresult.CUDA_SUCCESS or text is None:
        return ""
    return text.decode() if isinstance(text, bytes) else str(text)


def check(result: tuple[Any, ...], what: str = "") -> Any:
    """Unwrap a cuda-bindings result tuple, raising on failure.

    :param result: ``(CUresult, *values)`` as every driver binding returns.
    :param what: the call, for the message (``"cuModuleGetFunction('fill_f32')"``).
    :returns: ``None`` for no values, the value for one, else the tuple of values.
    :raises CudaError: with ``error_name`` set to the driver's error name.
    """
    err = result[0]
    if err:  # CUresult is an int enum; CUDA_SUCCESS == 0
        raise cuda_error(err, what)
    n = len(result)
    if n == 1:
        return None
    if n == 2:
        return result[1]
    return result[1:]


def cuda_error(result: Any, what: str = "", node: str | None = None) -> CudaError:
    """Build (not raise) the :exc:`CudaError` for a failed ``CUresult``."""
    name = error_name(result)
    text = _error_text(result)
    msg = f"{what or 'CUDA driver call'} failed: {name}"
    if text:
        msg += f" ({text})"
    return CudaError(msg, error_name=name, node=node)


# ---------------------------------------------------------------- availability

def _init_driver() -> None:
    """``cuInit(0)`` once per process."""
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            check(driver().cuInit(0), "cuInit")
            _initialized = True


@functools.cache
def is_available() -> Support:
    """Whether CUDA can run here, with the reason when it cannot (cached).

    Says which of these failed: cuda-bindings not importable, the driver
    library not found or ``cuInit`` failing, or no device.
    """
    try:
        drv = driver()
    except ImportError as e:
        return Support.no(f"cuda-bindings is not installed ({e}); "
                          f"install onnx-ep[cuda] to use the cuda provider")
    try:
        _init_driver()
    except CudaError as e:
        return Support.no(f"cuInit failed: {e.error_name}; is the NVIDIA driver working?")
    except RuntimeError as e:  # cuda.pathfinder's DynamicLibNotFoundError: no libcuda.so
        return Support.no(f"NVIDIA driver library not found ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})")
    try:
        count = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
    except CudaError as e:
        return Support.no(f"cuDeviceGetCount failed: {e.error_name}")
    if count < 1:
        return Support.no("no CUDA device found (cuDeviceGetCount() == 0)")
    return Support.YES


def _require_available() -> None:
    support = is_available()
    if not support:
        raise CudaError(f"CUDA is unavailable: {support.reason}",
                        error_name="CUDA_ERROR_NO_DEVICE")


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
                _require_available()
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


# ---------------------------------------------------------------- modules and launch

class Function:
    """A kernel entry point of a loaded :class:`Module`. ``handle`` is the ``CUfunction``."""

    __slots__ = ("handle", "name", "module")

    def __init__(self, handle: Any, name: str, module: Module) -> None:
        self.handle = handle
        self.name = name
        self.module = module

    def __repr__(self) -> str:
        return f"<Function {self.name}>"


class Module:
    """A loaded cubin. :meth:`function` looks symbols up once and memoizes them."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._functions: dict[str, Function] = {}

    def function(self, name: str) -> Function:
        """The ``extern "C"`` kernel ``name``.

        :raises CudaError: CUDA_ERROR_NOT_FOUND when the cubin has no such symbol.
        """
        fn = self._functions.get(name)
        if fn is None:
            handle = check(driver().cuModuleGetFunction(self.handle, name.encode()),
                           f"cuModuleGetFunction({name!r})")
            fn = self._functions[name] = Function(handle, name, self)
        return fn


def load_module(cubin: bytes) -> Module:
    """Load a cubin into the current context (:func:`get_device` made it current)."""
    return Module(check(driver().cuModuleLoadData(cubin), "cuModuleLoadData"))


def pack_args(args: Sequence[tuple[Any, Any]]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``[(value, ctype), ...]`` -> ``((values...), (ctypes...))``, the form cuLaunchKernel takes.

    Build it once and pass it to :func:`launch_packed` when the same arguments
    are launched repeatedly (DESIGN.md: prebuilt arguments are ~20 % cheaper).
    """
    return tuple(a[0] for a in args), tuple(a[1] for a in args)


def launch(fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int],
           args: Sequence[tuple[Any, Any]], stream: Stream, shared_bytes: int = 0) -> None:
    """Launch ``fn`` on ``stream``; asynchronous, legal during capture.

    :param args: ``(value, ctypes type)`` pairs; pointers as ``(int, ctypes.c_void_p)``,
        int64 element counts as ``(n, ctypes.c_int64)``.
    :raises CudaError: the launch was rejected (bad geometry, too much shared memory).
    """
    params = (tuple(a[0] for a in args), tuple(a[1] for a in args)) if args else 0
    err = _cuLaunchKernel()(fn.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                            shared_bytes, stream.handle, params, 0)[0]
    if err:
        raise cuda_error(err, f"cuLaunchKernel({fn.name}, grid={grid}, block={block})")


def launch_packed(fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int],
                  packed: Any, stream: Stream, shared_bytes: int = 0) -> None:
    """:func:`launch` with arguments already built by :func:`pack_args`."""
    err = _cuLaunchKernel()(fn.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                            shared_bytes, stream.handle, packed or 0, 0)[0]
    if err:
        raise cuda_error(err, f"cuLaunchKernel({fn.name}, grid={grid}, block={block})")


@functools.cache
def _cuLaunchKernel() -> Any:  # noqa: N802 - the driver's name
    return driver().cuLaunchKernel


def grid_1d(n: int, block: int = 256, max_blocks: int | None = None) -> tuple[int, int, int]:
    """Blocks for a grid-stride loop over ``n`` elements (at least 1, at most ``max_blocks``).

    ``max_blocks`` defaults to 65535 * 32, plenty for grid-stride kernels and
    far under the 2^31 - 1 limit on gridDim.x.
    """
    blocks = max(1, -(-int(n) // block))
    return (min(blocks, max_blocks or 65535 * 32), 1, 1)


# ---------------------------------------------------------------- copies

def _host_ptr(arr: np.ndarray) -> int:
    if not arr.flags.c_contiguous:
        raise ValueError("host array must be C-contiguous for a device copy")
    return int(arr.ctypes.data)


def copy_htod(dst_ptr: int, src: np.ndarray, stream: Stream) -> None:
    """Copy ``src`` (C-contiguous) to device address ``dst_ptr``, async on ``stream``.

    From pageable memory the driver stages the bytes before returning, so
    ``src`` may be reused once this returns.
    """
    if src.nbytes:
        check(driver().cuMemcpyHtoDAsync(dst_ptr, _host_ptr(src), src.nbytes, stream.handle),
              f"cuMemcpyHtoDAsync({src.nbytes} bytes)")


def copy_dtoh(dst: np.ndarray, src_ptr: int, stream: Stream) -> None:
    """Copy ``dst.nbytes`` from device address ``src_ptr`` into ``dst``, async on ``stream``.

    ``dst`` is complete only after ``stream.synchronize()``.
    """
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


def driver_version() -> int:
    """``cuDriverGetVersion()`` (13000 for CUDA 13.0)."""
    _init_driver()
    return int(check(driver().cuDriverGetVersion(), "cuDriverGetVersion"))


#: ctypes types for kernel arguments, so kernel modules need not import ctypes themselves
PTR = ctypes.c_void_p
I64 = ctypes.c_int64
I32 = ctypes.c_int32
F32 = ctypes.c_float
F64 = ctypes.c_double
