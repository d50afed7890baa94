"""Plan-time folding: values that depend only on the shape signature, computed once per plan.

Exported decoders compute shapes while they run: Shape -> Gather -> Unsqueeze -> Concat ->
Reshape, Range and ConstantOfShape fed by shapes, causal masks (Shape -> Add -> Range ->
Less -> Where). At one shape signature these values never change, yet unfolded they run
on every run, and a Range whose length depends on values cannot be sized for a device, so
it falls back to the host, with copies in the middle of the step.

While a signature is planned (``planner.plan_signature``), a :class:`Folder` visits the
steps in order and evaluates, with the host kernel that would run it, every step whose
inputs are all known:

- known from the start: initializers of at most :data:`SEED_MAX_BYTES`; never a graph
  input's value (feeds change from run to run), only its shape;
- ``Shape`` and ``Size`` are known when their input's shape is static at this signature;
- a node is folded when its op is in :data:`FOLDABLE`, all its inputs are known, it has no
  subgraphs, needs no workspace, produces no graph output (nor a value a subgraph reads),
  and each of its outputs is at most :data:`FOLD_MAX_BYTES`; a copy step is folded when
  its source is known (its destination becomes a folded device value).

The planner then forms the signature's own program (``planner.specialise``) without the
folded steps; docs/MEMORY.md ("Plan-time folding") says how the values reach the steps
that read them and where device values live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity, TensorSpec
from onnx_ep.core.placement import HOST, PlacedNode, node_meta
from onnx_ep.core.registry import KernelRegistry, bind_kernel
from onnx_ep.errors import NoKernelError

if TYPE_CHECKING:
    from onnx_ep.core.planner import Program, Step

#: the largest output a folded node may have. A folded value is kept for the plan's life
#: (host arrays; on a device, uploaded beside the plan's arena), once per signature, while
#: an unfolded one lives only from its producer to its last reader. Shape vectors are a few
#: bytes and a 1024 x 1024 float32 causal mask is 4 MiB; past that a value is data, cheaper
#: to recompute per run than to pin per signature.
FOLD_MAX_BYTES = 4 << 20

#: initializers known by value from the start. Shape constants, Range bounds and mask fill
#: values are bytes; a cap far below :data:`FOLD_MAX_BYTES` keeps a weight that a graph
#: transposes or casts at run time from being copied once more per signature.
SEED_MAX_BYTES = 64 << 10

#: deterministic, side-effect-free ops of shape arithmetic and masks (ai.onnx). Not here:
#: random ops, ops with subgraphs, and float math that is not shape arithmetic (Sqrt, Exp,
#: Softmax, MatMul, ...), which a device would compute with its own rounding.
FOLDABLE = frozenset({
    "Shape", "Size", "Constant", "Identity", "Gather", "Slice", "Concat", "Unsqueeze",
    "Squeeze", "Reshape", "Flatten", "Cast", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs",
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Where",
    "Range", "ConstantOfShape", "Expand", "ReduceProd", "ReduceSum", "ReduceMin",
    "ReduceMax", "Min", "Max", "Tile", "Transpose", "Floor", "Ceil", "Trilu",
})


@attrs.frozen
class Folded:
    """What folding removed from one signature's plan.

    :ivar steps: indices (into the shared program's steps) of the folded steps.
    :ivar names: their names, in step order (nodes, and ``copy:...`` for copies).
    :ivar values: the host value of every slot a folded step produced.
    :ivar device_slots: the slots among ``values`` that live on a device.
    """

    steps: frozenset[int] = frozenset()
    names: tuple[str, ...] = ()
    values: Mapping[int, np.ndarray] = attrs.field(factory=dict)
    device_slots: frozenset[int] = frozenset()


class HostKernels:
    """Finds the host kernel for a node placed on a device, to evaluate it at plan time.

    :param registry: the session's kernel registry.
    :param providers: the session's providers; only those whose device is the host are
        asked, in this order (``Executor.host_providers``).
    """

    def __init__(self, registry: KernelRegistry, providers: Sequence[str]) -> None:
        self.registry = registry
        self.providers = [p for p in providers if registry.providers[p].device == HOST]

    def find(self, meta: NodeMeta) -> tuple[Any, str] | None:
        """``(bound kernel, provider)`` of the first host provider that runs ``meta``, or
        None when none does (the node is then not folded)."""
        if not self.providers:
            return None
        try:
            sel = self.registry.select(meta, self.providers)
        except NoKernelError:
            return None
        return bind_kernel(sel.kernel, meta), sel.provider


def _small(value: Any, cap: int) -> bool:
    return isinstance(value, np.ndarray) and value.dtype != object and value.nbytes <= cap


def _floating(values: Sequence[Any]) -> bool:
    """Whether any of ``values`` (arrays or specs; None skipped) is neither integer nor bool."""
    return any(v is not None and not (np.issubdtype(v.dtype, np.integer)
                                      or v.dtype == np.bool_) for v in values)


def shape_value(op_type: str, attrs_: Mapping[str, Any], shape: Sequence[int]) -> np.ndarray:
    """``Shape`` (start / end clamped into [0, rank] after adding rank to negatives, as
    Shape-15 says) or ``Size`` of a tensor of ``shape``, as int64."""
    if op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    r = len(shape)
    start, end = attrs_.get("start", 0), attrs_.get("end")
    start = min(max(start + r if start < 0 else start, 0), r)
    end = r if end is None else min(max(end + r if end < 0 else end, 0), r)
    return np.array(shape[start:end], dtype=np.int64)


class Folder:
    """Visits one program's steps in order at one signature and folds what it can.

    :param program: the shared program (left untouched).
    :param host: host kernels for nodes placed on a device; without it only host-placed
        nodes (with their own kernels), ``Shape`` / ``Size`` and copies are folded.
    """

    def __init__(self, program: Program, host: HostKernels | None = None,
                 outer_known: Mapping[str, Any] | None = None) -> None:
        self.program = program
        self.host = host
        graph, slot_of = program.graph, program.slot_of
        self.known: dict[int, np.ndarray] = {}
        for name, arr in graph.initializers.items():
            if name in slot_of and _small(arr, SEED_MAX_BYTES):
                self.known[slot_of[name]] = arr
        for c in program.placement.uploads:      # initializers uploaded to the device
            arr = graph.initializers.get(c.src)
            if c.dst in slot_of and _small(arr, SEED_MAX_BYTES):
                self.known[slot_of[c.dst]] = arr
        for name, arr in (outer_known or {}).items():   # a body: what its caller knows
            if name in slot_of and name in graph.outer_names and _small(arr, SEED_MAX_BYTES):
                self.known[slot_of[name]] = arr
        # values the run must hand out or a subgraph reads by name: never folded away
        self.pinned = set(program.output_slots)
        self.pinned.update(slot_of[v.name] for v in graph.outputs if v.name in slot_of)
        self.pinned.update(s for st in program.steps for _, s in st.scope_slots)
        self._steps: list[int] = []
        self._names: list[str] = []
        self._values: dict[int, np.ndarray] = {}
        self._device: set[int] = set()

    def visit(self, index: int, step: Step, specs: dict[str, TensorSpec | None]) -> bool:
        """Fold ``step`` if it can be; then its outputs' specs in ``specs`` are the folded
        values' and True is returned. Call in step order, before sizing the step."""
        outs = [s for s in step.out_slots if s >= 0]
        if not outs or any(s in self.pinned for s in outs):
            return False
        if step.copy is not None:
            value = self.known.get(step.in_slots[0])
            if value is None:
                return False
            self._fold(index, step, (step.copy.dst,), [value], step.copy.dst_device, specs)
            return True
        placed = step.placed
        if (placed is None or step.has_subgraphs or placed.node.subgraphs
                or placed.node.domain not in ("", "ai.onnx")
                or placed.node.op_type not in FOLDABLE):
            return False
        values = self._evaluate(placed, step, specs)
        if values is None:
            return False
        self._fold(index, step, placed.node.outputs, values, placed.device, specs)
        return True

    def result(self) -> Folded:
        """What was folded, once every step was visited."""
        return Folded(frozenset(self._steps), tuple(self._names), dict(self._values),
                      frozenset(self._device))

    def _fold(self, index: int, step: Step, names: Sequence[str], values: Sequence[Any],
              device: str, specs: dict[str, TensorSpec | None]) -> None:
        for s, name, v in zip(step.out_slots, names, values):
            if s < 0:
                continue
            if v.flags.writeable:
                # every run now reads this one array, and a host view of it (Reshape) may
                # reach the caller as an output: writing into it must fail, not corrupt
                # the next run's value
                v = v.view()
                v.flags.writeable = False
            self.known[s] = self._values[s] = v
            specs[name] = TensorSpec(v.dtype, v.shape)
            if device != HOST:
                self._device.add(s)
        self._steps.append(index)
        self._names.append(step.name)

    def _evaluate(self, placed: PlacedNode, step: Step,
                  specs: dict[str, TensorSpec | None]) -> list[Any] | None:
        """The node's outputs computed on the host, or None when it is not folded."""
        node = placed.node
        if node.op_type in ("Shape", "Size"):
            spec = specs.get(placed.inputs[0]) if placed.inputs else None
            if spec is None or not spec.is_static:
                return None
            outputs: list[Any] = [shape_value(node.op_type, node.attrs, spec.shape)]
        else:
            outputs = self._run_kernel(placed, step, specs)
            if outputs is None:
                return None
        result: list[Any] = []
        for name, v in zip(node.outputs, outputs):
            if isinstance(v, np.generic):
                v = np.asarray(v)
            if name and not _small(v, FOLD_MAX_BYTES):
                return None
            result.append(v)
        return result

    def _run_kernel(self, placed: PlacedNode, step: Step,
                    specs: dict[str, TensorSpec | None]) -> list[Any] | None:
        node = placed.node
        inputs: list[Any] = []
        for s in step.in_slots:
            value = self.known.get(s) if s >= 0 else None
            if s >= 0 and value is None:
                return None
            inputs.append(value)
        for name in node.outputs:
            spec = specs.get(name) if name else None
            if spec is not None and spec.is_static and spec.nbytes > FOLD_MAX_BYTES:
                return None
        meta = node_meta(node, self.program.graph, specs)
        if placed.device == HOST:
            kernel, ctx = placed.kernel, step.ctx       # exactly what the run would call
        else:
            # a device kernel that may round differently from cpu_reference keeps its floats
            if (getattr(placed.kernel, "parity", None) != Parity.EXACT
                    and _floating([*inputs, *meta.outputs])):
                return None
            found = self.host.find(meta) if self.host is not None else None
            if found is None:
                return None
            kernel, provider = found
            ctx = ExecutionContext(meta, provider=provider)
        if kernel.workspace_requirement(meta).nbytes:
            return None
        outputs: list[Any] = [None] * len(node.outputs)
        try:
            with np.errstate(all="ignore"):       # as the executor: ONNX defines inf/nan
                kernel.execute_with_workspace(ctx, inputs, outputs, None)
        except Exception:  # noqa: BLE001
            # any kernel failure: not folded; the run executes the node and raises its
            # NodeError there, naming the node, as it would without folding
            return None
        return outputs


class FoldedInputs:
    """A step's call whose inputs at some positions are folded values, not run values.

    The folded values are the plan's (``Program.folded``: host arrays, or device tensors
    once the plan is bound), so they reach the step whether the run starts from the
    program's constants or pages its weights in (weight streaming); the step's slot at
    those positions is -1.
    """

    __slots__ = ("bound", "call", "values")

    def __init__(self, call: Any, bound: tuple[tuple[int, int], ...],
                 values: Mapping[int, Any]) -> None:
        self.call = call
        self.bound = bound          # (input position, folded slot)
        self.values = values

    def __call__(self, ctx: ExecutionContext, inputs: list[Any], outputs: list[Any],
                 workspace: Any) -> None:
        values = self.values
        for pos, slot in self.bound:   # the executor builds a new inputs list per call
            inputs[pos] = values[slot]
        self.call(ctx, inputs, outputs, workspace)

    def __repr__(self) -> str:
        return f"FoldedInputs({self.call!r}, slots={[s for _, s in self.bound]})"
