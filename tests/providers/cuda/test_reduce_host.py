"""Host-side logic of the CUDA reductions (no GPU): axis grouping, the rows/cols routes,
axes derived from shapes, launch geometry, supports() decisions and shape inference, with
and without an axes value the plan knows (``NodeMeta.constants``).

``_replay`` sums with the planned geometry in numpy exactly as ``reduce.cu`` walks it
(output index -> kept offset, reduced index -> reduced offset), so a wrong plan fails.
"""

from __future__ import annotations

import itertools

import attrs
import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity, TensorSpec
from onnx_ep.providers.cuda.kernels import reduce as rd
from onnx_ep.providers.cuda.kernels.base import narrow_tolerance


def _offsets(n, sizes, strides):
    idx = np.arange(n)
    off = np.zeros(n, dtype=np.int64)
    for size, stride in zip(reversed(sizes), reversed(strides)):
        off += (idx % size) * stride
        idx //= size
    return off


def _replay(x: np.ndarray, axes) -> np.ndarray:
    route, geo = rd.reduce_plan(x.shape, axes)
    flat = x.reshape(-1)
    if route == "cols":
        outer, r, inner = geo
        return flat.reshape(outer, r, inner).sum(axis=1).reshape(-1)
    ks, kst, rs, rst = geo
    n_out = int(np.prod(ks)) if ks else 1
    nred = int(np.prod(rs)) if rs else 1
    base = _offsets(n_out, ks, kst)
    inner = _offsets(nred, rs, rst)
    return flat[base[:, None] + inner[None, :]].sum(axis=1)


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 5, 1, 8), (4, 1, 2, 3, 2), (6,), (3, 1)])
def test_every_axes_set_reduces_like_numpy(shape):
    x = np.arange(np.prod(shape), dtype=np.int64).reshape(shape) * 7 % 11
    rank = len(shape)
    for k in range(rank + 1):
        for axes in itertools.combinations(range(rank), k):
            want = x.sum(axis=axes).reshape(-1) if axes else x.reshape(-1)
            np.testing.assert_array_equal(_replay(x, axes), want, err_msg=f"axes {axes}")


def test_routes():
    assert rd.reduce_plan((8, 1024), [1])[0] == "rows"
    assert rd.reduce_plan((8, 1024, 16), [1]) == ("cols", (8, 1024, 16))
    assert rd.reduce_plan((1024, 16), [0]) == ("cols", (1, 1024, 16))
    # adjacent reduced dims coalesce into one contiguous run
    route, (ks, kst, rs, rst) = rd.reduce_plan((4, 5, 6), [1, 2])
    assert route == "rows" and (rs, rst) == ([30], [1]) and (ks, kst) == ([4], [30])
    route, (ks, kst, rs, rst) = rd.reduce_plan((4, 5, 6, 7), [0, 2])
    assert route == "rows" and rs == [4, 6] and ks == [5, 7]


def test_axes_derived_from_keepdims_shapes():
    assert rd.derived_axes((2, 3, 4), (2, 1, 4)) == [1]
    assert rd.derived_axes((2, 3, 4), (1, 1, 1)) == [0, 1, 2]
    assert rd.derived_axes((2, 1, 4), (2, 1, 4)) == []
    assert rd.derived_axes((2, 3, 4), (2, 4)) is None
    assert rd.derived_axes((2, 3, 4), (2, 2, 4)) is None


def test_block_sizes_are_powers_of_two():
    assert [rd.block_for(n) for n in (0, 1, 32, 33, 200, 256, 10 ** 6)] == \
        [32, 32, 32, 64, 256, 256, 256]


def _meta(op, inputs, opset=17, **attrs):
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(inputs), output_names=("y",))


K = {k.key.op_type: k for k in rd.KERNELS}
X = TensorSpec(np.float32, (2, 3, 4))
AXES = TensorSpec(np.int64, (1,))


def test_supports():
    assert K["ReduceSum"].supports(_meta("ReduceSum", [X, AXES], opset=13))
    assert not K["ReduceSum"].supports(_meta("ReduceSum", [X, AXES], opset=13, keepdims=0))
    assert K["ReduceSum"].supports(_meta("ReduceSum", [X], opset=11, keepdims=0, axes=[1]))
    assert not K["ReduceL1"].supports(_meta("ReduceL1", [X, AXES], opset=18,
                                            noop_with_empty_axes=1))
    assert K["ReduceMax"].supports(_meta("ReduceMax", [X, AXES], opset=18,
                                         noop_with_empty_axes=1))
    assert not K["ReduceMean"].supports(_meta("ReduceMean", [X], axes=[3]))
    assert not K["ReduceMean"].supports(_meta("ReduceMean", [X], axes=[1, -2]))
    assert not K["ReduceL2"].supports(_meta("ReduceL2", [TensorSpec(np.int32, (3,))]))
    assert K["ReduceSum"].supports(_meta("ReduceSum", [TensorSpec(np.int64, (3,))]))
    assert not K["ReduceSum"].supports(_meta("ReduceSum", [TensorSpec(np.uint8, (3,))]))
    assert not K["ArgMax"].supports(_meta("ArgMax", [X], axis=3))


def test_infer_outputs():
    assert K["ReduceSum"].infer_outputs(_meta("ReduceSum", [X], opset=11, axes=[1])) == \
        [TensorSpec(np.float32, (2, 1, 4))]
    assert K["ReduceMax"].infer_outputs(_meta("ReduceMax", [X], keepdims=0))[0].shape == ()
    assert K["ReduceMax"].infer_outputs(_meta("ReduceMax", [X], axes=[-1], keepdims=0)
                                        )[0].shape == (2, 3)
    assert K["ReduceSum"].infer_outputs(_meta("ReduceSum", [X, AXES], opset=13)) == [None]
    assert K["ReduceL1"].infer_outputs(_meta("ReduceL1", [X], noop_with_empty_axes=1)
                                       )[0].shape == (2, 3, 4)
    assert K["ArgMin"].infer_outputs(_meta("ArgMin", [X], axis=1, keepdims=0)) == \
        [TensorSpec(np.int64, (2, 4))]


def test_parity_is_exact_for_selections_and_widened_for_narrow_sums():
    import ml_dtypes

    assert K["ReduceMax"].parity == Parity.EXACT and K["ArgMax"].parity == Parity.EXACT
    assert K["ReduceSum"].parity == rd.SUM_PARITY
    bound = K["ReduceSum"].bind(_meta("ReduceSum", [TensorSpec(np.float16, (4,))]))
    assert bound.parity == narrow_tolerance(np.float16, rd.SUM_PARITY)
    assert bound.parity.rtol == 2.0 ** -10 and K["ReduceSum"].parity == rd.SUM_PARITY
    b16 = K["ReduceSum"].bind(_meta("ReduceSum", [TensorSpec(ml_dtypes.bfloat16, (4,))]))
    assert b16.parity.rtol == 2.0 ** -7
    assert K["ReduceMin"].bind(_meta("ReduceMin", [TensorSpec(np.float16, (4,))])).parity \
        == Parity.EXACT


# ---------------------------------------------------------------- axes the plan knows

def _known(meta, axes):
    """``meta`` whose axes input (1) has a value the plan knows."""
    return attrs.evolve(meta, constants={1: np.asarray(axes)})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceL1", "ReduceMax", "ReduceLogSumExp"])
def test_known_axes_lift_the_keepdims_and_noop_declines(op):
    k = K[op]
    opset = rd.axes_input_since(op)
    keep0 = _meta(op, [X, AXES], opset=opset, keepdims=0)
    assert not k.supports(keep0)                      # device-only axes: declined
    assert "does not know" in k.supports(keep0).reason
    assert k.infer_outputs(keep0) == [None]
    assert k.supports(_known(keep0, np.array([1], np.int64)))
    assert k.infer_outputs(_known(keep0, np.array([1], np.int64))) == \
        [TensorSpec(np.float32, (2, 4))]
    assert k.infer_outputs(_known(keep0, np.array([-1, 0], np.int64))) == \
        [TensorSpec(np.float32, (3,))]
    assert k.infer_outputs(_known(keep0, np.array([], np.int64))) == \
        [TensorSpec(np.float32, ())]                  # empty axes: every axis
    noop = _meta(op, [X, AXES], opset=opset, noop_with_empty_axes=1)
    assert k.supports(_known(noop, np.array([], np.int64)))
    assert k.infer_outputs(_known(noop, np.array([], np.int64))) == [X]
    assert k.infer_outputs(_known(noop, np.array([2], np.int64))) == \
        [TensorSpec(np.float32, (2, 3, 1))]
    keep1 = _meta(op, [X, AXES], opset=opset)
    assert k.supports(keep1)                          # shapes derive the axes at run time
    assert k.infer_outputs(_known(keep1, np.array([0, 2], np.int64))) == \
        [TensorSpec(np.float32, (1, 3, 1))]


def test_invalid_known_axes_are_declined_with_a_reason():
    for bad in (np.array([3], np.int64), np.array([1, -2], np.int64),
                np.array([1.0], np.float32), np.array([[1]], np.int64)):
        meta = _known(_meta("ReduceSum", [X, AXES], opset=13, keepdims=0), bad)
        verdict = K["ReduceSum"].supports(meta)
        assert not verdict and "axes" in verdict.reason, bad
        assert K["ReduceSum"].infer_outputs(meta) == [None]


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL2", "ReduceMax"])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[1], [0, 2], [-1], []])
def test_known_axes_shape_matches_the_reference(op, keepdims, axes):
    from onnx_ep.providers.cpu_reference import reduce as ref_rd

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    a = np.array(axes, np.int64)
    for noop in (0, 1):
        meta = _known(_meta(op, [X, AXES], opset=18, keepdims=keepdims,
                            noop_with_empty_axes=noop), a)
        ref = {r.key.op_type: r for r in ref_rd.KERNELS}[op]
        slot = [None]
        ref.execute_with_workspace(ExecutionContext(meta), [x, a], slot, None)
        assert K[op].infer_outputs(meta) == [TensorSpec(np.float32, slot[0].shape)]


class _Fake:
    _next = 4096

    def __init__(self, shape, dtype=np.float32):
        self.dtype, self.shape, self.device = np.dtype(dtype), tuple(shape), 0
        self.ndim, self.size = len(self.shape), int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        _Fake._next += 4096
        self.ptr = _Fake._next


@pytest.mark.parametrize("axes,keepdims,out,want", [
    ([1], 0, (2, 4), ("reduce_cols_sum_f32", (2, 3, 4))),
    ([-1], 0, (2, 3), ("reduce_sum_f32", None)),
    ([0, 1, 2], 0, (), ("reduce_sum_f32", None)),
    ([1], 1, (2, 1, 4), ("reduce_cols_sum_f32", (2, 3, 4))),
    ([], 0, (), ("reduce_sum_f32", None)),
])
def test_execute_reduces_the_known_axes(monkeypatch, axes, keepdims, out, want):
    """At run time ``ctx.node`` is the plan's meta: its axes value picks the launch, even
    where the shapes could not tell (keepdims=0)."""
    launched = []
    monkeypatch.setattr(rd.Reduce, "function", lambda self, symbol, t: symbol)
    monkeypatch.setattr(rd.Reduce, "launch", lambda self, fn, grid, block, args, stream,
                        shared=0: launched.append((fn, [a[0] for a in args])))
    meta = _known(_meta("ReduceSum", [X, AXES], opset=13, keepdims=keepdims), axes)
    k = K["ReduceSum"].bind(meta)
    assert k.supports(meta)
    k.execute_with_workspace(ExecutionContext(meta), [_Fake((2, 3, 4)), _Fake((len(axes),),
                                                                              np.int64)],
                             [_Fake(out)], None)
    (fn, args), = launched
    assert fn == want[0]
    if want[1] is not None:
        assert tuple(args[2:5]) == want[1]           # outer, R, inner
    else:
        red = args[3]                                # the reduced dims' Geo
        n_red = int(np.prod(red.dims()[0]))
        assert n_red == (24 if not axes or len(axes) == 3 else 4) and args[4] == n_red


def test_execute_copies_for_known_empty_axes_with_noop(monkeypatch):
    from onnx_ep.providers.cuda import copies

    copied = []
    monkeypatch.setattr(copies, "copy_dtod", lambda dst, src, n, stream: copied.append(n))
    monkeypatch.setattr(rd.Reduce, "launch", lambda *a, **k: pytest.fail("launched"))
    meta = _known(_meta("ReduceL1", [X, AXES], opset=18, keepdims=0,
                        noop_with_empty_axes=1), np.array([], np.int64))
    k = K["ReduceL1"].bind(meta)
    k.execute_with_workspace(ExecutionContext(meta), [_Fake((2, 3, 4)), _Fake((0,), np.int64)],
                             [_Fake((2, 3, 4))], None)
    assert copied == [96]


def test_an_input_of_unknown_type_is_declined_not_an_error():
    # a value after an op onnx cannot infer (a contrib op's output) reaches supports() untyped
    for op in ("ReduceMean", "ArgMax"):
        meta = _meta(op, [None], opset=13)
        assert not K[op].supports(meta)
