"""Conv as im2col + cuBLASLt: geometry and workspace sizing on the CPU, parity on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference.conv import Conv as RefConv
from onnx_ep.providers.cuda import blas
from onnx_ep.providers.cuda.kernels import conv
from tests.helpers.cuda_dense import DTYPES, assert_parity, meta, one_node_model, random, run_both

CASES = [
    # x shape, w shape, attrs
    ((2, 4, 9, 9), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 4, 10, 8), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((2, 3, 11, 11), (4, 3, 3, 3), {"dilations": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((2, 6, 5, 5), (6, 1, 3, 3), {"group": 6, "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((3, 8, 6, 7), (5, 8, 1, 1), {}),                     # 1x1: no im2col
    ((2, 4, 6, 7), (4, 2, 1, 1), {"group": 2}),           # 1x1 grouped
    ((2, 3, 20), (5, 3, 4), {"strides": [3], "pads": [2, 1], "dilations": [2]}),   # 1-D
]


def im2col(x: np.ndarray, g: conv.ConvGeometry) -> np.ndarray:
    """conv.cu's im2col index math on one (c, h, w) image, vectorized."""
    rows = np.arange(g.c * g.kh * g.kw)
    pos = np.arange(g.positions)
    c, th, tw = rows // (g.kh * g.kw), (rows // g.kw) % g.kh, rows % g.kw
    ih = (pos // g.ow)[None, :] * g.stride_h - g.pad_h + th[:, None] * g.dil_h
    iw = (pos % g.ow)[None, :] * g.stride_w - g.pad_w + tw[:, None] * g.dil_w
    inside = (ih >= 0) & (ih < g.h) & (iw >= 0) & (iw < g.w)
    vals = x[c[:, None], np.clip(ih, 0, g.h - 1), np.clip(iw, 0, g.w - 1)]
    return np.where(inside, vals, 0.0)


def simulate(g: conv.ConvGeometry, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cuda Conv's route in float64: bias first, then per image the grouped GEMM."""
    p = g.problem
    y = np.broadcast_to(b[None, :, None], (g.n, g.m, g.positions)).copy()
    x4 = x.reshape(g.n, g.c, g.h, g.w)
    wm = w.reshape(p.batch, p.m, p.k)
    for i in range(g.n):
        cols = x4[i].reshape(g.c, -1) if g.direct else im2col(x4[i], g)
        y[i] += (wm @ cols.reshape(p.batch, p.k, p.n)).reshape(g.m, g.positions)
    return y.reshape(g.out_shape)


# ---------------------------------------------------------------- CPU: geometry and sizing

@pytest.mark.parametrize("x,w,attrs", CASES)
def test_geometry_and_im2col_reproduce_the_reference(x, w, attrs):
    m = meta("Conv", [(np.float64, x), (np.float64, w), (np.float64, (w[0],))], attrs)
    g = conv.conv_geometry(m, x, w, np.float32)
    xv, wv, bv = random(x, np.float64, 1), random(w, np.float64, 2), random((w[0],), np.float64, 3)
    ref = RefConv("Conv").run(ExecutionContext(m), xv, wv, bv)
    assert g.out_shape == ref.shape
    np.testing.assert_allclose(simulate(g, xv, wv, bv), ref, rtol=1e-12, atol=1e-12)


def test_workspace_layout_puts_gemm_workspace_after_columns_on_256_bytes():
    m = meta("Conv", [(np.float16, (2, 3, 5, 5)), (np.float16, (4, 3, 3, 3))])
    g = conv.conv_geometry(m, (2, 3, 5, 5), (4, 3, 3, 3), np.float16)
    assert g.cols_elements == 3 * 9 * 9
    ws = conv.conv_workspace(g, 1000)
    assert ws.cols_nbytes == 3 * 9 * 9 * 2 == 486
    assert ws.gemm_offset == 512 and ws.nbytes == 1512
    assert conv.conv_workspace(g, 0).nbytes == 486           # no GEMM workspace: no padding


def test_pointwise_conv_needs_no_columns():
    g = conv.conv_geometry(meta("Conv", []), (2, 8, 4, 4), (16, 8, 1, 1), np.float32)
    assert g.direct and g.cols_elements == 0
    assert conv.conv_workspace(g, 0).nbytes == 0
    assert conv.conv_workspace(g, 4096).nbytes == 4096


def test_gemm_problem_is_batched_over_groups():
    m = meta("Conv", [], {"group": 2})
    g = conv.conv_geometry(m, (1, 4, 6, 6), (6, 2, 3, 3), np.float32)
    p = g.problem
    assert (p.batch, p.m, p.n, p.k) == (2, 3, 16, 18)
    assert (p.stride_a, p.stride_b, p.stride_d) == (3 * 18, 18 * 16, 3 * 16)


def test_image_offsets_lower_the_plan_alignment():
    # fp16, M * P = 3 * 9 = 27 elements per image: the second image's Y is 54 bytes in
    g = conv.conv_geometry(meta("Conv", []), (2, 1, 3, 3), (3, 1, 1, 1), np.float16)
    assert g.problem.alignment == 2


def test_supports_and_infer_outputs():
    # without nvmath-python every GEMM-based kernel declines (tested below); the
    # decisions that depend on shapes and attributes need it installed
    pytest.importorskip("nvmath", reason="nvmath-python is not installed")
    k = conv.Conv()
    f32 = np.float32
    m2 = meta("Conv", [(f32, (1, 3, 8, 8)), (f32, (4, 3, 3, 3))], {"pads": [1, 1, 1, 1]})
    assert k.supports(m2)
    assert k.infer_outputs(m2)[0].shape == (1, 4, 8, 8)
    assert k.bind(meta("Conv", [(np.float16, (1, 3, 8, 8)), (np.float16, (4, 3, 3, 3))])
                  ).parity == blas.GEMM_PARITY["float16"]
    m3 = meta("Conv", [(f32, (1, 3, 4, 4, 4)), (f32, (4, 3, 3, 3, 3))])
    assert not k.supports(m3) and "1-D and 2-D" in k.supports(m3).reason
    assert not k.supports(meta("Conv", [(f32, (1, 3, 8, 8)), (f32, (4, 2, 3, 3))]))
    assert not k.supports(meta("Conv", [(np.float64, (1, 3, 8, 8)), (np.float64, (4, 3, 3, 3))]))
    with pytest.raises(NodeError, match="rank 3 or 4"):
        conv.conv_geometry(m3, (1, 3, 4, 4, 4), (4, 3, 3, 3, 3), f32)


# ---------------------------------------------------------------- GPU

needs_nvmath = pytest.mark.skipif(not blas.is_available(),
                                  reason="nvmath-python (cuBLASLt bindings) is not installed")


@pytest.mark.cuda
@needs_nvmath
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("bias", [True, False])
def test_conv_matches_reference(cuda_device, dtype, case, bias):
    x, w, attrs = CASES[case]
    dt = DTYPES[dtype]
    feeds = {"x": random(x, dt, 1), "w": random(w, dt, 2)}
    if bias:
        feeds["b"] = random((w[0],), dt, 3)
    got, ref = run_both(one_node_model("Conv", feeds, attrs), feeds)
    assert_parity(got, ref, blas.GEMM_PARITY[dtype], f"Conv {x} {w} {attrs} {dtype}")


@pytest.mark.cuda
@needs_nvmath
def test_conv_workspace_requirement_is_what_execution_uses(cuda_device, monkeypatch):
    """Through a Session: every GEMM gets the planned workspace's GEMM part, exactly."""
    x, w, attrs = CASES[1]
    feeds = {"x": random(x, np.float32, 1), "w": random(w, np.float32, 2)}
    m = meta("Conv", [(np.float32, x), (np.float32, w)], attrs)
    g = conv.conv_geometry(m, x, w, np.float32)
    layout = conv.conv_workspace(g, blas.workspace_bytes(g.problem))
    assert conv.Conv().workspace_requirement(m).nbytes == layout.nbytes
    sizes = []
    lt = blas.lt()
    real = lt.matmul

    def spy(*args):
        sizes.append(args[14])
        return real(*args)

    monkeypatch.setattr(lt, "matmul", spy)
    got, ref = run_both(one_node_model("Conv", feeds, attrs), feeds)
    assert sizes == [layout.gemm_nbytes] * g.n
    assert_parity(got, ref, blas.GEMM_PARITY["float32"], "Conv")


# ---------------------------------------------------------------- ConvTranspose

CT_CASES = [
    ((1, 2, 5, 4), (2, 3, 3, 3), {}),
    ((1, 2, 5, 4), (2, 2, 3, 2), {"group": 2, "strides": [2, 3], "pads": [1, 0, 2, 1]}),
    ((2, 1, 6), (1, 2, 3), {"strides": [2], "output_padding": [1], "dilations": [2]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"output_shape": [10, 8], "strides": [3, 2]}),
    ((1, 1, 3, 4, 2), (1, 2, 2, 3, 2), {"strides": [1, 2, 1]}),
]


def simulate_transpose(g: conv.ConvTransposeGeometry, x: np.ndarray, w: np.ndarray,
                       b: np.ndarray | None) -> np.ndarray:
    """conv.cu's conv_transpose replayed in numpy (float64, rounded once)."""
    import itertools

    (i0, o0, k0, s0, d0, b0), (i1, o1, k1, s1, d1, b1), (i2, o2, k2, s2, d2, b2) = g.axes
    n, c, m, groups = g.n, g.c, g.m, g.groups
    xs = x.astype(np.float64).reshape(n, c, i0, i1, i2)
    ws = w.astype(np.float64).reshape(c, m // groups, k0, k1, k2)
    y = np.zeros((n, m, o0, o1, o2))
    cg, mg = c // groups, m // groups
    for nn, mo, q0, q1, q2 in itertools.product(range(n), range(m), range(o0), range(o1),
                                                range(o2)):
        grp, mm = divmod(mo, mg)
        acc = 0.0
        for ch in range(grp * cg, (grp + 1) * cg):
            for t in itertools.product(range(k0), range(k1), range(k2)):
                pos = [q0 + b0 - t[0] * d0, q1 + b1 - t[1] * d1, q2 + b2 - t[2] * d2]
                if any(p < 0 or p % s for p, s in zip(pos, (s0, s1, s2))):
                    continue
                ii = [p // s for p, s in zip(pos, (s0, s1, s2))]
                if any(v >= lim for v, lim in zip(ii, (i0, i1, i2))):
                    continue
                acc += xs[nn, ch, ii[0], ii[1], ii[2]] * ws[ch, mm, t[0], t[1], t[2]]
        if b is not None:
            acc += float(b[mo])
        y[nn, mo, q0, q1, q2] = acc
    return y.reshape(g.out_shape).astype(x.dtype)


@pytest.mark.parametrize("x,w,attrs", CT_CASES)
def test_conv_transpose_geometry_and_loop_reproduce_the_reference(x, w, attrs):
    from onnx_ep.providers.cpu_reference.conv import ConvTranspose as RefConvTranspose

    m = meta("ConvTranspose", [(np.float32, x), (np.float32, w)], attrs)
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal(x).astype(np.float32), rng.standard_normal(w).astype(np.float32)
    g = conv.conv_transpose_geometry(m, x, w)
    b = rng.standard_normal(g.m).astype(np.float32)
    want = RefConvTranspose("ConvTranspose").run(ExecutionContext(m), xa, wa, b)
    np.testing.assert_allclose(simulate_transpose(g, xa, wa, b), want, rtol=1e-6, atol=1e-7)
    k = conv.ConvTranspose()
    assert k.supports(m)
    assert k.infer_outputs(m)[0].shape == want.shape


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", range(len(CT_CASES)))
def test_conv_transpose_matches_reference(cuda_device, dtype, case):
    x, w, attrs = CT_CASES[case]
    dt = DTYPES[dtype]
    xa, wa = random(x, dt, 1), random(w, dt, 2)
    m_out = conv.conv_transpose_geometry(
        meta("ConvTranspose", [(np.float32, x), (np.float32, w)], attrs), x, w).m
    for feeds in ({"x": xa, "w": wa}, {"x": xa, "w": wa, "b": random((m_out,), dt, 3)}):
        got, ref = run_both(one_node_model("ConvTranspose", feeds, attrs), feeds)
        assert_parity(got, ref, conv.CONV_TRANSPOSE_PARITY[dtype],
                      f"ConvTranspose {x} {w} {attrs} {dtype}")
