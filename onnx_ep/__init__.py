"""onnx-ep: run ONNX models through pluggable execution providers.

``onnx_ep.Session(model, providers=["cpu_reference"]).run(None, feeds)`` has
onnxruntime's shape. Plugin authors need ``Kernel``, ``OpKey``, ``hookimpl``
and the value types below; see docs/PLUGINS.md and docs/KERNELS.md.
"""

from onnx_ep import errors
from onnx_ep.core.kernel import (
    CaptureSupport,
    ExecutionContext,
    Kernel,
    NodeMeta,
    OpKey,
    Parity,
    Provider,
    Support,
    TensorSpec,
    WorkspaceLifetime,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.core.options import RunOptions, SessionOptions
from onnx_ep.core.session import NodeArg, Session
from onnx_ep.errors import (
    AdmissionRefused,
    CapacityUnavailable,
    FeedError,
    ModelError,
    NodeError,
    NoKernelError,
    OnnxEpError,
    PluginError,
    ProviderUnavailable,
    TierExhausted,
)
from onnx_ep.plugins.hookspecs import hookimpl

__version__ = "0.1.0"


def available_providers() -> list[str]:
    """Providers that can run on this machine, highest priority first."""
    from onnx_ep.plugins.manager import default_runtime

    return default_runtime().registry.available()


__all__ = [
    "AdmissionRefused", "CapacityUnavailable", "CaptureSupport", "ExecutionContext",
    "FeedError", "Kernel", "ModelError", "NoKernelError", "NodeArg", "NodeError", "NodeMeta",
    "OnnxEpError", "OpKey", "Parity", "PluginError", "Provider", "ProviderUnavailable",
    "RunOptions", "Session", "SessionOptions", "Support", "TensorSpec", "TierExhausted",
    "WorkspaceLifetime", "WorkspaceRequirement", "WorkspaceView", "available_providers",
    "errors", "hookimpl", "__version__",
]
