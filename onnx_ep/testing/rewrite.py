"""Model rewrites for the parity harness, done on copies and from outside the core.

- :func:`expose_intermediates`: every node output becomes a graph output, so one run
  returns every value the graph computes (per-node comparison without executor hooks).
- :func:`isolate_node`: a one-node model whose inputs are fed from the reference's
  values, so a node is judged on its own error, not its producers'.
- :func:`single_node_model`: a model around a bare ``NodeProto`` and its feeds (the
  pytest fixture's ``parity(node, feeds)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper

from onnx_ep.core.dtypes import onnx_elem_type

#: IR version of models built around a bare node (read by onnx 1.16+ and onnxruntime 1.17+)
NODE_MODEL_IR_VERSION = 9


def expose_intermediates(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose graph outputs are its own, then every other node output.

    Added outputs carry the type of a ``value_info`` entry when the model has one, else
    no type (onnx-ep infers it).
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    known = {vi.name: vi for vi in g.value_info}
    seen = {o.name for o in g.output} | {i.name for i in g.input} | {
        t.name for t in g.initializer}
    for node in g.node:
        for name in node.output:
            if not name or name in seen:
                continue
            seen.add(name)
            vi = known.get(name)
            if vi is not None:
                g.output.append(vi)
            else:
                g.output.append(helper.make_empty_tensor_value_info(name))
    return m


def node_protos_by_outputs(model: onnx.ModelProto) -> dict[tuple[str, ...], onnx.NodeProto]:
    """Top-level nodes of ``model`` keyed by their output names (unique in a valid model)."""
    return {tuple(n.output): n for n in model.graph.node}


def isolate_node(model: onnx.ModelProto, node: onnx.NodeProto, reads: tuple[str, ...],
                 values: Mapping[str, Any]) -> onnx.ModelProto | None:
    """A model running only ``node`` of ``model``, its inputs fed by name.

    :param reads: the names the node reads, explicit and from its subgraphs' outer scope.
    :param values: a value for every name in ``reads`` that is not an initializer.
    :returns: the model, or ``None`` when an input is not a tensor (sequences, maps,
        optionals cannot be described from a value alone).
    """
    inits = {t.name: t for t in model.graph.initializer}
    graph_inputs = []
    initializers = []
    for name in dict.fromkeys(n for n in reads if n):
        if name in inits:
            initializers.append(inits[name])
            continue
        value = values.get(name)
        if not isinstance(value, np.ndarray):
            return None
        graph_inputs.append(helper.make_tensor_value_info(
            name, onnx_elem_type(value.dtype), list(value.shape)))
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], f"isolated_{node.name or node.op_type}", graph_inputs,
                              outputs, initializer=initializers)
    m = helper.make_model(graph, opset_imports=list(model.opset_import),
                          ir_version=model.ir_version)
    m.functions.extend(model.functions)
    return m


def single_node_model(node: onnx.NodeProto, feeds: Mapping[str, Any], *,
                      opset: int | None = None,
                      initializers: Mapping[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """A model whose one node is ``node``; its inputs typed from ``feeds`` (or ``initializers``).

    :param opset: ai.onnx opset to import (default: the newest the installed onnx knows).
        A node in another domain also imports that domain at version 1.
    :raises ValueError: a node input that is neither fed nor an initializer.
    """
    inits = dict(initializers or {})
    graph_inputs = []
    for name in dict.fromkeys(n for n in node.input if n):
        if name in inits:
            continue
        if name not in feeds:
            raise ValueError(f"node {node.name or node.op_type!r} reads {name!r}, which is "
                             f"neither in feeds nor in initializers")
        value = np.asarray(feeds[name])
        graph_inputs.append(helper.make_tensor_value_info(
            name, onnx_elem_type(value.dtype), list(value.shape)))
    graph = helper.make_graph(
        [node], f"{node.op_type}_parity", graph_inputs,
        [helper.make_empty_tensor_value_info(o) for o in node.output if o],
        initializer=[onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    imports = [helper.make_opsetid("", opset or onnx.defs.onnx_opset_version())]
    if node.domain not in ("", "ai.onnx"):
        imports.append(helper.make_opsetid(node.domain, 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=NODE_MODEL_IR_VERSION)
