"""Values whose size only the run knows, kept on the device: a region planned per size.

A device pre-binds every buffer of a plan, so a node whose output size depends on input
*values* (``NonZero``: how many elements are non-zero) cannot be planned like the rest.
A device kernel that can still run such a node declares ``sizes_at_run = True``: it writes
into scratch sized for the worst case, reads the actual size back once, and hands out
views of the size it found (its outputs are not pre-bound).

Everything that depends on those values then has sizes the plan cannot know either. When
the session is loaded on a device, :func:`isolate_sized` moves those nodes (the node's
*cone*: every later node that reads, directly or through others, one of its outputs) into
the body of one ``onnx_ep::SizedRegion`` node fed with the run-sized values. The region
is a device control-flow node (:class:`~onnx_ep.core.control_flow.SizedRegion`): its body
is planned, admitted and bound per size it meets (:mod:`onnx_ep.core.subgraphs`), on the
device, so the values never go through the host; only the size is read back.

By construction a cone's values are read outside it only as graph outputs, so the
region's outputs are graph outputs; they too are sized by the run (views of the body
plan's arena, downloaded or copied out by the session at the end of the run).

The two kernel attributes the planner reads (:func:`~onnx_ep.core.settling.unsized_device_steps`,
:meth:`~onnx_ep.core.device_binding.DeviceBinding.bind_plan`):

- ``sizes_at_run = True``: the kernel's outputs are not pre-bound; it sets them itself;
- ``reads_run_sized = True``: the kernel takes inputs of sizes the plan does not know (a
  region's feeds).

A region's body is planned when its size is first met, during a run: its bytes are
admitted then (a refusal is the run's typed error, the session stays usable), and at most
:data:`~onnx_ep.core.subgraphs.PLANS_PER_BODY` plans of one body are kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from onnx_ep.core.graph import Graph, Node, Value
from onnx_ep.core.placement import HOST, node_meta
from onnx_ep.core.registry import KernelRegistry
from onnx_ep.errors import NoKernelError

#: the op of the region nodes :func:`isolate_sized` makes
REGION_DOMAIN, REGION_OP = "onnx_ep", "SizedRegion"


def sizes_at_run(node: Node, graph: Graph, registry: KernelRegistry,
                 providers: Sequence[str]) -> bool:
    """Whether the provider that will run ``node`` is a device one whose kernel sizes its
    outputs at run time (``sizes_at_run``)."""
    # the registry's lookup first: only an op some device kernel sizes at run time is worth
    # a whole selection (every provider's supports()) at load
    opset = graph.opset(node.domain)
    if not any(getattr(getattr(registry.kernel_for(p, node.domain, node.op_type, opset),
                               "kernel", None), "sizes_at_run", False)
               for p in providers if registry.providers[p].device != HOST):
        return False
    try:
        sel = registry.select(node_meta(node, graph), providers)
    except NoKernelError:
        return False                # placement reports it, with every provider's reason
    return (registry.providers[sel.provider].device != HOST
            and bool(getattr(sel.kernel, "sizes_at_run", False)))


def isolate_sized(graph: Graph, registry: KernelRegistry, providers: Sequence[str]) -> Graph:
    """``graph`` with the cone of each run-sized device node moved into a region node.

    Returns ``graph`` itself when no node sizes its outputs at run time, or when no region
    provider kernel is registered for the device (the cone then runs where the planner
    can size it, on the host).
    """
    if not any(registry.providers[p].device != HOST for p in providers):
        return graph
    i = 0
    while i < len(graph.nodes):
        node = graph.nodes[i]
        i += 1
        if (node.subgraphs or (node.domain, node.op_type) == (REGION_DOMAIN, REGION_OP)
                or not sizes_at_run(node, graph, registry, providers)):
            continue
        region = _region(graph, i - 1)
        if region is None:
            continue
        rest, sized = region
        try:
            sel = registry.select(node_meta(sized, graph), providers)
        except NoKernelError:
            sel = None
        if sel is None or registry.providers[sel.provider].device == HOST:
            return graph            # no device region kernel: leave the cone to the planner
        # the region goes last (its outputs are graph outputs only); the scan goes on with
        # the nodes left outside it
        graph = attrs.evolve(graph, nodes=rest + [sized])
    return graph


def _region(graph: Graph, at: int) -> tuple[list[Node], Node] | None:
    """The nodes left outside, and the region node holding the cone of ``graph.nodes[at]``;
    None when no later node reads its outputs."""
    source = graph.nodes[at]
    tainted = {o for o in source.outputs if o}
    cone: list[Node] = []
    rest = list(graph.nodes[:at + 1])
    for node in graph.nodes[at + 1:]:
        if any(n in tainted for n in (*node.inputs, *node.implicit_inputs)):
            cone.append(node)
            tainted.update(o for o in node.outputs if o)
        else:
            rest.append(node)
    if not cone:
        return None
    produced = {o for n in cone for o in n.outputs if o}
    feeds = [o for o in source.outputs
             if o and any(o in (*n.inputs, *n.implicit_inputs) for n in cone)]
    outer: list[str] = []
    for n in cone:
        for name in (*n.inputs, *n.implicit_inputs):
            if name and name not in produced and name not in feeds and name not in outer:
                outer.append(name)
    outputs = [v.name for v in graph.outputs if v.name in produced]
    values = {k: v for k, v in graph.values.items()
              if k in produced or k in feeds or k in outer}

    declared = {v.name: v for v in graph.outputs}

    def value(name: str) -> Value:
        # run-sized values are tensors even where inference gave them no type
        return declared.get(name) or graph.values.get(name) or Value(name, "tensor")

    # the body keeps no initializer of its own: it reads the caller's, like a branch
    body = Graph(f"{source.name}/region", cone, [value(n) for n in feeds],
                 [value(n) for n in outputs], {}, values, graph.opsets, tuple(outer))
    sized = Node(f"{source.name}/region", REGION_OP, REGION_DOMAIN, tuple(feeds),
                 tuple(outputs), {"body": body}, implicit_inputs=tuple(outer))
    return rest, sized
