"""Control-flow bodies on a device: each body placed, planned and bound like the session's
own graph, so a device ``If`` / ``Loop`` / ``Scan`` runs its subgraphs where its inputs are.

A host control-flow kernel runs its bodies unplanned on host providers
(:meth:`~onnx_ep.core.executor.Executor.program_for`). A device one cannot: its bodies'
kernels write into pre-bound buffers. So a body is handled as a small graph of its own:

- *placed* with every provider of the session, its outer-scope values where the caller's
  plan holds them (on the device) and its outputs delivered on the device
  (:func:`~onnx_ep.core.placement.place`'s ``outer_device`` / ``outputs_device``);
- *planned* per signature of its feeds and outer values, with the session's settling
  (:func:`~onnx_ep.core.settling.plan_with_host_fallback`): a body node the device cannot
  size there runs on the host, and says why;
- *admitted and bound* through the session's device binding: its arena is reserved from
  the same memory authority as the session's plans, and held until the session closes.

Kernels announce the bodies they will run and at which feeds (``body_signatures``), so the
session plans them when it plans the caller's signature: a body that does not fit is
refused then, before any run, like the caller's own arena.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.capture import signature_text
from onnx_ep.core.device_binding import DeviceBinding
from onnx_ep.core.dynamic import isolate_sized
from onnx_ep.core.folding import HostKernels
from onnx_ep.core.graph import Graph
from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.placement import node_meta, place
from onnx_ep.core.planner import ExecutionPlan, Program, build_program, infer_specs, program_io
from onnx_ep.core.registry import KernelRegistry
from onnx_ep.core.settling import fallback_reporter, plan_with_host_fallback
from onnx_ep.errors import MemoryBudgetError, NoKernelError, PlanError

log = logging.getLogger("onnx_ep")

#: body plans found by identity that a DeviceSubgraphs keeps (then it starts over)
RECENT_KEPT = 256
#: bound plans kept per body (a new signature beyond it frees the oldest plan's memory)
PLANS_PER_BODY = 16

#: a body's signature: its feeds' then its outer values' ``(dtype, shape)``
BodySignature = tuple[tuple[Any, Any], ...]


def spec_of(value: Any) -> TensorSpec | None:
    """The spec of a run-time value (a host array or a device tensor), None for none."""
    if value is None or not hasattr(value, "shape") or not hasattr(value, "dtype"):
        return None
    return TensorSpec(np.dtype(value.dtype), tuple(int(d) for d in value.shape))


def _sig(specs: Sequence[TensorSpec | None]) -> tuple[Any, ...]:
    return tuple(("none", None) if s is None else (s.dtype, tuple(s.shape)) for s in specs)


def _known_key(known: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """A hashable key of known outer values (small arrays: axes, shapes)."""
    out = []
    for name in sorted(known or {}):
        v = np.asarray(known[name])           # type: ignore[index]
        out.append((name, v.dtype.str, v.shape, v.tobytes()))
    return tuple(out)


class DeviceSubgraphs:
    """Plans and runs the bodies of one session's device control-flow nodes.

    :param admit_plan: admits a body plan's bytes (the session's admission strategy) and
        binds it, or raises the refusal.
    """

    def __init__(self, registry: KernelRegistry, providers: Sequence[str],
                 device: DeviceBinding, host_kernels: HostKernels | None,
                 admit_plan: Callable[[ExecutionPlan], None], can_fall_back: bool,
                 capture: Any = None) -> None:
        self.registry = registry
        self.providers = list(providers)
        self.device = device
        self.host_kernels = host_kernels
        self.admit_plan = admit_plan
        self.can_fall_back = can_fall_back
        #: the session's :class:`~onnx_ep.core.capture.SessionCapture`: a body plan run by a
        #: captured caller records and replays its segments like the session's plans
        self.capture = capture
        # the plan of each (body, caller's known values, outer value objects, feed specs): the
        # outer values are the caller's planned buffers, the same objects every run, so a
        # run finds its plan by identity (each entry keeps its objects: ids stay theirs)
        self._recent: dict[tuple[Any, ...], tuple[tuple[Any, ...], ExecutionPlan]] = {}
        self._programs: dict[tuple[Any, ...], Program] = {}
        self._plans: dict[tuple[int, BodySignature, tuple[Any, ...]], ExecutionPlan] = {}
        self._graphs: dict[int, Graph] = {}       # keeps each planned body alive (ids)
        self._per_body: dict[int, list[tuple[Any, ...]]] = {}   # plan keys, oldest first
        self._sized: dict[int, Graph] = {}        # each body with its run-sized regions
        # bodies are planned while a run holds the session's run lock, or while the session
        # plans a signature under its own lock: this one orders the two
        self._lock = threading.RLock()

    # ---------------------------------------------------------------- planning
    def program(self, graph: Graph, host_only: frozenset[str] = frozenset(),
                promoted: frozenset[str] = frozenset(), *,
                outer: Mapping[str, TensorSpec | None] | None = None,
                known: Mapping[str, Any] | None = None) -> Program:
        """``graph`` placed for the device: outer values and outputs on it, its kernels
        asked with the outer values' specs and the values its caller knows (``known``)."""
        key = (id(graph), host_only, promoted, _sig([(outer or {}).get(n)
                                                     for n in graph.outer_names]),
               _known_key(known))
        prog = self._programs.get(key)
        if prog is not None:
            return prog
        dev = self.device.device
        # a run-sized value inside the body gets a region of its own (core/dynamic.py)
        graph = self._sized.setdefault(id(graph), isolate_sized(graph, self.registry,
                                                                self.providers))
        placement = place(graph, self.registry, self.providers, host_only, promoted,
                          outer_device=dev, outputs_device=dev, outer_specs=outer,
                          outer_known=known)
        for node, op, prov, why in placement.fallbacks:
            log.info("%s: body %r: node %r (%s) falls back to %s: %s", self.device.holder,
                     graph.name, node, op, prov, why)
        others = placement.devices - {dev}
        if others:
            raise PlanError(f"body {graph.name!r} of a control-flow node on {dev} places nodes "
                            f"on {sorted(others)}; a session runs on one device")
        # the body's own initializers under its own scope (two branches may both name one
        # ``val_0``); its program reads them by their plain names
        scope = f"{graph.name}#{id(graph)}/"
        consts = self.device.upload_constants(placement.uploads, graph, scope)
        prog = build_program(graph, placement, streams={dev: self.device.stream},
                             runtimes={dev: self.device.runtime},
                             device_constants={c.dst: consts[scope + c.dst]
                                               for c in placement.uploads})
        self.device.adopt(prog)
        self._programs[key] = prog
        self._graphs[id(graph)] = graph
        return prog

    def adopt_all(self) -> None:
        """Hand the weights placed since to every body program (the session placed its
        weights after planning a static signature, and with it the bodies)."""
        for prog in self._programs.values():
            self.device.adopt(prog)

    def plan(self, graph: Graph, feeds: Sequence[TensorSpec | None],
             outer: Mapping[str, TensorSpec | None],
             known: Mapping[str, Any] | None = None) -> ExecutionPlan:
        """The bound plan of ``graph`` at these feed and outer-value specs, with the outer
        values its caller's plan knows by value (``known``): planned, admitted and bound on
        first use, cached per signature.

        :raises AdmissionRefused: the body's arena does not fit. :raises PlanError: a body
            node the device cannot size here, and no host provider listed.
        """
        outer_specs = [outer.get(n) for n in graph.outer_names]
        # feeds then outer values, each ``(dtype, shape)``: as a session's signature reads
        signature = _sig(feeds) + _sig(outer_specs)
        key = (id(graph), signature, _known_key(known))
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                return plan
            if self.device.pager is not None:
                raise PlanError(f"control flow on {self.device.device} under weight streaming: "
                                f"body {graph.name!r} cannot page its weights; run without "
                                f"weight streaming or on a host provider")
            # what load-time inference fixed for every signature, then this one's feeds; the
            # planner sizes the rest node by node (kernels' infer_outputs, onnx's per node)
            specs: dict[str, TensorSpec | None] = {
                name: v.spec for name, v in graph.values.items()
                if v.spec is not None and v.spec.is_static}
            specs.update(infer_specs(None, graph, [s for s in feeds]))  # type: ignore[misc]
            specs.update(zip(graph.outer_names, outer_specs))
            plan = plan_with_host_fallback(
                lambda ho, pr: self.program(graph, ho, pr, outer=outer, known=known),
                signature, specs, self.device.device,
                fallback_reporter(self.device.device,
                                  f"body {graph.name!r} {signature_text(signature)}",
                                  self.can_fall_back),
                host_kernels=self.host_kernels, check=self.unplannable, outer_known=known)
            self.admit_plan(plan)
            self._plans[key] = plan
            self._evict_beyond(id(graph), key)
            return plan

    def _evict_beyond(self, body: int, key: tuple[Any, ...]) -> None:
        """Keep at most :data:`PLANS_PER_BODY` plans of one body, the oldest freed first: a
        region fed by a run-sized value meets a new size at many runs."""
        keys = self._per_body.setdefault(body, [])
        keys.append(key)
        while len(keys) > PLANS_PER_BODY:
            old = self._plans.pop(keys.pop(0))
            self._recent = {k: v for k, v in self._recent.items() if v[1] is not old}
            if old.capture is not None:
                old.capture.drop()
            self.device.release_plan(old)

    def unplannable(self, plan: ExecutionPlan) -> dict[str, str]:
        """Plan the bodies of ``plan``'s device control-flow steps at its specs (their
        kernels' ``body_signatures``), so a body that does not fit is refused now; the
        nodes whose bodies cannot run on the device at this signature, with why (the
        settling loop sends them to the host)."""
        bad: dict[str, str] = {}
        for st in plan.program.steps:
            p = st.placed
            if p is None or not st.has_subgraphs or p.device != self.device.device:
                continue
            announce = getattr(p.kernel, "body_signatures", None)
            if announce is None or st.ctx is None:
                continue
            meta = node_meta(p.node, plan.program.graph, plan.specs, None,
                             st.ctx.node.outer_constants)
            try:
                for graph, feeds in announce(meta):
                    if all(f is not None and f.is_static for f in feeds):
                        self.plan(graph, feeds, meta.outer, meta.outer_constants)
            except MemoryBudgetError:
                raise                   # a refusal stays a refusal
            except (PlanError, NoKernelError) as exc:
                bad[p.node.name] = f"a body cannot run on {self.device.device} here: {exc}"
        return bad

    # ---------------------------------------------------------------- running
    def run(self, graph: Graph, feeds: Sequence[Any], scope: Mapping[str, Any],
            run: Callable[..., list[Any]], known: Mapping[str, Any] | None = None,
            captured: bool = False) -> list[Any]:
        """Run ``graph`` with ``feeds`` (host arrays or device tensors) and the caller's
        ``scope``; its outputs are device tensors in the body plan's arena, valid until the
        body runs again.

        :param run: the executor's ``run`` (the body's steps run in the caller's loop).
        :param known: the outer values the caller's plan knows by value (its control-flow
            node's :attr:`~onnx_ep.core.kernel.NodeMeta.outer_constants`).
        :param captured: the caller runs a capture schedule: so does the body, from its
            second run on (its first is the warm-up that picks each kernel's route).
        """
        values = tuple(scope.get(n) for n in graph.outer_names)
        key = (id(graph), id(known), *map(id, values),
               *((f.dtype, f.shape) if f is not None else None for f in feeds))
        hit = self._recent.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], values)):
            plan = hit[1]
        else:
            outer = {n: spec_of(v) for n, v in zip(graph.outer_names, values)}
            plan = self.plan(graph, [spec_of(f) for f in feeds], outer, known)
            if len(self._recent) >= RECENT_KEPT:
                self._recent.clear()
            self._recent[key] = (values, plan)
        program = plan.program
        io = program_io(program)
        if io.host_read_inputs:
            feeds = list(feeds)
            rt, stream = self.device.runtime, self.device.stream
            for i in io.host_read_inputs:   # a host step of the body reads this feed as is
                if feeds[i] is not None and not isinstance(feeds[i], np.ndarray):
                    feeds[i] = rt.download(feeds[i], stream)
        cap = plan.capture if captured and self.capture is not None else None
        if cap is not None and not cap.active:
            cap = None
        try:
            out = run(program, feeds, outer=scope, workspaces=plan.device_workspaces,
                      prebound=plan.prebound, capture=cap)
        finally:
            if cap is not None:
                self.capture.after_run(("body", id(plan)), cap)
        if captured and plan.capture is None and self.capture is not None:
            plan.capture = self.capture.new_plan(plan, self.device, streaming=False)
        return out

    def report(self) -> list[dict[str, Any]]:
        """Each body plan: the body, its signature, arena bytes and where its nodes run."""
        out = []
        for (gid, signature, _), p in list(self._plans.items()):
            out.append({"body": self._graphs[gid].name, "signature": signature_text(signature),
                        "arena_bytes": p.arena.size,
                        "workspace_bytes": p.workspace.total, "nodes": p.nodes(),
                        "capture": p.capture.report() if p.capture is not None else None})
        return out
