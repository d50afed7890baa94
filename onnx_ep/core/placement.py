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
from onnx_ep.core.kernel import NodeMeta, Provider, TensorSpec
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


@attrs.define(eq=False)
class CopyStep:
    """Move ``src`` from device ``src_device`` to ``dst_device`` as value ``dst``."""

    src: str
    dst: str
    src_device: str
    dst_device: str
    provider: Provider


@attrs.define(eq=False)
class Placement:
    """Ordered steps (placed nodes and copies) of one graph."""

    steps: list[PlacedNode | CopyStep]
    #: final device of each graph output (copied back to the host by the executor)
    output_devices: dict[str, str]

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

    return NodeMeta(
        name=node.name, op_type=node.op_type, domain=node.domain,
        opset=graph.opset(node.domain), attrs=node.attrs,
        inputs=tuple(spec(n) for n in node.inputs),
        outputs=tuple(spec(n) for n in node.outputs),
        input_names=node.inputs, output_names=node.outputs)


def place(graph: Graph, registry: KernelRegistry, providers: Sequence[str]) -> Placement:
    """Choose a provider and kernel for every node of ``graph``.

    :raises NoKernelError: for a node no listed provider can run.
    """
    device_of: dict[str, str] = {}
    for v in graph.inputs:
        device_of[v.name] = HOST
    for name in graph.initializers:
        device_of[name] = HOST
    for name in graph.outer_names:
        device_of[name] = HOST
    steps: list[PlacedNode | CopyStep] = []
    copies: dict[tuple[str, str], str] = {}
    for node in graph.nodes:
        meta = node_meta(node, graph)
        sel = registry.select(meta, providers)
        prov = registry.providers[sel.provider]
        inputs = list(node.inputs)
        for i, name in enumerate(inputs):
            src_dev = device_of.get(name, HOST) if name else prov.device
            if name and src_dev != prov.device:
                key = (name, prov.device)
                if key not in copies:
                    dst = f"{name}@{prov.device}"
                    copy_provider = prov if prov.device != HOST else registry.providers[
                        _provider_on(registry, src_dev)]
                    steps.append(CopyStep(name, dst, src_dev, prov.device, copy_provider))
                    copies[key] = dst
                    device_of[dst] = prov.device
                inputs[i] = copies[key]
        kernel = bind_kernel(sel.kernel, meta)
        steps.append(PlacedNode(node, meta, sel.provider, prov.device, kernel, tuple(inputs)))
        for o in node.outputs:
            if o:
                device_of[o] = prov.device
    out_dev = {v.name: device_of.get(v.name, HOST) for v in graph.outputs}
    return Placement(steps, out_dev)


def _provider_on(registry: KernelRegistry, device: str) -> str:
    for p in registry.providers.values():
        if p.device == device:
            return p.name
    raise LookupError(device)
