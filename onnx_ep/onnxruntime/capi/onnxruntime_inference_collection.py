"""onnxruntime's Python classes: ``InferenceSession``, ``IOBinding``, ``OrtValue``, with
onnxruntime's signatures and semantics, on onnx-ep (docs/ONNXRUNTIME.md).

Provider rules, as onnxruntime's: names are onnxruntime's (``CPUExecutionProvider``,
``CUDAExecutionProvider``) or any onnx-ep provider's; one not available here is dropped
with a warning; ``providers=None`` runs on the CPU; an unknown name falls back to the CPU
with a warning at construction and raises ``RuntimeError`` ("Unknown Provider Type") from
``set_providers``.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnx_ep.core.tensor import Tensor, device_runtime
from onnx_ep.onnxruntime.capi import _session as C_session
from onnx_ep.onnxruntime.capi import _values as C_values
from onnx_ep.onnxruntime.capi._enums import (
    ModelMetadata,
    OrtAllocatorType,
    OrtDevice,
    OrtMemoryInfo,
    OrtMemType,
)
from onnx_ep.onnxruntime.capi._errors import EPFail, Fail, InvalidArgument, ort_errors
from onnx_ep.onnxruntime.capi._options import RunOptions, SessionOptions
from onnx_ep.onnxruntime.capi._providers import (
    check_and_normalize_provider_args,
    get_all_providers,
    get_available_providers,
)
from onnx_ep.onnxruntime.capi._values import SparseTensor, element_dtype

__all__ = ["IOBinding", "InferenceSession", "OrtDevice", "OrtValue", "Session", "SparseTensor",
           "check_and_normalize_provider_args"]

CPU = "CPUExecutionProvider"


class Session:
    """The base of :class:`InferenceSession` (onnxruntime's layout): every method but the
    constructor."""

    _sess: C_session.InferenceSession

    # ------------------------------------------------------------ metadata
    def get_session_options(self) -> SessionOptions:
        """The options the session was built with (the model's ``ort_config`` applied)."""
        return self._sess.options

    def get_inputs(self) -> list[Any]:
        return list(self._inputs_meta)

    def get_outputs(self) -> list[Any]:
        return list(self._outputs_meta)

    def get_overridable_initializers(self) -> list[Any]:
        """Initializers also listed as graph inputs: a feed of that name replaces them."""
        return self._sess.get_overridable_initializers()

    def get_modelmeta(self) -> ModelMetadata:
        return self._sess.metadata

    def get_providers(self) -> list[str]:
        return self._sess.get_providers()

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return self._sess.get_provider_options()

    def get_input_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where each input is expected: the host (onnx-ep copies feeds to the device)."""
        return [_cpu_memory() for _ in self._inputs_meta]

    def get_output_memory_infos(self) -> list[OrtMemoryInfo]:
        return [_cpu_memory() for _ in self._outputs_meta]

    def get_input_epdevices(self) -> list[Any]:
        return [None for _ in self._inputs_meta]

    def get_provider_graph_assignment_info(self) -> list[Any]:
        return self._sess.get_provider_graph_assignment_info()

    def get_tuning_results(self) -> list[dict[str, Any]]:
        return []

    def set_tuning_results(self, results: Any, *, error_on_invalid: bool = False) -> None:
        """onnx-ep keeps no tuning results: accepted and ignored."""

    # ------------------------------------------------------------ profiling
    def end_profiling(self) -> str:
        """Write the profile (``SessionOptions.enable_profiling``); its path, or ``""``."""
        return self._sess.end_profiling()

    def get_profiling_start_time_ns(self) -> int:
        return self._sess.get_profiling_start_time_ns()

    # ------------------------------------------------------------ providers
    def enable_fallback(self) -> None:
        self._enable_fallback = True

    def disable_fallback(self) -> None:
        self._enable_fallback = False

    def set_providers(self, providers: Any = None, provider_options: Any = None) -> None:
        """Rebuild the session on ``providers``.

        :raises RuntimeError: ``Unknown Provider Type: <name>`` for a name no provider has.
        """
        self._create_inference_session(providers, provider_options, strict=True)

    # ------------------------------------------------------------ runs
    def _validate_input(self, names: list[str]) -> None:
        missing = [i.name for i in self._inputs_meta
                   if i.name not in names and not i.type.startswith("optional")]
        if missing:
            raise ValueError(f"Required inputs ({missing}) are missing from input feed "
                             f"({names}).")

    def _with_fallback(self, call: Any) -> Any:
        try:
            return call()
        except EPFail as exc:
            if not self._enable_fallback or self.get_providers() == [CPU]:
                raise
            warnings.warn(f"EP Error: {exc} using {self.get_providers()}; falling back to "
                          f"['{CPU}'] and retrying.", stacklevel=3)
            self.set_providers([CPU])
            self.disable_fallback()
            return call()

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """Run; ``output_names`` None or empty returns every output.

        :raises ValueError: a required input is missing.
        :raises InvalidArgument: a feed of the wrong type or shape (also a FeedError).
        """
        self._validate_input(list(input_feed))
        names = list(output_names) if output_names else [o.name for o in self._outputs_meta]
        return self._with_fallback(lambda: self._sess.run(names, input_feed, run_options))

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Any, user_data: Any, run_options: RunOptions | None = None) -> None:
        """Run on another thread; then ``callback(results, user_data, error_text)``."""
        self._validate_input(list(input_feed))
        names = list(output_names) if output_names else [o.name for o in self._outputs_meta]
        self._sess.run_async(names, input_feed, callback, user_data, run_options)

    def run_with_ort_values(self, output_names: Sequence[str] | None,
                            input_dict_ort_values: Mapping[str, Any],
                            run_options: RunOptions | None = None) -> list[OrtValue]:
        """Run with :class:`OrtValue` feeds; results as OrtValues (device ones stay there)."""
        self._validate_input(list(input_dict_ort_values))
        feeds = {n: v._get_c_value() if isinstance(v, OrtValue) else v
                 for n, v in input_dict_ort_values.items()}
        names = list(output_names) if output_names else [o.name for o in self._outputs_meta]
        values = self._with_fallback(
            lambda: self._sess.run_with_ort_values(feeds, names, run_options))
        return [OrtValue(v) for v in values]

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding,
                           run_options: RunOptions | None = None) -> None:
        """Run with ``iobinding``'s inputs and outputs (outputs then in
        ``iobinding.get_outputs()``)."""
        native = run_options.native if isinstance(run_options, RunOptions) else run_options
        with ort_errors():
            self._sess.native.run_with_iobinding(iobinding._native, native)


class InferenceSession(Session):
    """onnxruntime's ``InferenceSession`` on onnx-ep.

    :param path_or_bytes: a path (str or os.PathLike), serialized bytes, or a ModelProto.
    :param sess_options: :class:`SessionOptions`.
    :param providers: names or ``(name, options)`` tuples, best first; None: the CPU.
    :param provider_options: one dict per name in ``providers``.
    :raises NoSuchFile: no such model file. :raises InvalidProtobuf: bytes that do not parse.
    :raises Fail: a model onnx-ep refuses (also its ``ModelError``).
    """

    def __init__(self, path_or_bytes: Any, sess_options: SessionOptions | None = None,
                 providers: Any = None, provider_options: Any = None, **kwargs: Any) -> None:
        if isinstance(path_or_bytes, (str, os.PathLike)):
            self._model_path: str | None = os.fspath(path_or_bytes)
            self._model_bytes: Any = None
        elif isinstance(path_or_bytes, (bytes, bytearray, memoryview, onnx.ModelProto)):
            self._model_path = None
            self._model_bytes = path_or_bytes
        else:
            raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")
        self._sess_options = sess_options
        self._enable_fallback = True
        self._create_inference_session(providers, provider_options, strict=False)

    def _create_inference_session(self, providers: Any, provider_options: Any, *,
                                  strict: bool) -> None:
        available = get_available_providers()
        names, options = check_and_normalize_provider_args(providers, provider_options,
                                                           available)
        unknown = [n for n in names if n not in get_all_providers()]
        if unknown and strict:
            raise Fail(f"Unknown Provider Type: {unknown[0]}")
        if unknown:
            warnings.warn(f"EP Error: Unknown Provider Type: {unknown[0]} when using {names}; "
                          f"falling back to ['{CPU}']", stacklevel=3)
        kept = [(n, o) for n, o in zip(names, options) if n in available]
        if not kept:
            kept = [(CPU, {})]
        source = self._model_path if self._model_path is not None else self._model_bytes
        self._sess = C_session.InferenceSession(source, self._sess_options,
                                                [n for n, _ in kept], [o for _, o in kept])
        self._inputs_meta = self._sess.get_inputs()
        self._outputs_meta = self._sess.get_outputs()
        self._providers = self._sess.get_providers()


def _cpu_memory() -> OrtMemoryInfo:
    return OrtMemoryInfo("Cpu", OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, OrtMemType.DEFAULT)


# ---------------------------------------------------------------- OrtValue
class OrtValue:
    """onnxruntime's ``OrtValue``: a tensor on the host (sharing a numpy array's memory) or a
    device, a sequence, a map or a sparse tensor; ``_ortvalue`` is the C-level value."""

    def __init__(self, ortvalue: C_values.OrtValue, numpy_obj: Any = None) -> None:
        self._ortvalue = ortvalue
        self._numpy_obj = numpy_obj     # keeps a shared array alive

    def _get_c_value(self) -> C_values.OrtValue:
        return self._ortvalue

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: Any, device_type: str = "cpu", device_id: int = 0,
                            vendor_id: int = -1) -> OrtValue:
        return OrtValue(C_values.OrtValue.ortvalue_from_numpy(numpy_obj, device_type,
                                                              device_id), numpy_obj)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: Any, onnx_element_type: int) -> OrtValue:
        return OrtValue(C_values.OrtValue.ortvalue_from_numpy_with_onnx_type(
            data, onnx_element_type), data)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any,
                                     device_type: str = "cpu", device_id: int = 0,
                                     vendor_id: int = -1, memory_info: Any = None) -> OrtValue:
        return OrtValue(C_values.OrtValue.ortvalue_from_shape_and_type(
            shape, element_type, device_type, device_id))

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: SparseTensor) -> OrtValue:
        return OrtValue(C_values.OrtValue.ort_value_from_sparse_tensor(sparse_tensor))

    @staticmethod
    def from_dlpack(data: Any, is_bool_tensor: bool = False) -> OrtValue:
        return OrtValue(C_values.OrtValue.from_dlpack(data, is_bool_tensor))

    def __getattr__(self, name: str) -> Any:
        # numpy(), shape(), data_type(), element_type(), device_name(), is_tensor(), ...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._ortvalue, name)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._ortvalue.__array__(dtype, copy)

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._ortvalue.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._ortvalue.__dlpack_device__()

    def __repr__(self) -> str:
        return repr(self._ortvalue)


# ---------------------------------------------------------------- IOBinding
class IOBinding:
    """onnxruntime's ``IOBinding`` on :class:`onnx_ep.IOBinding`: inputs and outputs bound
    once (numpy arrays, OrtValues, raw buffer addresses), outputs kept where they are."""

    def __init__(self, session: Session) -> None:
        self._native = session._sess.native.io_binding()

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        with ort_errors():
            self._native.bind_input(name, np.asarray(C_session.feed_value(arr_on_cpu)))

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any,
                   shape: Sequence[int], buffer_ptr: int) -> None:
        """Bind the ``shape`` elements of ``element_type`` (a numpy type or an ONNX element
        type number) at address ``buffer_ptr`` on ``device_type`` (not copied now)."""
        with ort_errors():
            self._native.bind_input(name, _at_address(device_type, device_id, element_type,
                                                      shape, buffer_ptr))

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        with ort_errors():
            value = C_session.feed_value(ortvalue)
            self._native.bind_input(name, Tensor(value) if isinstance(value, np.ndarray)
                                    else value)

    def synchronize_inputs(self) -> None:
        self._native.synchronize_inputs()

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Sequence[int] | None = None,
                    buffer_ptr: int | None = None) -> None:
        """Return output ``name`` on ``device_type``, or write it into the buffer at
        ``buffer_ptr`` (with ``element_type`` and ``shape``)."""
        with ort_errors():
            if buffer_ptr is None:
                self._native.bind_output(name, device_type=str(device_type).lower(),
                                         device_id=device_id)
                return
            if element_type is None or shape is None:
                raise InvalidArgument.make(f"bind_output({name!r}) with buffer_ptr needs "
                                           f"element_type and shape")
            self._native.bind_output(name, _at_address(device_type, device_id, element_type,
                                                       shape, buffer_ptr))

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        with ort_errors():
            self._native.bind_output(name, ortvalue._get_c_value().tensor)

    def synchronize_outputs(self) -> None:
        self._native.synchronize_outputs()

    def get_outputs(self) -> list[OrtValue]:
        with ort_errors():
            return [OrtValue(C_values.OrtValue(C_session._plain(t)))
                    for t in self._native.get_outputs()]

    def get_outputs_as_ortvaluevector(self) -> C_values.OrtValueVector:
        return C_values.OrtValueVector(v._get_c_value() for v in self.get_outputs())

    def copy_outputs_to_cpu(self) -> list[Any]:
        with ort_errors():
            return self._native.copy_outputs_to_cpu()

    def clear_binding_inputs(self) -> None:
        self._native.clear_binding_inputs()

    def clear_binding_outputs(self) -> None:
        self._native.clear_binding_outputs()


def _at_address(device_type: Any, device_id: int, element_type: Any, shape: Sequence[int],
                address: int) -> Tensor:
    """A Tensor over memory the caller owns at ``address`` (host or CUDA)."""
    dtype = element_dtype(element_type)
    dims = tuple(int(d) for d in shape)
    kind = device_type.name if isinstance(device_type, OrtDevice) else str(device_type).lower()
    if kind == "cpu":
        nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
        buf = (ctypes.c_byte * nbytes).from_address(int(address))
        return Tensor(np.frombuffer(buf, dtype=dtype).reshape(dims))
    rt = device_runtime(f"cuda:{int(device_id)}")
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    return Tensor(DeviceTensor(int(address), dtype, dims, int(device_id)), rt.device, rt)
