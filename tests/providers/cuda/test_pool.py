"""Pooling: geometry and pool.cu's arithmetic replayed on the CPU, parity on the GPU."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference import pool as ref_pool
from onnx_ep.providers.cuda.kernels import pool
from tests.helpers.cuda_dense import DTYPES, assert_parity, meta, one_node_model, random, run_both

CASES = [
    # x shape, attrs
    ((2, 3, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 10, 7), {"kernel_shape": [3, 2], "strides": [2, 3], "ceil_mode": 1,
                     "pads": [0, 1, 1, 0]}),
    ((2, 2, 8, 8), {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 11, 11), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((2, 3, 17), {"kernel_shape": [4], "strides": [3], "pads": [1, 0], "ceil_mode": 1}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2],
                       "pads": [1, 1, 0, 0, 1, 1]}),
]

#: ceil_mode's last window would start in the end padding: the op drops it (output 6),
#: onnx's shape inference does not (7); cuda declines, cpu_reference runs the node
DROPPED_WINDOW = ((2, 3, 17), {"kernel_shape": [4], "strides": [3], "pads": [1, 2],
                               "ceil_mode": 1})


def simulate(x: np.ndarray, m, mode: int) -> np.ndarray:
    """pool.cu's window_pool, replayed in numpy in the kernel's order and types."""
    g = pool.pool_geometry(m, x.shape)
    xs = x.astype(np.float32).reshape((g.planes,) + g.inputs)
    grids = np.meshgrid(*[np.arange(o) for o in g.outputs], indexing="ij")
    start = [grids[a] * g.strides[a] - g.pads_begin[a] for a in range(3)]
    if mode == pool.MODE_MAX:
        best = np.full((g.planes,) + g.outputs, -np.inf, np.float32)
    else:
        count = np.ones(g.outputs, np.int64)
        for a in range(3):
            lo = -g.pads_begin[a] if mode == pool.MODE_AVERAGE_WITH_PADS else 0
            hi = g.inputs[a] + (g.pads_end[a] if mode == pool.MODE_AVERAGE_WITH_PADS else 0)
            n = sum(((start[a] + t * g.dilations[a] >= lo) & (start[a] + t * g.dilations[a] < hi))
                    .astype(np.int64) for t in range(g.kernel[a]))
            count = count * n
    acc = None
    for tap in itertools.product(*[range(k) for k in g.kernel]):
        pos = [start[a] + tap[a] * g.dilations[a] for a in range(3)]
        inside = np.ones(g.outputs, bool)
        for a in range(3):
            inside &= (pos[a] >= 0) & (pos[a] < g.inputs[a])
        idx = tuple(np.clip(pos[a], 0, g.inputs[a] - 1) for a in range(3))
        v = xs[(slice(None),) + idx]
        if mode == pool.MODE_MAX:
            v = np.where(inside, v, -np.inf).astype(np.float32)
            take = ~np.isnan(best) & (np.isnan(v) | (v > best))
            best = np.where(take, v, best)
        else:
            v = np.where(inside, v, np.float32(0)).astype(np.float32)
            acc = v.copy() if acc is None else acc + v
    out = best if mode == pool.MODE_MAX else acc / count.astype(np.float32)
    return out.reshape(g.out_shape).astype(x.dtype)


# ---------------------------------------------------------------- CPU

@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", range(len(CASES) + 1))
@pytest.mark.parametrize("op,mode", [("MaxPool", pool.MODE_MAX),
                                     ("AveragePool", pool.MODE_AVERAGE),
                                     ("AveragePool", pool.MODE_AVERAGE_WITH_PADS)])
def test_kernel_arithmetic_is_bit_identical_to_the_reference(dtype, case, op, mode):
    """Why MaxPool and AveragePool promise exact: the same taps, order and float32 ops."""
    shape, attrs = (CASES + [DROPPED_WINDOW])[case]
    attrs = dict(attrs, count_include_pad=int(mode == pool.MODE_AVERAGE_WITH_PADS))
    x = random(shape, DTYPES[dtype], 7)
    m = meta(op, [(x.dtype, x.shape)], attrs)
    ref_kernel = ref_pool.MaxPool("MaxPool") if op == "MaxPool" else \
        ref_pool.AveragePool("AveragePool")
    ref = ref_kernel.run(ExecutionContext(m), x)
    got = simulate(x, m, mode)
    assert pool.pool_geometry(m, shape).out_shape == ref.shape
    assert_parity(got, ref, Parity.EXACT, f"{op} {attrs} {dtype}")


def test_geometry_pads_low_rank_inputs_with_unit_axes():
    m = meta("MaxPool", [], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]})
    g = pool.pool_geometry(m, (2, 3, 10))
    assert g.planes == 6 and g.inputs == (1, 1, 10) and g.outputs == (1, 1, 5)
    assert g.kernel == (1, 1, 3) and g.pads_begin == (0, 0, 1) and g.pads_end == (0, 0, 1)
    assert len(g.launch_args()) == 21 and g.out_shape == (2, 3, 5)


def test_supports_decisions():
    f32 = np.float32
    mp = pool.MaxPool()
    assert mp.supports(meta("MaxPool", [(f32, (1, 2, 4, 4))], {"kernel_shape": [2, 2]}))
    with_indices = meta("MaxPool", [(f32, (1, 2, 4, 4))], {"kernel_shape": [2, 2]},
                        outputs=("y", "i"))
    assert not mp.supports(with_indices) and "Indices" in mp.supports(with_indices).reason
    assert mp.supports(meta("MaxPool", [(f32, (1, 2, 4, 4))], {"kernel_shape": [2, 2]},
                            outputs=("y", "")))
    assert not mp.supports(meta("MaxPool", [(f32, (1, 2, 4, 4))]))          # no kernel_shape
    assert not mp.supports(meta("MaxPool", [(np.int8, (1, 2, 4, 4))], {"kernel_shape": [2, 2]}))
    assert not mp.supports(meta("MaxPool", [(f32, (1, 2, 2, 2, 2, 2))],
                                {"kernel_shape": [1, 1, 1, 1]}))
    gp = pool.GlobalPool("GlobalAveragePool", pool.MODE_AVERAGE)
    assert gp.supports(meta("GlobalAveragePool", [(f32, (2, 3, 4, 5))]))
    assert not gp.supports(meta("GlobalAveragePool", [(f32, (2, 3))]))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_declines_where_onnx_shape_inference_keeps_a_dropped_ceil_mode_window(op):
    """The plan pre-sizes Y from onnx's inference (one window more than the op): declined."""
    from onnx_ep.core.graph import build_graph
    from onnx_ep.core.placement import node_meta

    kernel = pool.MaxPool() if op == "MaxPool" else pool.AveragePool()
    shape, attrs = DROPPED_WINDOW
    feeds = {"x": random(shape, np.float32, 1)}
    graph = build_graph(one_node_model(op, feeds, attrs))
    m = node_meta(graph.nodes[0], graph)
    assert m.outputs[0].shape == (2, 3, 7)                 # onnx's shape inference
    assert pool.pool_geometry(m, shape).out_shape == (2, 3, 6)
    verdict = kernel.supports(m)
    assert not verdict and "ceil_mode" in verdict.reason
    ok = dict(attrs, pads=[1, 0])                          # rounds up, drops nothing: runs
    g = build_graph(one_node_model(op, feeds, ok))
    assert kernel.supports(node_meta(g.nodes[0], g))
    # dynamic spatial size: declined only where some size can drop a window (e + s > k)
    assert not kernel.supports(meta(op, [(np.float32, (2, 3, "L"))], attrs))
    assert kernel.supports(meta(op, [(np.float32, (2, 3, "L"))],
                                dict(attrs, kernel_shape=[5], pads=[1, 1])))
    assert kernel.supports(meta(op, [(np.float32, (2, 3, "L"))], dict(attrs, ceil_mode=0)))


def test_infer_outputs_and_parities():
    ap = pool.AveragePool()
    m = meta("AveragePool", [(np.float16, (1, 2, 7, 7))], {"kernel_shape": [3, 3],
                                                           "ceil_mode": 1, "strides": [2, 2]})
    assert ap.infer_outputs(m)[0].shape == (1, 2, 3, 3)
    assert ap.bind(m).parity == Parity.EXACT
    gp = pool.GlobalPool("GlobalAveragePool", pool.MODE_AVERAGE)
    gm = meta("GlobalAveragePool", [(np.float16, (2, 3, 4, 5))])
    assert gp.infer_outputs(gm)[0].shape == (2, 3, 1, 1)
    assert gp.bind(gm).parity == pool.GLOBAL_AVERAGE_PARITY["float16"]
    assert pool.GlobalPool("GlobalMaxPool", pool.MODE_MAX).bind(gm).parity == Parity.EXACT


# ---------------------------------------------------------------- GPU

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("op,include_pad", [("MaxPool", 0), ("AveragePool", 0),
                                            ("AveragePool", 1)])
def test_window_pool_matches_reference_exactly(cuda_device, dtype, case, op, include_pad):
    shape, attrs = CASES[case]
    if op == "AveragePool":
        attrs = dict(attrs, count_include_pad=include_pad)
    feeds = {"x": random(shape, DTYPES[dtype], 5)}
    got, ref = run_both(one_node_model(op, feeds, attrs), feeds)
    assert_parity(got, ref, Parity.EXACT, f"{op} {attrs} {dtype}")


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_dropped_ceil_mode_window_falls_back_to_the_reference(cuda_device, op):
    from onnx_ep import Session
    from onnx_ep.errors import NoKernelError

    shape, attrs = DROPPED_WINDOW
    feeds = {"x": random(shape, np.float32, 5)}
    model = one_node_model(op, feeds, attrs)
    from onnx_ep import SessionOptions

    with pytest.raises(NoKernelError, match="ceil_mode"):
        Session(model, providers=["cuda"],
                options=SessionOptions(disable_fallback=True)).run(None, feeds)
    got = np.asarray(Session(model, providers=["cuda"]).run(None, feeds)[0])   # falls back
    ref = np.asarray(Session(model, providers=["cpu_reference"]).run(None, feeds)[0])
    assert_parity(got, ref, Parity.EXACT, f"{op} {attrs}")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (1, 4, 33), (1, 2, 3, 40, 50)])
def test_global_pools_match_reference(cuda_device, dtype, shape):
    feeds = {"x": random(shape, DTYPES[dtype], 9)}
    got, ref = run_both(one_node_model("GlobalMaxPool", feeds), feeds)
    assert_parity(got, ref, Parity.EXACT, f"GlobalMaxPool {shape} {dtype}")
    got, ref = run_both(one_node_model("GlobalAveragePool", feeds), feeds)
    assert_parity(got, ref, pool.GLOBAL_AVERAGE_PARITY[dtype], f"GlobalAveragePool {dtype}")


@pytest.mark.cuda
def test_max_pool_propagates_nan_like_the_reference(cuda_device):
    x = random((1, 1, 4, 4), np.float32, 3)
    x[0, 0, 1, 2] = np.nan
    feeds = {"x": x}
    got, ref = run_both(one_node_model("MaxPool", feeds, {"kernel_shape": [2, 2]}), feeds)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(got[~np.isnan(got)], ref[~np.isnan(ref)])


def test_lp_pool_promise_depends_on_p():
    x = meta("LpPool", [(np.float32, (1, 1, 4, 4))], {"kernel_shape": [2, 2]})
    assert pool.LpPool().bind(x).parity == Parity.EXACT
    x3 = meta("LpPool", [(np.float16, (1, 1, 4, 4))], {"kernel_shape": [2, 2], "p": 3})
    assert pool.LpPool().bind(x3).parity == Parity.ulp(1)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", [0, 2, 3, 5])
@pytest.mark.parametrize("p", [2, 1, 3])
def test_lp_pool_matches_reference(cuda_device, dtype, case, p):
    shape, attrs = CASES[case]
    attrs = dict(attrs, p=p)
    feeds = {"x": random(shape, DTYPES[dtype], 7)}
    got, ref = run_both(one_node_model("LpPool", feeds, attrs, opset=18), feeds)
    assert_parity(got, ref, Parity.EXACT if p in (1, 2) else Parity.ulp(1),
                  f"LpPool {attrs} {dtype}")
