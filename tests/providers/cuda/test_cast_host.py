"""CPU-runnable checks of the CUDA Cast: its dtype table, supports/bind/infer_outputs, the
symbols cast.cu instantiates, and ep_lowfloat.cuh (the float8 / float4 / e8m0 conversions,
compiled here as plain C++) against cpu_reference (cpu_reference/formats.py, the ONNX
rules) bit pattern by bit pattern."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.kernel import NodeMeta, TensorSpec
from onnx_ep.providers.cpu_reference import cast as ref_cast
from onnx_ep.providers.cpu_reference import formats
from onnx_ep.providers.cuda.kernels import cast
from onnx_ep.providers.cuda.nvrtc import KERNELS_DIR

F32 = np.dtype(np.float32)
LOW = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
       ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e8m0fnu]


def meta(op, *inputs, outputs=(), opset=21, **attrs) -> NodeMeta:
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(None if s is None else TensorSpec(s[0], s[1]) for s in inputs),
                    outputs=tuple(None if s is None else TensorSpec(s[0], s[1]) for s in outputs))


def cast_symbols() -> set[str]:
    """``cast_<src>_<dst>`` names cast.cu's macros instantiate (parsed, not compiled)."""
    text = (KERNELS_DIR / "cast.cu").read_text()
    targets = re.findall(r"CAST\(S, SS, [^,]+, (\w+)\)", text)
    sources = re.findall(r"^CAST_FROM\([^,]+, (\w+)\)", text, re.M)
    return {f"cast_{s}_{d}" for s in sources for d in targets}


def test_every_dtype_pair_has_a_symbol():
    have = cast_symbols()
    assert len(cast.DTYPES) == 23
    for src in cast.DTYPES:
        for dst in cast.DTYPES:
            m = meta("Cast", (src, (4,)), to=onnx_elem_type(dst))
            assert cast.KERNELS[0].supports(m), (src, dst)
            assert cast.KERNELS[0].bind(m).symbol in have, (src, dst)


def test_the_table_is_every_reference_type_but_string():
    import onnx

    from onnx_ep.core.dtypes import np_dtype

    ref = set()
    for name, code in onnx.TensorProto.DataType.items():
        if name in ("UNDEFINED", "STRING", "COMPLEX64", "COMPLEX128"):
            continue
        try:
            ref.add(np_dtype(code))
        except (KeyError, ValueError, TypeError):
            continue
    assert ref - cast.DTYPES <= {np.dtype(ml_dtypes.float6_e2m3fn) if hasattr(
        ml_dtypes, "float6_e2m3fn") else None, np.dtype(ml_dtypes.float6_e3m2fn) if hasattr(
        ml_dtypes, "float6_e3m2fn") else None} - {None}, ref - cast.DTYPES


def test_supports_declines_with_reasons():
    c, like = cast.KERNELS[:2]
    assert c.supports(meta("Cast", (F32, (3,)), to=17))                 # FLOAT8E4M3FN
    assert c.supports(meta("Cast", (ml_dtypes.int4, ("N",)), to=1))
    assert not c.supports(meta("Cast", (F32, (3,)), to=8))              # STRING
    assert "string" in c.supports(meta("Cast", (F32, (3,)), to=8)).reason
    assert not c.supports(meta("Cast", (F32, (3,)), to=24, round_mode="sideways"))
    assert not c.supports(meta("Cast", None, to=1))
    assert like.supports(meta("CastLike", (F32, (3,)), (ml_dtypes.float8_e5m2, (1,))))


def test_castlike_takes_the_output_dtype_when_input_1_is_unknown():
    like = cast.KERNELS[1]
    m = meta("CastLike", (F32, (3,)), None, outputs=[(np.float16, (3,))])
    assert like.supports(m)
    assert like.infer_outputs(m) == [TensorSpec(np.float16, (3,))]
    m = meta("CastLike", (F32, (3,)), None, outputs=[None])
    assert not like.supports(m) and "unknown" in like.supports(m).reason


def test_bind_reads_saturate_and_round_mode():
    c = cast.KERNELS[0]
    b = c.bind(meta("Cast", (F32, (3,)), to=17))
    assert (b.symbol, b.saturate, b.round_mode) == ("cast_f32_e4m3fn", 1, 0)
    b = c.bind(meta("Cast", (np.float16, (3,)), to=17, saturate=0))
    assert (b.symbol, b.saturate) == ("cast_f16_e4m3fn", 0)
    b = c.bind(meta("Cast", (F32, (3,)), to=24, round_mode="nearest"))
    assert (b.symbol, b.round_mode) == ("cast_f32_e8m0", 2)
    b = cast.KERNELS[1].bind(meta("CastLike", (ml_dtypes.uint4, (3,)), (np.int16, (1,))))
    assert b.symbol == "cast_u4_i16"


def test_infer_outputs():
    assert cast.KERNELS[0].infer_outputs(meta("Cast", (F32, ("N", 3)), to=22)) == [
        TensorSpec(ml_dtypes.int4, ("N", 3))]
    assert cast.KERNELS[1].infer_outputs(
        meta("CastLike", (F32, (7,)), (ml_dtypes.float4_e2m1fn, (1,)))) == [
        TensorSpec(ml_dtypes.float4_e2m1fn, (7,))]


# ---------------------------------------------------------------- ep_lowfloat.cuh on the host

SHIM = r"""
#include "ep_lowfloat.cuh"
using namespace ep::lowfloat;
static Format fmt(int id) {
    switch (id) { case 0: return EP_E4M3FN; case 1: return EP_E4M3FNUZ; case 2: return EP_E5M2;
                  case 3: return EP_E5M2FNUZ; default: return EP_E2M1FN; }
}
extern "C" {
void lf_decode(int id, const unsigned char* c, double* y, long long n) {
    for (long long i = 0; i < n; ++i) y[i] = id == 5 ? decode_e8m0(c[i]) : decode(fmt(id), c[i]);
}
void lf_encode(int id, const double* x, unsigned char* y, long long n, int sat, int mode) {
    for (long long i = 0; i < n; ++i)
        y[i] = id == 5 ? encode_e8m0(x[i], sat, mode) : encode(fmt(id), x[i], sat && id < 4);
}
}
"""


@pytest.fixture(scope="module")
def lowfloat(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler to build ep_lowfloat.cuh")
    d = tmp_path_factory.mktemp("lowfloat")
    (d / "shim.cpp").write_text(SHIM)
    lib = d / "lowfloat.so"
    subprocess.run([cxx, "-O1", "-std=c++17", "-shared", "-fPIC", f"-I{KERNELS_DIR}",
                    str(d / "shim.cpp"), "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


def _decode(lib, i: int, codes: np.ndarray) -> np.ndarray:
    y = np.empty(codes.size, np.float64)
    lib.lf_decode(i, codes.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p),
                  ctypes.c_longlong(codes.size))
    return y


def _encode(lib, i: int, x: np.ndarray, sat: bool, mode: int) -> np.ndarray:
    y = np.empty(x.size, np.uint8)
    lib.lf_encode(i, x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p),
                  ctypes.c_longlong(x.size), int(sat), mode)
    return y


def _probe_values(grid: np.ndarray) -> np.ndarray:
    """Every float16 and bfloat16, random float32 / float64 bit patterns, the format's
    grid, its midpoints and their neighbours, overflow and specials; both signs."""
    rng = np.random.default_rng(0)
    u16 = np.arange(65536, dtype=np.uint16)
    fin = np.sort(grid[np.isfinite(grid)])
    mids = (fin[1:] + fin[:-1]) / 2
    parts = [u16.view(np.float16).astype(np.float64), u16.view(ml_dtypes.bfloat16).astype(np.float64),
             rng.integers(0, 2**32, 50000, dtype=np.uint64).astype(np.uint32).view(np.float32)
             .astype(np.float64),
             rng.integers(0, 2**63, 50000, dtype=np.uint64).view(np.float64),
             rng.standard_normal(50000) * 10.0 ** rng.integers(-6, 6, 50000),
             fin, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
             fin[-1:] * np.array([1.03, 1.06, 1.07, 1.2, 1.5, 2.0]), fin[:3] / 2, fin[:3] / 3,
             np.array([np.nan, np.inf, 0.0, 1e300, 1e-310])]
    x = np.concatenate(parts)
    return np.concatenate([x, -x])


def _probe(grid: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):  # NaN bit patterns widen with a warning
        return _probe_values(grid)


@pytest.mark.parametrize("i", range(len(LOW)), ids=[np.dtype(t).name for t in LOW])
def test_lowfloat_decode_matches_the_reference_for_every_code(lowfloat, i):
    t = np.dtype(LOW[i])
    codes = np.arange(16 if t == np.dtype(ml_dtypes.float4_e2m1fn) else 256, dtype=np.uint8)
    want = formats.decode(codes.view(t)).view(np.uint64)
    got = _decode(lowfloat, i, codes).view(np.uint64)
    bad = np.flatnonzero(got != want)
    assert not bad.size, [(hex(int(codes[j])), hex(int(got[j])), hex(int(want[j]))) for j in bad[:8]]


@pytest.mark.parametrize("i", range(len(LOW)), ids=[np.dtype(t).name for t in LOW])
def test_lowfloat_encode_matches_the_reference_cast(lowfloat, i):
    t = np.dtype(LOW[i])
    codes = np.arange(16 if t == np.dtype(ml_dtypes.float4_e2m1fn) else 256, dtype=np.uint8)
    x = _probe(formats.decode(codes.view(t)))
    modes = ("up", "down", "nearest") if t == np.dtype(ml_dtypes.float8_e8m0fnu) else ("up",)
    for sat in (True, False):
        for m, mode in enumerate(modes):
            with np.errstate(all="ignore"):
                want = ref_cast.cast(x, t, saturate=sat, round_mode=mode).view(np.uint8)
            got = _encode(lowfloat, i, x, sat, m)
            bad = np.flatnonzero(got != want)
            assert not bad.size, (sat, mode, [(float(x[j]), hex(int(got[j])), hex(int(want[j])))
                                              for j in bad[:8]])
