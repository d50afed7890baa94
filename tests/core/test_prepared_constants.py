"""Data a kernel derives from constants at bind (``Prepares.prepared_nbytes``) is charged to
the session's ledger under its own name and released when the session closes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnx_ep
from onnx_ep import OpKey, SessionOptions
from onnx_ep.core.memory import HOST_GRANULARITY, align_up, authority_for
from onnx_ep.errors import CapacityUnavailable
from tests.helpers.plugins import TEST_DOMAIN, KernelPlugin, PlainKernel

PREPARED = 10_000


class _Scaled(PlainKernel):
    """``y = x @ w``, with ``w`` widened at bind: prepares ``PREPARED`` bytes."""

    def __init__(self) -> None:
        super().__init__(OpKey(TEST_DOMAIN, "Scaled", 1), lambda x, w: x @ w)

    def bind(self, meta: Any) -> _Scaled:
        bound = _Scaled()
        bound.prepared = np.zeros(PREPARED, np.uint8)
        return bound

    def prepared_nbytes(self) -> int:
        return int(self.prepared.nbytes)


def _model(w: np.ndarray, op: str = "Scaled", domain: str = TEST_DOMAIN) -> onnx.ModelProto:
    dt = helper.np_dtype_to_tensor_dtype(w.dtype)
    node = helper.make_node(op, ["x", "w"], ["y"], domain=domain)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", dt, [4, w.shape[0]])],
        [helper.make_tensor_value_info("y", dt, None)], [numpy_helper.from_array(w, "w")])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets)


def _weights(session: onnx_ep.Session) -> int:
    ledger = session.resources()["ledger"]
    return ledger["by_holder"].get(session.holder, {}).get("weights", 0)


def test_a_kernels_prepared_bytes_are_charged_to_the_session_and_released() -> None:
    w = np.ones((8, 8), np.float32)
    s = onnx_ep.Session(_model(w), plugins=[KernelPlugin([(_Scaled(), "cpu_reference")])])
    assert _weights(s) == align_up(w.nbytes, HOST_GRANULARITY) + \
        align_up(PREPARED, HOST_GRANULARITY)
    x = np.full((4, 8), 2, np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], x @ w)
    s.close()
    assert authority_for("cpu").held_by(s.holder) == 0


def test_a_budget_without_room_for_the_prepared_bytes_refuses_and_keeps_nothing() -> None:
    w = np.ones((8, 8), np.float32)
    limit = 4096 + 64        # the weights fit, the prepared copy does not
    with pytest.raises(CapacityUnavailable):
        onnx_ep.Session(_model(w), options=SessionOptions(memory_limit=limit),
                        plugins=[KernelPlugin([(_Scaled(), "cpu_reference")])])
    assert authority_for("cpu", limit).committed == 0


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_constant_matmul_weight_is_widened_once_and_charged(dtype: Any) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 48)).astype(dtype)
    s = onnx_ep.Session(_model(w, "MatMul", ""), providers=["cpu_reference"])
    # a narrow weight's float64 copy is made once and charged; float32 is widened per
    # call (a copy would triple the memory of float32 models)
    wide = w.size * 8 if dtype == np.float16 else 0
    assert _weights(s) == align_up(w.nbytes, HOST_GRANULARITY) + wide
    x = rng.standard_normal((4, 64)).astype(dtype)
    # the same float64 product, rounded once, as widening on every call
    want = (x.astype(np.float64) @ w.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], want)
