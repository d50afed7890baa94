"""What the benchmark scripts share: the Add-chain model and a cProfile of onnx-ep runs.

The scripts run as ``python benchmarks/<name>.py``, which puts this folder on ``sys.path``.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import subprocess
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper


def add_chain_model(n: int) -> onnx.ModelProto:
    """``y = x + c + c + ... + c`` with ``n`` Add nodes on float32 [1]."""
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i - 1}", "c"],
                              ["y" if i == n - 1 else f"t{i}"], name=f"add{i}")
             for i in range(n)]
    graph = helper.make_graph(
        nodes, "add_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializer=[onnx.numpy_helper.from_array(np.array([1.0], np.float32), "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def profile_runs(model: onnx.ModelProto, feeds: dict[str, np.ndarray], calls: int,
                 top: int, sorts: tuple[str, ...] = ("tottime",)) -> str:
    """cProfile of ``calls`` cpu_reference runs after one warm-up run, as text."""
    from onnx_ep import Session

    sess = Session(model, providers=["cpu_reference"])
    sess.run(None, feeds)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        sess.run(None, feeds)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    for key in sorts:
        stats.sort_stats(key).print_stats(top)
    return buf.getvalue()


def commit_id() -> str:
    """The short commit being measured: ``ONNX_EP_COMMIT`` (a tree copied without its own
    ``.git``, as on a GPU machine), else git's HEAD, else ``"unknown"``."""
    commit = os.environ.get("ONNX_EP_COMMIT", "")
    if commit:
        return commit
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def time_per_call(fn: Callable[[], Any], repeat: int,
                  min_time: float) -> tuple[float, float, int]:
    """(min, median) seconds per call and the calls per timing, timeit-style: each of
    ``repeat`` timings runs ``fn`` enough times to last about ``min_time`` seconds."""
    timer = timeit.Timer(fn)
    number, total = timer.autorange()   # total >= 0.2 s
    number = max(1, round(number * min_time / total))
    per_call = [t / number for t in timer.repeat(repeat=repeat, number=number)]
    return min(per_call), statistics.median(per_call), number
