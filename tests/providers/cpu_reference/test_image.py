"""ImageDecoder: images encoded with pillow here decode to the exact pixels; bad bytes fail.

onnxruntime's CPU provider has no ImageDecoder kernel, so the oracle is the numpy image the
test encoded losslessly (PNG, BMP).
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from onnx_ep.core.kernel import NodeMeta
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference import image
from tests.helpers.oracle import node_model, run_ours

try:
    from PIL import Image
except ImportError:
    Image = None

needs_pillow = pytest.mark.skipif(
    Image is None, reason="pillow is not installed (pip install 'onnx-ep[image]')")

RNG = np.random.default_rng(20)
PIXELS = RNG.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)


def _encode(pixels: np.ndarray, fmt: str) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8).copy()


def _decode(encoded: np.ndarray, **attrs: object) -> np.ndarray:
    feeds = {"encoded": encoded}
    return run_ours(node_model("ImageDecoder", feeds, opset=20, **attrs), feeds)[0]


@needs_pillow
@pytest.mark.parametrize("fmt", ["PNG", "BMP"])
def test_lossless_rgb_round_trip_is_exact(fmt: str) -> None:
    out = _decode(_encode(PIXELS, fmt))
    assert out.dtype == np.uint8 and out.shape == (5, 7, 3)
    np.testing.assert_array_equal(out, PIXELS)


@needs_pillow
def test_default_pixel_format_is_rgb() -> None:
    encoded = _encode(PIXELS, "PNG")
    np.testing.assert_array_equal(_decode(encoded), _decode(encoded, pixel_format="RGB"))


@needs_pillow
@pytest.mark.parametrize("fmt", ["PNG", "BMP"])
def test_bgr_reverses_the_channels(fmt: str) -> None:
    out = _decode(_encode(PIXELS, fmt), pixel_format="BGR")
    assert out.shape == (5, 7, 3) and out.flags.c_contiguous
    np.testing.assert_array_equal(out, PIXELS[:, :, ::-1])


@needs_pillow
def test_grayscale_image_decodes_to_one_channel() -> None:
    gray = RNG.integers(0, 256, size=(4, 6), dtype=np.uint8)
    out = _decode(_encode(gray, "PNG"), pixel_format="Grayscale")
    assert out.dtype == np.uint8 and out.shape == (4, 6, 1)
    np.testing.assert_array_equal(out[:, :, 0], gray)


@needs_pillow
def test_rgb_to_grayscale_uses_itu_601_luma() -> None:
    out = _decode(_encode(PIXELS, "PNG"), pixel_format="Grayscale")
    expected = np.asarray(Image.fromarray(PIXELS).convert("L"))
    assert out.shape == (5, 7, 1)
    np.testing.assert_array_equal(out[:, :, 0], expected)
    # pillow's L = R*299/1000 + G*587/1000 + B*114/1000, rounded; stay within one level
    luma = PIXELS.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    assert np.abs(out[:, :, 0] - luma).max() <= 1


@needs_pillow
def test_grayscale_png_requested_as_rgb_repeats_the_channel() -> None:
    gray = RNG.integers(0, 256, size=(3, 3), dtype=np.uint8)
    out = _decode(_encode(gray, "PNG"))
    assert out.shape == (3, 3, 3)
    np.testing.assert_array_equal(out, np.repeat(gray[:, :, np.newaxis], 3, axis=2))


@needs_pillow
def test_alpha_channel_is_dropped() -> None:
    rgba = RNG.integers(0, 256, size=(3, 4, 4), dtype=np.uint8)
    out = _decode(_encode(rgba, "PNG"))
    np.testing.assert_array_equal(out, rgba[:, :, :3])


@needs_pillow
@pytest.mark.parametrize("payload", [b"not an image", b"", b"\x89PNG\r\n\x1a\n\x00\x00"])
def test_undecodable_bytes_raise_node_error(payload: bytes) -> None:
    with pytest.raises(NodeError, match="cannot decode"):
        _decode(np.frombuffer(payload, dtype=np.uint8).copy())


@needs_pillow
def test_truncated_png_raises_node_error() -> None:
    encoded = _encode(PIXELS, "PNG")
    with pytest.raises(NodeError, match="cannot decode"):
        _decode(encoded[: encoded.size // 2].copy())


@needs_pillow
def test_unknown_pixel_format_is_declined() -> None:
    meta = NodeMeta(name="n", op_type="ImageDecoder", domain="", opset=20,
                    attrs={"pixel_format": "CMYK"}, inputs=())
    support = image.ImageDecoder().supports(meta)
    assert not support and "pixel_format" in support.reason


def test_without_pillow_the_kernel_declines_with_install_advice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image, "_pil_image", lambda: None)
    meta = NodeMeta(name="n", op_type="ImageDecoder", domain="", opset=20, attrs={},
                    inputs=())
    support = image.ImageDecoder().supports(meta)
    assert not support
    assert support.reason == "ImageDecoder needs pillow: pip install 'onnx-ep[image]'"
