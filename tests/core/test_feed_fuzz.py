"""Random feeds: onnx-ep returns onnxruntime's answer or raises one of its own typed errors."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import onnx_ep
from onnx_ep.errors import OnnxEpError
from tests.helpers.models import mlp_model, two_input_model
from tests.helpers.oracle import run_ort

DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.bool_, np.uint8]

_MLP = mlp_model()
_TWO = two_input_model()
_SESSIONS = {"mlp": onnx_ep.Session(_MLP), "two": onnx_ep.Session(_TWO)}

shapes = st.lists(st.integers(min_value=0, max_value=9), min_size=0, max_size=4).map(tuple)


def _array(dtype: type, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 3).astype(dtype)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), shape=shapes, seed=st.integers(0, 2**16))
def test_mlp_random_feed_is_right_or_typed_error(dtype, shape, seed):
    x = _array(dtype, shape, seed)
    s = _SESSIONS["mlp"]
    try:
        (y,) = s.run(None, {"x": x})
    except OnnxEpError:
        valid = dtype == np.float32 and len(shape) == 2 and shape[1] == 8
        assert not valid, "a valid feed was refused"
        return
    (ref,) = run_ort(_MLP, {"x": x})
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)


@settings(max_examples=80, deadline=None)
@given(a_shape=shapes, b_shape=shapes, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 99))
def test_two_input_random_feeds_are_right_or_typed_error(a_shape, b_shape, dtype, seed):
    a, b = _array(dtype, a_shape, seed), _array(dtype, b_shape, seed + 1)
    s = _SESSIONS["two"]
    try:
        (c,) = s.run(None, {"a": a, "b": b})
    except OnnxEpError:
        valid = (dtype == np.float32 and len(a_shape) == 2 and a_shape[0] == 2
                 and len(b_shape) == 1 and b_shape[0] == a_shape[1])
        assert not valid, "a valid feed was refused"
        return
    np.testing.assert_array_equal(c, run_ort(_TWO, {"a": a, "b": b})[0])
