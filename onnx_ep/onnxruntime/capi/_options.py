"""onnxruntime's mutable ``SessionOptions`` and ``RunOptions``, and what they become in
onnx-ep's frozen :class:`onnx_ep.SessionOptions` / :class:`onnx_ep.RunOptions`.

What is honoured: ``log_severity_level`` (the ``onnx_ep`` logger's level),
``graph_optimization_level`` (``ORT_DISABLE_ALL`` turns fusion off), free dimension
overrides, ``add_initializer`` / ``add_external_initializers`` (the model's values are
replaced at load), ``enable_profiling`` / ``profile_file_prefix``,
``optimized_model_filepath``, the config entry ``session.disable_cpu_ep_fallback``, and
``RunOptions.terminate`` / ``logid``. Threads, execution mode and order, arenas and memory
patterns are hints onnxruntime may ignore too: accepted, reported back, not used.
``register_custom_ops_library`` raises: onnxruntime custom-op libraries are native code
written against onnxruntime's C API.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs

import onnx_ep
from onnx_ep.onnxruntime.capi._enums import ExecutionMode, ExecutionOrder, GraphOptimizationLevel
from onnx_ep.onnxruntime.capi._errors import InvalidArgument, NotImplemented

#: onnxruntime severities (0 verbose .. 4 fatal) -> onnx-ep's ``log_level``
LOG_LEVELS = {0: "debug", 1: "info", 2: "warning", 3: "error", 4: "error"}


class SessionOptions:
    """onnxruntime's ``SessionOptions``: set fields, then pass it to ``InferenceSession``."""

    __slots__ = ("intra_op_num_threads", "inter_op_num_threads", "log_severity_level",
                 "log_verbosity_level", "logid", "enable_profiling", "profile_file_prefix",
                 "_graph_optimization_level", "_execution_mode", "_execution_order",
                 "optimized_model_filepath", "enable_cpu_mem_arena", "enable_mem_pattern",
                 "enable_mem_reuse", "use_deterministic_compute", "use_per_session_threads",
                 "_config", "_dims_by_name", "_dims_by_denotation", "_initializers",
                 "_files_in_memory", "_load_cancelled")

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self._graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self._execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self._execution_order = ExecutionOrder.DEFAULT
        self.optimized_model_filepath = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self._config: dict[str, str] = {}
        self._dims_by_name: dict[str, int] = {}
        self._dims_by_denotation: dict[str, int] = {}
        #: initializer name -> OrtValue replacing the model's value
        self._initializers: dict[str, Any] = {}
        #: external data file name -> its bytes
        self._files_in_memory: dict[str, bytes] = {}
        self._load_cancelled = False

    # enums: onnxruntime's pybind properties take the enum (or its number)
    @property
    def graph_optimization_level(self) -> GraphOptimizationLevel:
        return self._graph_optimization_level

    @graph_optimization_level.setter
    def graph_optimization_level(self, value: Any) -> None:
        self._graph_optimization_level = GraphOptimizationLevel(value)

    @property
    def execution_mode(self) -> ExecutionMode:
        return self._execution_mode

    @execution_mode.setter
    def execution_mode(self, value: Any) -> None:
        self._execution_mode = ExecutionMode(value)

    @property
    def execution_order(self) -> ExecutionOrder:
        return self._execution_order

    @execution_order.setter
    def execution_order(self, value: Any) -> None:
        self._execution_order = ExecutionOrder(value)

    # config entries
    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """:raises InvalidArgument: (a RuntimeError) ``key`` was never added."""
        if key not in self._config:
            raise InvalidArgument(f"SessionOptions does not have configuration with key: {key}")
        return self._config[key]

    # load-time changes to the model
    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        self._dims_by_name[str(dim_name)] = int(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str,
                                                  dim_value: int) -> None:
        self._dims_by_denotation[str(dim_denotation)] = int(dim_value)

    def add_initializer(self, name: str, ort_value: Any) -> None:
        """Replace the model's initializer ``name`` with ``ort_value`` (a host OrtValue)."""
        self._initializers[str(name)] = ort_value

    def add_external_initializers(self, names: list[str], ort_values: list[Any]) -> None:
        """Supply initializers the model keeps in external data, by name."""
        if len(names) != len(ort_values):
            raise InvalidArgument(f"add_external_initializers: {len(names)} names but "
                                  f"{len(ort_values)} values")
        for n, v in zip(names, ort_values):
            self.add_initializer(n, v)

    def add_external_initializers_from_files_in_memory(self, names: list[str],
                                                       buffers: list[Any],
                                                       lengths: list[int]) -> None:
        """Supply the contents of external data files, by the file name the model uses."""
        if not len(names) == len(buffers) == len(lengths):
            raise InvalidArgument("add_external_initializers_from_files_in_memory: names, "
                                  "buffers and lengths must have the same length")
        for n, b, size in zip(names, buffers, lengths):
            self._files_in_memory[str(n)] = bytes(memoryview(b))[:int(size)]

    def register_custom_ops_library(self, library_path: str) -> None:
        """:raises NotImplemented: always (a RuntimeError): see the module docstring."""
        raise NotImplemented.make(
            f"register_custom_ops_library({library_path!r}) is not supported by onnx-ep: "
            f"onnxruntime custom-op libraries are native code against onnxruntime's C API. "
            f"Register the op's kernel in Python through the onnx_ep_register_kernels hook "
            f"instead (docs/PLUGINS.md)")

    def add_provider(self, provider_name: str, options: dict[str, str]) -> None:
        raise NotImplemented.make("SessionOptions.add_provider: pass providers= to "
                                  "InferenceSession instead")

    def has_providers(self) -> bool:
        return False

    def set_load_cancellation_flag(self, value: bool) -> None:
        self._load_cancelled = bool(value)

    def __copy__(self) -> SessionOptions:
        new = SessionOptions.__new__(SessionOptions)
        for name in self.__slots__:
            setattr(new, name, copy.copy(getattr(self, name)))
        return new

    def __repr__(self) -> str:
        return (f"SessionOptions(graph_optimization_level={self.graph_optimization_level.name}, "
                f"log_severity_level={self.log_severity_level}, "
                f"enable_profiling={self.enable_profiling})")


def get_default_session_options() -> SessionOptions:
    return SessionOptions()


def native_options(so: SessionOptions, provider_options: dict[str, dict[str, str]]
                   ) -> onnx_ep.SessionOptions:
    """The onnx-ep options ``so`` and the normalized provider options ask for."""
    fields = {a.name for a in attrs.fields(onnx_ep.SessionOptions)}
    kw: dict[str, Any] = {}
    if so.log_severity_level in LOG_LEVELS:
        kw["log_level"] = LOG_LEVELS[so.log_severity_level]
    if so.graph_optimization_level == GraphOptimizationLevel.ORT_DISABLE_ALL:
        kw["fusion"] = "off"
    dims = {**so._dims_by_denotation, **so._dims_by_name}
    if dims:
        kw["free_dimension_overrides"] = dims
    if so._config.get("session.disable_cpu_ep_fallback") == "1":
        kw["disable_fallback"] = True
    if so.enable_profiling and "profile" in fields:
        kw["profile"] = True
        if so.profile_file_prefix and "profile_prefix" in fields:
            kw["profile_prefix"] = so.profile_file_prefix.rstrip("_") or "onnxruntime_profile"
    limit = provider_options.get("CUDAExecutionProvider", {}).get("gpu_mem_limit")
    if limit is not None:
        try:
            kw["memory_limit"] = int(limit)
        except ValueError:
            raise InvalidArgument(f"CUDAExecutionProvider option gpu_mem_limit must be a "
                                  f"number of bytes, got {limit!r}") from None
    return onnx_ep.SessionOptions(**kw)


class RunOptions:
    """onnxruntime's ``RunOptions``; ``terminate`` (settable from another thread) cancels a
    run between steps, raising ``Fail``."""

    __slots__ = ("log_severity_level", "log_verbosity_level", "only_execute_path_to_fetches",
                 "_config", "_native")

    def __init__(self) -> None:
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.only_execute_path_to_fetches = False
        self._config: dict[str, str] = {}
        self._native = onnx_ep.RunOptions()

    @property
    def logid(self) -> str:
        return self._native.tag

    @logid.setter
    def logid(self, value: str) -> None:
        self._native.tag = str(value)

    @property
    def terminate(self) -> bool:
        return self._native.terminate

    @terminate.setter
    def terminate(self, value: bool) -> None:
        self._native.terminate = bool(value)

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)
        if key == "disable_synchronize_execution_providers":
            # "1": run_with_iobinding returns once the device work is queued
            self._native.synchronize = str(value) != "1"

    def get_run_config_entry(self, key: str) -> str:
        """:raises InvalidArgument: (a RuntimeError) ``key`` was never added."""
        if key not in self._config:
            raise InvalidArgument(f"RunOptions does not have configuration with key: {key}")
        return self._config[key]

    def add_active_adapter(self, adapter: Any) -> None:
        raise NotImplemented.make("LoRA adapters (RunOptions.add_active_adapter) are not "
                                  "supported by onnx-ep")

    @property
    def native(self) -> onnx_ep.RunOptions:
        """The onnx-ep run options this stands for."""
        return self._native
