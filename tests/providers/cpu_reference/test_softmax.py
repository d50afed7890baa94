"""cpu_reference Softmax, LogSoftmax, LayerNormalization and RMSNormalization against
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.oracle import assert_matches_ort, node_model

RNG = np.random.default_rng(2)
F32 = dict(rtol=1e-5, atol=1e-6)
F16 = dict(rtol=2e-3, atol=2e-3)


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, -1), (11, 0), (13, 1), (13, -1), (13, 0)])
def test_softmax_family_axis_semantics_match_ort(op: str, opset: int, axis: int) -> None:
    feeds = {"x": _x(2, 3, 4)}
    assert_matches_ort(node_model(op, feeds, opset=opset, axis=axis), feeds, **F32)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_of_float16_rounds_once_from_wide_math(op: str) -> None:
    feeds = {"x": (_x(3, 8) * 4).astype(np.float16)}
    assert_matches_ort(node_model(op, feeds), feeds, **F16)


def test_softmax_of_large_numbers_is_stable() -> None:
    feeds = {"x": np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]], np.float32)}
    assert_matches_ort(node_model("Softmax", feeds), feeds, **F32)


@pytest.mark.parametrize("dtype,tol", [(np.float32, F32), (np.float16, F16)])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_layer_normalization_outputs_match_ort(dtype: type, tol: dict, axis: int) -> None:
    x = _x(2, 3, 4, dtype=dtype)
    shape = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    feeds = {"x": x, "s": _x(*shape, dtype=dtype), "b": _x(*shape, dtype=dtype)}
    assert_matches_ort(node_model("LayerNormalization", feeds, 3, opset=17, axis=axis,
                                  epsilon=1e-3), feeds, **tol)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization_matches_ort(axis: int) -> None:
    x = _x(2, 3, 4)
    feeds = {"x": x, "s": _x(*x.shape[axis:])}
    assert_matches_ort(node_model("RMSNormalization", feeds, opset=23, axis=axis), feeds, **F32)
