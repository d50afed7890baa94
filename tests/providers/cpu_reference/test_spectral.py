"""DFT / STFT / windows / MelWeightMatrix against onnxruntime and numpy's FFT."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(2)


@pytest.mark.parametrize("onesided", [0, 1])
def test_dft_of_real_signal_is_numpy_fft(onesided: int) -> None:
    x = RNG.standard_normal((2, 8, 1)).astype(np.float64)
    y = run_ours(node_model("DFT", {"x": x}, opset=17, axis=1, onesided=onesided),
                 {"x": x})[0]
    want = np.fft.fft(x[..., 0], axis=1)
    if onesided:
        want = want[:, :5]
    np.testing.assert_allclose(y[..., 0] + 1j * y[..., 1], want, rtol=1e-12, atol=1e-12)


def test_inverse_dft_undoes_forward_dft() -> None:
    x = RNG.standard_normal((3, 6, 2)).astype(np.float64)
    f = run_ours(node_model("DFT", {"x": x}, opset=17, axis=1), {"x": x})[0]
    back = run_ours(node_model("DFT", {"x": f}, opset=17, axis=1, inverse=1), {"x": f})[0]
    np.testing.assert_allclose(back, x, atol=1e-12)


def test_dft_matches_ort_with_length_and_axis_inputs() -> None:
    feeds = {"x": RNG.standard_normal((2, 7, 2)).astype(np.float32),
             "n": np.array(10, np.int64), "axis": np.array(-2, np.int64)}
    assert_matches_ort(node_model("DFT", feeds, opset=20), feeds, rtol=1e-5, atol=1e-5)


def test_stft_matches_ort() -> None:
    feeds = {"x": RNG.standard_normal((2, 32, 1)).astype(np.float32),
             "step": np.array(4, np.int64),
             "win": np.hanning(8).astype(np.float32)}
    assert_matches_ort(node_model("STFT", feeds, opset=17), feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_window_functions_match_ort(op: str, periodic: int) -> None:
    feeds = {"n": np.array(10, np.int64)}
    assert_matches_ort(node_model(op, feeds, opset=17, periodic=periodic), feeds,
                       rtol=1e-6, atol=1e-6)


def test_mel_weight_matrix_matches_ort() -> None:
    feeds = {"m": np.array(8, np.int64), "d": np.array(64, np.int64),
             "r": np.array(8000, np.int64), "lo": np.array(0.0, np.float32),
             "hi": np.array(3500.0, np.float32)}
    assert_matches_ort(node_model("MelWeightMatrix", feeds, opset=17), feeds, rtol=1e-6)


def test_dft_rejects_the_real_imaginary_axis() -> None:
    x = np.zeros((2, 4, 1), np.float32)
    with pytest.raises(NodeError, match="real/imaginary"):
        run_ours(node_model("DFT", {"x": x}, opset=17, axis=2), {"x": x})
