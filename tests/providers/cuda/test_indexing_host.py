"""Host-side logic of the CUDA indexing family (no GPU): supports, infer_outputs, the
constant's bits, the DepthToSpace/SpaceToDepth plan, and numpy replays of the index
math ``indexing.cu`` runs (Pad's coordinate mapping, TopK's ranks, the scatters'
per-output folds, the scans' order) checked against cpu_reference, so a wrong rule fails
here before a GPU run.
"""

from __future__ import annotations

import itertools

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


# ---------------------------------------------------------------- GatherElements

def test_gather_elements_supports_and_infers():
    k = KERNELS["GatherElements"]
    x, idx = TensorSpec(F32, (3, 4)), TensorSpec(I64, (2, 4))
    assert k.supports(spec_meta("GatherElements", [x, idx], axis=-2))
    assert k.infer_outputs(spec_meta("GatherElements", [x, idx])) == [TensorSpec(F32, (2, 4))]
    assert not k.supports(spec_meta("GatherElements", [x, TensorSpec(I64, (8,))]))
    assert not k.supports(spec_meta("GatherElements", [x, idx], axis=2))
    assert not k.supports(spec_meta("GatherElements", [x, TensorSpec(F32, (2, 4))]))


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
                before = jj < j if wn else True
            elif wn:
                before = False
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
