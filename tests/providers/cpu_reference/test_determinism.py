"""cpu_reference is deterministic: the same model and feeds give the same bytes.

Each representative model runs twice in this process (one session, then a fresh one)
and once in each of two subprocesses whose BLAS / OpenMP pools are pinned to 1 and 2
threads (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS). Every output must be
byte-identical across all four runs (docs/PARITY.md, "Determinism").

Run as a script (``python test_determinism.py OUT.npz``) it writes every case's outputs
to ``OUT.npz``; the subprocesses use that.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[3]
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
THREAD_COUNTS = (1, 2)

Case = Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]]


def _model(op: str, feeds: dict[str, np.ndarray], *, opset: int, n_out: int = 1,
           inits: dict[str, np.ndarray] | None = None, **attrs: Any) -> onnx.ModelProto:
    inits = inits or {}
    names = list(feeds) + list(inits)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info(n) for n in outs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=11)


def _rand(seed: int, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def matmul() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"a": _rand(1, 4, 256, 512), "b": _rand(2, 512, 384)}
    return _model("MatMul", feeds, opset=13), feeds


def matmul_vector() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    # (M, K) @ (K,) is a BLAS gemv, (K,) @ (K,) a dot: both long reductions over K
    feeds = {"a": _rand(3, 256, 1 << 16), "b": _rand(4, 1 << 16)}
    return _model("MatMul", feeds, opset=13), feeds


def matmul_dot() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"a": _rand(5, 1 << 20), "b": _rand(6, 1 << 20)}
    return _model("MatMul", feeds, opset=13), feeds


def matmul_float16() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"a": _rand(7, 256, 512, dtype=np.float16), "b": _rand(8, 512, 256, dtype=np.float16)}
    return _model("MatMul", feeds, opset=13), feeds


def gemm() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"a": _rand(9, 256, 512)}
    inits = {"b": _rand(10, 384, 512), "c": _rand(11, 384)}
    return _model("Gemm", feeds, opset=13, inits=inits, transB=1, alpha=0.5, beta=2.0), feeds


def conv() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"x": _rand(12, 2, 16, 32, 32)}
    inits = {"w": _rand(13, 32, 16, 3, 3), "b": _rand(14, 32)}
    return _model("Conv", feeds, opset=11, inits=inits, pads=[1, 1, 1, 1]), feeds


def softmax() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"x": _rand(15, 64, 4000) * 4}
    return _model("Softmax", feeds, opset=13, axis=-1), feeds


def layer_normalization() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"x": _rand(16, 64, 4096) + 3}
    inits = {"scale": _rand(17, 4096), "bias": _rand(18, 4096)}
    return _model("LayerNormalization", feeds, opset=17, inits=inits, axis=-1), feeds


def reduce_sum() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"x": _rand(19, 64, 1 << 15)}
    inits = {"axes": np.array([1], np.int64)}
    return _model("ReduceSum", feeds, opset=18, inits=inits, keepdims=0), feeds


def reduce_sum_all() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"x": _rand(20, 1 << 22)}
    return _model("ReduceSum", feeds, opset=18, keepdims=0), feeds


def einsum() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"a": _rand(21, 8, 64, 512), "b": _rand(22, 8, 512, 64)}
    return _model("Einsum", feeds, opset=12, equation="bij,bjk->bik"), feeds


def topk() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    # rounded values: many ties, so the order among equal values is exercised too
    feeds = {"x": np.round(_rand(23, 64, 4000) * 3)}
    inits = {"k": np.array([32], np.int64)}
    return _model("TopK", feeds, opset=11, n_out=2, inits=inits, axis=-1), feeds


def attention() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"q": _rand(24, 2, 8, 128, 64), "k": _rand(25, 2, 8, 256, 64),
             "v": _rand(26, 2, 8, 256, 64)}
    return _model("Attention", feeds, opset=23, is_causal=1), feeds


CASES: dict[str, Case] = {f.__name__: f for f in (
    matmul, matmul_vector, matmul_dot, matmul_float16, gemm, conv, softmax,
    layer_normalization, reduce_sum, reduce_sum_all, einsum, topk, attention)}

#: cases whose kernels still reach a float32 sgemm (MatMul and Gemm accumulate in float64
#: through cpu_reference/dot.py, which this BLAS computes identically at any thread count)
BLAS_GEMM_CASES: frozenset[str] = frozenset()
#: the xfail reason for those cases where this machine's BLAS itself is thread dependent
GEMM_THREAD_REASON = (
    "this machine's BLAS ({blas}) returns different float32 GEMM bits with 1 thread than "
    "with 2 (raw numpy.matmul of a 256x512 by 512x384 float32 product), so cpu_reference "
    "MatMul, Gemm, Conv and Attention (float32, and float16 accumulated through float32) "
    "depend on OPENBLAS_NUM_THREADS here; their parity is a tolerance for this reason "
    "(docs/PARITY.md, Determinism)")


def gemm_probe() -> np.ndarray:
    """A raw float32 BLAS GEMM, no onnx-ep involved: tells BLAS effects from ours."""
    return np.matmul(_rand(100, 256, 512), _rand(101, 512, 384))


def blas_name() -> str:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except (TypeError, KeyError):  # numpy < 2 has no mode=
        blas = {}
    return f"{blas.get('name', '?')} {blas.get('version', '?')}".strip()


def run_case(name: str, *, fresh_sessions: int = 1,
             repeat: bool = False) -> list[list[np.ndarray]]:
    """Outputs of ``fresh_sessions`` sessions on case ``name`` (the first run twice
    when ``repeat``)."""
    from onnx_ep import Session

    model, feeds = CASES[name]()
    runs = []
    for i in range(fresh_sessions):
        sess = Session(model, providers=["cpu_reference"])
        runs.append([np.asarray(y) for y in sess.run(None, feeds)])
        if repeat and i == 0:
            runs.append([np.asarray(y) for y in sess.run(None, feeds)])
    return runs


def _describe(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    diff = a != b
    if a.dtype.kind == "f":
        err = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))
        return f"{int(diff.sum())} of {a.size} elements differ, max abs difference {err:g}"
    return f"{int(diff.sum())} of {a.size} elements differ"


def assert_same_bytes(runs: dict[str, list[np.ndarray]]) -> None:
    (first, ref), *rest = runs.items()
    for label, outs in rest:
        assert len(outs) == len(ref)
        for i, (a, b) in enumerate(zip(ref, outs)):
            same = a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
            assert same, f"output {i}: {label} differs from {first}: {_describe(a, b)}"


# ------------------------------------------------------------------ tests

@pytest.fixture(scope="module")
def threaded_outputs(tmp_path_factory) -> dict[int, Any]:
    """``{threads: npz of every case's outputs}`` from one subprocess per thread count."""
    out = {}
    for n in THREAD_COUNTS:
        path = tmp_path_factory.mktemp(f"threads{n}") / "outputs.npz"
        env = {**os.environ, **{v: str(n) for v in THREAD_VARS},
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               "ONNX_EP_PLUGINS": "none"}
        proc = subprocess.run([sys.executable, __file__, str(path)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[n] = np.load(path)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_repeated_runs_in_process_are_identical(name):
    first, second, fresh = run_case(name, fresh_sessions=2, repeat=True)
    assert_same_bytes({"run 1": first, "run 2 (same session)": second,
                       "run 3 (fresh session)": fresh})


@pytest.mark.parametrize("name", list(CASES))
def test_thread_count_does_not_change_bytes(name, threaded_outputs, request):
    probes = [npz["blas_probe/0"].tobytes() for npz in threaded_outputs.values()]
    if name in BLAS_GEMM_CASES and len(set(probes)) > 1:
        # strict: should the op stop differing while raw BLAS still does, this XPASSes
        request.applymarker(pytest.mark.xfail(
            strict=True, reason=GEMM_THREAD_REASON.format(blas=blas_name())))
    (here,) = run_case(name)
    runs = {"this process": here}
    for n, npz in threaded_outputs.items():
        runs[f"subprocess with {n} BLAS/OpenMP thread(s)"] = [
            npz[f"{name}/{i}"] for i in range(len(here))]
    assert_same_bytes(runs)


def _write_all(path: str) -> None:
    arrays = {}
    for name in CASES:
        (outs,) = run_case(name)
        arrays.update({f"{name}/{i}": y for i, y in enumerate(outs)})
    arrays["blas_probe/0"] = gemm_probe()
    np.savez(path, **arrays)


if __name__ == "__main__":
    _write_all(sys.argv[1])
