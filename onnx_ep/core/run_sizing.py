"""Bytes a plan cannot size: host outputs whose size depends on input values, admitted step
by step while the run goes.

The planner sizes every value whose shape the signature decides and admits its arena before
the run. An output whose size depends on the values a run computes (ConstantOfShape, Expand
with a computed shape, Tile, Range, OneHot, ... fed by a graph input) cannot be sized then.
Before such a step runs, :class:`RunMeter` sizes its outputs from the step's real inputs and
reserves their bytes through the memory authority, holder the run, role ``activations``: a
request that cannot fit raises :exc:`CapacityUnavailable` / :exc:`TierExhausted` naming the
node and the bytes, before anything is allocated. The bytes stay in the ledger until the run
ends (a loop body's, until that iteration ends), released on success, error and
cancellation alike: an upper bound of what is live, never less. See docs/MEMORY.md.

Sizing, cheapest first: the kernel's optional ``output_specs_at_run(meta, inputs)``; a
formula for the ops whose size is a function of input values (:data:`VALUE_SIZED`); the
kernel's ``infer_outputs(meta)`` with the run's input specs and small integer inputs as
constants; onnx's inference of the node with those inputs as data
(:func:`graph.infer_node`).
A step whose outputs none of them can size is charged what it produced right after it ran:
still in the ledger, but after the allocation; the meter counts those steps (``unsized``) so
a test can prove a run had none. Control flow (If, Loop, Scan on the host) is the exception
by nature: its bodies' steps are metered as they run, and the node's own outputs (a Loop's
scan outputs grow with the trip count the body decides) are charged when it returns.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.graph import infer_node
from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import DeviceMemoryAuthority, Reservation, Role
from onnx_ep.core.subgraphs import spec_of
from onnx_ep.errors import AdmissionRefused

#: inputs at most this many elements long are handed to onnx's inference as data
SMALL_INPUT = 64


def _ints(x: Any) -> list[int] | None:
    a = np.asarray(x)
    if a.dtype.kind not in "iu" or a.ndim > 1:
        return None
    return [int(v) for v in a.reshape(-1)]


def _constant_of_shape(meta: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    dims = _ints(args[0])
    value = meta.attr("value")
    dtype = np.asarray(value).dtype if value is not None else np.dtype(np.float32)
    return [TensorSpec(dtype, tuple(dims))] if dims is not None else None


def _expand(meta: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    dims = _ints(args[1])
    if dims is None:
        return None
    x = np.asarray(args[0]) if not hasattr(args[0], "shape") else args[0]
    shape = tuple(x.shape)
    rank = max(len(shape), len(dims))
    a = (1,) * (rank - len(shape)) + shape
    b = (1,) * (rank - len(dims)) + tuple(dims)
    out = []
    for p, q in zip(a, b):
        if p != q and 1 not in (p, q):
            return None                  # the kernel raises its own error
        out.append(max(p, q) if 0 not in (p, q) else 0)
    return [TensorSpec(x.dtype, tuple(out))]


def _tile(meta: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    reps = _ints(args[1])
    x = args[0]
    if reps is None or len(reps) != x.ndim:
        return None
    return [TensorSpec(x.dtype, tuple(d * r for d, r in zip(x.shape, reps)))]


def _range(meta: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    start, limit, delta = (np.asarray(a).reshape(-1)[0] for a in args[:3])
    if delta == 0 or not all(math.isfinite(float(v)) for v in (start, limit, delta)):
        return None
    if np.asarray(args[0]).dtype.kind in "iu":
        n = -(-(int(limit) - int(start)) // int(delta))
    else:
        n = math.ceil((float(limit) - float(start)) / float(delta))
    return [TensorSpec(np.asarray(args[0]).dtype, (max(n, 0),))]


def _one_hot(meta: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    depth = np.asarray(args[1]).reshape(-1)
    if depth.size != 1 or not np.isfinite(depth[0]):
        return None
    indices, values = args[0], np.asarray(args[2])
    axis = int(meta.attr("axis", -1))
    rank = indices.ndim + 1
    if not -rank <= axis < rank:
        return None
    shape = list(indices.shape)
    shape.insert(axis % rank, int(depth[0]))
    return [TensorSpec(values.dtype, tuple(shape))]


def _unique(meta: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    # at most every element is unique: the bound is reserved, what is made is smaller
    x = args[0]
    axis = meta.attr("axis")
    y = (x.size,) if axis is None else x.shape
    n = x.size if axis is None else x.shape[int(axis) % max(x.ndim, 1)]
    i64 = np.dtype(np.int64)
    return [TensorSpec(x.dtype, tuple(y)), TensorSpec(i64, (n,)), TensorSpec(i64, (x.size,)),
            TensorSpec(i64, (n,))][:len(meta.output_names) or 4]


def _non_zero(meta: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    x = args[0]
    return [TensorSpec(np.dtype(np.int64), (max(x.ndim, 1), x.size))]


def _compress(meta: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    return [TensorSpec(args[0].dtype, (args[0].size,))]


def _sequence_at(meta: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    seq, at = args[0], np.asarray(args[1]).reshape(-1)
    if not isinstance(seq, list) or at.size != 1 or not -len(seq) <= int(at[0]) < len(seq):
        return None
    return [spec_of(seq[int(at[0])])]        # type: ignore[list-item]


def _scalar(dtype: Any) -> Any:
    return lambda meta, args: [TensorSpec(np.dtype(dtype), ())]


#: ops whose outputs' size is a function of their inputs' values (or of a sequence's
#: elements, which onnx's inference cannot see), sized by a formula: an upper bound for the
#: selections (Unique, NonZero, Compress)
VALUE_SIZED = {"ConstantOfShape": _constant_of_shape, "Expand": _expand, "Tile": _tile,
               "Range": _range, "OneHot": _one_hot, "Unique": _unique, "NonZero": _non_zero,
               "Compress": _compress, "SequenceAt": _sequence_at,
               "SequenceLength": _scalar(np.int64), "OptionalHasElement": _scalar(np.bool_)}

#: onnx's inference per step, then per (input specs, small input values): a loop body's
#: steps meet the same shapes every iteration, and inference costs far more than a lookup.
#: Weak on the step, so a closed session's program (and its weights) is not kept alive.
_inferred: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], list[TensorSpec | None]]] = (
    weakref.WeakKeyDictionary())
#: entries kept per step (a step meeting ever new shapes starts over)
_INFERRED_PER_STEP = 64


def size_outputs(step: Any, args: Sequence[Any]) -> list[TensorSpec] | None:
    """The output specs of ``step`` on the host inputs ``args`` (at least what it will
    make), or ``None``."""
    placed = step.placed
    if placed is None or step.ctx is None:
        return None
    meta, node = step.ctx.node, placed.node
    hook = getattr(placed.kernel, "output_specs_at_run", None)
    try:
        if hook is not None:
            return hook(meta, args)
        if node.domain in ("", "ai.onnx") and node.op_type in VALUE_SIZED:
            return VALUE_SIZED[node.op_type](meta, args)
        specs = [spec_of(a) for a in args]
        known = {i: a for i, a in enumerate(args) if isinstance(a, np.ndarray)
                 and a.dtype.kind in "iu" and a.size <= SMALL_INPUT}
        key = (*((s.dtype, s.shape) if s is not None else None for s in specs),
               *((i, a.tobytes()) for i, a in known.items()))
        seen = _inferred.setdefault(step, {})
        out = seen.get(key)
        if out is None:
            infer = getattr(placed.kernel, "infer_outputs", None)
            # the kernel's own sizing (a custom op onnx cannot infer), at this run's inputs
            out = (list(infer(attrs.evolve(meta, inputs=tuple(specs),
                                           constants={**meta.constants, **known})))
                   if infer is not None else [])
            if not out or any(s is None for s in out):
                out = infer_node(node, meta.opset, specs, known)
            if len(seen) >= _INFERRED_PER_STEP:
                seen.clear()
            seen[key] = out
    except Exception:  # noqa: BLE001 - sizing is advisory: the kernel reports bad input
        return None
    if out is None or any(s is None for s in out):
        return None
    return out      # type: ignore[return-value]


def run_sized_steps(plan: Any) -> frozenset[int]:
    """The steps of ``plan`` a :class:`RunMeter` meters: host steps with an output the plan
    could not size, and host steps that run subgraphs (whose bodies run unplanned)."""
    from onnx_ep.core.arena import step_device

    program = plan.program
    name_of = {s: n for n, s in program.slot_of.items()}
    out = set()
    for i, st in enumerate(program.steps):
        if step_device(st) != "cpu":
            continue
        if st.has_subgraphs:
            out.add(i)
            continue
        for s in st.out_slots:
            spec = plan.specs.get(name_of.get(s, "")) if s >= 0 else None
            if s >= 0 and (spec is None or not spec.is_static):
                out.add(i)
                break
    return frozenset(out)


def _nbytes(value: Any) -> int:
    n = getattr(value, "nbytes", None)
    return int(n) if isinstance(n, (int, np.integer)) else 0


class RunMeter:
    """One run's bytes for the values its plan could not size (see the module's doc).

    :param authority: where the bytes are charged (the host's, also for the host steps of
        a device session).
    :param holder: the run (``session-3/run-7``).
    :param steps: indices of the top program's steps whose outputs are run-sized;
        ``None``: every step (an unplanned subgraph's run).
    """

    def __init__(self, authority: DeviceMemoryAuthority, holder: str,
                 steps: frozenset[int] | None, parent: RunMeter | None = None) -> None:
        self.authority = authority
        self.holder = holder
        self.steps = steps
        self._held: list[Reservation] = []
        self._root = parent._root if parent is not None else self
        self.sized = 0       #: steps sized before they ran (the whole run's, on the root)
        self.unsized = 0     #: steps charged after they ran (no way to size them first)

    def metered(self, index: int) -> bool:
        return self.steps is None or index in self.steps

    def child(self) -> RunMeter:
        """A meter for one run of an unplanned subgraph (a loop body's iteration): its
        bytes are released when that run ends."""
        return RunMeter(self.authority, self.holder, None, self)

    def before(self, step: Any, args: Sequence[Any]) -> Reservation | None:
        """Size the step's outputs and reserve them; None when they cannot be sized.

        :raises AdmissionRefused: naming the node and the bytes.
        """
        specs = size_outputs(step, args)
        if specs is None:
            return None
        try:
            need = sum(s.nbytes for s in specs)
        except ValueError:
            return None
        self._root.sized += 1
        return self._reserve(need, step, "its outputs need")

    def after(self, step: Any, outs: Sequence[Any], charged: Reservation | None) -> None:
        """Check what the step produced against what was reserved; charge what was not."""
        made = sum(_nbytes(v) for v in outs)
        have = charged.requested if charged is not None else 0
        if made <= have:
            return
        if charged is None and not step.has_subgraphs:
            # control flow is charged as its bodies produce: its outputs are theirs
            self._root.unsized += 1
        self._reserve(made - have, step, "it produced")

    def _reserve(self, nbytes: int, step: Any, what: str) -> Reservation | None:
        if nbytes <= 0:
            return None
        try:
            r = self.authority.reserve(nbytes, Role.ACTIVATIONS, self.holder)
        except AdmissionRefused as exc:
            op = step.placed.node.op_type if step.placed is not None else "copy"
            raise type(exc)(f"node {step.name!r} ({op}): {what} {nbytes} bytes, sized from "
                            f"this run's input values: {exc}", requested=exc.requested,
                            available=exc.available, holder=exc.holder) from None
        self._held.append(r)
        return r

    def release(self) -> None:
        """Give back every byte the run's unplanned values held (its end, whatever way)."""
        held, self._held = self._held, []
        for r in held:
            r.release()
