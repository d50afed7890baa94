"""``onnxruntime.capi.onnxruntime_pybind11_state``: the same names as ``_pybind_state``
(onnxruntime's tests import exception types and ``OrtValueVector`` from here)."""

from __future__ import annotations

from onnx_ep.onnxruntime.capi._pybind_state import *  # noqa: F403
from onnx_ep.onnxruntime.capi._pybind_state import __all__  # noqa: F401
