"""GPU parity of the CUDA shape family (Shape, Size, ConstantOfShape, EyeLike, Range, Trilu)
against cpu_reference: exact bytes. ``providers=["cuda"]`` only, so a node the device
could not run or size fails instead of silently running on the host.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_shape.py
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from onnx_ep.core.kernel import Parity
from tests.helpers.cuda_family import BF16, FLOATS, check, model, random

pytestmark = pytest.mark.cuda
EXACT = Parity.EXACT
DTYPES = [*FLOATS.values(), np.dtype(np.int64), np.dtype(np.int8), np.dtype(np.bool_)]
IDS = [str(d) for d in DTYPES]


def _scalar(value, dtype) -> np.ndarray:
    return np.array(value, dtype=np.float64).astype(dtype).reshape(())


# ---------------------------------------------------------------- Shape, Size

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("shape", [(2, 3, 4), (), (5,), (0, 3), (1, 2, 1, 3, 1, 1, 2, 1, 1, 2)])
def test_shape_and_size_write_the_runtime_dims(cuda_device, dtype, shape):
    x = np.asarray(random(shape, dtype))
    got = check(model("Shape", {"x": x}, opset=13), {"x": x}, EXACT)
    np.testing.assert_array_equal(got[0], np.array(shape, np.int64))
    got = check(model("Size", {"x": x}, opset=13), {"x": x}, EXACT)
    assert got[0].shape == () and int(got[0]) == int(np.prod(shape))


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-1, None), (0, -1), (-2, 10),
                                       (3, 1), (-100, 100), (2, 9)])
def test_shape_15_start_end_clamp_like_the_reference(cuda_device, start, end):
    x = random((2, 3, 4, 1, 5, 6, 7, 1, 2, 3), np.float16)     # rank 10: two launches
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    got = check(model("Shape", {"x": x}, attrs, opset=15), {"x": x}, EXACT)
    s = 0 if start is None else start
    np.testing.assert_array_equal(got[0], np.array(x.shape[s:end], np.int64))


# ---------------------------------------------------------------- ConstantOfShape

@pytest.mark.parametrize("value", [
    None,
    np.array([7], np.int32), np.array([-3], np.int64), np.array([1.5], np.float32),
    np.array([-0.0], np.float16), np.array([2.25], BF16), np.array([True]),
    np.array([200], np.uint8), np.array([np.pi], np.float64), np.array([-5], np.int8),
], ids=lambda v: "default" if v is None else str(v.dtype))
@pytest.mark.parametrize("dims", [(2, 3, 4), (7,), (3, 0), (5, 3)])
def test_constant_of_shape_fills_the_value_bits(cuda_device, value, dims):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value, "value")}
    m = model("ConstantOfShape", {}, attrs, consts={"s": np.array(dims, np.int64)}, opset=21)
    got = check(m, {}, EXACT)
    want = np.zeros(dims, np.float32) if value is None else np.full(dims, value[0])
    assert got[0].dtype == want.dtype and got[0].shape == tuple(dims)
    assert got[0].tobytes() == want.tobytes()


def test_constant_of_shape_scalar_output(cuda_device):
    m = model("ConstantOfShape", {}, {"value": numpy_helper.from_array(np.array([9], np.int64),
                                                                       "value")},
              consts={"s": np.zeros((0,), np.int64)})
    got = check(m, {}, EXACT)
    assert got[0].shape == () and int(got[0]) == 9


# ---------------------------------------------------------------- EyeLike

@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (1, 1), (0, 3)])
@pytest.mark.parametrize("k", [0, 1, -2, 7])
@pytest.mark.parametrize("out", [None, "int64", "bool", "float16", "int8", "float64"])
def test_eye_like_places_one_on_diagonal_k(cuda_device, shape, k, out):
    x = random(shape, np.float32)
    attrs = {"k": k}
    if out is not None:
        attrs["dtype"] = int(helper.np_dtype_to_tensor_dtype(np.dtype(out)))
    check(model("EyeLike", {"x": x}, attrs), {"x": x}, EXACT)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_eye_like_keeps_the_input_dtype(cuda_device, dtype):
    x = random((6, 4), dtype)
    check(model("EyeLike", {"x": x}, {"k": -1}, opset=22), {"x": x}, EXACT)


# ---------------------------------------------------------------- Trilu

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -2, 10, -10])
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 6, 4), (3, 1, 7)])
def test_trilu_reads_k_on_the_device(cuda_device, dtype, upper, k, shape):
    x = random(shape, dtype)
    consts = {} if k is None else {"k": np.array(k, np.int64)}
    check(model("Trilu", {"x": x}, {"upper": upper}, consts=consts), {"x": x}, EXACT)


def test_trilu_k_as_a_graph_input(cuda_device):
    x = random((3, 8, 8), np.float32)
    feeds = {"x": x, "k": np.array(-3, np.int64)}
    check(model("Trilu", feeds, {"upper": 1}), feeds, EXACT)
    feeds["k"] = np.array(2, np.int64)
    check(model("Trilu", feeds, {"upper": 0}), feeds, EXACT)


# ---------------------------------------------------------------- Range

def _range_model(dtype, start, limit, delta):
    """A Range model whose output length is declared: onnx's inference sizes Range only for
    some dtypes, and the planner sizes device outputs from the declared graph outputs."""
    from onnx_ep import Session

    consts = {"s": _scalar(start, dtype), "l": _scalar(limit, dtype),
              "d": _scalar(delta, dtype)}
    m = model("Range", {}, consts=consts)
    n = Session(m, providers=["cpu_reference"]).run(None, {})[0].shape[0]
    out = m.graph.output[0].type.tensor_type
    out.elem_type = int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    del out.shape.dim[:]
    out.shape.dim.add().dim_value = n
    return m


@pytest.mark.parametrize("dtype,start,limit,delta", [
    (np.float32, 0.1, 97.3, 0.7),
    (np.float32, 16777000.0, 16777300.0, 1.0),      # sums round beyond 2^24
    (np.float32, 5.0, -3.3, -0.37),
    (np.float64, 0.1, 1000.0, 0.3),
    (np.float64, -1e300, 1e300, 3e297),
    (np.int64, -7, 100, 3),
    (np.int64, 50, -50, -7),
    (np.int32, 2147483000, 2147483647, 13),
    (np.int16, -300, 300, 11),
    (np.int32, 3, 3, 1),                            # empty output
])
def test_range_start_plus_i_delta(cuda_device, dtype, start, limit, delta):
    check(_range_model(dtype, start, limit, delta), {}, EXACT)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("start,limit,delta", [(0.1, 60.0, 0.33), (1000.0, -20.0, -3.7)])
def test_range_narrow_floats_round_once_from_float32(cuda_device, dtype, start, limit, delta):
    check(_range_model(dtype, start, limit, delta), {}, EXACT)
