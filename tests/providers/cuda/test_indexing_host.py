"""Host-side logic of the CUDA indexing family (no GPU): supports, infer_outputs (with and
without the input values the plan knows, ``NodeMeta.constants``), the constant's bits, the
DepthToSpace/SpaceToDepth plan, and numpy replays of the index math ``indexing.cu`` runs
(Pad's coordinate mapping, GatherND's widened slices, TopK's ranks, the scatters'
per-output folds, the scans' order) checked against cpu_reference, so a wrong rule fails
here before a GPU run.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import attrs
import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, Parity, TensorSpec
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference import indexing as ref_ix
from onnx_ep.providers.cuda.kernels import indexing as ix
from tests.helpers.host_meta import by_op, spec_meta

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
KERNELS = by_op(ix.KERNELS)


def _ctx(op, arrays, opset=21, n_out=1, **attrs):
    specs = [None if a is None else TensorSpec(a.dtype, a.shape) for a in arrays]
    return ExecutionContext(spec_meta(op, specs, opset, n_out, **attrs))


def _known(meta, values):
    """``meta`` with the input values the plan knows, by input position."""
    return attrs.evolve(meta, constants={i: np.asarray(v) for i, v in values.items()})


# ---------------------------------------------------------------- registry, promises

def test_every_kernel_promises_exact_parity():
    for k in ix.KERNELS:
        assert k.bind(spec_meta(k.key.op_type, [TensorSpec(F32, (2, 3))])).parity == Parity.EXACT


def test_kernel_module_is_registered():
    from onnx_ep.providers import cuda

    assert ix in cuda.kernel_modules()


def test_constant_bits_are_the_low_bytes_of_the_value():
    assert ix.bits_of(1, np.bool_) == 1
    assert ix.bits_of(1, np.float16) == 0x3C00
    assert ix.bits_of(1, BF16) == 0x3F80
    assert ix.bits_of(-2, np.int32) == 0xFFFFFFFE
    assert ix.bits_of(1.5, np.float64) == int.from_bytes(np.float64(1.5).tobytes(), "little")


# ---------------------------------------------------------------- Pad

def pad_replay(x, begins, ends, mode, value):
    """What ``pad`` in indexing.cu computes, element by element."""
    lo = [max(-b, 0) for b in begins]
    pb = [max(b, 0) for b in begins]
    ln = [max(d - max(-b, 0) - max(-e, 0), 0) for d, b, e in zip(x.shape, begins, ends)]
    out_shape = tuple(d + b + e for d, b, e in zip(x.shape, begins, ends))
    y = np.empty(out_shape, x.dtype)
    for o in itertools.product(*(range(n) for n in out_shape)):
        src, outside = [], False
        for d, od in enumerate(o):
            c, n = od - pb[d], ln[d]
            if c < 0 or c >= n:
                if mode == "constant" or n == 0:
                    outside = True
                    continue
                if mode == "edge":
                    c = 0 if c < 0 else n - 1
                elif mode == "reflect":
                    if n == 1:
                        c = 0
                    else:
                        p = 2 * (n - 1)
                        c %= p              # python's % is already non-negative
                        if c >= n:
                            c = p - c
                else:
                    c %= n
            src.append(lo[d] + c)
        y[o] = value if outside else x[tuple(src)]
    return y


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [(0, 0, 0, 0), (1, 2, 2, 1), (0, 3, 2, 0), (-1, 1, 0, -2),
                                  (2, -1, -1, 3)])
def test_pad_mapping_matches_the_reference(mode, pads):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ctx = _ctx("Pad", [x, np.array(pads, np.int64)], mode=mode)
    try:
        want = ref_ix.Pad("Pad").run(ctx, x, np.array(pads, np.int64),
                                     np.array(7.5, np.float32))
    except NodeError:
        # the reference rejects reflections longer than the axis; cuda follows numpy
        crop = x[max(-pads[0], 0):x.shape[0] - max(-pads[2], 0),
                 max(-pads[1], 0):x.shape[1] - max(-pads[3], 0)]
        want = np.pad(crop, [(max(pads[0], 0), max(pads[2], 0)),
                             (max(pads[1], 0), max(pads[3], 0))], mode=mode)
    got = pad_replay(x, list(pads[:2]), list(pads[2:]), mode, 7.5)
    np.testing.assert_array_equal(got, want)


def test_pad_wrap_beyond_one_period_matches_numpy():
    x = np.arange(3, dtype=np.int64)
    got = pad_replay(x, [5], [7], "wrap", 0)
    np.testing.assert_array_equal(got, np.pad(x, (5, 7), mode="wrap"))


def test_pad_supports_and_infers():
    x = TensorSpec(F32, (2, 3))
    pads = TensorSpec(I64, (4,))
    k = KERNELS["Pad"]
    assert k.supports(spec_meta("Pad", [x, pads]))
    assert k.infer_outputs(spec_meta("Pad", [x, pads])) == [None]
    assert not k.supports(spec_meta("Pad", [x, TensorSpec(np.dtype(np.int32), (4,))]))
    assert not k.supports(spec_meta("Pad", [x, pads], opset=18, mode="wrap"))
    assert k.supports(spec_meta("Pad", [x, pads], opset=19, mode="wrap"))
    assert not k.supports(spec_meta("Pad", [x, pads, TensorSpec(I64, ())]))
    old = spec_meta("Pad", [x], opset=2, pads=[1, 0, 0, 2], mode="edge")
    assert k.supports(old)
    assert k.infer_outputs(old) == [TensorSpec(F32, (3, 5))]
    assert ix.pad_attr_lists(spec_meta("Pad", [x], opset=1, paddings=[1, 2, 3, 4]), 2) == \
        ([1, 2], [3, 4])


def test_pad_sizes_from_known_pads_and_axes():
    k = KERNELS["Pad"]
    x, pads = TensorSpec(F32, (2, 3)), TensorSpec(I64, (4,))
    meta = _known(spec_meta("Pad", [x, pads]), {1: np.array([1, 0, 2, -1], np.int64)})
    assert k.infer_outputs(meta) == [TensorSpec(F32, (5, 2))]
    axes = TensorSpec(np.dtype(np.int32), (1,))
    with_axes = spec_meta("Pad", [x, TensorSpec(I64, (2,)), None, axes], opset=18)
    assert k.infer_outputs(_known(with_axes, {1: np.array([2, 3], np.int64)})) == [None]
    assert k.infer_outputs(_known(with_axes, {1: np.array([2, 3], np.int64),
                                              3: np.array([-1], np.int32)})) == \
        [TensorSpec(F32, (2, 8))]


# ---------------------------------------------------------------- GatherElements

def test_gather_elements_supports_and_infers():
    k = KERNELS["GatherElements"]
    x, idx = TensorSpec(F32, (3, 4)), TensorSpec(I64, (2, 4))
    assert k.supports(spec_meta("GatherElements", [x, idx], axis=-2))
    assert k.infer_outputs(spec_meta("GatherElements", [x, idx])) == [TensorSpec(F32, (2, 4))]
    assert not k.supports(spec_meta("GatherElements", [x, TensorSpec(I64, (8,))]))
    assert not k.supports(spec_meta("GatherElements", [x, idx], axis=2))
    assert not k.supports(spec_meta("GatherElements", [x, TensorSpec(F32, (2, 4))]))


# ---------------------------------------------------------------- GatherND

def gather_nd_replay(x, idx, b, ptrs=(0, 0)):
    """What ``gather_nd`` in indexing.cu writes, element by element of the launch's width,
    from the geometry :func:`indexing.gather_nd_plan` passes it."""
    out_shape = ix.gather_nd_shape(x.shape, idx.shape, b)
    w, g, per_batch, batch_stride, inner, n = ix.gather_nd_plan(
        x.shape, idx.shape, b, x.dtype.itemsize, ptrs)
    units = np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(-1, w) if x.size \
        else np.zeros((0, w), np.uint8)
    y = np.zeros((n, w), np.uint8)
    _gather_nd_units(units, idx.reshape(-1).astype(np.int64), y, g, per_batch, batch_stride,
                     inner)
    return y.reshape(-1).view(x.dtype).reshape(out_shape), w


def _gather_nd_units(units, tuples, out, g, per_batch, batch_stride, inner):
    """The kernel's loop: output unit ``i`` is the data unit its index tuple names, or
    zeros when an entry is out of range."""
    sizes, strides = g.dims()
    for i in range(len(out)):
        q, c = divmod(i, inner)
        off = (q // per_batch) * batch_stride + c
        inside = True
        for d in range(g.ndim):
            a = int(tuples[q * g.ndim + d])
            a = a + sizes[d] if a < 0 else a
            inside = inside and 0 <= a < sizes[d]
            off += a * strides[d]
        out[i] = units[off] if inside else 0


GATHER_ND_CASES = [
    # data shape, indices shape, batch_dims
    ((4, 5, 6), (3, 2), 0),
    ((4, 5, 6), (2, 3, 3), 0),
    ((4, 5, 6), (7, 1), 0),
    ((2, 5, 6), (2, 4, 1), 1),
    ((2, 3, 4, 8), (2, 3, 5, 1), 2),
    ((2, 3, 4, 8), (2, 3, 2), 2),
    ((2, 3, 4), (2, 0, 1), 1),                      # no positions: empty output
    ((3, 0, 4), (2, 1), 0),                         # empty slices: empty output
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64, np.int64,
                                   np.int8, np.bool_])
@pytest.mark.parametrize("data,indices,b", GATHER_ND_CASES)
def test_gather_nd_replay_matches_the_reference(dtype, data, indices, b):
    rng = np.random.default_rng(13)
    x = rng.integers(-100, 100, data).astype(dtype)
    m = indices[-1]
    dims = np.array(data[b:b + m], np.int64).reshape((1,) * (len(indices) - 1) + (m,))
    idx = (rng.integers(0, 1 << 20, indices) % np.maximum(dims, 1)).astype(np.int64)
    idx = np.where(rng.integers(0, 2, indices).astype(bool), idx - dims, idx)  # negatives
    for index_dtype in (np.int64, np.int32):
        i = idx.astype(index_dtype)
        ctx = _ctx("GatherND", [x, i], opset=13, batch_dims=b)
        want = ref_ix.GatherND("GatherND").run(ctx, x, i)
        got, _ = gather_nd_replay(x, i, b)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        spec = KERNELS["GatherND"].infer_outputs(ctx.node)
        assert spec == [TensorSpec(x.dtype, want.shape)]


def test_gather_nd_widens_slices_only_where_they_fit():
    x = np.arange(2 * 3 * 8, dtype=np.float16).reshape(2, 3, 8)
    idx = np.array([[1, -1], [0, 2]], np.int64)
    want = x[[1, 0], [2, 2]]
    got, w = gather_nd_replay(x, idx, 0)
    assert w == 16                                   # 8 float16 per slice: one 16-byte word
    np.testing.assert_array_equal(got, want)
    got, w = gather_nd_replay(x, idx, 0, ptrs=(0, 4))
    assert w == 4                                    # a 4-byte aligned output caps it
    np.testing.assert_array_equal(got, want)
    odd = np.arange(2 * 3 * 3, dtype=np.float16).reshape(2, 3, 3)
    assert gather_nd_replay(odd, idx, 0)[1] == 2     # 6-byte slices stay in elements
    assert ix.gather_nd_plan((4, 5), (3, 2), 0, 4, (0, 0))[0] == 4


def test_gather_nd_out_of_range_tuples_write_zeros():
    x = np.arange(1, 13, dtype=np.int32).reshape(3, 4)
    idx = np.array([[1, 3], [3, 0], [-4, 0], [-1, -5], [2, -1]], np.int64)
    got, _ = gather_nd_replay(x, idx, 0)
    np.testing.assert_array_equal(got, [x[1, 3], 0, 0, 0, x[2, 3]])
    rows, _ = gather_nd_replay(x, np.array([[5], [-1]], np.int64), 0)
    np.testing.assert_array_equal(rows, [[0, 0, 0, 0], x[2]])


def test_gather_nd_supports_and_infers():
    k = KERNELS["GatherND"]
    x, idx = TensorSpec(F32, ("B", 5, 6)), TensorSpec(I64, ("B", 7, 2))
    meta = spec_meta("GatherND", [x, idx], opset=12, batch_dims=1)
    assert k.supports(meta)
    assert k.infer_outputs(meta) == [TensorSpec(F32, ("B", 7))]
    assert k.infer_outputs(spec_meta("GatherND", [x, idx], opset=12)) == \
        [TensorSpec(F32, ("B", 7, 6))]
    assert k.supports(spec_meta("GatherND", [x, TensorSpec(np.dtype(np.int32), (3, 1))]))
    assert k.bind(meta).parity == Parity.EXACT
    declined = {
        "indices' last dim unknown": spec_meta("GatherND", [x, TensorSpec(I64, (3, "m"))]),
        "float indices": spec_meta("GatherND", [x, TensorSpec(F32, (3, 2))]),
        "scalar indices": spec_meta("GatherND", [x, TensorSpec(I64, ())]),
        "batch_dims >= indices rank": spec_meta("GatherND", [x, TensorSpec(I64, (3, 1))],
                                                batch_dims=2),
        "negative batch_dims": spec_meta("GatherND", [x, idx], batch_dims=-1),
        "index deeper than the data": spec_meta("GatherND", [x, TensorSpec(I64, (2, 4))]),
        "index depth 0": spec_meta("GatherND", [x, TensorSpec(I64, (2, 0))]),
        "batch dims differ": spec_meta("GatherND", [TensorSpec(F32, (2, 5)),
                                                    TensorSpec(I64, (3, 1))], batch_dims=1),
        "rank 9 data": spec_meta("GatherND", [TensorSpec(F32, (1,) * 9), idx]),
        "string data": spec_meta("GatherND", [TensorSpec(np.dtype(object), (2,)), idx]),
    }
    for what, m in declined.items():
        verdict = k.supports(m)
        assert not verdict and verdict.reason, what
    # opset 11 has no batch_dims: the attribute is not read there
    assert k.infer_outputs(spec_meta("GatherND", [x, idx], opset=11, batch_dims=1)) == \
        [TensorSpec(F32, ("B", 7, 6))]


def _gather_nd_launch(mem, symbol, args):
    """``gather_nd_x<w>`` run on ``mem`` (a numpy byte array as device memory) with the
    arguments exactly as execute_with_workspace packed them."""
    x, idx, idx64, y, g, per_batch, batch_stride, inner, n = [a[0] for a in args]
    w = int(symbol.rsplit("_x", 1)[1])
    units = mem[x:].view(np.uint8).reshape(-1, w)
    out = mem[y:y + n * w].reshape(n, w)
    tuples = mem[idx:].view(np.int64 if idx64 else np.int32)
    _gather_nd_units(units, tuples, out, g, per_batch, batch_stride, inner)


@pytest.mark.parametrize("data,indices,b", GATHER_ND_CASES[:6])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gather_nd_execute_packs_what_the_kernel_reads(monkeypatch, data, indices, b,
                                                       index_dtype):
    mem = np.zeros(1 << 14, np.uint8)
    top = [256]

    class Tensor:
        def __init__(self, a):
            a = np.ascontiguousarray(a)
            self.ptr, self.dtype, self.shape, self.device = top[0], a.dtype, a.shape, 0
            self.ndim, self.size, self.nbytes = a.ndim, a.size, a.nbytes
            mem[self.ptr:self.ptr + a.nbytes] = a.reshape(-1).view(np.uint8)
            top[0] += -(-max(a.nbytes, 1) // 256) * 256

        def array(self):
            return mem[self.ptr:self.ptr + self.nbytes].view(self.dtype).reshape(self.shape)

    monkeypatch.setattr(ix.CudaKernel, "function", lambda self, symbol, t: symbol)
    monkeypatch.setattr(ix.CudaKernel, "launch",
                        lambda self, fn, grid, block, args, stream, shared=0:
                        _gather_nd_launch(mem, fn, args))
    rng = np.random.default_rng(17)
    x = rng.standard_normal(data).astype(np.float16)
    m = indices[-1]
    dims = np.array(data[b:b + m], np.int64).reshape((1,) * (len(indices) - 1) + (m,))
    idx = (rng.integers(-(1 << 20), 1 << 20, indices) % (2 * dims) - dims).astype(index_dtype)
    ctx = _ctx("GatherND", [x, idx], opset=13, batch_dims=b)
    want = ref_ix.GatherND("GatherND").run(ctx, x, idx)
    ins, y = [Tensor(x), Tensor(idx)], Tensor(np.zeros(want.shape, x.dtype))
    k = KERNELS["GatherND"].bind(ctx.node)
    k.execute_with_workspace(ctx, ins, [y], None)
    np.testing.assert_array_equal(y.array().view(np.uint8), want.view(np.uint8))
    with pytest.raises(NodeError, match="planned"):
        k.execute_with_workspace(ctx, ins, [Tensor(np.zeros((1,) + want.shape, x.dtype))],
                                 None)


def test_every_gather_nd_width_is_instantiated():
    from onnx_ep.providers.cuda.kernels.movement_plan import WIDTHS

    text = Path(ix.__file__).with_suffix(".cu").read_text()
    made = set(re.findall(r"^EP_INDEX_GATHER_ND\(x(\d+)\)", text, re.M))
    assert made == {str(w) for w in WIDTHS}


# ---------------------------------------------------------------- scatters

def _fold(red, a, u, dtype):
    """One step of ``Fold<T>::step`` in numpy (bfloat16 is folded in float32 by callers)."""
    if red == "none":
        return u
    fn = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[red]
    return fn(np.asarray(a, dtype), np.asarray(u, dtype))


def scatter_elements_replay(x, idx, upd, axis, red):
    """One output element at a time, updates of its line in index order (indexing.cu)."""
    acc_t = np.float32 if x.dtype == BF16 else x.dtype
    y = np.empty_like(x)
    for o in itertools.product(*(range(n) for n in x.shape)):
        acc = np.asarray(x[o]).astype(acc_t)
        if all(o[d] < idx.shape[d] for d in range(x.ndim) if d != axis):
            for j in range(idx.shape[axis]):
                p = list(o)
                p[axis] = j
                a = int(idx[tuple(p)])
                a = a + x.shape[axis] if a < 0 else a
                if a == o[axis]:
                    acc = _fold(red, acc, np.asarray(upd[tuple(p)]).astype(acc_t), acc_t)
        y[o] = np.asarray(acc).astype(x.dtype)
    return y


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int32])
@pytest.mark.parametrize("red", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements_fold_matches_the_reference(dtype, red, axis):
    rng = np.random.default_rng(3)
    x = rng.integers(-4, 5, (3, 4)).astype(dtype)
    idx = rng.integers(-3, 3, (3, 3)) if axis == 0 else rng.integers(-4, 4, (2, 4))
    idx = idx.astype(np.int64)
    upd = (rng.standard_normal(idx.shape) * 3).astype(np.float32).astype(dtype)
    ctx = _ctx("ScatterElements", [x, idx, upd], opset=18, axis=axis, reduction=red)
    want = ref_ix.ScatterElements("ScatterElements").run(ctx, x, idx, upd)
    got = scatter_elements_replay(x, idx, upd, axis, red)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def scatter_nd_replay(x, idx, upd, red):
    m = idx.shape[-1]
    inner = int(np.prod(x.shape[m:], dtype=np.int64))
    tuples = idx.reshape(-1, m)
    u = upd.reshape(len(tuples), inner)
    acc_t = np.float32 if x.dtype == BF16 else x.dtype
    flat = x.reshape(-1)
    y = np.empty_like(flat)
    for i in range(flat.size):
        q, s = divmod(i, inner)
        coord = np.unravel_index(q, x.shape[:m]) if m else ()
        acc = np.asarray(flat[i]).astype(acc_t)
        for p, t in enumerate(tuples):
            t = [int(v) + (x.shape[d] if v < 0 else 0) for d, v in enumerate(t)]
            if list(coord) == t:
                acc = _fold(red, acc, np.asarray(u[p, s]).astype(acc_t), acc_t)
        y[i] = np.asarray(acc).astype(x.dtype)
    return y.reshape(x.shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int64])
@pytest.mark.parametrize("red", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_fold_matches_the_reference(dtype, red):
    rng = np.random.default_rng(5)
    x = rng.integers(-4, 5, (4, 3, 2)).astype(dtype)
    idx = np.array([[[1, 2], [-3, 0]], [[1, -1], [3, 1]]], np.int64)
    upd = (rng.standard_normal((2, 2, 2)) * 3).astype(np.float32).astype(dtype)
    ctx = _ctx("ScatterND", [x, idx, upd], opset=18, reduction=red)
    want = ref_ix.ScatterND("ScatterND").run(ctx, x, idx, upd)
    got = scatter_nd_replay(x, idx, upd, red)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_scatter_supports():
    x, idx = TensorSpec(F32, (3, 4)), TensorSpec(I64, (2, 4))
    k = KERNELS["ScatterElements"]
    assert k.supports(spec_meta("ScatterElements", [x, idx, x], reduction="max", opset=18))
    assert not k.supports(spec_meta("ScatterElements", [x, idx, x], reduction="max", opset=16))
    b = TensorSpec(np.dtype(np.bool_), (3, 4))
    assert k.supports(spec_meta("ScatterElements", [b, idx, b]))
    assert not k.supports(spec_meta("ScatterElements", [b, idx, b], reduction="add", opset=18))
    assert not k.supports(spec_meta("ScatterElements", [x, idx, TensorSpec(I64, (2, 4))]))
    nd = KERNELS["ScatterND"]
    assert nd.supports(spec_meta("ScatterND", [x, TensorSpec(I64, (5, 2)), TensorSpec(F32, (5,))]))
    assert not nd.supports(spec_meta("ScatterND", [x, TensorSpec(I64, (5, 3)),
                                                   TensorSpec(F32, (5,))]))
    assert nd.infer_outputs(spec_meta("ScatterND", [x, idx, x])) == [x]


# ---------------------------------------------------------------- CumSum, CumProd

def cumulative_replay(x, axis, product, exclusive, reverse):
    """The line loop of ``cumulative`` (float16/bfloat16 folded in float32)."""
    acc_t = np.float32 if x.dtype in (np.float16, BF16) else x.dtype.type
    xm = np.moveaxis(x, axis, -1)
    y = np.empty_like(xm)
    ident = acc_t(1 if product else 0)
    for line in itertools.product(*(range(n) for n in xm.shape[:-1])):
        n = xm.shape[-1]
        acc = ident
        for s in range(n):
            p = n - 1 - s if reverse else s
            v = acc_t(xm[line + (p,)].astype(acc_t))
            if exclusive:
                y[line + (p,)] = (acc if s else ident).astype(x.dtype)
            with np.errstate(over="ignore"):
                acc = (acc * v if product else acc + v) if s else v
            if not exclusive:
                y[line + (p,)] = acc.astype(x.dtype)
    return np.moveaxis(y, -1, axis)


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int32])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_scan_order_matches_the_reference(op, dtype, exclusive, reverse):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 5)) * 2).astype(np.float32).astype(dtype)
    for axis in (0, 1, -1):
        a = np.array(axis, np.int64)
        ctx = _ctx(op, [x, a], opset=26, exclusive=exclusive, reverse=reverse)
        ref = (ref_ix.CumSum("CumSum", since=11) if op == "CumSum"
               else ref_ix.CumProd("CumProd", since=26))
        want = ref.run(ctx, x, a)
        got = cumulative_replay(x, axis % 2, op == "CumProd", exclusive, reverse)
        np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8),
                                      np.ascontiguousarray(want).view(np.uint8))


def test_scan_supports():
    k = KERNELS["CumSum"]
    assert k.supports(spec_meta("CumSum", [TensorSpec(F32, (3,)),
                                           TensorSpec(np.dtype(np.int32), ())]))
    assert not k.supports(spec_meta("CumSum", [TensorSpec(F32, ()), TensorSpec(I64, ())]))
    assert not k.supports(spec_meta("CumSum", [TensorSpec(np.dtype(np.int8), (3,)),
                                               TensorSpec(I64, ())]))


# ---------------------------------------------------------------- TopK

def top_k_replay(x, k, largest):
    """Ranks as ``top_k`` counts them on a 1-D line: (values, indices)."""
    key = x.astype(np.float32) if x.dtype in (np.float16, BF16) else x
    vals, ind = np.empty(k, x.dtype), np.empty(k, np.int64)
    for j, v in enumerate(key):
        rank = 0
        for jj, w in enumerate(key):
            if jj == j:
                continue
            vn, wn = bool(np.isnan(v)) if key.dtype.kind == "f" else False, \
                bool(np.isnan(w)) if key.dtype.kind == "f" else False
            if vn:
                before = jj < j if wn else not largest
            elif wn:
                before = bool(largest)
            elif w == v:
                before = jj < j
            else:
                before = w > v if largest else w < v
            rank += before
        if rank < k:
            vals[rank], ind[rank] = x[j], j
    return vals, ind


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int64, np.uint64])
@pytest.mark.parametrize("largest", [0, 1])
def test_top_k_ranks_match_the_reference(dtype, largest):
    rng = np.random.default_rng(11)
    x = rng.integers(0, 5, 12).astype(dtype)              # many ties
    if np.dtype(dtype).kind == "f" or dtype == BF16:
        x[3] = np.nan
        x[7] = np.nan
        x[5] = -0.0
        x[6] = 0.0
    for k in (0, 1, 5, 12):
        ctx = _ctx("TopK", [x, np.array([k], np.int64)], n_out=2, largest=largest)
        wv, wi = ref_ix.TopK("TopK").run(ctx, x, np.array([k], np.int64))
        gv, gi = top_k_replay(x, k, largest)
        np.testing.assert_array_equal(gi, wi)
        np.testing.assert_array_equal(gv.view(np.uint8), wv.view(np.uint8))


def test_top_k_supports_and_infers():
    k = KERNELS["TopK"]
    x = TensorSpec(F32, (3, 4))
    assert k.supports(spec_meta("TopK", [x, TensorSpec(I64, (1,))], n_out=2))
    assert k.infer_outputs(spec_meta("TopK", [x, TensorSpec(I64, (1,))], n_out=2)) == [None, None]
    old = spec_meta("TopK", [x], opset=1, n_out=2, k=2, axis=0)
    assert k.infer_outputs(old) == [TensorSpec(F32, (2, 4)), TensorSpec(I64, (2, 4))]
    assert not k.supports(spec_meta("TopK", [TensorSpec(np.dtype(np.bool_), (3,))], n_out=2))


def test_top_k_sizes_its_outputs_from_a_known_k():
    k = KERNELS["TopK"]
    x = TensorSpec(F32, (3, 4))
    meta = spec_meta("TopK", [x, TensorSpec(I64, (1,))], n_out=2, axis=0)
    assert k.infer_outputs(meta) == [None, None]                  # K on the device only
    for kk, want in ((2, (2, 4)), (0, (0, 4)), (3, (3, 4))):
        for value in (np.array([kk], np.int64), np.array(kk, np.int64)):
            assert k.infer_outputs(_known(meta, {1: value})) == \
                [TensorSpec(F32, want), TensorSpec(I64, want)]
    for bad in (np.array([4], np.int64), np.array([-1], np.int64), np.array([1, 2], np.int64),
                np.array([1.0], np.float32)):
        assert k.infer_outputs(_known(meta, {1: bad})) == [None, None], bad
    assert k.supports(_known(meta, {1: np.array([2], np.int64)}))
    # the sizes agree with what the reference returns
    xa = np.arange(12, dtype=np.float32).reshape(3, 4)
    ctx = _ctx("TopK", [xa, np.array([2], np.int64)], n_out=2, axis=-1)
    vals, ind = ref_ix.TopK("TopK").run(ctx, xa, np.array([2], np.int64))
    got = k.infer_outputs(_known(ctx.node, {1: np.array([2], np.int64)}))
    assert got == [TensorSpec(vals.dtype, vals.shape), TensorSpec(ind.dtype, ind.shape)]


# ---------------------------------------------------------------- Dropout, ReverseSequence

def test_dropout_runs_inference_only():
    k = KERNELS["Dropout"]
    x = TensorSpec(F32, (2, 3))
    assert k.supports(spec_meta("Dropout", [x], opset=13, n_out=2))
    assert k.supports(spec_meta("Dropout", [x, TensorSpec(F32, ())], opset=13, n_out=2))
    assert not k.supports(spec_meta("Dropout", [x, None, TensorSpec(np.dtype(np.bool_), ())],
                                    opset=13))
    assert k.infer_outputs(spec_meta("Dropout", [x], opset=13, n_out=2)) == \
        [x, TensorSpec(np.dtype(np.bool_), (2, 3))]
    assert k.infer_outputs(spec_meta("Dropout", [x], opset=7, n_out=2)) == [x, x]
    assert k.infer_outputs(spec_meta("Dropout", [x], opset=13)) == [x]


def test_dropout_accepts_a_training_mode_known_to_be_false():
    k = KERNELS["Dropout"]
    x = TensorSpec(F32, (2, 3))
    meta = spec_meta("Dropout", [x, None, TensorSpec(np.dtype(np.bool_), ())], opset=13,
                     n_out=2)
    assert not k.supports(meta)                                  # value unknown: declined
    assert "does not know" in k.supports(meta).reason
    assert k.supports(_known(meta, {2: np.array(False)}))
    assert k.supports(_known(meta, {2: np.array([False])}))
    trained = k.supports(_known(meta, {2: np.array(True)}))
    assert not trained and "true" in trained.reason


def test_reverse_sequence_supports():
    k = KERNELS["ReverseSequence"]
    x, lens = TensorSpec(F32, (4, 3, 2)), TensorSpec(I64, (3,))
    assert k.supports(spec_meta("ReverseSequence", [x, lens]))
    assert not k.supports(spec_meta("ReverseSequence", [x, lens], batch_axis=2))
    assert not k.supports(spec_meta("ReverseSequence", [TensorSpec(F32, (4,)), lens]))


# ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_depth_plan_is_the_reference_transpose(op, mode):
    shape = (2, 8, 3, 2) if op == "DepthToSpace" else (2, 2, 4, 6)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    view, perm, out = ix.space_depth_plan(op, shape, 2, mode)
    ctx = _ctx(op, [x], opset=13, blocksize=2, mode=mode)
    ref = (ref_ix.DepthToSpace if op == "DepthToSpace" else ref_ix.SpaceToDepth)(op)
    want = ref.run(ctx, x)
    np.testing.assert_array_equal(x.reshape(view).transpose(perm).reshape(out), want)
    spec = KERNELS[op].infer_outputs(spec_meta(op, [TensorSpec(F32, shape)], blocksize=2,
                                               mode=mode))
    assert spec == [TensorSpec(F32, out)]
    assert ix.space_depth_plan(op, (1, 3, 3, 3), 2, mode) is None


# ---------------------------------------------------------------- launches (no device)

class _FakeTensor:
    _next = 4096

    def __init__(self, dtype, shape):
        self.dtype, self.shape, self.device = np.dtype(dtype), tuple(shape), 0
        _FakeTensor._next += 4096
        self.ptr = _FakeTensor._next

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)


def _param_counts() -> dict[str, int]:
    """Parameters of every ``extern "C"`` macro signature in indexing.cu, by op prefix."""
    import pathlib
    import re

    text = pathlib.Path(ix.__file__).with_suffix(".cu").read_text()
    return {m.group(1): m.group(2).count(",") + 1
            for m in re.finditer(r"void (\w+)_##S\((.*?)\)\s*\{", text, re.S)}


LAUNCH_CASES = [
    ("Pad", [(F32, (2, 3)), (I64, (4,)), (F32, ()), (np.int32, (2,))], [(F32, (3, 5))], 21,
     {"mode": "reflect"}),
    ("Pad", [(np.bool_, (2, 3))], [(np.bool_, (3, 5))], 2, {"pads": [1, 1, 0, 1]}),
    ("GatherElements", [(F32, (3, 4)), (I64, (2, 4))], [(F32, (2, 4))], 13, {"axis": 1}),
    ("GatherND", [(F32, (2, 3, 4)), (I64, (2, 5, 1))], [(F32, (2, 5, 4))], 13,
     {"batch_dims": 1}),
    ("GatherND", [(np.bool_, (3, 5)), (np.int32, (4, 2))], [(np.bool_, (4,))], 11, {}),
    ("ScatterElements", [(F32, (3, 4)), (I64, (2, 4)), (F32, (2, 4))], [(F32, (3, 4))], 18,
     {"reduction": "max"}),
    ("ScatterND", [(F32, (3, 4)), (I64, (2, 1)), (F32, (2, 4))], [(F32, (3, 4))], 18, {}),
    ("CumSum", [(F32, (3, 4)), (np.int32, ())], [(F32, (3, 4))], 14, {"exclusive": 1}),
    ("CumProd", [(np.uint64, (3, 4)), (I64, (1,))], [(np.uint64, (3, 4))], 26, {}),
    ("TopK", [(np.float16, (3, 4)), (I64, (1,))], [(np.float16, (3, 2)), (I64, (3, 2))], 11, {}),
    ("Dropout", [(F32, (3, 4))], [(F32, (3, 4)), (np.bool_, (3, 4))], 13, {}),
    ("ReverseSequence", [(F32, (4, 3, 2, 2)), (I64, (3,))], [(F32, (4, 3, 2, 2))], 10, {}),
]


@pytest.mark.parametrize("op,ins,outs,opset,attrs", LAUNCH_CASES, ids=lambda v: str(v)[:20])
def test_launch_arguments_match_the_kernel_signatures(monkeypatch, op, ins, outs, opset, attrs):
    from onnx_ep.providers.cuda import copies

    counts, launched = _param_counts(), []

    def fake_launch(self, fn, grid, block, args, stream, shared=0):
        prefix = fn.rsplit("_", 1)[0]
        assert counts[prefix] == len(args), (fn, counts[prefix], len(args))
        launched.append(fn)

    monkeypatch.setattr(ix.CudaKernel, "launch", fake_launch)
    monkeypatch.setattr(ix.CudaKernel, "function", lambda self, symbol, t: symbol)
    monkeypatch.setattr(copies, "copy_dtod", lambda *a: launched.append("copy"))
    x = [_FakeTensor(d, s) for d, s in ins]
    y = [_FakeTensor(d, s) for d, s in outs]
    meta = spec_meta(op, [TensorSpec(t.dtype, t.shape) for t in x], opset, len(y), **attrs)
    k = KERNELS[op]
    assert k.supports(meta)
    k.bind(meta).execute_with_workspace(ExecutionContext(meta), x, y, None)
    assert launched
