"""DeviceTensor: a contiguous tensor in device memory, and its DLPack import/export.

A DeviceTensor is an address, a dtype and a shape; ``owner`` keeps the memory
alive (a :class:`~onnx_ep.providers.cuda.allocator.DeviceAllocation`, another
tensor for views, or an imported DLPack producer). It never owns a stream:
copies take one explicitly.

DLPack is implemented with ctypes structs (the unversioned ``DLManagedTensor``
ABI every consumer accepts) and ``PyCapsule_New``, so torch and cupy share
memory with us without copies. The struct code is device-agnostic: the
tests round-trip a numpy array through it as a kDLCPU capsule, which proves
the layout on a machine without a GPU.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import TensorSpec

# ---------------------------------------------------------------- DLPack ABI (dlpack.h)

kDLCPU = 1
kDLCUDA = 2
kDLCUDAHost = 3
kDLCUDAManaged = 13

kDLInt = 0
kDLUInt = 1
kDLFloat = 2
kDLBfloat = 4
kDLComplex = 5
kDLBool = 6


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]


def _bfloat16() -> np.dtype | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


_BF16 = _bfloat16()


def dl_dtype(dtype: Any) -> tuple[int, int, int]:
    """``(code, bits, lanes)`` of a numpy dtype.

    :raises TypeError: DLPack has no code for the dtype (strings, objects, float8).
    """
    dt = np.dtype(dtype)
    if _BF16 is not None and dt == _BF16:
        return (kDLBfloat, 16, 1)
    codes = {"b": kDLBool, "i": kDLInt, "u": kDLUInt, "f": kDLFloat, "c": kDLComplex}
    code = codes.get(dt.kind)
    if code is None or (dt.kind == "f" and dt.itemsize not in (2, 4, 8)):
        raise TypeError(f"dtype {dt} has no DLPack type code")
    return (code, dt.itemsize * 8, 1)


def np_dtype_of(code: int, bits: int, lanes: int) -> np.dtype:
    """The numpy dtype of a DLPack ``(code, bits, lanes)``.

    :raises TypeError: vector lanes or a type numpy cannot hold.
    """
    if lanes != 1:
        raise TypeError(f"DLPack dtype with {lanes} lanes is not supported")
    if code == kDLBfloat and bits == 16 and _BF16 is not None:
        return _BF16
    kinds = {kDLInt: "i", kDLUInt: "u", kDLFloat: "f", kDLComplex: "c"}
    if code == kDLBool and bits == 8:
        return np.dtype(np.bool_)
    kind = kinds.get(code)
    if kind is None or bits % 8:
        raise TypeError(f"DLPack dtype (code={code}, bits={bits}) is not supported")
    return np.dtype(f"{kind}{bits // 8}")


# ---------------------------------------------------------------- capsules

# names handed to PyCapsule_New / PyCapsule_SetName must outlive every capsule: module constants
_NAME = b"dltensor"
_USED_NAME = b"used_dltensor"

_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi))
# the destructor receives the dying capsule: take it as a raw address, never as py_object
# (a py_object argument would resurrect and re-destroy it)
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

# export records by DLManagedTensor address: the struct, its shape/strides arrays and the
# owner stay alive until the consumer (or the unconsumed capsule's destructor) calls the deleter
_exports: dict[int, tuple[Any, ...]] = {}
_exports_lock = threading.Lock()


def _delete_export(managed: Any) -> None:
    addr = ctypes.cast(managed, ctypes.c_void_p).value
    with _exports_lock:
        _exports.pop(addr, None)


_deleter = _DELETER(_delete_export)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int) -> None:
    # a capsule still named "dltensor" was never consumed: we must run the deleter ourselves
    if _raw_is_valid(capsule, _NAME):
        addr = _raw_get_pointer(capsule, _NAME)
        with _exports_lock:
            _exports.pop(addr, None)


def make_capsule(ptr: int, dtype: Any, shape: Sequence[int], owner: Any,
                 device_type: int = kDLCUDA, device_id: int = 0) -> Any:
    """A ``"dltensor"`` PyCapsule describing ``ptr`` as a C-contiguous tensor.

    ``owner`` is referenced until the consumer calls the deleter (or the
    capsule dies unconsumed).
    """
    shape = tuple(int(d) for d in shape)
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides = [1] * ndim
    for i in range(ndim - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    code, bits, lanes = dl_dtype(dtype)
    managed = DLManagedTensor()
    t = managed.dl_tensor
    t.data = ptr
    t.device = DLDevice(device_type, device_id)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, lanes)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _deleter
    addr = ctypes.addressof(managed)
    with _exports_lock:
        _exports[addr] = (managed, shape_arr, strides_arr, owner)
    return _capsule_new(addr, _NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


class DLPackImport:
    """Keeps a consumed DLPack tensor alive; calls its deleter when collected.

    :ivar ptr: data address (``data + byte_offset``). :ivar dtype, shape, strides
    (elements, or ``None`` for compact), device_type, device_id.
    """

    def __init__(self, capsule: Any, producer: Any) -> None:
        addr = _capsule_get_pointer(capsule, _NAME)   # raises ValueError if not "dltensor"
        _capsule_set_name(capsule, _USED_NAME)          # consumed: the producer must not free
        self._managed = ctypes.cast(addr, ctypes.POINTER(DLManagedTensor))
        self.producer = producer
        t = self._managed.contents.dl_tensor
        self.device_type = int(t.device.device_type)
        self.device_id = int(t.device.device_id)
        self.dtype = np_dtype_of(t.dtype.code, t.dtype.bits, t.dtype.lanes)
        self.shape = tuple(int(t.shape[i]) for i in range(t.ndim))
        self.strides = (tuple(int(t.strides[i]) for i in range(t.ndim))
                        if t.strides else None)
        self.ptr = int(t.data or 0) + int(t.byte_offset)

    def is_contiguous(self) -> bool:
        """True when the strides (if any) are C-contiguous (size-1 dims ignored)."""
        if self.strides is None:
            return True
        expect = 1
        for dim, stride in zip(reversed(self.shape), reversed(self.strides)):
            if dim != 1 and stride != expect:
                return False
            expect *= dim
        return True

    def __del__(self) -> None:
        managed = getattr(self, "_managed", None)
        if managed is not None:
            self._managed = None
            deleter = managed.contents.deleter
            if deleter:
                deleter(managed)


# ---------------------------------------------------------------- DeviceTensor

class DeviceTensor:
    """A C-contiguous tensor in device memory.

    :param ptr: device address of element 0.
    :param dtype: numpy dtype (``ml_dtypes.bfloat16`` for bfloat16).
    :param shape: dims (ints).
    :param device: CUDA device ordinal.
    :param owner: whatever keeps the memory alive (allocation, base tensor, producer).
    :ivar size, nbytes: elements and bytes (the shape is fixed, so they are computed once).
    """

    __slots__ = ("ptr", "dtype", "shape", "device", "owner", "size", "nbytes")

    def __init__(self, ptr: int, dtype: Any, shape: Sequence[int], device: int = 0,
                 owner: Any = None) -> None:
        self.ptr = int(ptr)
        self.dtype = np.dtype(dtype)
        self.shape = tuple(map(int, shape))
        self.device = int(device)
        self.owner = owner
        # fixed at construction and read on every launch: computed once, not per read
        n = 1
        for d in self.shape:
            n *= d
        self.size = n
        self.nbytes = n * self.dtype.itemsize

    def __repr__(self) -> str:
        return (f"DeviceTensor(cuda:{self.device}, {self.dtype}, {self.shape}, "
                f"ptr=0x{self.ptr:x})")

    # ------------------------------------------------------------ metadata
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """C-contiguous strides in bytes (numpy's convention)."""
        out = [self.dtype.itemsize] * self.ndim
        for i in range(self.ndim - 2, -1, -1):
            out[i] = out[i + 1] * self.shape[i + 1]
        return tuple(out)

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.dtype, self.shape)

    def view(self, dtype: Any, shape: Sequence[int], offset_bytes: int = 0) -> DeviceTensor:
        """A tensor over this one's bytes from ``offset_bytes`` (keeps this one alive).

        :raises ValueError: the view reaches past this tensor's bytes.
        """
        v = DeviceTensor(self.ptr + int(offset_bytes), dtype, shape, self.device, owner=self)
        if offset_bytes < 0 or offset_bytes + v.nbytes > self.nbytes:
            raise ValueError(f"view of {v.nbytes} bytes at offset {offset_bytes} does not fit "
                             f"in a tensor of {self.nbytes} bytes")
        return v

    # ------------------------------------------------------------ host copies
    def numpy(self, stream: Any) -> np.ndarray:
        """Copy to a new numpy array and synchronize ``stream`` (not capture-safe)."""
        from onnx_ep.providers.cuda import copies

        out = np.empty(self.shape, dtype=self.dtype)
        copies.copy_dtoh(out, self.ptr, stream)
        stream.synchronize()
        return out

    @classmethod
    def from_numpy(cls, arr: Any, allocator: Any, stream: Any,
                   holder: str = "transfer", role: Any = None) -> DeviceTensor:
        """Upload ``arr`` into a new block from ``allocator`` (async on ``stream``).

        :param role: ledger role (default ``Role.ACTIVATIONS``).
        """
        from onnx_ep.core.memory import Role
        from onnx_ep.providers.cuda import copies

        host = np.asarray(arr, order="C")   # ascontiguousarray would make 0-d 1-d
        block = allocator.allocate(host.nbytes, role or Role.ACTIVATIONS, holder)
        copies.copy_htod(block.ptr, host, stream)
        return cls(block.ptr, host.dtype, host.shape, allocator.device.ordinal, owner=block)

    # ------------------------------------------------------------ DLPack
    def __dlpack_device__(self) -> tuple[int, int]:
        return (kDLCUDA, self.device)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None,
                   dl_device: Any = None, copy: Any = None) -> Any:
        """Export as a ``"dltensor"`` capsule, zero-copy.

        ``stream`` is the consumer's stream as an int (``None`` or 1: the
        legacy default stream, 2: per-thread default, -1: no synchronization).
        Our work runs on the provider's stream, so the consumer's stream is
        made to wait for it with an event (no host block).
        """
        if copy:
            raise BufferError("DeviceTensor exports without copying; copy=True is unsupported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export cuda:{self.device} to DLPack device {dl_device}")
        if stream != -1:
            _order_consumer(self.device, 1 if stream is None else int(stream))
        return make_capsule(self.ptr, self.dtype, self.shape, self, kDLCUDA, self.device)

    @classmethod
    def from_dlpack(cls, obj: Any, stream: Any = None) -> DeviceTensor:
        """Wrap a CUDA DLPack producer (torch, cupy, ...) without copying; keeps it alive.

        :param stream: the :class:`~onnx_ep.providers.cuda.device.Stream` that
            will use the tensor (default: the provider's stream); the producer
            orders its pending work before it.
        :raises TypeError: not on a CUDA device, not contiguous, or an unsupported dtype.
        """
        from onnx_ep.providers.cuda.device import get_device

        dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else None
        if dev is not None and int(dev[0]) != kDLCUDA:
            raise TypeError(f"from_dlpack needs a CUDA tensor, got DLPack device {tuple(dev)}; "
                            f"use DeviceTensor.from_numpy for host data")
        ordinal = int(dev[1]) if dev is not None else 0
        if stream is None:
            stream = get_device(ordinal).default_stream
        imported = DLPackImport(obj.__dlpack__(stream=stream.ptr), obj)
        if imported.device_type != kDLCUDA:
            raise TypeError(f"from_dlpack needs a CUDA tensor, got device type "
                            f"{imported.device_type}")
        if not imported.is_contiguous():
            raise TypeError(f"from_dlpack needs a C-contiguous tensor, got shape "
                            f"{imported.shape} strides {imported.strides}; call .contiguous() "
                            f"first")
        return cls(imported.ptr, imported.dtype, imported.shape, imported.device_id,
                   owner=imported)


def _order_consumer(ordinal: int, consumer_stream: int) -> None:
    """Make ``consumer_stream`` wait for the provider stream of ``ordinal`` (an event, no
    host block)."""
    from onnx_ep.providers.cuda.device import get_device
    from onnx_ep.providers.cuda.driver import check, driver

    dev = get_device(ordinal)
    ours = dev.default_stream
    if consumer_stream == ours.ptr:
        return
    drv = driver()
    event = dev.new_event()
    try:
        event.record(ours)
        check(drv.cuStreamWaitEvent(drv.CUstream(consumer_stream), event.handle, 0),
              "cuStreamWaitEvent")
    finally:
        event.close()   # destroying a recorded event is safe: the wait already holds it
