"""GPU parity of the CUDA QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and
BitCast against cpu_reference (one-node sessions on cuda only; EXACT, byte for byte).

Run: python -m pytest -q -m cuda tests/providers/cuda/test_quantize.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.kernel import Parity
from onnx_ep.providers.cuda.kernels import quantize
from tests.helpers import cuda_family

pytestmark = pytest.mark.cuda

OPSET = 25
BF16 = np.dtype(ml_dtypes.bfloat16)
Q_OUT = sorted(quantize.QUANTIZED, key=str)
X_TYPES = sorted(quantize.QUANTIZABLE, key=str)
DQ_IN = sorted(quantize.DEQUANTIZABLE, key=str)
DQ_OUT = sorted(quantize.OUTPUTS, key=str)
FLOAT4 = np.dtype(ml_dtypes.float4_e2m1fn)


def _x(dtype: np.dtype, shape=(4, 64), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == np.int32:
        v = rng.integers(-70000, 70000, n)
        v[:8] = [0, 1, -1, 127, -128, 255, 2**31 - 1, -2**31]
        return v.astype(np.int32).reshape(shape)
    v = rng.standard_normal(n) * rng.choice([0.01, 1.0, 30.0, 300.0, 1e5], n)
    # ties of round-half-to-even at scale 0.5, overflow and specials
    v[:24] = [0.25, 0.75, -0.25, -1.25, 63.75, 64.25, -64.25, 127.75, 1e9, -1e9, 224.0,
              -224.0, 0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-30, 3.0, 2.75, 1.5e38,
              -1.5e38, 0.2]
    with np.errstate(all="ignore"):
        return v.astype(dtype).reshape(shape)


def _zero_point(out: np.dtype, shape=(), seed=1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if out in quantize.FLOAT8:
        return np.zeros(shape, out)                     # float8 zero points must be 0
    if out == FLOAT4:
        return np.full(shape, 0.5, np.float32).astype(out)
    info = ml_dtypes.iinfo(out)
    return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(out)


def _check(op: str, feeds: dict, consts: dict, inputs: list[str], **attrs) -> None:
    m = cuda_family.model(op, feeds, attrs, consts=consts, inputs=inputs, opset=OPSET)
    cuda_family.check(m, feeds, Parity.EXACT, what=f"{op} {attrs}")


@pytest.mark.parametrize("x_dtype", X_TYPES, ids=[d.name for d in X_TYPES])
def test_quantize_per_tensor_every_output_type(x_dtype, cuda_device):
    x = _x(x_dtype)
    for out in Q_OUT:
        scale = np.array(0.5, np.float32 if x_dtype == np.int32 else x_dtype)
        zp = _zero_point(out)
        _check("QuantizeLinear", {"x": x}, {"s": scale, "zp": zp}, ["x", "s", "zp"])
        if out in quantize.FLOAT8:
            _check("QuantizeLinear", {"x": x}, {"s": scale, "zp": zp}, ["x", "s", "zp"],
                   saturate=0)


def test_quantize_without_zero_point_uses_output_dtype_or_uint8(cuda_device):
    x = _x(np.dtype(np.float32))
    s = np.array(0.25, np.float32)
    _check("QuantizeLinear", {"x": x}, {"s": s}, ["x", "s"])
    for out in (np.int16, ml_dtypes.int4, ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn):
        _check("QuantizeLinear", {"x": x}, {"s": s}, ["x", "s"],
               output_dtype=onnx_elem_type(out))


@pytest.mark.parametrize("out", [np.dtype(np.int8), np.dtype(ml_dtypes.uint4),
                                 np.dtype(ml_dtypes.float8_e4m3fn)], ids=str)
def test_quantize_per_axis_and_blocked(out, cuda_device):
    rng = np.random.default_rng(2)
    x = _x(np.dtype(np.float32), (3, 8, 5))
    for axis, block, p_shape in ((1, 0, (8,)), (-1, 0, (5,)), (1, 3, (3, 3, 5)),
                                 (2, 2, (3, 8, 3))):
        s = rng.uniform(0.05, 2.0, p_shape).astype(np.float32)
        zp = _zero_point(np.dtype(out), p_shape)
        _check("QuantizeLinear", {"x": x}, {"s": s, "zp": zp}, ["x", "s", "zp"], axis=axis,
               block_size=block)


def test_quantize_float64_and_float16_scales(cuda_device):
    x = _x(np.dtype(np.float64))
    for out in (np.uint8, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, FLOAT4):
        _check("QuantizeLinear", {"x": x}, {"s": np.array(0.3, np.float64),
                                            "zp": _zero_point(np.dtype(out))}, ["x", "s", "zp"])
    x16 = _x(np.dtype(np.float16))
    _check("QuantizeLinear", {"x": x16}, {"s": np.array(0.3, np.float16),
                                          "zp": _zero_point(np.dtype(np.int8))}, ["x", "s", "zp"])


def _codes(dtype: np.dtype) -> np.ndarray:
    n = {np.dtype(ml_dtypes.int4): 16, np.dtype(ml_dtypes.uint4): 16, FLOAT4: 16,
         np.dtype(ml_dtypes.int2): 4, np.dtype(ml_dtypes.uint2): 4}.get(dtype, 256)
    if dtype.itemsize == 1:
        return np.tile(np.arange(n, dtype=np.uint8), 2).view(dtype).reshape(2, -1)
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    v = rng.integers(int(info.min), int(info.max) + 1, 512)
    v[:2] = [info.min, info.max]
    return v.astype(dtype).reshape(2, -1)


@pytest.mark.parametrize("x_dtype", DQ_IN, ids=[d.name for d in DQ_IN])
def test_dequantize_every_code_to_every_output_type(x_dtype, cuda_device):
    x = _codes(x_dtype)
    zp = (np.zeros((), x_dtype) if x_dtype in quantize.FLOAT8 or x_dtype == FLOAT4
          or x_dtype == np.int32 else _zero_point(x_dtype))
    for out in DQ_OUT:
        s = np.array(0.1, out)
        _check("DequantizeLinear", {"x": x}, {"s": s, "zp": zp}, ["x", "s", "zp"])
    _check("DequantizeLinear", {"x": x}, {"s": np.array(3.0, np.float32)}, ["x", "s"],
           output_dtype=onnx.TensorProto.BFLOAT16)


def test_dequantize_per_axis_and_blocked(cuda_device):
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (4, 6, 5)).astype(np.int8)
    for axis, block, p_shape in ((1, 0, (6,)), (0, 0, (4,)), (1, 4, (4, 2, 5)),
                                 (-1, 2, (4, 6, 3))):
        s = rng.uniform(0.01, 3.0, p_shape).astype(np.float32)
        zp = rng.integers(-128, 128, p_shape).astype(np.int8)
        _check("DequantizeLinear", {"x": x}, {"s": s, "zp": zp}, ["x", "s", "zp"], axis=axis,
               block_size=block)


@pytest.mark.parametrize("case", ["random", "positive", "negative", "zeros", "nan", "inf",
                                  "one"])
def test_dynamic_quantize(case, cuda_device):
    rng = np.random.default_rng(6)
    x = {"random": rng.standard_normal((7, 33)) * 4,
         "positive": rng.uniform(0.5, 9.0, (3, 100)),
         "negative": -rng.uniform(0.5, 9.0, (1000,)),
         "zeros": np.zeros((5, 5)),
         "nan": np.array([1.0, np.nan, -3.0, 2.5]),
         "inf": np.array([1.0, np.inf, -3.0, 2.5]),
         "one": np.array([-0.7])}[case].astype(np.float32)
    m = cuda_family.model("DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=OPSET)
    cuda_family.check(m, {"x": x}, Parity.EXACT)


@pytest.mark.parametrize("src,dst", [(np.float32, np.int32), (np.int64, np.float64),
                                     (np.bool_, np.uint8), (np.uint16, np.float16),
                                     (ml_dtypes.int4, ml_dtypes.uint4)], ids=str)
def test_bitcast_views_the_bytes(src, dst, cuda_device):
    x = np.arange(12).reshape(3, 4).astype(src)
    m = cuda_family.model("BitCast", {"x": x}, {"to": onnx_elem_type(dst)}, opset=26)
    cuda_family.check(m, {"x": x}, Parity.EXACT)
