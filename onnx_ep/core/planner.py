"""Execution plan: step order, value slots, buffer liveness and the workspace plan.

A :class:`Program` is built once per (sub)graph from its placement: every value
gets an integer slot, every step a precomputed list of input/output slots and
the slots that die after it, so the executor's loop does no dict lookups.
An :class:`ExecutionPlan` adds what depends on the input shapes (one per shape
signature): concrete tensor specs, each kernel's workspace requirement and the
per-lifetime workspace peaks. See docs/MEMORY.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import onnx

from onnx_ep.core.graph import Graph, infer
from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    TensorSpec,
    WorkspaceLifetime,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.core.memory import align_up
from onnx_ep.core.placement import CopyStep, PlacedNode, Placement, node_meta
from onnx_ep.errors import KernelContractError

#: a step's kind
KERNEL, COPY = 0, 1


@attrs.define(eq=False, slots=True)
class Step:
    """One executable step with its slots precomputed."""

    kind: int
    name: str
    call: Any                     # kernel.execute_with_workspace, or the copy function
    ctx: ExecutionContext | None
    in_slots: tuple[int, ...]     # -1 for a missing optional input
    out_slots: tuple[int, ...]    # -1 for an unused output
    frees: tuple[int, ...]        # slots whose value is dead after this step
    placed: PlacedNode | None = None
    copy: CopyStep | None = None
    #: slots of the outer-scope values its subgraphs read (control flow nodes)
    scope_slots: tuple[tuple[str, int], ...] = ()
    #: the node has subgraphs: it gets a per-call context with ``run_subgraph``
    has_subgraphs: bool = False
    #: initializer slots this step reads (paged in first under weight streaming)
    const_reads: tuple[int, ...] = ()


@attrs.define(eq=False)
class Program:
    """Shape-independent executable form of one (sub)graph."""

    graph: Graph
    placement: Placement
    steps: list[Step]
    n_slots: int
    slot_of: dict[str, int]
    input_slots: list[int]            # graph inputs, in order
    outer_slots: list[int]            # subgraph outer-scope values, in graph.outer_names order
    output_slots: list[int]
    constants: list[tuple[int, Any]]  # initializer slots and values
    #: (call, ctx, in_slots, out_slots, frees) per step when every step is a plain kernel
    #: call (no copies, no subgraphs): the executor's fast loop; else None
    fast: list[tuple[Any, ...]] | None = None
    no_workspaces: list[None] = attrs.Factory(list)
    #: per step, the outputs list a run starts from when nothing is pre-bound
    no_prebound: list[tuple[None, ...]] = attrs.Factory(list)
    #: :func:`program_io`'s answer, computed on first use (device feeds and outputs)
    io: ProgramIO | None = None
    #: the slots a run starts from: ``n_slots + 2`` values, the constants set, the rest None
    #: (copied per run: one list copy instead of a loop over every initializer); change a
    #: constant through :meth:`replace_constant`, which keeps both in step
    env0: list[Any] = attrs.Factory(list)

    def replace_constant(self, index: int, value: Any) -> None:
        """Constant ``index`` (of :attr:`constants`) becomes ``value`` (a placed weight)."""
        slot = self.constants[index][0]
        self.constants[index] = (slot, value)
        self.env0[slot] = value


def build_program(graph: Graph, placement: Placement, *,
                  streams: Mapping[str, Any] | None = None,
                  runtimes: Mapping[str, Any] | None = None,
                  device_constants: Mapping[str, Any] | None = None) -> Program:
    """Number every value, precompute each step's slots and liveness.

    :param streams: the stream of each non-host device, for kernels' contexts.
    :param runtimes: the :class:`DeviceRuntime` of each non-host device, for copy steps.
    :param device_constants: uploaded initializers by their device value name
        (``placement.uploads``); they are constants of the program like initializers.
    """
    streams = streams or {}
    runtimes = runtimes or {}
    slot_of: dict[str, int] = {}

    def slot(name: str) -> int:
        if not name:
            return -1
        s = slot_of.get(name)
        if s is None:
            s = slot_of[name] = len(slot_of)
        return s

    input_slots = [slot(v.name) for v in graph.inputs]
    outer_slots = [slot(n) for n in graph.outer_names]
    constants = [(slot(k), v) for k, v in graph.initializers.items()]
    constants += [(slot(k), v) for k, v in (device_constants or {}).items()]
    raw_steps: list[tuple[Any, tuple[int, ...], tuple[int, ...]]] = []
    for s in placement.steps:
        if isinstance(s, CopyStep):
            raw_steps.append((s, (slot(s.src),), (slot(s.dst),)))
        else:
            ins = tuple(slot(n) for n in s.inputs)
            implicit = tuple(slot(n) for n in (s.implicit or s.node.implicit_inputs))
            outs = tuple(slot(n) for n in s.node.outputs)
            raw_steps.append((s, ins + implicit, outs))
    output_slots = [slot(placement.outputs.get(v.name, v.name)) for v in graph.outputs]

    # liveness: a value dies after its last reader, unless it must survive the run
    keep = set(output_slots) | set(input_slots) | set(outer_slots) | {c for c, _ in constants}
    last_use: dict[int, int] = {}
    for i, (_, ins, outs) in enumerate(raw_steps):
        for x in ins:
            if x >= 0:
                last_use[x] = i
        for x in outs:
            if x >= 0 and x not in last_use:
                last_use[x] = i   # produced and never read: dies immediately
    frees_at: list[list[int]] = [[] for _ in raw_steps]
    for x, i in last_use.items():
        if x not in keep:
            frees_at[i].append(x)

    const_slots = {c for c, _ in constants}
    # values that are views of a constant's memory (outputs of aliasing kernels such as a
    # device Reshape): a step reading one reads the constant too, so weight streaming
    # pages the constant in before that step, not only before the step that made the view
    views_of: dict[int, tuple[int, ...]] = {}
    steps: list[Step] = []
    for i, (s, ins, outs) in enumerate(raw_steps):
        reads = [x for x in ins if x in const_slots]
        for x in ins:
            reads.extend(views_of.get(x, ()))
        const_reads = tuple(dict.fromkeys(reads))
        if not isinstance(s, CopyStep):
            for o, j in (getattr(s.kernel, "aliases", None) or {}).items():
                if o < len(outs) and outs[o] >= 0 and j < len(ins) and ins[j] >= 0:
                    origin = ((ins[j],) if ins[j] in const_slots else ()) + views_of.get(
                        ins[j], ())
                    if origin:
                        views_of[outs[o]] = origin
        if isinstance(s, CopyStep):
            device = s.src_device if s.to_host else s.dst_device
            rt = runtimes.get(device)
            if rt is None:
                raise KernelContractError(f"provider {s.provider.name!r} on device {device!r} "
                                          f"has no runtime() to copy {s.src!r}")
            ctx = ExecutionContext(_copy_meta(s), stream=streams.get(device),
                                   provider=s.provider.name)
            steps.append(Step(COPY, f"copy:{s.src}->{s.dst_device}", CopyCall(rt, s.to_host),
                              ctx, ins, outs, tuple(frees_at[i]), copy=s,
                              const_reads=const_reads))
            continue
        n_explicit = len(s.inputs)
        ctx = ExecutionContext(s.meta, provider=s.provider, stream=streams.get(s.device))
        # the subgraph reads each outer value by its own name; the slot may hold its host copy
        scope = tuple((n, slot_of[h]) for n, h in zip(
            s.node.implicit_inputs, s.implicit or s.node.implicit_inputs))
        steps.append(Step(KERNEL, s.node.name, s.kernel.execute_with_workspace, ctx,
                          ins[:n_explicit], outs, tuple(frees_at[i]), placed=s,
                          scope_slots=scope, const_reads=const_reads,
                          has_subgraphs=bool(s.node.subgraphs)))
    n = len(slot_of)
    fast = None
    if not any(st.has_subgraphs for st in steps):
        fast = [(st.call, st.ctx, st.in_slots, tuple(s if s >= 0 else n for s in st.out_slots),
                 st.frees) for st in steps]
    env0: list[Any] = [None] * (n + 2)
    for c, v in constants:
        env0[c] = v
    return Program(graph, placement, steps, n, slot_of, input_slots, outer_slots,
                   output_slots, constants, fast, [None] * len(steps),
                   [(None,) * len(st.out_slots) for st in steps], env0=env0)


@attrs.frozen
class ProgramIO:
    """Where a program's graph inputs are read and its outputs come from (for device I/O).

    :ivar host_read_inputs: positions of graph inputs some host step (or the output list)
        reads directly: a device feed for them must be copied to the host first.
    :ivar downloads: output position -> index of the step that copies it to the host.
    """

    host_read_inputs: frozenset[int]
    downloads: dict[int, int]


def program_io(program: Program) -> ProgramIO:
    """The :class:`ProgramIO` of ``program`` (computed once, kept on the program)."""
    if program.io is not None:
        return program.io
    pos_of = {s: i for i, s in enumerate(program.input_slots)}
    host_read: set[int] = set()
    download_of: dict[int, int] = {}          # host slot -> the copy step that fills it
    for i, st in enumerate(program.steps):
        # a copy that reads an input is its upload (device-to-device for a device feed)
        if st.placed is not None and st.placed.device == "cpu":
            host_read.update(pos_of[s] for s in st.in_slots if s in pos_of)
        elif st.copy is not None and st.copy.to_host:
            download_of[st.out_slots[0]] = i
    host_read.update(pos_of[s] for s in program.output_slots if s in pos_of)
    downloads = {pos: download_of[out] for pos, out in enumerate(program.output_slots)
                 if out in download_of}
    program.io = ProgramIO(frozenset(host_read), downloads)
    return program.io


class CopyCall:
    """A copy step behind the kernel calling convention ``call(ctx, inputs, outputs, ws)``.

    Host -> device writes into the pre-bound ``outputs[0]`` (a planned arena view);
    device -> host downloads into a new host array.
    """

    __slots__ = ("runtime", "to_host")

    def __init__(self, runtime: Any, to_host: bool) -> None:
        self.runtime = runtime
        self.to_host = to_host

    def __call__(self, ctx: ExecutionContext, inputs: Sequence[Any], outputs: list[Any],
                 workspace: Any) -> None:
        if self.to_host:
            outputs[0] = self.runtime.download(inputs[0], ctx.stream)
        else:
            if outputs[0] is None:
                raise KernelContractError(f"{ctx.node.name}: no planned device buffer for the "
                                          f"upload (its shape was not known at plan time)")
            src = inputs[0]
            if isinstance(src, np.ndarray):
                outputs[0] = self.runtime.upload(src, outputs[0], ctx.stream)
            else:                   # a feed already on this device: device-to-device
                outputs[0] = self.runtime.copy(src, outputs[0], ctx.stream)


def _copy_meta(c: CopyStep) -> NodeMeta:
    return NodeMeta(name=f"copy:{c.src}->{c.dst_device}", op_type="MemcpyToHost" if c.to_host
                    else "MemcpyFromHost", domain="onnx_ep", opset=1, attrs={},
                    inputs=(None,), input_names=(c.src,), output_names=(c.dst,))


# ---------------------------------------------------------------- per signature


@attrs.frozen
class WorkspacePlan:
    """Per-node workspace requirements at one shape signature and the size per lifetime.

    Step-scoped scratch is dead once its step ends, so all step views share one slot
    sized by the peak. Session-persistent contents must survive across runs, so each
    node gets its own region of the session slot (``session_offsets``); the layout
    may change between shape signatures.
    """

    per_step: tuple[WorkspaceRequirement, ...]   # aligned with Program.steps
    step_peak: int
    session_peak: int
    session_offsets: tuple[int, ...] = ()        # aligned with per_step

    @property
    def total(self) -> int:
        return self.step_peak + self.session_peak


@attrs.define(eq=False)
class ExecutionPlan:
    """Everything shape-dependent for one shape signature."""

    signature: tuple[Any, ...]
    program: Program
    specs: dict[str, TensorSpec | None]
    workspace: WorkspacePlan
    arena: ArenaPlan
    #: per step, the device tensors its outputs are written into (device sessions), else None
    prebound: list[tuple[Any, ...]] | None = None
    #: per step, the device workspace views (device sessions), else None
    device_workspaces: list[Any] | None = None
    #: capture segments and seams (``core/capture.py``), set after the first run on a device
    capture: Any = None


def infer_specs(light_model: onnx.ModelProto | None, graph: Graph,
                input_specs: Sequence[TensorSpec]) -> dict[str, TensorSpec | None]:
    """Concrete specs of every value at these input shapes, via onnx shape inference."""
    by_name = {v.name: s for v, s in zip(graph.inputs, input_specs)}
    specs: dict[str, TensorSpec | None] = dict(by_name)
    for k, arr in graph.initializers.items():
        specs[k] = TensorSpec(arr.dtype, arr.shape)
    if light_model is None:
        return specs
    m = onnx.ModelProto()
    m.CopyFrom(light_model)
    for vi in m.graph.input:
        s = by_name.get(vi.name)
        if s is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        shape = vi.type.tensor_type.shape
        del shape.dim[:]
        for d in s.shape:
            shape.dim.add().dim_value = int(d)
    inferred = infer(m)
    from onnx_ep.core.graph import value_from_type
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        v = value_from_type(vi.name, vi.type)
        if v.spec is not None and vi.name not in specs:
            specs[vi.name] = v.spec
    return specs


def plan_signature(program: Program, signature: tuple[Any, ...],
                   specs: dict[str, TensorSpec | None],
                   device: str | None = None) -> ExecutionPlan:
    """Ask every kernel its workspace at these shapes; compute peaks and activation sizes."""
    graph = program.graph
    per_step: list[WorkspaceRequirement] = []
    step_peak = session_peak = 0
    offsets: list[int] = []
    for st in program.steps:
        offsets.append(session_peak)
        if st.placed is None:
            if st.copy is not None:                   # a copy keeps its source's spec
                specs[st.copy.dst] = specs.get(st.copy.src)
            per_step.append(WorkspaceRequirement.NONE)
            continue
        meta = node_meta(st.placed.node, graph, specs)
        infer = getattr(st.placed.kernel, "infer_outputs", None)
        if (infer is not None and any(o is None or not o.is_static for o in meta.outputs)
                and all(s is not None and s.is_static
                        for n, s in zip(meta.input_names, meta.inputs) if n)):
            # onnx inference could not size these outputs: the kernel can, from sized inputs
            for name, spec in zip(st.placed.node.outputs, infer(meta)):
                if name and spec is not None and (specs.get(name) is None
                                                  or not specs[name].is_static):
                    specs[name] = spec
            meta = node_meta(st.placed.node, graph, specs)
        req = st.placed.kernel.workspace_requirement(meta)
        if not isinstance(req, WorkspaceRequirement):
            raise KernelContractError(
                f"{st.placed.kernel!r}.workspace_requirement() returned "
                f"{type(req).__name__}, expected WorkspaceRequirement")
        per_step.append(req)
        if req.lifetime is WorkspaceLifetime.SESSION_PERSISTENT:
            session_peak += align_up(req.nbytes, ARENA_ALIGNMENT)
        else:
            step_peak = max(step_peak, req.nbytes)
    return ExecutionPlan(signature, program, specs,
                         WorkspacePlan(tuple(per_step), step_peak, session_peak,
                                       tuple(offsets)),
                         plan_arena(program, specs, device))


# ---------------------------------------------------------------- activation arena

#: arena offsets are aligned like numpy's default allocations
ARENA_ALIGNMENT = 64


@attrs.frozen
class ArenaPlan:
    """Offsets of every activation in one arena at one shape signature.

    :ivar offsets: ``{slot: byte offset}`` for activations of known size.
    :ivar size: the arena's bytes (end of the highest placed buffer).
    :ivar naive_bytes: sum of all activation sizes (no reuse).
    :ivar live_peak_bytes: peak of simultaneously live bytes (the lower bound).
    """

    offsets: dict[int, int]
    size: int
    naive_bytes: int
    live_peak_bytes: int


def workspace_views(ws: WorkspacePlan, session_view: Any,
                    step_view: Any) -> list[WorkspaceView | None]:
    """One workspace view per step of ``ws``: ``None`` without scratch, else a view of
    ``session_view(offset, nbytes)`` (session-persistent scratch at its planned offset) or of
    ``step_view(nbytes)`` (the shared per-step buffer). Host and device buffers alike."""
    views: list[WorkspaceView | None] = []
    for req, off in zip(ws.per_step, ws.session_offsets):
        if req.nbytes == 0:
            views.append(None)
        elif req.lifetime is WorkspaceLifetime.SESSION_PERSISTENT:
            views.append(WorkspaceView(session_view(off, req.nbytes), req.nbytes, req.lifetime))
        else:
            views.append(WorkspaceView(step_view(req.nbytes), req.nbytes, req.lifetime))
    return views


def step_device(step: Step) -> str:
    """The device a step's outputs live on."""
    if step.copy is not None:
        return step.copy.dst_device
    return step.placed.device if step.placed is not None else "cpu"


def plan_with_host_fallback(build: Any, signature: tuple[Any, ...],
                            specs: dict[str, TensorSpec | None], device: str,
                            on_fallback: Any = None) -> ExecutionPlan:
    """Plan ``build(frozenset())`` at ``signature``; while device nodes cannot be sized, plan
    ``build(host_only)`` with them moved to the host (moving one can leave a neighbour
    unsized, so this repeats to a fixed point).

    :param build: ``host_only -> Program``. :param on_fallback: called with the unsized node
        names before each re-plan (it may raise).
    """
    host_only: frozenset[str] = frozenset()
    plan = plan_signature(build(host_only), signature, dict(specs), device)
    while unsized := unsized_device_steps(plan, device):
        if on_fallback is not None:
            on_fallback(unsized)
        host_only |= frozenset(unsized)
        plan = plan_signature(build(host_only), signature, dict(specs), device)
    return plan


def unsized_device_steps(plan: ExecutionPlan, device: str) -> list[str]:
    """Names of nodes on ``device`` that read or write a value of unknown size here.

    A device needs every buffer's bytes before the run (outputs are pre-bound, inputs
    arrive through pre-bound copies); the session re-places these nodes on a host
    provider for this signature.
    """
    name_of = {s: n for n, s in plan.program.slot_of.items()}
    constants = {c for c, _ in plan.program.constants}   # uploaded: sized by construction

    def unsized(s: int) -> bool:
        if s < 0 or s in constants:
            return False
        spec = plan.specs.get(name_of[s])
        return spec is None or not spec.is_static

    return [st.placed.node.name for st in plan.program.steps
            if st.placed is not None and st.placed.device == device
            and any(unsized(s) for s in (*st.in_slots, *st.out_slots))]


def step_aliases(step: Step) -> dict[int, int]:
    """``{output index: input index}`` for outputs that are views of an input (Reshape).

    Declared by a kernel's optional ``aliases`` attribute; such outputs get no arena
    slot: the kernel stores a view of the input, whose buffer lives as long as the view.
    """
    kernel = step.placed.kernel if step.placed is not None else None
    return dict(getattr(kernel, "aliases", None) or {})


def plan_arena(program: Program, specs: dict[str, TensorSpec | None],
               device: str | None = None) -> ArenaPlan:
    """Pack activations into one arena, reusing offsets when lifetimes do not overlap.

    With ``device``, only values produced on that device are placed (a device session's
    host-side values are numpy arrays, not arena bytes).

    Greedy by size (largest first), each buffer at the lowest aligned offset that
    does not overlap a placed buffer whose lifetime overlaps its own. Graph
    inputs belong to the caller and initializers to the weights, so neither is
    placed; graph outputs live to the end of the run.
    """
    name_of = {s: n for n, s in program.slot_of.items()}
    skip = {c for c, _ in program.constants} | set(program.input_slots) | set(
        program.outer_slots)
    n_steps = len(program.steps)
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    root: dict[int, int] = {}     # alias slot -> the slot whose buffer it views

    def live_until(s: int, i: int) -> None:
        r = root.get(s, s)
        if r in start:
            end[r] = max(end[r], i)

    for i, st in enumerate(program.steps):
        if device is not None and step_device(st) != device:
            for s in st.in_slots:      # a host step reading a device value keeps it alive
                live_until(s, i)
            continue      # a device session's arena holds only that device's values
        aliases = step_aliases(st) if device is not None else {}
        for s in st.in_slots:
            live_until(s, i)
        for j, s in enumerate(st.out_slots):
            if s < 0 or s in skip:
                continue
            if j in aliases and aliases[j] < len(st.in_slots):
                src = st.in_slots[aliases[j]]
                root[s] = root.get(src, src)
                live_until(s, i)
                continue
            start.setdefault(s, i)
            end[s] = i
    for s in program.output_slots:
        live_until(s, n_steps)
    # control-flow nodes also read outer-scope values through their subgraphs
    for i, st in enumerate(program.steps):
        for _, s in st.scope_slots:
            live_until(s, i)

    sizes: dict[int, int] = {}
    for s in start:
        spec = specs.get(name_of.get(s, ""))
        if spec is not None and spec.is_static:
            sizes[s] = align_up(spec.nbytes, ARENA_ALIGNMENT)
    placed: list[tuple[int, int, int, int]] = []     # (offset, size, start, end)
    offsets: dict[int, int] = {}
    for s in sorted(sizes, key=lambda x: (-sizes[x], start[x])):
        size, a, b = sizes[s], start[s], end[s]
        conflicts = sorted((o, o + sz) for o, sz, a2, b2 in placed if a2 <= b and a <= b2)
        offset = 0
        for lo, hi in conflicts:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        offsets[s] = offset
        placed.append((offset, size, a, b))
    arena = max((o + sz for o, sz, _, _ in placed), default=0)
    naive = sum(sizes.values())
    # live-bytes peak over steps, with the same lifetimes
    events = sorted([(start[s], sz) for s, sz in sizes.items()] +
                    [(end[s] + 1, -sz) for s, sz in sizes.items()], key=lambda e: (e[0], e[1]))
    live = live_peak = 0
    for _, delta in events:
        live += delta
        live_peak = max(live_peak, live)
    return ArenaPlan(offsets, arena, naive, live_peak)
