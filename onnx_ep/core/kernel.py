"""The Kernel protocol and its value types: the contract between the core and every kernel.

A kernel author reads this file and ``core/hookspecs.py``; a provider author also reads
``core/provider.py``. See docs/KERNELS.md for a walk-through. Everything here is exported
by ``onnx_ep``.

When the core calls a kernel (each member's docstring repeats its own line):

1. *Registration* (once per plugin manager): ``register(kernel, provider=...)`` runs
   :func:`check_kernel` on the required members (:class:`Kernel`) and on every optional
   member the kernel defines (:class:`SupportsNode`, :class:`Binds`,
   :class:`InfersOutputs`, :class:`Aliases`, :class:`Prepares`).
2. *Placement* (when a ``Session`` is created): for each node whose :class:`OpKey`
   matches, ``supports(meta)`` may decline with a reason; the node then goes to the next
   provider. The node's runner is ``bind(meta)`` when defined, else the kernel itself;
   right after, the session reserves the runner's ``prepared_nbytes()`` (:class:`Prepares`).
3. *Planning* (once per shape signature, before the first run at it):
   ``infer_outputs(meta)`` where onnx's shape inference left an output unsized,
   ``aliases`` on a device, and ``workspace_requirement(meta)``.
4. *Running* (every run): ``execute_with_workspace(ctx, inputs, outputs, workspace)``.
5. *After the first run* of a shape signature on a device: ``capture_support()``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

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

_F = TypeVar("_F", bound=Callable[..., Any])


def uncaptured_route(reason: str) -> Callable[[_F], _F]:
    """Mark a function or method as a route that is never taken while the stream captures.

    The capture audit (``onnx_ep.testing.capture_audit``) skips the marked function and
    does not follow calls out of it, so the route may synchronize, allocate or copy to or
    from the host. The kernel's :meth:`~Kernel.capture_support` must answer
    :meth:`CaptureSupport.unsupported` whenever this route runs (for example after the
    first run took it); the audit cannot check that, the kernel author promises it.
    Sets ``__onnx_ep_uncaptured__ = reason`` on the function and returns it unchanged::

        @uncaptured_route("dynamic shapes: sizes are read back to the host")
        def _read_sizes(self, ctx, x): ...

    :param reason: why the route cannot be captured (shown to readers of the kernel).
    """
    def mark(fn: _F) -> _F:
        fn.__onnx_ep_uncaptured__ = reason  # type: ignore[attr-defined]
        return fn
    return mark


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
    :ivar constants: host values of inputs known before the run, by input position
        (read-only numpy arrays): at load, the model's initializers; when a signature is
        planned (``infer_outputs``, ``workspace_requirement``, a deferred ``supports``) also
        the values the plan folded there (axes, shapes, pads computed from shapes). The run's
        ``ctx.node`` is that plan-time meta, so a kernel may read attribute-like values
        (axes, k, repeats) here at run time too; tensors it computes on are read from its
        inputs.
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
    #: specs of the outer-scope values the node's subgraphs read, by name (control flow)
    outer: Mapping[str, TensorSpec | None] = attrs.field(factory=dict)
    #: host values of those outer-scope values the plan knows, by name (as ``constants``):
    #: a device body is placed and planned with them (an ``axes`` read from outside)
    outer_constants: Mapping[str, Any] = attrs.field(factory=dict)

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name``, or ``default`` when the node does not set it."""
        return self.attrs.get(name, default)

    def constant(self, index: int) -> Any:
        """The host value of input ``index`` when it is known (see :attr:`constants`), else
        ``None``."""
        return self.constants.get(index)

    def given(self, index: int) -> bool:
        """Whether optional input ``index`` is wired: named in the model (``""`` or past the
        end: left out); without names, whether its spec is known."""
        if index >= len(self.inputs):
            return False
        if self.input_names and index < len(self.input_names):
            return bool(self.input_names[index])
        return self.inputs[index] is not None


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
    """The members every kernel has. No base class is needed.

    ``key`` and ``parity`` are plain attributes (a family table makes one instance per
    row). A kernel may also have any of the optional members :class:`SupportsNode`,
    :class:`Binds`, :class:`InfersOutputs` and :class:`Aliases`; :func:`check_kernel`
    validates those it has.
    """

    key: OpKey
    parity: Parity

    def capture_support(self) -> CaptureSupport:
        """Whether this node may be recorded into a CUDA graph.

        Called by the session on the object that runs the node (see :class:`Binds`), for
        device steps only, once per shape signature right after the first run at that
        signature, so the answer may depend on the route that run took. The answers cut
        the plan into capture segments (``core/capture.py``, ``Session.capture_report()``).
        Must tell the truth (see :class:`CaptureSupport`).
        """
        ...

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        """Exact scratch bytes for this node at the shapes in ``meta``.

        Called by the planner once per shape signature, when that signature is planned,
        before any run at it. Sized from the route the call will really take;
        :data:`WorkspaceRequirement.NONE` for a route that needs none. Must not allocate.
        """
        ...

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        """Run the node. Called by the executor once per run.

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


@runtime_checkable
class SupportsNode(Protocol):
    """Optional: decline some nodes of the op with a reason."""

    def supports(self, meta: NodeMeta) -> Support:
        """:data:`Support.YES`, or :meth:`Support.no` with why this node cannot run here (an
        unsupported dtype or attribute value).

        Called by the registry while a ``Session`` places its graph, for every node whose
        :class:`OpKey` matches (``meta.inputs`` may hold symbolic dims). A declined node goes
        to the next listed provider. Must not raise: return ``Support.no(reason)``.
        """
        ...


@runtime_checkable
class Binds(Protocol):
    """Optional: make a per-node object that runs the node (parse attributes once)."""

    def bind(self, meta: NodeMeta) -> Kernel | None:
        """The object that will run this node, or ``None`` for the kernel itself.

        Called once per node when the node is placed on this kernel. The result gets
        every later call for the node (``infer_outputs``, ``aliases``,
        ``workspace_requirement``, ``execute_with_workspace``, ``capture_support``), so
        it must have the :class:`Kernel` methods.
        """
        ...


@runtime_checkable
class Prepares(Protocol):
    """Optional, on the object ``bind`` returns: data derived once from the node's constant
    inputs (``meta.constants``), such as dequantized or widened weights, and kept for the
    session's life so that no run derives it again."""

    def prepared_nbytes(self) -> int:
        """Bytes this runner derived at bind and holds; 0 when it prepared nothing.

        Called by the session once per placed node, right after placement. The session
        reserves the sum under ``Role.WEIGHTS`` in its own name (host bytes on the host's
        ledger, a device runner's on its device's) and releases them when it closes, so the
        ledger accounts for every copy a kernel keeps beside the model's initializers.
        """
        ...


@runtime_checkable
class InfersOutputs(Protocol):
    """Optional: output specs from input specs, where onnx's shape inference gives none."""

    def infer_outputs(self, meta: NodeMeta) -> Sequence[TensorSpec | None]:
        """One spec (or ``None``) per node output.

        Called by the planner at plan time, only when some output is unsized after onnx's
        inference and every input is sized. Device providers need every output's size at
        plan time; a node they cannot size falls back to a host provider.
        """
        ...


@runtime_checkable
class Aliases(Protocol):
    """Optional: outputs that are views of inputs (Reshape, Squeeze)."""

    #: ``{output index: input index}``. Read by the planner when it builds a device
    #: program: such an output gets no arena buffer; ``outputs[j]`` arrives as its planned
    #: :class:`TensorSpec` and the kernel stores a view of the input there. The input's
    #: buffer stays alive as long as the view is used.
    aliases: Mapping[int, int]

    # A kernel whose output is a view only at some shapes (a Transpose that moves axes of
    # size 1 alone) may instead define ``aliases_at(inputs) -> Mapping[int, int] | None``:
    # asked per shape signature with the input specs; where it answers, the same holds
    # at that signature, and elsewhere ``outputs[j]`` is a buffer as usual. One that writes
    # through its view sets ``writes_in_place = True``: the alias then holds only where
    # the node is its input's sole reader (``core.arena.step_aliases``).


REQUIRED_KERNEL_METHODS = ("capture_support", "workspace_requirement", "execute_with_workspace")


OPTIONAL_KERNEL_METHODS = ("supports", "bind", "infer_outputs", "prepared_nbytes")


def check_kernel(obj: Any) -> str | None:
    """Return why ``obj`` breaks the Kernel protocol, or ``None`` when it satisfies it.

    Checks the required members (:class:`Kernel`) and each optional member ``obj`` has
    (:class:`SupportsNode`, :class:`Binds`, :class:`InfersOutputs`, :class:`Aliases`,
    :class:`Prepares`).
    """
    key = getattr(obj, "key", None)
    if not isinstance(key, OpKey):
        return f"'key' must be an OpKey, got {type(key).__name__}"
    if not isinstance(key.since, int) or key.since < 1:
        return f"OpKey.since must be an int >= 1, got {key.since!r}"
    if not isinstance(getattr(obj, "parity", None), Parity):
        return f"'parity' must be a Parity, got {type(getattr(obj, 'parity', None)).__name__}"
    return check_runner(obj)


def check_runner(obj: Any) -> str | None:
    """The method and ``aliases`` part of :func:`check_kernel`: what the object that runs a
    node (a kernel, or what its ``bind`` returned) must satisfy."""
    for name in REQUIRED_KERNEL_METHODS:
        if not callable(getattr(obj, name, None)):
            return f"missing method {name}()"
    for name in OPTIONAL_KERNEL_METHODS:
        if getattr(obj, name, None) is not None and not callable(getattr(obj, name)):
            return f"'{name}' must be callable"
    aliases = getattr(obj, "aliases", None)
    if aliases is not None:
        if not isinstance(aliases, Mapping):
            return f"'aliases' must be a mapping {{output: input}}, got {type(aliases).__name__}"
        for out, inp in aliases.items():
            if not (isinstance(out, int) and isinstance(inp, int) and out >= 0 and inp >= 0):
                return f"'aliases' must map output indices to input indices, got {out!r}: {inp!r}"
    return None
