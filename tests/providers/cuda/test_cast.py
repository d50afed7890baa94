"""GPU parity of the CUDA Cast for the narrow and wide integer types, byte for byte.

Every bit pattern of each one-byte source (float8s, float8e8m0, float4e2m1, int4, uint4,
int2, uint2, int8, uint8) goes to every target with saturate 1 and 0 (and the three
round modes of float8e8m0); float and wide integer sources go to the new targets with
specials, the float8 grids' midpoints and random values. Arrays hold a multiple of 4
elements: numpy's float -> uint32 of NaN / out-of-range values differs in its scalar tail
loop (see cast.py), and the kernels reproduce its vectorized loop.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_cast.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity, TensorSpec
from onnx_ep.providers.cpu_reference import cast as ref_cast
from onnx_ep.providers.cuda.kernels import cast
from tests.helpers import cuda_family

pytestmark = pytest.mark.cuda

ALL = sorted(cast.DTYPES, key=str)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
BYTE_SOURCES = [np.dtype(t) for t in (
    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn,
    ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2, np.int8, np.uint8)]
#: canonical codes per byte source: sub-byte types use only their low bits
CODES = {ml_dtypes.float4_e2m1fn: 16, ml_dtypes.int4: 16, ml_dtypes.uint4: 16,
         ml_dtypes.int2: 4, ml_dtypes.uint2: 4}


def _meta(x: np.ndarray, dst: np.dtype, **attrs) -> NodeMeta:
    return NodeMeta(name="n", op_type="Cast", domain="", opset=24,
                    attrs={"to": onnx_elem_type(dst), **attrs},
                    inputs=(TensorSpec(x.dtype, x.shape),))


def _reference(x: np.ndarray, dst: np.dtype, saturate: int, round_mode: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return ref_cast.cast(x, dst, saturate=bool(saturate), round_mode=round_mode)


def _run(x: np.ndarray, dst: np.dtype, stream, allocator, **attrs) -> np.ndarray:
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    meta = _meta(x, dst, **attrs)
    kernel = cast.KERNELS[0]
    assert kernel.supports(meta), kernel.supports(meta).reason
    bound = kernel.bind(meta)
    (spec,) = bound.infer_outputs(meta)
    xd = DeviceTensor.from_numpy(x, allocator, stream, holder="test")
    block = allocator.allocate(max(spec.nbytes, 1), Role.ACTIVATIONS, "test")
    y = DeviceTensor(block.ptr, spec.dtype, spec.shape, xd.device, owner=block)
    bound.execute_with_workspace(ExecutionContext(meta, stream=stream, provider="cuda"),
                                 [xd], [y], None)
    return y.numpy(stream)


def _same_bytes(x, got, want, what) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    g = got.reshape(-1).view(np.uint8).reshape(got.size, -1)
    w = want.reshape(-1).view(np.uint8).reshape(want.size, -1)
    bad = np.flatnonzero((g != w).any(axis=1))
    if bad.size:
        xs = x.reshape(-1)
        rows = [f"  [{i}] x={xs[i]!r} (0x{xs[i:i + 1].view(np.uint8).tobytes().hex()}) "
                f"got=0x{g[i][::-1].tobytes().hex()} want=0x{w[i][::-1].tobytes().hex()}"
                for i in bad[:8]]
        pytest.fail(f"{what}: {bad.size} of {got.size} differ\n" + "\n".join(rows))


def _variants(dst: np.dtype):
    """(saturate, round_mode) pairs that can change a cast into ``dst``."""
    if dst == E8M0:
        return [(s, m) for s in (1, 0) for m in ("up", "down", "nearest")]
    if dst in ref_cast.SATURATING_FLOAT8:
        return [(1, "up"), (0, "up")]
    return [(1, "up")]


def _check_all_targets(x: np.ndarray, stream, allocator) -> None:
    for dst in ALL:
        for sat, mode in _variants(dst):
            got = _run(x, dst, stream, allocator, saturate=sat, round_mode=mode)
            _same_bytes(x, got, _reference(x, dst, sat, mode),
                        f"{x.dtype} -> {dst} saturate={sat} round_mode={mode}")


@pytest.mark.parametrize("src", BYTE_SOURCES, ids=[d.name for d in BYTE_SOURCES])
def test_every_bit_pattern_of_a_byte_source_to_every_target(src, stream, allocator):
    n = CODES.get(src.type, 256)
    x = np.tile(np.arange(n, dtype=np.uint8), 4).view(src)  # 4 copies: a multiple of 4
    _check_all_targets(x, stream, allocator)


WIDE = [np.dtype(t) for t in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64,
                              np.int64, np.int32, np.int16, np.uint64, np.uint32, np.uint16,
                              np.bool_)]


def _wide_values(src: np.dtype) -> np.ndarray:
    rng = np.random.default_rng(3)
    if src == np.bool_:
        return np.tile(np.array([True, False]), 8)
    if src.kind in "iu":
        info = np.iinfo(src)
        v = rng.integers(info.min, info.max, 1000, endpoint=True, dtype=src)
        small = np.arange(-20, 20).clip(info.min, info.max).astype(src)
        edges = np.array([e for e in (int(info.min), int(info.max), 0, 1, 7, 8, 15, 16, 448, 449,
                                      464, 57344, 61440) if info.min <= e <= info.max], src)
        return np.concatenate([small, edges, v])[:1048]
    grids = [np.arange(256, dtype=np.uint8).view(t).astype(np.float64)
             for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
                       ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu)]
    grids.append(np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64))
    with np.errstate(all="ignore"):
        fin = np.unique(np.concatenate([g[np.isfinite(g)] for g in grids]))
        mids = (fin[1:] + fin[:-1]) / 2
        parts = [np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3e9, -3e9, 1e20, 7e4,
                           2.0**31, 2.0**32, 2.0**63, 2.0**64, 1e-40, 1e-300, 5e-324]),
                 fin, mids, rng.standard_normal(400) * 10.0 ** rng.integers(-4, 6, 400)]
        x = np.concatenate(parts)
        x = np.concatenate([x, -x]).astype(src)
    return x[: len(x) - len(x) % 4]


@pytest.mark.parametrize("src", WIDE, ids=[d.name for d in WIDE])
def test_wide_sources_to_every_target(src, stream, allocator):
    _check_all_targets(_wide_values(src), stream, allocator)


def test_a_session_runs_float8_and_int4_casts_on_cuda(cuda_device):
    x = np.array([[0.1, -3.0, 500.0, np.inf], [np.nan, 1e-3, -448.0, 7.5]], np.float32)
    for to, sat in ((onnx.TensorProto.FLOAT8E4M3FN, 0), (onnx.TensorProto.FLOAT8E5M2, 1),
                    (onnx.TensorProto.INT4, 1), (onnx.TensorProto.FLOAT4E2M1, 1)):
        m = cuda_family.model("Cast", {"x": x}, {"to": to, "saturate": sat}, opset=23)
        cuda_family.check(m, {"x": x}, Parity.EXACT)
    like = np.zeros(1, ml_dtypes.float8_e4m3fnuz)
    m = cuda_family.model("CastLike", {"x": x, "like": like}, opset=23)
    cuda_family.check(m, {"x": x, "like": like}, Parity.EXACT)
