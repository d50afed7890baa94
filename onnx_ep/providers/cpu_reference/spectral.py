"""Signal processing: DFT, STFT, Hann/Hamming/Blackman windows, MelWeightMatrix.

Numerics: transforms run through numpy's FFT in complex64 for float16/32 inputs and
complex128 for float64 (numpy >= 2 keeps single precision; the ONNX expectations are
computed that way, and near-zero outputs differ beyond their atol otherwise); window
formulas run in float64; each result is rounded once to the output dtype.
Parity: tolerance (FFT algorithms differ in summation order).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel, FnKernel, normalize_axis
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast

_FFT_PARITY = Parity.tolerance(1e-5, 1e-6)


def _scalar_int(ctx: ExecutionContext, v: Any, what: str) -> int:
    a = np.asarray(v)
    if a.size != 1:
        raise CpuKernel.fail(ctx, f"{what} must be a scalar, got shape {a.shape}")
    return int(a.reshape(-1)[0])


def _as_complex(ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
    """(..., 1) real or (..., 2) real/imag pairs -> complex128 without the last axis."""
    if x.ndim < 2 or x.shape[-1] not in (1, 2):
        raise CpuKernel.fail(ctx, f"input's last dim must be 1 (real) or 2 (complex), got "
                                  f"shape {x.shape}")
    real = np.float64 if x.dtype == np.float64 else np.float32
    ctype = np.complex128 if real == np.float64 else np.complex64
    xf = upcast(x).astype(real)
    if x.shape[-1] == 1:
        return xf[..., 0].astype(ctype)
    return (xf[..., 0] + 1j * xf[..., 1]).astype(ctype)


def _pairs(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return round_to(np.stack([z.real, z.imag], axis=-1), dtype)


def dft(z: np.ndarray, n: int, axis: int, *, inverse: bool, onesided: bool) -> np.ndarray:
    """complex128 ``z`` transformed along ``axis``; returns complex (or real for irfft)."""
    if inverse:
        if onesided:
            return np.fft.irfft(z, n=n, axis=axis)
        return np.fft.ifft(z, n=n, axis=axis)
    y = np.fft.fft(z, n=n, axis=axis)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return y


class DFT(CpuKernel):
    parity = _FFT_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, dft_length: Any = None,
            axis_in: Any = None) -> np.ndarray:
        node = ctx.node
        if node.opset >= 20:
            axis = -2 if axis_in is None else _scalar_int(ctx, axis_in, "axis")
        else:
            axis = int(node.attr("axis", 1))
        axis = normalize_axis(ctx, axis, x.ndim)
        if axis == x.ndim - 1:
            raise self.fail(ctx, f"axis {axis} is the real/imaginary axis of shape {x.shape}")
        inverse = bool(node.attr("inverse", 0))
        onesided = bool(node.attr("onesided", 0))
        if dft_length is not None:
            n = _scalar_int(ctx, dft_length, "dft_length")
        elif inverse and onesided:
            n = 2 * (x.shape[axis] - 1)
        else:
            n = x.shape[axis]
        if n < 1:
            raise self.fail(ctx, f"dft_length must be >= 1, got {n}")
        y = dft(_as_complex(ctx, x), n, axis, inverse=inverse, onesided=onesided)
        if np.iscomplexobj(y):
            return _pairs(y, x.dtype)
        return round_to(y[..., None], x.dtype)


class STFT(CpuKernel):
    parity = _FFT_PARITY

    def run(self, ctx: ExecutionContext, x: np.ndarray, frame_step: Any,
            window: np.ndarray | None = None, frame_length: Any = None) -> np.ndarray:
        step = _scalar_int(ctx, frame_step, "frame_step")
        if frame_length is not None:
            length = _scalar_int(ctx, frame_length, "frame_length")
        elif window is not None:
            length = window.shape[0]
        else:
            raise self.fail(ctx, "STFT needs a window or a frame_length")
        if window is not None and window.shape != (length,):
            raise self.fail(ctx, f"window must have shape ({length},), got {window.shape}")
        if x.ndim != 3 or step < 1 or not 1 <= length <= x.shape[1]:
            raise self.fail(ctx, f"signal must be (batch, length, 1|2) with 1 <= frame_length "
                                 f"<= length and frame_step >= 1; got {x.shape}, "
                                 f"frame_length {length}, frame_step {step}")
        z = _as_complex(ctx, x)                                   # (batch, length)
        n_frames = 1 + (x.shape[1] - length) // step
        idx = np.arange(n_frames)[:, None] * step + np.arange(length)[None, :]
        frames = z[:, idx]                                        # (batch, frames, length)
        if window is not None:
            frames = frames * upcast(window).astype(frames.real.dtype)
        onesided = bool(ctx.node.attr("onesided", 1)) and x.shape[-1] == 1
        y = dft(frames, length, 2, inverse=False, onesided=onesided)
        return _pairs(y, x.dtype)


def _window(a: tuple[float, ...]) -> Any:
    """A generalized cosine window sum_k (-1)^k a_k cos(2 pi k n / N)."""

    def fn(ctx: ExecutionContext, size: Any) -> np.ndarray:
        n_total = _scalar_int(ctx, size, "size")
        if n_total < 0:
            raise CpuKernel.fail(ctx, f"size must be >= 0, got {n_total}")
        periodic = int(ctx.node.attr("periodic", 1))
        denom = n_total if periodic else n_total - 1
        n = np.arange(n_total, dtype=np.float64)
        phase = 2 * np.pi * n / denom if denom > 0 else np.zeros_like(n)
        w = sum(((-1) ** k) * ak * np.cos(k * phase) for k, ak in enumerate(a))
        return round_to(w, np_dtype(int(ctx.node.attr("output_datatype", 1))))

    return fn


def _mel_weight_matrix(ctx: ExecutionContext, num_mel_bins: Any, dft_length: Any,
                       sample_rate: Any, lower_hz: Any, upper_hz: Any) -> np.ndarray:
    n_mel = _scalar_int(ctx, num_mel_bins, "num_mel_bins")
    n_dft = _scalar_int(ctx, dft_length, "dft_length")
    rate = _scalar_int(ctx, sample_rate, "sample_rate")
    lo = float(np.asarray(lower_hz).reshape(-1)[0])
    hi = float(np.asarray(upper_hz).reshape(-1)[0])
    if n_mel < 1 or n_dft < 1 or rate < 1 or not 0 <= lo < hi:
        raise CpuKernel.fail(ctx, f"need num_mel_bins, dft_length, sample_rate >= 1 and 0 <= "
                                  f"lower_edge_hertz < upper_edge_hertz; got {n_mel}, {n_dft}, "
                                  f"{rate}, {lo}, {hi}")
    n_spec = n_dft // 2 + 1
    lo_mel = 2595 * np.log1p(lo / 700) / np.log(10)
    hi_mel = 2595 * np.log1p(hi / 700) / np.log(10)
    mel = np.arange(n_mel + 2) * ((hi_mel - lo_mel) / (n_mel + 2)) + lo_mel
    hz = 700 * np.expm1(mel / 2595 * np.log(10))
    bins = (((n_dft + 1) * hz) // rate).astype(np.int64)
    if bins.max() >= n_spec:
        raise CpuKernel.fail(ctx, f"upper_edge_hertz {hi} maps past the {n_spec} spectrogram "
                                  f"bins of dft_length {n_dft} at sample_rate {rate}")
    left, center, right = bins[:-2], bins[1:-1], bins[2:]
    j = np.arange(n_spec)[:, None]
    rise_w = np.maximum(center - left, 1).astype(np.float64)
    fall_w = np.maximum(right - center, 1).astype(np.float64)
    out = np.where((j >= left) & (j <= center), (j - left) / rise_w, 0.0)
    out = np.where((j >= center) & (j < right), (right - j) / fall_w, out)
    out = np.where((j == center) & (center == left), 1.0, out)
    return round_to(out, np_dtype(int(ctx.node.attr("output_datatype", 1))))


KERNELS: list[CpuKernel] = [
    DFT("DFT", since=17),
    STFT("STFT", since=17),
    FnKernel("HannWindow", _window((0.5, 0.5)), since=17),
    FnKernel("HammingWindow", _window((25 / 46, 21 / 46)), since=17),
    FnKernel("BlackmanWindow", _window((0.42, 0.5, 0.08)), since=17),
    FnKernel("MelWeightMatrix", _mel_weight_matrix, since=17),
]
