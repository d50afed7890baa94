"""Host-side logic of the CUDA SimplifiedLayerNormalization and
com.microsoft::SkipSimplifiedLayerNormalization kernels (no GPU): skip and scale geometry,
vector widths, supports(), shape inference, promises, the launch each node makes, and the
float32 recipe of normalization.cu's rms_norm replayed in numpy against cpu_reference."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import CaptureSupport, NodeMeta, TensorSpec
from onnx_ep.errors import NodeError
from onnx_ep.providers.cuda.kernels import normalization as norm
from onnx_ep.providers.cuda.kernels.base import F32, PTR, suffix
from onnx_ep.providers.cuda.kernels.softmax import NORM_PARITY
from onnx_ep.testing.ulp import judge
from tests.helpers.host_tensor import HostTensor, recorded_launches, specs_of

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)
SIMPLIFIED = "SimplifiedLayerNormalization"
SKIP = "SkipSimplifiedLayerNormalization"
K = {k.key.op_type: k for k in norm.KERNELS if isinstance(k, norm.RmsNorm)}


def _meta(op, inputs, n_out=1, names=None, **attrs):
    domain = "com.microsoft" if op == SKIP else ""
    return NodeMeta(name="n", op_type=op, domain=domain, opset=1 if domain else 17,
                    attrs=attrs, inputs=tuple(inputs),
                    input_names=tuple(names or [f"i{i}" for i in range(len(inputs))]),
                    output_names=tuple(f"y{i}" for i in range(n_out)))


def _spec(*shape, dtype=F16):
    return TensorSpec(dtype, shape)


# ---------------------------------------------------------------- registration and promises

def test_keys_domains_and_capture():
    assert K[SIMPLIFIED].key.domain == "" and K[SIMPLIFIED].key.since == 1
    assert K[SKIP].key.domain == "com.microsoft" and K[SKIP].key.since == 1
    for k in K.values():
        assert k.capture_support() == CaptureSupport.SUPPORTED


def test_capture_supported_kernels_keep_their_promise():
    from onnx_ep.testing import audit_capture

    found = audit_capture(list(K.values()))
    assert not found, "\n".join(map(str, found))


@pytest.mark.parametrize("op", [SIMPLIFIED, SKIP])
def test_parity_per_dtype(op):
    k = K[op]
    assert k.parity == NORM_PARITY
    assert k.bind(_meta(op, [_spec(4, 8, dtype=FLOAT32)])).parity == NORM_PARITY
    assert k.bind(_meta(op, [_spec(4, 8)])).parity.rtol == 2.0 ** -10
    assert k.bind(_meta(op, [_spec(4, 8, dtype=BF16)])).parity.rtol == 2.0 ** -7


def test_every_symbol_the_host_can_pick_is_instantiated():
    src = (Path(norm.__file__).parent / "normalization.cu").read_text()
    built = {f"rms_norm_v{v}_{s}"
             for _, s, v in re.findall(r"^EP_RMS_NORM\((\w+), (\w+), (\d+)\)", src, re.M)}
    for dtype in norm.RMS_FLOATS:
        for v in (1, 16 // dtype.itemsize):
            assert f"rms_norm_v{v}_{suffix(dtype)}" in built


# ---------------------------------------------------------------- geometry

def test_scale_period_is_the_suffix_of_the_normalized_shape():
    assert norm.scale_period((896,), (3, 896), 1) == 896
    assert norm.scale_period((3, 8), (2, 3, 8), 1) == 24
    assert norm.scale_period((8,), (2, 3, 8), 1) == 8
    assert norm.scale_period((1, 1, 8), (2, 3, 8), 1) == 8
    assert norm.scale_period((1,), (2, 3, 8), 2) == 1
    assert norm.scale_period((3, 1), (2, 3, 8), 1) is None     # broadcasts inside the row
    assert norm.scale_period((2, 3, 8), (2, 3, 8), 2) is None  # varies across rows
    assert norm.scale_period((4,), (2, 3, 8), 2) is None


def test_skip_rows_follow_onnxruntimes_shapes():
    assert norm.skip_rows((2, 3, 16), (2, 3, 16)) == 6
    assert norm.skip_rows((1, 3, 16), (2, 3, 16)) == 3
    assert norm.skip_rows((3, 16), (2, 3, 16)) == 3
    assert norm.skip_rows((5, 16), (5, 16)) == 5
    assert norm.skip_rows((16,), (16,)) == 1
    assert norm.skip_rows((2, 1, 16), (2, 3, 16)) is None
    assert norm.skip_rows((16,), (2, 3, 16)) is None
    assert norm.skip_rows((1, 16), (5, 16)) is None
    assert norm.skip_rows((1, 2, 3, 16), (2, 3, 16)) is None


def test_vector_width_needs_rows_scale_period_and_pointers_aligned():
    assert norm.rms_vector_width(2, 896, 896, (0, 256, 512)) == 8
    assert norm.rms_vector_width(4, 896, 896, (0, 256)) == 4
    assert norm.rms_vector_width(2, 60, 20, (0, 256)) == 1      # 60 % 8
    assert norm.rms_vector_width(4, 60, 20, (0, 256)) == 4
    assert norm.rms_vector_width(4, 24, 1, (0, 256)) == 1       # a scalar scale
    assert norm.rms_vector_width(2, 896, 896, (0, 258)) == 1


# ---------------------------------------------------------------- supports / infer_outputs

@pytest.mark.parametrize("dtype", [FLOAT32, F16, BF16])
def test_supports_float32_float16_bfloat16(dtype):
    assert K[SIMPLIFIED].supports(_meta(SIMPLIFIED, [_spec(2, 896, dtype=dtype),
                                                     _spec(896, dtype=dtype)]))
    skip = [_spec(2, 3, 896, dtype=dtype), _spec(3, 896, dtype=dtype), _spec(896, dtype=dtype)]
    assert K[SKIP].supports(_meta(SKIP, skip))
    assert K[SKIP].supports(_meta(SKIP, skip + [_spec(896, dtype=dtype)]))


def test_supports_symbolic_dims():
    x = TensorSpec(F16, ("batch", "seq", 896))
    assert K[SIMPLIFIED].supports(_meta(SIMPLIFIED, [x, _spec(896)]))
    assert K[SKIP].supports(_meta(SKIP, [x, x, _spec(896)]))


@pytest.mark.parametrize("op,inputs,attrs,why", [
    (SIMPLIFIED, [_spec(2, 8, dtype=np.float64), _spec(8, dtype=np.float64)], {}, "float64"),
    (SIMPLIFIED, [_spec(2, 8, dtype=FLOAT32), _spec(8)], {}, "mixed types"),
    (SIMPLIFIED, [_spec(2, 8), _spec(8)], {"stash_type": 11}, "stash_type"),
    (SIMPLIFIED, [_spec(2, 8), _spec(8)], {"axis": 2}, "out of range"),
    (SIMPLIFIED, [_spec(2, 3, 8), _spec(3, 1)], {"axis": 1}, "not a suffix"),
    (SIMPLIFIED, [_spec(2, 3, 8), _spec(2, 3, 8)], {}, "not a suffix"),
    (SKIP, [_spec(2, 3, 16), _spec(2, 1, 16), _spec(16)], {}, "skip of shape"),
    (SKIP, [_spec(2, 3, 16), _spec(2, 3, 16), _spec(1, 16)], {}, "gamma must have"),
    (SKIP, [_spec(2, 3, 16), _spec(2, 3, 16), _spec(16), _spec(8)], {}, "bias must have"),
    (SKIP, [_spec(2, 3, 16), _spec(2, 3, 16), _spec(16, dtype=BF16)], {}, "mixed types"),
    (SKIP, [_spec(dtype=F16), _spec(dtype=F16), _spec(1)], {}, "out of range"),
    (SKIP, [_spec(2, 16), _spec(2, 16)], {}, "needs at least 3 inputs"),
])
def test_supports_declines_with_a_reason(op, inputs, attrs, why):
    s = K[op].supports(_meta(op, inputs, **attrs))
    assert not s and why in s.reason


def test_supports_skips_a_missing_bias():
    inputs = [_spec(2, 3, 16), _spec(2, 3, 16), _spec(16), None]
    assert K[SKIP].supports(_meta(SKIP, inputs, names=["x", "s", "g", ""]))


def test_infer_outputs():
    x = _spec(2, 3, 8)
    stat = TensorSpec(np.float32, (2, 1, 1))
    assert K[SIMPLIFIED].infer_outputs(_meta(SIMPLIFIED, [x, _spec(3, 8)], 2, axis=1)) == \
        [x, stat]
    assert K[SIMPLIFIED].infer_outputs(_meta(SIMPLIFIED, [x, _spec(8)])) == [x]
    row = TensorSpec(np.float32, (2, 3, 1))
    assert K[SKIP].infer_outputs(_meta(SKIP, [x, x, _spec(8)], 4)) == [x, row, row, x]


# ---------------------------------------------------------------- the launch



def _run(op, inputs, outputs, monkeypatch, **attrs):
    """Execute the bound kernel with launches recorded instead of made."""
    meta = _meta(op, specs_of(inputs), len(outputs), **attrs)
    return [c[:4] for c in recorded_launches(K[op], meta, inputs, outputs, monkeypatch)]


def test_simplified_launches_once_with_16_byte_packs(monkeypatch):
    x, s = HostTensor((7, 896), F16, 4096), HostTensor((896,), F16, 65536)
    y, inv = HostTensor((7, 896), F16, 1 << 20), HostTensor((7, 1), np.float32, 1 << 21)
    (call,) = _run(SIMPLIFIED, [x, s], [y, inv], monkeypatch, epsilon=1e-6)
    fn, grid, block, args = call
    assert fn == "rms_norm_v8_f16" and grid == (7, 1, 1) and block == (128, 1, 1)
    ptrs = [a for a, t in args if t is PTR]
    assert ptrs == [x.ptr, 0, 0, s.ptr, y.ptr, 0, 0, inv.ptr]
    assert [a for a, _ in args[8:12]] == [7, 896, 1, 896]
    assert args[12][1] is F32 and args[12][0] == pytest.approx(1e-6)


def test_simplified_along_an_inner_axis_repeats_the_scale(monkeypatch):
    x, s, y = (HostTensor((2, 3, 20), FLOAT32, 4096), HostTensor((20,), FLOAT32, 8192),
               HostTensor((2, 3, 20), FLOAT32, 16384))
    (call,) = _run(SIMPLIFIED, [x, s], [y], monkeypatch, axis=1)
    fn, grid, block, args = call
    assert fn == "rms_norm_v4_f32" and grid == (2, 1, 1) and block == (32, 1, 1)
    assert [a for a, _ in args[8:12]] == [2, 60, 1, 20]
    assert args[12][0] == pytest.approx(1e-5)


def test_skip_with_bias_and_broadcast_skip(monkeypatch):
    x, skip = HostTensor((2, 3, 4864), BF16, 4096), HostTensor((3, 4864), BF16, 1 << 16)
    gamma, bias = HostTensor((4864,), BF16, 1 << 17), HostTensor((4864,), BF16, 1 << 18)
    y, inv, total = (HostTensor((2, 3, 4864), BF16, 1 << 20),
                     HostTensor((2, 3, 1), np.float32, 1 << 21),
                     HostTensor((2, 3, 4864), BF16, 1 << 22))
    (call,) = _run(SKIP, [x, skip, gamma, bias], [y, None, inv, total], monkeypatch)
    fn, grid, block, args = call
    assert fn == "rms_norm_v8_bf16" and grid == (6, 1, 1) and block == (256, 1, 1)
    assert [a for a, t in args if t is PTR] == [x.ptr, skip.ptr, bias.ptr, gamma.ptr, y.ptr,
                                                total.ptr, 0, inv.ptr]
    assert [a for a, _ in args[8:12]] == [6, 4864, 3, 4864]
    assert args[12][0] == pytest.approx(1e-12)


def test_unaligned_pointer_takes_one_element_loads(monkeypatch):
    x, skip, gamma = (HostTensor((4, 896), F16, 4096 + 2), HostTensor((4, 896), F16, 65536),
                      HostTensor((896,), F16, 1 << 17))
    (call,) = _run(SKIP, [x, skip, gamma], [HostTensor((4, 896), F16, 1 << 20)], monkeypatch)
    assert call[0] == "rms_norm_v1_f16" and call[2] == (256, 1, 1)


def test_no_rows_no_launch(monkeypatch):
    x, s = HostTensor((0, 8), FLOAT32, 4096), HostTensor((8,), FLOAT32, 8192)
    assert _run(SIMPLIFIED, [x, s], [HostTensor((0, 8), FLOAT32, 16384)], monkeypatch) == []


def test_shapes_that_change_after_placement_raise_node_error(monkeypatch):
    x, skip, gamma = (HostTensor((2, 3, 16), F16, 4096), HostTensor((2, 1, 16), F16, 8192),
                      HostTensor((16,), F16, 16384))
    with pytest.raises(NodeError, match="skip of shape"):
        _run(SKIP, [x, skip, gamma], [HostTensor((2, 3, 16), F16, 32768)], monkeypatch)


# ---------------------------------------------------------------- the float32 recipe

def _recipe(x, skip, bias, gamma, eps, block, v):
    """rms_norm's arithmetic in numpy float32, operation for operation: s = (x + skip) +
    bias; each thread sums s * s over its packs (thread t: packs t, t + block, ...; the V
    values of a pack in order); block_reduce's tree; inv = 1 / sqrt(sum / cols + eps);
    y = (s * inv) * gamma, rounded to T."""
    f = np.float32
    rows, cols = x.shape
    s = x.astype(f)
    if skip is not None:
        s = s + np.tile(skip.astype(f), (rows // skip.shape[0], 1))
    if bias is not None:
        s = s + bias.astype(f)
    nv = cols // v
    iters = -(-nv // block)
    packs = np.zeros((rows, iters * block, v), f)
    packs[:, :nv] = s.reshape(rows, nv, v)
    sq = (packs * packs).reshape(rows, iters, block, v)
    acc = np.zeros((rows, block), f)
    for i in range(iters):
        for k in range(v):
            acc = acc + sq[:, i, :, k]
    width = block
    while width > 1:
        width //= 2
        acc = acc[:, :width] + acc[:, width:2 * width]
    inv = f(1) / np.sqrt(acc[:, :1] / f(cols) + f(eps))
    y = (s * inv) * gamma.astype(f)
    return y.astype(x.dtype), inv, s.astype(x.dtype)


@pytest.mark.parametrize("dtype", [FLOAT32, F16, BF16], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rows,hidden", [(1, 896), (9, 896), (4, 4864), (3, 1001)])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_float32_recipe_keeps_the_declared_promise(dtype, rows, hidden, bias):
    """The kernel's arithmetic (replayed here) meets its promise against cpu_reference."""
    from onnx_ep import Session
    from tests.helpers.oracle import node_model

    rng = np.random.default_rng(rows * hidden)

    def draw(*shape):
        return (rng.standard_normal(shape) * 2).astype(np.float32).astype(dtype)

    feeds = {"x": draw(rows, hidden), "skip": draw(rows, hidden), "gamma": draw(hidden)}
    if bias:
        feeds["bias"] = draw(hidden)
    model = node_model(SKIP, feeds, 4, domain="com.microsoft", epsilon=1e-6)
    ref_y, _, ref_inv, ref_s = Session(model, providers=["cpu_reference"]).run(None, feeds)
    v = norm.rms_vector_width(dtype.itemsize, hidden, hidden, (0,))
    y, inv, s = _recipe(feeds["x"], feeds["skip"], feeds.get("bias"), feeds["gamma"], 1e-6,
                        norm.block_for(hidden // v), v)
    promise = K[SKIP].parity_for(dtype)
    for name, got, ref in (("output", y, ref_y), ("inv_std_var", inv, ref_inv),
                           ("input_skip_bias_sum", s, ref_s)):
        d = judge(got, ref, promise)
        assert d.kept, f"{name}: {d.reason} (max ulp {d.max_ulp}, max abs {d.max_abs})"
