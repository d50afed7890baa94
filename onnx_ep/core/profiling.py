"""Profiling: a Chrome trace of a session's load and runs, in onnxruntime's event format.

``SessionOptions(profile=True)`` makes the session record, from its creation until
``Session.end_profiling()``, one complete event (``"ph": "X"``, ``ts`` and ``dur`` in
microseconds since profiling started) per node run and per session phase; ``end_profiling``
writes them as a JSON array to ``<profile_prefix>_<YYYY-MM-DD_HH-MM-SS>.json``, which
Perfetto and chrome://tracing open and onnxruntime's profile readers parse
(docs/PROFILING.md).

- ``cat: "Session"``: ``model_loading_uri`` / ``_array`` / ``_proto``,
  ``session_initialization``, then per run ``model_run`` around ``SequentialExecutor::Execute``.
- ``cat: "Node"``: ``<node>_kernel_time`` per step that ran, on the running thread's ``tid``,
  with ``args`` ``op_name``, ``provider``, ``node_index``, ``output_size``,
  ``input_type_shape`` and ``output_type_shape`` (``[{"float": [3, 4]}, ...]``) as
  onnxruntime writes them. Copies between host and device are ``MemcpyFromHost`` /
  ``MemcpyToHost`` / ``Memcpy`` nodes. A captured segment of a device plan is one event per
  replay (``graph_replay[<first> .. <last>]``, its steps in ``args.nodes``), not per node.
- ``cat: "Kernel"``: for device steps and segments, the device time between two timing
  events the runtime recorded on the session's stream around the step (the optional
  ``timing_event`` / ``elapsed_ms`` of :class:`~onnx_ep.core.provider.DeviceRuntime`), on a
  device track of its own. Device time is measured relative to an event recorded at the
  run's first device step, placed on the host clock where that step was enqueued, so the
  device track shows durations exactly and start times approximately.

A node event's ``dur`` is host time: on a device that is the time to enqueue the work, which
is why the device's own time is a separate event. Profiling off costs nothing: the executor
keeps its fast loop unless it is handed a :class:`RunTrace`.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.dtypes import dtype_type_string
from onnx_ep.core.options import PROFILE_PREFIX
from onnx_ep.core.placement import HOST

#: ``tid`` of the device track: device time belongs to no host thread (thread ids are
#: positive and far below this on Linux, macOS and Windows)
DEVICE_TID = 2**31 - 1

@functools.lru_cache(maxsize=256)
def type_name(dtype: Any) -> str:
    """The element type as onnxruntime names it in a trace (``float``, ``int64``, ...): the
    ``tensor(...)`` type string's inside; cached, since every step asks."""
    return dtype_type_string(dtype)[len("tensor("):-1]


def type_shapes(values: Sequence[Any]) -> list[dict[str, list[int]]]:
    """onnxruntime's ``input_type_shape`` / ``output_type_shape``: ``{type: shape}`` for each
    tensor among ``values`` (host arrays or device tensors); missing optional values and
    sequences are left out, as onnxruntime leaves out what is not a tensor."""
    out: list[dict[str, list[int]]] = []
    for v in values:
        shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
        if shape is not None and dtype is not None and not isinstance(v, type):
            out.append({type_name(dtype): [int(d) for d in shape]})
    return out


def _nbytes(values: Sequence[Any]) -> int:
    total = 0
    for v in values:
        n = getattr(v, "nbytes", None)
        if isinstance(n, (int, np.integer)):
            total += int(n)
    return total


def _event(cat: str, name: str, tid: int, start_ns: int, end_ns: int,
           args: dict[str, Any] | None = None) -> dict[str, Any]:
    """A complete event; ``ts`` and ``dur`` from whole microseconds of both ends, so an event
    inside another never ends after it."""
    ts = start_ns // 1000
    return {"cat": cat, "pid": os.getpid(), "tid": tid, "dur": max(0, end_ns // 1000 - ts),
            "ts": ts, "ph": "X", "name": name, "args": args or {}}


def device_runtime(program: Any) -> Any:
    """The runtime that times ``program``'s device steps, or None.

    A device program always holds copy steps (its outputs come back to the host through
    one), and each copy step carries its device's runtime; a runtime without the optional
    ``timing_event`` / ``elapsed_ms`` leaves device time out of the trace.
    """
    for st in program.steps:
        if st.copy is not None:
            rt = getattr(st.call, "runtime", None)
            return rt if hasattr(rt, "timing_event") and hasattr(rt, "elapsed_ms") else None
    return None


class _Trace:
    """What gets written: the events and the file name. Kept apart from :class:`Profiler`
    so that a session dropped while profiling still writes its trace (its finalizer holds
    this, not the profiler)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.active = True
        #: a session that failed to load writes nothing
        self.initialized = False
        #: where the last device event of the trace ends (µs): a run's device track starts
        #: after it, since one stream runs one run at a time
        self.device_end = 0


def _write(trace: _Trace) -> str:
    """Stop recording and write the trace; its path ("" when there is nothing to write)."""
    with trace.lock:
        if not trace.active:
            return ""
        trace.active = False
        events, trace.events = trace.events, []
    if not trace.initialized:
        return ""
    events.sort(key=lambda e: (e["ts"], -e["dur"]))   # a parent before its children
    # names the device track in Perfetto; it has every key a readers' filter may look up
    meta = [{"cat": "Metadata", "pid": os.getpid(), "tid": DEVICE_TID, "dur": 0, "ts": 0,
             "ph": "M", "name": "thread_name", "args": {"name": "device"}}
            ] if any(e["tid"] == DEVICE_TID for e in events) else []
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    base, n = f"{trace.prefix}_{stamp}", 1
    path = f"{base}.json"
    while True:
        try:
            # "x": two sessions ending in the same second never overwrite each other
            with open(path, "x", encoding="utf-8") as f:
                f.write("[\n" + ",\n".join(json.dumps(e) for e in meta + events) + "\n]\n")
            return path
        except FileExistsError:
            n += 1
            path = f"{base}_{n}.json"


def _write_at_exit(trace: _Trace) -> None:
    """The finalizer of a profiler never ended: write its trace, as onnxruntime does when a
    profiling session is destroyed; a failure is a warning, since nothing can catch it."""
    try:
        _write(trace)
    except OSError as exc:
        from onnx_ep.errors import OnnxEpWarning

        warnings.warn(f"could not write the profile of a session dropped while profiling "
                      f"(prefix {trace.prefix!r}): {exc}", OnnxEpWarning, stacklevel=1)


class Profiler:
    """A session's profile, from its creation to :meth:`end`.

    Thread-safe: each run records into its own :class:`RunTrace`, merged when it ends.

    :ivar start_ns: when profiling started, ``time.time_ns()`` (onnxruntime's
        ``get_profiling_start_time_ns``).
    """

    def __init__(self, prefix: str = PROFILE_PREFIX) -> None:
        self.start_ns = time.time_ns()
        self._t0 = time.perf_counter_ns()
        self._loaded = 0
        self._trace = _Trace(prefix)
        self._finalizer = weakref.finalize(self, _write_at_exit, self._trace)

    @classmethod
    def start(cls, options: Any) -> Profiler | None:
        """A profiler when ``options.profile`` is set, else None (profiling off)."""
        return cls(options.profile_prefix) if options.profile else None

    @property
    def active(self) -> bool:
        """Whether events are still recorded (False once :meth:`end` ran)."""
        return self._trace.active

    def now(self) -> int:
        """Nanoseconds since profiling started (a monotonic clock)."""
        return time.perf_counter_ns() - self._t0

    # ------------------------------------------------------------ session phases
    def loaded(self, model: Any) -> None:
        """The model is read: ``model_loading_*`` from the start until now."""
        kind = ("uri" if isinstance(model, (str, os.PathLike))
                else "array" if isinstance(model, (bytes, bytearray, memoryview)) else "proto")
        self._loaded = self.now()
        self.add([_event("Session", f"model_loading_{kind}", threading.get_native_id(), 0,
                         self._loaded)])

    def initialized(self) -> None:
        """The session is ready: ``session_initialization`` from the load until now."""
        self._trace.initialized = True
        self.add([_event("Session", "session_initialization", threading.get_native_id(),
                         self._loaded, self.now())])

    def model_run(self, started: float) -> None:
        """A run ended: ``model_run`` from ``started`` (``time.perf_counter()``) until now."""
        start = int(started * 1e9) - self._t0
        self.add([_event("Session", "model_run", threading.get_native_id(), max(0, start),
                         self.now())])

    def run(self, program: Any) -> RunTrace:
        """A recorder for one run of ``program`` (the executor's)."""
        return RunTrace(self, program)

    # ------------------------------------------------------------ events
    def add(self, events: list[dict[str, Any]]) -> None:
        """Merge finished events (dropped once the profile has ended)."""
        trace = self._trace
        with trace.lock:
            if not trace.active:
                return
            device = [e for e in events if e["tid"] == DEVICE_TID]
            if device:
                # the device timeline is placed approximately; keep it from overlapping the
                # last run's, which Perfetto would draw as wrongly nested slices
                shift = max(0, trace.device_end - min(e["ts"] for e in device))
                for e in device:
                    e["ts"] += shift
                trace.device_end = max(e["ts"] + e["dur"] for e in device)
            trace.events.extend(events)

    def end(self) -> str:
        """Stop recording and write the trace file; its path ("" when already ended).

        :raises OSError: the file cannot be written (a missing directory in the prefix).
        """
        self._finalizer.detach()
        return _write(self._trace)


class RunTrace:
    """One run's events: the executor wraps each step's call with :meth:`timed` and each
    captured segment with :meth:`segment`, and calls :meth:`finish` when the run ends.

    Device steps are bracketed by two timing events on their stream; their device time is
    read in :meth:`finish`, after the run, so the run itself never waits for the device.
    """

    def __init__(self, profiler: Profiler, program: Any) -> None:
        self.profiler = profiler
        self.program = program
        self.tid = threading.get_native_id()
        self.events: list[dict[str, Any]] = []
        self.start = profiler.now()
        self.runtime = device_runtime(program)
        self._index: dict[int, int] | None = None
        #: (start event, end event, the Kernel event to complete)
        self._pending: list[tuple[Any, Any, dict[str, Any]]] = []
        #: the event every device time is measured from, and its host time (ns)
        self._anchor: tuple[Any, int] | None = None

    def _node_index(self, step: Any) -> int:
        if self._index is None:
            self._index = {id(st): i for i, st in enumerate(self.program.steps)}
        return self._index.get(id(step), -1)

    def _marks(self, step: Any, stream: Any) -> Any:
        """A started timing event on ``stream`` when ``step`` runs on the device."""
        rt = self.runtime
        if rt is None or stream is None or (step.copy is None and step.placed is not None
                                            and step.placed.device == HOST):
            return None
        if self._anchor is None:
            anchor = rt.timing_event()
            anchor.record(stream)
            self._anchor = (anchor, self.profiler.now())
        start = rt.timing_event()
        start.record(stream)
        return start

    def _close(self, start: Any, stream: Any, kernel: dict[str, Any] | None) -> None:
        """Record the end event after a device step (``kernel``: the event to complete),
        or release ``start`` when the step failed (``kernel`` None)."""
        if kernel is None:
            _release(start)
            return
        end = self.runtime.timing_event()
        end.record(stream)
        self._pending.append((start, end, kernel))

    def timed(self, step: Any) -> Callable[..., None]:
        """``step.call`` that records the step's Node event (and Kernel event on a device)."""

        def call(ctx: Any, args: Sequence[Any], outs: list[Any], workspace: Any) -> None:
            op, provider = _op_and_provider(step)
            stream = getattr(ctx, "stream", None)
            inputs = type_shapes(args)
            mark = self._marks(step, stream)
            t = self.profiler.now()
            try:
                step.call(ctx, args, outs, workspace)
            except BaseException:
                if mark is not None:
                    self._close(mark, stream, None)
                raise
            t_end = self.profiler.now()
            args_ = {"op_name": op, "provider": provider,
                     "node_index": str(self._node_index(step)),
                     "output_size": str(_nbytes(outs)), "input_type_shape": inputs,
                     "output_type_shape": type_shapes(outs)}
            self.events.append(_event("Node", f"{step.name}_kernel_time", self.tid, t, t_end,
                                      args_))
            if mark is not None:
                self._close(mark, stream, {"cat": "Kernel", "name": step.name,
                                           "args": {"op_name": op, "provider": provider}})

        return call

    def segment(self, indices: Sequence[int], run: Callable[[], bool], what: str,
                stream: Any) -> bool:
        """Run ``run`` (a captured segment's replay, or its recording) as one event named
        by its first and last step; ``run``'s answer (False: it did not run, the steps run
        eagerly and are traced one by one)."""
        steps = [self.program.steps[i] for i in indices]
        first = steps[0]
        mark = self._marks(first, stream)
        t = self.profiler.now()
        try:
            ok = run()
        except BaseException:
            if mark is not None:
                self._close(mark, stream, None)
            raise
        t_end = self.profiler.now()
        name = f"graph_{what}[{steps[0].name} .. {steps[-1].name}]"
        provider = first.placed.provider if first.placed is not None else ""
        args = {"op_name": f"Graph{what.capitalize()}", "provider": provider,
                "node_index": str(indices[0]), "nodes": [st.name for st in steps]}
        if mark is not None:
            self._close(mark, stream, {"cat": "Kernel", "name": name, "args": args} if ok
                        else None)
        if ok:
            self.events.append(_event("Node", name, self.tid, t, t_end, args))
        return ok

    def finish(self, ok: bool) -> None:
        """The run ended (``ok``: without an error): read the device times, add the
        ``SequentialExecutor::Execute`` event, merge into the profile."""
        pending, self._pending = self._pending, []
        anchor, self._anchor = self._anchor, None
        try:
            if ok and anchor is not None:
                rt, (a, host) = self.runtime, anchor
                for start, end, ev in pending:
                    at = host + int(rt.elapsed_ms(a, start) * 1e6)
                    dur = int(rt.elapsed_ms(start, end) * 1e6)
                    self.events.append(_event("Kernel", ev["name"], DEVICE_TID, at, at + dur,
                                              ev["args"]))
        finally:
            for start, end, _ in pending:
                _release(start)
                _release(end)
            if anchor is not None:
                _release(anchor[0])
        if ok:
            self.events.append(_event("Session", "SequentialExecutor::Execute", self.tid,
                                      self.start, self.profiler.now()))
            self.profiler.add(self.events)


def _release(event: Any) -> None:
    close = getattr(event, "close", None)
    if close is not None:
        close()


def _op_and_provider(step: Any) -> tuple[str, str]:
    """The ``op_name`` and ``provider`` of a step's event; copies are named as onnxruntime
    names the Memcpy nodes it inserts."""
    c = step.copy
    if c is not None:
        op = ("MemcpyToHost" if c.dst_device == HOST
              else "MemcpyFromHost" if c.src_device == HOST else "Memcpy")
        return op, c.provider.name
    placed = step.placed
    return (placed.node.op_type, placed.provider) if placed is not None else ("", "")
