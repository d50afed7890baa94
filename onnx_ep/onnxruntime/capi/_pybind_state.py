"""onnxruntime's native layer (``onnxruntime.capi._pybind_state``), in Python on onnx-ep:
exception types, enums, options, C-level values and sessions, module functions."""

from __future__ import annotations

from onnx_ep.core.session import NodeArg
from onnx_ep.onnxruntime.capi._enums import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    ModelMetadata,
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtDeviceVendorId,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
    OrtSparseFormat,
)
from onnx_ep.onnxruntime.capi._errors import (
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    NotImplemented,
    RuntimeException,
)
from onnx_ep.onnxruntime.capi._functions import (
    create_and_register_allocator,
    create_and_register_allocator_v2,
    disable_telemetry_events,
    enable_telemetry_events,
    get_build_info,
    get_version_string,
    set_global_thread_pool_sizes,
    set_seed,
)
from onnx_ep.onnxruntime.capi._logging import (
    set_default_logger_callback,
    set_default_logger_severity,
    set_default_logger_verbosity,
)
from onnx_ep.onnxruntime.capi._options import (
    RunOptions,
    SessionOptions,
    get_default_session_options,
)
from onnx_ep.onnxruntime.capi._providers import (
    get_all_providers,
    get_available_providers,
    get_device,
)
from onnx_ep.onnxruntime.capi._session import InferenceSession
from onnx_ep.onnxruntime.capi._values import (
    OrtValue,
    OrtValueVector,
    SparseTensor,
    is_dlpack_uint8_tensor,
)

__all__ = [
    "EPFail", "EngineError", "ExecutionMode", "ExecutionOrder", "Fail",
    "GraphOptimizationLevel", "InferenceSession", "InvalidArgument", "InvalidGraph",
    "InvalidProtobuf", "ModelLoadCanceled", "ModelLoaded", "ModelMetadata",
    "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NodeArg", "NotFound",
    "NotImplemented", "OrtAllocatorType", "OrtArenaCfg", "OrtDevice", "OrtDeviceMemoryType",
    "OrtDeviceVendorId", "OrtMemType", "OrtMemoryInfo", "OrtMemoryInfoDeviceType",
    "OrtSparseFormat", "OrtValue", "OrtValueVector", "RunOptions", "RuntimeException",
    "SessionOptions", "SparseTensor", "create_and_register_allocator",
    "create_and_register_allocator_v2", "disable_telemetry_events", "enable_telemetry_events",
    "get_all_providers", "get_available_providers", "get_build_info",
    "get_default_session_options", "get_device", "get_version_string",
    "is_dlpack_uint8_tensor", "set_default_logger_callback", "set_default_logger_severity",
    "set_default_logger_verbosity", "set_global_thread_pool_sizes", "set_seed",
]
