"""RNN / GRU / LSTM against onnxruntime (directions, sequence_lens, layout, activations)."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(9)
SEQ, BATCH, IN, HID = 4, 3, 5, 6


def _r(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.5).astype(np.float32)


def _feeds(op: str, dirs: int, lens: bool, layout: int = 0) -> dict[str, np.ndarray]:
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    x = _r(BATCH, SEQ, IN) if layout else _r(SEQ, BATCH, IN)
    feeds = {"X": x, "W": _r(dirs, g * HID, IN), "R": _r(dirs, g * HID, HID),
             "B": _r(dirs, 2 * g * HID),
             "sequence_lens": (np.array([4, 2, 1], np.int32) if lens
                               else np.full(BATCH, SEQ, np.int32)),
             "initial_h": _r(BATCH, dirs, HID) if layout else _r(dirs, BATCH, HID)}
    if op == "LSTM":
        feeds["initial_c"] = _r(BATCH, dirs, HID) if layout else _r(dirs, BATCH, HID)
        feeds["P"] = _r(dirs, 3 * HID)
    return feeds


CASES = [
    ("RNN", "forward", True, {}), ("RNN", "bidirectional", True,
                                   {"activations": ["Relu", "Tanh"]}),
    ("GRU", "reverse", True, {}), ("GRU", "bidirectional", False, {"linear_before_reset": 1}),
    ("LSTM", "forward", False, {}), ("LSTM", "bidirectional", True, {"clip": 0.8}),
    ("LSTM", "reverse", True, {"input_forget": 1}),
]


@pytest.mark.parametrize("op, direction, lens, attrs", CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_recurrent_layer_matches_ort(op: str, direction: str, lens: bool, attrs: dict) -> None:
    dirs = 2 if direction == "bidirectional" else 1
    feeds = _feeds(op, dirs, lens)
    n_out = 3 if op == "LSTM" else 2
    model = node_model(op, feeds, n_out, opset=14, hidden_size=HID, direction=direction,
                       **attrs)
    assert_matches_ort(model, feeds, rtol=1e-5, atol=1e-5)


def test_lstm_batch_major_layout_is_the_transposed_seq_major_result() -> None:
    # onnxruntime rejects layout=1, so the oracle is our layout=0 result (checked above)
    feeds = _feeds("LSTM", 2, True)
    seq = run_ours(node_model("LSTM", feeds, 3, opset=14, hidden_size=HID,
                              direction="bidirectional"), feeds)
    bm = dict(feeds, X=feeds["X"].transpose(1, 0, 2),
              initial_h=feeds["initial_h"].transpose(1, 0, 2),
              initial_c=feeds["initial_c"].transpose(1, 0, 2))
    got = run_ours(node_model("LSTM", bm, 3, opset=14, hidden_size=HID,
                              direction="bidirectional", layout=1), bm)
    np.testing.assert_array_equal(got[0], seq[0].transpose(2, 0, 1, 3))
    np.testing.assert_array_equal(got[1], seq[1].transpose(1, 0, 2))
    np.testing.assert_array_equal(got[2], seq[2].transpose(1, 0, 2))


def test_rnn_rejects_unknown_activation() -> None:
    feeds = _feeds("RNN", 1, False)
    model = node_model("RNN", feeds, 2, opset=14, hidden_size=HID, activations=["Cube"])
    with pytest.raises(NodeError, match="unknown activation"):
        run_ours(model, feeds)


def test_gru_rejects_sequence_lens_longer_than_the_sequence() -> None:
    feeds = _feeds("GRU", 1, False)
    feeds["sequence_lens"] = np.array([5, 1, 1], np.int32)
    with pytest.raises(NodeError, match="sequence_lens"):
        run_ours(node_model("GRU", feeds, 2, opset=14, hidden_size=HID), feeds)
