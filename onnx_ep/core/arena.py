"""The activation arena of one plan: offsets of every activation, reused across lifetimes.

Packing is greedy by size (largest first), each buffer at the lowest aligned offset that
overlaps no placed buffer whose lifetime overlaps its own. See docs/MEMORY.md ("Planning,
per shape signature").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import align_up

if TYPE_CHECKING:
    from onnx_ep.core.planner import Program, Step

#: arena offsets are aligned like numpy's default allocations
ARENA_ALIGNMENT = 64


@attrs.frozen
class ArenaPlan:
    """Offsets of every activation in one arena at one shape signature.

    :ivar offsets: ``{slot: byte offset}`` for activations of known size.
    :ivar size: the arena's bytes (end of the highest placed buffer).
    :ivar naive_bytes: sum of all activation sizes (no reuse).
    :ivar live_peak_bytes: peak of simultaneously live bytes (the lower bound).
    """

    offsets: dict[int, int]
    size: int
    naive_bytes: int
    live_peak_bytes: int


def step_device(step: Step) -> str:
    """The device a step's outputs live on."""
    if step.copy is not None:
        return step.copy.dst_device
    return step.placed.device if step.placed is not None else "cpu"


def step_aliases(step: Step, inputs: Sequence[TensorSpec | None] | None = None,
                 program: Program | None = None) -> dict[int, int]:
    """``{output index: input index}`` for outputs that are views of an input (Reshape).

    Declared by a kernel's optional ``aliases`` attribute, or at one signature by its
    optional ``aliases_at(inputs)`` (``inputs``: the step's input specs; a Transpose that
    only moves axes of size 1 is a view at that shape). Such outputs get no arena slot:
    the kernel stores a view of the input, whose buffer lives as long as the view.

    A kernel with ``writes_in_place = True`` writes through its view (GroupQueryAttention
    appends the new keys to the past it was given). Its alias holds only where no other
    step, graph output or constant shares that input (checked against ``program``);
    elsewhere the output is a buffer of its own and the kernel copies into it.
    """
    kernel = step.placed.kernel if step.placed is not None else None
    aliases = dict(getattr(kernel, "aliases", None) or {})
    at = getattr(kernel, "aliases_at", None)
    if at is not None and inputs is not None:
        aliases.update(at(inputs) or {})
    if aliases and getattr(kernel, "writes_in_place", False):
        aliases = {j: i for j, i in aliases.items()
                   if program is not None and i < len(step.in_slots)
                   and sole_reader(program, step, step.in_slots[i])}
    return aliases


def sole_reader(program: Program, step: Step, slot: int) -> bool:
    """Whether ``step`` is the only reader of ``slot`` and nothing else holds it."""
    if slot < 0 or slot in program.output_slots or slot in program.outer_slots or any(
            c == slot for c, _ in program.constants):
        return False
    return sum(slot in st.in_slots or any(s == slot for _, s in st.scope_slots)
               for st in program.steps) == 1 and step.in_slots.count(slot) == 1


def plan_arena(program: Program, specs: dict[str, TensorSpec | None],
               device: str | None = None) -> ArenaPlan:
    """Pack activations into one arena, reusing offsets when lifetimes do not overlap.

    With ``device``, only values produced on that device are placed (a device session's
    host-side values are numpy arrays, not arena bytes).

    Greedy by size (largest first), each buffer at the lowest aligned offset that
    does not overlap a placed buffer whose lifetime overlaps its own. Graph
    inputs belong to the caller and initializers to the weights, so neither is
    placed; graph outputs live to the end of the run.
    """
    name_of = {s: n for n, s in program.slot_of.items()}
    skip = {c for c, _ in program.constants} | set(program.input_slots) | set(
        program.outer_slots)
    n_steps = len(program.steps)
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    root: dict[int, int] = {}     # alias slot -> the slot whose buffer it views

    def live_until(s: int, i: int) -> None:
        r = root.get(s, s)
        if r in start:
            end[r] = max(end[r], i)

    for i, st in enumerate(program.steps):
        if device is not None and step_device(st) != device:
            for s in st.in_slots:      # a host step reading a device value keeps it alive
                live_until(s, i)
            continue      # a device session's arena holds only that device's values
        aliases = step_aliases(st, [specs.get(name_of.get(s, "")) for s in st.in_slots],
                               program) if device is not None else {}
        for s in st.in_slots:
            live_until(s, i)
        for j, s in enumerate(st.out_slots):
            if s < 0 or s in skip:
                continue
            if j in aliases and aliases[j] < len(st.in_slots):
                src = st.in_slots[aliases[j]]
                root[s] = root.get(src, src)
                live_until(s, i)
                continue
            start.setdefault(s, i)
            end[s] = i
    for s in program.output_slots:
        live_until(s, n_steps)
    # control-flow nodes also read outer-scope values through their subgraphs
    for i, st in enumerate(program.steps):
        for _, s in st.scope_slots:
            live_until(s, i)

    sizes: dict[int, int] = {}
    for s in start:
        spec = specs.get(name_of.get(s, ""))
        if spec is not None and spec.is_static:
            sizes[s] = align_up(spec.nbytes, ARENA_ALIGNMENT)
    placed: list[tuple[int, int, int, int]] = []     # (offset, size, start, end)
    offsets: dict[int, int] = {}
    for s in sorted(sizes, key=lambda x: (-sizes[x], start[x])):
        size, a, b = sizes[s], start[s], end[s]
        conflicts = sorted((o, o + sz) for o, sz, a2, b2 in placed if a2 <= b and a <= b2)
        offset = 0
        for lo, hi in conflicts:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        offsets[s] = offset
        placed.append((offset, size, a, b))
    arena = max((o + sz for o, sz, _, _ in placed), default=0)
    naive = sum(sizes.values())
    # live-bytes peak over steps, with the same lifetimes
    events = sorted([(start[s], sz) for s, sz in sizes.items()] +
                    [(end[s] + 1, -sz) for s, sz in sizes.items()], key=lambda e: (e[0], e[1]))
    live = live_peak = 0
    for _, delta in events:
        live += delta
        live_peak = max(live_peak, live)
    return ArenaPlan(offsets, arena, naive, live_peak)
