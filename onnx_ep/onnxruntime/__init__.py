"""onnxruntime's Python API on onnx-ep: code moves over by changing one import.

::

    import onnx_ep.onnxruntime as ort          # was: import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession("model.onnx", so,
                                providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    y = sess.run(None, {sess.get_inputs()[0].name: x})

Or keep ``import onnxruntime`` and call :func:`install` first. What maps to what, and what
differs, is in docs/ONNXRUNTIME.md.
"""

from __future__ import annotations

import sys
from importlib import import_module

from onnx_ep.onnxruntime.capi._functions import VERSION
from onnx_ep.onnxruntime.capi._pybind_state import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    ModelMetadata,
    NodeArg,
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDeviceMemoryType,
    OrtDeviceVendorId,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
    OrtSparseFormat,
    RunOptions,
    SessionOptions,
    create_and_register_allocator,
    create_and_register_allocator_v2,
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    get_version_string,
    set_default_logger_callback,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_global_thread_pool_sizes,
    set_seed,
)
from onnx_ep.onnxruntime.capi.onnxruntime_inference_collection import (
    InferenceSession,
    IOBinding,
    OrtDevice,
    OrtValue,
    SparseTensor,
)

__version__ = VERSION

# onnxruntime's package has these submodules loaded once it is imported
for _sub in ("onnxruntime_pybind11_state", "onnxruntime_inference_collection"):
    import_module(f"{__name__}.capi.{_sub}")

__all__ = [
    "ExecutionMode", "ExecutionOrder", "GraphOptimizationLevel", "IOBinding",
    "InferenceSession", "ModelMetadata", "NodeArg", "OrtAllocatorType", "OrtArenaCfg",
    "OrtDevice", "OrtDeviceMemoryType", "OrtDeviceVendorId", "OrtMemType", "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType", "OrtSparseFormat", "OrtValue", "RunOptions", "SessionOptions",
    "SparseTensor", "__version__", "create_and_register_allocator",
    "create_and_register_allocator_v2", "disable_telemetry_events", "enable_telemetry_events",
    "get_all_providers", "get_available_providers", "get_build_info", "get_device",
    "get_version_string", "install", "set_default_logger_callback",
    "set_default_logger_severity", "set_default_logger_verbosity",
    "set_global_thread_pool_sizes", "set_seed",
]

#: the submodules ``install`` registers under onnxruntime's names
_SUBMODULES = ("capi", "capi._pybind_state", "capi.onnxruntime_pybind11_state",
               "capi.onnxruntime_inference_collection")


def install() -> bool:
    """Make ``import onnxruntime`` (and its ``capi`` submodules) give this module, in this
    process only, by entries in ``sys.modules``.

    Nothing is written to disk, so an installed onnxruntime stays what other processes
    import; and a real onnxruntime already imported in this process is never replaced:
    then nothing changes and this returns False. Without a call to ``install``, onnx-ep
    never shadows onnxruntime.

    :returns: whether ``import onnxruntime`` now resolves to this module (True also when
        it did already).
    """
    current = sys.modules.get("onnxruntime")
    this = sys.modules[__name__]
    if current is not None and current is not this:
        return False
    sys.modules["onnxruntime"] = this
    for sub in _SUBMODULES:
        __import__(f"{__name__}.{sub}")
        sys.modules[f"onnxruntime.{sub}"] = sys.modules[f"{__name__}.{sub}"]
    return True
