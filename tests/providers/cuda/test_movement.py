"""GPU parity of the CUDA data-movement kernels against cpu_reference: exact bytes.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_movement.py
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep import Session, SessionOptions
from onnx_ep.core.kernel import Parity
from onnx_ep.providers.cuda.kernels import movement as mv
from tests.helpers.cuda_family import FLOATS, check, model, random
from tests.providers.cuda.test_movement_host import CONCAT_CASES as HOST_CONCAT_CASES

pytestmark = pytest.mark.cuda
EXACT = Parity.EXACT
DTYPES = [*FLOATS.values(), np.dtype(np.int64), np.dtype(np.int8), np.dtype(np.bool_)]
IDS = [str(d) for d in DTYPES]


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("shape,perm", [((2, 3, 4), (2, 0, 1)), ((33, 65), (1, 0)),
                                        ((4, 70, 40), (0, 2, 1)), ((2, 3, 4, 5), (3, 1, 2, 0)),
                                        ((5, 1, 8), (1, 0, 2)), ((6, 8, 16), (1, 0, 2))])
def test_transpose(cuda_device, dtype, shape, perm):
    x = random(shape, dtype)
    check(model("Transpose", {"x": x}, {"perm": list(perm)}), {"x": x}, EXACT)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_concat_any_axis(cuda_device, dtype):
    a, b, c = random((2, 3, 4), dtype, 1), random((2, 5, 4), dtype, 2), random((2, 1, 4), dtype, 3)
    check(model("Concat", {"a": a, "b": b, "c": c}, {"axis": 1}), {"a": a, "b": b, "c": c},
          EXACT)
    for axis in (0, -1):
        feeds = {"a": a, "b": a[::-1].copy()}
        check(model("Concat", feeds, {"axis": axis}), feeds, EXACT)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_split(cuda_device, dtype):
    x = random((4, 10, 6), dtype)
    check(model("Split", {"x": x}, {"axis": 1}, consts={"s": np.array([3, 7, 0], np.int64)},
                n_outputs=3, opset=13), {"x": x}, EXACT)
    check(model("Split", {"x": x}, {"axis": -1, "num_outputs": 4}, n_outputs=4, opset=18),
          {"x": x}, EXACT)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [3, 100], [0, 2], [1, 2]),
    ([-1], [-100], [1], [-1]),
    ([0, 5, 2], [2, 1, 9], [0, 1, 2], [1, -2, 3]),
    ([2], [1000], None, None),
])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_slice_reads_starts_and_steps_on_the_device(cuda_device, dtype, starts, ends, axes,
                                                    steps, index_dtype):
    x = random((4, 7, 10), dtype)
    consts = {"s": np.array(starts, index_dtype), "e": np.array(ends, index_dtype)}
    names = ["x", "s", "e"]
    if axes is not None:
        consts["a"] = np.array(axes, index_dtype)
        names.append("a")
    if steps is not None:
        consts["t"] = np.array(steps, index_dtype)
        names.append("t")
    check(model("Slice", {"x": x}, consts=consts, inputs=names, opset=13), {"x": x}, EXACT)


def test_slice_attributes_before_opset_10(cuda_device):
    x = random((4, 7, 10), np.float32)
    check(model("Slice", {"x": x}, {"starts": [1, -4], "ends": [3, 100], "axes": [0, 2]},
                opset=9), {"x": x}, EXACT)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("axis,ishape", [(0, (5,)), (1, (2, 3)), (-1, ()), (2, (4,))])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gather_wraps_negative_indices(cuda_device, dtype, axis, ishape, index_dtype):
    x = random((6, 5, 8), dtype)
    dim = x.shape[axis]
    idx = np.random.default_rng(1).integers(-dim, dim, size=ishape).astype(index_dtype)
    check(model("Gather", {"x": x}, {"axis": axis}, consts={"i": idx}), {"x": x}, EXACT)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("src,dst", [((3, 1), (2, 3, 4)), ((1,), (7,)), ((4,), (3, 4)),
                                     ((2, 1, 6), (2, 5, 6))])
def test_expand(cuda_device, dtype, src, dst):
    x = random(src, dtype)
    check(model("Expand", {"x": x}, consts={"s": np.array(dst, np.int64)}), {"x": x}, EXACT)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("shape,reps", [((2, 3), (2, 2)), ((3, 8), (1, 3)), ((2, 1, 4), (3, 2, 1))])
def test_tile(cuda_device, dtype, shape, reps):
    x = random(shape, dtype)
    check(model("Tile", {"x": x}, consts={"r": np.array(reps, np.int64)}), {"x": x}, EXACT)


def test_views_share_the_input_and_feed_the_next_node(cuda_device):
    x = random((2, 3, 4), np.float16)
    check(model("Reshape", {"x": x}, consts={"s": np.array([4, -1], np.int64)}), {"x": x},
          EXACT)
    check(model("Flatten", {"x": x}, {"axis": 2}), {"x": x}, EXACT)
    check(model("Unsqueeze", {"x": x}, consts={"a": np.array([0, 4], np.int64)}), {"x": x},
          EXACT)
    z = random((1, 3, 1), np.float32)
    check(model("Squeeze", {"z": z}), {"z": z}, EXACT)
    check(model("Identity", {"x": x}), {"x": x}, EXACT)


def test_big_transpose_and_concat_use_wide_elements(cuda_device):
    x = random((8, 256, 512), np.float16)
    check(model("Transpose", {"x": x}, {"perm": [0, 2, 1]}), {"x": x}, EXACT)
    check(model("Transpose", {"x": x}, {"perm": [1, 0, 2]}), {"x": x}, EXACT)
    feeds = {"a": x, "b": x[:, :, :64].copy()}
    check(model("Concat", feeds, {"axis": 2}), feeds, EXACT)


# ---------------------------------------------------------------- Concat, byte for byte

def _bits(shapes, dtype, seed=0) -> list[np.ndarray]:
    """Random bytes as ``dtype`` (NaN payloads included: a copy must keep them), 0/1 for
    bool."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return [random(s, dt, seed + k) for k, s in enumerate(shapes)]
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, int(np.prod(s)) * dt.itemsize, dtype=np.uint8)
            .view(dt).reshape(s) for s in shapes]


def _concat_on_cuda(xs, axis) -> None:
    feeds = {f"x{k}": x for k, x in enumerate(xs)}
    sess = Session(model("Concat", feeds, {"axis": axis}), providers=["cuda"],
                   options=SessionOptions(capture="off"))
    for _ in range(2):                       # the second run reuses the plan and launches
        got = np.asarray(sess.run(None, feeds)[0])
        want = np.concatenate(xs, axis=axis)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()


# the host test replays the same cases on numpy memory
CONCAT_CASES = HOST_CONCAT_CASES


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("shapes,axis", CONCAT_CASES, ids=lambda v: str(v)[:24])
def test_concat_copies_every_byte(cuda_device, dtype, shapes, axis):
    _concat_on_cuda(_bits(shapes, dtype), axis)


@pytest.mark.parametrize("shapes,axis", [
    ([(1, 2, 128, 64), (1, 2, 1, 64)], 2),         # KV-cache append
    ([(1, 2, 1, 64), (1, 2, 128, 64)], 2),
    ([(1, 14, 1, 32), (1, 14, 1, 32)], -1),        # rotary halves
    ([(1, 14, 7, 64)] * 3, 0),
    ([(2, 8, 512), (2, 8, 64)], -1),
])
def test_concat_of_aligned_float16_decode_shapes(cuda_device, shapes, axis):
    _concat_on_cuda(_bits(shapes, np.float16), axis)


def test_concat_of_int64_shape_vectors(cuda_device):
    _concat_on_cuda(_bits([(1,)] * 12, np.int64), 0)
    _concat_on_cuda(_bits([(1,), (2,), (0,), (1,)] * 5, np.int64), 0)


@pytest.mark.parametrize("shapes,axis,launches", [
    ([(1, 2, 128, 64), (1, 2, 1, 64)], 2, 1),
    ([(1, 14, 1, 32), (1, 14, 1, 32)], -1, 1),
    ([(1,)] * 16, 0, 1),
    ([(3, 1, 5)] * 20, 1, 2),
])
def test_concat_launches_once_per_group_of_inputs(cuda_device, monkeypatch, shapes, axis,
                                                  launches):
    calls = []

    def counted(self, *args, **kw):
        calls.append(args[0])
        return mv.CudaKernel.launch(self, *args, **kw)

    monkeypatch.setattr(mv.Concat, "launch", counted)
    xs = _bits(shapes, np.float16)
    feeds = {f"x{k}": x for k, x in enumerate(xs)}
    sess = Session(model("Concat", feeds, {"axis": axis}), providers=["cuda"],
                   options=SessionOptions(capture="off"))
    got = np.asarray(sess.run(None, feeds)[0])
    assert got.tobytes() == np.concatenate(xs, axis=axis).tobytes()
    assert len(calls) == launches


@pytest.mark.parametrize("dtype", [*FLOATS.values(), np.dtype(np.int64)],
                         ids=[*FLOATS, "int64"])
@pytest.mark.parametrize("ids_dtype", [np.int64, np.int32])
def test_a_tied_embedding_gathers_columns_without_transposing_the_weight(cuda_device, dtype,
                                                                         ids_dtype):
    """Gather(Transpose(w [K, N]), ids) fuses into one TransposedGather on cuda whose bytes
    equal cpu_reference's run of the unfused graph."""
    import onnx
    from onnx import helper, numpy_helper

    w = random((48, 1000), dtype, 5)
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("Gather", ["wt", "ids"], ["y"], axis=0)], "tied",
        [vi("ids", helper.np_dtype_to_tensor_dtype(np.dtype(ids_dtype)), [2, 3])],
        [vi("y", helper.np_dtype_to_tensor_dtype(dtype), [2, 3, 48])],
        initializer=[numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(m)
    s = Session(m, providers=["cuda"], options=SessionOptions(capture="off"))
    assert [(n.op_type, n.domain) for n in s.graph.nodes] == [
        ("TransposedGather", "onnx_ep.fused")]
    for ids in (np.array([[0, 999, 3], [-1, 500, 500]]), np.array([[7, 7, 7], [0, 1, 2]])):
        ids = ids.astype(ids_dtype)
        ref = Session(m, providers=["cpu_reference"]).run(None, {"ids": ids})[0]
        got = s.run(None, {"ids": ids})[0]
        assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes()
