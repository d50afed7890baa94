"""CPU-runnable checks of the CUDA activations' host logic (kernels/activation.py): Clip's
bounds, Gelu's promise, PRelu's unidirectional slope. Their symbols and protocol checks run
with the elementwise rows' (test_elementwise_host.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from onnx_ep.core.kernel import NodeMeta, Parity, TensorSpec
from onnx_ep.providers.cuda.kernels import activation
from tests.helpers.cuda_elementwise import ROWS
from tests.helpers.cuda_elementwise import dtype_meta as meta


def row(op: str):
    return ROWS[op]


def test_clip_supports_bind_and_infer():
    f32, f16, i8 = np.float32, np.float16, np.int8
    clip = row("Clip")
    assert clip.family == "clip" and clip.parity == Parity.EXACT
    assert clip.supports(meta("Clip", (f32, (2, 3)), (f32, ()), (f32, ())))
    assert clip.supports(meta("Clip", (i8, (4,)), (i8, (1,))))
    m = NodeMeta(name="n", op_type="Clip", domain="", opset=13, attrs={},
                 inputs=(TensorSpec(f16, (3,)), None, TensorSpec(f16, ())))
    assert clip.supports(m)                                                  # min omitted
    assert not clip.supports(meta("Clip", (f32, (3,)), (f16, ()))).ok        # bound dtype
    assert "scalar" in clip.supports(meta("Clip", (f32, (3,)), (f32, (2,)))).reason
    assert not clip.supports(meta("Clip", (np.bool_, (3,))))
    assert clip.supports(meta("Clip", (f32, ("N",))))           # sized when planned
    assert not clip.supports(meta("Clip", (i8, (3,)), opset=6))              # floats only
    assert not clip.supports(meta("Clip", (f32, (3,)), (f32, ()), opset=6))  # attrs then
    assert clip.infer_outputs(meta("Clip", (i8, (2, 5)), (i8, ()))) == [TensorSpec(i8, (2, 5))]
    b = clip.bind(meta("Clip", (f32, (3,)), (f32, ())))
    assert b.symbol == "clip_f32" and b.scalars == (-np.inf, np.inf)
    # attribute bounds before opset 11 are rounded to x's dtype, as the reference does
    b = clip.bind(meta("Clip", (f16, (3,)), opset=6, min=float(np.float32(0.1))))
    assert b.symbol == "clip_f16"
    assert b.scalars == (float(np.float16(np.float32(0.1))), np.inf)
    b = clip.bind(meta("Clip", (ml_dtypes.bfloat16, (3,)), opset=6, max=-1e-3))
    assert b.scalars[1] == float(np.asarray(-1e-3).astype(ml_dtypes.bfloat16))


def test_gelu_tanh_declares_a_tolerance_and_the_rest_stay_exact():
    gelu = row("Gelu")
    for dt, rtol in ((np.float32, 2.0 ** -23), (np.float16, 2.0 ** -10),
                     (ml_dtypes.bfloat16, 2.0 ** -7)):
        p = gelu.bind(meta("Gelu", (dt, (3,)), approximate="tanh")).parity
        assert p.kind.value == "tolerance" and p.rtol == rtol
        assert p.atol >= activation.GELU_TANH_ATOL
        assert gelu.bind(meta("Gelu", (dt, (3,)))).parity == Parity.EXACT
    assert row("Relu").bind(meta("Relu", (np.float16, (3,)))).parity == Parity.EXACT


def test_prelu_slope_broadcasts_to_x_only():
    f32 = np.float32
    pr = row("PRelu")
    assert pr.supports(meta("PRelu", (f32, (2, 3, 4)), (f32, (3, 1))))
    assert pr.supports(meta("PRelu", (np.int32, (2, 3)), (np.int32, (1,))))
    assert "growing" in pr.supports(meta("PRelu", (f32, (3, 1)), (f32, (4,)))).reason
    assert not pr.supports(meta("PRelu", (f32, (3,)), (f32, (2, 3))))
    assert pr.bind(meta("PRelu", (f32, (2, 3)), (f32, (3,)))).symbol == "prelu_f32"
