"""GPU parity of the CUDA reductions against cpu_reference: Max/Min/ArgMax/ArgMin exact,
sums within the kernel's declared bound for the dtype; run-to-run determinism.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_reduce.py
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.cuda_family import FLOATS, check, model, random

pytestmark = pytest.mark.cuda

SUMS = ["ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2",
        "ReduceLogSumExp"]
SELECT = ["ReduceMax", "ReduceMin"]
SHAPES_AXES = [((4, 1000), [1]), ((4, 300, 33), [1]), ((300, 33), [0]), ((3, 4, 5, 6), [0, 2]),
               ((2, 3, 4), [0, 1, 2]), ((7, 5), [-1]), ((2, 3, 4), [1, 2])]


@pytest.mark.parametrize("dtype", list(FLOATS.values()), ids=list(FLOATS))
@pytest.mark.parametrize("op", SUMS + SELECT)
@pytest.mark.parametrize("shape,axes", SHAPES_AXES)
@pytest.mark.parametrize("keepdims", [1, 0])
def test_reduce_axes_attribute(cuda_device, dtype, op, shape, axes, keepdims):
    x = random(shape, dtype, seed=len(shape))
    check(model(op, {"x": x}, {"axes": axes, "keepdims": keepdims}, opset=11), {"x": x},
          what=f"{op} {dtype} {shape} axes={axes}")


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceL2", "ReduceLogSumExp"])
def test_reduce_axes_input_derived_from_shapes(cuda_device, op):
    x = random((3, 40, 6), np.float32)
    check(model(op, {"x": x}, {"keepdims": 1}, consts={"a": np.array([1], np.int64)},
                opset=18), {"x": x})
    check(model(op, {"x": x}, {"keepdims": 1}, consts={"a": np.array([], np.int64)},
                opset=18), {"x": x})


@pytest.mark.parametrize("op", SUMS + SELECT + ["ReduceProd", "ReduceLogSum"])
@pytest.mark.parametrize("axes", [[1], [0, 2], [-1], []])
def test_reduce_known_axes_input_with_keepdims_0(cuda_device, op, axes):
    """axes as an initializer: its value is known, so keepdims=0 runs on cuda too."""
    x = (np.abs(random((3, 40, 6), np.float32)) + 0.5).astype(np.float32)
    check(model(op, {"x": x}, {"keepdims": 0}, consts={"a": np.array(axes, np.int64)},
                opset=18), {"x": x}, what=f"{op} axes={axes} keepdims=0")


@pytest.mark.parametrize("op", SUMS + SELECT + ["ReduceProd", "ReduceLogSum"])
@pytest.mark.parametrize("keepdims", [1, 0])
def test_reduce_known_empty_axes_with_noop_is_the_identity(cuda_device, op, keepdims):
    x = (np.abs(random((3, 1, 6), np.float16)) + 0.5).astype(np.float16)
    for axes in ([], [1]):
        check(model(op, {"x": x}, {"keepdims": keepdims, "noop_with_empty_axes": 1},
                    consts={"a": np.array(axes, np.int64)}, opset=18), {"x": x},
              what=f"{op} axes={axes} keepdims={keepdims} noop_with_empty_axes=1")


def test_reduce_prod_and_log_sum(cuda_device):
    x = (np.abs(random((5, 12), np.float32)) + 0.5).astype(np.float32)
    for op in ("ReduceProd", "ReduceLogSum"):
        check(model(op, {"x": x}, {"axes": [1]}, opset=11), {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceMax",
                                "ReduceMin", "ReduceL1", "ReduceSumSquare"])
def test_integer_reductions_are_exact(cuda_device, dtype, op):
    x = random((6, 7, 5), dtype)
    from onnx_ep.core.kernel import Parity

    check(model(op, {"x": x}, {"axes": [1]}, opset=11), {"x": x}, Parity.EXACT)


def test_max_min_propagate_nan_and_infinities(cuda_device):
    x = random((4, 50), np.float32)
    x[0, 7] = np.nan
    x[1, :] = -np.inf
    x[2, 3] = np.inf
    for op in SELECT + ["ReduceLogSumExp", "ReduceSum"]:
        check(model(op, {"x": x}, {"axes": [1]}, opset=11), {"x": x}, what=op)


@pytest.mark.parametrize("dtype", [*FLOATS.values(), np.dtype(np.int64)],
                         ids=[*FLOATS, "int64"])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,shape", [(1, (4, 1000)), (0, (300, 9)), (1, (3, 50, 7)),
                                        (-1, (2, 3, 5))])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extremes_are_exact_with_ties(cuda_device, dtype, op, axis, shape, last):
    x = (random(shape, np.float32, seed=3) * 3).round().astype(dtype)   # many ties
    check(model(op, {"x": x}, {"axis": axis, "keepdims": 1, "select_last_index": last}),
          {"x": x})


def test_argmax_picks_the_first_nan(cuda_device):
    x = random((2, 600), np.float32)
    x[0, 100] = x[0, 500] = np.nan
    check(model("ArgMax", {"x": x}, {"axis": 1, "keepdims": 0}), {"x": x})
    check(model("ArgMin", {"x": x}, {"axis": 1, "select_last_index": 1}), {"x": x})


@pytest.mark.parametrize("dtype", [*FLOATS.values(), np.dtype(np.int32)],
                         ids=[*FLOATS, "int32"])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("shape", [(1, 151936), (3, 1, 20000), (2, 8192), (63, 9000)])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extremes_of_long_rows_split_over_blocks(cuda_device, dtype, op, shape, last):
    from onnx_ep.providers.cuda.kernels.reduce import arg_split

    assert arg_split(int(np.prod(shape[:-1])), shape[-1], 1) > 1     # the split route
    x = (random(shape, np.float32, seed=5) * 40).round().astype(dtype)   # ties across parts
    check(model(op, {"x": x}, {"axis": -1, "keepdims": 0, "select_last_index": last}),
          {"x": x}, what=f"{op} {dtype} {shape} last={last}")


def test_split_arg_extremes_pick_the_first_nan_across_parts(cuda_device):
    x = random((2, 50000), np.float32)
    x[0, 30000] = x[0, 45000] = np.nan         # in two different parts
    x[1, 7] = x[1, 49999] = 1e30
    check(model("ArgMax", {"x": x}, {"axis": 1, "keepdims": 0}), {"x": x})
    check(model("ArgMin", {"x": x}, {"axis": 1, "select_last_index": 1}), {"x": x})


def test_split_argmax_replays_its_eager_result(cuda_device):
    from tests.helpers.cuda_family import check_replays_match_eager

    x = random((1, 1, 151936), np.float16, seed=2)
    check_replays_match_eager(model("ArgMax", {"x": x}, {"axis": -1, "keepdims": 0}), {"x": x})


def test_sums_are_deterministic_run_to_run(cuda_device):
    from onnx_ep import Session

    x = random((64, 4096), np.float32, seed=9)
    m = model("ReduceSum", {"x": x}, {"axes": [1]}, opset=11)
    s = Session(m, providers=["cuda"])
    first = s.run(None, {"x": x})[0]
    for _ in range(3):
        assert s.run(None, {"x": x})[0].tobytes() == first.tobytes()


def test_empty_reductions(cuda_device):
    x = np.zeros((3, 0), np.float32)
    for op in ("ReduceSum", "ReduceMax", "ReduceLogSumExp", "ReduceProd"):
        check(model(op, {"x": x}, {"axes": [1]}, opset=11), {"x": x}, what=op)
