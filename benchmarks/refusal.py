"""How long a refusal takes: a ConstantOfShape whose output (sized from the run's input)
cannot fit, against an admitted run of the same session, side by side.

    python benchmarks/refusal.py [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from onnx import TensorProto, helper

import onnx_ep
from onnx_ep.errors import CapacityUnavailable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    graph = helper.make_graph([helper.make_node("ConstantOfShape", ["shape"], ["y"])], "cos",
                              [helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    s = onnx_ep.Session(model, providers=["cpu_reference"],
                        options=onnx_ep.SessionOptions(memory_limit=1 << 30))
    small, huge = np.array([16], np.int64), np.array([10**12], np.int64)
    s.run(None, {"shape": small})                # plans the one signature
    ok, refused = [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        s.run(None, {"shape": small})
        ok.append(time.perf_counter() - t)
        t = time.perf_counter()
        try:
            s.run(None, {"shape": huge})
        except CapacityUnavailable:
            refused.append(time.perf_counter() - t)
    a, r = statistics.median(ok) * 1e6, statistics.median(refused) * 1e6
    print(f"admitted run (16 floats): median {a:.1f} us; refused run (10^12 floats): median "
          f"{r:.1f} us; refused / admitted {r / a:.2f} ({args.runs} each, interleaved)")


if __name__ == "__main__":
    main()
