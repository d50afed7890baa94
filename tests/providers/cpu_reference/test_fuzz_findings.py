"""Edge cases the graph fuzz against onnxruntime found (tests/core/test_graph_fuzz.py): each
expected value is what the ONNX spec's definition or C99 pow gives."""

from __future__ import annotations

import numpy as np

from tests.helpers.oracle import node_model, run_ours

INF, NAN = np.inf, np.nan


def _run(op, feeds, n_out=1, **attrs):
    return run_ours(node_model(op, feeds, n_out, **attrs), feeds)


def test_softmax_of_a_row_holding_plus_inf_is_nan_throughout():
    # the spec: exp(x - max(x)) / sum; max = inf makes every element NaN
    (y,) = _run("Softmax", {"x": np.array([[1, INF, -INF, 2], [1, 2, 3, 4]], np.float32)})
    assert np.isnan(y[0]).all()
    np.testing.assert_allclose(y[1].sum(), 1.0, rtol=1e-6)
    (ly,) = _run("LogSoftmax", {"x": np.array([1, INF, 2], np.float32)})
    assert np.isnan(ly).all()


def test_topk_largest_ranks_nan_as_the_largest_value_like_argmax():
    x = np.array([[1, NAN, 3, NAN], [4, 2, NAN, 1]], np.float32)
    values, indices = _run("TopK", {"x": x, "k": np.array([3], np.int64)}, 2)
    np.testing.assert_array_equal(indices, [[1, 3, 2], [2, 0, 1]])
    assert np.isnan(values[0, :2]).all() and values[0, 2] == 3
    (arg,) = _run("ArgMax", {"x": x}, axis=1, keepdims=0)
    np.testing.assert_array_equal(arg, indices[:, 0])
    values, indices = _run("TopK", {"x": x, "k": np.array([2], np.int64)}, 2, largest=0)
    np.testing.assert_array_equal(indices, [[0, 2], [3, 1]])


def test_integer_reduce_mean_of_int_min_truncates_toward_zero():
    for dt in (np.int32, np.int64):
        lo = np.iinfo(dt).min
        (y,) = _run("ReduceMean", {"x": np.array([lo, 0, 0], dt), "axes": np.array([0])},
                    keepdims=0)
        assert y == -(-(int(lo)) // 3), (dt, y)
    (y,) = _run("ReduceMean", {"x": np.array([[-7, 0], [7, 0]], np.int64),
                               "axes": np.array([1])}, keepdims=0)
    np.testing.assert_array_equal(y, [-3, 3])


def test_pow_by_a_half_follows_c99_pow_at_minus_inf_and_minus_zero():
    for y in (np.array(0.5, np.float32), np.array([0.5], np.float32)):
        (z,) = _run("Pow", {"x": np.array([-INF, -0.0, 4, -4], np.float32), "y": y})
        assert z[0] == INF and z[1] == 0 and not np.signbit(z[1]) and z[2] == 2
        assert np.isnan(z[3])
