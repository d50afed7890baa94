"""Host side of the CUDA Einsum (no GPU): the equation plan, replayed in numpy the way
einsum.cu walks it, against cpu_reference; supports and infer_outputs."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec
from onnx_ep.providers.cpu_reference.einsum import Einsum as RefEinsum
from onnx_ep.providers.cuda.kernels import einsum as es

F32 = np.dtype(np.float32)

#: (equation, input shapes): the node suite's forms and a few harder ones
CASES = [
    ("...ii->...i", [(3, 5, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i", [(5,), (5,)]),
    (",->", [(), ()]),
    ("ij->i", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ii", [(4, 4)]),
    ("ij,jk", [(3, 4), (4, 2)]),
    ("...j,j->...", [(2, 3, 4), (4,)]),
    ("b...i,bi->b...", [(2, 1, 3, 4), (2, 4)]),
    ("ij,ij,ij->", [(2, 3), (2, 3), (1, 3)]),
    ("abc->cab", [(2, 3, 4)]),
]


def replay(plan: es.EinsumPlan, xs: list[np.ndarray]) -> np.ndarray:
    """einsum.cu's loops over flat operands."""
    flat = [x.astype(np.float64).reshape(-1) for x in xs]
    n_out, sizes = plan.n_out, plan.sizes
    out = np.zeros(int(np.prod(plan.out_shape, dtype=np.int64)))
    for i in range(out.size):
        base = [0] * len(xs)
        rem = i
        for lt in range(n_out - 1, -1, -1):
            rem, v = divmod(rem, sizes[lt])
            for k in range(len(xs)):
                base[k] += v * plan.strides[k][lt]
        acc = 0.0
        for j in range(plan.n_sum):
            off = list(base)
            r = j
            for lt in range(len(sizes) - 1, n_out - 1, -1):
                r, v = divmod(r, sizes[lt])
                for k in range(len(xs)):
                    off[k] += v * plan.strides[k][lt]
            p = 1.0
            for k in range(len(xs)):
                p *= flat[k][off[k]]
            acc += p
        out[i] = acc
    return out.reshape(plan.out_shape)


def _meta(eq, shapes, dtype=F32):
    return NodeMeta(name="n", op_type="Einsum", domain="", opset=13, attrs={"equation": eq},
                    inputs=tuple(TensorSpec(dtype, s) for s in shapes), output_names=("y",))


@pytest.mark.parametrize("eq,shapes", CASES)
def test_plan_replay_matches_the_reference(eq, shapes):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    meta = _meta(eq, shapes)
    want = RefEinsum("Einsum", since=12).run(ExecutionContext(meta), *xs)
    plan = es.einsum_plan(eq, shapes)
    got = replay(plan, xs).astype(np.float32)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    k = es.KERNELS[0]
    assert k.supports(meta)
    assert k.infer_outputs(meta) == [TensorSpec(F32, want.shape)]


def test_declines_what_the_kernel_cannot_run():
    k = es.KERNELS[0]
    assert not k.supports(_meta("ij,jk", [(3, 4), (5, 2)]))
    assert not k.supports(_meta("i,i,i,i,i", [(2,)] * 5))
    assert not k.supports(_meta("ij", [(3, 4)], np.dtype(np.int64)))
    with pytest.raises(ValueError):
        es.einsum_plan("ij->k", [(2, 3)])


def test_geo_struct_layout():
    assert ctypes.sizeof(es.EinsumGeo) == 8 * 16 + 8 * 16 * 4 + 16   # 3 ints, padded to 8
    g = es.einsum_plan("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]).geo()
    assert (g.n_out, g.n_sum, g.n_ops) == (3, 1, 2)
    assert list(g.size)[:4] == [2, 3, 5, 4]
