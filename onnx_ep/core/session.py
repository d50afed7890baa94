"""Session: load -> graph -> placement -> plan (cached per shape signature) -> run.

The onnxruntime-shaped entry point: ``Session(model, providers).run(None, feeds)``.
This module only glues the rooms together; graph building, placement,
planning, execution and memory live in their own modules.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import onnx

from onnx_ep.core import admission as adm
from onnx_ep.core.capture import SessionCapture, signature_text
from onnx_ep.core.device_binding import DeviceBinding
from onnx_ep.core.device_io import copy_out, device_io, into
from onnx_ep.core.dynamic import isolate_sized
from onnx_ep.core.executor import Executor
from onnx_ep.core.feeds import FeedBinder
from onnx_ep.core.folding import HostKernels
from onnx_ep.core.free_dims import fix_free_dimensions
from onnx_ep.core.fusion import fuse
from onnx_ep.core.graph import Graph, Value, build_graph, light_model_for_inference, load_model
from onnx_ep.core.kernel import TensorSpec, WorkspaceView
from onnx_ep.core.memory import Fit, Reservation, Role, allocate_host, authority_for
from onnx_ep.core.options import RunOptions, SessionOptions
from onnx_ep.core.pager import WeightStore
from onnx_ep.core.placement import place, reserve_prepared
from onnx_ep.core.plan_cache import PlanCache
from onnx_ep.core.planner import (
    ExecutionPlan,
    Program,
    build_program,
    infer_specs,
    plan_signature,
    workspace_views,
)
from onnx_ep.core.plugin_manager import plugins_for, resolve_providers, selection, with_fallback
from onnx_ep.core.profiling import Profiler
from onnx_ep.core.report import session_resources
from onnx_ep.core.run_sizing import RunMeter, run_sized_steps
from onnx_ep.core.settling import fallback_reporter, plan_with_host_fallback
from onnx_ep.core.subgraphs import DeviceSubgraphs
from onnx_ep.core.tensor import HOST, IOBinding, Tensor, device_type
from onnx_ep.errors import FeedError, OnnxEpWarning, PlanError

log = logging.getLogger("onnx_ep")
_session_ids = itertools.count(1)


@attrs.frozen
class NodeArg:
    """A model input or output as onnxruntime describes it."""

    name: str
    shape: list[Any]
    type: str


class Session:
    """Run an ONNX model through execution providers.

    :param model: a path (external data is read from beside it), serialized
        bytes or an ``onnx.ModelProto``.
    :param providers: provider names in priority order; ``None`` picks every
        available provider, best first (``cuda`` when present, else
        ``cpu_reference``). Nodes fall back provider by provider.
    :param options: a :class:`SessionOptions` (see ``SessionOptions.from_toml``).
    :param plugins: in-process plugin objects (mostly for tests).
    :raises ModelError: malformed model. :raises ProviderUnavailable:
    :raises NoKernelError: a node no provider can run. :raises PluginError:
    """

    def __init__(self, model: str | os.PathLike[str] | bytes | onnx.ModelProto,
                 providers: Sequence[str] | None = None,
                 options: SessionOptions | None = None,
                 plugins: Sequence[Any] = ()) -> None:
        self.options = options or SessionOptions()
        self._profiler = Profiler.start(self.options)   # None unless options.profile
        #: when profiling started, ``time.time_ns()`` (0: not profiled; docs/PROFILING.md)
        self.profiling_start_time_ns = self._profiler.start_ns if self._profiler else 0
        if self.options.log_level is not None:
            log.setLevel(self.options.log_level.upper())
        self._plugins = plugins_for(plugins)
        self._plugins.check(self.options.strict_plugins)
        self._providers = with_fallback(resolve_providers(
            providers if providers is not None else self.options.providers, self._plugins),
            self._plugins, self.options.disable_fallback)
        proto = fix_free_dimensions(load_model(model), self.options.free_dimension_overrides,
                                    copy=isinstance(model, onnx.ModelProto))
        if self._profiler is not None:
            self._profiler.loaded(model)
        self._light = light_model_for_inference(proto)
        self._graph, self._fusion = fuse(build_graph(proto, self._light), self._plugins.registry,
                                         self._providers, self._plugins.fusion_rules(),
                                         self.options.fusion)
        self._graph = isolate_sized(self._graph, self._plugins.registry, self._providers)
        self._executor = Executor(self._plugins.registry, self._providers)
        self._host_kernels = HostKernels(self._plugins.registry, self._providers)
        self.holder = f"session-{next(_session_ids)}"
        self._capture = SessionCapture(self.options.capture, self.options.capture_graphs,
                                       self.holder)
        self._device: DeviceBinding | None = None
        self._programs: dict[tuple[frozenset[str], frozenset[str]], Program] = {}
        self._held: list[Reservation] | None = None   # session-lifetime, once memory is set up
        self._program: Program = self._build_program()
        self._last_program: Program | None = None
        self._last_capture = "eager"      # what the last device run did with CUDA graphs
        me = weakref.ref(self)      # the finalizer holds the cache: no path back to self
        self._plans = PlanCache(self.options.plan_cache_size, self.options.plan_cache_bytes,
                                lambda plan: _evicted(me(), plan))
        self._lock = threading.Lock()
        # re-entrant: a device run holds it from finding its plan to its last step, so no
        # other thread evicts (frees) the plan meanwhile
        self._run_lock = threading.RLock()
        self._input_values: list[Value] = list(self._graph.inputs)
        self._feeds = FeedBinder(self._input_values, self._graph.overridable)
        self._output_index = {v.name: i for i, v in enumerate(self._graph.outputs)}
        #: ``run_sized_steps``: steps whose outputs a run sized and reserved before they ran;
        #: ``unsized_steps``: steps charged only after they ran (docs/MEMORY.md)
        self.stats: dict[str, int] = {"plans": 0, "runs": 0, "plan_cache_hits": 0,
                                      "run_sized_steps": 0, "unsized_steps": 0}
        self._run_ids = itertools.count(1)
        try:
            self._setup_memory()
        except BaseException:
            # a refusal at load (a static plan that cannot fit, streaming on a device) must
            # not leave device memory or reservations behind
            if self._device is not None:
                self._device.close()
            raise
        log.info("session %s: %d nodes on %s; memory budget %d bytes on %s, policy %s "
                 "(streaming %s), admission %s", self.holder, len(self._graph.nodes),
                 self._program.placement.count_by_provider(), self._authority.budget,
                 self._authority.device, self.memory_policy.name,
                 "on" if self.memory_policy.streams else "off", adm.strategy_name(self._admission))
        if self._profiler is not None:
            self._profiler.initialized()
        self._notify("onnx_ep_session_created", session=self)

    def _build_program(self, host_only: frozenset[str] = frozenset(),
                       promoted: frozenset[str] = frozenset()) -> Program:
        """Place the graph; bind a device (stream, uploaded weights) when a step runs on one.

        :param host_only, promoted: nodes to keep on host providers, deferred nodes to put
            on their device (see :meth:`_plan`); programs are cached per such pair, and the
            device binding is shared by all of them.
        """
        prog = self._programs.get((host_only, promoted))
        if prog is not None:
            return prog
        reg = self._plugins.registry
        placement = place(self._graph, reg, self._providers, host_only, promoted)
        for node, op, prov, why in placement.fallbacks:
            log.info("%s: node %r (%s) falls back to %s: %s", self.holder, node, op, prov, why)
        devices = placement.devices
        if not devices:
            prog = build_program(self._graph, placement)
        else:
            if len(devices) > 1:
                raise PlanError(f"nodes were placed on several devices {sorted(devices)}; a "
                                f"session runs on one device (list one device provider in "
                                f"providers=)")
            (dev,) = devices
            created = self._device is None
            if created:
                prov = next(reg.providers[p] for p in self._providers
                            if reg.providers[p].device == dev)
                self._device = DeviceBinding(dev, prov, self.options.memory_limit, self.holder)
                me = weakref.ref(self)      # no cycle: a dropped session frees at once
                self._executor.device_subgraphs = DeviceSubgraphs(
                    reg, self._providers, self._device, self._host_kernels,
                    lambda plan: me()._admit_body(plan),  # type: ignore[union-attr]
                    bool(self._executor.host_providers), self._capture)
            assert self._device is not None
            try:
                consts = self._device.upload_constants(placement.uploads, self._graph)
            except BaseException:
                if created:
                    self._device.close()
                    self._device = None
                raise
            prog = build_program(self._graph, placement, streams={dev: self._device.stream},
                                 runtimes={dev: self._device.runtime}, device_constants=consts)
            self._device.adopt(prog)     # placed weights, once the memory policy placed them
        self._programs[(host_only, promoted)] = prog
        if self._held is not None:      # placed after the memory setup charged the others
            self._held += reserve_prepared([prog.placement], self._authority, self.holder)
        return prog

    # ---------------------------------------------------------------- memory
    def _setup_memory(self) -> None:
        """Join the device's authority, choose policy and admission, reserve the weights."""
        self._authority = (self._device.authority if self._device is not None
                           else authority_for("cpu", self.options.memory_limit))
        hook = self._plugins.pm.hook
        self._admission = selection(
            "onnx_ep_select_admission_strategy", "admit",
            hook.onnx_ep_select_admission_strategy(options=self.options))
        # plan a static signature first even when the policy is forced: on a device its
        # arena is bound before the weights, which take what is left
        peak = self._static_peak()
        self.memory_policy = selection(
            "onnx_ep_select_memory_policy", "counters",
            hook.onnx_ep_select_memory_policy(
                model_bytes=self._graph.weight_bytes, planned_peak=peak,
                budget=self._authority.budget, options=self.options))
        if self._device is None and len(self._plans):  # a static plan that can never fit
            adm.refuse_never(self.holder, self._plans.values()[0],
                             0 if self.memory_policy.streams else self._graph.weight_bytes,
                             self._authority)
        self._held = []
        #: the executor's weight source when streaming: a host WeightStore or a DevicePager
        self._weights: Any = None
        if self._device is not None:
            # the policy, chosen after the static plan took its arena, places the device's
            # weights: uploaded whole, or paged through a stable region (docs/MEMORY.md)
            self._device.place_weights(self._program, streaming=bool(self.memory_policy.streams),
                                       window_bytes=getattr(self.memory_policy, "window_bytes",
                                                            None))
            for prog in self._programs.values():
                self._device.adopt(prog)
            self._executor.device_subgraphs.adopt_all()     # control-flow bodies' weights
            pager = self._device.pager
            if pager is not None:
                pager.bind(self._program.slot_of, self._program.constants)
                self._weights = self.memory_policy.store = pager
        elif self.memory_policy.streams:
            host = {slot: arr for slot, arr in self._program.constants}
            self._weights = WeightStore(host, [st.const_reads for st in self._program.steps],
                                        self.memory_policy.window_bytes, self._authority,
                                        self.holder)
            self.memory_policy.store = self._weights
            self._held.append(self._weights.reservation)
        elif self._graph.weight_bytes:
            # host weights, resident for the session's life (a device binding reserves its own)
            self._held.append(self._authority.reserve(self._graph.weight_bytes, Role.WEIGHTS,
                                                      self.holder))
        self._held += reserve_prepared([p.placement for p in self._programs.values()],
                                       self._authority, self.holder, undo=self._held)
        self._persistent: Reservation | None = None
        self._persistent_buf: np.ndarray | None = None
        # a weight window (streaming) or a device stream and arena serve one run at a time;
        # its own lock, so a streaming run does not hold up planning (self._lock)
        self._serial: Any = (self._run_lock if self._weights is not None
                             or self._device is not None else contextlib.nullcontext())
        self._finalizer = weakref.finalize(self, _release_all, self._held, self._device,
                                           self._plans)

    def _static_peak(self) -> int:
        """Plan now when every input shape is static; the plan's bytes, else 0 (unknown)."""
        if not self._input_values or not all(
                v.kind == "tensor" and v.spec is not None and v.spec.is_static
                for v in self._input_values):
            return 0
        specs = [v.spec for v in self._input_values]
        signature = tuple((s.dtype, tuple(s.shape)) for s in specs)  # type: ignore[union-attr]
        plan = self._plan(signature, specs)  # type: ignore[arg-type]
        return plan.arena.size + plan.workspace.total

    def close(self) -> None:
        """Release every byte this session holds. The session cannot run afterwards."""
        self._finalizer()

    def resources(self) -> dict[str, Any]:
        """Budget, ledger (by role and holder), plans (arena, workspace, copies), policy, counters.

        JSON-ready: only dicts, lists, strings and ints.
        """
        return session_resources(self)

    def capture_report(self) -> dict[str, Any]:
        """CUDA-graph capture per planned signature on a device (docs/CAPTURE.md).

        Each plan, once its signature has run once: its state (``pending``, ``recorded``,
        ``eager`` after too many failed recordings, ``declined``), segments (first and last
        step, node count, recorded or not), seams with their classified reasons, records,
        replays and recording failures (node, kernel class, error). The session part: the
        mode, the quarantined nodes with their errors, the graphs held, the bound and the
        evictions. JSON-ready; a host-only session has no device plans.
        """
        return self._capture.report(self._plans.values(), self._authority.device)

    def last_capture(self) -> str:
        """What the last run did with CUDA graphs: ``captured`` (it replayed recorded
        segments), ``recorded`` (it recorded some), ``eager`` (a device plan run step by
        step) or ``host`` (a host session: nothing to capture)."""
        return "host" if self._device is None else self._last_capture

    def end_profiling(self) -> str:
        """Stop profiling, write the trace (docs/PROFILING.md); its path, or "" if not profiling."""
        profiler, self._profiler = self._profiler, None
        return profiler.end() if profiler is not None else ""

    # ---------------------------------------------------------------- metadata
    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs (initializers excluded, overridable ones too), onnxruntime-style."""
        return [_node_arg(v) for v in self._input_values if v.name not in self._feeds.defaults]

    def get_outputs(self) -> list[NodeArg]:
        return [_node_arg(v) for v in self._graph.outputs]

    def get_providers(self) -> list[str]:
        """Providers this session may use, in priority order."""
        return list(self._providers)

    @property
    def graph(self) -> Graph:
        return self._graph

    def placement_summary(self) -> dict[str, int]:
        """Number of nodes each provider runs: as the last run ran them (a node the device
        could not size at that run's shapes went to the host), else as placed at load."""
        program = self._last_program if self._last_program is not None else self._program
        return program.placement.count_by_provider()

    # ---------------------------------------------------------------- run
    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """Run the model and return the requested outputs (all when ``output_names`` is None
        or empty, as onnxruntime does).

        Feeds are numpy arrays or :class:`onnx_ep.Tensor` (a Tensor on the session's
        device is copied device-to-device into the plan's buffer); outputs are numpy
        arrays. See :meth:`run_with_iobinding` for outputs that stay on the device.

        :raises FeedError: a missing/extra feed, wrong dtype or wrong shape,
            naming the input, what was expected and what was given.
        :raises RunCancelled: ``run_options.terminate`` was set.
        """
        want = self._output_positions(output_names)
        outs = self._run(feeds, run_options, {})
        return [outs[i] for i in want]

    def io_binding(self) -> IOBinding:
        """A new :class:`onnx_ep.IOBinding` for :meth:`run_with_iobinding`."""
        return IOBinding(self)

    def run_with_iobinding(self, binding: IOBinding,
                           run_options: RunOptions | None = None) -> None:
        """Run with ``binding``'s inputs; its outputs are then in ``binding.get_outputs()``.

        An output bound to the session's device (``"cuda"``) or to a device Tensor is copied
        device-to-device out of the plan's buffers, never through the host; the stream is
        synchronized before this returns (unless ``RunOptions(synchronize=False)``), so the
        outputs can be read from any stream or library (torch through DLPack).

        :raises FeedError: as :meth:`run`; also a preallocated output Tensor whose dtype,
            shape or device does not match the output.
        """
        requests = binding.output_requests()
        keep = {self._output_index[name]: target for name, target in requests
                if not (target == HOST or (isinstance(target, Tensor) and target.is_host))}
        wanted = {self._output_index[name] for name, _ in requests}
        outs = self._run(binding._inputs, run_options, keep, wanted)
        results: list[Tensor] = []
        for name, target in requests:
            v = outs[self._output_index[name]]
            if isinstance(v, Tensor):                 # copied out on the device already
                results.append(v)
            elif isinstance(target, Tensor):
                results.append(into(target, v, name))
            elif target == HOST:
                results.append(Tensor(v) if isinstance(v, np.ndarray) else v)
            else:                                     # produced on the host, wanted on a device
                rt = (self._device.runtime if self._device is not None
                      and device_type(target) == self._device.device else None)
                results.append(Tensor.from_numpy(v, rt.device if rt else target, runtime=rt))
        binding._results = results

    def _run(self, feeds: Mapping[str, Any], run_options: RunOptions | None,
             keep: dict[int, Any], wanted: set[int] | None = None) -> list[Any]:
        """One run; outputs at positions in ``keep`` that a device produced come back as device
        Tensors (new, or the one in ``keep``); outputs not in ``wanted`` (None: all) are not
        downloaded."""
        if not self._finalizer.alive:
            raise PlanError(f"{self.holder} is closed: its memory was released; create a new "
                            f"Session to run the model again")
        if self._device is None:
            return self._run_plan(feeds, run_options, keep, wanted)
        with self._run_lock:
            return self._run_plan(feeds, run_options, keep, wanted)

    def _run_plan(self, feeds: Mapping[str, Any], run_options: RunOptions | None,
                  keep: dict[int, Any], wanted: set[int] | None) -> list[Any]:
        t0 = time.perf_counter()
        arrays, signature = self._feeds.bind(feeds, self._plans)
        plan = self._plans.get(signature)
        planned = plan is None
        if plan is None:
            plan = self._plan(signature, [TensorSpec(a.dtype, a.shape) if isinstance(
                a, (np.ndarray, Tensor)) else None for a in arrays])
        else:
            self.stats["plan_cache_hits"] += 1
        skip: frozenset[int] = frozenset()
        if keep or wanted is not None or any(isinstance(a, Tensor) for a in arrays):
            arrays, skip = device_io(self._device, plan.program, arrays, keep, wanted)
        holder = f"{self.holder}/run-{next(self._run_ids)}"
        reservations = self._admit(plan, holder)
        cancel = (lambda: run_options.terminate) if run_options is not None else None
        cap = self._capture.for_run(plan.capture, run_options)
        counts = (cap.records, cap.replays) if cap is not None else None
        # host values only this run can size are reserved step by step (core/run_sizing.py)
        meter = (RunMeter(self._authority if self._device is None else authority_for("cpu"),
                          holder, plan.run_sized) if plan.run_sized else None)
        try:
            workspaces = self._workspace_views(plan, reservations)
            with self._serial:
                try:
                    outs = self._executor.run(plan.program, arrays, workspaces=workspaces,
                                              cancel=cancel, weights=self._weights,
                                              prebound=plan.prebound, skip=skip, capture=cap,
                                              meter=meter, profile=self._profiler)
                finally:
                    if cap is not None:
                        self._capture.after_run(signature, cap)
                if keep and skip:
                    # the arena is reused by the next run: copy device outputs out now
                    outs = copy_out(self._device, self._graph, plan.program, outs, keep,
                                    run_options is None or run_options.synchronize)
        finally:
            for r in reservations:
                r.release()
            if meter is not None:
                meter.release()
                self.stats["run_sized_steps"] += meter.sized
                self.stats["unsized_steps"] += meter.unsized
        self.stats["runs"] += 1
        self._last_program = plan.program
        self._last_capture = ("eager" if counts is None or cap is None else "recorded"
                              if cap.records > counts[0] else "captured"
                              if cap.replays > counts[1] else "eager")
        if plan.capture is None and self._device is not None:
            # the warm-up run has taken each kernel's route: ask who may be captured now
            plan.capture = self._capture.new_plan(plan, self._device,
                                                  streaming=self._weights is not None)
        if self._profiler is not None:
            self._profiler.model_run(t0)
        self._notify("onnx_ep_run_finished", session=self,
                     stats={"seconds": time.perf_counter() - t0, "planned": planned,
                            "signature": signature})
        return outs

    # ---------------------------------------------------------------- internals
    def _plan(self, signature: tuple[Any, ...],
              specs_in: list[TensorSpec | None]) -> ExecutionPlan:
        with self._lock:
            plan = self._plans.get(signature)
            if plan is not None:
                return plan
            if all(s is not None for s in specs_in):
                specs = infer_specs(self._light, self._graph, specs_in)  # type: ignore[arg-type]
            else:
                specs = infer_specs(None, self._graph, [])
            device = self._device
            dev = device.device if device is not None else None
            if device is None:
                self._capture.check_host(signature, self._providers)
                plan = plan_signature(self._program, signature, dict(specs), dev,
                                      host_kernels=self._host_kernels)
            else:
                # nodes the device cannot size at this signature run on the host instead
                plan = plan_with_host_fallback(
                    self._build_program, signature, specs, device.device,
                    fallback_reporter(device.device, signature_text(signature),
                                      bool(self._executor.host_providers)),
                    host_kernels=self._host_kernels,
                    # device control flow: its bodies are planned (and admitted) with it
                    check=self._executor.device_subgraphs.unplannable)
                self._capture.check_plan(plan, device)
                self._bind(device, plan)
            plan.run_sized = run_sized_steps(plan)
            self._plans.add(signature, plan)
            self.stats["plans"] += 1
            log.debug("planned signature %s: workspace step=%d session=%d", signature,
                      plan.workspace.step_peak, plan.workspace.session_peak)
            return plan

    def _bind(self, device: DeviceBinding, plan: ExecutionPlan) -> None:
        """Admit a device plan, which holds its arena until evicted, as a whole before any
        run uses it, and bind it. Cached plans run longest ago are evicted first while the
        request does not fit what is free now."""
        while True:
            request = adm.AdmissionRequest(self.holder, f"{self.holder}/plan", plan.arena.size,
                                           *device.slot_growth(plan))
            if (self._authority.fit(request.total) is Fit.FITS
                    or not self._plans.evict_oldest()):
                break
        with adm.admitted(self._admission, request, self._authority):
            device.bind_plan(plan, shared=True)

    def _evict(self, plan: ExecutionPlan) -> None:
        """Give back what an evicted plan held (the plan cache's ``release``)."""
        self._capture.forget(plan.signature)
        if self._device is not None:
            self._device.release_plan(plan)
        log.debug("%s: evicted the plan of %s", self.holder, signature_text(plan.signature))

    def _admit_body(self, plan: ExecutionPlan) -> None:
        """Admit and bind a device control-flow body's plan (held like the session's)."""
        assert self._device is not None
        with adm.admitted(self._admission, adm.plan_request(self.holder, f"{self.holder}/body",
                                                            plan), self._authority):
            self._device.bind_plan(plan)

    def _admit(self, plan: ExecutionPlan, holder: str) -> list[Reservation]:
        """Ask for the run's whole need before any work; reserve it or raise a refusal."""
        if self._device is not None:
            return []           # admitted and held when the plan was bound (see _plan)
        ws = plan.workspace
        have = self._persistent.requested if self._persistent is not None else 0
        growth = max(0, ws.session_peak - have)
        request = adm.AdmissionRequest(self.holder, holder, plan.arena.size, ws.step_peak, growth)
        with adm.admitted(self._admission, request, self._authority):
            if growth:
                self._grow_persistent(ws.session_peak)
            return adm.reserve_for_run(request, self._authority)

    def _grow_persistent(self, nbytes: int) -> None:
        with self._lock, self._authority.grant() as g:
            if self._persistent is None:
                self._persistent = g.reserve(nbytes, Role.WORKSPACE_SESSION, self.holder)
                self._held.append(self._persistent)
            elif nbytes > self._persistent.requested:
                g.grow(self._persistent, nbytes)
            else:
                return
            grown = allocate_host(nbytes, self._persistent)
            if self._persistent_buf is not None:       # contents survive growth
                grown[: self._persistent_buf.nbytes] = self._persistent_buf
            self._persistent_buf = grown

    def _workspace_views(self, plan: ExecutionPlan,
                         reservations: list[Reservation]) -> list[WorkspaceView | None] | None:
        if plan.device_workspaces is not None:
            return plan.device_workspaces
        ws = plan.workspace
        if ws.total == 0:
            return None
        step = next((r for r in reservations if r.role is Role.WORKSPACE_STEP), None)
        step_buf = allocate_host(ws.step_peak, step) if step is not None else None
        persistent = self._persistent_buf
        return workspace_views(ws, lambda off, n: persistent[off:off + n],   # type: ignore
                               lambda n: step_buf)

    def _output_positions(self, output_names: Sequence[str] | None) -> list[int]:
        if not output_names:
            return list(range(len(self._graph.outputs)))
        if isinstance(output_names, str):
            output_names = [output_names]
        pos = []
        for n in output_names:
            i = self._output_index.get(n)
            if i is None:
                known = ", ".join(self._output_index)
                raise FeedError(f"unknown output {n!r}; the model's outputs are: {known}")
            pos.append(i)
        return pos

    def _notify(self, hook: str, **kwargs: Any) -> None:
        """Call every observer of ``hook``; one that raises becomes a warning, not a failure."""
        for impl in getattr(self._plugins.pm.hook, hook).get_hookimpls():
            try:
                impl.function(**{a: kwargs[a] for a in impl.argnames})
            except Exception as exc:
                import warnings
                warnings.warn(f"plugin {impl.plugin_name!r}: {hook} observer raised "
                              f"{type(exc).__name__}: {exc}", OnnxEpWarning, stacklevel=3)


def _release_all(reservations: list[Reservation], device: DeviceBinding | None,
                 plans: dict[tuple[Any, ...], ExecutionPlan]) -> None:
    for p in list(plans.values()):
        if p.capture is not None:       # graphs before the memory their kernels read
            p.capture.drop()
    for r in reservations:
        r.release()
    if device is not None:
        device.close()


def _evicted(session: Session | None, plan: ExecutionPlan) -> None:
    if session is not None:
        session._evict(plan)


def _node_arg(v: Value) -> NodeArg:
    shape = [d for d in v.spec.shape] if v.spec is not None else []
    return NodeArg(v.name, shape, v.type_str)
