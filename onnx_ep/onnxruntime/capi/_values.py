"""onnxruntime's C-level value types: ``OrtValue``, ``OrtValueVector``, ``SparseTensor``.

An ``OrtValue`` holds a tensor (a host numpy array, or an :class:`onnx_ep.Tensor` on a
device), a sequence (list), a map (dict), a sparse tensor, or nothing (an empty
optional). A host OrtValue made from a numpy array shares its memory, as onnxruntime's
does; ``numpy()`` of a device one copies to the host. DLPack works both ways.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.dtypes import np_dtype, onnx_elem_type, type_string
from onnx_ep.core.tensor import Tensor, device_type
from onnx_ep.onnxruntime.capi._enums import OrtDevice, OrtSparseFormat
from onnx_ep.onnxruntime.capi._errors import Fail, InvalidArgument, ort_errors

_DL_CPU = 1


def element_dtype(element_type: Any) -> np.dtype:
    """A numpy dtype from onnxruntime's ``element_type`` (a numpy type or an ONNX number)."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        return np_dtype(int(element_type))
    return np.dtype(element_type)


def _device_string(device: Any, device_id: int = 0) -> str:
    """``"cpu"`` or ``"cuda:0"`` from a device name or an :class:`OrtDevice`."""
    name = device.name if isinstance(device, OrtDevice) else str(device).lower()
    if isinstance(device, OrtDevice):
        device_id = device.device_id()
    if name == "gpu":
        name = "cuda"
    return "cpu" if name == "cpu" else f"{name}:{int(device_id)}"


class OrtValue:
    """onnxruntime's C ``OrtValue`` (what ``OrtValue._ortvalue`` holds)."""

    def __init__(self, value: Any = None, *, elem_type: int | None = None) -> None:
        if isinstance(value, np.ndarray):
            value = Tensor(value)
        #: a Tensor, list, dict, SparseTensor or None
        self.value = value
        self._elem_type = elem_type

    # ------------------------------------------------------------ construction
    @staticmethod
    def ortvalue_from_numpy(array: Any, device: Any = "cpu", device_id: int = 0) -> OrtValue:
        """Share ``array``'s memory on the host (a non-contiguous one is copied first); copy
        it to a device."""
        host = np.ascontiguousarray(array)
        target = _device_string(device, device_id)
        if target == "cpu":
            return OrtValue(host)
        with ort_errors():
            return OrtValue(Tensor.from_numpy(host, target))

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(array: Any, onnx_element_type: int) -> OrtValue:
        """``array``'s bytes as ONNX element type ``onnx_element_type`` (bfloat16 held in
        uint16, for example)."""
        return OrtValue(np.ascontiguousarray(array), elem_type=int(onnx_element_type))

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any,
                                     device: Any = "cpu", device_id: int = 0) -> OrtValue:
        dtype = element_dtype(element_type)
        target = _device_string(device, device_id)
        with ort_errors():
            t = Tensor.empty(tuple(int(d) for d in shape), dtype, target)
        if t.is_host and dtype == np.dtype(object):
            t.value[...] = ""
        return OrtValue(t)

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: SparseTensor) -> OrtValue:
        return OrtValue(sparse_tensor)

    @staticmethod
    def from_dlpack(data: Any, is_bool_tensor: bool = False) -> OrtValue:
        """Wrap a DLPack capsule or producer without copying."""
        t = Tensor.from_dlpack(_producer(data))
        if is_bool_tensor and t.is_host and t.dtype == np.uint8:
            t = Tensor(t.value.view(np.bool_))
        return OrtValue(t)

    # ------------------------------------------------------------ reading
    @property
    def tensor(self) -> Tensor:
        if not isinstance(self.value, Tensor):
            raise Fail(f"this OrtValue holds {self.data_type()}, not a tensor")
        return self.value

    def numpy(self) -> Any:
        """A tensor's values (the shared array on the host, a copy from a device); a
        sequence as a list of arrays, a map as a dict."""
        v = self.value
        if isinstance(v, Tensor):
            return v.numpy()
        if isinstance(v, SparseTensor):
            raise Fail("this OrtValue holds a sparse tensor: use as_sparse_tensor()")
        return v

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.tensor.numpy()
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)

    def shape(self) -> list[int]:
        if isinstance(self.value, SparseTensor):
            return self.value.dense_shape()
        return list(self.tensor.shape)

    def element_type(self) -> int:
        if self._elem_type is not None:
            return self._elem_type
        if isinstance(self.value, SparseTensor):
            return onnx_elem_type(self.value._values.dtype)
        return onnx_elem_type(self.tensor.dtype)

    def data_type(self) -> str:
        v = self.value
        if isinstance(v, Tensor):
            return type_string(self.element_type())
        if isinstance(v, SparseTensor):
            return v.data_type()
        if isinstance(v, list):
            inner = OrtValue(v[0]).data_type() if v else "tensor(float)"
            return f"seq({inner})"
        if isinstance(v, dict):
            return "map"
        return "optional"

    def device_name(self) -> str:
        if isinstance(self.value, Tensor):
            return device_type(self.value.device)
        return "cpu"

    def is_tensor(self) -> bool:
        return isinstance(self.value, Tensor)

    def is_sparse_tensor(self) -> bool:
        return isinstance(self.value, SparseTensor)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self.value, list)

    def has_value(self) -> bool:
        return self.value is not None

    def data_ptr(self) -> int:
        return self.tensor.data_ptr

    def tensor_size_in_bytes(self) -> int:
        return self.tensor.nbytes

    def update_inplace(self, array: Any) -> None:
        """Copy ``array`` (same shape and dtype) into this tensor's buffer."""
        a = np.asarray(array)
        t = self.tensor
        if a.shape != t.shape or a.dtype != t.dtype:
            raise InvalidArgument(f"update_inplace: got {a.dtype}{list(a.shape)}, this "
                                  f"OrtValue is {t.dtype}{list(t.shape)}")
        t.copy_from(np.ascontiguousarray(a))

    def as_sparse_tensor(self) -> SparseTensor:
        if not isinstance(self.value, SparseTensor):
            raise Fail("This OrtValue does not contain SparseTensor. Check data_type() value.")
        return self.value

    # ------------------------------------------------------------ DLPack
    def to_dlpack(self) -> Any:
        return self.tensor.__dlpack__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return tuple(int(x) for x in self.tensor.__dlpack_device__())  # type: ignore

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, {self.device_name()})"


class OrtValueVector(list):
    """A list of C ``OrtValue``\\ s (``run_with_ort_values``' result)."""

    def push_back(self, value: OrtValue) -> None:
        self.append(value)


# ---------------------------------------------------------------- DLPack capsules
class _Capsule:
    """A bare DLPack capsule as a producer numpy and onnx-ep can consume."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule
        self.device = _capsule_info(capsule)[0]

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def _producer(data: Any) -> Any:
    if hasattr(data, "__dlpack__"):
        return data
    if type(data).__name__ == "PyCapsule":
        return _Capsule(data)
    raise InvalidArgument(f"from_dlpack: expected a DLPack capsule or an object with "
                          f"__dlpack__, got {type(data).__name__}")


_capsule_api = ctypes.pythonapi
_capsule_api.PyCapsule_GetName.restype = ctypes.c_char_p
_capsule_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_capsule_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capsule_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _capsule_info(capsule: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((device type, device id), (dtype code, bits))`` read from a capsule's DLTensor
    without consuming it (dlpack.h layouts: a versioned tensor has 32 bytes of header)."""
    name = _capsule_api.PyCapsule_GetName(capsule)
    if name not in (b"dltensor", b"dltensor_versioned"):
        raise InvalidArgument(f"not an unused DLPack capsule (its name is {name!r})")
    ptr = _capsule_api.PyCapsule_GetPointer(capsule, name)
    base = ptr + (32 if name == b"dltensor_versioned" else 0)
    dev = (ctypes.c_int32 * 2).from_address(base + 8)
    dtype = (ctypes.c_uint8 * 2).from_address(base + 20)
    return (int(dev[0]), int(dev[1])), (int(dtype[0]), int(dtype[1]))


def is_dlpack_uint8_tensor(capsule: Any) -> bool:
    """Whether a DLPack capsule holds uint8 (DLPack's unsigned code 1, 8 bits)."""
    return _capsule_info(capsule)[1] == (1, 8)


# ---------------------------------------------------------------- sparse tensors
class _View:
    def __init__(self, **arrays: np.ndarray) -> None:
        self._arrays = arrays

    def __getattr__(self, name: str) -> Any:
        try:
            a = self._arrays[name]
        except KeyError:
            raise AttributeError(name) from None
        return lambda: _read_only(a)


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


class SparseTensor:
    """A sparse tensor on the host (COO, CSR or block-sparse), as onnxruntime builds them.

    onnx-ep keeps sparse tensors on the host: ``to_cuda`` raises.
    """

    def __init__(self, fmt: OrtSparseFormat, dense_shape: Sequence[int], values: np.ndarray,
                 **indices: np.ndarray) -> None:
        self._format = fmt
        self._dense_shape = [int(d) for d in dense_shape]
        self._values = np.asarray(values)
        self._indices = {k: np.asarray(v, dtype=np.int64) for k, v in indices.items()}

    @staticmethod
    def sparse_coo_from_numpy(dense_shape: Sequence[int], values: Any, coo_indices: Any,
                              ort_device: Any = None) -> SparseTensor:
        _host_only(ort_device)
        return SparseTensor(OrtSparseFormat.ORT_SPARSE_COO, dense_shape, values,
                            indices=coo_indices)

    @staticmethod
    def sparse_csr_from_numpy(dense_shape: Sequence[int], values: Any, inner_indices: Any,
                              outer_indices: Any, ort_device: Any = None) -> SparseTensor:
        _host_only(ort_device)
        return SparseTensor(OrtSparseFormat.ORT_SPARSE_CSRC, dense_shape, values,
                            inner=inner_indices, outer=outer_indices)

    def format(self) -> OrtSparseFormat:
        return self._format

    def dense_shape(self) -> list[int]:
        return list(self._dense_shape)

    def values(self) -> np.ndarray:
        return _read_only(self._values)

    def data_type(self) -> str:
        return "sparse_" + type_string(onnx_elem_type(self._values.dtype))

    def device_name(self) -> str:
        return "cpu"

    def as_coo_view(self) -> Any:
        self._expect(OrtSparseFormat.ORT_SPARSE_COO)
        return _View(indices=self._indices["indices"])

    def as_csrc_view(self) -> Any:
        self._expect(OrtSparseFormat.ORT_SPARSE_CSRC)
        return _View(inner=self._indices["inner"], outer=self._indices["outer"])

    def as_blocksparse_view(self) -> Any:
        self._expect(OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE)
        return _View(indices=self._indices["indices"])

    def to_cuda(self, ort_device: Any) -> SparseTensor:
        raise Fail("SparseTensor.to_cuda: onnx-ep keeps sparse tensors on the host")

    def dense(self) -> np.ndarray:
        """The dense array (how a sparse feed reaches a model input)."""
        out = np.zeros(self._dense_shape, self._values.dtype)
        flat = out.reshape(-1) if out.ndim != 1 else out
        if self._format == OrtSparseFormat.ORT_SPARSE_COO:
            idx = self._indices["indices"]
            if idx.ndim == 2:
                out[tuple(idx.T)] = self._values
            else:
                flat[idx] = self._values
        elif self._format == OrtSparseFormat.ORT_SPARSE_CSRC:
            outer, inner = self._indices["outer"], self._indices["inner"]
            rows = np.repeat(np.arange(len(outer) - 1), np.diff(outer))
            out[rows, inner] = self._values
        else:
            raise Fail("SparseTensor: block-sparse values cannot be densified by onnx-ep")
        return out

    def _get_c_tensor(self) -> SparseTensor:
        return self

    def _expect(self, fmt: OrtSparseFormat) -> None:
        if self._format != fmt:
            raise Fail(f"this sparse tensor is {self._format.name}, not {fmt.name}")


def _host_only(device: Any) -> None:
    if isinstance(device, OrtDevice) and device.device_type() != 0:
        raise Fail("onnx-ep keeps sparse tensors on the host; make them with "
                   "OrtDevice.make('cpu', 0)")
