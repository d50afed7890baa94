"""Fixtures: the compatibility module, and model files written under a temporary folder."""

from __future__ import annotations

import onnx
import pytest

import onnx_ep.onnxruntime as compat_ort


@pytest.fixture
def ort():
    """``onnx_ep.onnxruntime``, as a test would get it from ``import onnxruntime``."""
    return compat_ort


@pytest.fixture
def save(tmp_path):
    """``save(model, "name.onnx")`` -> the file's path as a str."""
    def write(model: onnx.ModelProto, name: str) -> str:
        path = tmp_path / name
        onnx.save(model, path)
        return str(path)
    return write
