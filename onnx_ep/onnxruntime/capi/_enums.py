"""onnxruntime's enums and small value types: devices, memory infos, arena configs, model
metadata. Numbers are onnxruntime's, so code that stored them keeps working.

onnx-ep plans its own memory (docs/MEMORY.md), so an allocator type, a memory type or an
arena configuration is recorded and reported back but changes nothing.
"""

from __future__ import annotations

import enum
from typing import Any


class GraphOptimizationLevel(enum.IntEnum):
    """``ORT_DISABLE_ALL`` turns onnx-ep's fusions off; the other levels leave them on."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """A hint: onnx-ep runs the nodes of one run in order either way."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    """A hint: onnx-ep's planner orders nodes topologically, stable in the model's order."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class OrtAllocatorType(enum.IntEnum):
    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtMemType(enum.IntEnum):
    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtSparseFormat(enum.IntEnum):
    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4


class OrtDeviceMemoryType(enum.IntEnum):
    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class OrtMemoryInfoDeviceType(enum.IntEnum):
    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class OrtDeviceVendorId(enum.IntEnum):
    NONE = 0
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


#: onnxruntime's device type numbers, by the names ``OrtDevice.make`` takes
_DEVICE_TYPES = {"cpu": 0, "cuda": 1, "gpu": 1, "fpga": 2, "npu": 3}
_DEVICE_NAMES = {0: "cpu", 1: "cuda", 2: "fpga", 3: "npu"}


class OrtDevice:
    """A device: type (0 CPU, 1 GPU), memory type, id and vendor.

    Both onnxruntime's Python ``OrtDevice`` (``make``, ``device_vendor_id()``) and its C
    ``OrtDevice`` (``cpu()``, ``cuda()``, ``default_memory()``) in one class.
    """

    def __init__(self, device_type: Any = 0, mem_type: int = 0, device_id: int = 0,
                 vendor_id: int = -1) -> None:
        if isinstance(device_type, OrtDevice):      # the Python class wraps a C one
            device_type, mem_type, device_id, vendor_id = (
                device_type._type, device_type._mem, device_type._id, device_type._vendor)
        self._type = int(device_type)
        self._mem = int(mem_type)
        self._id = int(device_id)
        if vendor_id < 0:
            vendor_id = OrtDeviceVendorId.NVIDIA if self._type == 1 else OrtDeviceVendorId.NONE
        self._vendor = int(vendor_id)

    @staticmethod
    def make(ort_device_name: str, device_id: int = 0, vendor_id: int = -1) -> OrtDevice:
        """``OrtDevice.make("cuda", 0)``.

        :raises InvalidArgument: an unknown device name.
        """
        kind = _DEVICE_TYPES.get(str(ort_device_name).lower())
        if kind is None:
            from onnx_ep.onnxruntime.capi._errors import InvalidArgument

            raise InvalidArgument.make(f"unknown device {ort_device_name!r}; onnx-ep knows "
                                       f"{', '.join(_DEVICE_TYPES)}")
        return OrtDevice(kind, 0, device_id, vendor_id)

    # the C class's constants
    @staticmethod
    def cpu() -> int:
        return 0

    @staticmethod
    def cuda() -> int:
        return 1

    @staticmethod
    def gpu() -> int:
        return 1

    @staticmethod
    def fpga() -> int:
        return 2

    @staticmethod
    def npu() -> int:
        return 3

    @staticmethod
    def default_memory() -> int:
        return 0

    def device_type(self) -> int:
        return self._type

    def device_id(self) -> int:
        return self._id

    def mem_type(self) -> int:
        return self._mem

    device_mem_type = mem_type

    def vendor_id(self) -> int:
        return self._vendor

    def device_vendor_id(self) -> int:
        return self._vendor

    def _get_c_device(self) -> OrtDevice:
        return self

    @property
    def name(self) -> str:
        """``"cpu"`` or ``"cuda"``: the device name onnx-ep uses (``"cuda"`` gets ``:id``)."""
        return _DEVICE_NAMES.get(self._type, "cpu")

    def __repr__(self) -> str:
        return f"OrtDevice({self.name}, id={self._id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtDevice) and (self._type, self._id, self._mem) == (
            other._type, other._id, other._mem)

    def __hash__(self) -> int:
        return hash((self._type, self._id, self._mem))


class OrtMemoryInfo:
    """Where an allocator's memory lives (``OrtMemoryInfo("Cpu", ARENA, 0, DEFAULT)``)."""

    def __init__(self, name: str, allocator_type: Any, device_id: int, mem_type: Any) -> None:
        self.name = name
        self.allocator_type = OrtAllocatorType(allocator_type)
        self.device_id = int(device_id)
        self.mem_type = OrtMemType(mem_type)
        self.device_mem_type = OrtDeviceMemoryType.DEFAULT
        gpu = name.lower().startswith(("cuda", "gpu"))
        self.device_type = OrtMemoryInfoDeviceType.GPU if gpu else OrtMemoryInfoDeviceType.CPU
        self.device_vendor_id = int(OrtDeviceVendorId.NVIDIA if gpu else 0)
        self.alignment = 0

    @staticmethod
    def create_v2(name: str, device_type: Any, vendor_id: int, device_id: int,
                  device_mem_type: Any, alignment: int, allocator_type: Any) -> OrtMemoryInfo:
        info = OrtMemoryInfo(name, allocator_type, device_id, OrtMemType.DEFAULT)
        info.device_type = OrtMemoryInfoDeviceType(device_type)
        info.device_vendor_id = int(vendor_id)
        info.device_mem_type = OrtDeviceMemoryType(device_mem_type)
        info.alignment = int(alignment)
        return info

    def __repr__(self) -> str:
        return (f"OrtMemoryInfo({self.name!r}, {self.allocator_type.name}, "
                f"device_id={self.device_id}, {self.mem_type.name})")


_ARENA_FIELDS = ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes",
                 "max_dead_bytes_per_chunk", "initial_growth_chunk_size_bytes",
                 "max_power_of_two_extend_bytes")


class OrtArenaCfg:
    """An arena configuration: ``OrtArenaCfg(max_mem, extend_strategy, initial_chunk,
    max_dead_bytes)`` or ``OrtArenaCfg({"max_mem": ..., ...})``. Recorded only."""

    def __init__(self, *args: Any) -> None:
        for f in _ARENA_FIELDS:
            setattr(self, f, -1)
        if len(args) == 1 and isinstance(args[0], dict):
            unknown = sorted(set(args[0]) - set(_ARENA_FIELDS))
            if unknown:
                from onnx_ep.onnxruntime.capi._errors import InvalidArgument

                raise InvalidArgument.make(f"OrtArenaCfg: unknown key(s) {unknown}; known: "
                                           f"{', '.join(_ARENA_FIELDS)}")
            for k, v in args[0].items():
                setattr(self, k, int(v))
        else:
            for f, v in zip(_ARENA_FIELDS[:4], args):
                setattr(self, f, int(v))


class ModelMetadata:
    """The model's metadata as onnxruntime reports it."""

    def __init__(self, producer_name: str = "", graph_name: str = "", domain: str = "",
                 description: str = "", graph_description: str = "",
                 version: int = 2**63 - 1,
                 custom_metadata_map: dict[str, str] | None = None) -> None:
        self.producer_name = producer_name
        self.graph_name = graph_name
        self.domain = domain
        self.description = description
        self.graph_description = graph_description
        self.version = version
        self.custom_metadata_map = dict(custom_metadata_map or {})

    @classmethod
    def of(cls, model: Any) -> ModelMetadata:
        """From an ``onnx.ModelProto`` (an unset model_version reads as INT64_MAX, as in
        onnxruntime)."""
        return cls(model.producer_name, model.graph.name, model.domain, model.doc_string,
                   model.graph.doc_string,
                   model.model_version if model.HasField("model_version") else 2**63 - 1,
                   {p.key: p.value for p in model.metadata_props})

