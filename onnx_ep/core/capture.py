"""CUDA-graph capture of a device plan: segments, recording, replay, quarantine.

After the first (eager, warm-up) run of a shape signature on a device, the session asks
every step's kernel :meth:`~onnx_ep.core.kernel.Kernel.capture_support` and cuts the plan
into *segments* (maximal runs of consecutive device steps whose kernel answered SUPPORTED)
and *seams* (the steps between them, each with its classified reason). The next run records
each segment on the session's stream through the runtime's capture methods
(:class:`~onnx_ep.core.provider.DeviceRuntime`), instantiates it and replays it; later runs
only replay. Seams run eagerly between the graphs.

A segment reads only buffers whose addresses the plan fixed (the arena, workspaces, weights,
the input slots the feeds are copied into) and leaves the values later steps read at fixed
addresses too, so a replay is the recorded kernels on the same bytes. What a segment
exports (the Python objects of the values read after it) is remembered from the recording
run; what it reads from before it is checked by address on every replay, and a moved input
sends the segment back to eager for that run and to a new recording.

When recording fails (a kernel that synchronizes, allocates, copies to or from the host or
raises while its stream captures) the capture is ended cleanly, the failure is classified
(node, kernel class, CUDA error name), that node is quarantined to eager for the session,
the segment runs eagerly for this run (so its answer is right), and the plan is cut again
before its next run, a bounded number of times. docs/CAPTURE.md is the user's guide.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from onnx_ep.core.kernel import CaptureSupport
from onnx_ep.core.memory import Role
from onnx_ep.core.placement import HOST
from onnx_ep.errors import CaptureError, KernelContractError, MemoryBudgetError

log = logging.getLogger("onnx_ep")

#: recordings with a failure a signature gets before it runs eagerly for good: each failure
#: quarantines one node, so this bounds the re-cutting a plan of lying kernels costs
MAX_FAILED_ROUNDS = 4

#: seam kinds: why a step runs eagerly
IO, COPY, HOST_STEP, KERNEL, QUARANTINED, DECLINED = (
    "io", "copy", "host", "kernel", "quarantined", "declined")


@attrs.frozen
class Seam:
    """A step that runs eagerly between segments, and why.

    :ivar kind: ``io`` (a feed's upload or an output's download at the plan's edge),
        ``copy`` (a copy between host and device inside the plan), ``host`` (a step on a
        host provider), ``kernel`` (the kernel's own UNSUPPORTED answer), ``quarantined``
        (its recording failed earlier in this session) or ``declined`` (the whole plan).
    """

    index: int
    name: str
    reason: str
    kind: str = KERNEL


@attrs.frozen
class CaptureLayout:
    """Segments and seams of one plan, in step order.

    :ivar segments: each a tuple of step indices, consecutive and all capture-supported.
    :ivar seams: the steps outside every segment.
    """

    segments: tuple[tuple[int, ...], ...]
    seams: tuple[Seam, ...]

    @property
    def declines(self) -> tuple[Seam, ...]:
        """Seams that keep the plan from being one graph between its feeds and outputs."""
        return tuple(s for s in self.seams if s.kind != IO)

    def report(self, names: Sequence[str]) -> dict[str, Any]:
        """JSON-ready: segments by first and last step, seams with reasons."""
        return {"segments": [{"first": names[seg[0]], "last": names[seg[-1]],
                              "nodes": len(seg)} for seg in self.segments],
                "captured_steps": sum(len(seg) for seg in self.segments),
                "seams": [{"step": s.name, "reason": s.reason, "kind": s.kind}
                          for s in self.seams]}


def step_support(step: Any, quarantined: Mapping[str, str] | None = None,
                 io_slots: frozenset[int] = frozenset()) -> tuple[CaptureSupport, str]:
    """Whether ``step`` (a planner ``Step``) may be recorded; if not, why and the seam kind.

    :param quarantined: node name -> the recording failure that quarantined it.
    :param io_slots: the program's graph input and output slots (their copies are ``io``).
    """
    if step.copy is not None:
        c = step.copy
        kind = IO if (set(step.in_slots) | set(step.out_slots)) & io_slots else COPY
        return CaptureSupport.unsupported(f"copies {c.src!r} from {c.src_device} to "
                                          f"{c.dst_device}"), kind
    placed = step.placed
    if placed is None or placed.device == HOST:
        provider = placed.provider if placed is not None else "the host"
        return CaptureSupport.unsupported(f"runs on the host ({provider})"), HOST_STEP
    if quarantined and step.name in quarantined:
        return CaptureSupport.unsupported(f"quarantined: {quarantined[step.name]}"), QUARANTINED
    answer = placed.kernel.capture_support()
    if not isinstance(answer, CaptureSupport):
        raise KernelContractError(
            f"node {step.name!r}: {type(placed.kernel).__name__}.capture_support() returned "
            f"{type(answer).__name__}, expected a CaptureSupport")
    return answer, KERNEL


def segment(steps: Sequence[Any], quarantined: Mapping[str, str] | None = None,
            io_slots: frozenset[int] = frozenset()) -> CaptureLayout:
    """Cut ``steps`` into segments and seams by each step's :func:`step_support`."""
    segments: list[tuple[int, ...]] = []
    seams: list[Seam] = []
    current: list[int] = []
    for i, step in enumerate(steps):
        support, kind = step_support(step, quarantined, io_slots)
        if support.supported:
            current.append(i)
            continue
        if current:
            segments.append(tuple(current))
            current = []
        seams.append(Seam(i, step.name, support.reason or "capture unsupported", kind))
    if current:
        segments.append(tuple(current))
    return CaptureLayout(tuple(segments), tuple(seams))


def io_slots(program: Any) -> frozenset[int]:
    """The slots of ``program``'s graph inputs and outputs."""
    return frozenset(program.input_slots) | frozenset(program.output_slots)


def declined_layout(steps: Sequence[Any], reason: str) -> CaptureLayout:
    """Every step a seam for ``reason`` (a plan that cannot be captured at all)."""
    return CaptureLayout((), tuple(Seam(i, st.name, reason, DECLINED)
                                   for i, st in enumerate(steps)))


# ---------------------------------------------------------------- recording and replay


@attrs.define(eq=False, slots=True)
class Record:
    """A segment to record in the coming run."""

    steps: tuple[int, ...]


@attrs.define(eq=False, slots=True)
class Replay:
    """A recorded segment: its graph, what it leaves in the value slots, what it reads.

    :ivar exports: ``(slot, value)`` for values the segment makes that later steps or the
        outputs read; the values (device tensors at fixed addresses) are the recording's.
    :ivar checks: ``(slot, address)`` of the segment's inputs from earlier steps.
    :ivar frees: slots whose value is dead after the segment.
    """

    steps: tuple[int, ...]
    graph: Any
    exports: tuple[tuple[int, Any], ...]
    checks: tuple[tuple[int, Any], ...]
    frees: tuple[int, ...]
    reservation: Any
    replays: int = 0

    def close(self) -> None:
        graph, self.graph = self.graph, None
        try:
            if graph is not None:
                graph.close()
        finally:
            if self.reservation is not None:
                self.reservation.release()
                self.reservation = None


def address(value: Any) -> Any:
    """What a replay compares: a device tensor's address (a view made anew each run has the
    same one), else the object itself."""
    ptr = getattr(value, "ptr", None)
    return ptr if ptr is not None else id(value)


class _StepFailed(Exception):
    def __init__(self, index: int, error: str, cause: BaseException | None = None) -> None:
        super().__init__(error)
        self.index, self.error, self.cause = index, error, cause


class PlanCapture:
    """One plan's capture state: layout, recorded segments, counters, failures.

    Made by the session after the plan's warm-up run; :meth:`schedule` gives the executor
    the run's items (step indices run eagerly, :class:`Record`, :class:`Replay`), and the
    executor calls :meth:`record` / :meth:`replay` for the last two.
    """

    def __init__(self, program: Any, signature: str, runtime: Any, stream: Any,
                 authority: Any, holder: str, quarantined: dict[str, str],
                 declined: str | None = None) -> None:
        self.program = program
        self.signature = signature
        self.runtime = runtime
        self.stream = stream
        self.authority = authority
        self.holder = holder
        self.quarantined = quarantined          # the session's, shared by its plans
        self.declined = declined
        self.io = io_slots(program)
        self.graphs: dict[tuple[int, ...], Replay] = {}
        self.eager_segments: dict[tuple[int, ...], str] = {}
        self.records = self.replays = self.failed_rounds = self.evictions = 0
        self.moved_inputs = 0
        self.failures: list[dict[str, Any]] = []
        self.given_up: str | None = None
        self._seen_quarantine = -1
        self._schedule: list[Any] | None = None
        self._failed_this_run = False
        self.layout = self._cut()
        self._readers = _last_reads(program)
        self._consts = frozenset(s for s, _ in program.constants)

    # ------------------------------------------------------------ layout
    def _cut(self) -> CaptureLayout:
        steps = self.program.steps
        if self.declined is not None:
            return declined_layout(steps, self.declined)
        self._seen_quarantine = len(self.quarantined)
        return segment(steps, self.quarantined, self.io)

    @property
    def active(self) -> bool:
        """Whether runs of this plan record or replay anything."""
        return self.declined is None and self.given_up is None and bool(self.layout.segments)

    def schedule(self) -> list[Any]:
        """The coming run's items, re-cut first when the session quarantined a node since."""
        if self._seen_quarantine != len(self.quarantined) and self.declined is None:
            self._recut()
        if self._schedule is None:
            self._schedule = self._build()
        self._failed_this_run = False
        return self._schedule

    def _recut(self) -> None:
        self.layout = self._cut()
        keep = set(self.layout.segments)
        for steps in [s for s in self.graphs if s not in keep]:
            self.graphs.pop(steps).close()
        self._schedule = None

    def _build(self) -> list[Any]:
        first = {seg[0]: seg for seg in self.layout.segments}
        items: list[Any] = []
        i, n = 0, len(self.program.steps)
        while i < n:
            seg = first.get(i)
            if seg is None:
                items.append(i)
                i += 1
                continue
            if seg in self.eager_segments:
                items.extend(seg)
            else:
                items.append(self.graphs.get(seg) or Record(seg))
            i = seg[-1] + 1
        return items

    def after_run(self) -> None:
        """Count a failed round; give up on the plan after :data:`MAX_FAILED_ROUNDS`."""
        if self._failed_this_run:
            self.failed_rounds += 1
            if self.failed_rounds >= MAX_FAILED_ROUNDS and self.given_up is None:
                self.given_up = (f"{self.failed_rounds} recordings failed; the signature "
                                 f"runs eagerly")
                log.warning("signature %s: %s", self.signature, self.given_up)
                self.drop()

    # ------------------------------------------------------------ record
    def record(self, rec: Record, run_step: Callable[[int], None], env: list[Any]) -> bool:
        """Record ``rec``'s steps, instantiate and launch the graph once.

        :returns: True when the graph ran (the segment's outputs are in ``env``); False when
            recording failed or was refused: the caller runs the steps eagerly, nothing of
            the attempt remains on the stream and the failure is in :attr:`failures`.
        """
        steps = rec.steps
        rt, stream = self.runtime, self.stream
        try:
            reservation = self.authority.reserve(rt.graph_bytes(len(steps)), Role.GRAPHS,
                                                 self.holder)
        except MemoryBudgetError as exc:
            self.eager_segments[steps] = f"graph memory refused: {exc}"
            self._fail(None, "memory", str(exc), steps)
            return False
        inputs = [(s, env[s]) for s in self._inputs_of(steps)]
        checks = tuple((s, address(v)) for s, v in inputs)
        try:
            rt.begin_capture(stream)
            try:
                for i in steps:
                    try:
                        run_step(i)
                    except Exception as exc:
                        raise _StepFailed(i, _error_name(exc), exc) from exc
                    err = rt.capture_failure(stream)
                    if err:
                        raise _StepFailed(i, err)
            except BaseException:
                rt.abort_capture(stream)
                raise
            graph = rt.end_capture(stream)
        except _StepFailed as f:
            reservation.release()
            for s, v in inputs:      # the attempt freed them; the eager rerun reads them
                env[s] = v
            self._fail(f.index, f.error, str(f.cause) if f.cause else f.error, steps)
            return False
        except Exception as exc:    # begin, end or instantiate: no single node to blame
            reservation.release()
            for s, v in inputs:
                env[s] = v
            self.eager_segments[steps] = f"recording failed: {_error_name(exc)}"
            self._fail(None, _error_name(exc), str(exc), steps)
            return False
        replay = Replay(steps, graph, self._exports(steps, env), checks,
                        self._frees(steps), reservation)
        self.graphs[steps] = replay
        self.records += 1
        self._schedule = None
        graph.replay(stream)
        return True

    def _fail(self, index: int | None, error: str, message: str,
              steps: tuple[int, ...]) -> None:
        node = kernel = None
        if index is not None:
            st = self.program.steps[index]
            node = st.name
            kernel = type(st.placed.kernel).__name__ if st.placed is not None else "copy"
            self.quarantined[node] = f"{error} while recording ({kernel})"
        failure = {"node": node, "kernel": kernel, "error": error, "message": message,
                   "segment": [self.program.steps[steps[0]].name,
                               self.program.steps[steps[-1]].name]}
        self.failures.append(failure)
        self._failed_this_run = True
        self._schedule = None
        log.warning("signature %s: recording failed at %s (%s): %s; it runs eagerly",
                    self.signature, node or "the segment", kernel or "-", error)

    # ------------------------------------------------------------ replay
    def replay(self, item: Replay, env: list[Any]) -> bool:
        """Launch ``item``'s graph and leave its exports in ``env``; False when one of its
        inputs moved (the caller runs the steps eagerly; the segment is recorded again)."""
        for s, addr in item.checks:
            if address(env[s]) != addr:
                self.moved_inputs += 1
                self.graphs.pop(item.steps, None)
                item.close()
                self._schedule = None
                self._failed_this_run = True
                return False
        item.graph.replay(self.stream)
        for s, v in item.exports:
            env[s] = v
        for s in item.frees:
            env[s] = None
        item.replays += 1
        self.replays += 1
        return True

    # ------------------------------------------------------------ slots
    def _inputs_of(self, steps: tuple[int, ...]) -> list[int]:
        made: set[int] = set()
        reads: dict[int, None] = {}
        for i in steps:
            st = self.program.steps[i]
            for s in st.in_slots:
                if s >= 0 and s not in made and s not in self._consts:
                    reads[s] = None
            made.update(s for s in st.out_slots if s >= 0)
        return list(reads)

    def _exports(self, steps: tuple[int, ...], env: list[Any]) -> tuple[tuple[int, Any], ...]:
        last = steps[-1]
        outputs = set(self.program.output_slots)
        out: list[tuple[int, Any]] = []
        for i in steps:
            for s in self.program.steps[i].out_slots:
                if s >= 0 and (s in outputs or self._readers.get(s, -1) > last):
                    out.append((s, env[s]))
        return tuple(out)

    def _frees(self, steps: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(s for i in steps for s in self.program.steps[i].frees)

    # ------------------------------------------------------------ memory
    def graph_count(self) -> int:
        return len(self.graphs)

    def evict(self) -> None:
        """Drop every recorded graph (the cache bound); the next run records again."""
        if self.graphs:
            self.evictions += 1
        self.drop()

    def drop(self) -> None:
        graphs, self.graphs = self.graphs, {}
        self._schedule = None
        for g in graphs.values():
            g.close()

    # ------------------------------------------------------------ report
    def report(self) -> dict[str, Any]:
        names = [st.name for st in self.program.steps]
        layout = self.layout.report(names)
        for seg, entry in zip(self.layout.segments, layout["segments"]):
            g = self.graphs.get(seg)
            entry["recorded"] = g is not None
            entry["graph_nodes"] = getattr(g.graph, "nodes", None) if g is not None else None
            if seg in self.eager_segments:
                entry["eager"] = self.eager_segments[seg]
        state = ("declined" if self.declined is not None else "eager" if self.given_up
                 else "recorded" if self.graphs else "pending")
        return {"signature": self.signature, "steps": len(names), "state": state,
                **layout, "declined": self.declined, "given_up": self.given_up,
                "records": self.records, "replays": self.replays,
                "moved_inputs": self.moved_inputs, "evictions": self.evictions,
                "failures": list(self.failures)}


def _last_reads(program: Any) -> dict[int, int]:
    """slot -> the last step index that reads it (control-flow scopes included)."""
    last: dict[int, int] = {}
    for i, st in enumerate(program.steps):
        for s in st.in_slots:
            if s >= 0:
                last[s] = i
        for _, s in st.scope_slots:
            last[s] = i
    return last


def _error_name(exc: BaseException) -> str:
    """A failure's class: the CUDA error name when the driver gave one."""
    name = getattr(exc, "error_name", None)
    if name:
        return str(name)
    if isinstance(exc, CaptureError):
        return "CaptureError"
    return type(exc).__name__


def check_required(layout: CaptureLayout, signature: str) -> None:
    """``capture="require"``: raise unless the plan is whole segments between its I/O.

    :raises CaptureError: listing every decline with its reason.
    """
    declines = layout.declines
    if declines or len(layout.segments) > 1:
        listed = "; ".join(f"{s.name}: {s.reason}" for s in declines[:20])
        more = f" (and {len(declines) - 20} more)" if len(declines) > 20 else ""
        raise CaptureError(
            f"capture='require' but signature {signature} cannot be captured entirely: "
            f"{len(layout.segments)} segments, {len(declines)} declines: {listed}{more}")


# ---------------------------------------------------------------- the session's part


def signature_text(signature: tuple[Any, ...]) -> str:
    """``float32[1, 8], int64[1]``: a shape signature as the report and the logs print it."""
    return ", ".join(f"{dt}{list(shape)}" if shape is not None else str(dt)
                     for dt, shape in signature)


class SessionCapture:
    """What a session keeps about capture across its plans: the mode, the quarantined nodes,
    the bound on instantiated graphs (least recently run plan evicted first)."""

    def __init__(self, mode: str, graph_limit: int, holder: str) -> None:
        self.mode = mode
        self.graph_limit = graph_limit
        self.holder = holder
        #: nodes whose recording failed: they run eagerly in every plan of the session
        self.quarantined: dict[str, str] = {}
        self._captured: collections.OrderedDict[tuple[Any, ...], PlanCapture] = (
            collections.OrderedDict())
        self.evictions = 0

    def check_host(self, signature: tuple[Any, ...], providers: Sequence[str]) -> None:
        """``require`` on a host-only plan: nothing can be captured.

        :raises CaptureError:
        """
        if self.mode == "require":
            raise CaptureError(f"capture='require' but signature {signature_text(signature)} "
                               f"runs on the host ({', '.join(providers)}): only a device "
                               f"plan can be captured")

    def check_plan(self, plan: Any, device: Any) -> None:
        """``require``: refuse a device plan that cannot be captured entirely, at planning,
        before its memory is taken. :raises CaptureError: listing every decline."""
        if self.mode != "require":
            return
        sig = signature_text(plan.signature)
        if not hasattr(device.runtime, "begin_capture"):
            raise CaptureError(f"capture='require' but the {device.device} runtime cannot "
                               f"record graphs (signature {sig})")
        check_required(segment(plan.program.steps, self.quarantined, io_slots(plan.program)),
                       sig)

    def new_plan(self, plan: Any, device: Any, *, streaming: bool) -> PlanCapture:
        """The plan's capture state after its warm-up run; logs its layout once."""
        declined = None
        if not hasattr(device.runtime, "begin_capture"):
            declined = f"the {device.device} runtime cannot record graphs"
        elif streaming:
            declined = ("weight streaming pages weights in between steps; capture needs "
                        "every weight resident (memory_policy='full_resident')")
        cap = PlanCapture(plan.program, signature_text(plan.signature), device.runtime,
                          device.stream, device.authority, self.holder, self.quarantined,
                          declined)
        layout = cap.layout
        log.info("signature %s: %d segments, %d captured nodes, %d seams%s", cap.signature,
                 len(layout.segments), sum(len(seg) for seg in layout.segments),
                 len(layout.seams), f" (declined: {declined})" if declined else "")
        return cap

    def for_run(self, cap: PlanCapture | None, run_options: Any) -> PlanCapture | None:
        """``cap`` when this run follows its schedule, else None (eager)."""
        if cap is None or not cap.active:
            return None
        mode = getattr(run_options, "capture", None) or self.mode
        return cap if mode != "off" else None

    def after_run(self, signature: tuple[Any, ...], cap: PlanCapture) -> None:
        """After a captured run: count a failed round, keep the graphs within the bound.

        The plan that just ran is never evicted by its own run.
        """
        cap.after_run()
        self._captured[signature] = cap
        self._captured.move_to_end(signature)
        total = sum(c.graph_count() for c in self._captured.values())
        for sig in list(self._captured):
            if total <= self.graph_limit or sig == signature:
                break
            old = self._captured.pop(sig)
            total -= old.graph_count()
            old.evict()
            self.evictions += 1

    def forget(self, signature: tuple[Any, ...]) -> None:
        """A plan the session evicted: drop its graphs and stop counting it."""
        cap = self._captured.pop(signature, None)
        if cap is not None:
            cap.drop()

    def report(self, plans: Iterable[Any], device: str) -> dict[str, Any]:
        return {"holder": self.holder, "device": device, "mode": self.mode,
                "quarantined": dict(self.quarantined),
                "graphs": sum(c.graph_count() for c in list(self._captured.values())),
                "graph_limit": self.graph_limit, "evictions": self.evictions,
                "plans": [p.capture.report() for p in list(plans) if p.capture is not None]}
