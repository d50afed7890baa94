"""cpu_reference Conv and ConvTranspose against onnxruntime, and Conv's planned workspace."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec, WorkspaceView
from onnx_ep.errors import NodeError, WorkspaceTooSmall
from onnx_ep.providers.cpu_reference.conv import Conv
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(5)
F32 = dict(rtol=1e-4, atol=1e-5)


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


CONV_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((2, 3, 7, 6), (4, 3, 3, 3), {}),
    ((1, 4, 7, 6), (6, 2, 3, 2), dict(group=2, strides=[2, 1], pads=[1, 0, 2, 1])),
    ((1, 4, 8, 8), (4, 1, 3, 3), dict(group=4, dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 3, 7, 7), (2, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 3, 6, 7), (2, 3, 2, 2), dict(auto_pad="SAME_LOWER")),
    ((1, 3, 6, 7), (2, 3, 2, 3), dict(strides=[2, 2], auto_pad="VALID")),
    ((2, 2, 9), (3, 2, 3), dict(strides=[2], pads=[1, 1])),
    ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(pads=[0, 1, 0, 1, 0, 1])),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
def test_conv_matches_ort(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                          attrs: dict[str, Any], with_bias: bool) -> None:
    feeds = {"x": _x(*x_shape), "w": _x(*w_shape)}
    if with_bias:
        feeds["b"] = _x(w_shape[0])
    assert_matches_ort(node_model("Conv", feeds, **attrs), feeds, **F32)


def test_conv_of_float16_accumulates_wide() -> None:
    feeds = {"x": _x(1, 8, 6, 6, dtype=np.float16), "w": _x(4, 8, 3, 3, dtype=np.float16)}
    assert_matches_ort(node_model("Conv", feeds, pads=[1, 1, 1, 1]), feeds,
                       rtol=5e-3, atol=5e-3)


def test_conv_with_group_not_dividing_channels_raises_node_error() -> None:
    feeds = {"x": _x(1, 3, 5, 5), "w": _x(3, 1, 3, 3)}
    with pytest.raises(NodeError, match="group"):
        run_ours(node_model("Conv", feeds, group=2), feeds)


def test_conv_with_mismatched_weight_channels_raises_node_error() -> None:
    feeds = {"x": _x(1, 3, 5, 5), "w": _x(2, 2, 3, 3)}
    with pytest.raises(NodeError, match="does not fit"):
        run_ours(node_model("Conv", feeds), feeds)


def _conv_meta(x: np.ndarray, w: np.ndarray, static: bool = True, **attrs: Any) -> NodeMeta:
    xs = x.shape if static else ("N",) + x.shape[1:]
    return NodeMeta(name="c", op_type="Conv", domain="", opset=17, attrs=attrs,
                    inputs=(TensorSpec(x.dtype, xs), TensorSpec(w.dtype, w.shape)),
                    input_names=("x", "w"), output_names=("y",))


@pytest.mark.parametrize("dtype,itemsize", [(np.float32, 4), (np.float16, 4), (np.float64, 8)])
def test_conv_workspace_is_padded_input_plus_im2col_matrix(dtype: type, itemsize: int) -> None:
    x, w = _x(2, 4, 5, 6, dtype=dtype), _x(6, 2, 3, 2, dtype=dtype)
    meta = _conv_meta(x, w, group=2, pads=[1, 0, 1, 0], strides=[1, 2])
    req = Conv("Conv").workspace_requirement(meta)
    padded = 2 * 4 * 7 * 6
    cols = 2 * 2 * (2 * 3 * 2) * (5 * 3)
    assert req.nbytes == (padded + cols) * itemsize


def test_conv_with_planned_workspace_equals_conv_without() -> None:
    x, w = _x(2, 4, 5, 6), _x(6, 2, 3, 2)
    attrs = dict(group=2, pads=[1, 0, 1, 0], strides=[1, 2])
    meta = _conv_meta(x, w, **attrs)
    kernel = Conv("Conv")
    nbytes = kernel.workspace_requirement(meta).nbytes
    ws = WorkspaceView(np.full(nbytes, 0xAB, np.uint8), nbytes)
    with_ws: list[Any] = [None]
    without: list[Any] = [None]
    kernel.execute_with_workspace(ExecutionContext(meta), [x, w, None], with_ws, ws)
    kernel.execute_with_workspace(ExecutionContext(meta), [x, w, None], without, None)
    np.testing.assert_array_equal(with_ws[0], without[0])
    assert not np.shares_memory(with_ws[0], ws.buffer)


def test_conv_with_too_small_workspace_raises() -> None:
    x, w = _x(1, 2, 4, 4), _x(2, 2, 3, 3)
    meta = _conv_meta(x, w)
    nbytes = Conv("Conv").workspace_requirement(meta).nbytes - 4
    ws = WorkspaceView(np.zeros(nbytes, np.uint8), nbytes)
    with pytest.raises(WorkspaceTooSmall):
        Conv("Conv").execute_with_workspace(ExecutionContext(meta), [x, w, None], [None], ws)


def test_conv_with_symbolic_shapes_needs_no_planned_workspace() -> None:
    x, w = _x(1, 2, 4, 4), _x(2, 2, 3, 3)
    assert Conv("Conv").workspace_requirement(_conv_meta(x, w, static=False)).nbytes == 0


TRANSPOSE_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((1, 2, 3, 4), (2, 3, 3, 3), {}),
    ((2, 2, 4, 3), (2, 2, 3, 2), dict(strides=[2, 3], pads=[1, 0, 1, 1])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], output_padding=[1, 0])),
    ((1, 4, 3, 3), (4, 1, 2, 2), dict(group=2, dilations=[2, 1])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], output_shape=[8, 7])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 3, 3), (2, 2, 2, 2), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((2, 2, 5), (2, 3, 3), dict(strides=[2])),
    ((1, 1, 2, 3, 2), (1, 2, 2, 2, 2), dict(strides=[1, 2, 1])),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("x_shape,w_shape,attrs", TRANSPOSE_CASES)
def test_conv_transpose_matches_ort(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                                    attrs: dict[str, Any], with_bias: bool) -> None:
    feeds = {"x": _x(*x_shape), "w": _x(*w_shape)}
    if with_bias:
        feeds["b"] = _x(w_shape[1] * attrs.get("group", 1))
    assert_matches_ort(node_model("ConvTranspose", feeds, **attrs), feeds, **F32)


def test_conv_transpose_with_weight_channel_mismatch_raises_node_error() -> None:
    feeds = {"x": _x(1, 3, 3, 3), "w": _x(2, 2, 3, 3)}
    with pytest.raises(NodeError, match="ConvTranspose"):
        run_ours(node_model("ConvTranspose", feeds), feeds)
