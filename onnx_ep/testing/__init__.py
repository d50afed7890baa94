"""Testing tools: the onnx node-suite runner, the parity harness, a pytest plugin and the
capture-contract audit (``audit_capture``, ``CaptureViolation``, ``audit_builtin_kernels``).

Names are imported on first use (PEP 562): pytest imports this package for its plugin in
every run, so importing it costs nothing until something is used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = ["CaptureViolation", "audit_builtin_kernels", "audit_capture"]

#: public name -> module that defines it
_EXPORTS: dict[str, str] = dict.fromkeys(__all__, "onnx_ep.testing.capture_audit")


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'onnx_ep.testing' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value          # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from onnx_ep.testing.capture_audit import (
        CaptureViolation,
        audit_builtin_kernels,
        audit_capture,
    )
