"""GPU parity of the CUDA elementwise and Cast kernels against cpu_reference, byte for byte.

Each case runs one node on cpu_reference (its numpy kernel) and on the CUDA kernel
(bound, launched directly on DeviceTensors) and compares the output bytes. ``*_specials``
tests add NaN (both signs), infinities, signed zeros and out-of-domain values.

NaN sign and payload are not compared for computed results (unary, binary, Clip): the
reference's depend on the host CPU's numpy paths (an AVX-512 host returns -NaN for
log(-1), glibc +NaN), so a NaN must only be NaN where the reference's is; every other
element, signed zeros included, must be byte-identical. Where and Cast move or convert
bits and are compared byte for byte, NaNs included. A row whose bound kernel declares a
non-exact promise (Gelu approximate="tanh") is held to that promise (onnx_ep.testing.ulp).

Run: python -m pytest -q -m cuda tests/providers/cuda/test_elementwise.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity, ParityKind, TensorSpec
from onnx_ep.providers.cuda.kernels import elementwise
from onnx_ep.testing.ulp import judge
from tests.helpers.cuda_elementwise import ROWS, reference

pytestmark = pytest.mark.cuda

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOAT_SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5,
                  2.5, -2.5, 3.0, 1e-40, -1e-40, 65504.0, 7e4, 3e38, -3e38, 1e300, 2.0,
                  -2.0, 0.84375, 1.25, 6.0, -6.0, 28.0]


def _meta(op: str, arrays, opset: int = 21, **attrs) -> NodeMeta:
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(None if a is None else TensorSpec(a.dtype, a.shape)
                                 for a in arrays))


def _run_cuda(op: str, arrays, meta: NodeMeta, stream, allocator) -> np.ndarray:
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    kernel = ROWS[op]
    verdict = kernel.supports(meta)
    assert verdict, verdict.reason
    bound = kernel.bind(meta)
    (spec,) = bound.infer_outputs(meta)
    inputs = [None if a is None else
              DeviceTensor.from_numpy(np.ascontiguousarray(a), allocator, stream, holder="test")
              for a in arrays]
    block = allocator.allocate(max(spec.nbytes, 1), Role.ACTIVATIONS, "test")
    y = DeviceTensor(block.ptr, spec.dtype, spec.shape, inputs[0].device, owner=block)
    bound.execute_with_workspace(ExecutionContext(meta, stream=stream, provider="cuda"),
                                 inputs, [y], None)
    return y.numpy(stream)


def _promise(op: str, meta: NodeMeta) -> Parity:
    return ROWS[op].bind(meta).parity


def _assert_same_bytes(op, got: np.ndarray, want: np.ndarray, arrays, *,
                       nan_payload: bool = True, promise: Parity = Parity.EXACT) -> None:
    """Bytes equal (``nan_payload=False``: any NaN matches any NaN); a non-exact
    ``promise`` is checked with the harness's :func:`judge` instead."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    g = got.reshape(-1).view(np.uint8).reshape(got.size, -1)
    w = want.reshape(-1).view(np.uint8).reshape(want.size, -1)
    differs = (g != w).any(axis=1)
    if not nan_payload and got.dtype.kind in "fV" and got.dtype != np.bool_:
        both_nan = (np.isnan(got.reshape(-1).astype(np.float64))
                    & np.isnan(want.reshape(-1).astype(np.float64)))
        differs &= ~both_nan
    if promise.kind is not ParityKind.EXACT:
        verdict = judge(got, want, promise)
        if verdict.kept:
            return
        head = (f"{op}: promise {promise} broken: {verdict.reason} (max ulp {verdict.max_ulp}, "
                f"max abs {verdict.max_abs:.3g})")
    else:
        head = f"{op}: {int(differs.sum())} of {got.size} elements differ"
    bad = np.nonzero(differs)[0]
    if bad.size or promise.kind is not ParityKind.EXACT:
        flat = [np.broadcast_to(a, got.shape).reshape(-1) for a in arrays if a is not None]
        rows = [f"  [{i}] in={[f.astype(np.float64)[i] if f.dtype.kind != 'b' else f[i] for f in flat]}"
                f" got={got.reshape(-1)[i]!r} ({g[i][::-1].tobytes().hex()}) "
                f"want={want.reshape(-1)[i]!r} ({w[i][::-1].tobytes().hex()})"
                for i in bad[:8]]
        pytest.fail(head + "\n" + "\n".join(rows))


def _values(dtype: np.dtype, n: int, rng, *, specials: bool = False) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
        lo = max(int(info.min), -20)  # small values, and every edge, first
        v[: min(n, 40)] = np.arange(lo, lo + 40)[: min(n, 40)].astype(dtype)
        edges = np.array([info.min, info.max, info.min + 1, info.max - 1], dtype=dtype)
        v[40:44] = edges[: len(v[40:44])]
        return v
    scale = rng.choice([1e-3, 0.3, 1.0, 3.0, 30.0], n)
    v = rng.standard_normal(n) * scale
    if specials:
        k = min(n, len(FLOAT_SPECIALS))
        v[:k] = FLOAT_SPECIALS[:k]
    with np.errstate(all="ignore"):
        return v.astype(dtype)


UNARY_CASES = [(k.key.op_type, dt) for k in elementwise.KERNELS if k.family == "unary"
               for dt in sorted(k.dtypes, key=str)]
BINARY_CASES = [(k.key.op_type, dt) for k in elementwise.KERNELS if k.family == "binary"
                and k.key.op_type not in ("BitShift", "PRelu")  # own tests below
                for dt in sorted(k.dtypes, key=str)]


def _unary_attrs(op: str) -> list[dict]:
    if op == "Gelu":
        return [{}, {"approximate": "tanh"}]
    if op == "LeakyRelu":
        return [{}, {"alpha": float(np.float32(0.2))}]
    if op == "HardSigmoid":
        return [{}, {"alpha": float(np.float32(0.3)), "beta": float(np.float32(0.4))}]
    if op in ("Elu", "Selu", "Celu", "Swish"):
        return [{}, {"alpha": float(np.float32(1.5))}]
    if op == "ThresholdedRelu":
        return [{}, {"alpha": float(np.float32(-0.25))}]
    if op == "Shrink":
        return [{}, {"lambd": float(np.float32(1.25)), "bias": float(np.float32(0.3))}]
    if op == "IsInf":
        return [{}, {"detect_positive": 0}, {"detect_negative": 0}]
    return [{}]


@pytest.mark.parametrize("specials", [False, True], ids=["values", "specials"])
@pytest.mark.parametrize("op,dtype", UNARY_CASES, ids=[f"{o}-{d}" for o, d in UNARY_CASES])
def test_unary_bytes_equal_reference(op, dtype, specials, stream, allocator):
    rng = np.random.default_rng(1)
    x = _values(dtype, 4099, rng, specials=specials).reshape(1, 4099)
    for attrs in _unary_attrs(op):
        meta = _meta(op, [x], **attrs)
        _assert_same_bytes(op, _run_cuda(op, [x], meta, stream, allocator),
                           reference(op, [x], meta), [x], nan_payload=False,
                           promise=_promise(op, meta))


def _binary_inputs(op: str, dtype, rng, specials: bool):
    a = _values(dtype, 64 * 33, rng, specials=specials).reshape(64, 33)
    b = _values(dtype, 64 * 33, rng, specials=specials).reshape(64, 33)
    if specials and np.dtype(dtype).kind == "f":
        b = np.roll(a, 7, axis=1)  # pairs of specials
        b.reshape(-1)[: 64 * 33: 5] = a.reshape(-1)[: 64 * 33: 5]  # equal operands
    if np.dtype(dtype).kind in "iu":
        if op in ("Div", "Mod"):
            b = np.where(b == 0, 3, b).astype(dtype)
        if op == "Pow":
            a = rng.integers(-5, 6, a.shape).astype(dtype)
            b = rng.integers(-3 if np.dtype(dtype).kind == "i" else 0, 9, b.shape).astype(dtype)
    return a, b


@pytest.mark.parametrize("specials", [False, True], ids=["values", "specials"])
@pytest.mark.parametrize("op,dtype", BINARY_CASES, ids=[f"{o}-{d}" for o, d in BINARY_CASES])
def test_binary_bytes_equal_reference(op, dtype, specials, stream, allocator):
    if specials and np.dtype(dtype).kind != "f":
        pytest.skip("specials are float values")
    rng = np.random.default_rng(2)
    a, b = _binary_inputs(op, dtype, rng, specials)
    attr_sets = [{}, {"fmod": 1}] if op == "Mod" else [{}]
    for attrs in attr_sets:
        for x, y in ((a, b), (a, b[:1]), (a[:, :1], b[:1]), (a[:1, 3:4].reshape(()), b)):
            meta = _meta(op, [x, y], **attrs)
            _assert_same_bytes(op, _run_cuda(op, [x, y], meta, stream, allocator),
                               reference(op, [x, y], meta), [x, y], nan_payload=False)


@pytest.mark.parametrize("shapes", [
    [(2, 3, 4), (2, 3, 4)], [(2, 3, 4), (4,)], [(2, 1, 4), (1, 3, 1)],
    [(5, 1, 3, 1, 2, 1), (1, 4, 1, 2, 1, 3)], [(7,), ()]])
def test_broadcast_shapes_on_device(shapes, stream, allocator):
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    meta = _meta("Sub", [x, y])
    _assert_same_bytes("Sub", _run_cuda("Sub", [x, y], meta, stream, allocator),
                       reference("Sub", [x, y], meta), [x, y])


@pytest.mark.parametrize("dtype", sorted(elementwise.ALL, key=str))
def test_where_bytes_equal_reference(dtype, stream, allocator):
    rng = np.random.default_rng(4)
    c = rng.integers(0, 2, (6, 1, 5)).astype(np.bool_)
    x = _values(dtype, 4 * 5, rng, specials=True).reshape(4, 5)
    y = _values(dtype, 6 * 4 * 1, rng).reshape(6, 4, 1)
    meta = _meta("Where", [c, x, y])
    _assert_same_bytes("Where", _run_cuda("Where", [c, x, y], meta, stream, allocator),
                       reference("Where", [c, x, y], meta), [c, x, y])


CAST_DTYPES = sorted((np.dtype(t) for t in (np.float32, np.float16, BF16, np.float64, np.int64,
                                             np.int32, np.int8, np.uint8, np.bool_)), key=str)
CAST_CASES = [(s, d) for s in CAST_DTYPES for d in CAST_DTYPES]


@pytest.mark.parametrize("src,dst", CAST_CASES, ids=[f"{s}-{d}" for s, d in CAST_CASES])
def test_cast_bytes_equal_reference(src, dst, stream, allocator):
    rng = np.random.default_rng(5)
    x = _values(src, 3001, rng, specials=True)
    if np.dtype(src).kind == "f":
        extra = np.array([300.7, -300.7, 255.9, -129.0, 3e9, -3e9, 2.0**63, -2.0**63, 1e20,
                          2.0**31, -2.0**31, -2.0**31 - 1, 65519.0, 65520.0, 1e-8, 3.4e38])
        with np.errstate(all="ignore"):
            x[-len(extra):] = extra.astype(src)
    elif np.dtype(src) == np.int64:
        x[-4:] = [2**62 + 2**54 + 1, -(2**53) - 1, 2**24 + 1, 65520]
    meta = _meta("Cast", [x], to=onnx_elem_type(dst))
    _assert_same_bytes("Cast", _run_cuda("Cast", [x], meta, stream, allocator),
                       reference("Cast", [x], meta), [x])
    like = np.zeros(1, dst)
    meta = _meta("CastLike", [x, like])
    _assert_same_bytes("CastLike", _run_cuda("CastLike", [x, like], meta, stream, allocator),
                       reference("CastLike", [x, like], meta), [x])


def test_repeated_runs_are_bit_identical(stream, allocator):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((257, 129)).astype(np.float32)
    meta = _meta("Gelu", [x])
    first = _run_cuda("Gelu", [x], meta, stream, allocator)
    assert _run_cuda("Gelu", [x], meta, stream, allocator).tobytes() == first.tobytes()


def test_gelu_tanh_cancellation_region_keeps_its_tolerance(stream, allocator):
    """x << 0: 1 + tanh(u) cancels; the declared tolerance (not exact) must hold there."""
    for dtype in (np.float32, np.float16, BF16):
        x = np.linspace(-9.0, -3.0, 6001).astype(dtype).reshape(1, -1)
        meta = _meta("Gelu", [x], approximate="tanh")
        promise = _promise("Gelu", meta)
        assert promise.kind is ParityKind.TOLERANCE
        _assert_same_bytes("Gelu", _run_cuda("Gelu", [x], meta, stream, allocator),
                           reference("Gelu", [x], meta), [x], promise=promise)


CLIP_DTYPES = sorted(elementwise.NUMERIC, key=str)


def _clip_bounds(dtype, lo: float, hi: float):
    return np.array(lo).astype(dtype), np.array(hi).astype(dtype)


@pytest.mark.parametrize("dtype", CLIP_DTYPES, ids=str)
def test_clip_bound_inputs_equal_reference(dtype, stream, allocator):
    rng = np.random.default_rng(7)
    x = _values(dtype, 3000, rng, specials=True).reshape(3, 1000)
    is_float = np.dtype(dtype).kind not in "iu"
    pairs = [(-0.5, 0.75), (0.0, 0.0), (2.0, -1.0)] if is_float else [(-3, 7), (5, 5), (9, -2)]
    if is_float:
        pairs += [(float("nan"), 1.0), (-1.0, float("-inf")), (-0.0, 0.0)]
    for lo_v, hi_v in pairs:
        lo, hi = _clip_bounds(dtype, lo_v, hi_v)
        for inputs in ([x, lo, hi], [x, lo], [x, None, hi], [x], [x, lo.reshape(1), None]):
            meta = _meta("Clip", inputs)
            _assert_same_bytes("Clip", _run_cuda("Clip", inputs, meta, stream, allocator),
                               reference("Clip", inputs, meta), [x], nan_payload=False)


@pytest.mark.parametrize("dtype", sorted(elementwise.FLOATS, key=str), ids=str)
def test_clip_attribute_bounds_before_opset_11(dtype, stream, allocator):
    rng = np.random.default_rng(8)
    x = _values(dtype, 2000, rng, specials=True)
    for attrs in ({"min": -0.1, "max": 0.3}, {"min": 0.2}, {"max": -1e-3}, {},
                  {"min": 1.0, "max": -1.0}):
        attrs = {k: float(np.float32(v)) for k, v in attrs.items()}
        meta = _meta("Clip", [x], opset=6, **attrs)
        _assert_same_bytes("Clip", _run_cuda("Clip", [x], meta, stream, allocator),
                           reference("Clip", [x], meta), [x], nan_payload=False)


SHIFT_DTYPES = sorted(elementwise.INTS, key=str)


@pytest.mark.parametrize("dtype", SHIFT_DTYPES, ids=str)
def test_bitshift_equals_numpy_including_counts_past_the_width(dtype, stream, allocator):
    """numpy's shifts: a count >= the width (or negative) gives 0, or -1 for a right shift
    of a negative value; the kernels must do the same, not C's undefined behaviour."""
    rng = np.random.default_rng(9)
    dt = np.dtype(dtype)
    width = 8 * dt.itemsize
    counts = np.array([0, 1, 3, width - 1, width, width + 1, 2 * width, 100,
                       *rng.integers(0, width, 24)], dtype=np.int64)
    if dt.kind == "i":
        counts = np.concatenate([counts, [-1, -width, -100]])
    counts = counts.astype(dt)
    x = _values(dt, 7 * counts.size, rng).reshape(7, counts.size)
    for direction in ("LEFT", "RIGHT"):
        for a, b in ((x, counts), (x, counts[None, :].repeat(7, 0)), (x[:, :1], counts)):
            meta = _meta("BitShift", [a, b], direction=direction)
            _assert_same_bytes("BitShift", _run_cuda("BitShift", [a, b], meta, stream, allocator),
                               reference("BitShift", [a, b], meta), [a, b])


PRELU_DTYPES = sorted(elementwise.ROWS["PRelu"].dtypes, key=str)


@pytest.mark.parametrize("dtype", PRELU_DTYPES, ids=str)
def test_prelu_slope_broadcast_equals_reference(dtype, stream, allocator):
    rng = np.random.default_rng(10)
    x = _values(dtype, 4 * 5 * 6, rng, specials=True).reshape(4, 5, 6)
    slope = _values(dtype, 4 * 5 * 6, rng, specials=True).reshape(4, 5, 6)
    for s in (slope, slope[0, :, :1], slope[0, 0], slope[0, 0, :1], slope[0, 0, 0]):
        s = np.ascontiguousarray(s)
        meta = _meta("PRelu", [x, s])
        _assert_same_bytes("PRelu", _run_cuda("PRelu", [x, s], meta, stream, allocator),
                           reference("PRelu", [x, s], meta), [x, s], nan_payload=False)


VARIADIC_CASES = [(k.key.op_type, dt) for k in elementwise.KERNELS if k.family == "variadic"
                  for dt in sorted(k.dtypes, key=str)]


@pytest.mark.parametrize("op,dtype", VARIADIC_CASES, ids=[f"{o}-{d}" for o, d in VARIADIC_CASES])
def test_variadic_fold_equals_reference(op, dtype, stream, allocator):
    """1, 2, 3 and 4 inputs with broadcasting; every step rounds like the reference's."""
    rng = np.random.default_rng(11)
    a = _values(dtype, 3 * 4 * 5, rng, specials=True).reshape(3, 4, 5)
    b = _values(dtype, 4 * 5, rng, specials=True).reshape(4, 5)
    c = _values(dtype, 3 * 4, rng).reshape(3, 4, 1)
    d = _values(dtype, 5, rng, specials=True)
    for arrays in ([a], [b, a], [a, b], [c, d], [a, b, c], [d, c, b, a], [a, a, a]):
        meta = _meta(op, arrays)
        _assert_same_bytes(op, _run_cuda(op, arrays, meta, stream, allocator),
                           reference(op, arrays, meta), arrays, nan_payload=False)


def test_mean_rounds_the_sum_before_dividing(stream, allocator):
    """float16 Mean of 3 inputs: the sum is rounded to float16 at each step (it overflows
    to inf here), as the reference's chain of float16 adds does."""
    x = np.full((4,), 40000.0, np.float16)
    arrays = [x, x, -x]
    meta = _meta("Mean", arrays)
    got = _run_cuda("Mean", arrays, meta, stream, allocator)
    want = reference("Mean", arrays, meta)
    _assert_same_bytes("Mean", got, want, arrays, nan_payload=False)


POW_MIXED = [(b, e) for b in sorted(elementwise.NARROW_FLOATS, key=str)
             for e in sorted(elementwise.POW_EXPONENTS - {b}, key=str)]


@pytest.mark.parametrize("base,exp", POW_MIXED, ids=[f"{b}-{e}" for b, e in POW_MIXED])
def test_pow_with_an_exponent_of_another_dtype(base, exp, stream, allocator):
    rng = np.random.default_rng(12)
    x = _values(base, 16 * 33, rng, specials=True).reshape(16, 33)
    if np.dtype(exp).kind in "iu":
        signed = np.dtype(exp).kind == "i"
        e = rng.integers(-4 if signed else 0, 9, 33).astype(exp)
        e[:6] = [0, 1, 2, 3, 5, np.iinfo(exp).max]
        e[6] = -1 if signed else np.iinfo(exp).max - 1
    else:
        e = _values(exp, 33, rng, specials=True)
        e[:4] = [2.0, 0.5, -1.0, 3.0]
    for a, b in ((x, e), (x, np.ascontiguousarray(e[:1])), (np.ascontiguousarray(x[:1, :1]), e)):
        meta = _meta("Pow", [a, b])
        _assert_same_bytes("Pow", _run_cuda("Pow", [a, b], meta, stream, allocator),
                           reference("Pow", [a, b], meta), [a, b], nan_payload=False)


def test_integer_pow_of_minus_one_follows_the_float64_exponent(stream, allocator):
    """Negative exponents go through float64 in the reference: an odd exponent below -2^53
    rounds to an even one there, so (-1) ** e is 1."""
    e = np.array([-(2**53) - 1, -(2**53) + 1, -3, -(2**63) + 1, -2, 5], np.int64)
    x = np.array([-1, -1, -1, -1, -1, -1], np.int64)
    meta = _meta("Pow", [x, e])
    _assert_same_bytes("Pow", _run_cuda("Pow", [x, e], meta, stream, allocator),
                       reference("Pow", [x, e], meta), [x, e])
