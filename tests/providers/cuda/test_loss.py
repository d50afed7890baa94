"""GPU parity of the CUDA losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) and
the normalization family (Hardmax, LpNormalization, InstanceNormalization,
GroupNormalization, BatchNormalization) against cpu_reference, under each kernel's
promise (NLL, Hardmax and inference BatchNormalization: exact bytes).

Run: python -m pytest -q -m cuda tests/providers/cuda/test_loss.py
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.core.kernel import Parity
from onnx_ep.providers.cuda.kernels.base import narrow_tolerance
from onnx_ep.providers.cuda.kernels.normalization import NORM_PARITY
from tests.helpers.cuda_family import FLOATS, check, model, random

pytestmark = pytest.mark.cuda
DTYPES = [*FLOATS.values(), np.dtype(np.float64)]
IDS = [str(d) for d in DTYPES]


def _labels(shape, c, dtype=np.int64, ignore=None, seed=1):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, c, size=shape).astype(dtype)
    if ignore is not None:
        t.reshape(-1)[::3] = ignore       # every third item ignored
    return t


# ---------------------------------------------------------------- losses

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_loss_matches_the_reference(cuda_device, dtype, op, reduction):
    x = random((3, 5, 2, 4), dtype, seed=2)
    t = _labels((3, 2, 4), 5)
    w = (np.abs(random((5,), np.float32, seed=3)) + 0.5).astype(dtype)
    feeds = {"x": x, "t": t, "w": w}
    n_out = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    check(model(op, feeds, {"reduction": reduction}, n_outputs=n_out, opset=13), feeds)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("ignore", [-1, 2])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_loss_ignore_index_int32_labels_and_no_weight(cuda_device, op, ignore, reduction):
    x = random((4, 3), np.float32, seed=4)
    t = _labels((4,), 3, np.int32, ignore=ignore)
    feeds = {"x": x, "t": t}
    check(model(op, feeds, {"reduction": reduction, "ignore_index": ignore}, opset=13), feeds)


def test_loss_long_sums_keep_the_reference_order(cuda_device):
    # 2 * 3 * 700 = 4200 items: the pairwise tree splits several times; C = 200 is pairwise
    x = random((6, 200, 700), np.float32, seed=5)
    t = _labels((6, 700), 200, ignore=7)
    w = (np.abs(random((200,), np.float32, seed=6)) + 0.1).astype(np.float32)
    feeds = {"x": x, "t": t, "w": w}
    for op in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"):
        check(model(op, feeds, {"reduction": "mean", "ignore_index": 7}, opset=13), feeds)
    x2 = random((300, 200), np.float32, seed=7)
    t2 = _labels((300,), 200)
    feeds2 = {"x": x2, "t": t2}
    check(model("SoftmaxCrossEntropyLoss", feeds2, {"reduction": "sum"}, n_outputs=2,
                opset=13), feeds2)


def test_out_of_range_label_gives_nan_on_the_device(cuda_device):
    from onnx_ep import Session

    x = random((2, 3), np.float32)
    t = np.array([1, 5], np.int64)
    feeds = {"x": x, "t": t}
    none = Session(model("NegativeLogLikelihoodLoss", feeds, {"reduction": "none"}, opset=13),
                   providers=["cuda"]).run(None, feeds)[0]
    assert np.isnan(none[1]) and none[0] == -x[0, 1]
    mean = Session(model("NegativeLogLikelihoodLoss", feeds, opset=13),
                   providers=["cuda"]).run(None, feeds)[0]
    assert np.isnan(mean)


# ---------------------------------------------------------------- normalization family

@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("axis,opset", [(0, 13), (1, 13), (-1, 13), (1, 11)])
def test_hardmax_is_exact(cuda_device, dtype, axis, opset):
    x = random((3, 4, 5), dtype, seed=8)
    x[1, 2, :] = x[1, 1, :]                     # ties: the first maximum wins
    check(model("Hardmax", {"x": x}, {"axis": axis}, opset=opset), {"x": x})


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("p,axis", [(2, -1), (1, 1), (2, 0)])
def test_lp_normalization(cuda_device, dtype, p, axis):
    x = random((2, 3, 4), dtype, seed=9)
    x[0, :, 1] = 0                               # a zero norm along axis 1 gives 0
    check(model("LpNormalization", {"x": x}, {"p": p, "axis": axis}, opset=22), {"x": x})


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_instance_and_group_normalization(cuda_device, dtype):
    x = random((2, 4, 3, 5), dtype, seed=10)
    s, b = random((4,), dtype, seed=11), random((4,), dtype, seed=12)
    feeds = {"x": x, "s": s, "b": b}
    check(model("InstanceNormalization", feeds, {"epsilon": 1e-2}, opset=22), feeds)
    check(model("GroupNormalization", feeds, {"num_groups": 2}, opset=21), feeds)
    g18 = {"x": x, "s": s[:2].copy(), "b": b[:2].copy()}
    check(model("GroupNormalization", g18, {"num_groups": 2}, opset=18), g18)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_batch_normalization(cuda_device, dtype):
    x = random((2, 3, 4, 5), dtype, seed=13)
    s, b, m = (random((3,), dtype, seed=k) for k in (14, 15, 16))
    v = (np.abs(random((3,), np.float32, seed=17)) + 0.5).astype(dtype)
    feeds = {"x": x, "s": s, "b": b, "m": m, "v": v}
    check(model("BatchNormalization", feeds, {"epsilon": 1e-2}, opset=15), feeds,
          Parity.EXACT)
    check(model("BatchNormalization", feeds, {"training_mode": 1, "momentum": 0.8},
                n_outputs=3, opset=15), feeds, narrow_tolerance(dtype, NORM_PARITY))
