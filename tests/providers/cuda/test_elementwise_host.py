"""CPU-runnable checks of the CUDA elementwise and Cast kernels' host logic (the
activations' own checks: test_activation_host.py)."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.kernel import Parity, TensorSpec, WorkspaceRequirement, check_kernel
from onnx_ep.providers.cpu_reference import activation as ref_activation
from onnx_ep.providers.cpu_reference import cast as ref_cast
from onnx_ep.providers.cpu_reference import elementwise as ref_elementwise
from onnx_ep.providers.cuda.kernels import activation, cast, elementwise
from onnx_ep.providers.cuda.kernels.elementwise import (
    Bcast,
    broadcast_layout,
    make_bcast,
    suffix,
)
from tests.helpers.cuda_elementwise import ROWS
from tests.helpers.cuda_elementwise import dtype_meta as meta

KERNELS_DIR = Path(elementwise.__file__).parent


def row(op: str):
    return ROWS[op]


def gather(layout, out_shape, arrays):
    """Emulate the kernel's indexing on the host: out[i] reads in_k[offset_k(i)]."""
    ndim, dims, strides = layout
    n = int(np.prod(out_shape, dtype=np.int64))
    res = []
    for k, arr in enumerate(arrays):
        flat = arr.reshape(-1)
        if ndim == 0:
            res.append(flat[:n].copy())
            continue
        idx = np.arange(n)
        off = np.zeros(n, np.int64)
        for d in range(ndim - 1, -1, -1):
            off += (idx % dims[d]) * strides[k][d]
            idx //= dims[d]
        res.append(flat[off])
    return res


@pytest.mark.parametrize("shapes", [
    [(2, 3, 4), (2, 3, 4)],
    [(2, 3, 4), (4,)],
    [(2, 3, 4), (3, 1)],
    [(2, 1, 4), (1, 3, 1)],
    [(5,), ()],
    [(), ()],
    [(1, 1), (1,)],
    [(2, 3, 4, 5, 6, 7, 8), (8,)],
    [(2, 1, 3, 1, 4, 1), (1, 2, 1, 3, 1, 4)],
    [(3, 1, 5), (3, 4, 1), (1, 4, 5)],
])
def test_broadcast_layout_reads_what_numpy_broadcasts(shapes):
    out = np.broadcast_shapes(*shapes)
    arrays = [np.arange(int(np.prod(s)), dtype=np.int64).reshape(s) for s in shapes]
    layout = broadcast_layout(out, shapes)
    assert layout[0] <= 6
    for got, arr in zip(gather(layout, out, arrays), arrays):
        np.testing.assert_array_equal(got, np.broadcast_to(arr, out).reshape(-1))


def test_broadcast_layout_collapses_contiguous_dims():
    assert broadcast_layout((2, 3, 4), [(2, 3, 4), (2, 3, 4)])[0] == 0   # flat
    assert broadcast_layout((2, 3, 4), [(2, 3, 4), (4,)]) == (2, (6, 4), ((4, 1), (0, 1)))
    assert broadcast_layout((8, 1, 16), [(8, 1, 16), (1,)]) == (1, (128,), ((1,), (0,)))


def test_broadcast_layout_refuses_more_than_six_dims():
    shape_a = (2, 1) * 4
    shape_b = (1, 2) * 4
    with pytest.raises(ValueError, match="6"):
        broadcast_layout(np.broadcast_shapes(shape_a, shape_b), [shape_a, shape_b])
    verdict = row("Add").supports(meta("Add", (np.float32, shape_a), (np.float32, shape_b)))
    assert not verdict and "6" in verdict.reason


def test_bcast_struct_matches_the_cuda_layout():
    assert Bcast.__dict__["ndim"].offset == 0
    assert Bcast.__dict__["dims"].offset == 8
    assert Bcast.__dict__["strides"].offset == 56
    assert Bcast().__class__.__sizeof__ and __import__("ctypes").sizeof(Bcast) == 200
    bc = make_bcast(broadcast_layout((2, 3, 4), [(2, 3, 4), (4,)]))
    assert bc.ndim == 2 and list(bc.dims[:2]) == [6, 4]
    assert list(bc.strides[0][:2]) == [4, 1] and list(bc.strides[1][:2]) == [0, 1]


def test_dtype_suffixes_and_cpp_types():
    assert suffix(np.float32) == "f32" and suffix(np.float16) == "f16"
    assert suffix(ml_dtypes.bfloat16) == "bf16" and suffix(np.bool_) == "b8"
    assert {v[1] for v in elementwise.DTYPES.values()} == {
        "float", "__half", "__nv_bfloat16", "double", "int64_t", "int32_t", "int16_t", "int8_t",
        "uint64_t", "uint32_t", "uint16_t", "uint8_t", "bool"}
    assert suffix(np.int16) == "i16" and suffix(np.uint64) == "u64"
    with pytest.raises(KeyError):
        suffix(np.complex64)


def _symbols(source: str) -> set[str]:
    """Kernel names the macros of ``source`` instantiate (parsed, not compiled)."""
    text = (KERNELS_DIR / f"{source}.cu").read_text()
    names = set(re.findall(r'extern "C" __global__ void (\w+)\(', text))
    macro_calls = re.findall(r"\b(UNARY_F4|UNARY_F|UNARY_SI|UNARY_UI|UNARY_I|ISNAN|ISINF|"
                             r"BIN_FLOATS|"
                             r"BIN_ARITH|BIN_INTS|BIN_F|POW_FROM|POW_F|CMP_NUM|CMP|WHERE|"
                             r"CAST_FROM|CLIP_F|CLIP_I)"
                             r"\(([^()]*)\)", text)
    float_sfx = ["f32", "f16", "bf16", "f64"]
    signed, unsigned = ["i64", "i32", "i16", "i8"], ["u64", "u32", "u16", "u8"]
    for macro, args in macro_calls:
        a = [s.strip() for s in args.split(",")]
        if macro in ("UNARY_F4", "BIN_FLOATS", "BIN_ARITH"):
            names |= {f"{a[0]}_{s}" for s in float_sfx}
        elif macro == "UNARY_SI":
            names |= {f"{a[0]}_{s}" for s in signed}
        elif macro == "UNARY_UI":
            names |= {f"{a[0]}_{s}" for s in unsigned}
        elif macro == "BIN_INTS":
            names |= {f"{a[0]}_{s}" for s in signed + unsigned}
        elif macro == "CMP_NUM":
            names |= {f"{a[0]}_{s}" for s in float_sfx + signed + unsigned}
        elif macro in ("UNARY_F", "UNARY_I", "BIN_F", "CMP"):
            if a[0] not in ("NAME",):
                names.add(f"{a[0]}_{a[3]}")
        elif macro in ("ISNAN", "ISINF"):
            if a[0] != "T":
                names.add(f"{macro.lower()}_{a[1]}")
        elif macro == "POW_F":
            if a[0] != "T":
                names.add(f"pow_{a[1]}")
        elif macro == "POW_FROM":
            if a[0] != "T":
                names |= {f"pow_{a[1]}_{e}" for e in float_sfx + signed + unsigned}
        elif macro in ("CLIP_F", "CLIP_I"):
            if a[0] != "T":
                names.add(f"clip_{a[1]}")
        elif macro == "WHERE":
            if a[0] != "SFX":
                names.add(f"where_{a[0]}")
        elif macro == "CAST_FROM":
            if a[0] != "S":
                names |= {f"cast_{a[1]}_{d}" for d in
                          re.findall(r"CAST\(S, SS, [^,]+, (\w+)\)", text)}
    return names


def test_every_supported_row_and_dtype_has_a_cuda_symbol():
    have = _symbols("elementwise")
    for k in elementwise.KERNELS + activation.KERNELS:
        for dt in k.dtypes:
            shapes = [(dt, (2, 3))] * (3 if k.key.op_type == "Where" else
                                       2 if k.family in ("binary", "variadic") else 1)
            if k.key.op_type == "Where":
                shapes[0] = (np.bool_, (2, 3))
            attrs = {"direction": "LEFT"} if k.key.op_type == "BitShift" else {}
            m = meta(k.key.op_type, *shapes, **attrs)
            assert k.supports(m), (k, dt, k.supports(m))
            bound = k.bind(m)
            if k.family == "variadic":
                assert bound.pair.symbol in have, bound.pair.symbol
                if bound.divide is not None:
                    assert bound.divide.symbol in have, bound.divide.symbol
                continue
            assert bound.symbol in have, bound.symbol
            if k.key.op_type == "BitShift":
                assert k.bind(meta("BitShift", *shapes, direction="RIGHT")).symbol in have
            if k.key.op_type == "Mod":
                assert k.bind(meta("Mod", *shapes, fmod=1)).symbol in have
            if k.key.op_type == "Gelu":
                assert k.bind(meta("Gelu", *shapes, approximate="tanh")).symbol in have
            if k.key.op_type == "Clip":
                assert k.bind(meta("Clip", (dt, (2, 3)), (dt, ()), (dt, ()))).symbol in have
    cast_have = _symbols("cast")
    for src in cast.DTYPES:
        for dst in cast.DTYPES:
            b = cast.KERNELS[0].bind(meta("Cast", (src, (4,)), to=_onnx_type(dst)))
            assert b.symbol in cast_have


def _onnx_type(dt) -> int:
    from onnx_ep.core.dtypes import onnx_elem_type
    return onnx_elem_type(dt)


def test_rows_satisfy_the_kernel_protocol_and_match_reference_since():
    ref = {k.key.op_type: k.key.since for k in
           ref_elementwise.KERNELS + ref_activation.KERNELS + ref_cast.KERNELS}
    for k in elementwise.KERNELS + activation.KERNELS + cast.KERNELS[:2]:  # BitCast: quantize
        assert check_kernel(k) is None, k
        assert k.parity == Parity.EXACT
        assert k.key.since == ref[k.key.op_type], k.key
        m = meta(k.key.op_type, (np.float32, (2,)))
        assert k.workspace_requirement(m) == WorkspaceRequirement.NONE
        assert k.capture_support().supported


def test_supports_declines_with_reasons():
    f32, f64 = np.float32, np.float64
    assert not row("Exp").supports(meta("Exp", (f64, (3,))))
    assert "ulp" in row("Exp").supports(meta("Exp", (f64, (3,)))).reason
    assert row("Sqrt").supports(meta("Sqrt", (f64, (3,))))           # IEEE: exact in float64
    assert not row("Exp").supports(meta("Exp", (np.int32, (3,))))
    # symbolic dims: sized per shape signature by the planner, read from the tensors at run time
    assert row("Exp").supports(meta("Exp", (f32, ("N", 3))))
    assert row("Add").supports(meta("Add", (f32, ("N", 3)), (f32, (3,))))
    assert not row("Add").supports(meta("Add", (f32, ("N", 1, 1, 1, 1, 1, 3)), (f32, (3,))))
    assert not row("Gelu").supports(meta("Gelu", (f32, (3,)), approximate="erf"))
    assert not row("Add").supports(meta("Add", (f32, (3,)), (np.float16, (3,))))
    assert not row("Add").supports(meta("Add", (f32, (3,)), (f32, (4,))))
    assert not row("Add").supports(meta("Add", (f32, (2, 3)), (f32, (3,)), opset=6))
    assert row("Add").supports(meta("Add", (f32, (2, 3)), (f32, (2, 3)), opset=6))
    assert not row("Pow").supports(meta("Pow", (f64, (3,)), (f64, (3,))))
    assert row("Pow").supports(meta("Pow", (f32, (3,)), (np.int64, (3,))))        # T1 != T2
    assert not row("Pow").supports(meta("Pow", (np.int64, (3,)), (f32, (3,))))    # truncates
    assert not row("Pow").supports(meta("Pow", (f32, (3,)), (np.bool_, (3,))))
    assert not row("Mod").supports(meta("Mod", (f32, (3,)), (f32, (3,)), fmod=2))
    assert not row("Less").supports(meta("Less", (np.bool_, (3,)), (np.bool_, (3,))))
    assert row("Equal").supports(meta("Equal", (np.bool_, (3,)), (np.bool_, (3,))))
    assert not row("And").supports(meta("And", (f32, (3,)), (f32, (3,))))
    assert not row("Neg").supports(meta("Neg", (np.uint8, (3,))))
    where = row("Where")
    assert where.supports(meta("Where", (np.bool_, (2, 1)), (f32, (3,)), (f32, (2, 3))))
    assert not where.supports(meta("Where", (np.int8, (2, 1)), (f32, (3,)), (f32, (2, 3))))
    assert not where.supports(meta("Where", (np.bool_, (2,)), (f32, (3,)), (f32, (3,))))
    c = cast.KERNELS[0]
    assert c.supports(meta("Cast", (f32, (3,)), to=10))                 # FLOAT16
    assert c.supports(meta("Cast", (f32, (3,)), to="INT64", opset=5))   # named before opset 6
    assert not c.supports(meta("Cast", (f32, (3,)), to=8))              # STRING
    assert c.supports(meta("Cast", (f32, (3,)), to=17))                 # FLOAT8E4M3FN
    assert c.supports(meta("Cast", (np.uint16, (3,)), to=1))
    like = cast.KERNELS[1]
    assert like.supports(meta("CastLike", (f32, (3,)), (ml_dtypes.bfloat16, (1,))))


def test_infer_outputs():
    f32 = np.float32
    assert row("Add").infer_outputs(meta("Add", (f32, (2, 1, 4)), (f32, (3, 1)))) == [
        TensorSpec(f32, (2, 3, 4))]
    assert row("Less").infer_outputs(meta("Less", (f32, (4,)), (f32, ()))) == [
        TensorSpec(np.bool_, (4,))]
    assert row("IsNaN").infer_outputs(meta("IsNaN", (np.float16, (2, 2)))) == [
        TensorSpec(np.bool_, (2, 2))]
    assert row("Relu").infer_outputs(meta("Relu", (np.int8, (5,)))) == [TensorSpec(np.int8, (5,))]
    assert row("Where").infer_outputs(
        meta("Where", (np.bool_, (2, 1)), (np.int64, (3,)), (np.int64, ()))) == [
        TensorSpec(np.int64, (2, 3))]
    assert cast.KERNELS[0].infer_outputs(meta("Cast", (f32, (2, 3)), to=16)) == [
        TensorSpec(ml_dtypes.bfloat16, (2, 3))]
    assert cast.KERNELS[1].infer_outputs(
        meta("CastLike", (f32, (7,)), (np.int8, (1,)))) == [TensorSpec(np.int8, (7,))]


def test_bind_parses_attributes_once():
    b = row("LeakyRelu").bind(meta("LeakyRelu", (np.float16, (3,))))
    assert b.symbol == "leakyrelu_f16" and b.scalars == (float(np.float32(0.01)), 0.0)
    b = row("HardSigmoid").bind(meta("HardSigmoid", (np.float32, (3,)), alpha=0.5))
    assert b.scalars == (0.5, 0.5)
    b = row("Selu").bind(meta("Selu", (ml_dtypes.bfloat16, (3,))))
    assert b.symbol == "selu_bf16" and b.scalars[1] == float(np.float32(1.0507009873554805))
    assert row("Mod").bind(meta("Mod", (np.int32, (3,)), (np.int32, (3,)), fmod=1)).symbol \
        == "fmod_i32"
    assert row("Gelu").bind(meta("Gelu", (np.float32, (3,)), approximate=b"tanh")).symbol \
        == "gelu_tanh_f32"


def test_bound_layout_cache_is_per_shape_tuple():
    b = row("Add").bind(meta("Add", (np.float32, (2, 3)), (np.float32, (3,))))
    first = b.layout((2, 3), ((2, 3), (3,)))
    assert b.layout((2, 3), ((2, 3), (3,))) is first
    assert b.layout((4, 3), ((4, 3), (3,))) is not first


WIDE_INTS = (np.int16, np.uint16, np.uint32, np.uint64)


@pytest.mark.parametrize("dt", WIDE_INTS, ids=lambda d: np.dtype(d).name)
def test_every_integer_dtype_runs_the_integer_rows(dt):
    for op in ("Add", "Sub", "Mul", "Div", "Mod", "Pow", "Max", "Min", "Sum", "Equal", "Less",
               "LessOrEqual", "Greater", "GreaterOrEqual", "BitwiseAnd", "BitwiseOr",
               "BitwiseXor", "PRelu"):
        assert row(op).supports(meta(op, (dt, (2, 3)), (dt, (3,)))), op
    for op in ("Abs", "Sign", "BitwiseNot", "Clip"):
        assert row(op).supports(meta(op, (dt, (4,)))), op
    assert row("Where").supports(meta("Where", (np.bool_, (2,)), (dt, (2,)), (dt, ())))
    assert row("BitShift").supports(meta("BitShift", (dt, (2,)), (dt, (2,)), direction="RIGHT"))
    signed = np.dtype(dt).kind == "i"
    assert bool(row("Neg").supports(meta("Neg", (dt, (4,))))) == signed
    assert bool(row("Relu").supports(meta("Relu", (dt, (4,))))) == signed
    assert row("Cast").supports(meta("Cast", (dt, (3,)), to=1))


def test_bitshift_direction_picks_the_symbol():
    u32 = np.uint32
    bs = row("BitShift")
    assert bs.bind(meta("BitShift", (u32, (3,)), (u32, ()), direction="LEFT")).symbol == "shl_u32"
    assert bs.bind(meta("BitShift", (u32, (3,)), (u32, ()), direction=b"RIGHT")).symbol \
        == "shr_u32"
    assert "direction" in bs.supports(meta("BitShift", (u32, (3,)), (u32, ()))).reason
    assert not bs.supports(meta("BitShift", (np.float32, (3,)), (np.float32, ()),
                                direction="LEFT"))


def test_variadic_rows_fold_any_number_of_inputs():
    f32, f16 = np.float32, np.float16
    for op in ("Sum", "Max", "Min", "Mean"):
        k = row(op)
        assert k.family == "variadic"
        assert k.supports(meta(op, (f32, (2, 1, 4))))
        assert k.supports(meta(op, (f32, (2, 1, 4)), (f32, (3, 1)), (f32, ()), (f32, (4,))))
        assert k.infer_outputs(meta(op, (f32, (2, 1, 4)), (f32, (3, 1)), (f32, ()))) == [
            TensorSpec(f32, (2, 3, 4))]
        assert not k.supports(meta(op, (f32, (3,)), (f16, (3,))))
        assert not k.supports(meta(op, (f32, (3,)), (f32, (4,))))
        assert not k.supports(meta(op))
    assert row("Sum").supports(meta("Sum", (np.uint64, (3,)), (np.uint64, (3,))))
    assert not row("Mean").supports(meta("Mean", (np.int32, (3,)), (np.int32, (3,))))
    b = row("Max").bind(meta("Max", (f16, (3,)), (f16, (3,)), (f16, (3,))))
    assert b.pair.symbol == "max_f16" and b.divide is None
    b = row("Mean").bind(meta("Mean", *[(ml_dtypes.bfloat16, (3,))] * 3))
    assert b.pair.symbol == "add_bf16" and b.divide.symbol == "div_by_bf16"
    assert b.divide.scalars == (3.0, 0.0)
    assert row("Mean").bind(meta("Mean", (f32, (3,)))).divide.scalars == (1.0, 0.0)


def test_new_unary_rows_bind_their_attributes():
    f32 = np.float32
    b = row("IsInf").bind(meta("IsInf", (f32, (3,)), detect_negative=0))
    assert b.symbol == "isinf_f32" and b.scalars == (1.0, 0.0)
    assert row("IsInf").infer_outputs(meta("IsInf", (f32, (3,)))) == [TensorSpec(np.bool_, (3,))]
    assert row("Shrink").bind(meta("Shrink", (f32, (3,)))).scalars == (0.5, 0.0)
    assert row("ThresholdedRelu").bind(meta("ThresholdedRelu", (f32, (3,)), alpha=2.0)).scalars \
        == (2.0, 0.0)
    assert row("Swish").bind(meta("Swish", (f32, (3,)), opset=24)).scalars == (1.0, 0.0)
    assert row("Softsign").supports(meta("Softsign", (np.float64, (3,))))     # IEEE in float64
    for op in ("Celu", "Mish", "Swish", "Asinh", "Acosh", "Atanh"):           # libm: declined
        assert not row(op).supports(meta(op, (np.float64, (3,))))
    assert row("BitwiseNot").bind(meta("BitwiseNot", (np.uint16, (3,)))).symbol \
        == "bitwise_not_u16"


def test_pow_with_an_exponent_of_another_dtype_has_a_symbol():
    have = _symbols("elementwise")
    pw = row("Pow")
    for base in elementwise.NARROW_FLOATS:
        for exp in elementwise.POW_EXPONENTS - {base}:
            m = meta("Pow", (base, (2, 3)), (exp, (3,)))
            assert pw.supports(m), (base, exp)
            assert pw.bind(m).symbol in have, pw.bind(m).symbol
            assert pw.infer_outputs(m) == [TensorSpec(base, (2, 3))]
    assert pw.bind(meta("Pow", (np.float32, (3,)), (np.int64, ()))).symbol == "pow_f32_i64"
    assert pw.bind(meta("Pow", (np.float32, (3,)), (np.float32, ()))).symbol == "pow_f32"
