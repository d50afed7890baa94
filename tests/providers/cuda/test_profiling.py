"""Profiling on the GPU: CUDA timing events around each device step (and each replayed graph)
give the trace's Kernel events; the profiled answers are the unprofiled ones."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import onnx_ep
from onnx_ep import SessionOptions
from onnx_ep.core.profiling import DEVICE_TID
from onnx_ep.demo import build_demo_model, demo_feeds

pytestmark = pytest.mark.cuda


def _profiled(tmp_path: Path, **options: Any) -> onnx_ep.Session:
    return onnx_ep.Session(build_demo_model(), providers=["cuda", "cpu_reference"],
                           options=SessionOptions(profile=True,
                                                  profile_prefix=str(tmp_path / "gpu"),
                                                  **options))


def _kernels(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((e for e in events if e["cat"] == "Kernel"), key=lambda e: e["ts"])


def test_runtime_timing_events_measure_device_time(cuda_device):
    from onnx_ep.providers.cuda.device_runtime import cuda_runtime

    rt = cuda_runtime(0)
    stream = rt.new_stream()
    start, end = rt.timing_event(), rt.timing_event()
    try:
        start.record(stream)
        rt.synchronize(stream)
        end.record(stream)
        ms = rt.elapsed_ms(start, end)
        assert isinstance(ms, float) and 0.0 <= ms < 1000.0
    finally:
        start.close()
        end.close()
        stream.close()


def test_eager_device_steps_each_get_a_kernel_event(cuda_device, tmp_path):
    plain = onnx_ep.Session(build_demo_model(), providers=["cuda", "cpu_reference"],
                            options=SessionOptions(capture="off"))
    s = _profiled(tmp_path, capture="off")
    try:
        runs = 2
        for seed in range(runs):
            feeds = demo_feeds(seq=16, seed=seed)
            got, want = s.run(None, feeds)[0], plain.run(None, feeds)[0]
            assert got.tobytes() == want.tobytes()
        events = json.loads(Path(s.end_profiling()).read_text())
    finally:
        s.close()
        plain.close()
    nodes = [e for e in events if e["cat"] == "Node"]
    on_device = [e for e in nodes if e["args"]["provider"] == "cuda"]
    assert on_device and all(e["args"]["op_name"] for e in on_device)
    kernels = _kernels(events)
    assert all(e["tid"] == DEVICE_TID and e["dur"] >= 0 for e in kernels)
    # one Kernel event per device node (and copy) run; their names are the nodes'
    assert Counter(e["name"] for e in kernels) == Counter(
        e["name"].removesuffix("_kernel_time") for e in on_device)
    assert sum(e["dur"] for e in kernels) > 0
    for a, b in zip(kernels, kernels[1:]):         # one stream: no overlap on its track
        assert a["ts"] + a["dur"] <= b["ts"]


def test_replayed_graphs_are_one_event_each_with_their_device_time(cuda_device, tmp_path):
    s = _profiled(tmp_path)
    try:
        outs = [s.run(None, demo_feeds(seq=16, seed=0))[0] for _ in range(5)]
        assert all(np.array_equal(o, outs[0]) for o in outs)
        (plan,) = s.capture_report()["plans"]
        events = json.loads(Path(s.end_profiling()).read_text())
    finally:
        s.close()
    replays = [e for e in events if e["cat"] == "Node" and e["name"].startswith("graph_replay[")]
    assert len(replays) == plan["replays"] >= 3
    assert all(e["args"]["op_name"] == "GraphReplay" and e["args"]["nodes"] for e in replays)
    device = [e for e in _kernels(events) if e["name"].startswith("graph_replay[")]
    assert len(device) == len(replays) and all(e["dur"] > 0 for e in device)
