"""Host-side logic of the CUDA com.microsoft::SkipLayerNormalization kernel
(contrib_attention.SkipLayerNorm, launching normalization.cu's skip_layer_norm_*; no GPU):
supports() decisions, shape inference, the promise, the launch a node makes, every symbol
the host can pick instantiated in normalization.cu, and the float64 recipe of
skip_layer_norm replayed in numpy against cpu_reference."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import CaptureSupport, NodeMeta, TensorSpec
from onnx_ep.errors import NodeError
from onnx_ep.providers.cuda.kernels import contrib_attention as ca
from onnx_ep.providers.cuda.kernels import normalization as norm
from onnx_ep.providers.cuda.kernels.base import F32, I64, PTR, suffix
from onnx_ep.providers.cuda.kernels.softmax import NORM_PARITY
from onnx_ep.testing.ulp import judge
from tests.helpers.host_tensor import HostTensor, recorded_launches, specs_of

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, FLOAT32 = np.dtype(np.float16), np.dtype(np.float32)
OP = "SkipLayerNormalization"
(K,) = [k for k in ca.KERNELS if k.key.op_type == OP]


def _meta(inputs, n_out=1, names=None, **attrs):
    return NodeMeta(name="n", op_type=OP, domain="com.microsoft", opset=1, attrs=attrs,
                    inputs=tuple(inputs),
                    input_names=tuple(names if names is not None else
                                      ["" if t is None else f"i{i}" for i, t in enumerate(inputs)]),
                    output_names=tuple(f"y{i}" for i in range(n_out)))


def _spec(*shape, dtype=F16):
    return TensorSpec(dtype, shape)


def test_key_capture_and_promise():
    from onnx_ep.testing import audit_capture

    assert isinstance(K, ca.SkipLayerNorm) and K.source == "normalization"
    assert not [k for k in norm.KERNELS if k.key.op_type == OP]
    assert K.key.domain == "com.microsoft" and K.key.since == 1
    assert K.capture_support() == CaptureSupport.SUPPORTED
    assert not audit_capture([K])
    assert K.bind(_meta([_spec(4, 8, dtype=FLOAT32)])).parity == NORM_PARITY
    assert K.bind(_meta([_spec(4, 8)])).parity.rtol == 2.0 ** -10
    assert K.bind(_meta([_spec(4, 8, dtype=BF16)])).parity.rtol == 2.0 ** -7


def test_every_symbol_the_host_can_pick_is_instantiated():
    src = (Path(norm.__file__).parent / "normalization.cu").read_text()
    built = {f"skip_layer_norm_v{v}_{s}" for _, s, v in
             re.findall(r"^EP_SKIP_LAYER_NORM\((\w+), (\w+), (\d+)\)", src, re.M)}
    for dtype in norm.RMS_FLOATS:
        for v in (1, 16 // dtype.itemsize):
            assert f"skip_layer_norm_v{v}_{suffix(dtype)}" in built


@pytest.mark.parametrize("dtype", [FLOAT32, F16, BF16])
def test_supports_every_optional_combination(dtype):
    x, s, h = _spec(2, 3, 64, dtype=dtype), _spec(3, 64, dtype=dtype), _spec(64, dtype=dtype)
    assert K.supports(_meta([x, s, h]))
    assert K.supports(_meta([x, s, h, h]))
    assert K.supports(_meta([x, s, h, h, h]))
    assert K.supports(_meta([x, s, h, None, h]))
    assert K.supports(_meta([TensorSpec(dtype, ("b", "s", 64)), TensorSpec(dtype, ("b", "s", 64)),
                             h]))


@pytest.mark.parametrize("inputs,why", [
    ([_spec(2, 8, dtype=np.float64)] * 2 + [_spec(8, dtype=np.float64)], "float64"),
    ([_spec(2, 8), _spec(2, 8)], "needs at least 3 inputs"),
    ([_spec(2, 3, 16), _spec(2, 1, 16), _spec(16)], "skip of shape"),
    ([_spec(2, 3, 16), _spec(16), _spec(16)], "skip of shape"),
    ([_spec(2, 3, 16), _spec(2, 3, 16), _spec(1, 16)], "gamma must have"),
    ([_spec(2, 3, 16), _spec(2, 3, 16), _spec(16), _spec(8)], "beta must have"),
    ([_spec(2, 3, 16), _spec(2, 3, 16), _spec(16), None, _spec(8)], "bias must have"),
    ([_spec(2, 3, 16), _spec(2, 3, 16), _spec(16), _spec(16, dtype=BF16)], "mixed types"),
    ([_spec(dtype=F16), _spec(dtype=F16), _spec(1)], "out of range"),
])
def test_declines_with_a_reason(inputs, why):
    s = K.supports(_meta(inputs))
    assert not s and why in s.reason, s.reason


def test_infer_outputs():
    x = _spec(2, 3, 8)
    row = TensorSpec(np.float32, (2, 3, 1))
    assert K.infer_outputs(_meta([x, x, _spec(8)], 4)) == [x, row, row, x]
    assert K.infer_outputs(_meta([x, x, _spec(8)], 1)) == [x]




def _run(inputs, outputs, monkeypatch, **attrs):
    meta = _meta(specs_of(inputs), len(outputs), **attrs)
    return [c[:4] for c in recorded_launches(K, meta, inputs, outputs, monkeypatch)]


def test_launch_with_beta_bias_and_broadcast_skip(monkeypatch):
    x, skip = HostTensor((2, 3, 896), F16, 4096), HostTensor((3, 896), F16, 1 << 16)
    gamma, beta, bias = (HostTensor((896,), F16, 1 << 17), HostTensor((896,), F16, 1 << 18),
                         HostTensor((896,), F16, 1 << 19))
    y, mean, inv, total = (HostTensor((2, 3, 896), F16, 1 << 20),
                           HostTensor((2, 3, 1), np.float32, 1 << 21),
                           HostTensor((2, 3, 1), np.float32, 1 << 22),
                           HostTensor((2, 3, 896), F16, 1 << 23))
    (call,) = _run([x, skip, gamma, beta, bias], [y, mean, inv, total], monkeypatch,
                   epsilon=1e-5)
    fn, grid, block, args = call
    assert fn == "skip_layer_norm_v8_f16" and grid == (6, 1, 1) and block == (128, 1, 1)
    assert [a for a, t in args if t is PTR] == [x.ptr, skip.ptr, bias.ptr, gamma.ptr, beta.ptr,
                                                y.ptr, total.ptr, mean.ptr, inv.ptr]
    assert [a for a, t in args if t is I64] == [6, 896, 3]
    assert args[-1][1] is F32 and args[-1][0] == pytest.approx(1e-5)


def test_missing_optionals_pass_null_and_unaligned_rows_take_one_element_loads(monkeypatch):
    x, skip, gamma = (HostTensor((4, 1001), FLOAT32, 4096), HostTensor((4, 1001), FLOAT32, 1 << 16),
                      HostTensor((1001,), FLOAT32, 1 << 17))
    y = HostTensor((4, 1001), FLOAT32, 1 << 20)
    (call,) = _run([x, skip, gamma], [y], monkeypatch)
    fn, grid, block, args = call
    assert fn == "skip_layer_norm_v1_f32" and block == (256, 1, 1)
    assert [a for a, t in args if t is PTR] == [x.ptr, skip.ptr, 0, gamma.ptr, 0, y.ptr, 0, 0, 0]
    assert args[-1][0] == pytest.approx(1e-12)


def test_shapes_that_change_after_placement_raise_node_error(monkeypatch):
    x, skip, gamma = (HostTensor((2, 3, 16), F16, 4096), HostTensor((2, 1, 16), F16, 8192),
                      HostTensor((16,), F16, 16384))
    with pytest.raises(NodeError, match="skip of shape"):
        _run([x, skip, gamma], [HostTensor((2, 3, 16), F16, 32768)], monkeypatch)


def test_no_rows_no_launch(monkeypatch):
    x, g = HostTensor((0, 8), FLOAT32, 4096), HostTensor((8,), FLOAT32, 8192)
    assert _run([x, x, g], [HostTensor((0, 8), FLOAT32, 16384)], monkeypatch) == []


def _recipe(x, skip, gamma, beta, bias, eps, block, v):
    """skip_layer_norm's arithmetic in numpy float64: s = (x + skip) + bias; per-thread sums
    over its packs, block_reduce's tree; the same for (s - mean)^2; y = (s - mean) * inv *
    gamma (+ beta) rounded once."""
    f = np.float64
    rows, cols = x.shape
    s = x.astype(f) + np.tile(skip.astype(f), (rows // skip.shape[0], 1))
    if bias is not None:
        s = s + bias.astype(f)

    def reduce(vals):
        nv = cols // v
        iters = -(-nv // block)
        packs = np.zeros((rows, iters * block, v), f)
        packs[:, :nv] = vals.reshape(rows, nv, v)
        packs = packs.reshape(rows, iters, block, v)
        acc = np.zeros((rows, block), f)
        for i in range(iters):
            for k in range(v):
                acc = acc + packs[:, i, :, k]
        width = block
        while width > 1:
            width //= 2
            acc = acc[:, :width] + acc[:, width:2 * width]
        return acc[:, :1]

    mean = reduce(s) / cols
    inv = 1.0 / np.sqrt(reduce((s - mean) ** 2) / cols + f(np.float32(eps)))
    y = (s - mean) * inv * gamma.astype(f)
    if beta is not None:
        y = y + beta.astype(f)
    return (y.astype(np.float32).astype(x.dtype) if x.dtype == BF16 else y.astype(x.dtype),
            mean.astype(np.float32), inv.astype(np.float32), s.astype(x.dtype))


@pytest.mark.parametrize("dtype", [FLOAT32, F16, BF16], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rows,hidden", [(1, 896), (9, 896), (3, 1001)])
@pytest.mark.parametrize("optional", ["none", "beta", "beta+bias"])
def test_float64_recipe_keeps_the_declared_promise(dtype, rows, hidden, optional):
    from onnx_ep import Session
    from tests.helpers.oracle import node_model

    rng = np.random.default_rng(rows * hidden)

    def draw(*shape):
        return (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32).astype(dtype)

    feeds = {"x": draw(rows, hidden), "skip": draw(rows, hidden), "gamma": draw(hidden)}
    if "beta" in optional:
        feeds["beta"] = draw(hidden)
    if "bias" in optional:
        feeds["bias"] = draw(hidden)
    model = node_model(OP, feeds, 4, domain="com.microsoft", epsilon=1e-5)
    ref = Session(model, providers=["cpu_reference"]).run(None, feeds)
    v = norm.rms_vector_width(dtype.itemsize, hidden, hidden, (0,))
    got = _recipe(feeds["x"], feeds["skip"], feeds["gamma"], feeds.get("beta"),
                  feeds.get("bias"), 1e-5, norm.block_for(hidden // v), v)
    promise = K.parity_for(dtype)
    for name, g, r in zip(("output", "mean", "inv_std_var", "input_skip_bias_sum"), got, ref):
        d = judge(g, np.asarray(r), promise)
        assert d.kept, f"{name}: {d.reason} (max ulp {d.max_ulp}, max abs {d.max_abs})"
