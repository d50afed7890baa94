"""cpu_reference MatMul and Gemm against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(3)
F32 = dict(rtol=1e-5, atol=1e-5)
F16 = dict(rtol=2e-3, atol=2e-3)


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("a,b", [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
    ((2, 1, 3, 4), (5, 4, 2)), ((1, 0, 4), (4, 3)), ((3, 0), (0, 2)),
])
def test_matmul_broadcasting_matches_ort(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    feeds = {"a": _x(*a), "b": _x(*b)}
    assert_matches_ort(node_model("MatMul", feeds), feeds, **F32)


def test_matmul_of_float16_accumulates_wide() -> None:
    feeds = {"a": _x(8, 64, dtype=np.float16), "b": _x(64, 8, dtype=np.float16)}
    assert_matches_ort(node_model("MatMul", feeds), feeds, **F16)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_matmul_is_exact(dtype: type) -> None:
    feeds = {"a": RNG.integers(-9, 10, (3, 4)).astype(dtype),
             "b": RNG.integers(-9, 10, (4, 2)).astype(dtype)}
    assert_matches_ort(node_model("MatMul", feeds), feeds)


@pytest.mark.parametrize("a,b", [((3, 4), (5, 6)), ((2, 3, 4), (3, 4, 5))])
def test_matmul_with_mismatched_shapes_raises_node_error(a: tuple[int, ...],
                                                          b: tuple[int, ...]) -> None:
    feeds = {"a": _x(*a), "b": _x(*b)}
    with pytest.raises(NodeError, match="MatMul"):
        run_ours(node_model("MatMul", feeds), feeds)


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (3, 1), (3, 5)])
def test_gemm_matches_ort(trans_a: int, trans_b: int, c_shape: tuple[int, ...] | None) -> None:
    a = _x(4, 3) if trans_a else _x(3, 4)
    b = _x(5, 4) if trans_b else _x(4, 5)
    feeds = {"a": a, "b": b}
    if c_shape is not None:
        feeds["c"] = _x(*c_shape)
    assert_matches_ort(node_model("Gemm", feeds, transA=trans_a, transB=trans_b, alpha=0.5,
                                  beta=2.0), feeds, **F32)


def test_gemm_of_float16_matches_ort() -> None:
    feeds = {"a": _x(6, 32, dtype=np.float16), "b": _x(32, 4, dtype=np.float16),
             "c": _x(4, dtype=np.float16)}
    assert_matches_ort(node_model("Gemm", feeds, alpha=0.25), feeds, **F16)


def test_gemm_with_unbroadcastable_c_raises_node_error() -> None:
    feeds = {"a": _x(3, 4), "b": _x(4, 5), "c": _x(2, 5)}
    with pytest.raises(NodeError, match="does not broadcast"):
        run_ours(node_model("Gemm", feeds), feeds)


def test_gemm_with_inner_mismatch_raises_node_error() -> None:
    feeds = {"a": _x(3, 4), "b": _x(3, 5)}
    with pytest.raises(NodeError, match="inner dimensions"):
        run_ours(node_model("Gemm", feeds), feeds)
