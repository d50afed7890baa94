"""A model from a real exporter (torch.onnx.export) against onnxruntime CPU.

``tests/models/exported_transformer.onnx`` is a small random PyTorch transformer
encoder (2 layers, d_model 64, 4 heads; see make_exported_transformer.py, which
needs torch; these tests do not). Its graph is what the exporter wrote: 358
nodes of Shape/Gather/Unsqueeze/Concat/Reshape plumbing, Gemm, MatMul, Erf GELU,
LayerNormalization, Softmax. onnx-ep must agree with onnxruntime within the
float32 kernels' promise (rtol 1e-4, atol 1e-5) and be bitwise deterministic.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest

import onnx_ep
from tests.helpers.oracle import run_ort

MODEL = pathlib.Path(__file__).resolve().parents[2] / "models" / "exported_transformer.onnx"
VOCAB, SEQ, CLASSES = 1000, 16, 100
TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return onnx.load(str(MODEL))


@pytest.fixture(scope="module")
def session() -> onnx_ep.Session:
    return onnx_ep.Session(str(MODEL), providers=["cpu_reference"])


def _ids(batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, VOCAB, size=(batch, SEQ), dtype=np.int64)}


def test_model_is_an_exporter_model_onnxruntime_reads(model: onnx.ModelProto) -> None:
    assert model.producer_name == "pytorch"
    assert model.ir_version <= 10
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) <= 21
    assert MODEL.stat().st_size < 2 * 2**20
    onnx.checker.check_model(model)


@pytest.mark.parametrize("batch,seed", [(1, 0), (2, 1), (3, 2), (5, 3), (8, 4)])
def test_matches_onnxruntime(session: onnx_ep.Session, model: onnx.ModelProto,
                             batch: int, seed: int) -> None:
    feeds = _ids(batch, seed)
    (ours,) = session.run(None, feeds)
    (ref,) = run_ort(model, feeds)
    assert ours.dtype == ref.dtype == np.float32
    assert ours.shape == ref.shape == (batch, SEQ, CLASSES)
    np.testing.assert_allclose(ours, ref, **TOL)


def test_extreme_token_ids_match_onnxruntime(session: onnx_ep.Session,
                                             model: onnx.ModelProto) -> None:
    ids = np.array([[0] * SEQ, [VOCAB - 1] * SEQ, [0, VOCAB - 1] * (SEQ // 2)], np.int64)
    feeds = {"input_ids": ids}
    np.testing.assert_allclose(session.run(None, feeds)[0], run_ort(model, feeds)[0], **TOL)


def test_is_deterministic(session: onnx_ep.Session) -> None:
    feeds = _ids(4, 7)
    first = session.run(None, feeds)[0].tobytes()
    again = session.run(None, feeds)[0].tobytes()
    fresh = onnx_ep.Session(str(MODEL), providers=["cpu_reference"]).run(None, feeds)[0]
    assert first == again, "two runs of one session differ"
    assert first == fresh.tobytes(), "a fresh session differs from the first"


def test_batch_rows_do_not_interact(session: onnx_ep.Session) -> None:
    """Row i of a batch equals the same ids run alone (within tolerance: BLAS may
    block a batch of 3 differently from a batch of 1)."""
    feeds = _ids(3, 11)
    batched = session.run(None, feeds)[0]
    for i in range(3):
        alone = session.run(None, {"input_ids": feeds["input_ids"][i:i + 1]})[0]
        np.testing.assert_allclose(batched[i:i + 1], alone, **TOL)
