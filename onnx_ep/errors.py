"""The whole exception hierarchy of onnx-ep.

Every exception also subclasses the builtin category it belongs to, so callers
can catch either ``onnx_ep.errors.FeedError`` or plain ``ValueError``.
Identifiers are attached as attributes (``err.node``, ``err.provider``, ...)
so that tools need not parse messages.

::

    OnnxEpError(Exception)
    ├── ModelError(ValueError)              malformed / unsupported model
    ├── OptionsError(ValueError)            bad SessionOptions / TOML
    ├── FeedError(ValueError)               missing/extra feed, wrong dtype or shape
    ├── NodeError(ValueError)               a kernel rejected its inputs or attributes
    ├── UnsupportedOpError(NotImplementedError)
    │   └── NoKernelError                   no provider has a kernel for a node
    ├── ProviderUnavailable(RuntimeError)   a requested provider cannot run here
    ├── PluginError(RuntimeError)           a plugin failed to load or register
    │   ├── KernelContractError(TypeError)  a kernel breaks the Kernel protocol
    │   └── KernelConflictError(ValueError) two kernels for one OpKey and provider
    ├── PlanError(RuntimeError)
    │   ├── WorkspaceTooSmall
    │   └── MemoryBudgetError(MemoryError)
    │       └── AdmissionRefused            http_status = 429
    │           ├── TierExhausted           full now, may succeed later
    │           └── CapacityUnavailable     can never fit at this budget
    ├── RunCancelled(RuntimeError)
    ├── CaptureError(RuntimeError)
    └── CudaError(RuntimeError)
        └── NvrtcError                      .log holds the compiler log
    OnnxEpWarning(UserWarning)              failures that cannot be raised
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class OnnxEpError(Exception):
    """Base class of every error raised by onnx-ep."""


class OnnxEpWarning(UserWarning):
    """A failure that cannot be raised (finalizers, callbacks, cleanup)."""


class ModelError(OnnxEpError, ValueError):
    """The model is malformed, truncated, cyclic or uses an unknown opset."""


class OptionsError(OnnxEpError, ValueError):
    """A :class:`SessionOptions` value (or TOML file) is invalid."""


class FeedError(OnnxEpError, ValueError):
    """A feed passed to :meth:`Session.run` does not match the model's inputs.

    :ivar input_name: the model input concerned (``None`` for unknown names).
    :ivar expected: what the model declares, as text.
    :ivar got: what was given, as text.
    """

    def __init__(self, message: str, *, input_name: str | None = None,
                 expected: str | None = None, got: str | None = None) -> None:
        super().__init__(message)
        self.input_name = input_name
        self.expected = expected
        self.got = got


class NodeError(OnnxEpError, ValueError):
    """A kernel rejected a node: bad attribute, inconsistent shapes, index out of range.

    :ivar node: the node name. :ivar op_type: the operator.
    """

    def __init__(self, message: str, *, node: str | None = None,
                 op_type: str | None = None) -> None:
        prefix = f"{op_type or '?'} node {node!r}: " if (node or op_type) else ""
        super().__init__(prefix + message)
        self.node = node
        self.op_type = op_type
        self.detail = message


class UnsupportedOpError(OnnxEpError, NotImplementedError):
    """An operator, attribute value or dtype is not implemented."""


class NoKernelError(UnsupportedOpError):
    """No provider in the session's list has a kernel for a node.

    :ivar node: node name. :ivar op: ``domain::op_type``. :ivar opset: the model's opset.
    :ivar tried: ``{provider: reason}`` for every provider asked.
    """

    def __init__(self, *, node: str, op: str, opset: int,
                 tried: dict[str, str]) -> None:
        tried_txt = ", ".join(f"{p} ({why})" for p, why in tried.items()) or "none"
        # the reference runs every standard op: suggest it only where it was not asked
        add = "" if "cpu_reference" in tried else "Add 'cpu_reference' to providers=, or "
        super().__init__(
            f"no kernel for {op} (opset {opset}) on node {node!r}. Providers tried: "
            f"{tried_txt}. {add}{'r' if add else 'R'}egister a kernel via the "
            f"onnx_ep_register_kernels hook.")
        self.node = node
        self.op = op
        self.opset = opset
        self.tried = dict(tried)


class ProviderUnavailable(OnnxEpError, RuntimeError):
    """A provider named in ``providers=`` is unknown or cannot run on this machine.

    :ivar provider: the provider name. :ivar reason: why it is unavailable.
    """

    def __init__(self, provider: str, reason: str, available: Sequence[str] = ()) -> None:
        avail = ", ".join(available) or "none"
        super().__init__(f"provider {provider!r} is unavailable: {reason}. "
                         f"Available providers: {avail}.")
        self.provider = provider
        self.reason = reason


class PluginError(OnnxEpError, RuntimeError):
    """A plugin failed to load, raised in a hook, or registered something malformed.

    :ivar plugin: the plugin's name.
    """

    def __init__(self, message: str, *, plugin: str | None = None) -> None:
        super().__init__(f"plugin {plugin!r}: {message}" if plugin else message)
        self.plugin = plugin


class KernelContractError(PluginError, TypeError):
    """A registered kernel does not satisfy the Kernel protocol."""


class KernelConflictError(PluginError, ValueError):
    """Two kernels were registered for the same OpKey and provider."""


class PlanError(OnnxEpError, RuntimeError):
    """The session could not build an execution plan."""


class WorkspaceTooSmall(PlanError):
    """A kernel asked its :class:`WorkspaceView` for more bytes than were planned."""


class MemoryBudgetError(PlanError, MemoryError):
    """A reservation does not fit in the memory budget."""


class AdmissionRefused(MemoryBudgetError):
    """A run was refused before any work started. A server maps it to HTTP 429.

    :ivar requested: bytes asked. :ivar available: bytes that could be granted.
    :ivar holder: who asked (session / run id).
    """

    http_status = 429

    def __init__(self, message: str, *, requested: int = 0, available: int = 0,
                 holder: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.requested = requested
        self.available = available
        self.holder = holder
        self.extra = extra


class TierExhausted(AdmissionRefused):
    """The budget is full right now; the same request may succeed later."""


class CapacityUnavailable(AdmissionRefused):
    """The request can never fit at this budget."""


class RunCancelled(OnnxEpError, RuntimeError):
    """``run_options.terminate`` was set while the run was in progress."""


class CaptureError(OnnxEpError, RuntimeError):
    """CUDA graph capture failed in a way that could not be recovered."""


class CudaError(OnnxEpError, RuntimeError):
    """A CUDA driver call failed.

    :ivar error_name: the driver's name for the error (``CUDA_ERROR_...``).
    :ivar node: the node being run, when known.
    """

    def __init__(self, message: str, *, error_name: str | None = None,
                 node: str | None = None) -> None:
        super().__init__(message)
        self.error_name = error_name
        self.node = node


class NvrtcError(CudaError):
    """NVRTC failed to compile a kernel source. ``log`` holds the compiler log."""

    def __init__(self, message: str, *, log: str = "", **kw: Any) -> None:
        super().__init__(f"{message}\n{log}" if log else message, **kw)
        self.log = log
