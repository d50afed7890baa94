"""GPU parity of the CUDA indexing family (Pad, GatherElements, GatherND, ScatterElements,
Scatter, ScatterND, CumSum, CumProd, TopK, Dropout, ReverseSequence, DepthToSpace,
SpaceToDepth) against cpu_reference: exact bytes. ``providers=["cuda"]`` only, so a node the device
could not run or size fails instead of silently running on the host. Index tensors that
do not decide a shape are graph inputs (read by the kernels on the device).

Run: python -m pytest -q -m cuda tests/providers/cuda/test_indexing.py
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.core.kernel import Parity
from tests.helpers.cuda_family import BF16, FLOATS, check, model, random

pytestmark = pytest.mark.cuda
EXACT = Parity.EXACT
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
DTYPES = [*FLOATS.values(), np.dtype(np.int64), np.dtype(np.int8), np.dtype(np.bool_)]
IDS = [str(d) for d in DTYPES]
NUMERIC = [F32, F16, BF16, np.dtype(np.int32)]
NUM_IDS = [str(d) for d in NUMERIC]


# ---------------------------------------------------------------- Pad

@pytest.mark.parametrize("dtype", [F16, np.dtype(np.int64), np.dtype(np.bool_)], ids=str)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 0, 2, 1, 3], [0, -1, 2, 1, 2, -2], [0, 0, 0, 0, 0, 0]])
def test_pad_reads_pads_on_the_device(cuda_device, dtype, mode, pads):
    x = random((3, 4, 5), dtype)
    consts = {"p": np.array(pads, np.int64)}
    if mode == "constant" and dtype != np.bool_:
        consts["v"] = np.array(3, np.float64).astype(dtype).reshape(())
    check(model("Pad", {"x": x}, {"mode": mode}, consts=consts, opset=19), {"x": x}, EXACT)


def test_pad_axes_and_old_attribute_form(cuda_device):
    x = random((3, 4, 5), F16)
    consts = {"p": np.array([2, -1, 1, 3], np.int64), "v": np.array(1.5, F16),
              "a": np.array([-1, 0], np.int32)}
    check(model("Pad", {"x": x}, {"mode": "constant"}, consts=consts, opset=18), {"x": x},
          EXACT)
    reflect = {"p": np.array([1, -1, 1, 1], np.int64), "a": consts["a"]}
    check(model("Pad", {"x": x}, {"mode": "reflect"}, consts=reflect,
                inputs=["x", "p", "", "a"], opset=18), {"x": x}, EXACT)
    check(model("Pad", {"x": x}, {"mode": "constant", "pads": [0, 1, 2, 1, 0, 0],
                                   "value": -2.5}, opset=2), {"x": x}, EXACT)


# ---------------------------------------------------------------- GatherElements

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("axis,index_dtype", [(0, np.int64), (1, np.int32), (-1, np.int64)])
def test_gather_elements_reads_indices_on_the_device(cuda_device, dtype, axis, index_dtype):
    x = random((4, 5, 3), dtype)
    rng = np.random.default_rng(1)
    dim = x.shape[axis]
    shape = list(x.shape)
    shape[axis] = 6
    shape[(axis + 1) % 3] -= 1                    # indices may be smaller off the axis
    idx = rng.integers(-dim, dim, size=shape).astype(index_dtype)
    feeds = {"x": x, "i": idx}
    check(model("GatherElements", feeds, {"axis": axis}, opset=13), feeds, EXACT)


# ---------------------------------------------------------------- GatherND

def _nd_indices(rng, data_shape, indices_shape, b):
    """Valid GatherND indices, about half of them negative."""
    m = indices_shape[-1]
    dims = np.array(data_shape[b:b + m], np.int64).reshape((1,) * (len(indices_shape) - 1)
                                                            + (m,))
    idx = rng.integers(0, 1 << 20, size=indices_shape) % np.maximum(dims, 1)
    return np.where(rng.integers(0, 2, size=indices_shape).astype(bool), idx - dims,
                    idx).astype(np.int64)


GATHER_ND = [
    # data shape, indices shape, batch_dims
    ((4, 5, 6), (3, 2), 0),
    ((4, 5, 6), (2, 3, 3), 0),
    ((4, 5, 16), (7, 1), 0),                      # 16-element slices: widened copies
    ((2, 5, 6), (2, 4, 1), 1),
    ((3, 4, 5, 2), (3, 6, 2), 1),
    ((2, 3, 4, 8), (2, 3, 5, 1), 2),
    ((2, 3, 4, 8), (2, 3, 2), 2),
    ((2, 3, 4), (2, 0, 1), 1),                    # no positions: empty output
    ((3, 0, 4), (2, 1), 0),                       # empty slices: empty output
]


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("data,indices,b", GATHER_ND, ids=str)
def test_gather_nd_reads_indices_on_the_device(cuda_device, dtype, data, indices, b):
    rng = np.random.default_rng(len(data) + len(indices) + b)
    x = random(data, dtype)
    feeds = {"x": x, "i": _nd_indices(rng, data, indices, b)}
    check(model("GatherND", feeds, {"batch_dims": b}, opset=13), feeds, EXACT,
          what=f"GatherND {data} {indices} batch_dims={b}")


@pytest.mark.parametrize("seed", range(12))
def test_gather_nd_random_shapes(cuda_device, seed):
    rng = np.random.default_rng(100 + seed)
    rank = int(rng.integers(1, 6))
    data = tuple(int(d) for d in rng.integers(1, 5, size=rank))
    b = int(rng.integers(0, min(rank, 3)))
    m = int(rng.integers(1, rank - b + 1))
    positions = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    indices = data[:b] + positions + (m,)
    dtype = [F16, F32, np.dtype(np.int64), np.dtype(np.uint8)][seed % 4]
    x = random(data, dtype, seed)
    feeds = {"x": x, "i": _nd_indices(rng, data, indices, b)}
    check(model("GatherND", feeds, {"batch_dims": b} if b else {}, opset=12 + seed % 2),
          feeds, EXACT, what=f"GatherND {data} {indices} batch_dims={b}")


def test_gather_nd_opset_11_and_repeated_runs(cuda_device):
    from onnx_ep import Session

    x = random((5, 4, 3), F16)
    rng = np.random.default_rng(3)
    feeds = {"x": x, "i": _nd_indices(rng, x.shape, (6, 2), 0)}
    m = model("GatherND", feeds, opset=11)
    check(m, feeds, EXACT)
    s = Session(m, providers=["cuda"])
    first = s.run(None, feeds)[0]
    for _ in range(3):                            # replayed launches: the same bytes
        assert s.run(None, feeds)[0].tobytes() == first.tobytes()
    feeds2 = {"x": x, "i": _nd_indices(rng, x.shape, (6, 2), 0)}
    fresh = check(m, feeds2, EXACT)[0]                         # a new session, held to cpu
    assert s.run(None, feeds2)[0].tobytes() == fresh.tobytes()  # new index values are read


# ---------------------------------------------------------------- scatters

REDUCTIONS = ["none", "add", "mul", "max", "min"]


@pytest.mark.parametrize("dtype", NUMERIC, ids=NUM_IDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements_applies_duplicates_in_index_order(cuda_device, dtype, reduction,
                                                            axis):
    x = random((5, 6), dtype, 1)
    rng = np.random.default_rng(2)
    ishape = (8, 4) if axis == 0 else (3, 9)
    dim = x.shape[axis]
    idx = rng.integers(-dim, dim, size=ishape).astype(np.int64)   # many duplicates
    upd = random(ishape, dtype, 3)
    feeds = {"x": x, "i": idx, "u": upd}
    check(model("ScatterElements", feeds, {"axis": axis, "reduction": reduction}, opset=18),
          feeds, EXACT)


def test_scatter_elements_bool_and_old_scatter(cuda_device):
    x = random((3, 4), np.bool_)
    idx = np.array([[0, 2], [3, 3], [1, 0]], np.int32)
    upd = random((3, 2), np.bool_, 5)
    feeds = {"x": x, "i": idx, "u": upd}
    check(model("ScatterElements", feeds, {"axis": 1}, opset=13), feeds, EXACT)
    xf = random((3, 4), F32)
    feeds = {"x": xf, "i": idx, "u": random((3, 2), F32, 6)}
    check(model("Scatter", feeds, {"axis": 1}, opset=9), feeds, EXACT)


@pytest.mark.parametrize("dtype", NUMERIC, ids=NUM_IDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_applies_duplicates_in_index_order(cuda_device, dtype, reduction):
    x = random((4, 3, 5), dtype, 1)
    idx = np.array([[[1, 2], [-3, 0]], [[1, -1], [3, 1]], [[0, 0], [1, 2]]], np.int64)
    upd = random((3, 2, 5), dtype, 2)
    feeds = {"x": x, "i": idx, "u": upd}
    check(model("ScatterND", feeds, {"reduction": reduction}, opset=18), feeds, EXACT)
    idx1 = np.array([[2], [0], [2]], np.int64)                    # whole slices
    feeds = {"x": x, "i": idx1, "u": random((3, 3, 5), dtype, 3)}
    check(model("ScatterND", feeds, {"reduction": reduction}, opset=18), feeds, EXACT)


# ---------------------------------------------------------------- CumSum, CumProd

@pytest.mark.parametrize("op,opset", [("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("dtype", [F32, F16, BF16, np.dtype(np.int64)], ids=str)
def test_scans_follow_the_reference_order(cuda_device, op, opset, dtype):
    x = random((3, 7, 4), dtype, scale=1.5)
    if op == "CumProd" and np.dtype(dtype).kind in "iu":
        x = (x % 4).astype(dtype)
    for axis, ad in ((1, np.int64), (-1, np.int32)):
        feeds = {"x": x, "a": np.array(axis, ad)}
        for exclusive in (0, 1):
            for reverse in (0, 1):
                check(model(op, feeds, {"exclusive": exclusive, "reverse": reverse},
                            opset=opset), feeds, EXACT,
                      what=f"{op} axis={axis} exclusive={exclusive} reverse={reverse}")


# ---------------------------------------------------------------- TopK

@pytest.mark.parametrize("dtype", [F32, F16, BF16, np.dtype(np.int64), np.dtype(np.uint64),
                                   np.dtype(np.int8)], ids=str)
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis,k", [(-1, 3), (1, 5), (0, 2)])
def test_top_k_breaks_ties_by_index(cuda_device, dtype, largest, axis, k):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 4, size=(3, 5, 6)).astype(dtype)          # many ties
    if np.dtype(dtype).kind == "f" or dtype == BF16:
        x.reshape(-1)[[2, 7, 40]] = np.nan
        x.reshape(-1)[[3, 4]] = [-0.0, 0.0]
    feeds = {"x": x}
    check(model("TopK", feeds, {"axis": axis, "largest": largest},
                consts={"k": np.array([k], np.int64)}, n_outputs=2, opset=11), feeds, EXACT)


def test_top_k_attribute_form_and_k_zero(cuda_device):
    x = random((4, 6), F32)
    check(model("TopK", {"x": x}, {"axis": 1, "k": 2}, n_outputs=2, opset=1), {"x": x}, EXACT)
    check(model("TopK", {"x": x}, {}, consts={"k": np.array([0], np.int64)}, n_outputs=2,
                opset=11), {"x": x}, EXACT)


# ---------------------------------------------------------------- Dropout

@pytest.mark.parametrize("dtype", list(FLOATS.values()), ids=list(FLOATS))
def test_dropout_inference_copies_and_masks_true(cuda_device, dtype):
    x = random((3, 5), dtype)
    check(model("Dropout", {"x": x}, n_outputs=2, opset=13), {"x": x}, EXACT)
    check(model("Dropout", {"x": x}, consts={"r": np.array(0.25, F32)}, n_outputs=2,
                opset=13), {"x": x}, EXACT)
    check(model("Dropout", {"x": x}, opset=13), {"x": x}, EXACT)


def test_dropout_with_training_mode_known_false_runs_inference(cuda_device):
    x = random((3, 5), F16)
    consts = {"r": np.array(0.5, F32), "t": np.array(False)}
    check(model("Dropout", {"x": x}, consts=consts, n_outputs=2, opset=13), {"x": x}, EXACT)


def test_dropout_old_mask_has_the_data_dtype(cuda_device):
    x = random((2, 7), F16)
    check(model("Dropout", {"x": x}, {"ratio": 0.3}, n_outputs=2, opset=7), {"x": x}, EXACT)


# ---------------------------------------------------------------- ReverseSequence

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_reads_lengths_on_the_device(cuda_device, dtype, batch_axis,
                                                      time_axis):
    shape = [0, 0, 3]
    shape[time_axis], shape[batch_axis] = 5, 4
    x = random(shape, dtype)
    feeds = {"x": x, "l": np.array([5, 0, 1, 3], np.int64)}
    check(model("ReverseSequence", feeds, {"batch_axis": batch_axis, "time_axis": time_axis},
                opset=10), feeds, EXACT)


# ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space_round_trip(cuda_device, dtype, mode):
    x = random((2, 12, 3, 5), dtype)
    check(model("DepthToSpace", {"x": x}, {"blocksize": 2, "mode": mode}, opset=13), {"x": x},
          EXACT)
    z = random((2, 3, 6, 4), dtype)
    check(model("SpaceToDepth", {"x": z}, {"blocksize": 2}, opset=13), {"x": z}, EXACT)
