"""A typical onnxruntime user script, unchanged but for its import.

    python examples/onnxruntime_user/script.py [--cuda]

Options, threads and logging, providers by onnxruntime's names, metadata, inputs, a run,
an IOBinding run and profiling: the calls an onnxruntime user makes, with
``import onnx_ep.onnxruntime as ort`` in place of ``import onnxruntime as ort``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnx_ep.onnxruntime as ort  # the one changed line: was `import onnxruntime as ort`


def build_model(path: str) -> None:
    """y = relu(x @ w + b), a float input of dynamic batch."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="example", ir_version=8)
    onnx.save(model, path)


def main(cuda: bool) -> dict:
    work = tempfile.mkdtemp()
    path = os.path.join(work, "mlp.onnx")
    build_model(path)

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(work, "profile")
    providers = (["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda
                 else ["CPUExecutionProvider"])
    sess = ort.InferenceSession(path, so, providers=providers)

    meta = sess.get_modelmeta()
    inp, out = sess.get_inputs()[0], sess.get_outputs()[0]
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    (y,) = sess.run([out.name], {inp.name: x})

    binding = sess.io_binding()
    binding.bind_cpu_input(inp.name, x)
    binding.bind_output(out.name)
    sess.run_with_iobinding(binding)
    (y_bound,) = binding.copy_outputs_to_cpu()

    profile = sess.end_profiling()
    with open(profile) as f:
        events = json.load(f)
    return {"providers": sess.get_providers(), "producer": meta.producer_name,
            "input": [inp.name, inp.shape, inp.type], "output_shape": list(y.shape),
            "iobinding_equal": bool(np.array_equal(y, y_bound)),
            "profile_events": len(events), "device": ort.get_device()}


if __name__ == "__main__":
    print(json.dumps(main("--cuda" in sys.argv), indent=2))
