"""Helpers for the gemm / conv / pool CUDA tests: one-node models, CPU simulations, checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from onnx_ep.core.kernel import NodeMeta, Parity, ParityKind, TensorSpec
from tests.helpers.oracle import ORACLE_IR_VERSION

BF16 = np.dtype(ml_dtypes.bfloat16)
#: the float dtypes the dense families run, as pytest ids
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16}


def meta(op: str, inputs: Sequence[tuple[Any, Sequence[Any]] | None], attrs: dict | None = None,
         outputs: Sequence[str] = ("y",), opset: int = 21) -> NodeMeta:
    """A NodeMeta for ``op`` with ``(dtype, shape)`` per input (``None`` for a missing one)."""
    specs = tuple(None if s is None else TensorSpec(s[0], s[1]) for s in inputs)
    names = tuple("" if s is None else f"in{i}" for i, s in enumerate(inputs))
    return NodeMeta(name=f"{op.lower()}_node", op_type=op, domain="", opset=opset,
                    attrs=dict(attrs or {}), inputs=specs, outputs=(None,) * len(outputs),
                    input_names=names, output_names=tuple(outputs))


def random(shape: Sequence[int], dtype: Any, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(tuple(shape)) * scale).astype(np.float32).astype(dtype)


def one_node_model(op: str, feeds: dict[str, np.ndarray], attrs: dict | None = None,
                   n_outputs: int = 1, opset: int = 21) -> onnx.ModelProto:
    """``op(*feeds) -> y`` with every operand a graph input (bfloat16 works without
    initializer support)."""
    names = list(feeds)
    outs = ["y"] + [f"y{i}" for i in range(1, n_outputs)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", **(attrs or {}))
    elem = {name: onnx.helper.np_dtype_to_tensor_dtype(a.dtype) for name, a in feeds.items()}
    graph = helper.make_graph(
        [node], op.lower(),
        [helper.make_tensor_value_info(n, elem[n], list(a.shape)) for n, a in feeds.items()],
        [helper.make_tensor_value_info(o, elem[names[0]], None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=ORACLE_IR_VERSION)


def run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Output 0 on ``cuda`` only and on ``cpu_reference``."""
    from onnx_ep import Session

    got = Session(model, providers=["cuda"]).run(None, feeds)[0]
    ref = Session(model, providers=["cpu_reference"]).run(None, feeds)[0]
    return np.asarray(got), np.asarray(ref)


def assert_parity(got: np.ndarray, ref: np.ndarray, parity: Parity, what: str = "") -> None:
    """``got`` keeps ``parity`` against ``ref`` (dtype and shape equal first)."""
    assert got.dtype == ref.dtype and got.shape == ref.shape, \
        f"{what}: got {got.dtype}{got.shape}, reference {ref.dtype}{ref.shape}"
    if parity.kind is ParityKind.EXACT:
        same = got.tobytes() == ref.tobytes()
        if not same:
            diff = np.flatnonzero(got.view(f"u{got.itemsize}") != ref.view(f"u{ref.itemsize}"))
            raise AssertionError(f"{what}: {diff.size} of {got.size} elements differ in bits "
                                 f"(first at flat index {diff[0]}: {got.reshape(-1)[diff[0]]!r} "
                                 f"vs {ref.reshape(-1)[diff[0]]!r})")
        return
    x, r = got.astype(np.float64), ref.astype(np.float64)
    err = np.abs(x - r)
    bound = parity.atol + parity.rtol * np.abs(r)
    bad = ~(err <= bound) & ~(np.isnan(x) & np.isnan(r))
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {x.size} elements break {parity}; "
                           f"max abs error {float(np.nanmax(err)):.3g}")
