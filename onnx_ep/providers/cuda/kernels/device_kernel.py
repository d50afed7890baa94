"""What the reduce, softmax and movement families share: the dtype table, the base
class behind the Kernel protocol, and the geometry struct passed to ``.cu`` kernels.

Kernels here launch on ``ctx.stream`` only, never allocate, synchronize or copy to or
from the host, so they are all capture-supported. Shapes come from the DeviceTensors
(``inputs[i].shape``, the pre-bound ``outputs[i].shape``), never from the static specs.
"""

from __future__ import annotations

import copy
import ctypes
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import (
    CaptureSupport,
    ExecutionContext,
    NodeMeta,
    OpKey,
    Parity,
    Support,
    TensorSpec,
    WorkspaceRequirement,
)
from onnx_ep.errors import NodeError


def _bf16() -> np.dtype | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


BF16 = _bf16()

#: numpy dtype -> (symbol suffix, C++ type in the ``.cu`` files): THE table of every CUDA
#: family. A module instantiating fewer dtypes takes its view with :func:`types_of` or
#: :func:`suffixes_of`, so each suffix is spelled once.
TYPES: dict[np.dtype, tuple[str, str]] = {
    np.dtype(np.float32): ("f32", "float"),
    np.dtype(np.float16): ("f16", "__half"),
    np.dtype(np.float64): ("f64", "double"),
    np.dtype(np.int64): ("i64", "int64_t"),
    np.dtype(np.int32): ("i32", "int32_t"),
    np.dtype(np.int16): ("i16", "int16_t"),
    np.dtype(np.int8): ("i8", "int8_t"),
    np.dtype(np.uint64): ("u64", "uint64_t"),
    np.dtype(np.uint32): ("u32", "uint32_t"),
    np.dtype(np.uint16): ("u16", "uint16_t"),
    np.dtype(np.uint8): ("u8", "uint8_t"),
    np.dtype(np.bool_): ("b8", "bool"),
}


def _ml_dtypes_rows() -> dict[np.dtype, tuple[str, str]]:
    """The rows of ml_dtypes' types that this ml_dtypes has (none without it). The
    one-byte formats are ``ep_lowfloat.cuh``'s structs, one element per byte."""
    try:
        import ml_dtypes
    except ImportError:
        return {}
    rows = (("bfloat16", "bf16", "__nv_bfloat16"),
            ("float8_e4m3fn", "e4m3fn", "e4m3fn_t"), ("float8_e4m3fnuz", "e4m3fnuz", "e4m3fnuz_t"),
            ("float8_e5m2", "e5m2", "e5m2_t"), ("float8_e5m2fnuz", "e5m2fnuz", "e5m2fnuz_t"),
            ("float4_e2m1fn", "f4e2m1", "f4e2m1_t"), ("float8_e8m0fnu", "e8m0", "e8m0_t"),
            ("int4", "i4", "i4_t"), ("uint4", "u4", "u4_t"), ("int2", "i2", "i2_t"),
            ("uint2", "u2", "u2_t"))
    return {np.dtype(getattr(ml_dtypes, name)): (sfx, ctype) for name, sfx, ctype in rows
            if hasattr(ml_dtypes, name)}


TYPES.update(_ml_dtypes_rows())


def types_of(dtypes: Iterable[Any]) -> dict[np.dtype, tuple[str, str]]:
    """The rows of :data:`TYPES` for ``dtypes``, in that order: a family's view of the table.

    :raises KeyError: a dtype the table lacks.
    """
    return {np.dtype(d): TYPES[np.dtype(d)] for d in dtypes}


def suffixes_of(dtypes: Iterable[Any]) -> dict[np.dtype, str]:
    """``dtype -> symbol suffix`` for ``dtypes``, in that order (:func:`types_of`'s first
    column)."""
    return {d: row[0] for d, row in types_of(dtypes).items()}


#: the dtypes the families built on :class:`CudaKernel` instantiate (:func:`suffix`'s domain)
_TYPES: dict[np.dtype, tuple[str, str]] = types_of(
    d for d in (np.float32, np.float16, np.float64, np.int64, np.int32, np.int16, np.int8,
                np.uint8, np.bool_, BF16) if d is not None)

#: the float dtypes the numeric families (reduce, softmax) accept
FLOATS: frozenset[np.dtype] = frozenset(
    d for d in (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64), BF16)
    if d is not None)
#: the integer dtypes the reduce family accepts
INTS: frozenset[np.dtype] = frozenset({np.dtype(np.int32), np.dtype(np.int64)})

#: the most dims a kernel geometry carries (inputs of higher rank are coalesced first)
MAX_DIMS = 8


def suffix(dtype: Any) -> str:
    """The symbol suffix of ``dtype`` (``"f32"``, ``"bf16"``, ...).

    :raises KeyError: a dtype no CUDA family instantiates.
    """
    return _TYPES[np.dtype(dtype)][0]


def narrow_tolerance(dtype: Any, parity: Parity) -> Parity:
    """``parity`` widened by one unit in the last place of a float16/bfloat16 output.

    The reference accumulates narrow floats in float32 and rounds once; any other
    summation order lands within a few float32 ulps of its value, which is rarely but
    sometimes on the other side of a float16/bfloat16 rounding boundary: one output
    ulp (relative 2^-10 for float16, 2^-7 for bfloat16) is the honest bound.
    """
    dt = np.dtype(dtype)
    if dt == np.float16:
        return Parity.tolerance(max(parity.rtol, 2.0 ** -10), max(parity.atol, 2.0 ** -24))
    if BF16 is not None and dt == BF16:
        return Parity.tolerance(max(parity.rtol, 2.0 ** -7), max(parity.atol, 2.0 ** -126))
    return parity


def normalize_axis(axis: int, rank: int) -> int | None:
    """``axis`` in ``[0, rank)``, or ``None`` when it is out of range."""
    a = axis + rank if axis < 0 else axis
    return a if 0 <= a < rank else None


def prod(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def grid_1d(n: int, block: int = 256) -> tuple[int, int, int]:
    """Blocks of a grid-stride loop over ``n`` elements: at least 1, at most 65535 * 32
    (the kernels loop over the rest)."""
    return (max(1, min(-(-n // block), 65535 * 32)), 1, 1)


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """C-contiguous strides in elements."""
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * int(shape[i + 1])
    return out


class Geo(ctypes.Structure):
    """``struct Geo`` of ``ep_geo.cuh``: up to 8 sizes and strides (in elements) of an
    iteration space, passed to a kernel by value (so no device upload is needed)."""

    _fields_ = [("size", ctypes.c_int64 * MAX_DIMS), ("stride", ctypes.c_int64 * MAX_DIMS),
                ("ndim", ctypes.c_int32)]

    @classmethod
    def of(cls, sizes: Sequence[int], strides: Sequence[int]) -> Geo:
        if len(sizes) != len(strides) or len(sizes) > MAX_DIMS:
            raise ValueError(f"geometry of {len(sizes)} dims (max {MAX_DIMS}): "
                             f"sizes {list(sizes)}, strides {list(strides)}")
        g = cls()
        for i, (n, s) in enumerate(zip(sizes, strides)):
            g.size[i] = int(n)
            g.stride[i] = int(s)
        g.ndim = len(sizes)
        return g

    def dims(self) -> tuple[list[int], list[int]]:
        return ([int(self.size[i]) for i in range(self.ndim)],
                [int(self.stride[i]) for i in range(self.ndim)])


def struct_arg(value: ctypes.Structure) -> tuple[Any, Any]:
    """A struct kernel argument: cuda-bindings copies it from its address (type ``None``)."""
    return (value, None)


class LaunchOnly:
    """The protocol answers of a kernel that only launches or copies: capture-safe, no
    workspace."""

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.SUPPORTED

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE


class CudaKernel(LaunchOnly):
    """Base of the families' kernels: capture-supported, no workspace, per-node binding.

    Subclasses set ``source`` (the ``kernels/<source>.cu`` family) and implement
    ``supports``, ``infer_outputs`` and ``execute_with_workspace``. :meth:`bind` gives
    each node its own copy, whose ``parity`` is :meth:`parity_for` the node's dtype.
    """

    source: str = ""
    parity: Parity = Parity.EXACT
    aliases: dict[int, int] | None = None

    def __init__(self, op_type: str, since: int = 1, parity: Parity | None = None) -> None:
        self.key = OpKey("", op_type, since)
        if parity is not None:
            self.parity = parity

    def __repr__(self) -> str:
        return f"cuda.{type(self).__name__}({self.key})"

    # ------------------------------------------------------------ protocol
    def bind(self, meta: NodeMeta) -> CudaKernel:
        bound = copy.copy(self)
        x = meta.inputs[0] if meta.inputs else None
        bound.parity = self.parity_for(x.dtype if x is not None else None)
        return bound

    def parity_for(self, dtype: Any) -> Parity:
        """The promise for inputs of ``dtype`` (narrow floats get one output ulp)."""
        if dtype is None or self.parity.kind.value == "exact":
            return self.parity
        return narrow_tolerance(dtype, self.parity)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        return [None] * max(len(meta.output_names), 1)

    # ------------------------------------------------------------ helpers
    def function(self, symbol: str, tensor: Any) -> Any:
        """The compiled ``symbol`` of this family for ``tensor``'s device."""
        from onnx_ep.providers.cuda import nvrtc, runtime

        return nvrtc.get_function(self.source, symbol, runtime.get_device(tensor.device))

    def fail(self, ctx: ExecutionContext, message: str) -> NodeError:
        return NodeError(f"(cuda) {message}", node=ctx.node.name, op_type=ctx.node.op_type)


def launch(fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
           args: Sequence[tuple[Any, Any]], stream: Any, shared_bytes: int = 0) -> None:
    """:func:`runtime.launch_cached` (arguments seen before reuse a prebuilt launch),
    imported lazily (``import onnx_ep`` must not need cuda)."""
    from onnx_ep.providers.cuda import runtime

    runtime.launch_cached(fn, grid, block, args, stream, shared_bytes)


PTR = ctypes.c_void_p
I64 = ctypes.c_int64
I32 = ctypes.c_int32
F32 = ctypes.c_float
F64 = ctypes.c_double


def dtype_names(dtypes: Iterable[np.dtype]) -> str:
    """``dtypes`` by name, sorted and comma-separated (for "not one of ..." reasons)."""
    return ", ".join(sorted(str(d) for d in dtypes))


def dtype_support(dtype: Any, allowed: frozenset[np.dtype], what: str = "input") -> Support:
    """YES when ``dtype`` is in ``allowed``, else a reason naming what is."""
    dt = np.dtype(dtype)
    if dt in allowed:
        return Support.YES
    return Support.no(f"{what} dtype {dt} is not one of {dtype_names(allowed)}")
