"""Helpers for the tests of the CUDA elementwise, activation and Cast kernels: the kernels by
op type on both providers, the cpu_reference output they are compared with, and (GPU tests)
running one node on the device and comparing bytes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity, ParityKind, TensorSpec
from onnx_ep.providers.cpu_reference import activation as ref_activation
from onnx_ep.providers.cpu_reference import cast as ref_cast
from onnx_ep.providers.cpu_reference import elementwise as ref_elementwise
from onnx_ep.providers.cuda.kernels import activation, cast, elementwise
from onnx_ep.testing.ulp import judge

#: cpu_reference kernels by op type
REF = {k.key.op_type: k for k in
       ref_elementwise.KERNELS + ref_activation.KERNELS + ref_cast.KERNELS}
#: CUDA kernels by op type
ROWS = {k.key.op_type: k for k in elementwise.KERNELS + activation.KERNELS + cast.KERNELS}


def reference(op: str, arrays: Sequence[Any], meta: NodeMeta) -> np.ndarray:
    """cpu_reference's output of the ``op`` node ``meta`` on host ``arrays``."""
    out = [None]
    with np.errstate(all="ignore"):
        REF[op].execute_with_workspace(ExecutionContext(meta), list(arrays), out, None)
    return np.asarray(out[0])


def dtype_meta(op: str, *specs: tuple, opset: int = 21, **attrs) -> NodeMeta:
    """Node ``n`` of ``op`` over ``(dtype, shape)`` input specs (host tests)."""
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(TensorSpec(dt, shape) for dt, shape in specs))


# ---------------------------------------------------------------- GPU: one node on the device

FLOAT_SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5,
                  2.5, -2.5, 3.0, 1e-40, -1e-40, 65504.0, 7e4, 3e38, -3e38, 1e300, 2.0,
                  -2.0, 0.84375, 1.25, 6.0, -6.0, 28.0]


def array_meta(op: str, arrays, opset: int = 21, **attrs) -> NodeMeta:
    """Node ``n`` of ``op`` over host ``arrays`` (``None`` for an omitted input)."""
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(None if a is None else TensorSpec(a.dtype, a.shape)
                                 for a in arrays))


def run_cuda(op: str, arrays, meta: NodeMeta, stream, allocator) -> np.ndarray:
    """The CUDA kernel's output of the ``op`` node ``meta`` on host ``arrays`` (bound and
    launched directly on DeviceTensors)."""
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    kernel = ROWS[op]
    verdict = kernel.supports(meta)
    assert verdict, verdict.reason
    bound = kernel.bind(meta)
    (spec,) = bound.infer_outputs(meta)
    inputs = [None if a is None else
              DeviceTensor.from_numpy(np.ascontiguousarray(a), allocator, stream, holder="test")
              for a in arrays]
    block = allocator.allocate(max(spec.nbytes, 1), Role.ACTIVATIONS, "test")
    y = DeviceTensor(block.ptr, spec.dtype, spec.shape, inputs[0].device, owner=block)
    bound.execute_with_workspace(ExecutionContext(meta, stream=stream, provider="cuda"),
                                 inputs, [y], None)
    return y.numpy(stream)


def promise_of(op: str, meta: NodeMeta) -> Parity:
    """The parity the bound CUDA kernel declares for ``meta``."""
    return ROWS[op].bind(meta).parity


def assert_same_bytes(op, got: np.ndarray, want: np.ndarray, arrays, *,
                      nan_payload: bool = True, promise: Parity = Parity.EXACT) -> None:
    """Bytes equal (``nan_payload=False``: any NaN matches any NaN); a non-exact
    ``promise`` is checked with the harness's :func:`judge` instead."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    g = got.reshape(-1).view(np.uint8).reshape(got.size, -1)
    w = want.reshape(-1).view(np.uint8).reshape(want.size, -1)
    differs = (g != w).any(axis=1)
    if not nan_payload and got.dtype.kind in "fV" and got.dtype != np.bool_:
        both_nan = (np.isnan(got.reshape(-1).astype(np.float64))
                    & np.isnan(want.reshape(-1).astype(np.float64)))
        differs &= ~both_nan
    if promise.kind is not ParityKind.EXACT:
        verdict = judge(got, want, promise)
        if verdict.kept:
            return
        head = (f"{op}: promise {promise} broken: {verdict.reason} (max ulp {verdict.max_ulp}, "
                f"max abs {verdict.max_abs:.3g})")
    else:
        head = f"{op}: {int(differs.sum())} of {got.size} elements differ"
    bad = np.nonzero(differs)[0]
    if bad.size or promise.kind is not ParityKind.EXACT:
        flat = [np.broadcast_to(a, got.shape).reshape(-1) for a in arrays if a is not None]
        rows = [f"  [{i}] in={[f.astype(np.float64)[i] if f.dtype.kind != 'b' else f[i] for f in flat]}"
                f" got={got.reshape(-1)[i]!r} ({g[i][::-1].tobytes().hex()}) "
                f"want={want.reshape(-1)[i]!r} ({w[i][::-1].tobytes().hex()})"
                for i in bad[:8]]
        pytest.fail(head + "\n" + "\n".join(rows))


def sample_values(dtype: np.dtype, n: int, rng, *, specials: bool = False) -> np.ndarray:
    """``n`` values of ``dtype``: every integer edge, floats over several scales (and
    :data:`FLOAT_SPECIALS` first with ``specials``)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
        lo = max(int(info.min), -20)  # small values, and every edge, first
        v[: min(n, 40)] = np.arange(lo, lo + 40)[: min(n, 40)].astype(dtype)
        edges = np.array([info.min, info.max, info.min + 1, info.max - 1], dtype=dtype)
        v[40:44] = edges[: len(v[40:44])]
        return v
    scale = rng.choice([1e-3, 0.3, 1.0, 3.0, 30.0], n)
    v = rng.standard_normal(n) * scale
    if specials:
        k = min(n, len(FLOAT_SPECIALS))
        v[:k] = FLOAT_SPECIALS[:k]
    with np.errstate(all="ignore"):
        return v.astype(dtype)
