"""An example onnx-ep plugin: registers :class:`Swish2` on the cpu_reference provider.

onnx-ep finds this module through the entry point in pyproject.toml::

    [project.entry-points.onnx_ep]
    example = "onnx_ep_example_plugin"

and calls the ``@onnx_ep.hookimpl`` functions below, named after the hooks in
``onnx_ep/core/hookspecs.py``.
"""

from __future__ import annotations

import onnx_ep
from onnx_ep_example_plugin.swish2 import DOMAIN, Swish2

__all__ = ["DOMAIN", "Swish2", "onnx_ep_register_kernels"]


@onnx_ep.hookimpl
def onnx_ep_register_kernels(register):  # type: ignore[no-untyped-def]
    """Offer the Swish2 kernel to the registry, on onnx-ep's built-in numpy provider."""
    register(Swish2(), provider="cpu_reference")
