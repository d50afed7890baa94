"""GPU checks of the flat fast path of the elementwise and Cast kernels (ep_flat.cuh):
16-byte packs, grid-stride over one wave of blocks, a scalar tail, scalar operands, and
the fall back to the general loop for misaligned views. Every case is compared byte for
byte with cpu_reference (NaN payloads aside for computed results), so a wrong pack
index, a lost tail element or a misread scalar shows up as differing bytes.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_flat_paths.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec
from tests.helpers.cuda_elementwise import ROWS, reference

pytestmark = pytest.mark.cuda

BF16 = np.dtype(ml_dtypes.bfloat16)
#: sizes around the pack widths (2, 4, 8, 16 elements) and the tail, one large enough for
#: several grid-stride steps of a one-wave grid (132 SMs x 8 blocks x 256 threads x 4)
SIZES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 4095, 4097, 100_003]
LARGE = 3 * (1 << 20) + 5


def _values(dtype, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, n).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -100), min(info.max, 100), n, endpoint=True).astype(dt)
    v = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 30.0], n)
    return v.astype(np.float32).astype(dt)


def _device(a: np.ndarray, allocator, stream, offset: int) -> object:
    """``a`` on the device, starting ``offset`` elements into its allocation (offset 1
    misaligns every pack width)."""
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    flat = np.zeros(a.size + offset, a.dtype)
    flat[offset:] = a.reshape(-1)
    t = DeviceTensor.from_numpy(flat, allocator, stream, holder="test")
    return t.view(a.dtype, a.shape, offset * a.dtype.itemsize)


def _run(op: str, arrays, attrs: dict, stream, allocator, *, offsets=None,
         out_offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(cuda output, cpu_reference output) of one ``op`` node."""
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    meta = NodeMeta(name="n", op_type=op, domain="", opset=21, attrs=attrs,
                    inputs=tuple(TensorSpec(a.dtype, a.shape) for a in arrays))
    kernel = ROWS[op]
    verdict = kernel.supports(meta)
    assert verdict, verdict.reason
    bound = kernel.bind(meta)
    (spec,) = bound.infer_outputs(meta)
    offsets = offsets or [0] * len(arrays)
    inputs = [_device(a, allocator, stream, o) for a, o in zip(arrays, offsets)]
    item = np.dtype(spec.dtype).itemsize
    block = allocator.allocate(max(spec.nbytes + out_offset * item, 1), Role.ACTIVATIONS, "test")
    y = DeviceTensor(block.ptr + out_offset * item, spec.dtype, spec.shape, 0, owner=block)
    bound.execute_with_workspace(ExecutionContext(meta, stream=stream, provider="cuda"),
                                 inputs, [y], None)
    return y.numpy(stream), reference(op, arrays, meta)


def _same(what: str, got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    g = got.reshape(-1).view(np.uint8).reshape(got.size, -1)
    w = want.reshape(-1).view(np.uint8).reshape(want.size, -1)
    differs = (g != w).any(axis=1)
    if got.dtype.kind == "f" or got.dtype == BF16:
        differs &= ~(np.isnan(got.reshape(-1).astype(np.float64))
                     & np.isnan(want.reshape(-1).astype(np.float64)))
    bad = np.nonzero(differs)[0]
    assert bad.size == 0, (f"{what}: {bad.size} of {got.size} differ, first at "
                           f"{bad[:8].tolist()}: got {got.reshape(-1)[bad[:4]]!r}, "
                           f"want {want.reshape(-1)[bad[:4]]!r}")


@pytest.mark.parametrize("op,dtype", [("Add", np.float32), ("Mul", np.float16),
                                      ("Div", BF16), ("Sub", np.int8), ("Add", np.float64),
                                      ("Mul", np.int64), ("Equal", np.float16),
                                      ("Max", np.float16), ("Pow", np.float32)],
                         ids=lambda v: str(np.dtype(v)) if not isinstance(v, str) else v)
def test_binary_flat_sizes(op, dtype, stream, allocator):
    for n in SIZES:
        a, b = _values(dtype, n, 1), _values(dtype, n, 2)
        if op == "Pow":
            a = np.abs(a)
        _same(f"{op} n={n}", *_run(op, [a, b], {}, stream, allocator))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.uint8])
def test_binary_flat_large_and_misaligned(dtype, stream, allocator):
    a, b = _values(dtype, LARGE, 3), _values(dtype, LARGE, 4)
    _same("large", *_run("Add", [a, b], {}, stream, allocator))
    for offsets, out in (([1, 0], 0), ([0, 1], 0), ([0, 0], 1), ([1, 1], 1)):
        _same(f"offsets {offsets} out {out}",
              *_run("Mul", [a[:4099], b[:4099]], {}, stream, allocator, offsets=offsets,
                    out_offset=out))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int32, np.bool_])
def test_binary_flat_scalar_operands(dtype, stream, allocator):
    op = "And" if dtype == np.bool_ else "Sub"
    x = _values(dtype, 4 * 1027, 5).reshape(4, 1027)
    s = _values(dtype, 1, 6).reshape(())
    row = _values(dtype, 1, 7).reshape(1, 1)
    for a, b in ((x, s), (s, x), (x, row), (row, x), (s, s)):
        _same(f"{op} {a.shape} {b.shape}", *_run(op, [a, b], {}, stream, allocator))
    # a scalar behind a misaligned pointer is still read once (no pack alignment needed)
    _same("misaligned scalar", *_run(op, [x, s], {}, stream, allocator, offsets=[0, 1]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_])
def test_where_flat(dtype, stream, allocator):
    for n in (17, 4097, LARGE):
        c = _values(np.bool_, n, 8)
        x, y = _values(dtype, n, 9), _values(dtype, n, 10)
        _same(f"Where n={n}", *_run("Where", [c, x, y], {}, stream, allocator))
    c, x, y = _values(np.bool_, 33, 8), _values(dtype, 33, 9), _values(dtype, 1, 10).reshape(())
    _same("Where scalar y", *_run("Where", [c, x, y], {}, stream, allocator))
    _same("Where misaligned", *_run("Where", [c, x, x], {}, stream, allocator,
                                    offsets=[1, 0, 0]))


@pytest.mark.parametrize("op,dtype,attrs", [
    ("Relu", np.float16, {}), ("Exp", np.float32, {}), ("Neg", np.int8, {}),
    ("Abs", BF16, {}), ("Not", np.bool_, {}), ("IsNaN", np.float16, {}),
    ("LeakyRelu", np.float32, {"alpha": 0.1})], ids=lambda v: str(v))
def test_unary_flat(op, dtype, attrs, stream, allocator):
    for n in (1, 9, 17, 4097, LARGE):
        x = _values(dtype, n, 11)
        _same(f"{op} n={n}", *_run(op, [x], attrs, stream, allocator))
    x = _values(dtype, 4097, 12)
    _same(f"{op} misaligned", *_run(op, [x], attrs, stream, allocator, offsets=[1]))


def test_clip_flat(stream, allocator):
    x = _values(np.float16, 4099, 13)
    lo, hi = np.array(-0.5, np.float16), np.array(0.75, np.float16)
    _same("Clip", *_run("Clip", [x, lo, hi], {}, stream, allocator))
    xi = _values(np.int32, 4099, 14)
    _same("Clip int", *_run("Clip", [xi, np.array(-7, np.int32), np.array(9, np.int32)], {},
                            stream, allocator))


@pytest.mark.parametrize("src,dst", [(np.float32, np.float16), (np.float16, np.float32),
                                     (np.float32, BF16), (np.int64, np.int32),
                                     (np.uint8, np.float32), (np.float64, np.int8),
                                     (np.bool_, np.float16)], ids=lambda v: str(np.dtype(v)))
def test_cast_flat(src, dst, stream, allocator):
    for n in (1, 7, 9, 17, 4097, LARGE):
        x = _values(src, n, 15)
        _same(f"Cast n={n}", *_run("Cast", [x], {"to": onnx_elem_type(np.dtype(dst))},
                                   stream, allocator))
    x = _values(src, 4097, 16)
    for offsets, out in (([1], 0), ([0], 1)):
        _same(f"Cast misaligned {offsets} {out}",
              *_run("Cast", [x], {"to": onnx_elem_type(np.dtype(dst))}, stream, allocator,
                    offsets=offsets, out_offset=out))


def test_flat_runs_are_bit_identical(stream, allocator):
    a, b = _values(np.float16, LARGE, 17), _values(np.float16, LARGE, 18)
    first, _ = _run("Div", [a, b], {}, stream, allocator)
    again, _ = _run("Div", [a, b], {}, stream, allocator)
    assert first.tobytes() == again.tobytes()
