"""Profiling (core/profiling.py): the Chrome trace a session writes, on cpu_reference and on
the fake device, eager and captured, from one thread and from several."""

from __future__ import annotations

import gc
import json
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import onnx_ep
from onnx_ep import SessionOptions
from onnx_ep.core.executor import Executor
from onnx_ep.core.profiling import DEVICE_TID, type_name, type_shapes
from onnx_ep.errors import ModelError, NodeError, OptionsError
from tests.core.test_capture import CHAIN, _feed, _model
from tests.helpers.fake_device import DEVICE, FakeDevicePlugin, FakeKernel

NODES = [name for _, name in CHAIN]
OPS = {name: op for op, name in CHAIN}
SESSION_EVENTS = ("model_loading_proto", "session_initialization")


def _session(tmp_path: Path, device: bool = False, plugin: FakeDevicePlugin | None = None,
             model: Any = None, **options: Any) -> onnx_ep.Session:
    opts = SessionOptions(profile=True, profile_prefix=str(tmp_path / "trace"), **options)
    if not device:
        return onnx_ep.Session(model or _model(CHAIN), providers=["cpu_reference"],
                               options=opts)
    plugin = plugin or FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    return onnx_ep.Session(model or _model(CHAIN), providers=[DEVICE, "cpu_reference"],
                           options=opts, plugins=[plugin])


def _read(path: str) -> list[dict[str, Any]]:
    text = Path(path).read_text()
    events = json.loads(text)
    assert isinstance(events, list), "onnxruntime writes a JSON array"
    return events


def _check_format(events: list[dict[str, Any]]) -> None:
    """Every event is complete (or a metadata event) with the keys Perfetto needs, in order."""
    for e in events:
        assert {"cat", "pid", "tid", "dur", "ts", "ph", "name", "args"} <= set(e), e
        assert e["ph"] in ("X", "M")
        assert isinstance(e["ts"], int) and isinstance(e["dur"], int)
        assert e["ts"] >= 0 and e["dur"] >= 0
    ts = [e["ts"] for e in events]
    assert ts == sorted(ts)


def _nodes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["cat"] == "Node"]


def _named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["name"] == name]


# ---------------------------------------------------------------- cpu_reference


def test_a_host_trace_has_the_session_phases_and_one_node_event_per_node_per_run(tmp_path):
    s = _session(tmp_path)
    runs = 3
    for i in range(runs):
        s.run(None, {"x": _feed(i)})
    path = s.end_profiling()
    events = _read(path)
    _check_format(events)
    for name in SESSION_EVENTS:
        assert len(_named(events, name)) == 1
    assert len(_named(events, "model_run")) == runs
    assert len(_named(events, "SequentialExecutor::Execute")) == runs
    nodes = _nodes(events)
    assert Counter(e["name"] for e in nodes) == {f"{n}_kernel_time": runs for n in NODES}
    for e in nodes:
        node = e["name"].removesuffix("_kernel_time")
        args = e["args"]
        assert args["op_name"] == OPS[node] and args["provider"] == "cpu_reference"
        assert args["output_type_shape"] == [{"float": [2, 4]}]
        want_in = ([{"float": [2, 4]}, {"float": [4, 4]}] if OPS[node] == "MatMul"
                   else [{"float": [2, 4]}, {"float": [4]}] if OPS[node] in ("Add", "Mul")
                   else [{"float": [2, 4]}])
        assert args["input_type_shape"] == want_in
        assert args["output_size"] == str(2 * 4 * 4)
    # nodes run in plan order inside their run's Execute event, which is inside model_run
    execs = _named(events, "SequentialExecutor::Execute")
    model_runs = _named(events, "model_run")
    for run, (ex, mr) in enumerate(zip(execs, model_runs)):
        assert mr["ts"] <= ex["ts"] and ex["ts"] + ex["dur"] <= mr["ts"] + mr["dur"]
        inside = [e for e in nodes if ex["ts"] <= e["ts"]
                  and e["ts"] + e["dur"] <= ex["ts"] + ex["dur"]]
        assert [e["name"] for e in inside] == [f"{n}_kernel_time" for n in NODES], run


def test_end_profiling_names_the_file_by_prefix_and_time_and_stops_recording(tmp_path):
    s = _session(tmp_path)
    s.run(None, {"x": _feed(0)})
    path = s.end_profiling()
    assert re.fullmatch(re.escape(str(tmp_path / "trace")) + r"_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d"
                        r"\.json", path), path
    before = Path(path).read_text()
    s.run(None, {"x": _feed(1)})            # not recorded, and runs as before
    assert s.end_profiling() == ""          # onnxruntime: "" once profiling is off
    assert Path(path).read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == [Path(path).name]


def test_two_profiles_ending_in_the_same_second_get_two_files(tmp_path):
    a, b = _session(tmp_path), _session(tmp_path)
    pa, pb = a.end_profiling(), b.end_profiling()
    assert pa != pb and Path(pa).exists() and Path(pb).exists()


def test_profiling_off_writes_nothing_and_keeps_the_fast_loop(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    general = []
    original = Executor._run_general

    def spy(self: Executor, *args: Any, **kwargs: Any) -> None:
        general.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Executor, "_run_general", spy)
    s = onnx_ep.Session(_model(CHAIN), providers=["cpu_reference"])
    s.run(None, {"x": _feed(0)})
    assert general == []                    # the plain chain runs the fast loop
    assert s.profiling_start_time_ns == 0 and s.end_profiling() == ""
    assert list(tmp_path.iterdir()) == []
    p = _session(tmp_path)
    p.run(None, {"x": _feed(0)})
    assert general == [1]                   # profiled: the general loop, which times steps
    p.end_profiling()


def test_profiled_outputs_equal_unprofiled_ones(tmp_path):
    plain = onnx_ep.Session(_model(CHAIN), providers=["cpu_reference"])
    s = _session(tmp_path)
    for i in range(3):
        np.testing.assert_array_equal(s.run(None, {"x": _feed(i)})[0],
                                      plain.run(None, {"x": _feed(i)})[0])
    s.end_profiling()


def test_profiling_start_time_is_the_wall_clock_when_the_session_was_created(tmp_path):
    before = time.time_ns()
    a = _session(tmp_path)
    b = _session(tmp_path)
    after = time.time_ns()
    assert before <= a.profiling_start_time_ns <= b.profiling_start_time_ns <= after
    a.end_profiling()
    assert a.profiling_start_time_ns > 0     # still known after the profile ended
    b.end_profiling()


def test_a_path_model_is_loaded_from_a_uri(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(CHAIN), path)
    s = _session(tmp_path, model=str(path))
    events = _read(s.end_profiling())
    assert len(_named(events, "model_loading_uri")) == 1


def test_concurrent_runs_from_threads_keep_every_event_and_each_thread_nested(tmp_path):
    s = _session(tmp_path)
    threads, runs = 6, 5
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(runs):
                s.run(None, {"x": _feed(seed * 100 + i)})
        except BaseException as exc:     # reported by the main thread
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    events = _read(s.end_profiling())
    _check_format(events)
    total = threads * runs
    assert len(_named(events, "model_run")) == total
    assert Counter(e["name"] for e in _nodes(events)) == {
        f"{n}_kernel_time": total for n in NODES}
    by_tid: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        if e["name"] == "SequentialExecutor::Execute" or e["cat"] == "Node":
            by_tid.setdefault(e["tid"], []).append(e)
    assert len(by_tid) >= 2                 # the runs' own threads, not one shared tid
    for evs in by_tid.values():
        execs = [e for e in evs if e["cat"] == "Session"]
        nodes = [e for e in evs if e["cat"] == "Node"]
        for a, b in zip(execs, execs[1:]):  # one thread's runs never overlap
            assert a["ts"] + a["dur"] <= b["ts"]
        for n in nodes:                     # each node lies in one of its thread's runs
            assert any(x["ts"] <= n["ts"] and n["ts"] + n["dur"] <= x["ts"] + x["dur"]
                       for x in execs)


def test_a_session_dropped_while_profiling_writes_its_trace(tmp_path):
    s = _session(tmp_path)
    s.run(None, {"x": _feed(0)})
    del s
    gc.collect()
    (path,) = tmp_path.iterdir()
    assert len(_named(_read(str(path)), "model_run")) == 1


def test_a_session_that_fails_to_load_writes_nothing(tmp_path):
    with pytest.raises(ModelError):
        _session(tmp_path, model=b"not a model")
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_profile_options_are_checked():
    with pytest.raises(OptionsError, match="profile must be True or False"):
        SessionOptions(profile="yes")
    with pytest.raises(OptionsError, match="profile_prefix"):
        SessionOptions(profile_prefix="")
    opts = SessionOptions.from_dict({"profile": True, "profile_prefix": "out/p"})
    assert opts.profile and opts.profile_prefix == "out/p"
    assert SessionOptions().profile is False


def test_type_shapes_name_element_types_as_onnxruntime_does():
    values = [np.zeros((2, 3), np.float32), np.zeros(4, np.float64), np.zeros((), np.int64),
              np.array(["a"], object), np.zeros(1, np.float16), None, [np.zeros(1)]]
    assert type_shapes(values) == [{"float": [2, 3]}, {"double": [4]}, {"int64": []},
                                   {"string": [1]}, {"float16": [1]}]
    assert type_name(np.bool_) == "bool" and type_name(np.uint8) == "uint8"


# ---------------------------------------------------------------- the fake device


def test_device_steps_get_a_kernel_event_timed_by_the_runtimes_events(tmp_path):
    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    s = _session(tmp_path, device=True, plugin=plugin, capture="off")
    runs = 3
    for i in range(runs):
        s.run(None, {"x": _feed(i)})
    events = _read(s.end_profiling())
    _check_format(events)
    assert plugin.runtime.events_live == 0          # every timing event was closed
    nodes = _nodes(events)
    names = Counter(e["name"] for e in nodes)
    assert names == {**{f"{n}_kernel_time": runs for n in NODES},
                     "copy:x->fake_kernel_time": runs, "copy:y->cpu_kernel_time": runs}
    ops = {e["name"]: e["args"]["op_name"] for e in nodes}
    assert ops["copy:x->fake_kernel_time"] == "MemcpyFromHost"
    assert ops["copy:y->cpu_kernel_time"] == "MemcpyToHost"
    assert {e["args"]["provider"] for e in nodes} == {DEVICE}
    mm = next(e for e in nodes if e["name"] == "mm_kernel_time")
    assert mm["args"]["input_type_shape"] == [{"float": [2, 4]}, {"float": [4, 4]}]
    kernels = [e for e in events if e["cat"] == "Kernel"]
    assert all(e["tid"] == DEVICE_TID for e in kernels)
    assert Counter(e["name"] for e in kernels) == {
        **{n: runs for n in NODES}, "copy:x->fake": runs, "copy:y->cpu": runs}
    # the device track is one stream: its events never overlap
    kernels.sort(key=lambda e: e["ts"])
    for a, b in zip(kernels, kernels[1:]):
        assert a["ts"] + a["dur"] <= b["ts"]
    (meta,) = [e for e in events if e["ph"] == "M"]
    assert meta["tid"] == DEVICE_TID and meta["args"] == {"name": "device"}


def test_captured_segments_are_one_event_per_replay_named_by_their_steps(tmp_path):
    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    s = _session(tmp_path, device=True, plugin=plugin)
    want = [onnx_ep.Session(_model(CHAIN), providers=["cpu_reference"]).run(
        None, {"x": _feed(i)})[0] for i in range(5)]
    got = [s.run(None, {"x": _feed(i)})[0] for i in range(5)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert s.capture_report()["plans"][0]["replays"] == 3
    events = _read(s.end_profiling())
    _check_format(events)
    assert plugin.runtime.events_live == 0
    nodes = _nodes(events)
    names = Counter(e["name"] for e in nodes)
    # run 1 eager (node by node), run 2 records the segment, runs 3-5 replay it
    assert names == {**{f"{n}_kernel_time": 1 for n in NODES},
                     "graph_record[mm .. out]": 1, "graph_replay[mm .. out]": 3,
                     "copy:x->fake_kernel_time": 5, "copy:y->cpu_kernel_time": 5}
    replay = next(e for e in nodes if e["name"] == "graph_replay[mm .. out]")
    assert replay["args"]["nodes"] == NODES and replay["args"]["op_name"] == "GraphReplay"
    assert replay["args"]["provider"] == DEVICE
    kernels = Counter(e["name"] for e in events if e["cat"] == "Kernel")
    assert kernels["graph_replay[mm .. out]"] == 3 and kernels["graph_record[mm .. out]"] == 1


def test_a_failing_device_kernel_leaves_no_timing_event_behind(tmp_path):
    def boom(*arrays: np.ndarray) -> np.ndarray:
        raise RuntimeError("kernel bug")

    plugin = FakeDevicePlugin(ops=("Add", "Relu", "MatMul", "Mul"))
    plugin.kernels["Mul"] = bad = FakeKernel("Mul", boom)
    assert bad.key.op_type == "Mul"
    s = _session(tmp_path, device=True, plugin=plugin, capture="off")
    with pytest.raises(NodeError, match="kernel bug"):
        s.run(None, {"x": _feed(0)})
    assert plugin.runtime.events_live == 0
    events = _read(s.end_profiling())
    assert _named(events, "model_run") == []         # the failed run is not in the trace
