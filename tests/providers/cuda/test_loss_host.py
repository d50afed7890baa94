"""Host-side logic of the CUDA loss and normalization kernels (no GPU): supports,
infer_outputs, workspace sizing, per-node promises, and the summation order loss.cu replays
(a Python port of its iterative pairwise sum must give numpy's bits)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import NodeMeta, Parity, TensorSpec, WorkspaceRequirement
from onnx_ep.providers.cuda.kernels import loss as cuda_loss
from onnx_ep.providers.cuda.kernels import normalization as cuda_norm

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
KERNELS = {k.key.op_type: k for k in cuda_loss.KERNELS + cuda_norm.KERNELS}


def _meta(op, inputs, opset=21, n_out=1, names=None, **attrs):
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(inputs),
                    input_names=tuple(names or [f"i{i}" for i in range(len(inputs))]),
                    output_names=tuple(f"y{i}" for i in range(n_out)))


# ---------------------------------------------------------------- the summation order

def _leaf(a, lo, n):
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r = [a[lo + j] for j in range(8)]
    i = 8
    while i < n - n % 8:
        for j in range(8):
            r[j] += a[lo + i + j]
        i += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for k in range(i, n):
        res += a[lo + k]
    return res


def _pairwise_like_loss_cu(a, n):
    """loss.cu's pairwise_sum, line for line (explicit stack, stages 0/1/2)."""
    lo, ln, left, stage = [0] * 64, [0] * 64, [0.0] * 64, [0] * 64
    sp, ln[0], ret = 0, n, 0.0
    while True:
        if stage[sp] == 0 and ln[sp] > 128:
            n2 = ln[sp] // 2
            n2 -= n2 % 8
            stage[sp] = 1
            lo[sp + 1], ln[sp + 1], stage[sp + 1] = lo[sp], n2, 0
            sp += 1
            continue
        if stage[sp] == 0:
            ret = _leaf(a, lo[sp], ln[sp])
        elif stage[sp] == 1:
            n2 = ln[sp] // 2
            n2 -= n2 % 8
            left[sp] = ret
            stage[sp] = 2
            lo[sp + 1], ln[sp + 1], stage[sp + 1] = lo[sp] + n2, ln[sp] - n2, 0
            sp += 1
            continue
        else:
            ret = left[sp] + ret
        if sp == 0:
            return ret
        sp -= 1


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 127, 128, 129, 255, 256, 1000, 4099, 20011])
def test_loss_cu_pairwise_sum_gives_numpys_bits(n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)
    assert _pairwise_like_loss_cu(a.tolist(), n) == a.sum()
    # the reference sums a multi-dimensional (N, d...) loss the same way (flat, contiguous)
    if n == 20011:
        b = a[:20010].reshape(3, 5, 1334)
        assert _pairwise_like_loss_cu(b.ravel().tolist(), b.size) == b.sum()


@pytest.mark.parametrize("shape", [(2, 200, 3), (3, 200), (2, 9, 1, 1), (1, 40, 7)])
def test_class_axis_sum_is_pairwise_only_when_contiguous(shape):
    # sce_terms: pairwise over C when prod(d...) == 1, sequential otherwise (numpy's order)
    rng = np.random.default_rng(1)
    e = rng.random(shape) * 10.0 ** rng.integers(-3, 3, shape)
    want = e.sum(axis=1).reshape(shape[0], -1)
    n, c, d = shape[0], shape[1], int(np.prod(shape[2:]))
    cols = e.reshape(n, c, d)
    for i in range(n):
        for j in range(d):
            col = cols[i, :, j].tolist()
            if d == 1:
                got = _pairwise_like_loss_cu(col, c)
            else:
                got = 0.0
                for v in col:
                    got += v
            assert got == want[i, j]


# ---------------------------------------------------------------- losses

@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_loss_supports_float_inputs_and_integer_labels(op):
    k = KERNELS[op]
    x, t = TensorSpec(F32, (2, 5, 3)), TensorSpec(I64, (2, 3))
    assert k.supports(_meta(op, [x, t]))
    assert k.supports(_meta(op, [TensorSpec(BF16, ("N", 5)), TensorSpec(np.int32, ("N",))]))
    assert k.supports(_meta(op, [x, t, TensorSpec(F32, (5,))], reduction="sum"))
    assert not k.supports(_meta(op, [x, TensorSpec(F32, (2, 3))]))
    assert not k.supports(_meta(op, [TensorSpec(np.int32, (2, 5)), TensorSpec(I64, (2,))]))
    assert not k.supports(_meta(op, [x, TensorSpec(I64, (2,))]))
    assert not k.supports(_meta(op, [x, t, TensorSpec(np.float16, (5,))]))
    assert not k.supports(_meta(op, [x, t], reduction="max"))
    assert not k.supports(_meta(op, [None, t]))


def test_loss_outputs_and_workspace_follow_the_reduction():
    x, t = TensorSpec(F32, (2, 5, 3, 4)), TensorSpec(I64, (2, 3, 4))
    nll, sce = KERNELS["NegativeLogLikelihoodLoss"], KERNELS["SoftmaxCrossEntropyLoss"]
    assert nll.infer_outputs(_meta("x", [x, t], reduction="none")) == [
        TensorSpec(F32, (2, 3, 4))]
    assert nll.infer_outputs(_meta("x", [x, t])) == [TensorSpec(F32, ())]
    assert sce.infer_outputs(_meta("x", [x, t], n_out=2, reduction="sum")) == [
        TensorSpec(F32, ()), TensorSpec(F32, (2, 5, 3, 4))]
    assert sce.infer_outputs(_meta("x", [x, t])) == [TensorSpec(F32, ())]
    assert nll.workspace_requirement(_meta("x", [x, t], reduction="none")) == \
        WorkspaceRequirement.NONE
    assert nll.workspace_requirement(_meta("x", [x, t])) == WorkspaceRequirement(2 * 8 * 24)
    assert sce.workspace_requirement(_meta("x", [TensorSpec(F32, ("N", 5)), t])) == \
        WorkspaceRequirement.NONE


def test_loss_promises():
    x, t = TensorSpec(np.float16, (2, 5)), TensorSpec(I64, (2,))
    assert KERNELS["NegativeLogLikelihoodLoss"].bind(_meta("x", [x, t])).parity == Parity.EXACT
    p = KERNELS["SoftmaxCrossEntropyLoss"].bind(_meta("x", [x, t])).parity
    assert p.rtol == 2.0 ** -10 and p.atol >= 1e-7


# ---------------------------------------------------------------- normalization family

def test_hardmax_and_lpnorm_support_and_shapes():
    x = TensorSpec(F32, (3, 4, 5))
    for op in ("Hardmax", "LpNormalization"):
        k = KERNELS[op]
        assert k.supports(_meta(op, [x], axis=1))
        assert not k.supports(_meta(op, [x], axis=3))
        assert not k.supports(_meta(op, [TensorSpec(I64, (3,))]))
        assert k.infer_outputs(_meta(op, [x])) == [x]
    assert not KERNELS["LpNormalization"].supports(_meta("LpNormalization", [x], p=3))
    assert KERNELS["Hardmax"].bind(_meta("Hardmax", [TensorSpec(BF16, (2,))])).parity == \
        Parity.EXACT


def test_group_and_instance_norm_support():
    x, s = TensorSpec(F32, (3, 4, 2, 2)), TensorSpec(F32, (4,))
    g = KERNELS["GroupNormalization"]
    assert g.supports(_meta("GroupNormalization", [x, s, s], num_groups=2))
    assert not g.supports(_meta("GroupNormalization", [x, s, s]))
    assert not g.supports(_meta("GroupNormalization", [x, s, s], num_groups=2, stash_type=11))
    assert not g.supports(_meta("GroupNormalization", [x, TensorSpec(np.float16, (4,)), s],
                                num_groups=2))
    i = KERNELS["InstanceNormalization"]
    assert i.supports(_meta("InstanceNormalization", [x, s, s]))
    assert not i.supports(_meta("InstanceNormalization", [TensorSpec(F32, (3, 4)), s, s]))


def test_batchnorm_promise_is_exact_only_for_inference():
    x, c = TensorSpec(F32, (2, 3, 4, 5)), TensorSpec(F32, (3,))
    k = KERNELS["BatchNormalization"]
    infer = _meta("BatchNormalization", [x, c, c, c, c], opset=15)
    train = _meta("BatchNormalization", [x, c, c, c, c], opset=15, n_out=3, training_mode=1)
    assert k.supports(infer) and k.supports(train)
    assert k.bind(infer).parity == Parity.EXACT
    assert k.bind(train).parity == cuda_norm.NORM_PARITY
    assert k.infer_outputs(train) == [x, c, c]
    # extra outputs without training mode (the reference raises before opset 14)
    assert not k.supports(_meta("BatchNormalization", [x, c, c, c, c], opset=9, n_out=3))
    assert not k.supports(_meta("BatchNormalization", [x, c, c, c, TensorSpec(BF16, (3,))]))
