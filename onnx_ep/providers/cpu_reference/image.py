"""ImageDecoder (ai.onnx, opset 20): encoded image bytes to a uint8 HWC tensor.

Decoding is delegated to pillow, an optional dependency (``pip install 'onnx-ep[image]'``);
without it the kernel declines the node with that advice, so the rest of the package never
needs pillow. PIL is imported lazily, inside :meth:`ImageDecoder.supports` and
:meth:`ImageDecoder.run`, never at module import.

Pixels are whatever pillow's decoders produce. Lossless formats (PNG, BMP, TIFF, PNM,
lossless WebP) are exact by definition; lossy decoders (JPEG, JPEG 2000, lossy WebP) may
differ from another library's by a few levels per pixel, which is why this op is EXACT only
against another provider using the same pillow build.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Support
from onnx_ep.providers.cpu_reference.base import CpuKernel

_NO_PILLOW = "ImageDecoder needs pillow: pip install 'onnx-ep[image]'"

#: ONNX ``pixel_format`` -> the pillow mode decoded to before any channel reordering.
_MODES = {"RGB": "RGB", "BGR": "RGB", "Grayscale": "L"}


def _pil_image() -> Any:
    """The ``PIL.Image`` module, or ``None`` when pillow is not installed."""
    try:
        from PIL import Image  # noqa: PLC0415 - optional dependency, imported on use
    except ImportError:
        return None
    return Image


class ImageDecoder(CpuKernel):
    """Decode one encoded image (a 1-D uint8 tensor) to ``[H, W, C]`` uint8.

    ``C`` is 3 for ``pixel_format`` RGB and BGR, 1 for Grayscale. Images with an alpha
    channel, a palette or another mode are converted by pillow to RGB (alpha dropped)
    or luminance (ITU-R 601-2 luma, pillow's ``convert("L")``).
    """

    def __init__(self) -> None:
        super().__init__("ImageDecoder", since=20)

    def supports(self, meta: NodeMeta) -> Support:
        if _pil_image() is None:
            return Support.no(_NO_PILLOW)
        fmt = meta.attr("pixel_format", "RGB")
        if fmt not in _MODES:
            return Support.no(f"pixel_format must be RGB, BGR or Grayscale, got {fmt!r}")
        return super().supports(meta)

    def run(self, ctx: ExecutionContext, encoded: np.ndarray) -> np.ndarray:
        image_mod = _pil_image()
        if image_mod is None:
            raise self.fail(ctx, _NO_PILLOW)
        fmt = ctx.node.attr("pixel_format", "RGB")
        if fmt not in _MODES:
            raise self.fail(ctx, f"pixel_format must be RGB, BGR or Grayscale, got {fmt!r}")
        data = np.asarray(encoded)
        if data.dtype != np.uint8 or data.ndim != 1:
            raise self.fail(ctx, f"encoded_stream must be a 1-D uint8 tensor, got "
                                 f"{data.dtype} of shape {data.shape}")
        try:
            with image_mod.open(io.BytesIO(data.tobytes())) as img:
                img.load()
                pixels = np.asarray(img.convert(_MODES[fmt]), dtype=np.uint8)
        except (OSError, ValueError, SyntaxError) as exc:
            # pillow raises UnidentifiedImageError (an OSError) for unknown formats and
            # OSError/ValueError/SyntaxError for truncated or corrupt streams.
            raise self.fail(ctx, f"cannot decode the {data.size}-byte encoded_stream as an "
                                 f"image: {exc}") from exc
        if fmt == "Grayscale":
            return np.ascontiguousarray(pixels[:, :, np.newaxis])
        if fmt == "BGR":
            return np.ascontiguousarray(pixels[:, :, ::-1])
        return np.ascontiguousarray(pixels)


KERNELS: list[CpuKernel] = [ImageDecoder()]
