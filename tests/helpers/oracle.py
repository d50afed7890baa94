"""Build one-node models and run them on onnx-ep and on onnxruntime CPU (the outside oracle)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_ep.core.dtypes import onnx_elem_type

#: onnxruntime 1.31 reads IR <= 13 and opset <= 26; stamp oracle models well inside that.
ORACLE_IR_VERSION = 10
ORACLE_OPSET = 21


def node_model(op_type: str, inputs: Mapping[str, np.ndarray], n_outputs: int = 1, *,
               opset: int = ORACLE_OPSET, domain: str = "", output_names: Sequence[str] = (),
               initializers: Mapping[str, np.ndarray] | None = None,
               **attrs: Any) -> onnx.ModelProto:
    """A model with one ``op_type`` node. Inputs named ``""`` are missing optionals."""
    out_names = list(output_names) or [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, list(inputs), out_names, domain=domain, **attrs)
    inits = initializers or {}
    graph_inputs = [helper.make_tensor_value_info(k, onnx_elem_type(v.dtype), v.shape)
                    for k, v in inputs.items() if k and k not in inits]
    graph = helper.make_graph(
        [node], f"{op_type}_test", graph_inputs,
        [helper.make_empty_tensor_value_info(n) for n in out_names],
        initializer=[onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=ORACLE_IR_VERSION)


#: the oldest onnxruntime with which every comparison of this suite runs. An older release
#: (Python 3.10's newest is 1.23.2) cannot load models of the newer opsets or lacks some
#: kernels: such a comparison skips, naming the release and what it lacks; with this release
#: or a newer one the same error fails the test.
ORT_FULL = (1, 27)

_TOO_NEW = re.compile(r"Opset (\d+) is under development|Could not find an implementation "
                      r"for (\w+\(\d+\))")


def ort_version() -> tuple[int, ...]:
    """The installed onnxruntime's version as integers (``(1, 23, 2)``)."""
    import onnxruntime as ort

    return tuple(int(p) for p in re.findall(r"\d+", ort.__version__)[:3])


def requires_ort(version: str, why: str) -> pytest.MarkDecorator:
    """Skip a comparison on onnxruntime releases older than ``version``, saying ``why``
    (what those releases compute differently)."""
    want = tuple(int(p) for p in version.split("."))
    try:
        have = ort_version()
    except ImportError:
        return pytest.mark.skipif(False, reason="")
    return pytest.mark.skipif(have < want, reason=f"onnxruntime {'.'.join(map(str, have))} < "
                                                  f"{version}: {why}")


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of onnxruntime CPU (graph optimizations off, so numerics are per node)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, dict(feeds))
    except Exception as exc:
        found = _TOO_NEW.search(str(exc))
        if found is None or ort_version() >= ORT_FULL:
            raise
        what = (f"ai.onnx opset {found.group(1)}" if found.group(1)
                else f"a kernel for {found.group(2)}")
        pytest.skip(f"onnxruntime {ort.__version__} lacks {what} (this comparison needs "
                    f"onnxruntime >= {'.'.join(map(str, ORT_FULL))})")


def run_ours(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
             providers: Sequence[str] = ("cpu_reference",)) -> list[np.ndarray]:
    import onnx_ep

    return onnx_ep.Session(model, providers=list(providers)).run(None, dict(feeds))


def assert_matches_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *,
                       rtol: float = 0.0, atol: float = 0.0) -> list[np.ndarray]:
    """Run both and compare: dtype and shape exactly, values within rtol/atol (0 = bytes)."""
    ours = run_ours(model, feeds)
    ref = run_ort(model, feeds)
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype} != onnxruntime {b.dtype}"
        assert a.shape == b.shape, f"output {i}: shape {a.shape} != onnxruntime {b.shape}"
        if a.dtype == object or (rtol == 0 and atol == 0):
            np.testing.assert_array_equal(a, b, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}",
                                       equal_nan=True)
    return ours
