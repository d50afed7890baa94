"""ONNX model -> Graph / Node / Value: topological order, types and shapes, subgraphs.

Shapes come from onnx's shape inference (with data propagation); dims are ints,
symbolic names (``str``, resolved at run time from the feeds) or ``None``.
Subgraphs of ``If`` / ``Loop`` / ``Scan`` become nested :class:`Graph` objects;
the names they read from the enclosing scope are the node's ``implicit_inputs``,
so ordering and liveness account for them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import onnx
from onnx import numpy_helper

from onnx_ep.core.dtypes import np_dtype, onnx_elem_type, type_string
from onnx_ep.core.kernel import TensorSpec
from onnx_ep.errors import ModelError

#: the newest opset of ai.onnx the installed onnx package defines
MAX_ONNX_OPSET = onnx.defs.onnx_opset_version()


@attrs.define
class Value:
    """A named value: graph input/output or an intermediate.

    :ivar kind: ``"tensor"``, ``"sequence"``, ``"optional"``, ``"map"`` or ``"unknown"``.
    :ivar spec: dtype and shape for tensors when known.
    :ivar type_str: onnxruntime-style type string (``tensor(float)``).
    """

    name: str
    kind: str = "unknown"
    spec: TensorSpec | None = None
    type_str: str = ""
    elem_type: int = 0


@attrs.define(eq=False)
class Node:
    """One node. ``inputs`` holds ``""`` for a missing optional input."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    implicit_inputs: tuple[str, ...] = ()
    #: the model's NodeProto (None for nodes made by a rewrite such as fusion): onnx's
    #: inference of this one node at a plan's sizes (:func:`infer_node`)
    proto: onnx.NodeProto | None = None

    @property
    def subgraphs(self) -> list[Graph]:
        out: list[Graph] = []
        for v in self.attrs.values():
            if isinstance(v, Graph):
                out.append(v)
            elif isinstance(v, list) and v and isinstance(v[0], Graph):
                out.extend(v)
        return out


@attrs.define(eq=False)
class Graph:
    """A (sub)graph in topological order.

    :ivar inputs: graph inputs that are not initializers.
    :ivar initializers: weights as numpy arrays.
    :ivar values: every value with known type info, by name.
    :ivar opsets: opset version per domain (``""`` for ai.onnx).
    :ivar outer_names: names a subgraph reads from its enclosing scope.
    :ivar overridable: initializers the model also lists as graph inputs (IR >= 4), by
        name: each is the last of ``inputs`` and this value is fed when a run omits it
        (onnxruntime's overridable initializers), so nothing folds it as a constant.
    """

    name: str
    nodes: list[Node]
    inputs: list[Value]
    outputs: list[Value]
    initializers: dict[str, np.ndarray]
    values: dict[str, Value]
    opsets: dict[str, int]
    outer_names: tuple[str, ...] = ()
    overridable: dict[str, np.ndarray] = attrs.Factory(dict)

    @property
    def weight_bytes(self) -> int:
        return sum(int(a.nbytes) for a in self.initializers.values())

    def opset(self, domain: str) -> int:
        return self.opsets.get(domain, 1)


# ------------------------------------------------------------------ loading


def load_model(model: str | os.PathLike[str] | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """Read a model from a path (external data included), bytes or a ModelProto."""
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, (bytes, bytearray, memoryview)):
            proto = onnx.ModelProto()
            proto.ParseFromString(bytes(model))
            return proto
        path = os.fspath(model)
        if not os.path.exists(path):
            raise ModelError(f"model file {path!r} does not exist")
        return onnx.load(path)
    except ModelError:
        raise
    except Exception as exc:  # protobuf DecodeError, truncated files, bad external data
        what = "model bytes" if isinstance(model, (bytes, bytearray, memoryview)) else repr(model)
        raise ModelError(f"cannot parse {what} as an ONNX model ({type(exc).__name__}: {exc}); "
                         f"is the file truncated or not an .onnx file?") from exc


def build_graph(model: onnx.ModelProto, light: onnx.ModelProto | None = None) -> Graph:
    """Validate ``model`` and convert it into a :class:`Graph` with inferred types.

    Inference runs on the light copy (:func:`light_model_for_inference`), so a model with
    gigabytes of weights is never serialized for it; the weights come from ``model``.
    """
    if not model.HasField("graph"):
        raise ModelError("model has no graph; is it an ONNX ModelProto?")
    if model.ir_version > onnx.IR_VERSION:
        raise ModelError(f"model IR version {model.ir_version} is newer than the installed "
                         f"onnx {onnx.__version__} knows ({onnx.IR_VERSION})")
    opsets = _opsets(model)
    if light is None:
        light = light_model_for_inference(model)
    inferred = infer(light, check=True)
    _unique_initializers(model.graph.name, model.graph.initializer)
    weights = {t.name: t for t in model.graph.initializer}
    graph = _convert_graph(inferred.graph, opsets, outer=frozenset(), top=True, weights=weights)
    if model.ir_version >= 4:       # before IR 4 every initializer had to be an input too
        declared = {vi.name for vi in model.graph.input}
        names = [n for n in graph.initializers if n in declared]
        graph.overridable = {n: graph.initializers.pop(n) for n in names}
        graph.inputs += [graph.values[n] for n in names]
    return graph


def _unique_initializers(graph: str, tensors: Sequence[onnx.TensorProto]) -> None:
    """Two initializers of one name are refused (silently, the last would win)."""
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise ModelError(f"graph {graph!r}: initializer {t.name!r} is defined twice")
        seen.add(t.name)


def _check_attributes(node: onnx.NodeProto, opsets: dict[str, int]) -> None:
    """An attribute a standard op's schema does not define, or a required one missing, is
    refused (onnxruntime does)."""
    if node.domain not in ("", "ai.onnx"):
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get("", 1), "")
    except Exception:  # noqa: BLE001 - an unknown op is placement's to report
        return
    given = {a.name for a in node.attribute}
    unknown = sorted(given - set(schema.attributes))
    if unknown:
        raise ModelError(f"node {node.name or node.op_type!r}: {node.op_type} (opset "
                         f"{schema.since_version}) has no attribute {unknown[0]!r}; it takes "
                         f"{', '.join(sorted(schema.attributes)) or 'none'}")
    missing = sorted(k for k, a in schema.attributes.items() if a.required and k not in given)
    if missing:
        raise ModelError(f"node {node.name or node.op_type!r}: {node.op_type} (opset "
                         f"{schema.since_version}) requires attribute {missing[0]!r}")


#: the domains whose nodes onnx's checker validates at load; other domains' nodes are their
#: kernels' to judge (contrib and custom ops)
CHECKED_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training")


#: what onnx's checker refuses in a node and onnxruntime runs: an op whose schema onnx
#: marks deprecated at the model's opset (GroupNormalization-18), and an op onnx does not
#: define in the default domain (onnxruntime's contrib ops there, such as
#: SimplifiedLayerNormalization: whether a provider runs it is placement's to say)
CHECKER_TOLERATES = ("is deprecated in domain_version", "No Op registered for")


def _check_node(node: onnx.NodeProto, opsets: dict[str, int]) -> None:
    """onnx's checker on one standard node: its op exists at the model's opset, its input
    and output counts, attribute names, types and required ones. Nodes that hold subgraphs
    are left to their bodies' own nodes (checked as those graphs are converted); onnx's
    whole-model checker also refuses models onnxruntime runs (graph outputs without a
    shape, nodes out of topological order), so it is not run as a whole."""
    if node.domain not in CHECKED_DOMAINS or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in node.attribute):
        return
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = onnx.IR_VERSION
    ctx.opset_imports = {("" if d == "ai.onnx" else d): v for d, v in opsets.items()}
    try:
        onnx.checker.check_node(node, ctx)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        if any(p in first for p in CHECKER_TOLERATES):
            return
        raise ModelError(f"node {node.name or node.op_type!r} ({node.op_type}): onnx's "
                         f"checker refuses it: {first}") from exc


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for imp in model.opset_import:
        dom = "" if imp.domain in ("", "ai.onnx") else imp.domain
        opsets[dom] = int(imp.version)
    if "" not in opsets and model.ir_version >= 3:
        # IR >= 3 requires an explicit opset import for the default domain when it is used
        if any(n.domain in ("", "ai.onnx") for n in model.graph.node):
            raise ModelError("model uses ai.onnx operators but declares no opset_import "
                             "for the default domain")
    ver = opsets.get("")
    if ver is not None and not 1 <= ver <= MAX_ONNX_OPSET:
        raise ModelError(f"unknown ai.onnx opset {ver}: the installed onnx "
                         f"{onnx.__version__} knows opsets 1..{MAX_ONNX_OPSET}")
    return opsets


#: data propagation evaluates 1-D tensors element by element (it is meant for shape
#: arithmetic); above this many elements a 1-D graph input makes it take minutes
DATA_PROP_MAX_1D = 4096


def infer(model: onnx.ModelProto, *, check: bool = False) -> onnx.ModelProto:
    """onnx shape inference; data propagation on unless a long 1-D input would make it slow.

    :param check: refuse a model whose declared types or shapes onnx's inference contradicts
        (its strict mode; the model is then inferred leniently when strict mode failed for
        another reason, such as an op it cannot infer).
    :raises ModelError: with ``check``, a declared type that inference contradicts.
    """
    data_prop = all(_short_or_not_1d(vi.type) for vi in model.graph.input)
    if check:
        try:
            return onnx.shape_inference.infer_shapes(model, strict_mode=True,
                                                     data_prop=data_prop)
        except Exception as exc:
            msg = str(exc)
            # a value declared (graph output, value_info) unlike what its producer makes;
            # an op whose inputs disagree is left to its kernel's typed error at run time
            if ("Inferred elem type differs from existing" in msg
                    or "Inferred shape and existing shape differ" in msg):
                hintless = _without_contradicted_hints(model, data_prop)
                if hintless is not None:
                    return infer(hintless, check=True)
                what = msg.split("Inference error(s): ", 1)[-1].strip().splitlines()[0]
                raise ModelError(f"a declared type or shape contradicts onnx's shape "
                                 f"inference: {what}") from exc
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=data_prop)
    except Exception:
        # inference is advisory (custom domains, partial models); kernels see real shapes
        return model


def infer_node(node: Node, opset: int, inputs: Sequence[TensorSpec | None],
               known: Mapping[int, np.ndarray]) -> list[TensorSpec | None]:
    """onnx's inference of one standard node from its inputs' specs and the input values a
    plan knows (``known``, by position): its outputs' specs, ``None`` where onnx could not
    size one. For a node whose inputs whole-model inference left untyped (after a custom op,
    or a shape computed at run time) once a plan has sized them."""
    if node.proto is None or node.domain not in ("", "ai.onnx") or node.subgraphs:
        return [None] * len(node.outputs)
    types: dict[str, onnx.TypeProto] = {}
    data: dict[str, onnx.TensorProto] = {}
    for i, (name, spec) in enumerate(zip(node.proto.input, inputs)):
        if not name:
            continue
        if spec is None or not spec.is_static:
            return [None] * len(node.outputs)
        types[name] = onnx.helper.make_tensor_type_proto(onnx_elem_type(spec.dtype), spec.shape)
        if i in known and np.asarray(known[i]).size <= DATA_PROP_MAX_1D:
            data[name] = numpy_helper.from_array(np.asarray(known[i]), name)
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
        got = onnx.shape_inference.infer_node_outputs(
            schema, node.proto, types, data, opset_imports=[onnx.helper.make_opsetid("", opset)])
    except Exception:  # noqa: BLE001 - advisory, as whole-model inference
        return [None] * len(node.outputs)
    out: list[TensorSpec | None] = []
    for name in node.proto.output:
        v = value_from_type(name, got[name]) if name in got else None
        out.append(v.spec if v is not None and v.spec is not None and v.spec.is_static
                   else None)
    return out


def _without_contradicted_hints(model: onnx.ModelProto,
                                data_prop: bool) -> onnx.ModelProto | None:
    """``model`` without the ``graph.value_info`` shapes inference contradicts, or ``None``
    when there are none. Those entries annotate intermediates (not the graph's inputs or
    outputs); onnxruntime replaces a contradicted one with the inferred shape and loads the
    model (a warning in its log). onnxruntime-genai's model builder declares every Constant
    output as a scalar, whatever its shape."""
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(bare, strict_mode=False,
                                                     data_prop=data_prop)
    except Exception:  # noqa: BLE001 - then the contradiction stands
        return None
    found = {v.name: v.type for v in inferred.graph.value_info}

    def dims(tp: onnx.TypeProto | None) -> list[int | None] | None:
        if tp is None or tp.WhichOneof("value") != "tensor_type" \
                or not tp.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim]

    def agrees(a: list[int | None] | None, b: list[int | None] | None) -> bool:
        return a is None or b is None or (len(a) == len(b) and all(
            x is None or y is None or x == y for x, y in zip(a, b)))

    keep = [v for v in model.graph.value_info if agrees(dims(v.type), dims(found.get(v.name)))]
    if len(keep) == len(model.graph.value_info):
        return None
    logging.getLogger("onnx_ep").warning(
        "%d value_info shapes contradict onnx's shape inference and are ignored (as "
        "onnxruntime does)", len(model.graph.value_info) - len(keep))
    bare.graph.value_info.extend(keep)
    return bare


def _short_or_not_1d(tp: onnx.TypeProto) -> bool:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return True
    dims = tp.tensor_type.shape.dim
    return len(dims) != 1 or not dims[0].HasField("dim_value") or \
        dims[0].dim_value <= DATA_PROP_MAX_1D


def value_from_type(name: str, tp: onnx.TypeProto) -> Value:
    """A :class:`Value` from an ONNX ``TypeProto``."""
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        tt = tp.tensor_type
        if not tt.elem_type:
            return Value(name, "tensor")
        dims: tuple[Any, ...] | None = None
        if tt.HasField("shape"):
            dims = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim)
        dtype = np_dtype(tt.elem_type)
        spec = TensorSpec(dtype, dims) if dims is not None else None
        return Value(name, "tensor", spec, type_string(tt.elem_type), tt.elem_type)
    if which == "sequence_type":
        inner = value_from_type(name, tp.sequence_type.elem_type)
        return Value(name, "sequence", None, f"seq({inner.type_str})")
    if which == "optional_type":
        inner = value_from_type(name, tp.optional_type.elem_type)
        return Value(name, "optional", None, f"optional({inner.type_str})")
    if which == "map_type":
        return Value(name, "map", None, "map")
    return Value(name)


def _convert_graph(gp: onnx.GraphProto, opsets: dict[str, int], outer: frozenset[str],
                   top: bool = False,
                   weights: dict[str, onnx.TensorProto] | None = None) -> Graph:
    """:param weights: the original initializers when ``gp`` is the light (inferred) copy."""
    values: dict[str, Value] = {}
    for vi in list(gp.input) + list(gp.value_info) + list(gp.output):
        values[vi.name] = value_from_type(vi.name, vi.type)
    _unique_initializers(gp.name, gp.initializer)
    initializers: dict[str, np.ndarray] = {}
    for t in (weights.values() if weights is not None else gp.initializer):
        initializers[t.name] = _tensor_to_array(t)
    for st in gp.sparse_initializer:
        initializers[st.values.name] = _sparse_to_array(st)
    inputs = [values[vi.name] for vi in gp.input if vi.name not in initializers]
    outputs = [values[vi.name] for vi in gp.output]

    local = set(initializers) | {vi.name for vi in gp.input}
    for n in gp.node:
        for o in n.output:
            if o and o in local:
                # onnxruntime refuses it; silently, the last writer would win
                raise ModelError(f"graph {gp.name!r}: value {o!r} is defined twice (node "
                                 f"{n.name or n.op_type!r} writes a value an input, an "
                                 f"initializer or an earlier node already defines)")
            if o:
                local.add(o)
        _check_attributes(n, opsets)
        _check_node(n, opsets)
    scope = frozenset(local) | outer
    nodes: list[Node] = []
    seen_names: set[str] = set()
    for i, np_ in enumerate(gp.node):
        folded = _constant_value(np_, opsets, scope)
        if folded is not None:
            # a Constant node is a weight: folded into the initializers, so it is stored
            # (and on a device, uploaded) once instead of re-made on every run
            initializers[np_.output[0]] = folded
            continue
        name = np_.name or f"{np_.op_type}_{i}"
        if name in seen_names:
            name = f"{name}_{i}"
        seen_names.add(name)
        attrs_ = {a.name: _attr_value(a, opsets, scope, name) for a in np_.attribute}
        node = Node(name, np_.op_type, "" if np_.domain in ("", "ai.onnx") else np_.domain,
                    tuple(np_.input), tuple(np_.output), attrs_, proto=np_)
        implicit: list[str] = []
        for sg in node.subgraphs:
            implicit.extend(n for n in sg.outer_names if n not in implicit)
        node.implicit_inputs = tuple(implicit)
        nodes.append(node)

    free = _free_names(nodes, local)
    unknown = [n for n in free if n not in outer]
    # a subgraph may hand an outer value back as its output, read by no node of its own
    free += [o.name for o in outputs if o.name not in local and o.name not in free]
    produced_outer = [n for n in free if n in outer]
    if unknown:
        raise ModelError(f"graph {gp.name!r} reads value(s) {unknown[:5]} that no node, "
                         f"input or initializer defines")
    ordered = _toposort(nodes, set(initializers) | {vi.name for vi in gp.input} | set(outer))
    for o in outputs:
        if o.name not in local and o.name not in outer:
            raise ModelError(f"graph output {o.name!r} is not produced by any node or input")
    return Graph(gp.name, ordered, inputs, outputs, initializers, values, opsets,
                 tuple(produced_outer))


_CONSTANT_FORMS = {"value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64,
                   "value_string": object, "value_strings": object}


def _constant_value(node: onnx.NodeProto, opsets: dict[str, int],
                    scope: frozenset[str]) -> np.ndarray | None:
    """The tensor an ai.onnx ``Constant`` node produces, or None for any other node."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    if len(node.attribute) != 1:
        raise ModelError(f"Constant node {node.name or node.output[0]!r} must set exactly one "
                         f"value attribute, got {[a.name for a in node.attribute]}")
    attr = node.attribute[0]
    value = _attr_value(attr, opsets, scope, node.name or node.output[0])
    if attr.name in ("value", "sparse_value"):
        return np.asarray(value)
    dtype = _CONSTANT_FORMS.get(attr.name)
    if dtype is None:
        raise ModelError(f"Constant node {node.name or node.output[0]!r}: unknown attribute "
                         f"{attr.name!r}")
    return np.array(value, dtype=dtype)


def _free_names(nodes: Iterable[Node], local: set[str]) -> list[str]:
    free: list[str] = []
    for n in nodes:
        for name in list(n.inputs) + list(n.implicit_inputs):
            if name and name not in local and name not in free:
                free.append(name)
    return free


def _toposort(nodes: list[Node], available: set[str]) -> list[Node]:
    """Kahn's algorithm, stable with respect to the model's node order."""
    producers: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o:
                producers[o] = i
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        d = {producers[x] for x in (*n.inputs, *n.implicit_inputs)
             if x and x not in available and x in producers}
        deps.append(d)
        for j in d:
            users[j].append(i)
    remaining = [len(d) for d in deps]
    import heapq
    ready = [i for i, r in enumerate(remaining) if r == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for u in users[i]:
            remaining[u] -= 1
            if remaining[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = [nodes[i].name for i, r in enumerate(remaining) if r > 0]
        raise ModelError(f"graph has a cycle through node(s) {stuck[:6]}; ONNX graphs "
                         f"must be acyclic")
    return order


def _attr_value(a: onnx.AttributeProto, opsets: dict[str, int], scope: frozenset[str],
                node_name: str) -> Any:
    T = onnx.AttributeProto
    if a.ref_attr_name:
        raise ModelError(f"node {node_name!r}: attribute {a.name!r} refers to a function "
                         f"attribute; only model-level graphs are supported")
    t = a.type
    if t == T.FLOAT:
        return float(a.f)
    if t == T.INT:
        return int(a.i)
    if t == T.STRING:
        return a.s.decode("utf-8", errors="surrogateescape")
    if t == T.TENSOR:
        return _tensor_to_array(a.t)
    if t == T.SPARSE_TENSOR:
        return _sparse_to_array(a.sparse_tensor)
    if t == T.GRAPH:
        return _convert_graph(a.g, opsets, scope)
    if t == T.TYPE_PROTO:
        return a.tp
    if t == T.FLOATS:
        return [float(x) for x in a.floats]
    if t == T.INTS:
        return [int(x) for x in a.ints]
    if t == T.STRINGS:
        return [s.decode("utf-8", errors="surrogateescape") for s in a.strings]
    if t == T.TENSORS:
        return [_tensor_to_array(x) for x in a.tensors]
    if t == T.GRAPHS:
        return [_convert_graph(g, opsets, scope) for g in a.graphs]
    if t == T.TYPE_PROTOS:
        return list(a.type_protos)
    raise ModelError(f"node {node_name!r}: attribute {a.name!r} has unknown type {t}")


def _tensor_to_array(t: onnx.TensorProto) -> np.ndarray:
    try:
        arr = numpy_helper.to_array(t)
    except Exception as exc:
        raise ModelError(f"cannot read tensor {t.name!r}: {exc}") from exc
    if arr.dtype == object:
        arr = np.array([x.decode("utf-8") if isinstance(x, bytes) else x
                        for x in arr.ravel()], dtype=object).reshape(arr.shape)
    return arr


def _sparse_to_array(st: onnx.SparseTensorProto) -> np.ndarray:
    values = _tensor_to_array(st.values)
    indices = _tensor_to_array(st.indices).astype(np.int64)
    shape = tuple(st.dims)
    dense = np.zeros(shape, dtype=values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def light_model_for_inference(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose large initializers became typed graph inputs.

    Shape inference needs only their types and shapes; small initializers (shape
    constants for Reshape, Expand, Range bounds, ...) are kept as data.
    """
    # copy everything but the initializers field by field: CopyFrom would first copy
    # every weight byte (gigabytes for a large model) only to drop it
    m = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name,
                        domain=model.domain, model_version=model.model_version)
    m.opset_import.extend(model.opset_import)
    m.functions.extend(model.functions)
    src = model.graph
    g = m.graph
    g.name = src.name
    for name in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(g, name).extend(getattr(src, name))
    existing = {vi.name for vi in m.graph.input}
    for t in model.graph.initializer:
        if t.name in existing and model.ir_version >= 4:
            continue        # overridable (a feed may replace it): its type, never its value
        # small constants (Reshape/Expand shapes, Range bounds, Slice starts) are kept as
        # data so inference's data propagation can compute shapes from them
        if int(np.prod(t.dims)) <= 64 and t.data_type != onnx.TensorProto.STRING:
            m.graph.initializer.append(t)
        elif t.name not in existing:
            m.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))
    return m
