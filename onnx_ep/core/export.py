"""The model as onnx-ep runs it, written back as ONNX: onnxruntime's ``optimized_model_filepath``.

:func:`write_optimized_model` (and :func:`optimize_model`, which only returns the model)
applies the input dims a caller fixes (onnxruntime's free-dimension overrides), then folds
to a fixed point:

- **known values**: initializers (of any size; never one that is also a graph input, which
  onnxruntime lets a feed override from IR 4 on), ``Constant`` nodes, and ``Shape`` /
  ``Size`` of a value whose shape is static after the overrides;
- **folded**: a standard-domain node whose inputs are all known, computed once by the host
  kernel onnx-ep would run it with (:class:`~onnx_ep.core.folding.HostKernels`, called as
  the executor calls it, the way plan-time folding does), and replaced by an initializer.
  Not folded: random ops and ``Dropout`` (:data:`NONDETERMINISTIC`), nodes with subgraphs,
  other domains, a kernel that raises or needs a workspace, an output that is not a plain
  tensor of its declared type, and an output over :data:`EXPORT_FOLD_MAX_BYTES` (folding
  ``Expand`` or ``ConstantOfShape`` must not balloon the file);
- **graph outputs** keep their names: a folded one becomes an ``Identity`` of a new
  initializer, and an ``Identity`` or ``Constant`` that already makes one stays as it is;
- **bodies** of ``If`` / ``Loop`` / ``Scan`` are left untouched (their values differ per
  iteration or branch, and onnx-ep runs them unplanned on the host); the outer values they
  read stay defined, folded or not.

Then nodes and initializers nothing reads are dropped (graph inputs stay), and the top
graph's ``value_info`` is onnx's shape inference of the result. Opset imports, IR version,
producer, doc strings, ``metadata_props`` and functions are kept as loaded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.core.folding import FOLD_MAX_BYTES, HostKernels, shape_value
from onnx_ep.core.free_dims import fix_free_dimensions
from onnx_ep.core.graph import (
    Graph,
    Node,
    build_graph,
    infer,
    light_model_for_inference,
    load_model,
)
from onnx_ep.core.kernel import ExecutionContext, TensorSpec
from onnx_ep.core.placement import HOST, node_meta, value_spec
from onnx_ep.core.plugin_manager import plugins_for, resolve_providers
from onnx_ep.errors import OnnxEpError, OptionsError

#: ops whose output is not a function of their inputs. Dropout is random in training mode,
#: and at inference a pass-through that onnxruntime removes itself.
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                              "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"})

#: the largest value a folded node may produce; an initializer that was already in the
#: model may be larger. Same bound as plan-time folding: shape vectors and masks fold, a
#: broadcast of a weight to a batch stays a node.
EXPORT_FOLD_MAX_BYTES = FOLD_MAX_BYTES

#: a serialized ModelProto cannot exceed 2 GiB; past this (with room for everything that is
#: not an initializer) initializers move to an external data file even when none was asked
PROTOBUF_LIMIT = (2 << 30) - (64 << 20)

#: rounds of fold, re-infer, fold: inference of the rewritten graph can make more shapes
#: static (a Reshape fed a folded shape); two rounds reach the fixed point in practice
MAX_ROUNDS = 8

Dims = Sequence[int | str | None]


def write_optimized_model(model: str | os.PathLike[str] | bytes | onnx.ModelProto,
                          path: str | os.PathLike[str], *,
                          input_shapes: Mapping[str, Dims] | None = None,
                          free_dims: Mapping[str, int] | None = None,
                          free_dim_denotations: Mapping[str, int] | None = None,
                          external_data_file: str | None = None,
                          external_min_bytes: int = 1024,
                          providers: Sequence[str] = ("cpu_reference",),
                          plugins: Sequence[Any] = ()) -> onnx.ModelProto:
    """Fold ``model`` as onnx-ep runs it and write it to ``path``, loadable by onnxruntime.

    :param model: a path (external data is read from beside it), bytes or a ModelProto
        (not modified).
    :param input_shapes: graph input name -> dims; an int fixes a dim, a str names it, None
        leaves it unknown. The rank must be the declared one, and a fixed dim keeps its size.
    :param free_dims: dim name -> size (onnxruntime's
        ``add_free_dimension_override_by_name``).
    :param free_dim_denotations: dim denotation -> size
        (``add_free_dimension_override_by_denotation``). Both fix the symbolic dims of the
        main graph's inputs, outputs and ``value_info`` as the session's
        ``free_dimension_overrides`` does (``core/free_dims.py``); a name wins over a
        denotation, and a fixed dim stays what the model says.
    :param external_data_file: a file name relative to ``path``'s folder: initializers of at
        least ``external_min_bytes`` bytes (the rule of onnxruntime's
        ``session.optimized_model_external_initializers_min_size_in_bytes``) are stored
        there. Without it every initializer is inline, unless the model would pass
        protobuf's 2 GiB; then they go to ``<file name of path>.data``.
    :param providers: the host providers whose kernels compute folded values, first that
        runs a node wins; device providers in the list are skipped (folding runs on the
        host), and with no host provider left every available one is used.
    :param plugins: in-process plugins, as ``Session(plugins=...)`` takes them (their kernels
        fold custom-op nodes of the default domain too).
    :returns: the written model, every initializer inline.
    :raises OptionsError: an override names no input, changes a rank or a fixed dim, or
        ``external_data_file`` is not a relative name inside ``path``'s folder.
    :raises ModelError: the model does not load (as ``Session`` would refuse it).
    """
    proto = optimize_model(model, input_shapes=input_shapes, free_dims=free_dims,
                           free_dim_denotations=free_dim_denotations, providers=providers,
                           plugins=plugins)
    save(proto, path, external_data_file=external_data_file,
         external_min_bytes=external_min_bytes)
    return proto


def optimize_model(model: str | os.PathLike[str] | bytes | onnx.ModelProto, *,
                   input_shapes: Mapping[str, Dims] | None = None,
                   free_dims: Mapping[str, int] | None = None,
                   free_dim_denotations: Mapping[str, int] | None = None,
                   providers: Sequence[str] = ("cpu_reference",),
                   plugins: Sequence[Any] = ()) -> onnx.ModelProto:
    """:func:`write_optimized_model` without the writing: the folded model, in memory."""
    loaded = load_model(model)
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(loaded)             # the caller's model stays as it was
    else:
        proto = loaded
    apply_dims(proto, input_shapes or {}, free_dims or {}, free_dim_denotations or {})
    kernels = _host_kernels(providers, plugins)
    for _ in range(MAX_ROUNDS):
        if not _fold_round(proto, kernels):
            break
    prune(proto.graph, proto.ir_version)
    _annotate(proto)
    return proto


# ------------------------------------------------------------------ input dims


def apply_dims(model: onnx.ModelProto, input_shapes: Mapping[str, Dims],
               free_dims: Mapping[str, int], denotations: Mapping[str, int]) -> None:
    """Fix the graph inputs' dims in place (see :func:`write_optimized_model`).

    :raises OptionsError: an unknown input, another rank, a fixed dim given another size.
    """
    inputs = {vi.name: vi for vi in model.graph.input}
    for name, dims in input_shapes.items():
        vi = inputs.get(name)
        if vi is None:
            raise OptionsError(f"input_shapes names {name!r}, which is not a graph input; "
                               f"the inputs are {sorted(inputs)}")
        if vi.type.WhichOneof("value") != "tensor_type":
            raise OptionsError(f"input {name!r} is not a tensor; only tensor dims can be set")
        tt = vi.type.tensor_type
        if tt.HasField("shape") and len(tt.shape.dim) != len(dims):
            raise OptionsError(f"input_shapes[{name!r}] has {len(dims)} dims; the input is "
                               f"declared with rank {len(tt.shape.dim)}")
        if not tt.HasField("shape"):
            tt.shape.dim.extend(onnx.TensorShapeProto.Dimension() for _ in dims)
        for i, (d, new) in enumerate(zip(tt.shape.dim, dims)):
            _set_dim(d, new, f"input_shapes[{name!r}][{i}]")
    # the session's own rule (SessionOptions.free_dimension_overrides), so the written
    # model has the dims the session runs with
    fix_free_dimensions(model, {**denotations, **free_dims}, copy=False)


def _set_dim(d: onnx.TensorShapeProto.Dimension, new: int | str | None, what: str) -> None:
    if d.HasField("dim_value") and not (isinstance(new, int) and new == d.dim_value):
        raise OptionsError(f"{what}: that dim is fixed at {d.dim_value} by the model; "
                           f"it cannot become {new!r}")
    if isinstance(new, bool) or not (new is None or isinstance(new, (int, str))):
        raise OptionsError(f"{what} must be an int, a dim name or None, not {new!r}")
    if isinstance(new, int):
        if new < 0:
            raise OptionsError(f"{what} must be >= 0, not {new}")
        d.dim_value = new
    elif isinstance(new, str):
        d.dim_param = new
    else:
        d.ClearField("dim_value")
        d.ClearField("dim_param")


# ------------------------------------------------------------------ folding


def _host_kernels(providers: Sequence[str], plugins: Sequence[Any]) -> HostKernels:
    ps = plugins_for(plugins)
    ps.check()
    names: list[str] = []
    for p in providers:
        try:
            names += resolve_providers([p], ps)
        except OnnxEpError:
            continue                         # a device provider absent here folds nothing
    reg = ps.registry
    hosts = [p for p in names if reg.providers[p].device == HOST]
    if not hosts:
        hosts = [p for p in reg.available() if reg.providers[p].device == HOST]
    return HostKernels(reg, hosts)


def _fold_round(proto: onnx.ModelProto, kernels: HostKernels) -> bool:
    """One pass in topological order; True when the proto changed."""
    g = proto.graph
    graph = build_graph(proto)                 # validates and infers at the current dims
    out_names = {o.name for o in g.output}
    overridable = _overridable(proto)
    known = {n: a for n, a in graph.initializers.items()
             if n not in overridable and isinstance(a, np.ndarray)}
    specs: dict[str, TensorSpec | None] = {}
    folded: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        values = _fold_node(node, graph, known, specs, kernels, out_names, overridable)
        if values is None:
            continue
        for name, v in zip(node.outputs, values):
            if name:
                known[name] = folded[name] = v
                specs[name] = TensorSpec(v.dtype, v.shape)

    taken = _all_names(g)
    node_names = {n.name for n in g.node}
    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = []
    changed = False
    for n in g.node:
        if _is_constant(n) and n.output[0] not in out_names:
            value = graph.initializers.get(n.output[0])
            if value is not None and n.attribute[0].name != "sparse_value":
                inits.append(_initializer(value, n.output[0]))
                changed = True
                continue
        if not any(o in folded for o in n.output):
            nodes.append(n)
            continue
        changed = True
        node_names.discard(n.name)
        for o in n.output:
            if not o:
                continue
            if o in out_names:
                # the output keeps its name and a producer, so the model's outputs are
                # what they were (an initializer as a graph output is not read alike
                # everywhere)
                src = _fresh(f"{o}_folded", taken)
                inits.append(_initializer(folded[o], src))
                nodes.append(helper.make_node("Identity", [src], [o],
                                              name=_fresh(n.name or o, node_names)))
            else:
                inits.append(_initializer(folded[o], o))
    if not changed:
        return False
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(inits)
    if proto.ir_version < 4:
        # before IR 4 an initializer must also be declared a graph input
        g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                       for t in inits)
    return True


def _fold_node(node: Node, graph: Graph, known: dict[str, np.ndarray],
               specs: dict[str, TensorSpec | None], kernels: HostKernels,
               out_names: set[str], overridable: set[str]) -> list[np.ndarray] | None:
    """The node's output values, or None when it is not folded."""
    if (node.domain != "" or node.op_type in NONDETERMINISTIC or node.subgraphs
            or not any(node.outputs)):
        return None
    if node.op_type in ("Identity", "Constant") and any(o in out_names for o in node.outputs):
        return None                            # already the plainest form of that output
    if node.op_type in ("Shape", "Size"):
        src = node.inputs[0] if node.inputs else ""
        spec = value_spec(src, graph, specs)
        if not src or src in overridable or spec is None or not spec.is_static:
            return None
        outputs: list[Any] = [shape_value(node.op_type, node.attrs, spec.shape)]
    else:
        outputs_or_none = _run_kernel(node, graph, known, specs, kernels)
        if outputs_or_none is None:
            return None
        outputs = outputs_or_none
    result: list[np.ndarray] = []
    for name, v in zip(node.outputs, outputs):
        if isinstance(v, np.generic):
            v = np.asarray(v)
        if name and not _foldable_value(v, graph, name):
            return None
        result.append(v)
    return result


def _run_kernel(node: Node, graph: Graph, known: Mapping[str, np.ndarray],
                specs: dict[str, TensorSpec | None],
                kernels: HostKernels) -> list[Any] | None:
    inputs: list[Any] = []
    for name in node.inputs:
        if name and name not in known:
            return None
        inputs.append(known[name] if name else None)
    for name in node.outputs:
        spec = value_spec(name, graph, specs)
        if spec is not None and spec.is_static and spec.nbytes > EXPORT_FOLD_MAX_BYTES:
            return None                        # do not compute what would not be kept
    for name, v in zip(node.inputs, inputs):
        if name:
            specs.setdefault(name, TensorSpec(v.dtype, v.shape))
    positions = {i: v for i, v in enumerate(inputs) if v is not None}
    meta = node_meta(node, graph, specs, known=positions)
    try:
        found = kernels.find(meta)
        if found is None:
            return None
        kernel, provider = found
        if kernel.workspace_requirement(meta).nbytes:
            return None
        outputs: list[Any] = [None] * len(node.outputs)
        with np.errstate(all="ignore"):       # as the executor: ONNX defines inf/nan
            kernel.execute_with_workspace(ExecutionContext(meta, provider=provider), inputs,
                                          outputs, None)
    except Exception:  # noqa: BLE001
        # the node stays, and a run raises its NodeError there, as it would unfolded
        return None
    return outputs


def _foldable_value(v: Any, graph: Graph, name: str) -> bool:
    """A plain tensor within the bound, of the type the model declares for ``name``."""
    if not isinstance(v, np.ndarray) or v.dtype == object or v.nbytes > EXPORT_FOLD_MAX_BYTES:
        return False
    try:
        elem = onnx_elem_type(v.dtype)
    except Exception:  # noqa: BLE001 - a storage dtype ONNX has no name for
        return False
    declared = graph.values.get(name)
    return declared is None or not declared.elem_type or declared.elem_type == elem


def _overridable(proto: onnx.ModelProto) -> set[str]:
    """Initializers a feed may replace: those also declared graph inputs, from IR 4 on."""
    if proto.ir_version < 4:
        return set()
    g = proto.graph
    return {vi.name for vi in g.input} & {t.name for t in g.initializer}


def _is_constant(n: onnx.NodeProto) -> bool:
    return (n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.output) == 1
            and len(n.attribute) == 1)


def _initializer(value: np.ndarray, name: str) -> TensorProto:
    return numpy_helper.from_array(value, name)


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _all_names(g: onnx.GraphProto) -> set[str]:
    """Every value name of ``g`` and its subgraphs (a new name must shadow none)."""
    names = {vi.name for vi in (*g.input, *g.output, *g.value_info)}
    names.update(t.name for t in g.initializer)
    for n in g.node:
        names.update(n.input)
        names.update(n.output)
        for sg in _subgraphs(n):
            names |= _all_names(sg)
    return names


def _subgraphs(n: onnx.NodeProto) -> list[onnx.GraphProto]:
    out: list[onnx.GraphProto] = []
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def _reads(n: onnx.NodeProto) -> set[str]:
    """The names ``n`` reads, its subgraphs' reads included (a superset of the outer ones)."""
    names = {x for x in n.input if x}
    for sg in _subgraphs(n):
        for m in sg.node:
            names |= _reads(m)
        names.update(o.name for o in sg.output)
    return names


# ------------------------------------------------------------------ pruning, value_info


def prune(g: onnx.GraphProto, ir_version: int = onnx.IR_VERSION) -> None:
    """Drop the nodes and initializers of ``g`` that no graph output needs. Graph inputs
    stay (they are the model's signature), and so does an initializer declared one, unless
    the IR is older than 4, where every initializer is declared an input and none is fed."""
    producer: dict[str, int] = {}
    for i, n in enumerate(g.node):
        for o in n.output:
            if o:
                producer[o] = i
    needed: set[str] = set()
    live: set[int] = set()
    todo = [o.name for o in g.output]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        i = producer.get(name)
        if i is not None and i not in live:
            live.add(i)
            todo.extend(_reads(g.node[i]))
    if len(live) < len(g.node):
        kept = [n for i, n in enumerate(g.node) if i in live]
        del g.node[:]
        g.node.extend(kept)
    declared = {vi.name for vi in g.input}
    if ir_version < 4:
        dead = {t.name for t in g.initializer if t.name not in needed}
        kept_inputs = [vi for vi in g.input if vi.name not in dead]
        if len(kept_inputs) < len(g.input):
            del g.input[:]
            g.input.extend(kept_inputs)
        declared -= dead
    inits = [t for t in g.initializer if t.name in needed or t.name in declared]
    if len(inits) < len(g.initializer):
        del g.initializer[:]
        g.initializer.extend(inits)


def _annotate(proto: onnx.ModelProto) -> None:
    """The top graph's ``value_info``: onnx's inference of every node output that is not a
    graph output, over what the model declared (kept where inference has nothing)."""
    g = proto.graph
    outputs = {o.name for o in g.output}
    made = [o for n in g.node for o in n.output if o and o not in outputs]
    inferred = infer(light_model_for_inference(proto))
    found = {vi.name: vi for vi in g.value_info}
    found.update((vi.name, vi) for vi in inferred.graph.value_info)
    vis = [found[n] for n in dict.fromkeys(made) if n in found]
    del g.value_info[:]
    g.value_info.extend(vis)


# ------------------------------------------------------------------ writing


def save(proto: onnx.ModelProto, path: str | os.PathLike[str], *,
         external_data_file: str | None = None, external_min_bytes: int = 1024) -> None:
    """Write ``proto`` to ``path``; initializers of at least ``external_min_bytes`` go to
    ``external_data_file`` (relative to ``path``'s folder) when it is given, or when the
    model would pass protobuf's limit (then ``<file name>.data``). ``proto`` keeps its
    data inline."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    location = external_data_file
    if location is None and _serialized_bytes(proto) > PROTOBUF_LIMIT:
        location = os.path.basename(path) + ".data"
    if location is not None:
        _check_location(location)
    os.makedirs(folder, exist_ok=True)
    moved: list[tuple[TensorProto, bytes]] = []
    try:
        if location is not None:
            moved = _externalize(proto.graph, os.path.join(folder, location), location,
                                 external_min_bytes)
        with open(path, "wb") as f:
            f.write(proto.SerializeToString())
    finally:
        for t, raw in moved:                  # the returned model keeps its data inline
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT
            t.raw_data = raw


def _check_location(location: str) -> None:
    norm = os.path.normpath(location)
    if (not location or os.path.isabs(location) or norm == ".."
            or norm.startswith(".." + os.sep)):
        raise OptionsError(f"external_data_file {location!r} must be a file name relative to "
                           f"the written model's folder (onnxruntime and onnx read external "
                           f"data only from there)")


def _serialized_bytes(proto: onnx.ModelProto) -> int:
    g = proto.graph
    return (sum(t.ByteSize() for t in g.initializer) + sum(n.ByteSize() for n in g.node)
            + sum(f.ByteSize() for f in proto.functions))


def _externalize(g: onnx.GraphProto, file: str, location: str,
                 min_bytes: int) -> list[tuple[TensorProto, bytes]]:
    """Move ``g``'s initializers of at least ``min_bytes`` into ``file``, one after another."""
    moved: list[tuple[TensorProto, bytes]] = []
    offset = 0
    with open(file, "wb") as f:
        for t in g.initializer:
            if t.data_type == TensorProto.STRING or t.data_location == TensorProto.EXTERNAL:
                continue                     # strings cannot be stored externally
            raw = t.raw_data if t.HasField("raw_data") else \
                numpy_helper.from_array(numpy_helper.to_array(t)).raw_data
            if len(raw) < min_bytes:
                continue
            f.write(raw)
            for field in ("float_data", "int32_data", "int64_data", "double_data",
                          "uint64_data", "raw_data"):
                t.ClearField(field)
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", location), ("offset", str(offset)),
                         ("length", str(len(raw)))):
                t.external_data.add(key=k, value=v)
            offset += len(raw)
            moved.append((t, raw))
    return moved
