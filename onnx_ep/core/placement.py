"""Node -> provider, in the session's priority order, with copies at device boundaries.

Placement runs once per (sub)graph with the statically inferred types: a
provider's kernel may decline a node (``supports``), and the next provider in
the list is tried. Where a value produced on one device is read on another,
a :class:`CopyStep` is inserted and the consumer reads the copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from onnx_ep.core.graph import Graph, Node
from onnx_ep.core.kernel import NodeMeta, TensorSpec
from onnx_ep.core.memory import DeviceMemoryAuthority, Reservation, Role, authority_for
from onnx_ep.core.provider import Provider
from onnx_ep.core.registry import KernelRegistry, bind_kernel

HOST = "cpu"


@attrs.define(eq=False)
class PlacedNode:
    """A node with the provider and bound kernel that will run it.

    ``inputs`` may differ from ``node.inputs`` where a copy was inserted.
    """

    node: Node
    meta: NodeMeta
    provider: str
    device: str
    kernel: Any
    inputs: tuple[str, ...]
    #: the values for ``node.implicit_inputs`` (the outer-scope values its subgraphs read),
    #: on the node's device: a device control-flow kernel runs its bodies there
    implicit: tuple[str, ...] = ()
    #: a device provider whose kernel declined this node at load while its meta was
    #: incomplete (a rank, size or plan-time value unknown): the planner asks it again at
    #: each signature, with that signature's specs and folded values (:func:`undecided`)
    deferred: str = ""
    #: that provider's (unbound) kernel for the node
    deferred_kernel: Any = None
    #: placed on ``deferred``'s device at one signature after it accepted there: ``kernel``
    #: is unbound here; the planner binds it with the signature's meta
    promoted: bool = False


@attrs.define(eq=False)
class CopyStep:
    """Move ``src`` from device ``src_device`` to ``dst_device`` as value ``dst``.

    ``provider`` is the device provider on the non-host side; its runtime copies.
    """

    src: str
    dst: str
    src_device: str
    dst_device: str
    provider: Provider

    @property
    def to_host(self) -> bool:
        return self.dst_device == HOST


@attrs.define(eq=False)
class Placement:
    """Ordered steps (placed nodes and copies) of one graph.

    :ivar uploads: initializers read on a device: uploaded once per session, not per run.
    :ivar outputs: graph output name -> the value holding it on the host.
    """

    steps: list[PlacedNode | CopyStep]
    uploads: list[CopyStep] = attrs.Factory(list)
    outputs: dict[str, str] = attrs.Factory(dict)
    #: ``(node, op, host provider, why the device providers declined)`` for each node a
    #: device provider listed first could not run (onnxruntime's CPU fallback)
    fallbacks: list[tuple[str, str, str, str]] = attrs.Factory(list)
    #: devices of the providers that deferred nodes may be promoted to at a signature
    deferred_to: set[str] = attrs.Factory(set)

    @property
    def devices(self) -> set[str]:
        """Non-host devices any step runs on, or may run on once a signature is planned."""
        return {s.device for s in self.steps
                if isinstance(s, PlacedNode) and s.device != HOST} | self.deferred_to

    def count_by_provider(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.steps:
            if isinstance(s, PlacedNode):
                counts[s.provider] = counts.get(s.provider, 0) + 1
        return counts


def value_spec(name: str, graph: Graph,
               specs: Mapping[str, TensorSpec | None] | None = None) -> TensorSpec | None:
    """The spec of value ``name``: from ``specs`` (a plan's), else the initializer's, else
    the graph's inferred type."""
    if specs is not None and name in specs:
        return specs[name]
    if name in graph.initializers:
        arr = graph.initializers[name]
        return TensorSpec(arr.dtype, arr.shape)
    v = graph.values.get(name)
    return v.spec if v is not None else None


def node_meta(node: Node, graph: Graph,
              specs: Mapping[str, TensorSpec | None] | None = None,
              known: Mapping[int, Any] | None = None,
              outer_known: Mapping[str, Any] | None = None) -> NodeMeta:
    """The :class:`NodeMeta` of ``node`` with specs from ``specs`` or the graph's inferred types.

    :param known: host values of inputs, by position, that the plan knows beyond the
        initializers (folded at one signature); they join :attr:`NodeMeta.constants`.
    :param outer_known: host values the plan knows by name beyond ``graph``'s initializers:
        the outer-scope values a body reads, or a control-flow node's subgraphs read
        (:attr:`NodeMeta.outer_constants`).
    """
    def spec(name: str) -> TensorSpec | None:
        return value_spec(name, graph, specs) if name else None

    inits = graph.initializers
    constants = {i: inits[n] for i, n in enumerate(node.inputs) if n and n in inits}
    outer_known = outer_known or {}
    constants.update((i, outer_known[n]) for i, n in enumerate(node.inputs)
                     if n and n not in inits and n in outer_known)
    if known:
        constants.update((i, v) for i, v in known.items() if i < len(node.inputs))
    return NodeMeta(
        name=node.name, op_type=node.op_type, domain=node.domain,
        opset=graph.opset(node.domain), attrs=node.attrs, constants=constants,
        inputs=tuple(spec(n) for n in node.inputs),
        outputs=tuple(spec(n) for n in node.outputs),
        input_names=node.inputs, output_names=node.outputs,
        outer={n: spec(n) for n in node.implicit_inputs},
        outer_constants={n: outer_known[n] for n in node.implicit_inputs if n in outer_known})


def plan_known(graph: Graph) -> frozenset[str]:
    """Values a plan may know by value at a shape signature: initializers, ``Constant``
    outputs, ``Shape`` / ``Size`` outputs and what foldable ops compute from those alone.

    A prediction made at load, without shapes: the planner's folding decides at each
    signature (:mod:`onnx_ep.core.folding`); a kernel that needs such a value is asked again
    there with the value in :attr:`NodeMeta.constants`.
    """
    from onnx_ep.core.folding import FOLDABLE
    known = set(graph.initializers)
    for node in graph.nodes:
        if node.subgraphs or node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in ("Constant", "Shape", "Size") or (
                node.op_type in FOLDABLE and all(not n or n in known for n in node.inputs)):
            known.update(o for o in node.outputs if o)
    return frozenset(known)


def undecided(meta: NodeMeta, known: frozenset[str] = frozenset()) -> bool:
    """True when a kernel's answer for ``meta`` could change once a signature is planned: an
    input or output has no spec or a symbolic dim, or an input's value is not a constant
    yet but may be known then (``known``, see :func:`plan_known`)."""
    for i, (name, spec) in enumerate(zip(meta.input_names, meta.inputs)):
        if name and (spec is None or not spec.is_static
                     or (i not in meta.constants and name in known)):
            return True
    return any(name and (spec is None or not spec.is_static)
               for name, spec in zip(meta.output_names, meta.outputs))


def place(graph: Graph, registry: KernelRegistry, providers: Sequence[str],
          host_only: frozenset[str] = frozenset(),
          promoted: frozenset[str] = frozenset(), *,
          outer_device: str = HOST, outputs_device: str = HOST,
          outer_specs: Mapping[str, TensorSpec | None] | None = None,
          outer_known: Mapping[str, Any] | None = None) -> Placement:
    """Choose a provider and kernel for every node of ``graph``.

    :param host_only: names of nodes that must run on a host provider (the planner
        sends back nodes a device cannot size at some shape signature).
    :param promoted: names of deferred nodes (:attr:`PlacedNode.deferred`) whose device
        kernel accepted them at some signature: they go to that device, unbound.
    :param outer_device: where the outer-scope values a subgraph reads live (a body run by
        a device control-flow kernel reads them where its caller's plan holds them).
    :param outputs_device: where the graph's outputs are delivered (a device body hands
        its outputs to its control-flow kernel on the device).
    :param outer_specs, outer_known: the specs and the known host values of the outer-scope
        values a body reads, so its kernels are asked with them.
    :raises NoKernelError: for a node no listed provider can run.
    """
    host_providers = [p for p in providers if registry.providers[p].device == HOST]
    # the provider whose runtime copies to and from each device: the first one listed
    device_provider: dict[str, Provider] = {}
    for p in providers:
        device_provider.setdefault(registry.providers[p].device, registry.providers[p])
    device_of: dict[str, str] = {}
    for name in (*[v.name for v in graph.inputs], *graph.initializers):
        device_of[name] = HOST
    for name in graph.outer_names:
        device_of[name] = outer_device
    steps: list[PlacedNode | CopyStep] = []
    uploads: list[CopyStep] = []
    fallbacks: list[tuple[str, str, str, str]] = []
    # a feed's copy to a device goes first: the plan's input slots are filled before any
    # kernel runs, so no copy splits the device steps into several capture segments
    feeds: list[PlacedNode | CopyStep] = []
    graph_inputs = {v.name for v in graph.inputs}
    copies: dict[tuple[str, str], str] = {}

    def on(name: str, device: str) -> str:
        """The name of ``name``'s value on ``device``, adding a copy the first time."""
        src_dev = device_of.get(name, HOST)
        if not name or src_dev == device:
            return name
        key = (name, device)
        if key not in copies:
            dst = f"{name}@{device}"
            copy = CopyStep(name, dst, src_dev, device,
                            device_provider[device if device != HOST else src_dev])
            (uploads if name in graph.initializers
             else feeds if name in graph_inputs else steps).append(copy)
            copies[key] = dst
            device_of[dst] = device
        return copies[key]

    known = plan_known(graph) if host_providers else frozenset()
    for node in graph.nodes:
        meta = node_meta(node, graph, outer_specs, None, outer_known)
        sel = registry.select(meta, host_providers if node.name in host_only else providers)
        declined = [(p, why) for p, why in sel.passed_over
                    if registry.providers[p].device != HOST]
        on_host = registry.providers[sel.provider].device == HOST
        # a device kernel that declined with part of the meta unknown is asked again per
        # signature; only where a host provider can run the node meanwhile (a strict,
        # device-only session still refuses at load)
        deferred = next((p for p, why in declined if why.startswith("rejected:")), "") if (
            on_host and declined and not node.subgraphs and node.name not in host_only
            and undecided(meta, known)) else ""
        entry = registry.kernel_for(deferred, meta.domain, meta.op_type, meta.opset) \
            if deferred else None
        if entry is not None and node.name in promoted:
            provider, kernel = deferred, entry.kernel
        else:
            provider = sel.provider
            kernel = bind_kernel(sel.kernel, meta)
        prov = registry.providers[provider]
        inputs = tuple(on(n, prov.device) for n in node.inputs)
        # the node's subgraphs run where the node does: the values they read from this
        # scope must be there
        implicit = tuple(on(n, prov.device) for n in node.implicit_inputs)
        if prov.device == HOST and declined:      # (a promoted node is not on the host)
            fallbacks.append((node.name, f"{node.domain or 'ai.onnx'}::{node.op_type}",
                              sel.provider, "; ".join(f"{p}: {why}" for p, why in declined)
                              + (" (asked again at each signature)" if deferred else "")))
        steps.append(PlacedNode(node, meta, provider, prov.device, kernel, inputs,
                                implicit, deferred=deferred,
                                deferred_kernel=entry.kernel if entry is not None else None,
                                promoted=provider != sel.provider))
        for o in node.outputs:
            if o:
                device_of[o] = prov.device
    outputs = {v.name: on(v.name, outputs_device) for v in graph.outputs}
    deferred_to = {registry.providers[s.deferred].device for s in steps
                   if isinstance(s, PlacedNode) and s.deferred}
    return Placement(feeds + steps, uploads, outputs, fallbacks, deferred_to)



def reserve_prepared(placements: Iterable[Placement], authority: DeviceMemoryAuthority,
                     holder: str, undo: Sequence[Reservation] = ()) -> list[Reservation]:
    """Reserve under ``Role.WEIGHTS`` for ``holder`` what the placed runners derived from
    constants at bind (their optional ``prepared_nbytes()``,
    :class:`~onnx_ep.core.kernel.Prepares`): a device's bytes on ``authority`` (the
    session's), host bytes there too when it is the host's, else on the host's ledger.

    :param undo: reservations to release as well when one of these is refused, so that a
        session failing to load keeps nothing.
    """
    by_device: dict[str, int] = {}
    for placement in placements:
        for s in placement.steps:
            fn = getattr(s.kernel, "prepared_nbytes", None) \
                if isinstance(s, PlacedNode) else None
            n = int(fn()) if fn is not None else 0
            if n:
                by_device[s.device] = by_device.get(s.device, 0) + n
    out: list[Reservation] = []
    try:
        for dev, nbytes in by_device.items():
            ledger = authority if dev != HOST or authority.device == HOST \
                else authority_for(HOST)
            out.append(ledger.reserve(nbytes, Role.WEIGHTS, holder))
    except BaseException:
        for r in [*out, *undo]:
            r.release()
        raise
    return out
