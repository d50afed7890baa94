"""The CUDA driver API (``cuda.bindings.driver``): loading it, naming its errors, availability.

Raw driver calls, not ``cuda.core``: on the launch path a raw ``cuLaunchKernel`` from
Python costs what ``cuda.core.launch`` costs, so the thinner layer wins on simplicity.
Every driver result goes through :func:`check`, which raises
:exc:`onnx_ep.errors.CudaError` carrying the driver's error name (``CUDA_ERROR_...``).

Nothing here imports ``cuda`` at module import time: ``import onnx_ep`` must work without
cuda-python; :func:`driver` imports it on first use.
"""

from __future__ import annotations

import functools
import importlib
import threading
from types import ModuleType
from typing import Any

from onnx_ep.core.kernel import Support
from onnx_ep.errors import CudaError

_init_lock = threading.Lock()
_initialized = False


_driver: ModuleType | None = None


def driver() -> ModuleType:
    """The ``cuda.bindings.driver`` module, imported on first use (kept once imported: every
    launch and copy asks for it, and the import system's lookup costs microseconds)."""
    global _driver
    mod = _driver
    if mod is None:
        mod = _driver = importlib.import_module("cuda.bindings.driver")
    return mod


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


def as_result(code: Any) -> Any:
    """A ``CUresult`` for an int driver code (unknown codes stay ints)."""
    if type(code) is not int:
        return code            # already a CUresult (an int enum)
    try:
        return driver().CUresult(code)
    except (ValueError, ImportError):
        return code


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


def require_available() -> None:
    """:raises CudaError: (CUDA_ERROR_NO_DEVICE) with :func:`is_available`'s reason."""
    support = is_available()
    if not support:
        raise CudaError(f"CUDA is unavailable: {support.reason}",
                        error_name="CUDA_ERROR_NO_DEVICE")


def driver_version() -> int:
    """``cuDriverGetVersion()`` (13000 for CUDA 13.0)."""
    _init_driver()
    return int(check(driver().cuDriverGetVersion(), "cuDriverGetVersion"))
