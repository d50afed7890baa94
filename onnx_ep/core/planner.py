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

from onnx_ep.core.arena import ARENA_ALIGNMENT, ArenaPlan, plan_arena
from onnx_ep.core.folding import Folded, FoldedInputs, Folder, HostKernels
from onnx_ep.core.graph import Graph, infer, infer_node
from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    TensorSpec,
    WorkspaceLifetime,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.core.memory import align_up
from onnx_ep.core.placement import HOST as HOST_DEVICE
from onnx_ep.core.placement import CopyStep, PlacedNode, Placement, node_meta
from onnx_ep.core.registry import ask_supports, bind_kernel
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
    #: a signature's program (:func:`specialise`): folded values its steps read, by slot
    #: (host arrays; device tensors once ``DeviceBinding.bind_plan`` uploaded them)
    folded: dict[int, Any] = attrs.Factory(dict)

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

    keep = set(output_slots) | set(input_slots) | set(outer_slots) | {c for c, _ in constants}
    frees_at = dead_after([(ins, outs) for _, ins, outs in raw_steps], keep)

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
                              ctx, ins, outs, frees_at[i], copy=s,
                              const_reads=const_reads))
            continue
        n_explicit = len(s.inputs)
        ctx = ExecutionContext(s.meta, provider=s.provider, stream=streams.get(s.device))
        # the subgraph reads each outer value by its own name; the slot may hold its host copy
        scope = tuple((n, slot_of[h]) for n, h in zip(
            s.node.implicit_inputs, s.implicit or s.node.implicit_inputs))
        steps.append(Step(KERNEL, s.node.name, s.kernel.execute_with_workspace, ctx,
                          ins[:n_explicit], outs, frees_at[i], placed=s,
                          scope_slots=scope, const_reads=const_reads,
                          has_subgraphs=bool(s.node.subgraphs)))
    n = len(slot_of)
    env0: list[Any] = [None] * (n + 2)
    for c, v in constants:
        env0[c] = v
    return Program(graph, placement, steps, n, slot_of, input_slots, outer_slots,
                   output_slots, constants, fast_loop(steps, n), [None] * len(steps),
                   [(None,) * len(st.out_slots) for st in steps], env0=env0)


def dead_after(io: Sequence[tuple[Sequence[int], Sequence[int]]],
               keep: set[int]) -> list[tuple[int, ...]]:
    """Per step (``(read slots, written slots)``), the slots dead after it: a value dies
    after its last reader (a value never read, right after its producer), unless ``keep``."""
    last_use: dict[int, int] = {}
    for i, (ins, outs) in enumerate(io):
        for x in ins:
            if x >= 0:
                last_use[x] = i
        for x in outs:
            if x >= 0 and x not in last_use:
                last_use[x] = i   # produced and never read: dies immediately
    frees_at: list[list[int]] = [[] for _ in io]
    for x, i in last_use.items():
        if x not in keep:
            frees_at[i].append(x)
    return [tuple(f) for f in frees_at]


def fast_loop(steps: Sequence[Step], n_slots: int) -> list[tuple[Any, ...]] | None:
    """:attr:`Program.fast` for ``steps``: None when a step runs subgraphs."""
    if any(st.has_subgraphs for st in steps):
        return None
    return [(st.call, st.ctx, st.in_slots, tuple(s if s >= 0 else n_slots for s in st.out_slots),
             st.frees) for st in steps]


def specialise(program: Program, folded: Folded,
               metas: Mapping[int, tuple[NodeMeta, Any]] | None = None) -> Program:
    """``program`` at one signature, the steps in ``folded`` removed.

    ``metas`` gives, by step index, the step's meta at this signature (its
    :attr:`NodeMeta.constants` hold the values folded here, which a kernel may read at run
    time through ``ctx.node``) and, for a promoted node, the kernel bound with it.

    The shared program is untouched (other signatures run it). The new one shares its
    slots, constants and ``env0`` (so weights placed later reach both). A remaining step
    that reads folded values takes them from the new program's :attr:`Program.folded`
    (:class:`~onnx_ep.core.folding.FoldedInputs`), never from the run's slots: a streaming
    run starts from no constants, and each signature has its own values for one slot.
    Liveness is recomputed over the remaining steps.
    """
    values: dict[int, Any] = {}
    kept: list[Step] = []
    for i, st in enumerate(program.steps):
        if i in folded.steps:
            continue
        if metas and i in metas and st.placed is not None and st.ctx is not None:
            meta, kernel = metas[i]
            st = attrs.evolve(st, ctx=ExecutionContext(meta, stream=st.ctx.stream,
                                                       provider=st.ctx.provider))
            if kernel is not None:
                st = attrs.evolve(st, call=kernel.execute_with_workspace,
                                  placed=attrs.evolve(st.placed, kernel=kernel, meta=meta))
        bound = tuple((j, s) for j, s in enumerate(st.in_slots) if s in folded.values)
        if bound:
            values.update((s, folded.values[s]) for _, s in bound)
            st = attrs.evolve(st, call=FoldedInputs(st.call, bound, values),
                              in_slots=tuple(-1 if s in folded.values else s
                                             for s in st.in_slots))
        kept.append(st)
    keep = (set(program.output_slots) | set(program.input_slots) | set(program.outer_slots)
            | {c for c, _ in program.constants})
    frees = dead_after([(st.in_slots + tuple(s for _, s in st.scope_slots), st.out_slots)
                        for st in kept], keep)
    steps = [attrs.evolve(st, frees=f) for st, f in zip(kept, frees)]
    return attrs.evolve(program, steps=steps, fast=fast_loop(steps, program.n_slots),
                        no_workspaces=[None] * len(steps),
                        no_prebound=[(None,) * len(st.out_slots) for st in steps],
                        io=None, folded=values)


@attrs.frozen
class ProgramIO:
    """Where a program's graph inputs are read and its outputs come from (for device I/O).

    :ivar host_read_inputs: positions of graph inputs some host step (or the output list)
        reads directly: a device feed for them must be copied to the host first.
    :ivar downloads: output position -> index of the step that copies it to the host.
    :ivar uploads: indices of the steps that copy a graph input to a device.
    """

    host_read_inputs: frozenset[int]
    downloads: dict[int, int]
    uploads: tuple[int, ...] = ()


def program_io(program: Program) -> ProgramIO:
    """The :class:`ProgramIO` of ``program`` (computed once, kept on the program)."""
    if program.io is not None:
        return program.io
    pos_of = {s: i for i, s in enumerate(program.input_slots)}
    host_read: set[int] = set()
    download_of: dict[int, int] = {}          # host slot -> the copy step that fills it
    uploads: list[int] = []
    for i, st in enumerate(program.steps):
        # a copy that reads an input is its upload (device-to-device for a device feed)
        if st.placed is not None and st.placed.device == "cpu":
            host_read.update(pos_of[s] for s in st.in_slots if s in pos_of)
        elif st.copy is not None and st.copy.to_host:
            download_of[st.out_slots[0]] = i
        elif st.copy is not None and st.in_slots[0] in pos_of:
            uploads.append(i)
    host_read.update(pos_of[s] for s in program.output_slots if s in pos_of)
    downloads = {pos: download_of[out] for pos, out in enumerate(program.output_slots)
                 if out in download_of}
    program.io = ProgramIO(frozenset(host_read), downloads, tuple(uploads))
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
    #: the steps folded away at this signature and their values (``core/folding.py``)
    folded: Folded = attrs.Factory(Folded)
    #: host steps whose outputs only the run can size, or that run unplanned subgraphs:
    #: metered by :class:`~onnx_ep.core.run_sizing.RunMeter` (set by the session)
    run_sized: frozenset[int] = frozenset()
    #: folded values device steps read, by slot, as host arrays: ``DeviceBinding.bind_plan``
    #: uploads them once into ``program.folded``
    device_constants: dict[int, np.ndarray] = attrs.Factory(dict)
    #: host nodes deferred at load whose device kernel accepts them at this signature
    promotable: tuple[str, ...] = ()
    #: promoted nodes whose device kernel declined them here after all, with the reason
    declined: dict[str, str] = attrs.Factory(dict)
    #: deferred nodes that run on their device at this signature
    promoted: tuple[str, ...] = ()
    #: device nodes sent back to the host at this signature, with the reason
    sent_back: dict[str, str] = attrs.Factory(dict)

    def nodes(self) -> dict[str, Any]:
        """Where this plan's nodes run: the count per provider (nodes folded away at this
        signature under ``folded``), the nodes promoted to their device here, and on a
        device session every node left on the host with why (the device's reason at load,
        or why this signature sent it back)."""
        by: dict[str, int] = {}
        why = {n: (op, r) for n, op, _, r in self.program.placement.fallbacks}
        host: list[dict[str, str]] = []
        for st in self.program.steps:
            p = st.placed
            if p is None:
                continue
            by[p.provider] = by.get(p.provider, 0) + 1
            name = p.node.name
            if p.device == HOST_DEVICE and (name in why or name in self.sent_back):
                op = f"{p.node.domain or 'ai.onnx'}::{p.node.op_type}"
                host.append({"node": name, "op": op, "provider": p.provider,
                             "reason": self.sent_back.get(name) or why[name][1]})
        return {"by_provider": by, "folded": sum(1 for n in self.folded.names
                                                  if not n.startswith("copy:")),
                "promoted": list(self.promoted), "host": host}

    def copies(self) -> dict[str, dict[str, int]]:
        """The copies between host and device a run of this plan makes, by direction
        (``host_to_device``, ``device_to_host``): count and bytes at this signature.

        Counted for host feeds and host fetches; IOBinding skips the fetches of outputs kept
        on the device, and device feeds are copied device-to-device instead.
        """
        name_of = {s: n for n, s in self.program.slot_of.items()}
        out = {"host_to_device": {"count": 0, "bytes": 0},
               "device_to_host": {"count": 0, "bytes": 0}}
        for st in self.program.steps:
            if st.copy is None:
                continue
            spec = self.specs.get(name_of.get(st.in_slots[0], ""))
            way = out["device_to_host" if st.copy.to_host else "host_to_device"]
            way["count"] += 1
            way["bytes"] += spec.nbytes if spec is not None and spec.is_static else 0
        return out


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
                   device: str | None = None, *,
                   host_kernels: HostKernels | None = None,
                   outer_known: Mapping[str, Any] | None = None) -> ExecutionPlan:
    """Fold what this signature fixes, size the rest, ask every remaining kernel its
    workspace; compute peaks and activation sizes.

    Steps whose values the signature alone decides are evaluated now and removed from this
    plan's program (:mod:`onnx_ep.core.folding`, :func:`specialise`); their values' specs
    are filled before the steps after them are sized, so a node reading a folded ``Range``
    is sized and stays on its device.

    :param host_kernels: host kernels to evaluate nodes placed on a device; without it only
        host-placed nodes, ``Shape`` / ``Size`` and copies fold.
    :param outer_known: for a control-flow body, the outer-scope values its caller's plan
        knows by value (read like initializers).
    """
    graph = program.graph
    folder = Folder(program, host_kernels, outer_known)
    per_step: list[WorkspaceRequirement] = []
    metas: dict[int, tuple[NodeMeta, Any]] = {}    # step -> its meta here, rebound kernel
    promotable: list[str] = []
    declined: dict[str, str] = {}
    for i, st in enumerate(program.steps):
        if st.placed is None:
            if st.copy is not None:                   # a copy keeps its source's spec
                specs[st.copy.dst] = specs.get(st.copy.src)
            if not folder.visit(i, st, specs):
                per_step.append(WorkspaceRequirement.NONE)
            continue
        if folder.visit(i, st, specs):
            continue
        placed = st.placed
        # the values this plan knows that the graph's initializers did not: what onnx
        # inference and the placement's meta could not see (a folded axes, a shape)
        known = {j: folder.known[s] for j, s in enumerate(st.in_slots)
                 if s >= 0 and s in folder.known
                 and placed.node.inputs[j] not in graph.initializers}
        # what a control-flow node's bodies read from here, where this plan knows the value
        scope_known = {n: folder.known[s] for n, s in st.scope_slots if s in folder.known}
        meta = node_meta(placed.node, graph, specs, known, scope_known)
        kernel = placed.kernel
        if placed.promoted:
            verdict = ask_supports(kernel, meta)
            if not verdict:
                declined[placed.node.name] = verdict.reason
                per_step.append(WorkspaceRequirement.NONE)
                continue
            kernel = bind_kernel(kernel, meta)
        if (any(o is None or not o.is_static for n, o in zip(meta.output_names, meta.outputs)
                if n) and all(s is not None and s.is_static
                              for n, s in zip(meta.input_names, meta.inputs) if n)):
            # onnx inference could not size these outputs: the kernel can, from sized inputs,
            # else onnx's inference of this node alone, now that its inputs are sized
            infer = getattr(kernel, "infer_outputs", None)
            got = list(infer(meta)) if infer is not None else []
            got += [None] * (len(meta.outputs) - len(got))
            if any(g is None for g in got):
                alone = infer_node(placed.node, meta.opset, meta.inputs, meta.constants)
                got = [g if g is not None else a for g, a in zip(got, alone)]
            for name, spec in zip(placed.node.outputs, got):
                if name and spec is not None and (specs.get(name) is None
                                                  or not specs[name].is_static):
                    specs[name] = spec
            meta = node_meta(placed.node, graph, specs, known, scope_known)
        if placed.deferred and not placed.promoted and ask_supports(placed.deferred_kernel,
                                                                  meta):
            promotable.append(placed.node.name)
        if known or scope_known or placed.promoted:
            metas[i] = (meta, kernel if placed.promoted else None)
        req = kernel.workspace_requirement(meta)
        if not isinstance(req, WorkspaceRequirement):
            raise KernelContractError(
                f"{kernel!r}.workspace_requirement() returned "
                f"{type(req).__name__}, expected WorkspaceRequirement")
        per_step.append(req)
    folded = folder.result()
    if folded.steps or metas:
        program = specialise(program, folded, metas)
    step_peak = session_peak = 0
    offsets: list[int] = []
    for req in per_step:
        offsets.append(session_peak)
        if req.lifetime is WorkspaceLifetime.SESSION_PERSISTENT:
            session_peak += align_up(req.nbytes, ARENA_ALIGNMENT)
        else:
            step_peak = max(step_peak, req.nbytes)
    return ExecutionPlan(signature, program, specs,
                         WorkspacePlan(tuple(per_step), step_peak, session_peak,
                                       tuple(offsets)),
                         plan_arena(program, specs, device), folded=folded,
                         device_constants={s: v for s, v in program.folded.items()
                                           if s in folded.device_slots},
                         promotable=tuple(promotable), declined=declined)


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
