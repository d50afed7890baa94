"""The step loop: runs a :class:`Program` over value slots.

The hot path is deliberately plain: for each precomputed step, gather input
slots, call the bound ``execute_with_workspace``, store outputs, drop dead
values. Shapes were validated once when the signature was planned, so a cached
signature does no checks and no dict lookups per node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.capture import Record
from onnx_ep.core.graph import Graph
from onnx_ep.core.kernel import ExecutionContext, WorkspaceView
from onnx_ep.core.placement import HOST, place
from onnx_ep.core.planner import Program, Step, build_program, program_io
from onnx_ep.core.registry import KernelRegistry
from onnx_ep.errors import KernelContractError, NodeError, OnnxEpError, RunCancelled


class Executor:
    """Runs programs; builds and caches subgraph programs on first use."""

    def __init__(self, registry: KernelRegistry, providers: Sequence[str]) -> None:
        self.registry = registry
        # subgraphs run unplanned (their shapes change per iteration), so only on host
        # providers, whose kernels need no pre-bound device buffers
        self.host_providers = [p for p in providers if registry.providers[p].device == HOST]
        self._subprograms: dict[int, Program] = {}
        #: plans and runs the bodies of control-flow nodes placed on a device (set by a
        #: session bound to one, :class:`~onnx_ep.core.subgraphs.DeviceSubgraphs`)
        self.device_subgraphs: Any = None

    def program_for(self, graph: Graph) -> Program:
        """The program of a (sub)graph, placed with this executor's providers."""
        prog = self._subprograms.get(id(graph))
        if prog is None:
            prog = build_program(graph, place(graph, self.registry, self.host_providers))
            self._subprograms[id(graph)] = prog
        return prog

    def run(self, program: Program, inputs: Sequence[Any], *,
            outer: Mapping[str, Any] | None = None,
            workspaces: Sequence[WorkspaceView | None] | None = None,
            cancel: Callable[[], bool] | None = None,
            weights: Any = None,
            prebound: Sequence[tuple[Any, ...]] | None = None,
            skip: frozenset[int] = frozenset(),
            capture: Any = None, meter: Any = None, profile: Any = None) -> list[Any]:
        """Execute ``program`` and return its graph outputs in order.

        :param inputs: one value per graph input, in order.
        :param outer: outer-scope values for a subgraph, by name.
        :param workspaces: one view (or None) per step, from the plan.
        :param cancel: polled between steps; when it returns True the run stops
            with :exc:`RunCancelled`.
        :param weights: a weight store (weight streaming): initializers are paged
            in before each step that reads them instead of being resident.
        :param prebound: per step, the device tensors its outputs are written into.
        :param skip: indices of copy steps not to run: their output is their input (the
            downloads of outputs a caller wants on the device).
        :param capture: a :class:`~onnx_ep.core.capture.PlanCapture` whose schedule this
            run follows: recorded segments replay as graphs, the rest runs step by step.
        :param meter: a :class:`~onnx_ep.core.run_sizing.RunMeter`: the steps it meters
            reserve their outputs' bytes (sized from their inputs) before they run.
        :param profile: a :class:`~onnx_ep.core.profiling.Profiler`: every step (and each
            replayed segment) is timed into it, through the general loop.
        """
        # two spare slots: n_slots receives outputs the graph does not use (slot -1 of an
        # output), n_slots + 1 stays None and is what a missing optional input (-1) reads;
        # streamed weights are paged into their slots step by step instead
        env: list[Any] = (list(program.env0) if weights is None
                          else [None] * (program.n_slots + 2))
        for s, v in zip(program.input_slots, inputs):
            env[s] = v
        if outer is not None:
            for name, s in zip(program.graph.outer_names, program.outer_slots):
                env[s] = outer[name]
        if prebound is not None:
            skip = skip | copy_feeds(program, env, prebound, skip)
        steps = program.steps
        wsl = workspaces if workspaces is not None else program.no_workspaces
        pb = prebound if prebound is not None else program.no_prebound
        i = 0
        where = [0]                   # the general loop's current step, for error messages
        if meter is not None and meter.steps is not None and not meter.steps:
            meter = None
        fast = (cancel is None and weights is None and not skip and capture is None
                and program.fast is not None and meter is None and profile is None)
        trace = profile.run(program) if profile is not None else None
        ok = False
        try:
            with np.errstate(all="ignore"):   # ONNX defines inf/nan results; no warnings
                if capture is not None:
                    self._run_schedule(program, env, wsl, pb, capture, cancel, where, skip,
                                       meter, trace)
                elif fast:
                    # one and two inputs / one output spelled out: a comprehension or zip
                    # per step costs more than the branch (a frame per listcomp before 3.12)
                    for i, (call, ctx, ins, outs, frees) in enumerate(program.fast):
                        res = list(pb[i])
                        n_in = len(ins)
                        if n_in == 2:
                            args = [env[ins[0]], env[ins[1]]]
                        elif n_in == 1:
                            args = [env[ins[0]]]
                        else:
                            args = [env[s] for s in ins]
                        call(ctx, args, res, wsl[i])
                        if len(outs) == 1:
                            env[outs[0]] = res[0]
                        else:
                            for s, v in zip(outs, res):
                                env[s] = v
                        for s in frees:
                            env[s] = None
                else:
                    self._run_general(program, env, wsl, pb, cancel, weights, where, skip,
                                      meter, trace)
            ok = True
        except OnnxEpError:
            raise
        except Exception as exc:
            # a kernel bug or an input the kernel did not validate: name the node, keep the cause
            step = steps[i if fast else where[0]]
            raise NodeError(f"kernel {getattr(step.placed, 'kernel', step.call)!r} failed: "
                            f"{type(exc).__name__}: {exc}", node=step.name,
                            op_type=step.placed.node.op_type if step.placed else "copy") from exc
        finally:
            if trace is not None:
                trace.finish(ok)
        return [env[s] for s in program.output_slots]

    def _run_general(self, program: Program, env: list[Any],
                     wsl: Sequence[WorkspaceView | None], pb: Sequence[tuple[Any, ...]],
                     cancel: Callable[[], bool] | None, weights: Any,
                     where: list[int], skip: frozenset[int] = frozenset(),
                     meter: Any = None, trace: Any = None) -> None:
        """The loop for runs that cancel, stream weights, run subgraphs, skip copies,
        meter run-sized outputs or are profiled (``trace``)."""
        steps = program.steps
        trash = program.n_slots
        for i, step in enumerate(steps):
            where[0] = i
            if cancel is not None and cancel():
                raise RunCancelled(f"run cancelled before step {i} ({step.name!r}) of "
                                   f"{len(steps)}")
            if weights is not None and step.const_reads:
                for s, v in zip(step.const_reads, weights.page_in(step.const_reads)):
                    env[s] = v
            self._step(step, env, wsl[i], pb[i], i in skip, trash, False,
                       meter if meter is not None and meter.metered(i) else None, trace)
            if weights is not None:
                for s in step.const_reads:   # the window owns paged weights, not the run
                    env[s] = None

    def _step(self, step: Step, env: list[Any], workspace: WorkspaceView | None,
              prebound: tuple[Any, ...], skipped: bool, trash: int,
              captured: bool = False, meter: Any = None, trace: Any = None) -> None:
        """Run one step of the general and the captured loops over ``env`` (``meter``: its
        outputs are reserved before it runs, sized from ``args``; ``trace``: it is timed)."""
        args = [env[s] for s in step.in_slots]
        if skipped:             # a skipped copy: its output is its input
            env[step.out_slots[0]] = args[0]
        else:
            outs = list(prebound)
            ctx = (step.ctx if not step.has_subgraphs
                   else self._scoped_ctx(step, env, captured, meter))
            call = step.call if trace is None else trace.timed(step)
            if meter is None:
                call(ctx, args, outs, workspace)
            else:
                charged = meter.before(step, args)
                call(ctx, args, outs, workspace)
                meter.after(step, outs, charged)
            for s, v in zip(step.out_slots, outs):
                env[s if s >= 0 else trash] = v
        for s in step.frees:
            env[s] = None

    def _run_schedule(self, program: Program, env: list[Any],
                      wsl: Sequence[WorkspaceView | None], pb: Sequence[tuple[Any, ...]],
                      capture: Any, cancel: Callable[[], bool] | None, where: list[int],
                      skip: frozenset[int], meter: Any = None, trace: Any = None) -> None:
        """The loop of a captured plan: step indices run eagerly, recorded segments replay,
        segments not recorded yet are recorded (and run eagerly when recording fails);
        ``trace`` times each segment as one event."""
        steps = program.steps
        trash = program.n_slots

        def run_step(i: int, traced: bool = True) -> None:
            where[0] = i
            self._step(steps[i], env, wsl[i], pb[i], i in skip, trash, True,
                       meter if meter is not None and meter.metered(i) else None,
                       trace if traced else None)

        def record_step(i: int) -> None:
            # timing events recorded into a graph would time nothing: the segment is timed whole
            run_step(i, False)

        for item in capture.schedule():
            if cancel is not None and cancel():
                at = item if type(item) is int else item.steps[0]
                raise RunCancelled(f"run cancelled before step {at} ({steps[at].name!r}) "
                                   f"of {len(steps)}")
            if type(item) is int:
                if item in skip:
                    # a copy read in place or left on the device: its output is its input.
                    # A decode step binds ~100 KV feeds and outputs; each through
                    # run_step would cost microseconds of Python per token
                    st = steps[item]
                    env[st.out_slots[0]] = env[st.in_slots[0]]
                    for s in st.frees:
                        env[s] = None
                    continue
                run_step(item)
                continue
            where[0] = item.steps[0]
            if type(item) is Record:
                if (capture.record(item, run_step, env) if trace is None else trace.segment(
                        item.steps, lambda: capture.record(item, record_step, env), "record",
                        capture.stream)):
                    continue
            elif (capture.replay(item, env) if trace is None else trace.segment(
                    item.steps, lambda: capture.replay(item, env), "replay", capture.stream)):
                continue
            for i in item.steps:     # not recorded, or an input moved: eagerly, this run
                run_step(i)

    def _scoped_ctx(self, step: Step, env: list[Any], captured: bool = False,
                    meter: Any = None) -> ExecutionContext:
        """A per-call context whose ``run_subgraph`` sees this run's outer-scope values
        (``captured``: the run follows a capture schedule, so device bodies may too)."""
        assert step.ctx is not None
        scope = {name: env[s] for name, s in step.scope_slots}
        if step.ctx.scope:
            scope = {**step.ctx.scope, **scope}
        # a device control-flow node runs its bodies as device plans of their own
        bodies = (self.device_subgraphs if step.placed is not None
                  and step.placed.device != HOST else None)

        def run_subgraph(graph: Graph, feeds: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
            if isinstance(feeds, Mapping):
                feeds = [feeds[v.name] for v in graph.inputs]
            if bodies is not None:
                return bodies.run(graph, feeds, scope, self.run, step.ctx.node.outer_constants,
                                  captured)
            if step.placed is not None and step.placed.device != HOST:
                raise KernelContractError(f"node {step.name!r} runs control flow on "
                                          f"{step.placed.device} but no device plans its "
                                          f"bodies (run it inside a Session)")
            prog = self.program_for(graph)
            body = meter.child() if meter is not None else None
            try:
                return self.run(prog, feeds, outer=scope, meter=body)
            except KeyError as exc:
                raise KernelContractError(f"subgraph {graph.name!r} of node {step.name!r} "
                                          f"reads {exc} which is not in scope") from exc
            finally:
                if body is not None:
                    body.release()

        return ExecutionContext(step.ctx.node, stream=step.ctx.stream,
                                provider=step.ctx.provider, run_subgraph=run_subgraph,
                                scope=scope)


def copy_feeds(program: Program, env: list[Any], prebound: Sequence[tuple[Any, ...]],
               skip: frozenset[int] = frozenset()) -> frozenset[int]:
    """Copy the feeds already on the device into their planned input buffers in one call
    of the runtime's optional ``copy_many``; the indices of the copy steps it did.

    A decode step binds tens of device feeds (the KV cache); one copy each is a launch and
    several µs of host time. The feed's slot is pointed at its copy, so the skipped step
    (whose output is its input) leaves the planned buffer in place for the steps after it.
    Uploads in ``skip`` (feeds read in place, ``device_io.feeds_in_place``) are not copied.
    """
    steps = program.steps
    done = [i for i in program_io(program).uploads
            if i not in skip and prebound[i][0] is not None
            and not isinstance(env[steps[i].in_slots[0]], (np.ndarray, type(None)))]
    runtime = getattr(steps[done[0]].call, "runtime", None) if done else None
    if len(done) < 2 or not hasattr(runtime, "copy_many"):
        return frozenset()
    copy_all(runtime, [(env[steps[i].in_slots[0]], prebound[i][0]) for i in done],
             steps[done[0]].ctx.stream)
    for i in done:
        env[steps[i].in_slots[0]] = prebound[i][0]
    return frozenset(done)


def copy_all(runtime: Any, pairs: Sequence[tuple[Any, Any]], stream: Any) -> None:
    """Device-to-device copies ``(src, dst)`` through the runtime's optional ``copy_many``
    (one launch for many buffers), else one ``copy`` each."""
    if len(pairs) > 1 and hasattr(runtime, "copy_many"):
        runtime.copy_many(pairs, stream)
        return
    for src, dst in pairs:
        runtime.copy(src, dst, stream)
