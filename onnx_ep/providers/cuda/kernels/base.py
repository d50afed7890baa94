"""The base of every CUDA kernel, the dtype table, and what launches share.

:class:`CudaKernel` is the one root: the Kernel protocol's answers (capture-supported, no
workspace), a per-node :meth:`~CudaKernel.bind` whose ``parity`` is
:meth:`~CudaKernel.parity_for` the node's dtype, :meth:`~CudaKernel.function` to load a
compiled symbol of the family's ``kernels/<source>.cu``, :meth:`~CudaKernel.launch` and
:meth:`~CudaKernel.fail`. Two specialisations derive from it:

- :class:`FloatKernel`, the float32 / float16 / bfloat16 families (gemm, conv, pool): one
  dtype check for every input, then the op's :meth:`~FloatKernel.check`; a promise per dtype.
- :class:`BoundRow` and :class:`BoundLaunch`, table rows whose nodes bind to one compiled
  symbol and replay a prebuilt launch per (pointers, shapes) (elementwise, activation,
  cast): the hot path of decode steps, one dict lookup and one driver call.

Kernels launch on ``ctx.stream`` only, never allocate, synchronize or copy to or from the
host, so they are all capture-supported. Shapes come from the DeviceTensors
(``inputs[i].shape``, the pre-bound ``outputs[i].shape``), never from the static specs.

Importing this module does not import ``cuda``: the driver loads on the first launch.
"""

from __future__ import annotations

import copy
import ctypes
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import ml_dtypes
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
from onnx_ep.providers.cuda import launch, nvrtc
from onnx_ep.providers.cuda.device import get_device

# the grid-stride block and grid live with the launches; kernel modules import them from here
from onnx_ep.providers.cuda.launch import BLOCK, grid_1d

# ---------------------------------------------------------------- dtypes

BF16 = np.dtype(ml_dtypes.bfloat16)

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
    """The rows of ml_dtypes' types that this ml_dtypes has. The one-byte formats are
    ``ep_lowfloat.cuh``'s structs, one element per byte."""
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


def suffix(dtype: Any) -> str:
    """The symbol suffix of ``dtype`` (``"f32"``, ``"bf16"``, ...): kernels are named
    ``<op>_<suffix>``.

    :raises KeyError: a dtype :data:`TYPES` lacks.
    """
    return TYPES[np.dtype(dtype)][0]


#: the float dtypes the numeric families (reduce, softmax, ...) accept
FLOATS: frozenset[np.dtype] = frozenset(
    np.dtype(d) for d in (np.float32, np.float16, np.float64, BF16))
#: the integer dtypes the reduce family accepts
INTS: frozenset[np.dtype] = frozenset({np.dtype(np.int32), np.dtype(np.int64)})


def dtype_names(dtypes: Iterable[np.dtype]) -> str:
    """``dtypes`` by name, sorted and comma-separated (for "not one of ..." reasons)."""
    return ", ".join(sorted(str(d) for d in dtypes))


def dtype_support(dtype: Any, allowed: frozenset[np.dtype], what: str = "input") -> Support:
    """YES when ``dtype`` is in ``allowed``, else a reason naming what is."""
    dt = np.dtype(dtype)
    if dt in allowed:
        return Support.YES
    return Support.no(f"{what} dtype {dt} is not one of {dtype_names(allowed)}")


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
    if dt == BF16:
        return Parity.tolerance(max(parity.rtol, 2.0 ** -7), max(parity.atol, 2.0 ** -126))
    return parity


# ---------------------------------------------------------------- kernel arguments

#: ctypes types of kernel arguments, ``(value, type)`` pairs (``None``: a struct by value)
PTR = ctypes.c_void_p
I64 = ctypes.c_int64
I32 = ctypes.c_int32
U64 = ctypes.c_uint64
F32 = ctypes.c_float
F64 = ctypes.c_double

#: the most dims a kernel geometry carries (inputs of higher rank are coalesced first)
MAX_DIMS = 8


#: recorded calls a :func:`replayed` kernel keeps per bound node (cleared when full)
REPLAYS_PER_NODE = 64


def _signature(v: Any) -> Any:
    """What fixes a value's part in a launch-only call: pointer, shape and dtype of a device
    tensor, a planned spec as it is; anything else (a host array) makes the call unkeyed."""
    ptr = getattr(v, "ptr", None)
    if ptr is not None:
        return (int(ptr), v.shape, v.dtype)
    if v is None or isinstance(v, TensorSpec):
        return v
    raise TypeError(type(v).__name__)


def replayed(execute: Callable[..., None]) -> Callable[..., None]:
    """Memoize a launch-only ``execute_with_workspace``.

    Its device work must depend only on the node, the stream, and the pointers, shapes and
    dtypes of its inputs, outputs and workspace, and go through ``self.launch``,
    :mod:`..copies` or :func:`..blas.run` (what a capture-supported kernel does). The first
    call at a key runs ``execute`` inside a :class:`~..launch.Recording`; later calls at
    that key enqueue the recorded launches again, skipping the geometry, checks and
    argument packing that dominate an eager step of small tensors. A call that replaced an
    entry of ``outputs`` (a view) is not memoized.
    """

    @functools.wraps(execute)
    def run(self: Any, ctx: ExecutionContext, inputs: Sequence[Any], outputs: list[Any],
            workspace: Any) -> None:
        # a planned step passes the same tensor objects every run: found by identity first
        # (each entry holds its objects, so their ids cannot be reused while it lives)
        seen = self.__dict__.get("_replays_by_id")
        ids = (ctx, id(workspace), *map(id, inputs), *map(id, outputs))
        if seen is not None:
            hit = seen.get(ids)
            if hit is not None:
                for call in hit[1]:
                    call()
                return
        try:
            key = (ctx, ctx.stream, workspace.buffer.ptr if workspace is not None and
                   workspace.nbytes else 0, tuple(map(_signature, inputs)),
                   tuple(map(_signature, outputs)))
        except TypeError:
            execute(self, ctx, inputs, outputs, workspace)
            return
        memo = self.__dict__.get("_replays")
        if memo is None:
            memo = self.__dict__["_replays"] = {}
            seen = self.__dict__["_replays_by_id"] = {}
        elif seen is None:
            seen = self.__dict__["_replays_by_id"] = {}
        calls = memo.get(key)
        if calls is None:
            before = list(outputs)
            with launch.Recording() as rec:
                execute(self, ctx, inputs, outputs, workspace)
            if not all(a is b for a, b in zip(before, outputs)):
                return
            calls = launch.remember(memo, key, tuple(rec.calls), REPLAYS_PER_NODE)
        else:
            for call in calls:
                call()
        launch.remember(seen, ids, ((tuple(inputs), tuple(outputs), workspace), calls),
                        REPLAYS_PER_NODE)

    return run


def struct_arg(value: ctypes.Structure) -> tuple[Any, Any]:
    """A struct kernel argument: cuda-bindings copies it from its address (type ``None``)."""
    return (value, None)


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


def prod(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """C-contiguous strides in elements."""
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * int(shape[i + 1])
    return out


def normalize_axis(axis: int, rank: int) -> int | None:
    """``axis`` in ``[0, rank)``, or ``None`` when it is out of range."""
    a = axis + rank if axis < 0 else axis
    return a if 0 <= a < rank else None


def block_for(n: int) -> int:
    """Threads of a block that reduces ``n`` values: a power of two in [32, :data:`BLOCK`]
    (``EP_BLOCK`` of ep_block.cuh, the length of the reduction's shared scratch)."""
    b = 32
    while b < n and b < BLOCK:
        b *= 2
    return b


def launch_geometry(n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Grid and block of a grid-stride loop over ``n`` items (:func:`grid_1d` of
    :data:`BLOCK`-thread blocks)."""
    return grid_1d(int(n), BLOCK), (BLOCK, 1, 1)


def static_shape(spec: TensorSpec | None) -> tuple[int, ...] | None:
    """The spec's shape when every dim is a known int, else ``None``."""
    if spec is None or not spec.is_static:
        return None
    return tuple(int(d) for d in spec.shape)


def optional_input(items: Sequence[Any], i: int) -> Any:
    """``items[i]``, or ``None`` past the end (an omitted trailing optional input)."""
    return items[i] if len(items) > i else None


def attr_str(value: Any) -> str:
    """A string attribute as text (onnx gives bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------- the base


def kernel_function(source: str, symbol: str, ordinal: int) -> Any:
    """The compiled ``symbol`` of ``kernels/<source>.cu`` on device ``ordinal``."""
    return nvrtc.get_function(source, symbol, get_device(ordinal))


class CudaKernel:
    """Base of every CUDA kernel: capture-supported, no workspace, per-node binding.

    Subclasses set ``source`` (the ``kernels/<source>.cu`` family) and implement
    ``supports``, ``infer_outputs`` (the default sizes nothing) and
    ``execute_with_workspace``. :meth:`bind` gives each node its own copy, whose ``parity``
    is :meth:`parity_for` the node's dtype.
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
    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.SUPPORTED

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE

    def bind(self, meta: NodeMeta) -> CudaKernel:
        """A per-node copy whose ``parity`` is the promise for this node's dtype."""
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
    def function(self, symbol: str, tensor: Any, source: str | None = None) -> Any:
        """The compiled ``symbol`` of this family (or of ``kernels/<source>.cu``) for
        ``tensor``'s device."""
        return kernel_function(source or self.source, symbol, tensor.device)

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               args: Sequence[tuple[Any, Any]], stream: Any, shared_bytes: int = 0) -> None:
        """Launch ``fn`` on ``stream``; arguments seen before reuse a prebuilt launch
        (:func:`~onnx_ep.providers.cuda.launch.launch_cached`)."""
        launch.launch_cached(fn, grid, block, args, stream, shared_bytes)

    def fail(self, ctx: ExecutionContext, message: str) -> NodeError:
        """The :exc:`NodeError` to raise for the node ``ctx`` runs."""
        return NodeError(f"(cuda) {message}", node=ctx.node.name, op_type=ctx.node.op_type)

    def workspace_ptr(self, ctx: ExecutionContext, workspace: Any, nbytes: int) -> int:
        """The device address of the step's workspace holding ``nbytes`` (0 when none is
        needed).

        :raises NodeError: the plan reserved no workspace; :exc:`WorkspaceTooSmall` when it
            reserved fewer bytes (workspace_requirement sized through another formula).
        """
        if not nbytes:
            return 0
        if workspace is None:
            raise self.fail(ctx, f"needs {nbytes} workspace bytes but got none")
        workspace.require(nbytes)
        return int(workspace.buffer.ptr)


class FloatKernel(CudaKernel):
    """Base of the float32 / float16 / bfloat16 families: set ``key``, optionally
    ``parities``, override :meth:`check` and the rest.

    :param op_type: the ONNX operator. :param since: first opset implemented.
    :param parities: promise per dtype name; :meth:`parity_for` picks the node's.
    """

    #: the dtypes these families instantiate, by name
    FLOAT_NAMES: tuple[str, ...] = ("float32", "float16", "bfloat16")
    parities: dict[str, Parity] | None = None

    def __init__(self, op_type: str, since: int = 1,
                 parities: dict[str, Parity] | None = None) -> None:
        super().__init__(op_type, since)
        if parities is not None:
            self.parities = dict(parities)
            self.parity = self.parities["float32"]

    def supports(self, meta: NodeMeta) -> Support:
        """float32 / float16 / bfloat16, every float input of one dtype; then :meth:`check`."""
        x = meta.inputs[0] if meta.inputs else None
        if x is None:
            return Support.no("input 0 is missing")
        name = np.dtype(x.dtype).name
        if name not in self.FLOAT_NAMES:
            return Support.no(f"dtype {name} is not one of {', '.join(self.FLOAT_NAMES)}")
        for i, spec in enumerate(meta.inputs):
            if spec is not None and np.dtype(spec.dtype).name != name:
                return Support.no(f"input {i} is {np.dtype(spec.dtype).name} but input 0 "
                                  f"is {name}")
        return self.check(meta)

    def check(self, meta: NodeMeta) -> Support:
        """Op-specific acceptance (shapes, attributes). Override."""
        return Support.YES

    def parity_for(self, dtype: Any) -> Parity:
        """The promise of :attr:`parities` for ``dtype`` (``parity`` where it has none)."""
        if dtype is None or self.parities is None:
            return self.parity
        return self.parities.get(np.dtype(dtype).name, self.parity)

    @staticmethod
    def plan_time(meta: NodeMeta, fn: Callable[[], WorkspaceRequirement]) -> WorkspaceRequirement:
        """``fn()``, or NONE when ``meta``'s shapes are not static yet."""
        if any(s is not None and not s.is_static for s in meta.inputs):
            return WorkspaceRequirement.NONE
        return fn()


# ---------------------------------------------------------------- bound launches

#: flat grids of up to this many blocks launch as they are (under one wave on any recent
#: GPU); larger ones are capped at one wave of resident blocks
FLAT_UNCAPPED_BLOCKS = 256


def flat_pack(itemsizes: Sequence[int]) -> int:
    """Elements per 16-byte pack of ep_flat.cuh: 16 bytes of the widest operand."""
    return 16 // max(itemsizes)


def flat_unroll(pack: int) -> int:
    """Packs per thread per grid step (ep_flat.cuh ``flat_unroll``)."""
    return 1


def flat_geometry(n: int, operands: Sequence[tuple[int, int, bool]], out: tuple[int, int],
                  wave: Callable[[], int]
                  ) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """Grid and block of the flat path (ep_flat.cuh), or ``None`` when the kernel will not
    take it because a pointer is not aligned to its pack.

    The same test as the kernel's: it decides the speed, never the result (every path is a
    grid-stride loop, correct for any grid).

    :param operands: ``(pointer, itemsize, is_scalar)`` per input; a scalar is read once.
    :param out: ``(pointer, itemsize)`` of the output.
    :param wave: blocks resident on the device at once; asked only for large grids.
    """
    v = flat_pack([size for _, size, _ in operands] + [out[1]])
    for ptr, size, scalar in (*operands, (*out, False)):
        if not scalar and int(ptr) % (v * size):
            return None
    blocks = max(1, -(-int(n) // (v * flat_unroll(v) * BLOCK)))
    if blocks > FLAT_UNCAPPED_BLOCKS:
        blocks = min(blocks, max(FLAT_UNCAPPED_BLOCKS, wave()))
    return (blocks, 1, 1), (BLOCK, 1, 1)


class BoundRow(CudaKernel):
    """A family table row whose nodes run through ``self.bind(meta)``.

    The executor runs the bound node; an unbound row is not run by it, and
    ``execute_with_workspace`` binds on each call only to keep the row a complete Kernel.
    """

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        self.bind(ctx.node).execute_with_workspace(  # type: ignore[attr-defined]
            ctx, inputs, outputs, workspace)


class BoundLaunch(CudaKernel):
    """A node bound to one compiled symbol of ``kernels/<source>.cu``: launch only.

    The protocol's bookkeeping that every bound elementwise/activation/cast node shares,
    and the prebuilt-launch cache: subclasses write :meth:`launch_key`, :meth:`geometry`
    and :meth:`arguments`, and set ``source``. Capture-safe: it never allocates or
    synchronizes.
    """

    def __init__(self, row: Any, symbol: str) -> None:
        self.row = row
        self.key: OpKey = row.key
        self.parity: Parity = row.parity
        self.symbol = symbol
        self._functions: dict[int, Any] = {}
        self._waves: dict[int, int] = {}
        #: prebuilt launches by :meth:`launch_key`
        self._launches: dict[tuple[Any, ...], Any] = {}

    def __repr__(self) -> str:
        return f"{type(self.row).__name__}({self.key}, {self.symbol})"

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        return self.row.infer_outputs(meta)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        # steady state: one dict lookup and one driver call (a plan's pointers are fixed)
        y = outputs[0]
        key = self.launch_key(ctx.stream, inputs, y)
        rec = self._launches.get(key)
        if rec is None:
            self.check(ctx, inputs, y)
            rec = self.prepare(ctx.stream, inputs, y, key)
        rec()

    def check(self, ctx: ExecutionContext, inputs: Sequence[Any], y: Any) -> None:
        """Raise a NodeError for inputs the launch cannot take (once per launch key, before
        its launch is built); rows checked at placement have nothing to add."""

    def launch_key(self, stream: Any, inputs: Sequence[Any], y: Any) -> tuple[Any, ...]:
        """What fixes the launch writing ``y`` from ``inputs`` on ``stream``."""
        raise NotImplementedError

    def geometry(self, n: int, inputs: Sequence[Any], y: Any
                 ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """Grid and block of the launch writing the ``n`` elements of ``y``."""
        raise NotImplementedError

    def arguments(self, n: int, inputs: Sequence[Any], y: Any) -> list[tuple[Any, Any]]:
        """The kernel's ``(value, ctypes type)`` arguments (type ``None``: a struct by value)."""
        raise NotImplementedError

    def prepare(self, stream: Any, inputs: Sequence[Any], y: Any, key: tuple[Any, ...]) -> Any:
        """Build (and remember under ``key``) the launch writing ``y`` from ``inputs``."""
        n = prod(y.shape)
        if n == 0:
            return launch.remember(self._launches, key, launch.no_launch,
                                   launch.LAUNCHES_PER_NODE)
        grid, block = self.geometry(n, inputs, y)
        args = self.arguments(n, inputs, y)
        rec = launch.prepare(self.bound_function(y.device), grid, block, args, stream)
        return launch.remember(self._launches, key, rec, launch.LAUNCHES_PER_NODE)

    def bound_function(self, ordinal: int) -> Any:
        """The compiled :attr:`symbol` on device ``ordinal`` (looked up once per device)."""
        fn = self._functions.get(ordinal)
        if fn is None:
            fn = self._functions[ordinal] = kernel_function(self.source, self.symbol, ordinal)
        return fn

    def wave(self, ordinal: int) -> int:
        """Blocks of :data:`BLOCK` threads of this symbol resident on device ``ordinal`` at
        once (SMs x occupancy): a flat grid of this size runs in exactly one wave."""
        blocks = self._waves.get(ordinal)
        if blocks is None:
            per_sm = launch.max_active_blocks(self.bound_function(ordinal), BLOCK)
            blocks = self._waves[ordinal] = (max(1, int(per_sm))
                                             * get_device(ordinal).multiprocessors)
        return blocks
