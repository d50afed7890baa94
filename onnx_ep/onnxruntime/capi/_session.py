"""onnxruntime's C-level session (``InferenceSession._sess``): an :class:`onnx_ep.Session`
with onnxruntime's loading rules, feed conversions and results.

Loading: a missing file raises ``NoSuchFile``, bytes that do not parse ``InvalidProtobuf``;
``SessionOptions.add_initializer`` / ``add_external_initializers`` /
``add_external_initializers_from_files_in_memory`` replace the model's values before the
rest of its external data is read; with ``ORT_LOAD_CONFIG_FROM_MODEL=1`` the model's
``ort_config`` metadata sets session options; ``optimized_model_filepath`` writes the model
as onnx-ep runs it (``onnx_ep.core.export``).
"""

from __future__ import annotations

import copy
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

import onnx_ep
from onnx_ep.core.graph import load_model as load_native
from onnx_ep.core.placement import PlacedNode
from onnx_ep.core.tensor import Tensor
from onnx_ep.onnxruntime.capi._enums import ModelMetadata
from onnx_ep.onnxruntime.capi._errors import (
    Fail,
    InvalidArgument,
    InvalidProtobuf,
    NoSuchFile,
    ort_errors,
    translate,
)
from onnx_ep.onnxruntime.capi._options import RunOptions, SessionOptions, native_options
from onnx_ep.onnxruntime.capi._providers import native_name, ort_name
from onnx_ep.onnxruntime.capi._values import OrtValue, OrtValueVector, SparseTensor

#: the config entry that enables ``get_provider_graph_assignment_info``
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"
#: config entries of ``optimized_model_filepath``'s external data
EXTERNAL_FILE = "session.optimized_model_external_initializers_file_name"
EXTERNAL_MIN = "session.optimized_model_external_initializers_min_size_in_bytes"


# ---------------------------------------------------------------- loading
def load(source: Any, so: SessionOptions) -> onnx.ModelProto:
    """The model from a path, bytes or a ModelProto, with ``so``'s initializers in place."""
    base = None
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise NoSuchFile.make(f"Load model from {path} failed:Load model {path} failed. "
                                  f"File doesn't exist")
        try:
            model = onnx.load(path, load_external_data=False)
        except Exception as exc:  # protobuf's DecodeError and friends
            raise InvalidProtobuf.make(f"Load model from {path} failed: "
                                       f"{type(exc).__name__}: {exc}") from None
        base = os.path.dirname(os.path.abspath(path))
    elif isinstance(source, (bytes, bytearray, memoryview, onnx.ModelProto)):
        with ort_errors():
            model = load_native(source if isinstance(source, onnx.ModelProto) else bytes(source))
        if model is source and (so._initializers or so._files_in_memory):
            model = copy.deepcopy(model)        # the caller's ModelProto stays as it was
    else:
        raise TypeError(f"Unable to load from type '{type(source)}': pass a path, bytes or "
                        f"an onnx.ModelProto")
    _replace_initializers(model, so._initializers)
    _fill_from_memory(model, so._files_in_memory)
    if base is not None:
        try:
            external_data_helper.load_external_data_for_model(model, base)
        except Exception as exc:
            raise Fail.make(f"cannot read the model's external data from {base!r}: "
                            f"{type(exc).__name__}: {exc}") from None
    return model


def _replace_initializers(model: onnx.ModelProto, values: Mapping[str, Any]) -> None:
    by_name = {t.name: t for t in model.graph.initializer}
    for name, value in values.items():
        old = by_name.get(name)
        if old is None:
            raise InvalidArgument.make(f"add_initializer({name!r}): the model has no "
                                       f"initializer of that name")
        c = value._get_c_value() if hasattr(value, "_get_c_value") else value
        array = c.numpy() if isinstance(c, OrtValue) else np.asarray(c)
        new = numpy_helper.from_array(np.ascontiguousarray(array), name)
        if isinstance(c, OrtValue) and c._elem_type is not None:
            new.data_type = c._elem_type
        if new.data_type != old.data_type or list(new.dims) != list(old.dims):
            raise InvalidArgument.make(
                f"add_initializer({name!r}): the value is {onnx.helper.tensor_dtype_to_string(new.data_type)}"  # noqa: E501
                f"{list(new.dims)}, the model's initializer "
                f"{onnx.helper.tensor_dtype_to_string(old.data_type)}{list(old.dims)}")
        old.CopyFrom(new)


def _fill_from_memory(model: onnx.ModelProto, files: Mapping[str, bytes]) -> None:
    if not files:
        return
    for t in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(t):
            continue
        info = external_data_helper.ExternalDataInfo(t)
        data = files.get(info.location)
        if data is None:
            continue
        start = info.offset or 0
        t.raw_data = data[start:start + info.length] if info.length else data[start:]
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def effective_options(so: SessionOptions | None, model: onnx.ModelProto) -> SessionOptions:
    """A copy of ``so``; with ``ORT_LOAD_CONFIG_FROM_MODEL=1``, the model's ``ort_config``
    metadata (``{"session_options": {...}}``) sets its fields."""
    eff = copy.copy(so) if so is not None else SessionOptions()
    if os.environ.get("ORT_LOAD_CONFIG_FROM_MODEL") != "1":
        return eff
    text = next((p.value for p in model.metadata_props if p.key == "ort_config"), None)
    if text is None:
        return eff
    try:
        config = json.loads(text).get("session_options", {})
    except (ValueError, AttributeError) as exc:
        raise InvalidArgument.make(f"the model's ort_config metadata is not JSON with a "
                                   f"session_options object: {exc}") from None
    renamed = {"session_logid": "logid", "session_log_severity_level": "log_severity_level",
               "session_log_verbosity_level": "log_verbosity_level"}
    for key, value in config.items():
        name = renamed.get(key, key)
        if name == "enable_profiling":
            value = bool(value)
        elif name == "graph_optimization_level" and 3 <= int(value) < 99:
            value = 99      # the config counts onnxruntime's internal levels: 3 is the top
        if name in SessionOptions.__slots__ or hasattr(SessionOptions, name):
            setattr(eff, name, value)
    return eff


# ---------------------------------------------------------------- the session
class InferenceSession:
    """One loaded model on onnx-ep, with onnxruntime's C-session methods."""

    def __init__(self, source: Any, so: SessionOptions | None, providers: Sequence[str],
                 provider_options: Sequence[dict[str, str]]) -> None:
        model = load(source, so or SessionOptions())
        self.options = effective_options(so, model)
        self.metadata = ModelMetadata.of(model)
        self.provider_options = {p: dict(o) for p, o in zip(providers, provider_options)}
        opts = native_options(self.options, self.provider_options)
        with ort_errors():
            self.native = onnx_ep.Session(model, providers=[native_name(p) for p in providers],
                                          options=opts)
        if self.options.optimized_model_filepath:
            self._write_optimized(model)

    def _write_optimized(self, model: onnx.ModelProto) -> None:
        from onnx_ep.core import export

        cfg = self.options._config
        try:
            min_bytes = int(cfg.get(EXTERNAL_MIN, "1024"))
        except ValueError:
            raise InvalidArgument.make(f"{EXTERNAL_MIN} must be a number of bytes, got "
                                       f"{cfg[EXTERNAL_MIN]!r}") from None
        with ort_errors(Fail):
            export.write_optimized_model(
                model, self.options.optimized_model_filepath,
                free_dims=self.options._dims_by_name or None,
                free_dim_denotations=self.options._dims_by_denotation or None,
                external_data_file=cfg.get(EXTERNAL_FILE) or None,
                external_min_bytes=min_bytes, providers=self.native.get_providers())

    # ------------------------------------------------------------ metadata
    def get_inputs(self) -> list[Any]:
        return self.native.get_inputs()

    def get_outputs(self) -> list[Any]:
        return self.native.get_outputs()

    def get_overridable_initializers(self) -> list[Any]:
        graph = self.native.graph
        return [onnx_ep.NodeArg(v.name, list(v.spec.shape) if v.spec is not None else [],
                                v.type_str) for v in graph.inputs if v.name in graph.overridable]

    def get_providers(self) -> list[str]:
        return [ort_name(p) for p in self.native.get_providers()]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        out = {}
        for p in self.get_providers():
            base = {"device_id": "0"} if p == "CUDAExecutionProvider" else {}
            out[p] = {**base, **self.provider_options.get(p, {})}
        return out

    def get_provider_graph_assignment_info(self) -> list[AssignedSubgraph]:
        """One entry per node with the provider that runs it (as placed at load).

        :raises Fail: unless the config entry ``session.record_ep_graph_assignment_info``
            is ``"1"``, as onnxruntime requires.
        """
        if self.options._config.get(RECORD_ASSIGNMENT) != "1":
            raise Fail.make(f"Session configuration entry '{RECORD_ASSIGNMENT}' must be set "
                            f"to \"1\" to retrieve EP graph assignment information.")
        steps = self.native._program.placement.steps
        return [AssignedSubgraph(ort_name(s.provider), [s.node]) for s in steps
                if isinstance(s, PlacedNode)]

    def end_profiling(self) -> str:
        end = getattr(self.native, "end_profiling", None)
        return end() if end is not None else ""

    def get_profiling_start_time_ns(self) -> int:
        return int(getattr(self.native, "profiling_start_time_ns", 0))

    # ------------------------------------------------------------ runs
    def run(self, output_names: Sequence[str], feeds: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """Run; results as numpy arrays (never sharing memory with a feed), lists (sequences),
        dicts (maps) or None (an empty optional)."""
        given = {name: feed_value(v) for name, v in feeds.items()}
        with ort_errors():
            outs = self.native.run(list(output_names or ()), given, _native_run(run_options))
        arrays = [a for a in given.values() if isinstance(a, np.ndarray)]
        return [_result(o, arrays) for o in outs]

    def run_with_ort_values(self, feeds: Mapping[str, Any], output_names: Sequence[str],
                            run_options: RunOptions | None = None) -> OrtValueVector:
        """Run with C OrtValues as feeds; device tensors stay on the device (through the
        session's IOBinding); results as C OrtValues."""
        binding = self.native.io_binding()
        with ort_errors():
            for name, value in feeds.items():
                binding.bind_input(name, _as_tensor(feed_value(value)))
            for name in output_names or [o.name for o in self.get_outputs()]:
                binding.bind_output(name)
            self.native.run_with_iobinding(binding, _native_run(run_options))
        return OrtValueVector(OrtValue(_plain(t)) for t in binding.get_outputs())

    def run_async(self, output_names: Sequence[str], feeds: Mapping[str, Any], callback: Any,
                  user_data: Any, run_options: RunOptions | None = None) -> None:
        """Run on a new thread, then call ``callback(results, user_data, error_text)``
        (``error_text`` empty on success)."""
        def work() -> None:
            try:
                results = self.run(output_names, feeds, run_options)
            except Exception as exc:  # handed to the callback, as onnxruntime does
                callback([], user_data, str(translate(exc)))
                return
            callback(results, user_data, "")

        threading.Thread(target=work, name="onnxruntime-run_async", daemon=True).start()


class AssignedSubgraph:
    """The nodes one provider runs (``get_provider_graph_assignment_info``)."""

    def __init__(self, ep_name: str, nodes: list[Any]) -> None:
        self.ep_name = ep_name
        self._nodes = nodes

    def get_nodes(self) -> list[Any]:
        """Nodes with ``name``, ``op_type`` and ``domain``."""
        return list(self._nodes)


def _native_run(run_options: RunOptions | None) -> onnx_ep.RunOptions | None:
    return run_options.native if isinstance(run_options, RunOptions) else run_options


def feed_value(value: Any) -> Any:
    """A feed as onnx-ep takes it: OrtValues unwrapped, sparse tensors densified, byte and
    void string arrays decoded to text (onnxruntime stores strings as UTF-8 text)."""
    if hasattr(value, "_get_c_value"):
        value = value._get_c_value()
    if isinstance(value, OrtValue):
        value = value.value
    if isinstance(value, SparseTensor):
        return value.dense()
    if isinstance(value, np.ndarray) and value.dtype.kind in "SV":
        raw = value.reshape(-1)
        text = [bytes(x).rstrip(b"\0").decode("utf-8", errors="surrogateescape") for x in raw]
        return np.array(text, dtype=object).reshape(value.shape)
    if isinstance(value, list):
        return [feed_value(v) if hasattr(v, "_get_c_value") or isinstance(v, OrtValue) else v
                for v in value]
    return value


def _as_tensor(value: Any) -> Any:
    return Tensor(np.asarray(value)) if isinstance(value, (np.ndarray, np.generic)) else value


def _plain(value: Any) -> Any:
    """A host Tensor result as its array; others unchanged."""
    return value.value if isinstance(value, Tensor) and value.is_host else value


def _result(value: Any, fed: list[np.ndarray]) -> Any:
    if not isinstance(value, np.ndarray):
        return value
    if any(np.may_share_memory(value, a) for a in fed):
        return value.copy()     # an input passed through: the caller may reuse its buffer
    # onnxruntime's results are views of the session's buffer: base is never None
    return value if value.base is not None else value.view()
