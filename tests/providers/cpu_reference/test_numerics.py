"""numerics.erf / erfc: fdlibm's algorithm, accurate to about an ulp of float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnx_ep.providers.cpu_reference import numerics
from onnx_ep.providers.cpu_reference.numerics import erf, erfc

#: every range boundary of both functions, and the points either side of it
_EDGES = [0.0, 2.0**-1022, 2.0**-28, 0.25, 0.84375, 1.25, numerics._ERFC_RB,
          numerics._ERF_RB, 6.0, 28.0]


def _grid() -> np.ndarray:
    rng = np.random.default_rng(0)
    edges = np.array(_EDGES)
    near = np.concatenate([edges, np.nextafter(edges, 0), np.nextafter(edges, 40)])
    x = np.concatenate([
        np.linspace(-30, 30, 120_001), rng.standard_normal(40_000) * 2,
        np.exp(rng.uniform(-740, 3.4, 5_000)), [5e-324], near])
    return np.concatenate([x, -x])


def _ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    spacing = np.where(ref == 0, 5e-324, np.spacing(np.abs(ref)))
    return np.where(got == ref, 0.0, np.abs(got - ref) / spacing)


@pytest.mark.parametrize(("fn", "ref_fn", "max_ulps"), [
    (erf, math.erf, 1),     # both within an ulp of the true value (0.87 ulp here)
    (erfc, math.erfc, 4),   # 0.5 - r near x = 0.84 cancels in both (2.4 / 2.9 ulp)
])
def test_erf_erfc_agree_with_libm_to_an_ulp_or_few(fn, ref_fn, max_ulps: int) -> None:
    x = _grid()
    ref = np.array([ref_fn(v) for v in x])
    assert _ulps(fn(x), ref).max() <= max_ulps


def test_erf_is_odd_and_keeps_zero_sign() -> None:
    x = _grid()
    np.testing.assert_array_equal(erf(-x), -erf(x))
    assert np.signbit(erf(np.array(-0.0)))


def test_special_values_and_shapes() -> None:
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, 30.0, -30.0])
    np.testing.assert_array_equal(erf(specials), [np.nan, 1, -1, 0, 1, -1])
    np.testing.assert_array_equal(erfc(specials), [np.nan, 0, 2, 1, 0, 2])
    assert erf(np.float64(0.5)).shape == ()
    assert erfc(np.zeros((2, 0, 3))).shape == (2, 0, 3)
    # several blocks; shifting the block boundaries changes nothing
    flat = np.linspace(-7, 7, 7 * (numerics._BLOCK // 2 + 1))
    for fn in (erf, erfc):
        np.testing.assert_array_equal(fn(flat.reshape(7, -1)).reshape(-1), fn(flat))
        np.testing.assert_array_equal(fn(flat[5:]), fn(flat)[5:])


def test_erfc_tail_keeps_relative_accuracy() -> None:
    x = np.array([5.0, 10.0, 20.0, 26.5])
    ref = np.array([math.erfc(v) for v in x])
    np.testing.assert_allclose(erfc(x), ref, rtol=1e-15)
    np.testing.assert_array_equal(erfc(-x), 2.0 - erfc(x))


def _sigmoid_two_branch(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sigmoid_is_the_two_branch_formula_bit_for_bit(dtype):
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 88.7, -88.7,
                        -745.2, 710.0, 3.4e38], dtype=np.float64)
    with np.errstate(all="ignore"):          # float32 NaN payloads and 3.4e38 -> float32
        x = np.concatenate([bits.astype(np.float64), special]).astype(dtype)
    for arr in (x, x[::3], x.reshape(-1, 4)[:, 1], np.asarray(x[5]), np.asarray(dtype(-2.5))):
        got, want = numerics.sigmoid(arr), _sigmoid_two_branch(arr)
        assert got.dtype == want.dtype and got.shape == want.shape
        g, w = np.asarray(got).reshape(-1), np.asarray(want).reshape(-1)
        both_nan = np.isnan(g) & np.isnan(w)
        assert np.array_equal(g[~both_nan].view(np.uint8), w[~both_nan].view(np.uint8))
