"""Host-side logic of the CUDA shape family (no GPU): Shape's start/end, the values and bits
passed as kernel arguments, the fill plan, Trilu's index math, shape inference (with and
without the input values the plan knows), supports.

The argument tests replay what ``shape.cu`` does with them in numpy (``(T)bits`` keeps the
low bytes; ``fill_x<w>`` repeats one word), so wrong packing fails here.
"""

from __future__ import annotations

import ctypes
import sys

import attrs
import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import OpKey, Parity, TensorSpec
from onnx_ep.providers.cpu_reference import shape as ref_shape
from onnx_ep.providers.cuda.kernels import shape as sh
from tests.helpers.byte_memory import ByteMemory
from tests.helpers.host_meta import by_op, spec_meta

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
KERNELS = by_op(sh.KERNELS)


# ---------------------------------------------------------------- Shape, Size

@pytest.mark.parametrize("rank", [0, 1, 3, 10])
def test_shape_slice_matches_the_reference(rank):
    from onnx_ep.core.kernel import ExecutionContext

    x = np.zeros((1, 2, 3, 1, 2, 1, 1, 2, 1, 3)[:rank])
    for start in (None, -100, -2, -1, 0, 1, 2, 100):
        for end in (None, -100, -1, 0, 1, 3, 100):
            attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
            ctx = ExecutionContext(spec_meta("Shape", [TensorSpec(x.dtype, x.shape)], 15, **attrs))
            want = ref_shape.Shape("Shape").run(ctx, x)
            got = KERNELS["Shape"].values(ctx.node, x.shape)
            assert got == want.tolist(), (start, end)
            spec = KERNELS["Shape"].infer_outputs(ctx.node)[0]
            assert spec == TensorSpec(I64, (len(want),))


def test_size_is_a_scalar_product():
    meta = spec_meta("Size", [TensorSpec(F32, (2, 3, 4))])
    assert KERNELS["Size"].infer_outputs(meta) == [TensorSpec(I64, ())]
    assert KERNELS["Size"].values(meta, (2, 3, 4)) == [24]
    assert KERNELS["Size"].values(meta, ()) == [1]
    assert KERNELS["Size"].values(meta, (5, 0)) == [0]


def test_shape_values_travel_eight_per_launch():
    # struct I64x8 { long long v[8]; int n; } -> 72 bytes with its 8-byte alignment
    assert ctypes.sizeof(sh.I64x8) == 72
    values = list(range(100, 120))
    chunks = sh.value_chunks(values)
    assert [first for first, _ in chunks] == [0, 8, 16]
    out = [0] * len(values)
    for first, c in chunks:                       # what write_i64 does, launch by launch
        for j, v in enumerate(c.values()):
            out[first + j] = v
    assert out == values
    assert sh.value_chunks([]) == []
    with pytest.raises(ValueError):
        sh.I64x8.of(range(9))
    assert sh.I64x8.of([-(2 ** 63), 2 ** 63 - 1]).values() == [-(2 ** 63), 2 ** 63 - 1]


# ---------------------------------------------------------------- value bits

def _device_fill(width: int, bits: int, count: int) -> bytes:
    """``fill_x<width>``: each element is the low ``width`` bytes of ``bits``."""
    return (bits & ((1 << (8 * width)) - 1)).to_bytes(width, sys.byteorder) * count


@pytest.mark.parametrize("value", [
    np.array([7], np.int32), np.array([-3], np.int64), np.array([1.5], np.float32),
    np.array([-0.0], np.float16), np.array([2.25], BF16), np.array([True]), np.array([False]),
    np.array([200], np.uint8), np.array([np.pi]), np.array([-5], np.int8),
    np.array([np.nan], np.float32), np.array([-1], np.int16), np.array([2 ** 64 - 1], np.uint64),
], ids=lambda v: f"{v.dtype}-{v[0]}")
@pytest.mark.parametrize("count,offset", [(1, 0), (7, 0), (24, 0), (24, 1), (1000, 3)])
def test_fill_plan_reproduces_np_full(value, count, offset):
    dt, bits = sh.value_bits(value)
    assert dt == value.dtype
    ptr = 256 + offset * dt.itemsize            # an output starting `offset` elements in
    w, word, n = sh.fill_plan(dt.itemsize, bits, count, ptr)
    assert w in (1, 2, 4, 8) and ptr % w == 0 and n * w == count * dt.itemsize
    assert _device_fill(w, word, n) == np.full(count, value[0], dtype=dt).tobytes()


def test_value_bits_needs_one_element():
    with pytest.raises(ValueError):
        sh.value_bits(np.zeros(2, np.float32))
    assert sh.value_bits(np.float32(0)) == (F32, 0)


@pytest.mark.parametrize("dtype", sorted(sh.VALUE_DTYPES, key=str))
def test_one_bits_are_numpy_eye_in_the_dtype(dtype):
    one = _device_fill(dtype.itemsize, sh.one_bits(dtype), 1)
    assert one == np.eye(1).astype(dtype).tobytes()


# ---------------------------------------------------------------- Trilu, EyeLike index math

def _device_trilu(x: np.ndarray, k: int, upper: int) -> np.ndarray:
    """``trilu`` of shape.cu over the flat index i."""
    rows, cols = x.shape[-2:]
    i = np.arange(x.size)
    q, c = i // cols, i % cols
    r = q % rows
    keep = (c - r >= k) if upper else (c - r <= k)
    return np.where(keep, x.reshape(-1), np.zeros((), x.dtype)).reshape(x.shape)


@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 6, 4), (3, 1, 7), (5, 1)])
@pytest.mark.parametrize("k", [None, 0, 2, -3, 50])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_index_math_matches_the_reference(shape, k, upper):
    from onnx_ep.core.kernel import ExecutionContext

    x = np.arange(1, int(np.prod(shape)) + 1, dtype=np.float32).reshape(shape)
    ctx = ExecutionContext(spec_meta("Trilu", [TensorSpec(F32, shape)], upper=upper))
    want = ref_shape.Trilu("Trilu").run(ctx, x, None if k is None else np.array(k))
    np.testing.assert_array_equal(_device_trilu(x, 0 if k is None else k, upper), want)


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (1, 1)])
@pytest.mark.parametrize("k", [0, 2, -1, 9])
def test_eye_index_math_matches_numpy(shape, k):
    rows, cols = shape
    i = np.arange(rows * cols)
    r, c = i // cols, i % cols
    np.testing.assert_array_equal((c - r == k).reshape(shape), np.eye(rows, cols, k=k) == 1)


# ---------------------------------------------------------------- inference and supports

def test_infer_outputs():
    x = TensorSpec(F32, (3, 5))
    assert KERNELS["EyeLike"].infer_outputs(spec_meta("EyeLike", [x])) == [x]
    assert KERNELS["EyeLike"].infer_outputs(spec_meta("EyeLike", [x], dtype=7)) == \
        [TensorSpec(I64, (3, 5))]
    assert KERNELS["Trilu"].infer_outputs(spec_meta("Trilu", [TensorSpec(BF16, (2, 4, 4)), None])) \
        == [TensorSpec(BF16, (2, 4, 4))]
    assert KERNELS["Shape"].infer_outputs(spec_meta("Shape", [TensorSpec(F32, ("N", 3, 4))])) == \
        [TensorSpec(I64, (3,))]
    # ConstantOfShape / Range: the size is in device values (onnx inference sizes them)
    s = TensorSpec(I64, (2,))
    assert KERNELS["ConstantOfShape"].infer_outputs(spec_meta("ConstantOfShape", [s])) == [None]
    assert KERNELS["ConstantOfShape"].infer_outputs(
        spec_meta("ConstantOfShape", [TensorSpec(I64, (0,))], value=np.array([3], np.int8))) == \
        [TensorSpec(np.int8, ())]
    r = TensorSpec(F32, ())
    assert KERNELS["Range"].infer_outputs(spec_meta("Range", [r, r, r])) == [None]


def _known(meta, values):
    """``meta`` with the input values the plan knows, by input position."""
    return attrs.evolve(meta, constants={i: np.asarray(v) for i, v in values.items()})


@pytest.mark.parametrize("dims", [[2, 3], [0, 4], [5], [], [2, -1]])
def test_constant_of_shape_sizes_from_a_known_shape(dims):
    from onnx_ep.core.kernel import ExecutionContext
    from onnx_ep.errors import NodeError

    shape = np.array(dims, I64)
    value = np.array([7], np.int8)
    meta = spec_meta("ConstantOfShape", [TensorSpec(I64, shape.shape)], value=value)
    try:
        want = ref_shape.ConstantOfShape("ConstantOfShape").run(ExecutionContext(meta), shape)
        expected = [TensorSpec(np.int8, want.shape)]
    except NodeError:
        expected = [None]
    assert KERNELS["ConstantOfShape"].infer_outputs(_known(meta, {0: shape})) == expected
    if dims:
        assert KERNELS["ConstantOfShape"].infer_outputs(meta) == [None]


@pytest.mark.parametrize("dtype,start,limit,delta", [
    (np.int64, 0, 10, 3), (np.int32, 10, -3, -4), (np.int16, 5, 5, 1), (np.int64, 0, 5, -1),
    (np.float32, 0.5, 3.25, 0.5), (np.float32, 1.0, -2.0, -0.3), (np.float64, 0, 1, 0.1),
    (np.float16, 0, 2, 0.25), (BF16, 1, 9, 1.5), (np.int64, 1, 2, 0), (np.float32, 0, np.inf, 1)])
def test_range_sizes_from_known_bounds_like_the_reference(dtype, start, limit, delta):
    from onnx_ep.core.kernel import ExecutionContext
    from onnx_ep.errors import NodeError

    vals = [np.array(v).astype(dtype) for v in (start, limit, delta)]
    meta = spec_meta("Range", [TensorSpec(v.dtype, ()) for v in vals])
    try:
        with np.errstate(all="ignore"):
            want = ref_shape.Range("Range").run(ExecutionContext(meta), *vals)
        expected = [TensorSpec(np.dtype(dtype), want.shape)]
    except (NodeError, OverflowError, ValueError):
        expected = [None]
    assert KERNELS["Range"].infer_outputs(_known(meta, dict(enumerate(vals)))) == expected
    assert KERNELS["Range"].infer_outputs(_known(meta, {0: vals[0], 2: vals[2]})) == [None]


def test_supports_declines_what_cannot_run():
    f = TensorSpec(F32, ())
    i32 = TensorSpec(np.int32, ())
    assert KERNELS["Range"].supports(spec_meta("Range", [i32, i32, i32]))
    assert KERNELS["Range"].supports(spec_meta("Range", [TensorSpec(BF16, ())] * 3))
    assert not KERNELS["Range"].supports(spec_meta("Range", [f, i32, f]))
    assert not KERNELS["Range"].supports(spec_meta("Range", [TensorSpec(np.uint8, ())] * 3))
    assert not KERNELS["Range"].supports(spec_meta("Range", [TensorSpec(F32, (2,)), f, f]))
    s = TensorSpec(I64, (3,))
    assert KERNELS["ConstantOfShape"].supports(spec_meta("ConstantOfShape", [s]))
    assert KERNELS["ConstantOfShape"].supports(
        spec_meta("ConstantOfShape", [s], value=np.array([1], BF16)))
    assert not KERNELS["ConstantOfShape"].supports(
        spec_meta("ConstantOfShape", [s], value=np.array(["a"], dtype=object)))
    assert not KERNELS["ConstantOfShape"].supports(
        spec_meta("ConstantOfShape", [s], value=np.zeros(2, np.float32)))
    assert not KERNELS["EyeLike"].supports(spec_meta("EyeLike", [TensorSpec(F32, (2, 2, 2))]))
    assert not KERNELS["EyeLike"].supports(
        spec_meta("EyeLike", [TensorSpec(F32, (2, 2))], dtype=8))          # string
    assert not KERNELS["Trilu"].supports(spec_meta("Trilu", [TensorSpec(F32, (4,))]))
    assert not KERNELS["Trilu"].supports(
        spec_meta("Trilu", [TensorSpec(F32, (4, 4)), TensorSpec(np.int32, ())]))
    assert KERNELS["Trilu"].supports(spec_meta("Trilu", [TensorSpec(np.bool_, (4, 4)), None]))
    assert not KERNELS["Shape"].supports(spec_meta("Shape", [TensorSpec(object, (2,))]))
    assert not KERNELS["Size"].supports(spec_meta("Size", [None]))


def test_keys_match_cpu_reference_and_kernels_are_exact_and_capturable():
    ref = {k.key.op_type: k.key for k in ref_shape.KERNELS}
    for k in sh.KERNELS:
        assert k.key == OpKey("", k.key.op_type, ref[k.key.op_type].since)
        assert k.parity == Parity.EXACT
        assert k.capture_support().supported
        assert k.workspace_requirement(spec_meta(k.key.op_type, [])).nbytes == 0


def test_the_family_is_registered():
    from onnx_ep.providers import cuda

    assert sh in cuda.kernel_modules()


# ---------------------------------------------------------------- execute, emulated
# execute_with_workspace runs against tensors in a numpy "device memory" and a launch that
# replays shape.cu's kernels, so argument order, pointers and symbols are checked here.

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_RANGE = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": BF16,
          "i64": np.int64, "i32": np.int32, "i16": np.int16}


def _replay(mem: ByteMemory, symbol: str, grid, block, args) -> None:
    vals = [a[0] for a in args]
    at = mem.bytes

    def view(ptr, dtype, n):
        return at[ptr:ptr + n * np.dtype(dtype).itemsize].view(dtype)

    op, _, sfx = symbol.rpartition("_")
    if symbol == "write_i64":
        y, chunk = vals
        assert block[0] >= chunk.n
        view(y, np.int64, chunk.n)[:] = chunk.values()
    elif op == "fill":
        y, bits, n = vals
        w = int(sfx[1:])
        view(y, _UINT[w], n)[:] = bits & ((1 << (8 * w)) - 1)
    elif op == "eye":
        y, rows, cols, k, one = vals
        w = int(sfx[1:])
        i = np.arange(rows * cols)
        view(y, _UINT[w], rows * cols)[:] = np.where(i % cols - i // cols == k, one, 0)
    elif op == "trilu":
        x, y, rows, cols, n, kp, upper = vals
        w = int(sfx[1:])
        k = int(view(kp, np.int64, 1)[0]) if kp else 0
        i = np.arange(n)
        d = i % cols - (i // cols) % rows
        keep = d >= k if upper else d <= k
        view(y, _UINT[w], n)[:] = np.where(keep, view(x, _UINT[w], n), 0)
    elif op == "range":
        s, d, y, n, stash64 = vals
        dt = np.dtype(_RANGE[sfx])
        sv, dv = view(s, dt, 1)[0], view(d, dt, 1)[0]
        i = np.arange(n)
        if dt.kind in "iu":
            out = (np.int64(sv) + i * np.int64(dv)).astype(dt)
        elif dt.itemsize >= 4:
            out = sv + i.astype(dt) * dv
        else:
            c = np.float64 if stash64 else np.float32
            out = (c(sv) + i.astype(c) * c(dv)).astype(dt)
        view(y, dt, n)[:] = out
    else:
        raise AssertionError(f"unknown symbol {symbol}")


@pytest.fixture
def emulated(monkeypatch):
    mem = ByteMemory(1 << 16)
    monkeypatch.setattr(sh._Shape, "function", lambda self, symbol, tensor: symbol)
    monkeypatch.setattr(sh._Shape, "launch",
                        lambda self, fn, grid, block, args, stream, shared=0: _replay(
                            mem, fn, grid, block, args))
    return mem


def _run(mem, op, arrays, out_dtype, out_shape, opset=21, **attrs):
    """(cuda emulated, cpu_reference) outputs of one node."""
    from onnx_ep.core.kernel import ExecutionContext

    ins = [None if a is None else mem.tensor(np.asarray(a)) for a in arrays]
    meta = spec_meta(op, [None if a is None else TensorSpec(np.asarray(a).dtype, np.shape(a))
                          for a in arrays], opset, **attrs)
    ctx = ExecutionContext(meta)
    k = KERNELS[op].bind(meta)
    assert k.supports(meta)
    outs = [mem.empty(out_dtype, out_shape)]
    k.execute_with_workspace(ctx, ins, outs, None)
    ref = {r.key.op_type: r for r in ref_shape.KERNELS}[op]
    slot: list = [None]
    ref.execute_with_workspace(ctx, arrays, slot, None)
    return outs[0].array(), np.asarray(slot[0])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_execute_shape_and_size(emulated):
    x = np.zeros((2, 1, 3, 4, 1, 2, 5, 1, 2, 3), np.float16)
    _same(*_run(emulated, "Shape", [x], I64, (10,), 13))
    _same(*_run(emulated, "Shape", [x], I64, (7,), 15, start=-8, end=-1))
    _same(*_run(emulated, "Shape", [x], I64, (0,), 15, start=4, end=1))
    _same(*_run(emulated, "Size", [x], I64, ()))


@pytest.mark.parametrize("value", [None, np.array([7], np.int32), np.array([2.5], BF16),
                                   np.array([True]), np.array([-1.5], np.float64),
                                   np.array([3], np.uint8)], ids=str)
@pytest.mark.parametrize("dims", [(2, 3), (5,), (3, 7), (0, 2)])
def test_execute_constant_of_shape(emulated, value, dims):
    attrs = {} if value is None else {"value": value}
    dt = F32 if value is None else value.dtype
    _same(*_run(emulated, "ConstantOfShape", [np.array(dims, np.int64)], dt, dims, **attrs))


@pytest.mark.parametrize("out", [None, 1, 7, 9, 10, 16])   # input / float / int64 / bool / ...
@pytest.mark.parametrize("k", [0, 2, -1])
def test_execute_eye_like(emulated, out, k):
    from onnx_ep.core.dtypes import np_dtype

    x = np.zeros((3, 5), np.int32)
    attrs = {"k": k} if out is None else {"k": k, "dtype": out}
    dt = x.dtype if out is None else np_dtype(out)
    _same(*_run(emulated, "EyeLike", [x], dt, x.shape, **attrs))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.bool_, np.int64])
@pytest.mark.parametrize("k", [None, -1, 2])
@pytest.mark.parametrize("upper", [0, 1])
def test_execute_trilu(emulated, dtype, k, upper):
    x = (np.arange(2 * 4 * 6).reshape(2, 4, 6) % 5 + 1).astype(dtype)
    ins = [x] if k is None else [x, np.array(k, np.int64)]
    _same(*_run(emulated, "Trilu", ins, x.dtype, x.shape, upper=upper))


@pytest.mark.parametrize("dtype,start,limit,delta", [
    (np.float32, 0.1, 97.3, 0.7), (np.float64, -3.0, 5.0, 0.37), (np.float16, 0.1, 30.0, 0.33),
    (BF16, 100.0, -20.0, -3.7), (np.int64, -7, 100, 3), (np.int32, 50, -50, -7),
    (np.int16, -300, 300, 11),
])
def test_execute_range(emulated, dtype, start, limit, delta):
    ins = [np.array(v, np.float64).astype(dtype).reshape(()) for v in (start, limit, delta)]
    from onnx_ep.core.kernel import ExecutionContext

    ref = ref_shape.Range("Range").run(ExecutionContext(spec_meta("Range", [])), *ins)
    _same(*_run(emulated, "Range", ins, ref.dtype, ref.shape))
