"""Node -> provider, in the session's priority order, with copies at device boundaries.

Placement runs once per (sub)graph with the statically inferred types: a
provider's kernel may decline a node (``supports``), and the next provider in
the list is tried. Where a value produced on one device is read on another,
a :class:`CopyStep` is inserted and the consumer reads the copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from onnx_ep.core.graph import Graph, Node
from onnx_ep.core.kernel import NodeMeta, TensorSpec
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
    #: host values for ``node.implicit_inputs`` (subgraphs run on the host)
    implicit: tuple[str, ...] = ()


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

    @property
    def devices(self) -> set[str]:
        """Non-host devices any step runs on."""
        return {s.device for s in self.steps if isinstance(s, PlacedNode) and s.device != HOST}

    def count_by_provider(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.steps:
            if isinstance(s, PlacedNode):
                counts[s.provider] = counts.get(s.provider, 0) + 1
        return counts


def node_meta(node: Node, graph: Graph,
              specs: dict[str, TensorSpec | None] | None = None) -> NodeMeta:
    """The :class:`NodeMeta` of ``node`` with specs from ``specs`` or the graph's inferred types."""
    def spec(name: str) -> TensorSpec | None:
        if not name:
            return None
        if specs is not None and name in specs:
            return specs[name]
        if name in graph.initializers:
            arr = graph.initializers[name]
            return TensorSpec(arr.dtype, arr.shape)
        v = graph.values.get(name)
        return v.spec if v is not None else None

    inits = graph.initializers
    return NodeMeta(
        name=node.name, op_type=node.op_type, domain=node.domain,
        opset=graph.opset(node.domain), attrs=node.attrs,
        constants={i: inits[n] for i, n in enumerate(node.inputs) if n and n in inits},
        inputs=tuple(spec(n) for n in node.inputs),
        outputs=tuple(spec(n) for n in node.outputs),
        input_names=node.inputs, output_names=node.outputs)


def place(graph: Graph, registry: KernelRegistry, providers: Sequence[str],
          host_only: frozenset[str] = frozenset()) -> Placement:
    """Choose a provider and kernel for every node of ``graph``.

    :param host_only: names of nodes that must run on a host provider (the planner
        sends back nodes a device cannot size at some shape signature).
    :raises NoKernelError: for a node no listed provider can run.
    """
    host_providers = [p for p in providers if registry.providers[p].device == HOST]
    # the provider whose runtime copies to and from each device: the first one listed
    device_provider: dict[str, Provider] = {}
    for p in providers:
        device_provider.setdefault(registry.providers[p].device, registry.providers[p])
    device_of: dict[str, str] = {}
    for name in (*[v.name for v in graph.inputs], *graph.initializers, *graph.outer_names):
        device_of[name] = HOST
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

    for node in graph.nodes:
        meta = node_meta(node, graph)
        sel = registry.select(meta, host_providers if node.name in host_only else providers)
        prov = registry.providers[sel.provider]
        inputs = tuple(on(n, prov.device) for n in node.inputs)
        # subgraphs run on the host, so the values they read from this scope must be there
        implicit = tuple(on(n, HOST) for n in node.implicit_inputs)
        kernel = bind_kernel(sel.kernel, meta)
        declined = [(p, why) for p, why in sel.passed_over
                    if registry.providers[p].device != HOST]
        if prov.device == HOST and declined:
            fallbacks.append((node.name, f"{node.domain or 'ai.onnx'}::{node.op_type}",
                              sel.provider, "; ".join(f"{p}: {why}" for p, why in declined)))
        steps.append(PlacedNode(node, meta, sel.provider, prov.device, kernel, inputs,
                                implicit))
        for o in node.outputs:
            if o:
                device_of[o] = prov.device
    outputs = {v.name: on(v.name, HOST) for v in graph.outputs}
    return Placement(feeds + steps, uploads, outputs, fallbacks)
