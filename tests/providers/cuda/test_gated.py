"""CUDA onnx_ep.fused::SiluMul (kernels/gated.py, gated.cu) against cpu_reference.

Host tests (no marker, no GPU): the protocol, the promise per dtype, ``supports``,
``infer_outputs``, the symbols the node binds (present in gated.cu), the launch geometry
and arguments, and the checks made before a launch. GPU tests (``@pytest.mark.cuda``): the
bound kernel launched on DeviceTensors and judged against cpu_reference under its declared
promise (onnx_ep.testing.ulp.judge: NaN where the reference is NaN, equal infinities, then
the tolerance): sizes around the 16-byte packs, misaligned views, IEEE specials, the
g < -87 tail and T's overflow threshold, every float16 value of G, and a session.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_gated.py
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import (
    CaptureSupport,
    ExecutionContext,
    NodeMeta,
    Parity,
    TensorSpec,
    WorkspaceRequirement,
    check_kernel,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference import family_modules
from onnx_ep.providers.cpu_reference import gated as ref_gated
from onnx_ep.providers.cuda import kernel_modules
from onnx_ep.providers.cuda.kernels import gated
from onnx_ep.providers.cuda.kernels.base import BLOCK, flat_geometry, launch_geometry
from onnx_ep.testing import audit_capture
from onnx_ep.testing.ulp import judge
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET
from tests.helpers.plugins import KernelPlugin

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
DTYPES = [F32, F16, BF16]
SOURCE = Path(gated.__file__).with_name("gated.cu")
(KERNEL,) = gated.KERNELS
(REFERENCE,) = ref_gated.KERNELS


def _meta(*specs) -> NodeMeta:
    """SiluMul over ``(dtype, shape)`` specs (``None`` for a non-tensor input)."""
    inputs = tuple(None if s is None else TensorSpec(*s) for s in specs)
    return NodeMeta(name="gate", op_type="SiluMul", domain=FUSED_DOMAIN, opset=1, attrs={},
                    inputs=inputs, input_names=("g", "u")[:len(inputs)], output_names=("y",))


class _Tensor:
    """A DeviceTensor stand-in: a host array behind a fake pointer."""

    def __init__(self, ptr: int, array: np.ndarray) -> None:
        self.ptr, self.array = ptr, array
        self.dtype, self.shape = array.dtype, tuple(array.shape)
        self.size, self.device = array.size, 0


def reference(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """cpu_reference's SiluMul of host arrays."""
    out: list[Any] = [None]
    REFERENCE.execute_with_workspace(ExecutionContext(_meta((g.dtype, g.shape),
                                                            (u.dtype, u.shape))),
                                     [g, u], out, None)
    return np.asarray(out[0])


# ---------------------------------------------------------------- host: the protocol


def test_the_kernel_keeps_the_protocol_in_the_fused_domain():
    assert check_kernel(KERNEL) is None
    assert KERNEL.key == REFERENCE.key
    assert KERNEL.key.domain == FUSED_DOMAIN and KERNEL.key.since == 1
    assert KERNEL.capture_support() == CaptureSupport.SUPPORTED
    assert KERNEL.workspace_requirement(_meta((F32, (2, 4)), (F32, (2, 4)))) == \
        WorkspaceRequirement.NONE
    assert not audit_capture(gated.KERNELS)


def test_the_promise_is_float32s_bound_and_one_ulp_of_narrow_floats():
    assert KERNEL.parity_for(F32) == gated.SILU_MUL_PARITY == \
        Parity.tolerance(rtol=2.0 ** -20, atol=2.0 ** -143)
    assert KERNEL.parity_for(F16) == Parity.tolerance(rtol=2.0 ** -10, atol=2.0 ** -24)
    assert KERNEL.parity_for(BF16) == Parity.tolerance(rtol=2.0 ** -7, atol=2.0 ** -126)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_binds_a_symbol_that_gated_cu_instantiates(dtype):
    names = {f"silu_mul_{s}" for s in re.findall(r"^EP_SILU_MUL\(\w+, (\w+)\)$",
                                                   SOURCE.read_text(), re.MULTILINE)}
    meta = _meta((dtype, (1, 1, 4864)), (dtype, (1, 1, 4864)))
    assert KERNEL.supports(meta)
    bound = KERNEL.bind(meta)
    assert check_kernel(bound) is None
    assert bound.symbol in names
    assert bound.parity == KERNEL.parity_for(dtype)
    assert bound.infer_outputs(meta) == [TensorSpec(dtype, (1, 1, 4864))]


def test_infer_outputs_is_gs_spec_symbolic_dims_included():
    meta = _meta((BF16, ("b", "s", 4864)), (BF16, ("b", "s", 4864)))
    assert KERNEL.supports(meta)
    assert KERNEL.infer_outputs(meta) == [TensorSpec(BF16, ("b", "s", 4864))]


@pytest.mark.parametrize("specs,why", [
    (((np.float64, (4,)), (np.float64, (4,))), "G dtype float64 is not one of"),
    (((np.int32, (4,)), (np.int32, (4,))), "G dtype int32 is not one of"),
    (((F32, (4,)), (F16, (4,))), "input U is float16 but G is float32"),
    (((F32, (2, 8)), (F32, (2, 9))), "dim 1 is 8 and 9"),
    (((F32, (2, 8)), (F32, (8,))), "ranks 2 and 1 differ"),
    (((F32, (4, 8)), (F32, (1, 8))), "does not broadcast"),
    (((F32, (4,)),), "SiluMul takes 2 inputs (G, U), got 1"),
    (((F32, (4,)), None), "input U is not a tensor of known dtype and rank"),
], ids=["float64", "int32", "mixed", "dim", "rank", "broadcast", "one_input", "unknown"])
def test_what_the_kernel_cannot_run_is_declined_with_the_reason(specs, why):
    verdict = KERNEL.supports(_meta(*specs))
    assert not verdict and why in verdict.reason


def test_symbolic_dims_are_left_to_the_run():
    assert KERNEL.supports(_meta((F16, ("n", 8)), (F16, ("m", 8))))
    assert not KERNEL.supports(_meta((F16, ("n", 8)), (F16, ("n", 9))))


# ---------------------------------------------------------------- host: launches


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_aligned_pointers_take_the_flat_grid_and_misaligned_ones_the_element_loop(dtype):
    n = 4864
    bound = KERNEL.bind(_meta((dtype, (n,)), (dtype, (n,))))
    a = np.zeros(n, dtype)
    size = dtype.itemsize
    base = 1 << 20
    aligned = [_Tensor(base, a), _Tensor(base + 4 * 16 * n, a)]
    y = _Tensor(base + 8 * 16 * n, a)
    want = flat_geometry(n, [(t.ptr, size, False) for t in aligned], (y.ptr, size), lambda: 0)
    assert want is not None
    per_thread = 16 // size
    assert bound.geometry(n, aligned, y) == want == ((-(-n // (per_thread * BLOCK)), 1, 1),
                                                     (BLOCK, 1, 1))
    for moved in range(3):
        ptrs = [t.ptr for t in (*aligned, y)]
        ptrs[moved] += size  # one element off a 16-byte pack
        g, u, out = (_Tensor(p, a) for p in ptrs)
        assert bound.geometry(n, [g, u], out) == launch_geometry(n)


def test_the_arguments_are_the_pointers_and_the_count():
    bound = KERNEL.bind(_meta((F32, (2, 3)), (F32, (2, 3))))
    a = np.zeros((2, 3), np.float32)
    g, u, y = _Tensor(256, a), _Tensor(512, a), _Tensor(768, a)
    assert [v for v, _ in bound.arguments(6, [g, u], y)] == [256, 512, 768, 6]
    text = SOURCE.read_text()
    assert "silu_mul_##S(const T* g, const T* u, T* y, long long n)" in text


@pytest.mark.parametrize("shapes,out,why", [
    (((2, 4), (2, 3)), (2, 4), r"G \(2, 4\) and U \(2, 3\) must have the same shape"),
    (((2, 4), (8,)), (2, 4), r"G \(2, 4\) and U \(8,\) must have the same shape"),
    (((2, 4), (2, 4)), (8,), r"output is float32 \(8,\), expected G's float32 \(2, 4\)"),
], ids=["dim", "rank", "output"])
def test_run_shapes_are_checked_before_the_launch(shapes, out, why):
    bound = KERNEL.bind(_meta((F32, ("n", "m")), (F32, ("n", "m"))))
    ctx = ExecutionContext(_meta((F32, ("n", "m")), (F32, ("n", "m"))), provider="cuda")
    g, u = (_Tensor(256 * (k + 1), np.zeros(s, np.float32)) for k, s in enumerate(shapes))
    y = _Tensor(4096, np.zeros(out, np.float32))
    with pytest.raises(NodeError, match=why) as info:
        bound.execute_with_workspace(ctx, [g, u], [y], None)
    assert info.value.node == "gate"


def test_a_dtype_other_than_the_bound_one_is_refused():
    bound = KERNEL.bind(_meta((F16, (4,)), (F16, (4,))))
    ctx = ExecutionContext(_meta((F16, (4,)), (F16, (4,))), provider="cuda")
    g = _Tensor(256, np.zeros(4, np.float16))
    u = _Tensor(512, np.zeros(4, np.float32))
    with pytest.raises(NodeError, match="input U is float32, the node was placed for float16"):
        bound.execute_with_workspace(ctx, [g, u], [_Tensor(768, np.zeros(4, np.float16))], None)


# ---------------------------------------------------------------- GPU: one node on the device


def _device(a: np.ndarray, allocator, stream, offset: int = 0) -> Any:
    """``a`` on the device, ``offset`` elements into its allocation (1 misaligns a pack)."""
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    flat = np.zeros(a.size + offset, a.dtype)
    flat[offset:] = a.reshape(-1)
    t = DeviceTensor.from_numpy(flat, allocator, stream, holder="test")
    return t.view(a.dtype, a.shape, offset * a.dtype.itemsize)


def run_cuda(g: np.ndarray, u: np.ndarray, stream, allocator, *, offsets=(0, 0),
             out_offset: int = 0, bound: Any = None) -> np.ndarray:
    """The bound CUDA kernel's output for host ``g`` and ``u`` (views ``offsets`` elements
    into their allocations, the output ``out_offset`` into its own)."""
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    meta = _meta((g.dtype, g.shape), (u.dtype, u.shape))
    verdict = KERNEL.supports(meta)
    assert verdict, verdict.reason
    bound = bound or KERNEL.bind(meta)
    (spec,) = bound.infer_outputs(meta)
    inputs = [_device(a, allocator, stream, o) for a, o in zip((g, u), offsets)]
    item = np.dtype(spec.dtype).itemsize
    block = allocator.allocate(max(spec.nbytes + out_offset * item, 1), Role.ACTIVATIONS,
                               "test")
    y = DeviceTensor(block.ptr + out_offset * item, spec.dtype, spec.shape, 0, owner=block)
    bound.execute_with_workspace(ExecutionContext(meta, stream=stream, provider="cuda"),
                                 inputs, [y], None)
    return y.numpy(stream)


def assert_kept(what: str, g: np.ndarray, u: np.ndarray, got: np.ndarray) -> None:
    """``got`` keeps the kernel's promise for ``g.dtype`` against cpu_reference."""
    with np.errstate(all="ignore"):
        want = reference(g, u)
    promise = KERNEL.parity_for(g.dtype)
    verdict = judge(got, want, promise)
    if verdict.kept:
        return
    gf, uf = g.reshape(-1).astype(np.float64), u.reshape(-1).astype(np.float64)
    x, r = got.reshape(-1).astype(np.float64), want.reshape(-1).astype(np.float64)
    with np.errstate(all="ignore"):
        off = ~((x == r) | (np.isnan(x) & np.isnan(r))
                | (np.abs(x - r) <= promise.atol + promise.rtol * np.abs(r)))
    rows = [f"  [{i}] g={gf[i]!r} u={uf[i]!r} got={x[i]!r} want={r[i]!r}"
            for i in np.nonzero(off)[0][:8]]
    pytest.fail(f"{what}: promise {promise} broken: {verdict.reason}\n" + "\n".join(rows))


def _values(dtype: np.dtype, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gate and up activations over several scales (the gate reaching the -87 tail)."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 4.0, 30.0], n)
    u = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 100.0], n)
    return g.astype(dtype), u.astype(dtype)


#: the pack widths (4 float32, 8 float16 elements) and tails, a Qwen2.5-0.5B MLP row, and a
#: size of several grid-stride steps of a one-wave grid
SIZES = [1, 7, 8, 9, 33, 4864, 1 << 20]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sizes_keep_the_promise(dtype, stream, allocator):
    for n in SIZES:
        g, u = _values(dtype, n, n)
        assert_kept(f"n={n}", g, u, run_cuda(g, u, stream, allocator))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_misaligned_views_run_the_element_loop_alike(dtype, stream, allocator):
    g, u = _values(dtype, 4099, 3)
    aligned = run_cuda(g, u, stream, allocator)
    assert_kept("aligned", g, u, aligned)
    for offsets, out in (((1, 0), 0), ((0, 1), 0), ((0, 0), 1), ((1, 1), 1)):
        got = run_cuda(g, u, stream, allocator, offsets=offsets, out_offset=out)
        # the flat path and the element loop apply one element function
        assert got.tobytes() == aligned.tobytes(), (offsets, out)


#: |g| up to 1e4, both exp underflows (float32 at -87 / -104, float64 at -745), the float16
#: and float32 limits, signed zeros, subnormals, infinities and NaN
G_EDGES = [0.0, -0.0, 1e-40, -1e-40, 0.5, -0.5, 16.0, 17.0, -17.0, 30.0, -30.0, 86.9, -86.9,
           87.0, -87.0, -87.1, 88.0, -88.0, -104.0, -150.0, -700.0, -746.0, 1e3, -1e3, 1e4,
           -1e4, 65504.0, -65504.0, 3e38, -3e38, np.inf, -np.inf, np.nan]
U_EDGES = [1.0, -1.0, 0.0, -0.0, 2.5, 1e-40, 1e-30, 1e30, -3e38, np.inf, -np.inf, np.nan]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ieee_specials_are_the_references(dtype, stream, allocator):
    g, u = np.meshgrid(np.array(G_EDGES), np.array(U_EDGES), indexing="ij")
    with np.errstate(over="ignore"):
        g, u = g.astype(dtype), u.astype(dtype)
    assert_kept("specials", g, u, run_cuda(g, u, stream, allocator))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_the_tail_below_minus_87_keeps_its_precision(dtype, stream, allocator):
    """exp(g) is subnormal in float32 there, but g * sigmoid(g) * u is not for a large u."""
    g = np.linspace(-220.0, -80.0, 40_001).astype(dtype)
    for scale in (3e38, 1.0, 1e-30):
        u = np.full_like(g, scale)
        assert_kept(f"u={scale}", g, u, run_cuda(g, u, stream, allocator))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_results_at_the_overflow_threshold_round_like_the_reference(dtype, stream, allocator):
    """|y| near T's largest finite value: inf exactly where the reference overflows."""
    top = float(ml_dtypes.finfo(dtype).max)
    rng = np.random.default_rng(7)
    g = rng.uniform(0.0, 40.0, 200_000).astype(dtype)
    g[:1000] = np.float32(18.0)
    with np.errstate(all="ignore"):
        # u = top / silu(g), nudged by up to a few hundred float32 ulps either way
        silu = g.astype(np.float64) / (1 + np.exp(-g.astype(np.float64)))
        u = top / silu * (1 + rng.uniform(-3e-5, 3e-5, g.size))
        u = u.astype(dtype)
    if dtype == F16:
        g[-1], u[-1] = 18.0, 3640.0  # float32 g * u is 65520, the tie; exact y is below it
    got = run_cuda(g, u, stream, allocator)
    assert np.isinf(got).any() and np.isfinite(got).any()
    assert_kept("overflow threshold", g, u, got)


@pytest.mark.cuda
def test_every_float16_gate_keeps_the_promise(stream, allocator):
    g = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    for uval in (1.0, -0.3, 2.0 ** -14, 6e-8, 1000.0, 65504.0):
        u = np.full_like(g, uval)
        assert_kept(f"u={uval}", g, u, run_cuda(g, u, stream, allocator))


@pytest.mark.cuda
def test_a_bound_node_replays_its_launch_on_new_data_and_takes_a_second_shape(stream,
                                                                               allocator):
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda import copies
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    g, u = _values(F32, 4864, 9)
    meta = _meta((F32, ("n",)), (F32, ("n",)))
    bound = KERNEL.bind(meta)
    ctx = ExecutionContext(meta, stream=stream, provider="cuda")
    inputs = [DeviceTensor.from_numpy(a, allocator, stream, holder="test") for a in (g, u)]
    block = allocator.allocate(g.nbytes, Role.ACTIVATIONS, "test")
    y = DeviceTensor(block.ptr, F32, g.shape, 0, owner=block)
    bound.execute_with_workspace(ctx, inputs, [y], None)
    first = y.numpy(stream)
    assert_kept("first run", g, u, first)
    # same pointers and shapes: the prebuilt launch runs again and reads the new contents
    g2, u2 = _values(F32, 4864, 10)
    for t, a in zip(inputs, (g2, u2)):
        copies.copy_htod(t.ptr, a, stream)
    bound.execute_with_workspace(ctx, inputs, [y], None)
    assert_kept("replay", g2, u2, y.numpy(stream))
    g3, u3 = _values(F32, 33, 11)
    assert_kept("second shape", g3, u3, run_cuda(g3, u3, stream, allocator, bound=bound))


# ---------------------------------------------------------------- GPU: through a session


def _plugins() -> list[KernelPlugin]:
    """The gated kernels on both providers, where the built-in modules do not register them."""
    kernels = []
    if ref_gated not in family_modules():
        kernels += [(k, "cpu_reference") for k in ref_gated.KERNELS]
    if gated not in kernel_modules():
        kernels += [(k, "cuda") for k in gated.KERNELS]
    return [KernelPlugin(kernels, name="gated_under_test")] if kernels else []


def _fused_model(dtype: np.dtype, shape: tuple[int, ...]) -> onnx.ModelProto:
    node = helper.make_node("SiluMul", ["g", "u"], ["y"], domain=FUSED_DOMAIN, name="gate")
    vi = [helper.make_tensor_value_info(n, onnx_elem_type(dtype), list(shape))
          for n in ("g", "u")]
    graph = helper.make_graph([node], "silu_mul", vi, [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION,
                             opset_imports=[helper.make_opsetid("", ORACLE_OPSET),
                                            helper.make_opsetid(FUSED_DOMAIN, 1)])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_session_places_the_node_on_cuda_and_keeps_the_promise(dtype, cuda_device):
    from onnx_ep.testing.parity import compare

    g, u = _values(dtype, 2 * 4864, 11)
    shape = (2, 1, 4864)
    report = compare(_fused_model(dtype, shape), {"g": g.reshape(shape), "u": u.reshape(shape)},
                     provider="cuda", plugins=_plugins())
    assert report.ok, report
    assert dict(report.placement) == {"cuda": 1}
