"""The Kernel protocol and its value types: the contract between the core and every provider.

A plugin author reads this file and ``plugins/hookspecs.py`` and nothing else.
See docs/KERNELS.md for a walk-through.

Lifecycle of a kernel, per node and shape signature:

1. *Placement*: the registry finds kernels whose :class:`OpKey` matches the
   node's domain, op type and opset; :meth:`Kernel.supports` (optional) may
   decline a node with a reason (an unsupported dtype or attribute value).
2. *Binding*: :meth:`Kernel.bind` (optional) returns the object that will run
   this node, so kernels can parse attributes once and keep per-node state.
3. *Planning*: :meth:`Kernel.workspace_requirement` states exact scratch bytes.
4. *Execution*: :meth:`Kernel.execute_with_workspace` runs on ``ctx.stream``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import attrs
import numpy as np

from onnx_ep.errors import WorkspaceTooSmall


def _to_dtype(value: Any) -> np.dtype:
    return np.dtype(value)


def _to_shape(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen
class OpKey:
    """Which operator a kernel implements.

    :ivar domain: ``""`` for ai.onnx, else the custom domain (``"com.example"``).
    :ivar op_type: the operator name, written once here (``"Gemm"``).
    :ivar since: the first opset version this kernel implements; the registry
        picks the kernel with the largest ``since`` not above the model's opset.
    """

    domain: str
    op_type: str
    since: int = 1

    def __str__(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"


@attrs.frozen
class TensorSpec:
    """dtype and shape of a tensor; dims may be ints or symbolic names (str) or None."""

    dtype: np.dtype = attrs.field(converter=_to_dtype)
    shape: tuple[Any, ...] = attrs.field(converter=_to_shape)

    @property
    def is_static(self) -> bool:
        """True when every dim is a concrete int."""
        return all(isinstance(d, int) for d in self.shape)

    @property
    def nbytes(self) -> int:
        """THE size formula: the planner and every executor call this, nothing else."""
        return tensor_nbytes(self.dtype, self.shape)


def tensor_nbytes(dtype: np.dtype, shape: Sequence[Any]) -> int:
    """Bytes of a dense tensor. Raises ``ValueError`` for a non-static shape."""
    n = 1
    for d in shape:
        if not isinstance(d, (int, np.integer)):
            raise ValueError(f"shape {tuple(shape)} is not static")
        n *= int(d)
    return n * np.dtype(dtype).itemsize


class ParityKind(enum.Enum):
    EXACT = "exact"
    ULP = "ulp"
    TOLERANCE = "tolerance"


@attrs.frozen
class Parity:
    """A kernel's promise against cpu_reference. The parity harness enforces it.

    Use :data:`Parity.EXACT`, :meth:`Parity.ulp` or :meth:`Parity.tolerance`.
    """

    kind: ParityKind
    max_ulp: int = 0
    rtol: float = 0.0
    atol: float = 0.0

    EXACT: ClassVar[Parity]

    @classmethod
    def ulp(cls, max_ulp: int) -> Parity:
        """At most ``max_ulp`` units in the last place from the reference."""
        return cls(ParityKind.ULP, max_ulp=max_ulp)

    @classmethod
    def tolerance(cls, rtol: float, atol: float = 0.0) -> Parity:
        """``|x - ref| <= atol + rtol * |ref|`` elementwise."""
        return cls(ParityKind.TOLERANCE, rtol=rtol, atol=atol)

    def __str__(self) -> str:
        if self.kind is ParityKind.EXACT:
            return "exact"
        if self.kind is ParityKind.ULP:
            return f"<= {self.max_ulp} ulp"
        return f"rtol={self.rtol:g}, atol={self.atol:g}"


Parity.EXACT = Parity(ParityKind.EXACT)


@attrs.frozen
class Support:
    """Whether a kernel accepts a node; a value, not a bool, so refusals explain themselves."""

    ok: bool
    reason: str = ""

    YES: ClassVar[Support]

    @classmethod
    def no(cls, reason: str) -> Support:
        return cls(False, reason)

    def __bool__(self) -> bool:
        return self.ok


Support.YES = Support(True)


@attrs.frozen
class CaptureSupport:
    """Whether a kernel may be recorded into a CUDA graph.

    A kernel that answers SUPPORTED never synchronizes, allocates, frees,
    uploads from the host or reads back to the host while its stream captures.
    """

    supported: bool
    reason: str = ""

    SUPPORTED: ClassVar[CaptureSupport]

    @classmethod
    def unsupported(cls, reason: str) -> CaptureSupport:
        return cls(False, reason)


CaptureSupport.SUPPORTED = CaptureSupport(True)


class WorkspaceLifetime(enum.Enum):
    """How long a workspace slot lives."""

    STEP_SCOPED = "step"            #: released when the run ends (success, error, cancel)
    SESSION_PERSISTENT = "session"  #: kept and reused across runs of the session


@attrs.frozen
class WorkspaceRequirement:
    """Exact scratch bytes a node needs at given shapes, and how long they live."""

    nbytes: int
    lifetime: WorkspaceLifetime = WorkspaceLifetime.STEP_SCOPED

    NONE: ClassVar[WorkspaceRequirement]

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.nbytes, (int, np.integer)) or self.nbytes < 0:
            raise ValueError(f"workspace nbytes must be an int >= 0, got {self.nbytes!r}")


WorkspaceRequirement.NONE = WorkspaceRequirement(0)


class WorkspaceView:
    """Scratch memory carved from the executor's reservation for one node.

    On the CPU the backing store is a ``uint8`` numpy array; on a device it is a
    device buffer (``base`` is then an address). Asking for more bytes than
    were planned raises :exc:`WorkspaceTooSmall`; it never under-allocates.
    """

    __slots__ = ("buffer", "nbytes", "lifetime")

    def __init__(self, buffer: Any, nbytes: int,
                 lifetime: WorkspaceLifetime = WorkspaceLifetime.STEP_SCOPED) -> None:
        self.buffer = buffer
        self.nbytes = int(nbytes)
        self.lifetime = lifetime

    def require(self, nbytes: int) -> None:
        """Raise :exc:`WorkspaceTooSmall` unless ``nbytes`` fit in this view."""
        if nbytes > self.nbytes:
            raise WorkspaceTooSmall(
                f"kernel asked for {nbytes} workspace bytes but the plan reserved "
                f"{self.nbytes}; workspace_requirement() and execute must size through "
                f"the same helper")

    def array(self, dtype: Any, shape: Sequence[int], offset: int = 0) -> np.ndarray:
        """A numpy view of ``shape`` and ``dtype`` at byte ``offset`` (CPU workspaces)."""
        dt = np.dtype(dtype)
        need = offset + tensor_nbytes(dt, shape)
        self.require(need)
        raw = self.buffer[offset:need]
        return raw.view(dt).reshape(tuple(shape))


@attrs.frozen(eq=False)
class NodeMeta:
    """Everything a kernel may know about a node at plan time.

    :ivar name: node name (generated when the model has none).
    :ivar op_type, domain: the operator.
    :ivar opset: the model's opset version for ``domain``.
    :ivar attrs: attribute values decoded to Python / numpy (subgraphs as ``Graph``).
    :ivar inputs: one :class:`TensorSpec` per input (``None`` for a missing
        optional input, or a non-tensor value such as a sequence).
    :ivar outputs: inferred output specs when known, else ``None`` entries.
    :ivar input_names, output_names: value names as in the model.
    :ivar constants: host values of the inputs that are model initializers, by input
        position (read-only numpy arrays). A kernel may size its outputs from them at
        plan time (Pad's pads, Reshape's shape); at run time a device kernel still reads
        its device copy, never these.
    """

    name: str
    op_type: str
    domain: str
    opset: int
    attrs: Mapping[str, Any]
    inputs: tuple[TensorSpec | None, ...]
    outputs: tuple[TensorSpec | None, ...] = ()
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    constants: Mapping[int, Any] = attrs.field(factory=dict)

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name``, or ``default`` when the node does not set it."""
        return self.attrs.get(name, default)

    def constant(self, index: int) -> Any:
        """The host value of input ``index`` when it is an initializer, else ``None``."""
        return self.constants.get(index)


class ExecutionContext:
    """What a kernel sees while it runs.

    :ivar node: the :class:`NodeMeta` of the node being run.
    :ivar stream: the stream to launch on (``None`` on the CPU). Never use an
        implicit current stream.
    :ivar provider: the provider name running the node.
    :ivar run_subgraph: ``run_subgraph(graph, feeds: dict) -> list`` for control
        flow kernels (If/Loop/Scan); outer-scope values resolve automatically.
    """

    __slots__ = ("node", "stream", "provider", "run_subgraph", "scope")

    def __init__(self, node: NodeMeta, *, stream: Any = None, provider: str = "",
                 run_subgraph: Callable[..., list[Any]] | None = None,
                 scope: Any = None) -> None:
        self.node = node
        self.stream = stream
        self.provider = provider
        self.run_subgraph = run_subgraph
        self.scope = scope


@runtime_checkable
class Kernel(Protocol):
    """The contract every kernel satisfies. No base class is needed.

    Optional methods a kernel may also define:

    - ``supports(meta: NodeMeta) -> Support``: decline a node with a reason.
    - ``bind(meta: NodeMeta) -> Kernel``: return the per-node object that runs
      the node (parse attributes once here). Without it the registered object
      runs every node itself.
    - ``infer_outputs(meta: NodeMeta) -> list[TensorSpec | None]``: output specs
      from input specs, used where onnx's shape inference gives none (device
      providers need every output's size at plan time).
    - ``aliases: Mapping[int, int]``: ``{output: input}`` for outputs that are a
      view of an input (Reshape, Squeeze). On a device such an output gets no
      buffer: ``outputs[j]`` arrives as its planned :class:`TensorSpec` and the
      kernel stores a view of the input there; the input's buffer stays alive
      as long as the view is used.
    """

    key: OpKey
    parity: Parity

    def capture_support(self) -> CaptureSupport:
        """Whether this node may be recorded in a CUDA graph.

        Called after a warm-up run, so it may depend on the route the last call
        took. Must tell the truth (see :class:`CaptureSupport`).
        """
        ...

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        """Exact scratch bytes for this node at the shapes in ``meta``.

        Called once per shape signature at plan time, before any run. Sized
        from the route the call will really take; :data:`WorkspaceRequirement.NONE`
        for a route that needs none. Must not allocate.
        """
        ...

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        """Run the node.

        :param ctx: the node, provider and stream.
        :param inputs: one tensor per node input (``None`` for a missing optional input).
        :param outputs: one slot per node output. A provider that plans output
            buffers passes them pre-bound; otherwise (the CPU reference) the
            kernel stores each produced tensor into its slot: ``outputs[i] = y``.
        :param workspace: the view carved for this node, or ``None`` when the
            requirement was zero bytes.
        :raises NodeError: for invalid inputs or attributes, naming what is wrong.

        Must not synchronize the stream, allocate device memory or copy to/from the
        host unless :meth:`capture_support` says UNSUPPORTED.
        """
        ...


REQUIRED_KERNEL_METHODS = ("capture_support", "workspace_requirement", "execute_with_workspace")


def check_kernel(obj: Any) -> str | None:
    """Return why ``obj`` breaks the Kernel protocol, or ``None`` when it satisfies it."""
    key = getattr(obj, "key", None)
    if not isinstance(key, OpKey):
        return f"'key' must be an OpKey, got {type(key).__name__}"
    if not isinstance(getattr(obj, "parity", None), Parity):
        return f"'parity' must be a Parity, got {type(getattr(obj, 'parity', None)).__name__}"
    for name in REQUIRED_KERNEL_METHODS:
        if not callable(getattr(obj, name, None)):
            return f"missing method {name}()"
    for name in ("supports", "bind"):
        if hasattr(obj, name) and not callable(getattr(obj, name)):
            return f"'{name}' must be callable"
    if not isinstance(key.since, int) or key.since < 1:
        return f"OpKey.since must be an int >= 1, got {key.since!r}"
    return None


def _always_available() -> Support:
    return Support.YES


class StableRegion(Protocol):
    """A device address range that never moves while physical pages are mapped under it.

    Made by the optional ``DeviceRuntime.stable_region(nbytes, holder)``; the core's
    weight pager (``onnx_ep.core.pager``, docs/MEMORY.md) drives it. Tensors viewed in it
    keep their addresses for the region's life, so a captured graph stays valid while
    pages move. Reserving the range costs no budget; each page backs part of a
    reservation the core made.

    :ivar ptr: base address. :ivar nbytes: size, a multiple of ``page_bytes``.
    :ivar page_bytes: the mapping granule (2 MiB on an H200).
    """

    ptr: int
    nbytes: int
    page_bytes: int

    def new_page(self, reservation: Any) -> Any:
        """Physical memory of ``page_bytes`` backing part of ``reservation`` (not charged again)."""
        ...

    def map(self, offset: int, page: Any) -> None:
        """Map ``page`` at ``ptr + offset`` (page-aligned, nothing mapped there)."""
        ...

    def unmap(self, offset: int) -> Any:
        """Unmap the page at ``offset`` and return it; its bytes survive for a later map.

        Synchronous for the host but NOT ordered with streams: the caller first makes
        sure no queued work still reads the page (see :meth:`fence`).
        """
        ...

    def write(self, offset: int, data: np.ndarray, stream: Any) -> None:
        """Copy host ``data`` (uint8, contiguous) to ``ptr + offset``, async on ``stream``."""
        ...

    def tensor(self, offset: int, spec: TensorSpec) -> Any:
        """A device tensor of ``spec`` at ``ptr + offset`` (valid while its pages are mapped)."""
        ...

    def fence(self, stream: Any) -> Any:
        """Mark the work queued on ``stream`` so far. The result has ``wait()`` (block the
        host until that work is done), ``done() -> bool`` and ``release()`` (recycle it)."""
        ...

    def close(self) -> None:
        """Unmap everything, free every page and the range (idempotent; the caller has
        waited for the work that reads it)."""
        ...


class DeviceAllocation(Protocol):
    """Physical device memory backing one reservation."""

    ptr: int
    nbytes: int

    def free(self) -> None: ...


class DeviceRuntime(Protocol):
    """What the core needs from a device provider (one object per device).

    The core keeps the budget and the ledger (``onnx_ep.core.memory``); the runtime
    only backs reservations with physical memory, makes tensors, streams and copies.

    :ivar device: the ledger's device name (``"cuda:0"``).
    :ivar granularity: bytes per accounting granule of this device's allocator.

    Optional, for ``weight_streaming`` on the device: ``stable_region(nbytes: int,
    holder: str) -> StableRegion``. A runtime without it refuses streaming at load.
    """

    device: str
    granularity: int

    def budget(self) -> int:
        """Bytes the device can grant now (free memory); used when no memory_limit is set."""
        ...

    def new_stream(self) -> Any:
        """A stream for one session's steps."""
        ...

    def allocate(self, reservation: Any) -> DeviceAllocation:
        """Back ``reservation`` (made by the core) with device memory."""
        ...

    def tensor(self, allocation: DeviceAllocation, offset: int, spec: TensorSpec) -> Any:
        """A device tensor of ``spec`` at byte ``offset`` of ``allocation`` (no allocation)."""
        ...

    def upload(self, array: np.ndarray, out: Any, stream: Any) -> Any:
        """Copy host ``array`` into device tensor ``out`` on ``stream``; return ``out``."""
        ...

    def download(self, tensor: Any, stream: Any) -> np.ndarray:
        """Copy a device tensor to a new host array and wait for it."""
        ...

    def synchronize(self, stream: Any) -> None: ...

    # Optional, for onnx_ep.Tensor and IOBinding (device feeds and outputs):
    #   copy(src, dst, stream) -> dst        device-to-device copy of equal dtype/shape
    #   from_dlpack(obj) -> device tensor    zero-copy import of a DLPack producer
    #   default_stream() -> stream           the stream from_dlpack orders producers before


@attrs.frozen
class Provider:
    """An execution provider, registered through ``onnx_ep_register_providers``.

    :ivar name: what users write in ``providers=[...]`` (``"cpu_reference"``).
    :ivar device: ``"cpu"`` for providers whose tensors are numpy arrays, else a
        device type (``"cuda"``); placement inserts copies where values change device.
    :ivar priority: order among providers when ``providers=None`` (higher first).
    :ivar is_available: returns :data:`Support.YES` or why the provider cannot run here.
    :ivar runtime: for device providers, returns the :class:`DeviceRuntime`
        (called only once the provider is selected and available).
    :ivar description: one line for ``onnx-ep providers``.
    """

    name: str
    device: str = "cpu"
    priority: int = 0
    is_available: Callable[[], Support] = _always_available
    runtime: Callable[[], DeviceRuntime] | None = None
    description: str = ""
