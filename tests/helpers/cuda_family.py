"""Helpers for the movement / reduce / softmax CUDA tests: one-node models run on ``cuda``
and on ``cpu_reference``, compared under the CUDA kernel's promise for the dtype."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_ep.core.kernel import Parity
from onnx_ep.testing.ulp import judge
from tests.helpers.oracle import ORACLE_IR_VERSION

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16}


def random(shape: Sequence[int], dtype: Any, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return rng.integers(-50, 50, size=tuple(shape)).astype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, size=tuple(shape)).astype(dt)
    return (rng.standard_normal(tuple(shape)) * scale).astype(np.float32).astype(dt)


def model(op: str, feeds: dict[str, np.ndarray], attrs: dict | None = None, *,
          consts: dict[str, np.ndarray] | None = None, inputs: Sequence[str] | None = None,
          n_outputs: int = 1, opset: int = 21) -> onnx.ModelProto:
    """``op(*inputs)`` with ``feeds`` as graph inputs and ``consts`` as initializers
    (``inputs`` orders them; ``""`` skips an optional input)."""
    consts = consts or {}
    names = list(inputs) if inputs is not None else list(feeds) + list(consts)
    outs = ["y"] + [f"y{i}" for i in range(1, n_outputs)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", **(attrs or {}))
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                        list(a.shape)) for n, a in feeds.items()]
    graph = helper.make_graph(
        [node], op.lower(), vi, [onnx.ValueInfoProto(name=o) for o in outs],
        initializer=[numpy_helper.from_array(a, n) for n, a in consts.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          ir_version=ORACLE_IR_VERSION)
    # output types (and shapes, where constants allow) from onnx's own inference
    inferred = onnx.shape_inference.infer_shapes(m)
    known = {v.name: v for v in inferred.graph.value_info}
    for o in m.graph.output:
        if o.name in known:
            o.CopyFrom(known[o.name])
    return m


def cuda_kernel(op: str, dtype: Any, opset: int = 21) -> Any:
    """The registered CUDA kernel of ``op`` bound for ``dtype`` (for its promise)."""
    from onnx_ep.core.kernel import NodeMeta, TensorSpec
    from onnx_ep.providers import cuda

    for module in cuda.kernel_modules():
        for k in module.KERNELS:
            if k.key.op_type == op:
                meta = NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs={},
                                inputs=(TensorSpec(dtype, (1,)),))
                return k.bind(meta) if hasattr(k, "bind") else k
    raise KeyError(op)


def check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], parity: Parity | None = None,
          *, what: str = "") -> list[np.ndarray]:
    """Run ``m`` on cuda (every node must be placed there) and on cpu_reference; assert
    each output keeps ``parity`` (default: the CUDA kernel's promise for input 0's dtype)."""
    from onnx_ep import Session

    sess = Session(m, providers=["cuda"])
    got = sess.run(None, feeds)
    ref = Session(m, providers=["cpu_reference"]).run(None, feeds)
    node = m.graph.node[0]
    if parity is None:
        first = next(iter(feeds.values()))
        parity = cuda_kernel(node.op_type, first.dtype, m.opset_import[0].version).parity
    for i, (g, r) in enumerate(zip(got, ref)):
        d = judge(np.asarray(g), np.asarray(r), parity)
        assert d.kept, (f"{what or node.op_type} output {i}: {d.reason} (promise {parity}; "
                        f"max ulp {d.max_ulp}, max abs {d.max_abs})")
    return [np.asarray(g) for g in got]


def record_launches(monkeypatch: Any) -> list[tuple[str, Any, Any, int]]:
    """Every ``CudaKernel.launch`` from now on (``monkeypatch`` undoes it after the test):
    ``(kernel symbol, grid, block, shared bytes)``, the launch itself still made."""
    from onnx_ep.providers.cuda.kernels.base import CudaKernel

    launched: list[tuple[str, Any, Any, int]] = []
    real = CudaKernel.launch

    def spy(self: Any, fn: Any, grid: Any, block: Any, args: Any, stream: Any,
            shared_bytes: int = 0) -> Any:
        launched.append((fn.name, grid, block, shared_bytes))
        return real(self, fn, grid, block, args, stream, shared_bytes=shared_bytes)

    monkeypatch.setattr(CudaKernel, "launch", spy)
    return launched


def check_replays_match_eager(m: onnx.ModelProto, feeds: dict[str, np.ndarray],
                              replays: int = 3) -> None:
    """A session that must capture ``m`` whole: its replays give the eager run's bytes."""
    from onnx_ep import RunOptions, Session, SessionOptions

    sess = Session(m, providers=["cuda"], options=SessionOptions(capture="require"))
    try:
        eager = sess.run(None, feeds, RunOptions(capture="off"))
        for _ in range(replays):
            replay = sess.run(None, feeds)
            for a, b in zip(replay, eager):
                assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
        assert sum(p["replays"] for p in sess.capture_report()["plans"]) >= 1
    finally:
        sess.close()
