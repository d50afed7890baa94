"""onnx_ep.demo: the built-in transformer is deterministic and matches onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep import Session
from onnx_ep.demo import DEMO_IR_VERSION, DEMO_OPSET, build_demo_model, demo_feeds


def test_same_arguments_build_identical_bytes() -> None:
    assert build_demo_model().SerializeToString() == build_demo_model().SerializeToString()
    assert (build_demo_model(seed=1).SerializeToString()
            != build_demo_model(seed=0).SerializeToString())


def test_model_declares_opset17_ir9_and_symbolic_dims() -> None:
    model = build_demo_model(layers=1)
    assert model.ir_version == DEMO_IR_VERSION == 9
    assert [(o.domain, o.version) for o in model.opset_import] == [("", DEMO_OPSET)]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param for d in dims] == ["batch", "seq"]
    assert {n.op_type for n in model.graph.node} >= {
        "Gather", "LayerNormalization", "MatMul", "Softmax", "Erf", "Transpose", "Reshape"}


def test_feeds_are_deterministic_token_ids() -> None:
    a, b = demo_feeds(batch=2, seq=5), demo_feeds(batch=2, seq=5)
    assert a["input_ids"].dtype == np.int64 and a["input_ids"].shape == (2, 5)
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    assert 0 <= a["input_ids"].min() and a["input_ids"].max() < 256


def test_bad_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="divisible"):
        build_demo_model(d_model=10, heads=4)


@pytest.mark.parametrize(("batch", "seq"), [(1, 16), (2, 7)])
def test_matches_onnxruntime_cpu_within_1e_4(batch: int, seq: int) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = build_demo_model()
    feeds = demo_feeds(batch=batch, seq=seq)
    (ours,) = Session(model, providers=["cpu_reference"]).run(None, feeds)
    (ref,) = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, feeds)
    assert ours.dtype == np.float32 and ours.shape == (batch, seq, 256)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4)
