"""Loaded kernels and their launches: :class:`Module`, :class:`Function`, :func:`launch`,
prebuilt launches (:func:`prepare`, :class:`Launch`, :func:`launch_cached`), occupancy and
:func:`grid_1d`.

Two ways to launch. :func:`launch` hands ``(values, ctypes)`` tuples to cuda-bindings'
``cuLaunchKernel``, which packs them in C on every call: right for one-off launches. Hot
kernels instead build a :class:`Launch` once per distinct (pointers, shapes) with
:func:`prepare`: the ``void*[]`` parameter array is packed once (:class:`Params`) and every
later launch is one driver call, made along one of two paths:

- ``ctypes``: ``cuLaunchKernel`` of ``libcuda.so.1`` (the driver cuda-bindings
  loaded) called through ctypes with every argument a prebuilt ctypes value of the C
  parameter's type (so no ``argtypes`` conversion runs per call).
  It skips what the bindings' wrapper does per call (an isinstance ladder per
  handle, a ``_HelperKernelParams`` object, a ``CUresult`` enum for the result).
- ``bindings``: cuda-bindings' ``cuLaunchKernel`` with the ``CUfunction`` and
  ``CUstream`` objects (its cheapest accepted forms: the isinstance fast path)
  and ``kernelParams`` as the int address of the prebuilt array (read as a
  ``void**``, no packing).

Both end in the same driver entry point and are capture-safe. The default is
``bindings``: a prebuilt array launched through cuda-bindings costs less than through
ctypes, whose per-call argument handling costs more than the bindings' Cython wrapper
(docs/PERFORMANCE.md has the numbers). The environment variable
``ONNX_EP_LAUNCH=bindings|ctypes`` overrides it (read at import).
``benchmarks/cuda_kernels.py --sections 5`` times the tuple path and both
prebuilt paths side by side on the GPU and prints their ratios, which is the
measurement behind the default. The path is chosen from a static order,
not timed at import: a timing needs a kernel or an invalid launch, and either
may disturb a capture another library runs in the process.

Nothing here imports ``cuda`` at module import time (see :mod:`.driver`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from onnx_ep.errors import CudaError
from onnx_ep.providers.cuda.driver import as_result, check, cuda_error, driver

if TYPE_CHECKING:
    from onnx_ep.providers.cuda.device import Stream


# ---------------------------------------------------------------- modules and functions

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
    """Load a cubin into the current context (:func:`.device.get_device` made it current)."""
    return Module(check(driver().cuModuleLoadData(cubin), "cuModuleLoadData"))


def pack_args(args: Sequence[tuple[Any, Any]]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``[(value, ctype), ...]`` -> ``((values...), (ctypes...))``, the form cuLaunchKernel takes.

    Build it once and pass it to :func:`launch_packed` when the same arguments
    are launched repeatedly: the tuples are then not rebuilt per launch.
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


# ---------------------------------------------------------------- prebuilt launches

#: the launch paths ``ONNX_EP_LAUNCH`` may name, in the order the default prefers them
LAUNCH_PATHS = ("bindings", "ctypes")
_LAUNCH_ENV = os.environ.get("ONNX_EP_LAUNCH", "").strip().lower()


class Params:
    """A packed ``void*[]`` of kernel parameters: what cuLaunchKernel's ``kernelParams`` reads.

    Each ``(value, ctype)`` becomes a ctypes value owned by this object, and slot ``i`` of
    the array points at value ``i``; a struct passed by value (ctype ``None``, as
    :func:`launch` takes it) is copied, so the caller may change or drop its struct.
    ``address`` (0 for no parameters) stays valid while this object lives.

    :param args: ``(value, ctypes type)`` pairs, pointers as ``(int, ctypes.c_void_p)``.
    :raises TypeError: a ``None`` ctype whose value is not a ``ctypes.Structure``.
    """

    __slots__ = ("address", "_array", "_values")

    def __init__(self, args: Sequence[tuple[Any, Any]]) -> None:
        values: list[Any] = []
        for value, ctype in args:
            if ctype is None:
                if not isinstance(value, ctypes.Structure):
                    raise TypeError(f"a by-value kernel argument (ctype None) must be a "
                                    f"ctypes.Structure, got {type(value).__name__}")
                values.append(type(value).from_buffer_copy(value))
                continue
            if isinstance(value, ctypes._SimpleCData):
                value = value.value
            if ctype is ctypes.c_void_p:
                value = int(value) if value is not None else None
            values.append(ctype(value))
        self._values = tuple(values)
        self._array = (ctypes.c_void_p * max(1, len(values)))(
            *[ctypes.addressof(v) for v in values])
        self.address = ctypes.addressof(self._array) if values else 0

    def __len__(self) -> int:
        return len(self._values)


class Launch:
    """One kernel launch with every argument prebuilt; calling it enqueues the kernel.

    Made by :func:`prepare`. It holds its :class:`Params`, function and stream alive, so
    the memory the driver reads stays valid. Asynchronous and capture-safe, like
    :func:`launch`; the call costs one driver call (see the module docstring).

    :raises CudaError: (from the call) the driver rejected the launch.
    """

    __slots__ = ("fn", "grid", "block", "shared_bytes", "stream", "params", "path",
                 "_call", "_args")

    def __init__(self, fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int],
                 params: Params, stream: Stream, shared_bytes: int, path: str,
                 call: Any, args: tuple[Any, ...]) -> None:
        self.fn, self.grid, self.block, self.params = fn, tuple(grid), tuple(block), params
        self.stream, self.shared_bytes, self.path = stream, shared_bytes, path
        # bound once: a call then costs no argument-tuple unpacking
        self._call, self._args = functools.partial(call, *args), args

    def __repr__(self) -> str:
        return (f"<Launch {self.fn.name} grid={self.grid} block={self.block} "
                f"{len(self.params)} params via {self.path}>")

    def __call__(self) -> None:
        raise NotImplementedError

    def error(self, err: Any) -> CudaError:
        """The :exc:`CudaError` for a failed launch (``err`` a CUresult or its int code)."""
        return cuda_error(as_result(err), f"cuLaunchKernel({self.fn.name}, grid={self.grid}, "
                                          f"block={self.block}, via {self.path})")


class _CtypesLaunch(Launch):
    __slots__ = ()

    def __call__(self) -> None:
        err = self._call()
        if err:
            raise self.error(err)


class _BindingsLaunch(Launch):
    __slots__ = ()

    def __call__(self) -> None:
        err = self._call()[0]
        if err:
            raise self.error(err)


@functools.cache
def _ctypes_cuLaunchKernel() -> Any:  # noqa: N802 - the driver's name
    """``cuLaunchKernel`` of the driver library through ctypes, or None when it cannot load.

    The library cuda-bindings loaded is found by its soname (``RTLD_NOLOAD`` first, so an
    already loaded driver is the one used). The result type is set once; ``argtypes`` is
    left unset on purpose: :func:`prepare` builds every argument as a ctypes value of the
    C parameter's type (``c_void_p``, ``c_uint``), which ctypes passes as is, whereas
    ``argtypes`` would call ``from_param`` on all 11 arguments per launch (measured 24 %
    more per call on the CPU, against a no-op C function of the same signature).
    """
    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")
    lib = None
    for name in names:
        for mode in ((getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL), ctypes.DEFAULT_MODE):
            try:
                lib = ctypes.CDLL(name, mode=mode)
                break
            except OSError:
                continue
        if lib is not None:
            break
    if lib is None:
        return None
    try:
        fn = lib.cuLaunchKernel
    except AttributeError:
        return None
    fn.restype = ctypes.c_int       # CUresult
    return fn


@functools.cache
def launch_path() -> str:
    """The prebuilt-launch path in use: ``"ctypes"`` or ``"bindings"`` (decided once).

    ``ONNX_EP_LAUNCH`` names one (``ctypes`` falls back to ``bindings`` with a warning
    when the driver library does not load through ctypes); otherwise the first of
    :data:`LAUNCH_PATHS`.
    """
    import warnings

    from onnx_ep.errors import OnnxEpWarning

    want = _LAUNCH_ENV
    if want and want not in LAUNCH_PATHS:
        warnings.warn(f"ONNX_EP_LAUNCH={want!r} is not one of {', '.join(LAUNCH_PATHS)}; "
                      f"using the default", OnnxEpWarning, stacklevel=2)
        want = ""
    for path in ((want,) if want else LAUNCH_PATHS):
        if path == "bindings" or _ctypes_cuLaunchKernel() is not None:
            return path
    warnings.warn("ONNX_EP_LAUNCH=ctypes but the CUDA driver library could not be loaded "
                  "through ctypes; launching through cuda-bindings", OnnxEpWarning,
                  stacklevel=2)
    return "bindings"


def prepare(fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int],
            args: Sequence[tuple[Any, Any]] | Params, stream: Stream, shared_bytes: int = 0,
            *, path: str | None = None) -> Launch:
    """Build a :class:`Launch`: pack ``args`` once; each call of the result launches.

    :param args: as :func:`launch` takes them, or a :class:`Params` already packed.
    :param path: ``"ctypes"`` or ``"bindings"`` (default :func:`launch_path`); ``"ctypes"``
        falls back to ``"bindings"`` when the driver library does not load through ctypes.
    """
    params = args if isinstance(args, Params) else Params(args)
    path = path or launch_path()
    if path not in LAUNCH_PATHS:
        raise ValueError(f"launch path {path!r} is not one of {', '.join(LAUNCH_PATHS)}")
    gx, gy, gz = (int(v) for v in grid)
    bx, by, bz = (int(v) for v in block)
    cfn = _ctypes_cuLaunchKernel() if path == "ctypes" else None
    if cfn is not None:
        u = ctypes.c_uint
        cargs = (ctypes.c_void_p(int(fn.handle)), u(gx), u(gy), u(gz), u(bx), u(by), u(bz),
                 u(int(shared_bytes)), ctypes.c_void_p(int(stream.handle) or None),
                 ctypes.c_void_p(params.address or None), ctypes.c_void_p(None))
        return _CtypesLaunch(fn, grid, block, params, stream, shared_bytes, "ctypes", cfn,
                             cargs)
    bargs = (fn.handle, gx, gy, gz, bx, by, bz, int(shared_bytes), stream.handle,
             params.address, 0)
    return _BindingsLaunch(fn, grid, block, params, stream, shared_bytes, "bindings",
                           _cuLaunchKernel(), bargs)


#: prebuilt launches a kernel keeps per bound node (one per plan it runs in; cleared when full)
LAUNCHES_PER_NODE = 32


def no_launch() -> None:
    """The prebuilt launch of a kernel with nothing to do (an empty output)."""


#: most prebuilt launches :func:`launch_cached` keeps (cleared when full)
CACHED_LAUNCHES = 2048
_cached: dict[tuple[Any, ...], Launch] = {}
_seen: dict[tuple[Any, ...], None] = {}


def remember(cache: dict[Any, Any], key: Any, value: Any, cap: int) -> Any:
    """``cache[key] = value``, first emptying ``cache`` when it holds ``cap`` entries.

    Dynamic shapes keep making new keys; clearing beats an LRU's bookkeeping on the hot path.
    """
    if len(cache) >= cap:
        cache.clear()
    cache[key] = value
    return value


# ---------------------------------------------------------------- recording a call's work

_recorder = threading.local()


class Recording:
    """While open (on this thread), every launch through :func:`launch_cached` and every
    copy or GEMM the kernel helpers enqueue is also kept as a zero-argument callable that
    enqueues it again (:attr:`calls`, in order): a kernel whose device work depends only on
    its pointers and shapes replays them instead of recomputing its arguments
    (``kernels.base.replayed``)."""

    def __init__(self) -> None:
        self.calls: list[Callable[[], None]] = []

    def __enter__(self) -> Recording:
        self._outer = getattr(_recorder, "calls", None)
        _recorder.calls = self.calls
        return self

    def __exit__(self, *exc: Any) -> None:
        _recorder.calls = self._outer


def record(call: Callable[[], None]) -> None:
    """Keep ``call`` (which enqueues what was just enqueued) in the open :class:`Recording`."""
    calls = getattr(_recorder, "calls", None)
    if calls is not None:
        calls.append(call)


def launch_cached(fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int],
                  args: Sequence[tuple[Any, Any]], stream: Stream, shared_bytes: int = 0) -> None:
    """:func:`launch`, reusing a :class:`Launch` for arguments seen before.

    Keyed by the function, stream, geometry and every argument value (a struct by its
    bytes; a float zero by its repr, since ``-0.0 == 0.0`` would share a record). The
    first sighting of a key launches through :func:`launch` and only a repeat builds the
    record, so shapes that change every call cost no packing. Inside a :class:`Recording`
    the launch is built at once and kept there.
    """
    calls = getattr(_recorder, "calls", None)
    if calls is not None:
        rec = prepare(fn, grid, block, args, stream, shared_bytes)
        calls.append(rec)
        rec()
        return
    try:
        key = (fn, stream, grid, block, shared_bytes,
               *[bytes(v) if t is None else (repr(v) if v == 0 and type(v) is not int else v)
                 for v, t in args])
        rec = _cached.get(key)
    except TypeError:         # an unhashable value (a ctypes scalar): no cache
        launch(fn, grid, block, args, stream, shared_bytes)
        return
    if rec is None:
        if key not in _seen:
            remember(_seen, key, None, CACHED_LAUNCHES)
            launch(fn, grid, block, args, stream, shared_bytes)
            return
        rec = remember(_cached, key, prepare(fn, grid, block, args, stream, shared_bytes),
                       CACHED_LAUNCHES)
    rec()


_occupancy: dict[tuple[Any, int, int], int] = {}
_dynamic_shared: dict[Any, int] = {}


def allow_dynamic_shared(fn: Function) -> int:
    """Let ``fn`` launch with as much dynamic shared memory as the device allows a block
    (its opt-in maximum less ``fn``'s static shared memory; above 48 KiB a kernel must opt
    in with cuFuncSetAttribute). Set once per function, to the maximum, so that launches of
    any size up to it need no further driver call. Returns the bytes allowed."""
    n = _dynamic_shared.get(fn)
    if n is None:
        drv = driver()
        dev = check(drv.cuCtxGetDevice(), "cuCtxGetDevice")
        optin = int(check(drv.cuDeviceGetAttribute(
            drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
            "cuDeviceGetAttribute"))
        static = int(check(drv.cuFuncGetAttribute(
            drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn.handle),
            f"cuFuncGetAttribute({fn.name})"))
        n = optin - static
        check(drv.cuFuncSetAttribute(
            fn.handle, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            n), f"cuFuncSetAttribute({fn.name}, {n} dynamic shared bytes)")
        _dynamic_shared[fn] = n
    return n


def max_active_blocks(fn: Function, threads: int, shared_bytes: int = 0) -> int:
    """Blocks of ``threads`` threads (and ``shared_bytes`` of dynamic shared memory) of
    ``fn`` one multiprocessor holds at once (cuOccupancyMaxActiveBlocksPerMultiprocessor,
    asked once per key). With ``shared_bytes``, ``fn`` is first opted in to the most dynamic
    shared memory the device allows (:func:`allow_dynamic_shared`).

    :raises CudaError: CUDA_ERROR_INVALID_VALUE when ``shared_bytes`` exceeds that most.
    """
    key = (fn, int(threads), int(shared_bytes))
    n = _occupancy.get(key)
    if n is None:
        drv = driver()
        if shared_bytes > 0:
            allowed = allow_dynamic_shared(fn)
            if shared_bytes > allowed:
                raise CudaError(f"{fn.name}: {shared_bytes} bytes of dynamic shared memory "
                                f"requested, the device allows {allowed}",
                                error_name="CUDA_ERROR_INVALID_VALUE")
        n = int(check(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            fn.handle, int(threads), int(shared_bytes)),
            f"cuOccupancyMaxActiveBlocksPerMultiprocessor({fn.name})"))
        _occupancy[key] = n
    return n


#: threads per block of the grid-stride kernels
BLOCK = 256


def grid_1d(n: int, block: int = BLOCK, max_blocks: int | None = None) -> tuple[int, int, int]:
    """Blocks for a grid-stride loop over ``n`` elements (at least 1, at most ``max_blocks``).

    ``max_blocks`` defaults to 65535 * 32, plenty for grid-stride kernels and
    far under the 2^31 - 1 limit on gridDim.x.
    """
    blocks = max(1, -(-int(n) // block))
    return (min(blocks, max_blocks or 65535 * 32), 1, 1)
