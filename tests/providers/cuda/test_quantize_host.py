"""CPU-runnable checks of the CUDA QuantizeLinear / DequantizeLinear /
DynamicQuantizeLinear / BitCast kernels: supports, infer_outputs, the parameter geometry
against cpu_reference's broadcasting, and the symbols quantize.cu instantiates."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import onnx
import pytest

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.kernel import NodeMeta, TensorSpec, WorkspaceRequirement
from onnx_ep.providers.cuda.kernels import cast, quantize
from onnx_ep.providers.cuda.nvrtc import KERNELS_DIR

F32 = np.dtype(np.float32)
Q, DQ, DYN = quantize.KERNELS
BITCAST = cast.KERNELS[2]


def meta(op, *inputs, names=None, opset=21, **attrs) -> NodeMeta:
    specs = tuple(None if s is None else TensorSpec(s[0], s[1]) for s in inputs)
    if names is None:
        names = tuple("" if s is None else f"in{i}" for i, s in enumerate(inputs))
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs, inputs=specs,
                    input_names=names)


def _symbols() -> set[str]:
    text = (KERNELS_DIR / "quantize.cu").read_text()
    names = set(re.findall(r'extern "C" __global__ void (\w+)\(', text))
    q_out = re.findall(r"QUANT\(X, XS, [^,]+, (\w+)\)", text)
    dq_out = re.findall(r"DEQUANT\(X, XS, [^,]+, (\w+)\)", text)
    for x in re.findall(r"^QUANT_FROM\([^,]+, (\w+)\)", text, re.M):
        names |= {f"quantize_{x}_{y}" for y in q_out}
    for x in re.findall(r"^DEQUANT_TO\([^,]+, (\w+)\)", text, re.M):
        names |= {f"dequantize_{x}_{y}" for y in dq_out}
    return names


def test_every_supported_dtype_combination_has_a_symbol():
    have = _symbols()
    for x in quantize.QUANTIZABLE:
        for y in quantize.QUANTIZED:
            m = meta("QuantizeLinear", (x, (4,)), (F32, ()), (y, ()))
            assert Q.supports(m), (x, y, Q.supports(m).reason)
            assert f"quantize_{quantize.QUANTIZABLE[x]}_{quantize.QUANTIZED[y]}" in have
    for x in quantize.DEQUANTIZABLE:
        for y in quantize.OUTPUTS:
            m = meta("DequantizeLinear", (x, (4,)), (y, ()), (x, ()))
            assert DQ.supports(m), (x, y, DQ.supports(m).reason)
            assert f"dequantize_{quantize.DEQUANTIZABLE[x]}_{quantize.OUTPUTS[y]}" in have
    assert {"dql_range", "dql_apply"} <= have


def test_quantize_output_dtype_follows_the_zero_point_then_the_attribute():
    m = meta("QuantizeLinear", (F32, (2, 3)), (F32, ()))
    assert Q.infer_outputs(m) == [TensorSpec(np.uint8, (2, 3))]
    m = meta("QuantizeLinear", (F32, (2, 3)), (F32, ()), (np.int8, ()))
    assert Q.infer_outputs(m) == [TensorSpec(np.int8, (2, 3))]
    m = meta("QuantizeLinear", (F32, ("N", 3)), (F32, ()),
             output_dtype=onnx.TensorProto.FLOAT8E4M3FN)
    assert Q.infer_outputs(m) == [TensorSpec(ml_dtypes.float8_e4m3fn, ("N", 3))]
    m = meta("QuantizeLinear", (F32, (2,)), (F32, ()), (np.int8, ()),
             output_dtype=onnx.TensorProto.UINT8)
    assert not Q.supports(m) and "differs" in Q.supports(m).reason
    m = meta("QuantizeLinear", (F32, (2,)), (F32, ()), None, names=("x", "s", ""))
    assert Q.supports(m) and Q.infer_outputs(m) == [TensorSpec(np.uint8, (2,))]
    # a zero point named but of unknown type: the output type is unknown
    m = meta("QuantizeLinear", (F32, (2,)), (F32, ()), None, names=("x", "s", "zp"))
    assert not Q.supports(m)


def test_supports_declines_with_reasons():
    assert not Q.supports(meta("QuantizeLinear", (np.int8, (2,)), (F32, ())))
    assert not Q.supports(meta("QuantizeLinear", (F32, (2,)), (np.int32, ())))
    assert not Q.supports(meta("QuantizeLinear", (F32, (2,)), (F32, ()), (np.int32, ())))
    assert not DQ.supports(meta("DequantizeLinear", (np.int8, (2,)), (F32, ()), (np.uint8, ())))
    assert not DQ.supports(meta("DequantizeLinear", (F32, (2,)), (F32, ())))
    assert DQ.infer_outputs(meta("DequantizeLinear", (np.int8, (2,)), (np.float16, ()))) == [
        TensorSpec(np.float16, (2,))]
    assert DQ.infer_outputs(meta("DequantizeLinear", (np.int8, (2,)), (F32, ()),
                                 output_dtype=onnx.TensorProto.BFLOAT16)) == [
        TensorSpec(ml_dtypes.bfloat16, (2,))]
    # static shapes that cannot fit are declined at plan time
    bad = meta("QuantizeLinear", (F32, (2, 6)), (F32, (5,)), axis=1)
    assert not Q.supports(bad) and "per-axis" in Q.supports(bad).reason
    bad = meta("DequantizeLinear", (np.int8, (2, 6)), (F32, (2, 2)), axis=1, block_size=2)
    assert not DQ.supports(bad) and "blocked" in DQ.supports(bad).reason
    assert DQ.supports(meta("DequantizeLinear", (np.int8, (2, 6)), (F32, (2, 3)), axis=1,
                            block_size=2))
    # the kernels index the zero point like the scale
    bad = meta("DequantizeLinear", (np.int8, (2, 6)), (F32, ()), (np.int8, (6,)))
    assert not DQ.supports(bad) and "zero point shape" in DQ.supports(bad).reason
    assert DQ.supports(meta("DequantizeLinear", (np.int8, (2, 6)), (F32, ()), (np.int8, (1,))))


def _reference_index(x_shape, p_shape, axis, block) -> np.ndarray:
    """The parameter element cpu_reference applies to each x element (via its broadcast)."""
    from onnx_ep.core.kernel import ExecutionContext
    from onnx_ep.providers.cpu_reference import quantize as ref

    p = np.arange(int(np.prod(p_shape)), dtype=np.int64).reshape(p_shape)
    ctx = ExecutionContext(meta("QuantizeLinear", (F32, x_shape)))
    b = ref._broadcast_param(ref.KERNELS[0], ctx, p, x_shape, axis, block, "scale")
    return np.broadcast_to(b, x_shape).reshape(-1)


def _kernel_index(g: quantize.QGeo) -> np.ndarray:
    i = np.arange(g.n, dtype=np.int64)
    if g.mode == 0:
        return np.zeros_like(i)
    k, oa = i % g.inner, i // g.inner
    a, o = oa % g.D, oa // g.D
    return a if g.mode == 1 else (o * g.nb + a // g.block) * g.inner + k


@pytest.mark.parametrize("x_shape,p_shape,axis,block", [
    ((2, 3, 4), (), 1, 0), ((2, 3, 4), (1,), 1, 0), ((2, 3, 4), (3,), 1, 0),
    ((2, 3, 4), (4,), -1, 0), ((2, 3, 4), (2,), 0, 0), ((6, 5), (2, 5), 0, 4),
    ((6, 5), (6, 3), 1, 2), ((2, 7, 3), (2, 3, 3), 1, 3), ((4,), (1,), 0, 4),
    ((3, 8), (3, 1), 1, 8),
])
def test_param_geometry_matches_the_reference_broadcast(x_shape, p_shape, axis, block):
    g = quantize.param_geometry(x_shape, p_shape, axis, block)
    np.testing.assert_array_equal(_kernel_index(g), _reference_index(x_shape, p_shape, axis,
                                                                     block))


def test_param_geometry_refuses_what_the_reference_refuses():
    with pytest.raises(ValueError, match="per-axis"):
        quantize.param_geometry((2, 3), (2,), 1, 0)
    with pytest.raises(ValueError, match="blocked"):
        quantize.param_geometry((2, 6), (2, 3), 1, 4)
    with pytest.raises(ValueError, match="scalar"):
        quantize.param_geometry((), (2,), 0, 0)


def test_qgeo_struct_layout():
    import ctypes

    assert ctypes.sizeof(quantize.QGeo) == 48
    assert quantize.QGeo.mode.offset == 40


def test_dynamic_quantize_outputs_and_workspace():
    m = meta("DynamicQuantizeLinear", (F32, ("N", 4)), opset=11)
    assert DYN.supports(m)
    assert DYN.infer_outputs(m) == [TensorSpec(np.uint8, ("N", 4)), TensorSpec(F32, ()),
                                    TensorSpec(np.uint8, ())]
    assert DYN.workspace_requirement(m) == WorkspaceRequirement(4)
    assert not DYN.supports(meta("DynamicQuantizeLinear", (np.float16, (4,)), opset=11))


def test_bitcast_needs_equal_widths():
    def m(src, dst):
        return meta("BitCast", (src, (2, 3)), opset=26, to=onnx_elem_type(dst))

    assert BITCAST.supports(m(np.float32, np.int32))
    assert BITCAST.supports(m(np.bool_, np.uint8))
    assert BITCAST.supports(m(ml_dtypes.int4, ml_dtypes.float4_e2m1fn))
    assert BITCAST.infer_outputs(m(np.float64, np.int64)) == [TensorSpec(np.int64, (2, 3))]
    assert not BITCAST.supports(m(np.float32, np.int64))
    assert not BITCAST.supports(m(ml_dtypes.int4, np.int8))
    assert not BITCAST.supports(meta("BitCast", (F32, (2,)), opset=26, to=8))   # STRING
    assert BITCAST.aliases == {0: 0}


def test_rows_satisfy_the_kernel_protocol_and_match_reference_since():
    from onnx_ep.core.kernel import Parity, check_kernel
    from onnx_ep.providers.cpu_reference import cast as ref_cast
    from onnx_ep.providers.cpu_reference import quantize as ref_quantize

    ref = {k.key.op_type: k.key.since for k in ref_quantize.KERNELS + ref_cast.KERNELS}
    for k in [*quantize.KERNELS, BITCAST]:
        assert check_kernel(k) is None, k
        assert k.parity == Parity.EXACT
        assert k.key.since == ref[k.key.op_type], k.key
        assert k.capture_support().supported
