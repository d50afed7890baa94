"""GPU parity of CUDA com.microsoft::MatMulNBits (gemv route for M <= 8, dequantize +
cuBLASLt beyond) and GatherBlockQuantized against cpu_reference, within each kernel's
declared promise (GatherBlockQuantized: the same bytes); one launch per decode step; and
captured replays byte-identical to eager runs.

Run: python -m pytest -q -m cuda tests/providers/cuda/test_nbits.py
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.providers.cuda import blas
from onnx_ep.providers.cuda.kernels import nbits as nb
from onnx_ep.providers.cuda.kernels import nbits_mma as nm
from onnx_ep.providers.cuda.kernels import quant_contrib
from tests.helpers.cuda_family import FLOATS, check, check_replays_match_eager, record_launches
from tests.helpers.nbits_cases import GbqCase, NBitsCase, one_node

pytestmark = pytest.mark.cuda
needs_nvmath = pytest.mark.skipif(not blas.is_available(),
                                  reason="nvmath-python (cuBLASLt bindings) is not installed")
DT = list(FLOATS.values())
IDS = list(FLOATS)
MNB = quant_contrib.KERNELS[0]
#: rows of A: a decode step (gemv), a small batch (gemv), a prefill (cuBLASLt)
ROWS = [1, 3, pytest.param(128, marks=needs_nvmath)]


def _check(case: NBitsCase, what: str = "") -> list[np.ndarray]:
    return check(case.model, case.feeds, MNB.parity_for(case.dtype, case.bias is not None),
                 what=what or f"MatMulNBits {case.dtype} K={case.k} N={case.n} "
                              f"bits={case.bits} block={case.block} A {case.a.shape}")


def _eager():
    from onnx_ep import RunOptions

    return RunOptions(capture="off")


# ---------------------------------------------------------------- MatMulNBits parity

@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("bits", [4, 8, 2])
@pytest.mark.parametrize("zp", [None, "packed", "typed"])
@pytest.mark.parametrize("m", ROWS)
def test_bits_zero_points_and_rows(cuda_device, dtype, bits, zp, m):
    case = NBitsCase(k=320, n=77, block=32, bits=bits, a_shape=(m, 320), dtype=dtype, zp=zp,
                     seed=bits * 10 + m)
    _check(case)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("block", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("m", ROWS)
def test_block_sizes(cuda_device, dtype, block, m):
    # K = 4 blocks less 16 columns: a partial last block, and rows of 16-byte chunks only
    # where the blob allows (block 16: 8-byte blobs, 15 of them: the gemm route)
    k = 4 * block - 16
    case = NBitsCase(k=k, n=53, block=block, a_shape=(m, k), dtype=dtype, zp="packed",
                     seed=block + m)
    if nb.gemv_geometry(nb.nbits_plan(_meta(case)), m) is None and not blas.is_available():
        pytest.skip("the gemm route needs nvmath-python (cuBLASLt bindings)")
    _check(case)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("zp", [None, "packed", "typed"])
@pytest.mark.parametrize("m", ROWS)
def test_bias(cuda_device, dtype, zp, m):
    case = NBitsCase(k=256, n=65, block=64, a_shape=(m, 256), dtype=dtype, zp=zp, bias=True,
                     seed=m + 3)
    _check(case)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("a_shape", [(100,), (1, 1, 100), (2, 3, 100), (9, 100),
                                     pytest.param((2, 70, 100), marks=needs_nvmath)])
def test_leading_dims_and_k_not_a_whole_number_of_blocks(cuda_device, dtype, a_shape):
    case = NBitsCase(k=100, n=31, block=32, a_shape=a_shape, dtype=dtype, zp="typed",
                     bias=True, flat=True, seed=len(a_shape))
    (y,) = _check(case)
    assert y.shape == a_shape[:-1] + (31,)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("k,block,bits", [(40, 256, 4), (20, 128, 2), (17, 64, 8)])
@pytest.mark.parametrize("m", ROWS)
def test_k_far_below_the_last_block(cuda_device, dtype, k, block, bits, m):
    """Whole 16-byte chunks of a row hold only padding codes."""
    case = NBitsCase(k=k, n=19, block=block, bits=bits, a_shape=(m, k), dtype=dtype,
                     zp="packed", bias=True, seed=k + m)
    _check(case)


@pytest.mark.parametrize("k,n,bits", [(896, 4864, 4), (4864, 896, 4), (896, 1152, 4),
                                      (896, 40000, 4), (20480, 19, 8)],
                         ids=["up", "down", "qkv", "wide", "long"])
def test_qwen_decode_shapes(cuda_device, k, n, bits):
    """The projections of a decode step; "wide" (an lm_head at a quarter of its N: the
    reference holds the float64 weights) takes 4 rows of B a thread; "long" rows take two
    passes of 4 chunks a thread."""
    case = NBitsCase(k=k, n=n, block=32, bits=bits, a_shape=(1, 1, k), dtype=np.float16,
                     seed=k + n)
    g = nb.gemv_geometry(nb.nbits_plan(_meta(case)), 1)
    assert (g.rb, -(-g.chunks // (g.tpr * g.cpt))) == {
        40000: (nb.GEMV_RB, 1), 19: (1, 2)}.get(n, (1, 1))
    _check(case)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("bits,block", [(4, 32), (8, 64), (2, 128), (4, 16)])
@pytest.mark.parametrize("zp", [None, "packed", "typed"])
def test_several_rows_of_b_a_thread(cuda_device, monkeypatch, dtype, bits, block, zp):
    """The LM head's kernel (4 rows of B a thread) on every option, forced on a small N
    whose last block holds rows past N in some of its threads' rows; block 16 reads a
    second scale and zero point inside a chunk."""
    monkeypatch.setattr(nb, "GEMV_TARGET_THREADS", 1)
    case = NBitsCase(k=320, n=77, block=block, bits=bits, a_shape=(1, 320), dtype=dtype,
                     zp=zp, bias=True, seed=bits + block)
    g = nb.gemv_geometry(nb.nbits_plan(_meta(case)), 1)
    assert g is not None and g.rb == nb.GEMV_RB and case.n % (g.threads // g.tpr * g.rb)
    _check(case)


@pytest.mark.parametrize("dtype", [np.float16, FLOATS["bfloat16"]], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("block", [32, 64, 256])
@pytest.mark.parametrize("zp", [None, "packed"])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_tensor_core_gemv(cuda_device, monkeypatch, dtype, block, zp, m):
    """nbits_mma on every option it takes, forced on a small B: 77 rows (the last 16-row
    group partly past N), 10 units of 32 codes split over 2 warps in whole stages of 8, a
    bias, and a partial last block (K = 320)."""
    monkeypatch.setattr(nm, "MMA_MIN_WARPS", 1)
    launched = record_launches(monkeypatch)
    case = NBitsCase(k=320, n=77, block=block, a_shape=(m, 320), dtype=dtype, zp=zp,
                     bias=True, seed=block + m)
    _check(case)
    assert [name for name, *_ in launched] == [f"nbits_mma_b4_{nb.suffix(np.dtype(dtype))}"]


def test_both_routes_of_the_lm_head_keep_the_promise(cuda_device, monkeypatch):
    """An LM head's shape (at a quarter of its N) on both routes, each within the promise."""
    launched = record_launches(monkeypatch)
    case = NBitsCase(k=896, n=40000, block=32, a_shape=(1, 1, 896), dtype=np.float16, seed=4)
    _check(case)
    monkeypatch.setattr(nm, "MMA_ROUTE", False)
    _check(case)
    assert [name for name, *_ in launched] == ["nbits_mma_b4_f16", "nbits_gemv_b4_m1r4_f16"]


@needs_nvmath
@pytest.mark.parametrize("dtype", [np.float16, FLOATS["bfloat16"]], ids=["float16", "bfloat16"])
def test_prefill_in_chunks(cuda_device, monkeypatch, dtype):
    """A W larger than the dequantization budget: chunks of rows, products scattered."""
    monkeypatch.setattr(nb, "DEQUANT_BUDGET", 1 << 20)
    case = NBitsCase(k=896, n=1500, block=32, a_shape=(1, 40, 896), dtype=dtype, zp="packed",
                     bias=True, seed=11)
    assert nb.gemm_route(nb.nbits_plan(_meta(case)), 40, dtype).chunks > 1
    _check(case)


def _meta(case: NBitsCase):
    from onnx_ep.core.kernel import NodeMeta

    return NodeMeta(name="n", op_type="MatMulNBits", domain="com.microsoft", opset=1,
                    attrs={"K": case.k, "N": case.n, "bits": case.bits,
                           "block_size": case.block}, inputs=())


def test_an_omitted_projection_gives_the_bias(cuda_device):
    rng = np.random.default_rng(10)
    a = rng.standard_normal((3, 64)).astype(np.float16)
    bias = rng.standard_normal(8).astype(np.float16)
    for b in (bias, None):
        model = one_node("MatMulNBits", [("a", a), ("b", np.zeros((8, 0, 16), np.uint8)),
                                         ("scales", np.zeros(0, np.float16)), ("zp", None),
                                         ("g_idx", None), ("bias", b)],
                         ["a"], K=64, N=8, bits=4, block_size=32)
        check(model, {"a": a}, MNB.parity_for(np.float16, b is not None))


# ---------------------------------------------------------------- launches, sessions, capture

@pytest.mark.parametrize("k,n,launch", [
    (896, 4864, ("nbits_mma_b4_f16", (304, 1, 1), (128, 1, 1), 29952)),
    (4864, 896, ("nbits_mma_b4_f16", (56, 1, 1), (256, 1, 1), 66048)),
    (896, 512, ("nbits_gemv_b4_m1r1_f16", (128, 1, 1), (64, 1, 1), 4256))],
    ids=["mma", "mma-kw8", "gemv"])
def test_a_decode_step_is_one_launch(cuda_device, monkeypatch, k, n, launch):
    from onnx_ep import Session
    launched = record_launches(monkeypatch)
    case = NBitsCase(k=k, n=n, block=32, a_shape=(1, 1, k), dtype=np.float16, seed=1)
    sess = Session(case.model, providers=["cuda"])
    try:
        launched.clear()
        sess.run(None, case.feeds, _eager())
    finally:
        sess.close()
    assert launched == [launch]


@needs_nvmath
def test_one_session_takes_both_routes_as_the_rows_change(cuda_device):
    from onnx_ep import Session

    case = NBitsCase(k=512, n=300, block=64, a_shape=(1, 512), dtype=np.float16,
                     zp="packed", bias=True, seed=4)
    case.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "m"
    sess = Session(case.model, providers=["cuda"])
    ref = Session(case.model, providers=["cpu_reference"])
    try:
        from onnx_ep.testing.ulp import judge

        for m in (1, 64, 2, 300, 1):
            a = np.random.default_rng(m).standard_normal((m, 512)).astype(np.float16)
            got = np.asarray(sess.run(None, {"a": a})[0])
            want = np.asarray(ref.run(None, {"a": a})[0])
            d = judge(got, want, MNB.parity_for(np.float16, True))
            assert d.kept, f"M={m}: {d.reason}"
    finally:
        sess.close()
        ref.close()


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_captured_replays_equal_eager_runs_bit_for_bit(cuda_device, dtype, m):

    case = NBitsCase(k=896, n=1152, block=32, a_shape=(1, m, 896), dtype=dtype, zp="packed",
                     bias=True, seed=20 + m)
    check_replays_match_eager(case.model, case.feeds)


@pytest.mark.parametrize("m", [1, 3])
def test_tensor_core_replays_equal_eager_runs_bit_for_bit(cuda_device, monkeypatch, m):
    monkeypatch.setattr(nm, "MMA_MIN_WARPS", 1)
    case = NBitsCase(k=896, n=4864, block=32, a_shape=(1, m, 896), dtype=np.float16,
                     zp="packed", bias=True, seed=30 + m)
    check_replays_match_eager(case.model, case.feeds)


@pytest.mark.parametrize("k,n", [(896, 512), (896, 4864), (4864, 896)],
                         ids=["gemv", "mma", "mma-kw8"])
def test_runs_are_deterministic(cuda_device, monkeypatch, k, n):
    from onnx_ep import Session

    case = NBitsCase(k=k, n=n, block=32, a_shape=(1, 1, k), dtype=np.float16, seed=7)
    geo = nm.mma_geometry(nb.nbits_plan(_meta(case)), 1, np.float16, 0, 90)
    assert (geo is not None) == (n != 512)      # the routes the ids name
    sess = Session(case.model, providers=["cuda"])
    try:
        first = np.asarray(sess.run(None, case.feeds, _eager())[0])
        for _ in range(3):
            assert np.asarray(sess.run(None, case.feeds, _eager())[0]).tobytes() == \
                first.tobytes()
    finally:
        sess.close()


# ---------------------------------------------------------------- GatherBlockQuantized

GBQ_CASES = [
    ((16, 64), "int4", 0, 1, 16, True, np.float32, 4),
    ((16, 64), "uint4", 0, -1, 32, False, np.float16, 4),
    ((40, 32), "int4", 1, 0, 16, True, FLOATS["bfloat16"], 4),
    ((3, 50, 8), "uint4", 1, 1, 16, True, np.float32, 4),
    ((3, 5, 48), "int4", -1, 2, 32, False, np.float16, 4),
    ((12, 64), "uint8", 0, 1, 32, False, np.float16, 4),
    ((12, 64), "uint8", 0, 1, 16, True, np.float32, 4),
    ((12, 64), "uint8", 0, 1, 16, True, np.float32, 8),
    ((12, 64), "uint8", 0, 1, 64, False, FLOATS["bfloat16"], 2),
    ((5, 4, 32), "uint8", 0, 2, 16, True, FLOATS["bfloat16"], 4),
]


@pytest.mark.parametrize("shape,data,ga,qa,block,zp,sdt,bits", GBQ_CASES)
def test_gather_block_quantized_bytes(cuda_device, shape, data, ga, qa, block, zp, sdt, bits):
    from onnx_ep.core.kernel import Parity

    dim = shape[ga % len(shape)]
    idx = np.array([[0, dim - 1, -1], [-dim, dim, -dim - 1]], np.int64)
    case = GbqCase(shape, data, ga, qa, block, zp=zp, scale_dtype=sdt, indices=idx, bits=bits,
                   seed=block)
    check(case.model, case.feeds, Parity.EXACT, what=f"GatherBlockQuantized {data} {shape}")


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_tied_int4_embedding(cuda_device, index_dtype):
    from onnx_ep.core.kernel import Parity

    rng = np.random.default_rng(3)
    idx = rng.integers(0, 1000, (2, 7)).astype(index_dtype)
    case = GbqCase((1000, 896), "uint8", 0, 1, 32, zp=True, scale_dtype=np.float16,
                   indices=idx, seed=5)
    (y,) = check(case.model, case.feeds, Parity.EXACT)
    assert y.shape == (2, 7, 896) and y.dtype == np.float16


def test_gather_block_quantized_captured_replays(cuda_device):

    case = GbqCase((100, 128), "uint8", 0, 1, 32, scale_dtype=np.float16,
                   indices=np.array([[3, 99, -1]], np.int64))
    check_replays_match_eager(case.model, case.feeds)
