"""Host-side logic of the CUDA com.microsoft::MatMulNBits and GatherBlockQuantized kernels
(no GPU): registration and promises, supports(), the route and launch geometry, the
workspace, every symbol the host can pick, and each launch the kernels make replayed by a
numpy model of nbits.cu (same bit extraction, same index arithmetic, float32 sums) over a
fake device memory, compared with cpu_reference under the declared promise."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from onnx_ep import Session
from onnx_ep.core.kernel import (
    CaptureSupport,
    ExecutionContext,
    NodeMeta,
    Parity,
    TensorSpec,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cuda.kernels import nbits as nb
from onnx_ep.providers.cuda.kernels import nbits_gather as gq
from onnx_ep.providers.cuda.kernels import nbits_mma as nm
from onnx_ep.providers.cuda.kernels import quant_contrib
from onnx_ep.providers.cuda.kernels.base import BF16, suffix
from onnx_ep.testing.ulp import judge
from tests.helpers.nbits_cases import I4, U4, GbqCase, NBitsCase
from tests.helpers.nbits_replay import FakeBuffer, Memory, replay

MS = "com.microsoft"
F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
FLOATS = [F32, F16, BF16]
IDS = ["float32", "float16", "bfloat16"]
U8 = np.dtype(np.uint8)
MNB, GBQ = quant_contrib.KERNELS


# ---------------------------------------------------------------- registration and promises

def test_keys_modules_and_capture():
    from onnx_ep.providers import cuda

    assert MNB.key.domain == MS and MNB.key.op_type == "MatMulNBits" and MNB.key.since == 1
    assert GBQ.key.domain == MS and GBQ.key.op_type == "GatherBlockQuantized"
    assert quant_contrib in cuda.kernel_modules()
    assert isinstance(MNB, nb.MatMulNBits) and isinstance(GBQ, gq.GatherBlockQuantized)
    for k in (MNB, GBQ):
        assert k.capture_support() == CaptureSupport.SUPPORTED
        assert k.source == "nbits"


def test_capture_supported_kernels_keep_their_promise():
    from onnx_ep.testing import audit_capture

    found = audit_capture([MNB, GBQ])
    assert not found, "\n".join(map(str, found))


@pytest.mark.parametrize("dtype", FLOATS, ids=IDS)
def test_parity_per_dtype_and_bias(dtype):
    name = dtype.name
    plain = MNB.bind(_meta([_s(2, 64, dtype=dtype), _s(8, 2, 16), _s(8, 2, dtype=dtype)]))
    assert plain.parity == nb.NBITS_PARITY[name]
    biased = MNB.bind(_meta([_s(2, 64, dtype=dtype), _s(8, 2, 16), _s(8, 2, dtype=dtype),
                             None, None, _s(8, dtype=dtype)], names=("a", "b", "s", "", "",
                                                                      "bias")))
    assert biased.parity == nb.NBITS_BIAS_PARITY[name]
    assert biased.parity.atol >= plain.parity.atol and biased.parity.rtol == plain.parity.rtol
    assert GBQ.parity == Parity.EXACT


def test_bind_without_attributes_keeps_a_promise():
    # what tests/helpers/cuda_family.cuda_kernel does: no K, N or block_size
    meta = NodeMeta(name="n", op_type="MatMulNBits", domain="", opset=1, attrs={},
                    inputs=(TensorSpec(F16, (1,)),))
    assert MNB.bind(meta).parity == nb.NBITS_PARITY["float16"]


# ---------------------------------------------------------------- symbols

def _symbols() -> set[str]:
    src = (Path(nb.__file__).parent / "nbits.cu").read_text()
    names = set(re.findall(r'extern "C" __global__ void (\w+)\(', src))
    names |= {f"nbits_mma_b4_{s}" for s in re.findall(r"^EP_NB_MMA\(\w+, (\w+)\)$", src, re.M)}
    types = re.findall(r"^EP_NB\((\w+), (\w+)\)$", src, re.M)
    bits = re.findall(r"EP_NB_BITS\(T, S, (\d+)\)", re.search(r"#define EP_NB\(T, S\).*",
                                                              src).group(0))
    rows = re.findall(r"EP_NB_GEMV\(T, S, BITS, (\d+), (\d+), (\d+), \d+\)", src)
    for _, s in types:
        for b in bits:
            names.add(f"nbits_dequant_b{b}_{s}")
            names |= {f"nbits_gemv_b{b}_m{r}r{rb}_{s}" for r, rb, _ in rows}
    outs = re.findall(r"EP_GBQ\(DS, IT, IS, \w+, (\w+)\)", src)
    idx = re.findall(r"EP_GBQ_T\(DS, [\w ]+, (\w+)\)", src)
    for ds in re.findall(r"^EP_GBQ_I\((\w+)\)$", src, re.M):
        names |= {f"gbq_{ds}_{i}_{o}" for i in idx for o in outs}
    return names


def test_every_symbol_the_host_can_pick_is_instantiated():
    built = _symbols()
    for dtype in nb.NBITS_FLOATS:
        for bits in nb.NBITS_BITS:
            assert f"nbits_dequant_b{bits}_{suffix(dtype)}" in built
            for rows, rb in nb.GEMV_MAXU:
                assert f"nbits_gemv_b{bits}_m{rows}r{rb}_{suffix(dtype)}" in built
        assert f"nbits_scatter_b{8 * dtype.itemsize}" in built
    for data, (part, _) in gq.DATA.items():
        for i in gq.INDICES:
            for o in gq.OUTPUTS:
                assert f"gbq_{part}_{suffix(i)}_{suffix(o)}" in built
    assert {"nbits_gemv_b4_m1r1_f16", "gbq_u8_i64_f32", "nbits_scatter_b16"} <= built
    assert {rows for rows, _ in nb.GEMV_MAXU} == set(nb.GEMV_ROWS)
    for dtype in nm.MMA_FLOATS:
        assert f"nbits_mma_b4_{suffix(dtype)}" in built


def test_each_gemv_kernel_holds_the_chunks_the_host_plans():
    """MAXU of every instantiation is what the host's GEMV_MAXU says (cpt never exceeds it)."""
    src = (Path(nb.__file__).parent / "nbits.cu").read_text()
    built = {(int(r), int(rb)): int(u) for r, rb, u in
             re.findall(r"EP_NB_GEMV\(T, S, BITS, (\d+), (\d+), (\d+), \d+\)", src)}
    assert built == nb.GEMV_MAXU


def test_struct_layouts_match_the_source():
    src = (Path(nb.__file__).parent / "nbits.cu").read_text()
    for cls, name in ((nb.NbGeo, "NbGeo"), (nm.NbMma, "NbMma"), (gq.GbqGeo, "GbqGeo")):
        body = re.search(r"struct %s \{(.*?)\};" % name, src, re.S).group(1)
        fields = re.findall(r"^\s*(long long|int) (\w+);", body, re.M)
        assert [f for _, f in fields] == [f for f, _ in cls._fields_], name
        sizes = [8 if t == "long long" else 4 for t, _ in fields]
        assert sizes == [ctypes.sizeof(t) for _, t in cls._fields_], name


def test_tensor_core_stage_sizes_match_the_source():
    """The host sizes the kernel's shared memory from the stage's #defines: the same numbers."""
    src = (Path(nb.__file__).parent / "nbits.cu").read_text()
    d = {k: v for k, v in re.findall(r"^#define (MMA_\w+) (.+)$", src, re.M)}
    env = {}
    for name in ("MMA_STAGE", "MMA_ROWB", "MMA_SROW", "MMA_WARP_BYTES", "MMA_THREADS"):
        env[name] = eval(d[name], {}, dict(env))    # each a C expression of the ones before
    assert (env["MMA_STAGE"], env["MMA_WARP_BYTES"]) == (nm.MMA_STAGE, nm.MMA_WARP_BYTES)
    assert nm.MMA_THREADS <= env["MMA_THREADS"]     # __launch_bounds__ of the kernel
    # 16-byte stores of the codes need 16-byte aligned rows and warp regions; a lane loads
    # one unit of a stage (a row's units in 16 or 32 lanes), and the scales' rows are of odd
    # length (conflict-free reads)
    assert nm.MMA_WARP_BYTES % 16 == 0 and env["MMA_ROWB"] % 16 == 0
    assert env["MMA_STAGE"] in (16, 32) and env["MMA_SROW"] % 2 == 1


# ---------------------------------------------------------------- geometry

def _plan(k, n, block=32, bits=4):
    return nb.nbits_plan(NodeMeta(name="n", op_type="MatMulNBits", domain=MS, opset=1,
                               attrs={"K": k, "N": n, "bits": bits, "block_size": block},
                               inputs=()))


@pytest.mark.parametrize("attrs", [
    {"K": 896, "N": 4864, "bits": 4, "block_size": 32}, {"K": 100, "N": 3, "block_size": 64},
    {"K": 20, "N": 7, "bits": 2, "block_size": 128}, {"K": 17, "N": 1, "bits": 8,
                                                       "block_size": 16},
    {"K": 64, "N": 4, "bits": 3, "block_size": 32}, {"K": 64, "N": 4, "block_size": 24},
    {"K": 64, "bits": 4, "block_size": 32}, {"K": 0, "N": 4, "block_size": 32},
])
def test_attribute_checks_match_the_reference(attrs):
    from onnx_ep.providers.cpu_reference import quant_contrib as ref

    meta = NodeMeta(name="n", op_type="MatMulNBits", domain=MS, opset=1, attrs=attrs,
                    inputs=())
    got, want = [], []
    for fn, out in ((nb.nbits_plan, got), (ref.nbits_plan, want)):
        try:
            p = fn(meta)
            out.append((p.k, p.n, p.bits, p.block, p.n_blocks, p.blob, p.padded_k))
        except NodeError as e:
            out.append(e.detail)
    assert got == want


@pytest.mark.parametrize("k,n,m,want", [
    # Qwen2.5-0.5B decode: up/gate, down, qkv, lm_head (4 rows of B a thread)
    (896, 4864, 1, (1, 1, 16, 2, 28, (304, 1, 1), 256, 4256)),
    (4864, 896, 1, (1, 1, 64, 3, 152, (448, 1, 1), 128, 23104)),
    (896, 1152, 1, (1, 1, 16, 2, 28, (288, 1, 1), 64, 4256)),
    (896, 151936, 1, (1, 4, 16, 2, 28, (2374, 1, 1), 256, 4256)),
    (896, 4864, 3, (4, 1, 16, 2, 28, (304, 1, 1), 256, 12768)),
    (896, 4864, 8, (8, 1, 16, 2, 28, (304, 1, 1), 256, 34048)),
    (4864, 896, 3, (4, 1, 128, 2, 152, (448, 1, 1), 256, 69312)),
])
def test_gemv_geometry_of_decode_shapes(k, n, m, want):
    g = nb.gemv_geometry(_plan(k, n), m)
    assert (g.rows, g.rb, g.tpr, g.cpt, g.chunks, g.grid, g.threads, g.shared_bytes) == want
    assert g.block == (g.threads, 1, 1) and g.threads % g.tpr == 0


def test_gemv_geometry_of_rows_longer_than_a_block_holds_at_once():
    # 8-bit K = 20480: 1280 chunks, 256 threads of 5 each, held 4 at a time: two passes
    g = nb.gemv_geometry(_plan(20480, 64, 32, 8), 1)
    assert (g.rb, g.tpr, g.cpt, g.chunks, g.threads) == (1, 256, 4, 1280, 256)
    assert nb.gemv_geometry(_plan(20480, 64, 32, 8), 2) is None     # A too large to stage


@pytest.mark.parametrize("k,n,block,bits,m,why", [
    (896, 4864, 32, 4, 9, "more rows than the gemv takes"),
    (896, 4864, 32, 4, 0, "no rows"),
    (48, 8, 16, 4, 1, "rows of 24 bytes"),
    (32, 8, 16, 2, 1, "rows of 8 bytes"),
    (4864, 896, 32, 4, 8, "A too large to stage"),
    (30000, 64, 32, 4, 1, "A too large to stage"),
])
def test_gemv_geometry_declines_to_the_gemm_route(k, n, block, bits, m, why):
    assert nb.gemv_geometry(_plan(k, n, block, bits), m) is None, why


def test_gemv_threads_per_row_and_blocks_stay_in_range():
    for k in (16, 32, 64, 200, 896, 2048, 4864, 8192, 20000):
        for n in (1, 7, 64, 1000, 20000, 200000):
            for bits in (2, 4, 8):
                plan = _plan(k, n, 16 if bits == 8 else 64, bits)
                g = nb.gemv_geometry(plan, 1)
                if g is None:
                    assert nb.row_bytes(plan) % 16 or nb.gemv_shared_bytes(plan, 1) > \
                        nb.GEMV_SMEM_MAX
                    continue
                assert 8 <= g.tpr <= 256 and g.tpr & (g.tpr - 1) == 0
                assert nb.GEMV_MIN_THREADS <= g.threads <= nb.GEMV_THREADS
                assert 1 <= g.grid[0] <= nb.GEMV_MAX_BLOCKS
                assert g.chunks * 16 == nb.row_bytes(plan)
                assert 1 <= g.cpt <= nb.GEMV_MAXU[(g.rows, g.rb)]
                # every chunk of a row is some thread's in some pass
                assert g.tpr * g.cpt * -(-g.chunks // (g.tpr * g.cpt)) >= g.chunks
                # a block covers rows; the grid, or its grid-stride loop, covers N
                assert g.grid[0] == min(nb.GEMV_MAX_BLOCKS,
                                        -(-n // (g.threads // g.tpr * g.rb)))


def test_gemm_route_layout():
    one = nb.gemm_route(_plan(896, 4864), 128, F16)
    assert (one.rows, one.chunks, one.t_bytes) == (4864, 1, 0)
    assert one.w_bytes == 4864 * 896 * 2 and one.fixed_bytes == one.w_bytes
    assert [p.n for p in one.problems()] == [4864]
    p = one.problems()[0]
    assert (p.m, p.k, p.trans_b, p.trans_a, p.dtype) == (128, 896, True, False, "float16")
    head = nb.gemm_route(_plan(896, 151936), 128, F16)
    assert head.rows % nb.DEQUANT_ROW_ALIGN == 0 and head.chunks == 5
    assert head.fixed_bytes <= nb.DEQUANT_BUDGET
    assert head.w_bytes % 256 == 0 and head.t_bytes == nb._align(128 * head.rows * 2)
    assert [p.n for p in head.problems()] == [head.rows, 151936 - 4 * head.rows]
    even = nb.gemm_route(_plan(896, 40000 * 4), 4096, BF16)
    assert even.rows >= nb.DEQUANT_ROW_ALIGN and even.problems()[0].dtype == "bfloat16"


# ---------------------------------------------------------------- supports / infer_outputs

@pytest.fixture
def cublaslt(monkeypatch):
    """cuBLASLt's bindings importable (the gemm route's supports() asks)."""
    from onnx_ep.core.kernel import Support

    monkeypatch.setattr(nb.blas, "support", lambda: Support.YES)

def _s(*shape, dtype=U8):
    return TensorSpec(dtype, shape)


def _meta(inputs, names=None, **attrs):
    attrs = {"K": 64, "N": 8, "bits": 4, "block_size": 32, **attrs}
    return NodeMeta(name="n", op_type="MatMulNBits", domain=MS, opset=1, attrs=attrs,
                    inputs=tuple(inputs),
                    input_names=tuple(names or [f"i{i}" for i in range(len(inputs))]),
                    output_names=("y",))


def _mnb(dtype=F16, a=(3, 64), zp=None, bias=None, g_idx=None):
    inputs = [_s(*a, dtype=dtype), _s(8, 2, 16), _s(8, 2, dtype=dtype), zp, g_idx, bias]
    names = ["a", "b", "s", "zp" if zp is not None else "", "g" if g_idx else "",
             "bias" if bias is not None else ""]
    while inputs and inputs[-1] is None and not names[-1]:
        inputs.pop()
        names.pop()
    return inputs, names


@pytest.mark.parametrize("dtype", FLOATS, ids=IDS)
def test_supports_float_activations_zero_points_and_bias(cublaslt, dtype):
    for zp in (None, _s(8, 1), _s(8, 2, dtype=dtype)):
        for bias in (None, _s(8, dtype=dtype)):
            inputs, names = _mnb(dtype, zp=zp, bias=bias)
            s = MNB.supports(_meta(inputs, names))
            assert s, s.reason
    x = TensorSpec(dtype, ("batch", "seq", 64))
    assert MNB.supports(_meta([x, _s(8, 2, 16), _s(16, dtype=dtype)]))


@pytest.mark.parametrize("change,why", [
    ({"a": _s(3, 64, dtype=np.float64)}, "A dtype float64"),
    ({"s": _s(8, 2, dtype=F32)}, "scales are float32"),
    ({"b": _s(8, 2, 16, dtype=np.int8)}, "B must be uint8"),
    ({"zp": _s(8, 2, dtype=np.int32)}, "zero_points must be uint8 or float16"),
    ({"g": _s(64, dtype=np.int32)}, "g_idx"),
    ({"bias": _s(8, dtype=F32)}, "bias must be float16"),
    ({"a": _s(3, 63, dtype=F16)}, "last dim of K=64"),
    ({"attrs": {"bits": 3}}, "bits=3"),
    ({"attrs": {"block_size": 24}}, "power of two"),
    ({"attrs": {"weight_prepacked": 1}}, "weight_prepacked"),
])
def test_supports_declines_with_a_reason(cublaslt, change, why):
    specs = {"a": _s(3, 64, dtype=F16), "b": _s(8, 2, 16), "s": _s(8, 2, dtype=F16),
             "zp": None, "g": None, "bias": None}
    specs.update({k: v for k, v in change.items() if k != "attrs"})
    order = ["a", "b", "s", "zp", "g", "bias"]
    names = [n if specs[n] is not None or n in "abs" else "" for n in order]
    s = MNB.supports(_meta([specs[n] for n in order], names, **change.get("attrs", {})))
    assert not s and why in s.reason, s.reason


def test_without_cublaslt_only_the_gemv_route_is_taken(monkeypatch):
    from onnx_ep.core.kernel import Support

    monkeypatch.setattr(nb.blas, "support", lambda: Support.no("no nvmath"))
    b, s = _s(8, 2, 16), _s(8, 2, dtype=F16)
    assert MNB.supports(_meta([_s(1, 3, 64, dtype=F16), b, s]))
    for a in (_s(9, 64, dtype=F16), TensorSpec(F16, ("m", 64))):
        got = MNB.supports(_meta([a, b, s]))
        assert not got and "no nvmath" in got.reason


def test_infer_outputs_replaces_k_by_n():
    assert MNB.infer_outputs(_meta([_s(2, 5, 64, dtype=BF16), _s(8, 2, 16),
                                    _s(8, 2, dtype=BF16)])) == [TensorSpec(BF16, (2, 5, 8))]
    x = TensorSpec(F16, ("b", 64))
    assert MNB.infer_outputs(_meta([x, _s(8, 2, 16), _s(8, 2, dtype=F16)])) == \
        [TensorSpec(F16, ("b", 8))]


def test_workspace_only_on_the_gemm_route(monkeypatch):
    monkeypatch.setattr(nb.blas, "workspace_bytes", lambda p, ordinal=0: 4096 + p.n)
    k, n = 896, 4864
    attrs = {"K": k, "N": n, "block_size": 32}
    b, s = _s(n, 28, 16), _s(n, 28, dtype=F16)
    decode = MNB.bind(_meta([_s(1, 1, k, dtype=F16), b, s], **attrs))
    assert decode.workspace_requirement(_meta([_s(1, 1, k, dtype=F16), b, s], **attrs)) == \
        WorkspaceRequirement.NONE
    meta = _meta([_s(1, 128, k, dtype=F16), b, s], **attrs)
    route = nb.gemm_route(_plan(k, n), 128, F16)
    assert MNB.bind(meta).workspace_requirement(meta).nbytes == route.fixed_bytes + 4096 + n
    symbolic = _meta([TensorSpec(F16, ("m", k)), b, s], **attrs)
    assert MNB.bind(symbolic).workspace_requirement(symbolic) == WorkspaceRequirement.NONE
    empty = _meta([_s(128, k, dtype=F16), _s(n, 0, 16), s], **attrs)
    assert MNB.bind(empty).workspace_requirement(empty) == WorkspaceRequirement.NONE


# ---------------------------------------------------------------- the launches, replayed

def _run(kernel, model, mem, inputs, out_spec, monkeypatch, workspace_bytes=None):
    """Bind ``kernel`` for ``model``'s node, execute it with launches recorded, return the
    recorded calls (symbol, grid, block, args, shared bytes; or blas / memset entries)."""
    node = model.graph.node[0]
    attrs = {a.name: _attr(a) for a in node.attribute}
    specs = tuple(None if t is None else TensorSpec(t.dtype, t.shape) for t in inputs)
    meta = NodeMeta(name=node.name, op_type=node.op_type, domain=node.domain, opset=1,
                    attrs=attrs, inputs=specs, input_names=tuple(node.input),
                    output_names=tuple(node.output))
    from onnx_ep.core.kernel import Support

    monkeypatch.setattr(nb.blas, "support", lambda: Support.YES)
    assert kernel.supports(meta), kernel.supports(meta).reason
    bound = kernel.bind(meta)
    calls: list[Any] = []
    monkeypatch.setattr(bound, "function", lambda symbol, tensor, source=None: symbol)
    monkeypatch.setattr(bound, "launch", lambda fn, grid, block, args, stream,
                        shared_bytes=0: calls.append((fn, grid, block, args, shared_bytes)))
    monkeypatch.setattr(nb.blas, "run", lambda problem, a, b, d, stream, ws, ws_n, *, beta=0.0,
                        ordinal=0, fit_workspace=False, **kw:
                        calls.append(("gemm", problem, a, b, d, ws, ws_n, beta)))
    monkeypatch.setattr(nb.copies, "memset_d8", lambda ptr, byte, n, stream:
                        calls.append(("memset", ptr, byte, n)))
    from onnx_ep.providers.cuda import launch

    monkeypatch.setattr(launch, "allow_dynamic_shared", lambda fn: 227 * 1024)
    monkeypatch.setattr(nb.blas, "workspace_bytes", lambda p, ordinal=0: 512)
    ws = None
    need = bound.workspace_requirement(meta).nbytes if workspace_bytes is None \
        else workspace_bytes
    if need:
        ws = WorkspaceView(FakeBuffer(mem.alloc(need)), need)
    y = mem.empty(out_spec.dtype, out_spec.shape)
    bound.execute_with_workspace(ExecutionContext(meta), list(inputs), [y], ws)
    return calls, y


def _attr(a):
    from onnx import helper

    return helper.get_attribute_value(a)


def _mnb_inputs(mem, case, b_offset=0):
    ts = []
    for name, arr in case.inputs:
        ts.append(None if arr is None else mem.tensor(arr, b_offset if name == "b" else 0))
    return ts


def _reference(model, feeds):
    sess = Session(model, providers=["cpu_reference"])
    try:
        return np.asarray(sess.run(None, feeds)[0])
    finally:
        sess.close()


def _check_mnb(case, monkeypatch, route):
    mem = Memory()
    inputs = _mnb_inputs(mem, case)
    ref = _reference(case.model, case.feeds)
    calls, y = _run(MNB, case.model, mem, inputs, TensorSpec(ref.dtype, ref.shape),
                    monkeypatch)
    kinds = [c[0] if c[0] in ("gemm", "memset") else c[0].split("_b")[0] for c in calls]
    if route in ("gemv", "mma"):
        assert kinds == [f"nbits_{route}"], kinds
    else:
        assert "gemm" in kinds and "nbits_gemv" not in kinds, kinds
    replay(mem, calls, case.dtype)
    got = mem.read(y)
    promise = MNB.bind(NodeMeta(name="n", op_type="MatMulNBits", domain=MS, opset=1,
                                attrs={}, inputs=(TensorSpec(case.dtype, (1,)),),
                                input_names=("a", "b", "s", "", "",
                                             "bias" if case.bias is not None else ""),
                                )).parity
    d = judge(got, ref, promise)
    assert d.kept, f"{d.reason} (promise {promise}, max abs {d.max_abs})"
    return calls


# ---------------------------------------------------------------- MatMulNBits replayed

@pytest.mark.parametrize("dtype", FLOATS, ids=IDS)
@pytest.mark.parametrize("bits,block", [(4, 32), (4, 16), (8, 64), (2, 128), (4, 256)])
@pytest.mark.parametrize("zp", [None, "packed", "typed"])
@pytest.mark.parametrize("m", [1, 3])
def test_gemv_model_keeps_the_promise(monkeypatch, dtype, bits, block, zp, m):
    k = 256 if block <= 128 else 512
    case = NBitsCase(k=k - (16 if block == 16 else 0), n=37, block=block, bits=bits,
                     a_shape=(m, k - (16 if block == 16 else 0)), dtype=dtype, zp=zp,
                     bias=m == 3, seed=bits * 7 + block + m)
    route = "gemv" if nb.row_bytes(_plan(case.k, case.n, block, bits)) % 16 == 0 else "gemm"
    _check_mnb(case, monkeypatch, route)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("block", [32, 64, 256])
@pytest.mark.parametrize("zp", [None, "packed"])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_tensor_core_model_keeps_the_promise(monkeypatch, dtype, block, zp, m):
    """The tensor-core route's launch (geometry, struct, pointers) replayed by a numpy model
    of its sums, as on an sm_90 device, forced on a small B: 77 rows and 15 units split over
    2 warps in whole stages (8 and 7), a partial last block (K = 512 - 32)."""
    monkeypatch.setattr(nb, "_arch", lambda ctx: 90)
    monkeypatch.setattr(nm, "MMA_MIN_WARPS", 1)
    case = NBitsCase(k=480, n=77, block=block, a_shape=(m, 480), dtype=dtype, zp=zp,
                     bias=m != 1, seed=block + m)
    calls = _check_mnb(case, monkeypatch, "mma")
    g = calls[0][3][6][0]
    assert (g.kw, g.upw, g.units, g.zp_mode) == (2, 8, 15, 0 if zp is None else 1)


@pytest.mark.parametrize("dtype,zp,bits", [(F32, None, 4), (F16, "typed", 4), (F16, None, 8)])
def test_what_the_tensor_cores_do_not_take_stays_on_the_gemv(monkeypatch, dtype, zp, bits):
    monkeypatch.setattr(nb, "_arch", lambda ctx: 90)
    monkeypatch.setattr(nm, "MMA_MIN_WARPS", 1)
    case = NBitsCase(k=256, n=37, block=32, bits=bits, a_shape=(1, 256), dtype=dtype, zp=zp,
                     seed=3)
    _check_mnb(case, monkeypatch, "gemv")


@pytest.mark.parametrize("dtype", FLOATS, ids=IDS)
@pytest.mark.parametrize("bits", [4, 8, 2])
@pytest.mark.parametrize("zp", [None, "packed", "typed"])
def test_gemm_model_keeps_the_promise(monkeypatch, dtype, bits, zp):
    case = NBitsCase(k=200, n=41, block=32, bits=bits, a_shape=(2, 64, 200), dtype=dtype,
                     zp=zp, bias=bits == 4, flat=bits == 8, seed=bits + 100)
    _check_mnb(case, monkeypatch, "gemm")


def test_gemm_route_in_chunks_scatters_every_column(monkeypatch):
    monkeypatch.setattr(nb, "DEQUANT_BUDGET", 40 * 96 * 2)
    monkeypatch.setattr(nb, "DEQUANT_ROW_ALIGN", 8)
    case = NBitsCase(k=96, n=100, block=32, a_shape=(12, 96), dtype=F16, zp="packed",
                     bias=True, seed=5)
    calls = _check_mnb(case, monkeypatch, "gemm")
    gemms = [c for c in calls if c[0] == "gemm"]
    scatters = [c for c in calls if c[0] == "nbits_scatter_b16"]
    route = nb.gemm_route(_plan(96, 100), 12, F16)
    assert route.chunks == len(gemms) == len(scatters) > 1
    assert [int(c[3][5][0]) for c in scatters] == list(range(0, 100, route.rows))


def test_decode_shape_takes_one_gemv_launch(monkeypatch):
    case = NBitsCase(k=896, n=1152, block=32, a_shape=(1, 1, 896), dtype=F16, seed=9)
    calls = _check_mnb(case, monkeypatch, "gemv")
    sym, grid, block, args, shared = calls[0]
    assert sym == "nbits_gemv_b4_m1r1_f16" and grid == (288, 1, 1) and block == (64, 1, 1)
    g = args[6][0]
    assert (g.n, g.k, g.padded_k, g.m, g.n_blocks, g.log2_block, g.row_bytes, g.chunks,
            g.tpr, g.cpt, g.zp_mode) == (1152, 896, 896, 1, 28, 5, 448, 28, 16, 2, 0)
    assert args[4][0] == 0 and args[3][0] == 0     # no bias, no zero points


@pytest.mark.parametrize("k,block,bits", [(100, 64, 4), (40, 256, 4), (20, 128, 2),
                                          (17, 64, 8)])
def test_k_not_a_multiple_of_the_block(monkeypatch, k, block, bits):
    """A partial last block; K=40 in a block of 256 leaves whole chunks of padding."""
    for m in (1, 20):
        case = NBitsCase(k=k, n=24, block=block, bits=bits, a_shape=(m, k), dtype=F32,
                         zp="typed", bias=True, seed=m + k)
        _check_mnb(case, monkeypatch, "gemv" if m == 1 else "gemm")


def test_an_omitted_projection_gives_the_bias_or_zeros(monkeypatch):
    rng = np.random.default_rng(3)
    from tests.helpers.nbits_cases import one_node

    for bias in (None, rng.standard_normal(8).astype(F16)):
        a = rng.standard_normal((3, 64)).astype(F16)
        model = one_node("MatMulNBits", [("a", a), ("b", np.zeros((8, 0, 16), np.uint8)),
                                         ("scales", np.zeros(0, F16)), ("zp", None),
                                         ("g_idx", None), ("bias", bias)],
                         ["a"], K=64, N=8, bits=4, block_size=32)
        mem = Memory()
        inputs = [mem.tensor(v) if v is not None else None
                  for v in (a, np.zeros((8, 0, 16), np.uint8), np.zeros(0, F16), None, None,
                            bias)]
        while inputs[-1] is None:
            inputs.pop()
        calls, y = _run(MNB, model, mem, inputs, TensorSpec(F16, (3, 8)), monkeypatch)
        assert [c[0] for c in calls] == (["memset"] if bias is None else ["broadcast_rows_f16"])
        replay(mem, calls, F16)
        assert mem.read(y).tobytes() == _reference(model, {"a": a}).tobytes()


def test_inputs_that_do_not_fit_raise_node_error(monkeypatch):
    case = NBitsCase(k=64, n=8, block=32, a_shape=(2, 64), dtype=F16, seed=1)
    mem = Memory()
    inputs = _mnb_inputs(mem, case)
    inputs[2] = mem.tensor(np.ones((8, 3), F16))
    with pytest.raises(NodeError, match="scales must be float16"):
        _run(MNB, case.model, mem, inputs, TensorSpec(F16, (2, 8)), monkeypatch)
    inputs = _mnb_inputs(mem, case, b_offset=4)
    with pytest.raises(NodeError, match="not 16-byte aligned"):
        _run(MNB, case.model, mem, inputs, TensorSpec(F16, (2, 8)), monkeypatch)


# ---------------------------------------------------------------- GatherBlockQuantized

GBQ_CASES = [
    ((16, 64), "int4", 0, 1, 16, True, np.float32),
    ((16, 64), "uint4", 0, -1, 32, False, np.float16),
    ((40, 32), "int4", 1, 0, 16, True, BF16),
    ((3, 50, 8), "uint4", 1, 1, 16, True, np.float32),   # last block partial
    ((3, 5, 48), "int4", -1, 2, 32, False, np.float16),
    ((8, 6, 20), "int4", 0, 2, 16, True, BF16),
    ((12, 64), "uint8", 0, 1, 32, False, np.float16),
    ((12, 64), "uint8", 0, 1, 16, True, np.float32),
    ((5, 4, 32), "uint8", 0, 2, 16, True, BF16),
]


@pytest.mark.parametrize("shape,data,ga,qa,block,zp,sdt,bits", [
    (*case, bits) for case in GBQ_CASES for bits in ((4, 8, 2) if case[1] == "uint8" else (4,))])
def test_gbq_model_matches_the_reference_bytes(monkeypatch, shape, data, ga, qa, block, zp,
                                               sdt, bits):
    dim = shape[ga % len(shape)]
    idx = np.array([[0, dim - 1, -1], [-dim, dim, -dim - 1]], np.int64)
    case = GbqCase(shape, data, ga, qa, block, zp=zp, scale_dtype=sdt, indices=idx, bits=bits,
                   seed=len(shape) + block)
    ref = _reference(case.model, case.feeds)
    mem = Memory()
    inputs = [mem.tensor(case.data), mem.tensor(case.indices), mem.tensor(case.scales)]
    if case.zp is not None:
        inputs.append(mem.tensor(case.zp))
    calls, y = _run(GBQ, case.model, mem, inputs, TensorSpec(ref.dtype, ref.shape),
                    monkeypatch)
    (sym,) = [c[0] for c in calls]
    assert sym == f"gbq_{gq.DATA[case.data.dtype][0]}_i64_{suffix(ref.dtype)}"
    replay(mem, calls, None)
    got = mem.read(y)
    assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes()


def test_gbq_tied_embedding_int32_indices(monkeypatch):
    idx = np.array([[1, 5, 7]], np.int32)
    case = GbqCase((9, 896), "uint8", 0, 1, 32, indices=idx, scale_dtype=np.float16)
    ref = _reference(case.model, case.feeds)
    mem = Memory()
    inputs = [mem.tensor(case.data), mem.tensor(case.indices), mem.tensor(case.scales)]
    calls, y = _run(GBQ, case.model, mem, inputs, TensorSpec(ref.dtype, ref.shape),
                    monkeypatch)
    assert calls[0][0] == "gbq_u8_i32_f16" and ref.shape == (1, 3, 896)
    replay(mem, calls, None)
    assert mem.read(y).tobytes() == ref.tobytes()


def _gmeta(data, indices, scales, zp=None, **attrs):
    inputs = [data, indices, scales] + ([zp] if zp is not None else [])
    return NodeMeta(name="g", op_type="GatherBlockQuantized", domain=MS, opset=1,
                    attrs=attrs, inputs=tuple(inputs),
                    input_names=tuple(f"i{i}" for i in range(len(inputs))),
                    output_names=("y",))


def test_gbq_supports_and_infer_outputs():
    i64 = TensorSpec(np.int64, (2, 3))
    m = _gmeta(_s(10, 32), i64, _s(10, 2, dtype=F16), block_size=32, bits=4)
    assert GBQ.supports(m)
    assert GBQ.infer_outputs(m) == [TensorSpec(F16, (2, 3, 64))]
    m = _gmeta(TensorSpec(I4, (10, 64)), i64, _s(10, 4, dtype=BF16), block_size=16)
    assert GBQ.supports(m) and GBQ.infer_outputs(m) == [TensorSpec(BF16, (2, 3, 64))]
    m = _gmeta(TensorSpec(U4, (6, 64)), i64, _s(1, 64, dtype=F32), gather_axis=1,
               quantize_axis=0, block_size=16)
    assert GBQ.supports(m) and GBQ.infer_outputs(m) == [TensorSpec(F32, (6, 2, 3))]


@pytest.mark.parametrize("meta,why", [
    (_gmeta(_s(10, 32, dtype=np.int8), TensorSpec(np.int64, (2,)), _s(10, 2, dtype=F16)),
     "data dtype int8"),
    (_gmeta(_s(10, 32), TensorSpec(np.int16, (2,)), _s(10, 2, dtype=F16)), "int32 or int64"),
    (_gmeta(_s(10, 32), TensorSpec(np.int64, (2,)), _s(10, 2, dtype=np.float64)),
     "scales dtype float64"),
    (_gmeta(_s(10, 32), TensorSpec(np.int64, (2,)), _s(10, 2, dtype=F16), _s(10, 1),
            block_size=32, bits=4, gather_axis=1), "gather_axis 0"),
    (_gmeta(_s(10, 32), TensorSpec(np.int64, (2,)), _s(10, 3, dtype=F16), block_size=32),
     "scales must have shape (10, 2)"),
    (_gmeta(_s(10, 32), TensorSpec(np.int64, (2,)), _s(10, 2, dtype=F16), _s(10, 2),
            block_size=32), "zero_points must have shape (10, 1)"),
    (_gmeta(_s(10, 32), TensorSpec(np.int64, (2,)), _s(10, 2, dtype=F16),
            TensorSpec(I4, (10, 2)), block_size=32), "zero_points must have data's dtype"),
    (_gmeta(_s(10, 32), TensorSpec(np.int64, (2,)), _s(10, 2, dtype=F16), block_size=24),
     "power of two"),
    (_gmeta(_s(10, 32), TensorSpec(np.int64, (2,)), _s(10, 2, dtype=F16), quantize_axis=5),
     "out of range"),
])
def test_gbq_declines_with_a_reason(meta, why):
    s = GBQ.supports(meta)
    assert not s and why in s.reason, s.reason


def test_many_rows_of_b_take_four_a_thread_with_two_chunks_each():
    # 20 chunks a row: 8 threads of 3 for a narrow B, 16 of 2 (held for 4 rows) for a wide one
    narrow = nb.gemv_geometry(_plan(320, 77, 64, 8), 1)
    assert (narrow.rb, narrow.tpr, narrow.cpt) == (1, 8, 3)
    wide = nb.gemv_geometry(_plan(320, 40000, 64, 8), 1)
    assert (wide.rb, wide.tpr, wide.cpt) == (nb.GEMV_RB, 16, 2)


@pytest.mark.parametrize("k,n,m,want", [
    # Qwen2.5-0.5B decode: up/gate, down, qkv, lm_head: (kw, units a warp, blocks, smem)
    (896, 151936, 1, (1, 28, 2374, 4 * 6528 + 1792 + 2048)),
    (896, 151936, 8, (1, 28, 2374, 4 * 6528 + 8 * 1792 + 2048)),
    (896, 40000, 1, (1, 28, 625, 4 * 6528 + 1792 + 2048)),
    # fewer rows: K split over 4 warps, one part of 8 units each
    (896, 4864, 1, (4, 8, 304, 4 * 6528 + 1792 + 2048)),
    (896, 1152, 1, (4, 8, 72, 4 * 6528 + 1792 + 2048)),
    # 56 groups: K split over 8 warps, blocks of 256 threads
    (4864, 896, 1, (8, 24, 56, 8 * 6528 + 2 * 4864 + 4096)),
    (896, 896, 1, (4, 8, 56, 4 * 6528 + 1792 + 2048)),
    # 32 groups x 4 warps (28 units leave no fifth part): too few, the float32 gemv
    (896, 512, 1, None),
])
def test_tensor_core_gemv_geometry_of_decode_shapes(k, n, m, want):
    g = nm.mma_geometry(_plan(k, n), m, F16, 0, 90)
    if want is None:
        assert g is None and nb.gemv_geometry(_plan(k, n), m) is not None
        return
    assert (g.kw, g.upw, g.grid[0], g.shared_bytes) == want
    assert g.block == (max(nm.MMA_THREADS, 32 * g.kw), 1, 1)


@pytest.mark.parametrize("change,why", [
    (dict(arch=75), "no mma.m16n8k16 before sm_80"),
    (dict(dtype=np.float32), "float32 A"),
    (dict(zp=2), "typed zero points"),
    (dict(bits=8), "8-bit codes"),
    (dict(block=16), "blocks of 16"),
    (dict(k=880), "K not a multiple of 32"),
    (dict(m=9), "more than 8 rows"),
    (dict(k=32000, m=2), "A too large to stage"),
])
def test_tensor_core_gemv_declines(change, why):
    c = dict(k=896, n=151936, block=32, bits=4, m=1, dtype=F16, zp=0, arch=90) | change
    plan = _plan(c["k"], c["n"], c["block"], c["bits"])
    assert nm.mma_geometry(plan, c["m"], c["dtype"], c["zp"], c["arch"]) is None, why


def test_tensor_core_gemv_is_off_when_asked(monkeypatch):
    assert nm.mma_geometry(_plan(896, 151936), 1, F16, 0, 90) is not None
    monkeypatch.setattr(nm, "MMA_ROUTE", False)
    assert nm.mma_geometry(_plan(896, 151936), 1, F16, 0, 90) is None


def test_tensor_core_gemv_with_few_rows_splits_k_over_warps(monkeypatch):
    monkeypatch.setattr(nm, "MMA_MIN_WARPS", 1)
    g = nm.mma_geometry(_plan(896, 4864), 1, F16, 0, 90)
    # 28 units: 4 warps of 8 units each (8 warps would leave some with none)
    assert (g.kw, g.upw, g.grid[0]) == (4, 8, 304)
    # 152 units over 8 warps, in a block of 256 threads
    g = nm.mma_geometry(_plan(4864, 896), 1, F16, 0, 90)
    assert (g.kw, g.upw, g.grid[0], g.block) == (8, 24, 56, (256, 1, 1))
    # eight rows of a 4096-wide A leave 8 warps' stages no room: 4 warps of 128 threads
    g = nm.mma_geometry(_plan(4096, 896), 8, F16, 0, 90)
    assert (g.kw, g.upw, g.block) == (4, 32, (128, 1, 1))
    assert g.shared_bytes == nm.mma_shared_bytes(8, 4096, 128) <= nm.SMEM_MAX
    monkeypatch.setattr(nm, "MMA_THREADS", 256)
    g = nm.mma_geometry(_plan(896, 4864), 1, F16, 0, 90)
    assert (g.kw, g.upw, g.grid[0], g.block) == (4, 8, 152, (256, 1, 1))
    g = nm.mma_geometry(_plan(4864, 896), 1, F16, 0, 90)
    assert (g.kw, g.upw, g.grid[0]) == (8, 24, 56)


def test_the_benchmark_forces_either_decode_route(monkeypatch):
    """benchmarks/nbits.py --route: the float32 gemv or the tensor cores wherever they apply
    (the route tables of docs/PERFORMANCE.md are timed that way)."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "nbits.py"
    spec = importlib.util.spec_from_file_location("bench_nbits", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name in ("MMA_ROUTE", "MMA_MIN_WARPS"):
        monkeypatch.setattr(nm, name, getattr(nm, name))   # restored after the test
    narrow, lm_head = _plan(896, 512), _plan(896, 151936)
    assert nm.mma_geometry(narrow, 1, F16, 0, 90) is None           # auto: the gemv
    bench.force_route("mma")
    assert nm.mma_geometry(narrow, 1, F16, 0, 90) is not None
    bench.force_route("gemv")
    assert nm.mma_geometry(lm_head, 1, F16, 0, 90) is None
    assert nb.gemv_geometry(lm_head, 1) is not None
