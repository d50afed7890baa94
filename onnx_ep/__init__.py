"""onnx-ep: run ONNX models through pluggable execution providers.

``onnx_ep.Session(model, providers=["cpu_reference"]).run(None, feeds)`` has
onnxruntime's shape. Everything a plugin author needs is exported here: ``hookimpl``,
the Kernel protocol and its value types (``onnx_ep.core.kernel``), the provider
contracts (``onnx_ep.core.provider``), admission and memory-policy values and the
built-in strategies and policies; see docs/PLUGINS.md and docs/KERNELS.md. CUDA kernel
helpers are exported by ``onnx_ep.providers.cuda``.

Names are imported on first use (PEP 562), so ``import onnx_ep`` (and the pytest
plugin that pytest loads in every run) costs nothing until something is used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    **{name: "onnx_ep.core.kernel" for name in (
        "Aliases", "Binds", "CaptureSupport", "ExecutionContext", "InfersOutputs", "Kernel",
        "NodeMeta", "OpKey", "Parity", "Prepares", "Support", "SupportsNode", "TensorSpec",
        "WorkspaceLifetime", "WorkspaceRequirement", "WorkspaceView", "check_kernel",
        "uncaptured_route")},
    **{name: "onnx_ep.core.provider" for name in (
        "DeviceAllocation", "DeviceRuntime", "Provider", "StableRegion")},
    **{name: "onnx_ep.core.admission" for name in (
        "AdmissionDecision", "AdmissionRequest", "AdmissionStrategy")},
    **{name: "onnx_ep.core.memory" for name in ("Fit", "LedgerView", "MemoryPolicy")},
    **{name: "onnx_ep.plugins.admission" for name in ("HeadroomAdmission", "StrictAdmission")},
    **{name: "onnx_ep.plugins.policies" for name in ("FullResident", "WeightStreaming")},
    **{name: "onnx_ep.errors" for name in (
        "AdmissionRefused", "CapacityUnavailable", "FeedError", "ModelError", "NodeError",
        "NoKernelError", "OnnxEpError", "PluginError", "ProviderUnavailable", "TierExhausted")},
    "RunOptions": "onnx_ep.core.options",
    "SessionOptions": "onnx_ep.core.options",
    "NodeArg": "onnx_ep.core.session",
    "Session": "onnx_ep.core.session",
    "Tensor": "onnx_ep.core.tensor",
    "IOBinding": "onnx_ep.core.tensor",
    "hookimpl": "onnx_ep.core.hookspecs",
}

__all__ = sorted([*_EXPORTS, "available_providers", "errors", "genai", "__version__"])


def available_providers() -> list[str]:
    """Providers that can run on this machine, highest priority first."""
    from onnx_ep.core.plugin_manager import default_plugins

    return default_plugins().registry.available()


def __getattr__(name: str) -> Any:
    if name in ("errors", "genai"):      # submodules: onnx_ep.genai is docs/GENAI.md
        return import_module(f"onnx_ep.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'onnx_ep' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value          # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from onnx_ep import errors, genai
    from onnx_ep.core.admission import AdmissionDecision, AdmissionRequest, AdmissionStrategy
    from onnx_ep.core.hookspecs import hookimpl
    from onnx_ep.core.kernel import (
        Aliases,
        Binds,
        CaptureSupport,
        ExecutionContext,
        InfersOutputs,
        Kernel,
        NodeMeta,
        OpKey,
        Parity,
        Prepares,
        Support,
        SupportsNode,
        TensorSpec,
        WorkspaceLifetime,
        WorkspaceRequirement,
        WorkspaceView,
        check_kernel,
        uncaptured_route,
    )
    from onnx_ep.core.memory import Fit, LedgerView, MemoryPolicy
    from onnx_ep.core.options import RunOptions, SessionOptions
    from onnx_ep.core.provider import DeviceAllocation, DeviceRuntime, Provider, StableRegion
    from onnx_ep.core.session import NodeArg, Session
    from onnx_ep.core.tensor import IOBinding, Tensor
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
    from onnx_ep.plugins.admission import HeadroomAdmission, StrictAdmission
    from onnx_ep.plugins.policies import FullResident, WeightStreaming
