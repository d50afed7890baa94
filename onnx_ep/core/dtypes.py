"""ONNX element types <-> numpy dtypes (bfloat16, float8, int4 through ml_dtypes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

_NAME_OVERRIDES = {"STRING": "string"}


def np_dtype(elem_type: int) -> np.dtype:
    """numpy dtype of an ONNX ``TensorProto`` element type."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def onnx_elem_type(dtype: Any) -> int:
    """ONNX element type of a numpy dtype (``object`` means string)."""
    dt = np.dtype(dtype)
    if dt.kind in ("U", "S", "O"):
        return onnx.TensorProto.STRING
    return int(helper.np_dtype_to_tensor_dtype(dt))


def type_string(elem_type: int) -> str:
    """onnxruntime-style type string, e.g. ``tensor(float)``."""
    name = onnx.TensorProto.DataType.Name(elem_type)
    return f"tensor({_NAME_OVERRIDES.get(name, name.lower())})"


def dtype_type_string(dtype: Any) -> str:
    return type_string(onnx_elem_type(dtype))
