"""Host-side logic of the CUDA onnx_ep.fused kernels (no GPU): RotaryHalf's supports,
infer_outputs, promise, the symbols it binds (present in rotary.cu), its launch geometry,
and the kernel's reads replayed on the host from the very arguments it would launch with."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    TensorSpec,
    WorkspaceRequirement,
    check_kernel,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference import fused as ref_fused
from onnx_ep.providers.cpu_reference.numerics import round_from_float64
from onnx_ep.providers.cuda.kernels import fused
from onnx_ep.providers.cuda.kernels.base import MAX_DIMS, Geo
from onnx_ep.providers.cuda.kernels.fused import rotary_geometry
from onnx_ep.testing import audit_capture

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
SOURCE = Path(fused.__file__).with_name("rotary.cu")
(KERNEL,) = fused.KERNELS


def _meta(*specs) -> NodeMeta:
    """RotaryHalf over ``(dtype, shape)`` specs (``None`` for a non-tensor input)."""
    inputs = tuple(None if s is None else TensorSpec(*s) for s in specs)
    return NodeMeta(name="rope", op_type="RotaryHalf", domain=FUSED_DOMAIN, opset=1, attrs={},
                    inputs=inputs, input_names=("x", "cos", "sin")[:len(inputs)],
                    output_names=("y",))


class _Tensor:
    """A DeviceTensor stand-in: a host array behind a fake pointer."""

    def __init__(self, ptr: int, array: np.ndarray) -> None:
        self.ptr, self.array = ptr, array
        self.dtype, self.shape = array.dtype, tuple(array.shape)
        self.size, self.device = array.size, 0


# ---------------------------------------------------------------- the protocol


def test_the_kernel_keeps_the_protocol_in_the_fused_domain():
    assert check_kernel(KERNEL) is None
    assert KERNEL.key == ref_fused.KERNELS[0].key
    assert KERNEL.key.domain == FUSED_DOMAIN and KERNEL.key.since == 1
    assert KERNEL.capture_support().supported
    assert KERNEL.workspace_requirement(_meta((F32, (2, 4)))) == WorkspaceRequirement.NONE
    assert not audit_capture(fused.KERNELS)


@pytest.mark.parametrize("dtype", [F32, np.dtype(np.float16), BF16], ids=str)
def test_every_dtype_binds_an_exact_symbol_that_rotary_cu_instantiates(dtype):
    names = {f"rotary_half_{s}" for s in re.findall(r"^EP_ROTARY\(\w+, (\w+)\)$",
                                                     SOURCE.read_text(), re.MULTILINE)}
    assert KERNEL.parity_for(dtype) == Parity.EXACT
    meta = _meta((dtype, (1, 14, 1, 64)), (dtype, (1, 1, 1, 64)), (dtype, (1, 1, 1, 64)))
    assert KERNEL.supports(meta)
    bound = KERNEL.bind(meta)
    assert check_kernel(bound) is None
    assert bound.symbol in names and bound.parity == Parity.EXACT
    assert bound.infer_outputs(meta) == [TensorSpec(dtype, (1, 14, 1, 64))]


def test_the_kernel_signature_takes_the_arguments_the_host_packs():
    text = SOURCE.read_text()
    (params,) = re.findall(r'extern "C" __global__ void rotary_half_##S\(([^)]*)\)', text)
    x = _Tensor(16, np.zeros((2, 8), np.float32))
    args = KERNEL.bind(_meta(*((F32, (2, 8)),) * 3)).arguments(16, [x, x, x], x)
    assert len(args) == params.count(",") + 1 == 11
    assert [t is None for _, t in args] == ["Geo" in p for p in params.split(",")]


# ---------------------------------------------------------------- supports


def test_symbolic_dims_are_accepted_and_infer_x_spec():
    meta = _meta((F32, ("b", 14, "s", 64)), (F32, ("s", 64)), (F32, (1, 1, "s", 64)))
    assert KERNEL.supports(meta)
    assert KERNEL.infer_outputs(meta) == [TensorSpec(F32, ("b", 14, "s", 64))]


@pytest.mark.parametrize("specs,why", [
    (((np.float64, (2, 8)),) * 3, "X dtype float64 is not one of bfloat16, float16, float32"),
    (((np.int32, (2, 8)),) * 3, "X dtype int32 is not one of"),
    (((F32, (2, 8)), (np.float16, (8,)), (F32, (8,))), "input cos is float16 but X is float32"),
    (((F32, (2, 7)), (F32, (7,)), (F32, (7,))), "(D=7) must be even"),
    (((F32, ("s", 7)), (F32, (7,)), (F32, (7,))), "(D=7) must be even"),
    (((F32, (2, 8)), (F32, (3, 8)), (F32, (8,))), "cos of shape (3, 8) does not broadcast"),
    (((F32, ("s", 8)), (F32, (4,)), (F32, (8,))), "cos of shape (4,) does not broadcast"),
    (((F32, (2, 8)), (F32, (8,)), (F32, (1, 2, 8))), "its rank 3 exceeds X's 2"),
    (((F32, ()),) * 3, "X must have rank >= 1"),
    (((F32, ("a",) * 9 + (8,)),) * 3, "rank 10 with symbolic dims"),
    (((F32, (2, 8)), None, (F32, (8,))), "input cos is not a tensor"),
    (((F32, (2, 8)), (F32, (8,))), "takes 3 inputs"),
])
def test_what_cannot_run_is_declined_with_the_reason(specs, why):
    support = KERNEL.supports(_meta(*specs))
    assert not support and why in support.reason, support.reason


def test_more_dims_than_the_geometry_holds_are_declined():
    x = (2,) * 9 + (4,)                                   # 9 + 1 pair dims, none mergeable
    cos = tuple(1 if k % 2 else 2 for k in range(9)) + (4,)
    with pytest.raises(ValueError, match=f"need 10 dims after coalescing; the kernel takes "
                                         f"{MAX_DIMS}"):
        rotary_geometry(x, cos, cos)
    assert "after coalescing" in KERNEL.supports(_meta((F32, x), (F32, cos), (F32, cos))).reason
    # the same rank coalesces when the tables do not alternate
    assert KERNEL.supports(_meta((F32, x), (F32, x[-3:]), (F32, x)))


# ---------------------------------------------------------------- geometry


def test_qwen_decode_reads_one_row_of_the_table_for_every_head():
    g = rotary_geometry((1, 14, 1, 64), (1, 1, 1, 64), (1, 1, 1, 64))
    assert (g.pairs, g.half, g.sizes, g.cos_strides, g.cos_step) == (14 * 32, 32, (14, 32),
                                                                     (0, 1), 32)
    assert g.shared


def test_geometry_coalesces_what_runs_together_and_keeps_the_d_stride_apart():
    # equal shapes: rows merge (120 = 40 * 3, 40 = 8 * 5), the pair dim stays: stride 8 != 4
    g = rotary_geometry((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8))
    assert (g.sizes, g.cos_strides, g.cos_step) == ((30, 4), (8, 1), 4)
    g = rotary_geometry((2, 3, 5, 8), (2, 1, 5, 8), (5, 8))
    assert g.sizes == (2, 3, 5, 4) and g.cos_strides == (40, 0, 8, 1)
    assert g.sin_strides == (0, 0, 8, 1) and not g.shared
    g = rotary_geometry((2, 3, 5, 8), (5, 1), (5, 1))           # D broadcast: no step
    assert (g.sizes, g.cos_strides, g.cos_step) == ((6, 5, 4), (0, 1, 0), 0)
    cos_geo, _ = g.geos()
    assert isinstance(cos_geo, Geo) and cos_geo.dims() == ([6, 5, 4], [0, 1, 0])


def _offsets(p: np.ndarray, sizes, strides) -> np.ndarray:
    """ep_geo.cuh's geo_offset of each linear index in ``p``."""
    off, i = np.zeros_like(p), p.copy()
    for n, s in zip(reversed(sizes), reversed(strides)):
        off += (i % n) * s
        i //= n
    return off


def _replay(args, arrays: dict[int, np.ndarray], dtype) -> None:
    """What ``rotary_half_<suffix>(*args)`` writes, thread by thread (numerics as the
    reference: the GPU tests hold the device's to them)."""
    (xp, _), (cp, _), (sp, _), (yp, _), (pairs, _), (half, _), (cg, _), (sg, _), \
        (cos_step, _), (sin_step, _), (shared, _) = args
    x, c, s, y = (arrays[p].reshape(-1) for p in (xp, cp, sp, yp))
    p = np.arange(pairs, dtype=np.int64)
    r = p // half
    lo = p + r * half
    hi = lo + half
    oc = _offsets(p, *cg.dims())
    os = oc if shared else _offsets(p, *sg.dims())
    x64, c64, s64 = (a.astype(np.float64) for a in (x, c, s))
    with np.errstate(all="ignore"):
        y[lo] = round_from_float64(x64[lo] * c64[oc] + (-x64[hi]) * s64[os], dtype)
        y[hi] = round_from_float64(x64[hi] * c64[oc + cos_step] + x64[lo] * s64[os + sin_step],
                                   dtype)


CASES = [
    ((1, 14, 1, 64), (1, 1, 1, 64), (1, 1, 1, 64)),
    ((2, 3, 5, 128), (2, 1, 5, 128), (5, 128)),
    ((2, 3, 5, 8), (2, 3, 5, 8), (3, 1, 8)),
    ((2, 3, 5, 8), (5, 1), (1, 3, 1, 8)),
    ((4, 6), (6,), (4, 1)),
    ((1, 1, 2), (2,), (1, 1)),
    ((3, 1, 2, 1, 4, 1, 2, 1, 2, 6), (2, 1, 1, 1, 2, 1, 2, 6), (6,)),
]


@pytest.mark.parametrize("dtype", [F32, np.dtype(np.float16), BF16], ids=str)
@pytest.mark.parametrize("shapes", CASES, ids=str)
def test_the_launch_arguments_read_what_numpy_broadcasts(shapes, dtype):
    rng = np.random.default_rng(len(shapes[0]))
    x, cos, sin = (rng.standard_normal(s).astype(np.float32).astype(dtype) for s in shapes)
    y = np.zeros(x.shape, dtype)
    tensors = [_Tensor(16 * (k + 1), a) for k, a in enumerate((x, cos, sin, y))]
    bound = KERNEL.bind(_meta(*((dtype, s) for s in shapes)))
    args = bound.arguments(y.size, tensors[:3], tensors[3])
    assert bound.geometry(y.size, tensors[:3], tensors[3])[0][0] * 256 >= y.size // 2
    _replay(args, {t.ptr: t.array for t in tensors}, dtype)
    want = ref_fused.RotaryHalf().run(ExecutionContext(_meta()), x, cos, sin)
    assert y.tobytes() == want.tobytes()


# ---------------------------------------------------------------- run-time checks


@pytest.mark.parametrize("shapes,dtypes,why", [
    (((3, 5), (5,), (5,), (3, 5)), (F32,) * 4, "(D=5) must be even"),
    (((3, 8), (2, 8), (8,), (3, 8)), (F32,) * 4, "cos of shape (2, 8) does not broadcast"),
    (((3, 8), (8,), (8,), (3, 8)), (F32, F32, np.float16, F32), "input sin is float16"),
    (((3, 8), (8,), (8,), (4, 8)), (F32,) * 4, "output is float32 (4, 8), expected"),
])
def test_run_time_shapes_are_checked_before_any_launch(shapes, dtypes, why):
    meta = _meta((F32, ("s", "d")), (F32, ("d",)), (F32, ("d",)))
    arrays = [np.zeros(s, d) for s, d in zip(shapes, dtypes)]
    tensors = [_Tensor(16 * (k + 1), a) for k, a in enumerate(arrays)]
    bound = KERNEL.bind(meta)
    with pytest.raises(NodeError, match=re.escape(why)) as info:
        bound.execute_with_workspace(ExecutionContext(meta), tensors[:3], [tensors[3]], None)
    assert info.value.node == "rope"
