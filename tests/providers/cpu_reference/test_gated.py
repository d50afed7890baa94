"""cpu_reference onnx_ep.fused::SiluMul against the pattern it replaces, run unfused by
onnxruntime CPU (Sigmoid, Mul, Mul), and against the formula in extended precision rounded
once (the reference's promise); IEEE special values, and every rejection."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_ep import Session
from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import ExecutionContext, NodeMeta, TensorSpec
from onnx_ep.errors import NodeError, NoKernelError
from onnx_ep.providers.cpu_reference import family_modules, gated
from onnx_ep.providers.cpu_reference.gated import KERNELS, SiluMul
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET, run_ort
from tests.helpers.plugins import KernelPlugin

BF16 = np.dtype(ml_dtypes.bfloat16)
Shape = Sequence[int | str]

#: x86's 80-bit long double: 64 significant bits, exponents to 16383 (exp(1e4) is finite)
WIDE = np.finfo(np.longdouble).nmant >= 63
needs_wide = pytest.mark.skipif(not WIDE, reason="numpy's longdouble is float64 here")


def _plugins() -> list[KernelPlugin]:
    """The family's kernels for a session, unless cpu_reference already registers them."""
    if gated in family_modules():
        return []
    return [KernelPlugin([(k, "cpu_reference") for k in KERNELS], name="gated_under_test")]


def _value_info(name: str, dtype: object, shape: Shape | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx_elem_type(np.dtype(dtype)),
                                         None if shape is None else list(shape))


def _model(nodes: list[onnx.NodeProto], dtypes: Sequence[object], g: Shape | None,
           u: Shape | None, fused: bool) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "silu_mul",
                              [_value_info("g", dtypes[0], g), _value_info("u", dtypes[1], u)],
                              [helper.make_empty_tensor_value_info("y")])
    imports = [helper.make_opsetid("", ORACLE_OPSET)]
    if fused:
        imports.append(helper.make_opsetid(FUSED_DOMAIN, 1))
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION, opset_imports=imports)


def fused_model(dtype: object, g: Shape | None, u: Shape | None, *,
                dtypes: Sequence[object] | None = None, inputs: int = 2) -> onnx.ModelProto:
    """One SiluMul node over graph inputs g and u (``inputs=1`` feeds only g)."""
    node = helper.make_node("SiluMul", ["g", "u"][:inputs], ["y"], domain=FUSED_DOMAIN,
                            name="gate")
    return _model([node], dtypes or (dtype, dtype), g, u, fused=True)


def pattern_model(dtype: object, g: Shape, u: Shape) -> onnx.ModelProto:
    """``Mul(Mul(g, Sigmoid(g)), u)``: the SwiGLU gate the fusion pass replaces."""
    nodes = [helper.make_node("Sigmoid", ["g"], ["sig"]),
             helper.make_node("Mul", ["g", "sig"], ["silu"]),
             helper.make_node("Mul", ["silu", "u"], ["y"])]
    return _model(nodes, (dtype, dtype), g, u, fused=False)


def run_fused(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    sess = Session(fused_model(g.dtype, g.shape, u.shape), providers=["cpu_reference"],
                   plugins=_plugins())
    (y,) = sess.run(None, {"g": g, "u": u})
    return np.asarray(y)


def _rand(shape: Sequence[int], dtype: object, seed: int, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.asarray(rng.standard_normal(tuple(shape)) * scale).astype(np.float32).astype(dtype)


def exact(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``g * u / (1 + exp(-g))`` in long double (not rounded to the inputs' dtype)."""
    gl, ul = g.astype(np.float64).astype(np.longdouble), u.astype(np.float64).astype(np.longdouble)
    with np.errstate(over="ignore", invalid="ignore"):
        return gl * ul / (1 + np.exp(-gl))


def assert_rounded_once(got: np.ndarray, want: np.ndarray) -> None:
    """Every element of ``got`` within half an ulp of its dtype from the unrounded ``want``
    (the ulp of the binade of ``want``; subnormal spacing below the normal range)."""
    info = ml_dtypes.finfo(got.dtype)
    w = want.astype(np.longdouble)
    binade = np.floor(np.log2(np.maximum(np.abs(w), np.longdouble(float(info.smallest_normal)))))
    half_ulp = np.exp2(binade - info.nmant - 1)
    err = np.abs(got.astype(np.float64).astype(np.longdouble) - w)
    assert np.all(err <= half_ulp * (1 + 1e-12)), float((err / half_ulp).max())


#: (G = U) shapes: scalars, odd sizes, a Qwen2.5-0.5B MLP row (4864), batches
SHAPES = {"scalar": (), "one": (1,), "seven": (7,), "qwen_row": (1, 1, 4864),
          "batch": (2, 5, 96), "empty": (3, 0, 8)}


@pytest.mark.parametrize("case", list(SHAPES))
def test_float32_matches_the_unfused_pattern_on_onnxruntime(case: str) -> None:
    shape = SHAPES[case]
    g, u = _rand(shape, np.float32, 1, scale=3.0), _rand(shape, np.float32, 2)
    got = run_fused(g, u)
    (want,) = run_ort(pattern_model(np.float32, shape, shape), {"g": g, "u": u})
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == shape
    # onnxruntime's Sigmoid (MLAS) is a rational approximation about 1e-7 off the true
    # logistic, amplified by |g * u| (up to ~50 here); the pattern rounds three times
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["one", "seven", "qwen_row", "batch"])
def test_float16_is_near_the_unfused_pattern(case: str) -> None:
    shape = SHAPES[case]
    g, u = _rand(shape, np.float16, 3, scale=3.0), _rand(shape, np.float16, 4)
    got = run_fused(g, u)
    (want,) = run_ort(pattern_model(np.float16, shape, shape), {"g": g, "u": u})
    assert got.dtype == np.float16 and got.shape == shape
    # the pattern rounds to float16 three times: up to two float16 ulps apart
    np.testing.assert_allclose(got.astype(np.float32), np.asarray(want, np.float32),
                               rtol=2e-3, atol=1e-5)


@needs_wide
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=str)
def test_narrow_floats_are_the_formula_rounded_once(dtype: object) -> None:
    rng = np.random.default_rng(5)
    n = 20_000
    g = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 8.0, 40.0], n)).astype(dtype)
    u = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 100.0], n)).astype(dtype)
    got = run_fused(g, u)
    assert got.dtype == np.dtype(dtype)
    assert_rounded_once(got, exact(g, u))


@needs_wide
def test_float64_is_the_formula_to_a_few_ulps() -> None:
    rng = np.random.default_rng(6)
    g, u = rng.standard_normal(10_000) * 20.0, rng.standard_normal(10_000)
    got = run_fused(g, u)
    assert got.dtype == np.float64
    # float64 has no wider type to round from: exp and three operations, a few ulps each
    np.testing.assert_allclose(got, exact(g, u).astype(np.float64), rtol=1e-15, atol=0)


def test_float64_is_near_the_unfused_pattern_on_onnxruntime() -> None:
    g, u = _rand((4, 33), np.float64, 7, scale=3.0), _rand((4, 33), np.float64, 8)
    (want,) = run_ort(pattern_model(np.float64, g.shape, u.shape), {"g": g, "u": u})
    # onnxruntime's double Sigmoid is off by up to ~1e-3 relative in its tail (g < -20)
    np.testing.assert_allclose(run_fused(g, u), want, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- extreme values

#: |g| up to 1e4, the float32 exp underflow (-87, -104) and float64 exp underflow (-745)
#: edges, the float16 and float32 limits, signed zeros, subnormals, infinities and NaN
G_EDGES = [0.0, -0.0, 1e-40, -1e-40, 0.5, -0.5, 16.0, 17.0, -17.0, 30.0, -30.0, 87.0, -87.0,
           88.0, -88.0, -104.0, -150.0, -700.0, -746.0, 1e3, -1e3, 1e4, -1e4, 65504.0,
           -65504.0, 3e38, -3e38, np.inf, -np.inf, np.nan]
U_EDGES = [1.0, -1.0, 0.0, -0.0, 2.5, 1e-40, 1e30, -3e38, np.inf, -np.inf, np.nan]


def _grid(dtype: object) -> tuple[np.ndarray, np.ndarray]:
    g, u = np.meshgrid(np.array(G_EDGES), np.array(U_EDGES), indexing="ij")
    with np.errstate(over="ignore"):
        return g.astype(dtype), u.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64], ids=str)
def test_extreme_values_raise_no_numpy_warning(dtype: object) -> None:
    g, u = _grid(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_fused(g, u)
    assert got.shape == g.shape and got.dtype == np.dtype(dtype)


#: g below this rounds exp(g) to 0 in float64 (-1075 ln 2): sigmoid(g) is 0, not tiny
EXP64_UNDERFLOW = -745.1332191019412


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=str)
def test_specials_are_the_ieee_products_of_the_unfused_graph(dtype: object) -> None:
    g, u = _grid(dtype)
    got = run_fused(g, u).astype(np.float64)
    g64, u64 = g.astype(np.float64), u.astype(np.float64)
    # g * sigmoid(g) is 0 at g = 0 and where sigmoid(g) underflows, inf at g = +inf, NaN at
    # g = -inf (-inf * 0); times u, 0 * inf and inf * 0 are NaN
    silu_zero = (g64 == 0) | (np.isfinite(g64) & (g64 < EXP64_UNDERFLOW))
    silu_inf = np.isposinf(g64)
    want_nan = (np.isnan(g64) | np.isnan(u64) | np.isneginf(g64)
                | (silu_zero & np.isinf(u64)) | (silu_inf & (u64 == 0)))
    np.testing.assert_array_equal(np.isnan(got), want_nan)
    inf_g = silu_inf & (u64 != 0) & ~np.isnan(u64)
    np.testing.assert_array_equal(got[inf_g], np.sign(u64[inf_g]) * np.inf)
    inf_u = np.isinf(u64) & np.isfinite(g64) & ~silu_zero
    assert inf_u.sum() >= 20
    np.testing.assert_array_equal(got[inf_u], np.sign(g64[inf_u] * u64[inf_u]) * np.inf)


def test_large_g_takes_the_exact_limits() -> None:
    g = np.array([1e4, -1e4, 1e3, -1e3, 3e38, -3e38, np.inf], np.float32)
    u = np.ones_like(g)
    got = run_fused(g, u)
    # sigmoid(g) rounds to 1 for g >> 0 (the product is g) and to 0 for g << 0 (-0.0)
    np.testing.assert_array_equal(got, np.array([1e4, 0.0, 1e3, 0.0, 3e38, 0.0, np.inf],
                                                  np.float32))
    assert list(np.signbit(got)) == [False, True, False, True, False, True, False]


@needs_wide
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=str)
def test_the_tail_keeps_its_precision_where_float32_exp_is_subnormal(dtype: object) -> None:
    """g < -87: exp(g) is subnormal in float32, but g * sigmoid(g) * u is not for a large u."""
    g = np.linspace(-200.0, -80.0, 2001).astype(dtype)
    u = np.full_like(g, 3e38)
    got = run_fused(g, u)
    want = exact(g, u)
    normal = np.abs(want) >= float(ml_dtypes.finfo(dtype).smallest_normal)
    assert normal.sum() > 1000
    assert_rounded_once(got, want)


def test_float32_matches_onnxruntime_on_extreme_g_with_moderate_u() -> None:
    g = np.array([x for x in G_EDGES if np.isfinite(x) and abs(x) <= 1e4], np.float32)
    g = np.concatenate([g, [np.nan, np.inf]]).astype(np.float32)
    u = np.resize(np.array([1.0, -2.5, 0.75], np.float32), g.shape)
    got = run_fused(g, u)
    (want,) = run_ort(pattern_model(np.float32, g.shape, u.shape), {"g": g, "u": u})
    # onnxruntime's logistic is 0 below about -18, where the true product is < 3e-7 * |u|
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


# ---------------------------------------------------------------- sessions


def test_a_session_reruns_and_takes_a_second_shape() -> None:
    sess = Session(fused_model(np.float32, ("b", "n"), ("b", "n")),
                   providers=["cpu_reference"], plugins=_plugins())
    for shape in ((2, 7), (2, 7), (1, 4864)):
        g, u = _rand(shape, np.float32, shape[1], 4.0), _rand(shape, np.float32, 9)
        (got,) = sess.run(None, {"g": g, "u": u})
        assert got.tobytes() == run_fused(g, u).tobytes()


def test_the_kernel_is_registered_in_the_fused_domain() -> None:
    (kernel,) = KERNELS
    assert kernel.key.domain == FUSED_DOMAIN == "onnx_ep.fused"
    assert (kernel.key.op_type, kernel.key.since) == ("SiluMul", 1)
    assert kernel.parity.kind.value == "exact"


# ---------------------------------------------------------------- rejections


def _declined(m: onnx.ModelProto) -> str:
    with pytest.raises(NoKernelError) as info:
        Session(m, providers=["cpu_reference"], plugins=_plugins())
    return info.value.tried["cpu_reference"]


@pytest.mark.parametrize("gs,us,why", [
    ((2, 8), (2, 9), "dim 1 is 8 and 9"),
    ((2, 8), (8,), "ranks 2 and 1 differ"),
    ((4, 8), (1, 8), "SiluMul does not broadcast"),
    ((), (1,), "ranks 0 and 1 differ"),
])
def test_shapes_that_differ_are_declined_with_the_reason(gs, us, why) -> None:
    assert why in _declined(fused_model(np.float32, gs, us))


def test_mixed_dtypes_are_declined() -> None:
    m = fused_model(np.float32, (2, 8), (2, 8), dtypes=(np.float32, np.float16))
    assert "input U is float16 but G is float32" in _declined(m)


@pytest.mark.parametrize("dtype", [np.int32, np.float64], ids=str)
def test_only_float_dtypes_are_accepted(dtype: object) -> None:
    m = fused_model(dtype, (2, 8), (2, 8))
    if np.dtype(dtype).kind == "f":
        Session(m, providers=["cpu_reference"], plugins=_plugins())
    else:
        assert "G dtype int32 is not one of" in _declined(m)


def test_float8_is_declined() -> None:
    m = fused_model(ml_dtypes.float8_e4m3fn, (2, 8), (2, 8))
    assert "G dtype float8_e4m3fn is not one of" in _declined(m)


def test_one_input_is_declined() -> None:
    assert "SiluMul takes 2 inputs (G, U), got 1" in _declined(
        fused_model(np.float32, (2, 8), (2, 8), inputs=1))


def test_symbolic_shapes_are_checked_when_the_run_shapes_are_known() -> None:
    sess = Session(fused_model(np.float32, ("n", 8), ("m", 8)), providers=["cpu_reference"],
                   plugins=_plugins())
    g, u = _rand((3, 8), np.float32, 10), _rand((2, 8), np.float32, 11)
    with pytest.raises(NodeError, match=r"G \(3, 8\) and U \(2, 8\) must have the same shape"):
        sess.run(None, {"g": g, "u": u})


def test_run_rejects_what_supports_could_not_see() -> None:
    meta = NodeMeta(name="gate", op_type="SiluMul", domain=FUSED_DOMAIN, opset=1, attrs={},
                    inputs=(TensorSpec(np.float32, ("n", 4)),) * 2)
    ctx = ExecutionContext(meta)
    g = np.zeros((2, 4), np.float32)
    with pytest.raises(NodeError, match="input U is float64 but G is float32") as info:
        SiluMul().execute_with_workspace(ctx, [g, g.astype(np.float64)], [None], None)
    assert info.value.node == "gate"
    with pytest.raises(NodeError, match="G dtype int64 is not one of"):
        SiluMul().execute_with_workspace(ctx, [g.astype(np.int64)] * 2, [None], None)
    with pytest.raises(NodeError, match=r"dim 1 is 4 and 3"):
        SiluMul().execute_with_workspace(ctx, [g, g[:, :3]], [None], None)
