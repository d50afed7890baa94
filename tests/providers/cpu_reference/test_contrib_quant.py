"""cpu_reference com.microsoft::MatMulNBits and GatherBlockQuantized against onnxruntime CPU
(graph optimizations off) and against their float64 formulas (docs/PARITY.md, "Contrib ops:
MatMulNBits, GatherBlockQuantized")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnx_ep import Session
from onnx_ep.errors import NodeError, NoKernelError
from onnx_ep.providers.cpu_reference.quant_contrib import KERNELS, MatMulNBits, nbits_plan
from tests.helpers.nbits_cases import one_node, pack
from tests.helpers.oracle import requires_ort, run_ort

ORT_1_32 = requires_ort("1.32", "onnxruntime 1.23.2 lacks 2-bit MatMulNBits and packed-uint8 "
                        "zero points in GatherBlockQuantized, gathers out-of-range indices "
                        "differently, and crashes (SIGSEGV) on an empty MatMulNBits weight")
pytest.importorskip("onnxruntime")

MS = "com.microsoft"
BF16 = np.dtype(ml_dtypes.bfloat16)
U = 2.0 ** -24  # float32 unit roundoff


# ---------------------------------------------------------------- building models


def ours(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    (y,) = Session(model, providers=["cpu_reference"]).run(None, dict(feeds))
    return np.asarray(y)


class NBits:
    """A random MatMulNBits node: quantized weights, its model and its float64 formula."""

    def __init__(self, *, k: int, n: int, block: int, bits: int = 4, a_shape: Sequence[int],
                 dtype: Any = np.float32, zp: str | None = None, bias: bool = False,
                 g_idx: bool = False, flat: bool = False, level: int = 0, seed: int = 0):
        rng = np.random.default_rng(seed)
        dtype = np.dtype(dtype)
        nb = -(-k // block)
        self.codes = rng.integers(0, 1 << bits, (n, nb * block))
        self.b = pack(self.codes.reshape(n, nb, block), bits)
        self.scales = (rng.random((n, nb)) * 0.2 / np.sqrt(k) + 1e-3).astype(dtype)
        self.a = rng.standard_normal(tuple(a_shape)).astype(dtype)
        self.zp_value = np.full((n, nb), float(1 << (bits - 1)))
        zp_input = None
        if zp == "packed":
            zq = rng.integers(0, 1 << bits, (n, nb))
            self.zp_value, zp_input = zq.astype(np.float64), pack(zq, bits)
        elif zp == "float":
            zf = (rng.random((n, nb)) * (1 << bits)).astype(dtype)
            self.zp_value, zp_input = zf.astype(np.float64), zf
        self.g = rng.integers(0, nb, k).astype(np.int32) if g_idx else None
        self.bias = rng.standard_normal(n).astype(dtype) if bias else None
        scales = self.scales.reshape(-1) if flat else self.scales
        if flat and zp_input is not None:
            zp_input = zp_input.reshape(-1)
        self.inputs = [("a", self.a), ("b", self.b), ("scales", scales), ("zp", zp_input),
                       ("g_idx", self.g), ("bias", self.bias)]
        while self.inputs[-1][1] is None:
            self.inputs.pop()
        self.k, self.n, self.block, self.bits = k, n, block, bits
        self.model = one_node("MatMulNBits", self.inputs, ["a"], K=k, N=n, bits=bits,
                              block_size=block, accuracy_level=level)

    @property
    def weights(self) -> np.ndarray:
        """The dequantized ``[N, K]`` weight, float64 (exact)."""
        cols = np.arange(self.k) // self.block if self.g is None else self.g
        scale = self.scales.astype(np.float64)[:, cols]
        return (self.codes[:, : self.k] - self.zp_value[:, cols]) * scale

    def formula(self) -> np.ndarray:
        y = self.a.astype(np.float64) @ self.weights.T
        return y if self.bias is None else y + self.bias.astype(np.float64)

    def magnitude(self) -> np.ndarray:
        """``sum_k |a_k w_k| + |bias|``: what a float sum's rounding errors scale with."""
        m = np.abs(self.a.astype(np.float64)) @ np.abs(self.weights).T
        return m if self.bias is None else m + np.abs(self.bias.astype(np.float64))

    def ours(self) -> np.ndarray:
        return ours(self.model, {"a": self.a})

    def ort(self) -> np.ndarray:
        return np.asarray(run_ort(self.model, {"a": self.a})[0])


def assert_within(got: np.ndarray, want: np.ndarray, tol: np.ndarray, what: str) -> None:
    got, want = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err - tol), err.shape) if err.size else ()
    assert np.all(err <= tol), (f"{what}: error {err[worst]:.3g} above the bound "
                                f"{tol[worst]:.3g} at {worst}")


def ort_bound(case: NBits) -> np.ndarray:
    """How far onnxruntime CPU (accuracy_level 0) may be from the float64 result: its
    float32 weights (u each), a float32 K-sum (at most (K - 1) u), the bias and the final
    roundings, all relative to the terms' magnitude; float16 adds two roundings of the
    output to float16 (ours and its own) and one of its bias addition."""
    mag = case.magnitude()
    tol = (case.k + 4) * U * mag
    if case.a.dtype == np.float16:
        tol = tol + 3 * 2.0 ** -11 * mag
    return tol


# ---------------------------------------------------------------- MatMulNBits vs onnxruntime


def _shapes(seed: int, block: int) -> tuple[int, int, tuple[int, ...]]:
    """K (often not a whole number of blocks), N and A's shape (rank 1 to 4)."""
    rng = np.random.default_rng(seed)
    nb = int(rng.integers(1, 4))
    k = nb * block - int(rng.integers(0, block)) if seed % 3 else nb * block
    n = int(rng.integers(1, 40))
    m = int(rng.integers(1, 5))
    lead = [(), (m,), (2, m), (2, 1, m)][seed % 4]
    return k, n, lead + (k,)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("zp", [None, "packed", "float"])
@pytest.mark.parametrize("block", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("bits", [4, 8])
def test_matmul_nbits_matches_onnxruntime(bits: int, block: int, zp: str | None,
                                          dtype: Any) -> None:
    seed = bits * 1000 + block + (7 if zp else 0) + (1 if dtype == np.float16 else 0)
    k, n, a_shape = _shapes(seed, block)
    case = NBits(k=k, n=n, block=block, bits=bits, a_shape=a_shape, dtype=dtype, zp=zp,
                 bias=seed % 2 == 0, flat=seed % 5 == 0, seed=seed)
    got = case.ours()
    assert got.dtype == np.dtype(dtype) and got.shape == a_shape[:-1] + (n,)
    if bits == 8 and zp == "float":
        # onnxruntime CPU refuses 8-bit weights with float zero points; the formula decides
        assert_within(got, case.formula(), ort_bound(case), "formula")
        return
    assert_within(got, case.ort(), ort_bound(case), "onnxruntime")


@ORT_1_32
@pytest.mark.parametrize("zp", [None, "packed"])
def test_two_bit_weights_match_onnxruntime(zp: str | None) -> None:
    case = NBits(k=100, n=9, block=32, bits=2, a_shape=(3, 100), zp=zp, bias=True, seed=2)
    assert_within(case.ours(), case.ort(), ort_bound(case), "onnxruntime")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_decode_step_matches_onnxruntime(dtype: Any) -> None:
    """M = 1 with batch and sequence dims of 1: a Qwen2.5-0.5B MLP projection's shape."""
    case = NBits(k=896, n=1216, block=32, a_shape=(1, 1, 896), dtype=dtype, seed=3)
    assert_within(case.ours(), case.ort(), ort_bound(case), "onnxruntime")


def test_a_prefill_chunk_spans_several_scratch_chunks() -> None:
    """N larger than the rows dequantized per chunk, and M > 1."""
    case = NBits(k=512, n=700, block=64, a_shape=(1, 9, 512), zp="packed", bias=True, seed=4)
    assert nbits_plan(_meta(case)).rows < case.n
    assert_within(case.ours(), case.ort(), ort_bound(case), "onnxruntime")


@pytest.mark.parametrize("zp", [None, "float"])
def test_act_order_g_idx_matches_onnxruntime(zp: str | None) -> None:
    case = NBits(k=96, n=8, block=32, a_shape=(4, 96), zp=zp, g_idx=True, seed=5)
    assert_within(case.ours(), case.ort(), ort_bound(case), "onnxruntime")


def test_g_idx_with_packed_zero_points_follows_the_spec() -> None:
    """onnxruntime 1.32 CPU ignores uint8 zero points when g_idx is given (it uses 8); the
    reference applies them, block g_idx[k] like the scales (docs/PARITY.md)."""
    case = NBits(k=64, n=8, block=32, a_shape=(3, 64), zp="packed", g_idx=True, seed=6)
    got = case.ours()
    assert_within(got, case.formula(), (case.k + 4) * U * case.magnitude(), "formula")
    symmetric = NBits(k=64, n=8, block=32, a_shape=(3, 64), g_idx=True, seed=6)
    assert not np.allclose(got, symmetric.formula(), rtol=1e-3)


def test_the_result_is_the_float64_sum_rounded_once() -> None:
    for dtype, ulp in ((np.float32, 2.0 ** -23), (np.float16, 2.0 ** -10), (BF16, 2.0 ** -7)):
        case = NBits(k=200, n=33, block=64, a_shape=(5, 200), dtype=dtype, zp="float",
                     bias=True, seed=7)
        want = case.formula()
        # half an ulp of the result, plus what the float64 sum's own order may move it
        tol = ulp / 2 * np.abs(want) + 1e-12 * case.magnitude()
        assert_within(case.ours(), want, tol, str(np.dtype(dtype)))


def test_accuracy_level_does_not_change_the_reference() -> None:
    args = dict(k=256, n=24, block=32, a_shape=(2, 256), zp="packed", seed=8)
    assert np.array_equal(NBits(**args).ours(), NBits(level=4, **args).ours())


def test_onnxruntime_accuracy_level_4_stays_within_int8_activation_rounding() -> None:
    """Level 4 lets onnxruntime quantize A to int8 per block (scale max|a|/127): each
    activation moves by at most max|a_block| / 254, so a sum moves by at most
    sum_blocks (max|a_block| / 254) * sum_block |w|; twice that covers its scale roundings."""
    case = NBits(k=512, n=64, block=32, a_shape=(3, 512), zp="packed", level=4, seed=9)
    a = np.abs(case.a.astype(np.float64)).reshape(3, -1, 32)
    w = np.abs(case.weights).reshape(case.n, -1, 32)
    bound = np.einsum("mb,nb->mn", a.max(-1) / 254, w.sum(-1))
    assert_within(case.ours(), case.ort(), 2 * bound + ort_bound(case), "onnxruntime level 4")


@ORT_1_32
def test_an_omitted_projection_gives_the_bias() -> None:
    rng = np.random.default_rng(10)
    a = rng.standard_normal((3, 64)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    model = one_node("MatMulNBits", [("a", a), ("b", np.zeros((8, 0, 16), np.uint8)),
                                     ("scales", np.zeros(0, np.float32)), ("zp", None),
                                     ("g_idx", None), ("bias", bias)],
                     ["a"], K=64, N=8, bits=4, block_size=32)
    got = ours(model, {"a": a})
    assert np.array_equal(got, np.broadcast_to(bias, (3, 8)))
    assert np.array_equal(got, run_ort(model, {"a": a})[0])


def test_a_session_reruns_and_takes_another_batch() -> None:
    case = NBits(k=64, n=16, block=16, a_shape=(2, 64), zp="packed", seed=11)
    case.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "m"
    sess = Session(case.model, providers=["cpu_reference"])
    first = sess.run(None, {"a": case.a})[0]
    assert np.array_equal(first, sess.run(None, {"a": case.a})[0])
    a2 = np.concatenate([case.a, case.a[:1]])
    assert np.array_equal(sess.run(None, {"a": a2})[0][:2], first)


# ---------------------------------------------------------------- MatMulNBits errors


def _meta(case: NBits) -> Any:
    from onnx_ep.core.kernel import NodeMeta

    return NodeMeta(name="n", op_type="MatMulNBits", domain=MS, opset=1,
                    attrs={"K": case.k, "N": case.n, "bits": case.bits,
                           "block_size": case.block}, inputs=())


def test_the_workspace_is_the_plans_chunk() -> None:
    case = NBits(k=96, n=2000, block=32, a_shape=(96,), seed=12)
    plan = nbits_plan(_meta(case))
    assert plan.rows * plan.padded_k <= 1 << 17 and plan.padded_k == 96
    assert MatMulNBits().bind(_meta(case)).workspace_requirement(_meta(case)).nbytes == \
        plan.rows * 96 * 9
    eight = NBits(k=96, n=2000, block=32, bits=8, a_shape=(96,), seed=12)
    assert nbits_plan(_meta(eight)).nbytes == plan.rows * 96 * 8   # codes read from B


@pytest.mark.parametrize("attrs, why", [
    ({"bits": 3}, "bits=3 is not implemented"),
    ({"weight_prepacked": 1}, "weight_prepacked=1"),
])
def test_what_the_reference_cannot_run_is_declined(attrs: dict[str, int], why: str) -> None:
    case = NBits(k=64, n=4, block=32, a_shape=(64,), seed=13)
    model = one_node("MatMulNBits", case.inputs, ["a"], **{"K": 64, "N": 4, "bits": 4,
                                                           "block_size": 32, **attrs})
    with pytest.raises(NoKernelError, match=why):
        Session(model, providers=["cpu_reference"])


def test_float64_activations_are_declined() -> None:
    case = NBits(k=64, n=4, block=32, a_shape=(64,), seed=14)
    a = case.a.astype(np.float64)
    model = one_node("MatMulNBits", [("a", a)] + case.inputs[1:], ["a"], K=64, N=4, bits=4,
                     block_size=32)
    with pytest.raises(NoKernelError, match="A dtype float64"):
        Session(model, providers=["cpu_reference"])


@pytest.mark.parametrize("attrs, why", [
    ({"K": 64, "bits": 4, "block_size": 32}, "attribute N is required"),
    ({"K": 64, "N": 4, "bits": 4, "block_size": 24}, "power of two >= 16"),
])
def test_malformed_attributes_fail_at_load(attrs: dict[str, int], why: str) -> None:
    case = NBits(k=64, n=4, block=32, a_shape=(64,), seed=15)
    model = one_node("MatMulNBits", case.inputs, ["a"], **attrs)
    with pytest.raises(NodeError, match=why):
        Session(model, providers=["cpu_reference"])


@pytest.mark.parametrize("change, why", [
    ({"b": np.zeros((4, 2, 8), np.uint8)}, r"must have shape \(4, 2, 16\)"),
    ({"scales": np.ones((4, 3), np.float32)}, "scales must be float32 of shape"),
    ({"zp": np.zeros((4, 2), np.uint8)}, r"packed uint8 zero_points must have shape \(4, 1\)"),
    ({"zp": np.zeros((4, 2), np.int32)}, "zero_points must be packed uint8 or float32"),
    ({"g_idx": np.full(64, 2, np.int32)}, r"block indices in \[0, 2\)"),
    ({"bias": np.zeros(5, np.float32)}, r"bias must be float32 of shape \(4,\)"),
])
def test_inconsistent_inputs_raise_naming_the_input(change: dict[str, np.ndarray],
                                                   why: str) -> None:
    case = NBits(k=64, n=4, block=32, a_shape=(2, 64), seed=16)
    names = ("a", "b", "scales", "zp", "g_idx", "bias")
    inputs = dict(case.inputs)
    inputs.update(change)
    model = one_node("MatMulNBits", [(n, inputs.get(n)) for n in names], ["a"], K=64, N=4,
                     bits=4, block_size=32)
    with pytest.raises(NodeError, match=why):
        ours(model, {"a": case.a})


def test_a_with_the_wrong_k_raises() -> None:
    case = NBits(k=64, n=4, block=32, a_shape=(2, 64), seed=17)
    case.model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "k"
    sess = Session(case.model, providers=["cpu_reference"])
    with pytest.raises(NodeError, match="last dim of K=64"):
        sess.run(None, {"a": np.zeros((2, 63), np.float32)})


# ---------------------------------------------------------------- GatherBlockQuantized


I4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)


class Gbq:
    """A random GatherBlockQuantized node over logical codes, with its float64 formula."""

    def __init__(self, shape: Sequence[int], dtype: Any, gather_axis: int, quantize_axis: int,
                 block: int, *, zp: bool = False, scale_dtype: Any = np.float32,
                 indices: np.ndarray | None = None, bits: int = 4, seed: int = 0):
        rng = np.random.default_rng(seed)
        shape = tuple(shape)
        rank = len(shape)
        qa, ga = quantize_axis % rank, gather_axis % rank
        packed = dtype == "uint8"
        lo, hi = (0, 1 << bits) if packed else ((-8, 8) if np.dtype(dtype) == I4 else (0, 16))
        self.codes = rng.integers(lo, hi, shape)
        grid = shape[:qa] + (-(-shape[qa] // block),) + shape[qa + 1:]
        self.scales = (rng.random(grid) + 0.5).astype(scale_dtype)
        zq = rng.integers(lo, hi, grid) if zp else None
        if packed:
            data, zp_in = pack(self.codes, bits), (None if zq is None else pack(zq, bits))
            self.zp = zq if zp else (1 << (bits - 1))
        else:
            data = self.codes.astype(dtype)
            zp_in = None if zq is None else zq.astype(dtype)
            self.zp = zq if zp else 0
        if indices is None:
            indices = rng.integers(-shape[ga], shape[ga], (2, 3)).astype(np.int64)
        self.indices, self.qa, self.ga, self.block = indices, qa, ga, block
        self.model = one_node("GatherBlockQuantized",
                              [("data", data), ("indices", indices), ("scales", self.scales),
                               ("zp", zp_in)], ["indices"], gather_axis=gather_axis,
                              quantize_axis=quantize_axis, block_size=block, bits=bits)

    def formula(self) -> np.ndarray:
        n = self.codes.shape[self.qa]
        rep = (np.arange(n) // self.block)
        scale = np.take(self.scales.astype(np.float64), rep, axis=self.qa)
        zp = self.zp if np.ndim(self.zp) == 0 else np.take(self.zp, rep, axis=self.qa)
        deq = (self.codes - zp) * scale
        dim = self.codes.shape[self.ga]
        idx = np.where(self.indices < 0, self.indices + dim, self.indices)
        ok = (idx >= 0) & (idx < dim)
        out = np.take(deq, np.where(ok, idx, 0), axis=self.ga)
        mask = ok.reshape((1,) * self.ga + ok.shape + (1,) * (self.codes.ndim - self.ga - 1))
        return np.where(mask, out, 0.0)

    def ours(self) -> np.ndarray:
        return ours(self.model, {"indices": self.indices})

    def ort(self) -> np.ndarray:
        return np.asarray(run_ort(self.model, {"indices": self.indices})[0])


GBQ_CASES = {
    # shape, gather_axis, quantize_axis, block
    "rows_quantized_along_last": ((10, 64), 0, 1, 32),
    "negative_quantize_axis": ((10, 64), 0, -1, 16),
    "partial_last_block": ((10, 40), 0, 1, 16),
    "gather_columns_quantized_along_rows": ((64, 10), 1, 0, 32),
    "gather_and_quantize_one_axis": ((64, 10), 0, 0, 32),
    "rank3_middle_gather": ((4, 6, 32), 1, 2, 16),
    "rank3_last_gather": ((4, 32, 6), -1, 1, 16),
    "block_128": ((5, 256), 0, 1, 128),
}


@pytest.mark.parametrize("scale_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("dtype", [I4, U4])
@pytest.mark.parametrize("case", sorted(GBQ_CASES))
def test_gather_block_quantized_int4_is_onnxruntimes_bytes(case: str, dtype: Any, zp: bool,
                                                           scale_dtype: Any) -> None:
    shape, gax, qax, block = GBQ_CASES[case]
    g = Gbq(shape, dtype, gax, qax, block, zp=zp, scale_dtype=scale_dtype, seed=len(case))
    got, want = g.ours(), g.ort()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)
    assert np.array_equal(got, g.formula().astype(scale_dtype))


@ORT_1_32
@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("scale_dtype", [np.float32, np.float16])
def test_genai_tied_int4_embedding(zp: bool, scale_dtype: Any) -> None:
    """onnxruntime-genai's tied embedding: the lm_head's MatMulNBits weight [V, H/32, 16]
    viewed as uint8 [V, H/2], bits 4, block 32, gather_axis 0, quantize_axis last; token
    ids [batch, seq]. Gathering every row gives the weight MatMulNBits multiplies by."""
    vocab, hidden = 50, 96
    ids = np.array([[0, 7, 49, 3], [12, 12, -1, 48]], np.int64)
    g = Gbq((vocab, hidden), "uint8", 0, 1, 32, zp=zp, scale_dtype=scale_dtype,
            indices=ids, seed=20)
    got = g.ours()
    assert np.array_equal(got, g.ort())
    assert got.shape == (2, 4, hidden) and got.dtype == np.dtype(scale_dtype)
    # the same tensors as MatMulNBits' B / scales / zero points give the product by W^T
    data = g.model.graph.initializer
    b = numpy_helper.to_array(data[0]).reshape(vocab, hidden // 32, 16)
    inits = {t.name: numpy_helper.to_array(t) for t in data}
    h = np.random.default_rng(21).standard_normal((1, hidden)).astype(scale_dtype)
    lm_head = one_node("MatMulNBits", [("h", h), ("b", b), ("scales", inits["scales"]),
                                       ("zp", inits.get("zp"))], ["h"], K=hidden, N=vocab,
                       bits=4, block_size=32)
    every = Gbq((vocab, hidden), "uint8", 0, 1, 32, zp=zp, scale_dtype=scale_dtype,
                indices=np.arange(vocab), seed=20)
    w = every.formula()
    want = h.astype(np.float64) @ w.T
    tol = (hidden + 4) * U * (np.abs(h.astype(np.float64)) @ np.abs(w).T) + \
        (2.0 ** -11 * np.abs(want) if scale_dtype == np.float16 else 0)
    assert_within(ours(lm_head, {"h": h}), want, tol, "lm_head")


@ORT_1_32
@pytest.mark.parametrize("bits, shape, zp", [(8, (10, 64), True), (8, (10, 64), False),
                                             (2, (10, 64), True), (4, (4, 6, 32), True)])
def test_gather_block_quantized_uint8_matches_onnxruntime(bits: int, shape: tuple[int, ...],
                                                          zp: bool) -> None:
    g = Gbq(shape, "uint8", 0, -1, 16, zp=zp, bits=bits, seed=bits)
    assert np.array_equal(g.ours(), g.ort())


@ORT_1_32
def test_out_of_range_indices_give_zeros_like_onnxruntime() -> None:
    idx = np.array([0, 10, -11, 3, -10], np.int64)
    g = Gbq((10, 64), I4, 0, 1, 32, zp=True, indices=idx, seed=30)
    got = g.ours()
    assert np.array_equal(got, g.ort())
    assert not got[[1, 2]].any() and got[[0, 3, 4]].any()


def test_int32_indices_and_bfloat16_scales() -> None:
    idx = np.array([[1, -2], [0, 9]], np.int32)
    g = Gbq((10, 48), U4, 0, 1, 16, zp=True, scale_dtype=BF16, indices=idx, seed=31)
    got = g.ours()
    assert got.dtype == BF16
    assert np.array_equal(got.astype(np.float64), g.formula().astype(BF16).astype(np.float64))


@pytest.mark.parametrize("kw, why", [
    (dict(shape=(10, 64), dtype="uint8", gather_axis=1, quantize_axis=0, block=16),
     "uint8 data needs gather_axis 0 and quantize_axis the last axis"),
    (dict(shape=(10, 64), dtype=I4, gather_axis=0, quantize_axis=1, block=48),
     "power of two >= 16"),
])
def test_gather_block_quantized_refuses_what_onnxruntime_refuses(kw: dict[str, Any],
                                                                why: str) -> None:
    g = Gbq(**kw)
    with pytest.raises(NodeError, match=why):
        g.ours()


def test_gather_block_quantized_checks_the_scales_shape() -> None:
    g = Gbq((10, 64), I4, 0, 1, 32, seed=32)
    scales = g.model.graph.initializer[1]
    scales.CopyFrom(numpy_helper.from_array(np.ones((10, 3), np.float32), scales.name))
    with pytest.raises(NodeError, match=r"scales must have shape \(10, 2\)"):
        g.ours()


def test_float8_data_is_declined_with_a_reason() -> None:
    data = np.zeros((4, 32), ml_dtypes.float8_e4m3fn)
    model = one_node("GatherBlockQuantized",
                     [("data", data), ("indices", np.array([0], np.int64)),
                      ("scales", np.ones((4, 1), np.float32))], ["indices"],
                     gather_axis=0, quantize_axis=1, block_size=32)
    with pytest.raises(NoKernelError, match="float8/float4 data is not"):
        Session(model, providers=["cpu_reference"])


def test_both_kernels_are_registered_in_onnxruntimes_domain() -> None:
    keys = {str(k.key) for k in KERNELS}
    assert all(k.key.domain == MS and k.key.since == 1 for k in KERNELS), keys
    assert {k.key.op_type for k in KERNELS} == {"MatMulNBits", "GatherBlockQuantized"}


@pytest.mark.parametrize("zp, g_idx", [("packed", False), ("float", False), (None, True)])
def test_constant_weights_are_dequantized_once_charged_and_give_the_same_bits(
        zp: str | None, g_idx: bool) -> None:
    """Initializer weights: W is dequantized at bind and held (the ledger shows its N * K
    float64), with the bits of dequantizing on every call (the weights fed instead)."""
    case = NBits(k=200, n=700, block=32, a_shape=(2, 3, 200), zp=zp, g_idx=g_idx, bias=True,
                 seed=21)
    s = Session(case.model, providers=["cpu_reference"])
    held = s.resources()["ledger"]["by_holder"][s.holder]["weights"]
    stored = sum(v.nbytes for n, v in case.inputs if v is not None and n != "a")
    assert held == -(-stored // 64) * 64 + case.n * case.k * 8
    fed = one_node("MatMulNBits", case.inputs, [n for n, _ in case.inputs], K=case.k,
                   N=case.n, bits=case.bits, block_size=case.block)
    per_call = ours(fed, {n: v for n, v in case.inputs if v is not None})
    for _ in range(2):
        np.testing.assert_array_equal(s.run(None, {"a": case.a})[0], per_call)
