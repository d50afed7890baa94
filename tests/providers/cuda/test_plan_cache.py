"""Bounded plans on the GPU: a decode loop over 512 growing lengths holds bounded device
memory, evicted plans free their arenas through the authority, and the shared workspace
slots move under captured plans without a wrong answer.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_plan_cache.py
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep import SessionOptions
from tests.helpers.oracle import ORACLE_IR_VERSION

pytestmark = pytest.mark.cuda
H = 64


def _attention_like() -> onnx.ModelProto:
    """q[1, H] against a growing cache k, v[L, H]: softmax(q k^T) v, one plan per length."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 0]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(
        nodes, "decode",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, H]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, ["L", H]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, ["L", H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, H])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                             ir_version=ORACLE_IR_VERSION)


def _feeds(length: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(length)
    return {"q": rng.standard_normal((1, H)).astype(np.float32),
            "k": rng.standard_normal((length, H)).astype(np.float32),
            "v": rng.standard_normal((length, H)).astype(np.float32)}


def _want(f: dict[str, np.ndarray]) -> np.ndarray:
    s = f["q"].astype(np.float64) @ f["k"].T.astype(np.float64)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ f["v"]


@pytest.mark.parametrize("capture", ["off", "auto"])
def test_a_decode_loop_over_512_growing_lengths_holds_bounded_gpu_memory(cuda_device, capture):
    s = onnx_ep.Session(_attention_like(), providers=["cuda"],
                        options=SessionOptions(plan_cache_size=4, capture=capture))
    authority = s._authority
    try:
        held = []
        for length in range(1, 513):
            f = _feeds(length)
            for _ in range(2 if capture == "auto" else 1):   # warm-up, then record
                (y,) = s.run(None, f)
            if length % 37 == 0 or length in (1, 512):
                np.testing.assert_allclose(y, _want(f), rtol=1e-4, atol=1e-5)
            held.append(authority.held_by(s.holder))
        report = s.resources()
        assert len(report["plans"]) == 4 and report["plan_cache"]["evictions"] == 508
        # four plans of at most 512 tokens (k, its transpose, v: 3 x 128 KiB each, 2 MiB
        # blocks at most), not 512 plans
        assert max(held[-64:]) <= max(held[:64]) + 16 * (2 << 20), (held[:4], held[-4:])
        assert max(held) < 64 << 20
    finally:
        s.close()
    assert s.holder not in authority.ledger()["by_holder"]


def test_evicted_signatures_come_back_right_after_the_slots_moved(cuda_device):
    s = onnx_ep.Session(_attention_like(), providers=["cuda"],
                        options=SessionOptions(plan_cache_size=2))
    try:
        for length in (3, 200, 3, 4000, 200, 3, 4000):
            f = _feeds(length)
            for _ in range(3):                                  # warm-up, record, replay
                (y,) = s.run(None, f)
                np.testing.assert_allclose(y, _want(f), rtol=1e-4, atol=1e-5)
        assert s.resources()["plan_cache"]["evictions"] >= 4
    finally:
        s.close()
