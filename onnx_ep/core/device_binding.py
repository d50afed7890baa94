"""A session's hold on one non-host device: runtime, stream, uploaded weights, plan arenas.

Device providers (``Provider.device != "cpu"``) supply a :class:`DeviceRuntime`;
this module reserves every byte through the device's memory authority first and
only then asks the runtime to back the reservation with device memory. Kernels on
the device never allocate: their outputs arrive pre-bound as views of the plan's
arena, and the values folded at the plan's signature are uploaded once beside it
(see docs/MEMORY.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.arena import step_aliases, step_device
from onnx_ep.core.graph import Graph
from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import DeviceMemoryAuthority, Reservation, Role, align_up, authority_for
from onnx_ep.core.pager import DevicePager
from onnx_ep.core.placement import CopyStep, PlacedNode
from onnx_ep.core.planner import ExecutionPlan, Program, workspace_views
from onnx_ep.core.provider import Provider
from onnx_ep.errors import PlanError

#: byte alignment of each folded value in its plan's block (as the weight pager's)
FOLDED_ALIGNMENT = 256


class PendingWeight:
    """A device weight's place in a program until the memory policy decides where it goes.

    Programs are built (and the static plan bound) before the policy is chosen; the
    session then calls :meth:`DeviceBinding.place_weights` and :meth:`DeviceBinding.adopt`.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<PendingWeight {self.name!r}>"


class DeviceBinding:
    """Everything a session holds on its device; released by :meth:`close`."""

    def __init__(self, device: str, provider: Provider, limit: int | None, holder: str) -> None:
        if provider.runtime is None:
            raise PlanError(f"provider {provider.name!r} runs on device {device!r} but "
                            f"registered no runtime()")
        self.device = device
        self.runtime = provider.runtime()
        self.stream = self.runtime.new_stream()
        self.authority: DeviceMemoryAuthority = authority_for(
            self.runtime.device, limit, self.runtime.granularity, budget=self.runtime.budget)
        self.holder = holder
        self._held: list[Reservation] = []
        self._allocations: list[Any] = []
        self._uploaded: dict[str, Any] = {}
        #: what each bound plan took, by id(plan): (allocations, reservations)
        self._plan_memory: dict[int, tuple[list[Any], list[Reservation]]] = {}
        #: the session's plans whose workspaces are views of the shared slots, by id(plan)
        self._sharing: dict[int, ExecutionPlan] = {}
        #: the shared workspace slots, by lifetime: (allocation, bytes, reservation) or None
        self._slots: dict[str, tuple[Any, int, Reservation] | None] = {"step": None,
                                                                       "session": None}
        self._pending: dict[str, Any] = {}      # device value name -> host array, unplaced
        self._placed = False
        #: the weight pager when the session streams weights, else None
        self.pager: DevicePager | None = None

    def _allocate(self, nbytes: int, role: Role) -> Any:
        r = self.authority.reserve(nbytes, role, self.holder)
        try:
            alloc = self.runtime.allocate(r)
        except BaseException:
            r.release()
            raise
        self._held.append(r)
        self._allocations.append(alloc)
        return alloc

    def upload_constants(self, uploads: list[CopyStep], graph: Graph,
                         scope: str = "") -> dict[str, Any]:
        """The device values of the initializers read on the device: every one known so far.

        Before :meth:`place_weights` they are :class:`PendingWeight` placeholders; after
        it, uploads reserved as WEIGHTS (full residency: a new one is uploaded now) or the
        pager's stable views. Every call returns all of them in one order, so every
        program of the session numbers its constants alike.

        :param scope: prefixed to the device names of ``graph``'s initializers: a subgraph
            may name an initializer as another graph does (two branches' ``val_0``), and
            each must get its own bytes.
        """
        new = False
        for c in uploads:
            name = scope + c.dst
            if name in self._uploaded or name in self._pending:
                continue
            arr = graph.initializers[c.src]
            if not self._placed:
                self._pending[name] = arr
            elif self.pager is not None:
                raise PlanError(f"a re-placed program reads weight {c.src!r} on {self.device}, "
                                f"which the weight pager did not lay out at load")
            else:
                self._upload(name, arr)
                new = True
        if not self._placed:
            return {n: PendingWeight(n) for n in self._pending}
        if new:
            self.runtime.synchronize(self.stream)
        return dict(self._uploaded)

    def _upload(self, name: str, arr: Any) -> None:
        spec = TensorSpec(arr.dtype, arr.shape)
        alloc = self._allocate(max(spec.nbytes, 1), Role.WEIGHTS)
        self._uploaded[name] = self.runtime.upload(
            arr, self.runtime.tensor(alloc, 0, spec), self.stream)

    def place_weights(self, program: Program, *, streaming: bool,
                      window_bytes: int | None = None) -> None:
        """Put the pending weights where the memory policy says (once per binding).

        Full residency uploads each weight into its own block. Streaming lays them out in
        one stable region paged by a :class:`~onnx_ep.core.pager.DevicePager` whose
        window takes what the budget has left after the plans bound so far.

        :param program: the session's program: its step order sets the layout and the
            largest step the window must hold.
        :raises AdmissionRefused: the weights (full) or one step's pages (streaming) do
            not fit. :raises PlanError: streaming on a runtime without ``stable_region``.
        """
        if self._placed:
            return
        pending = self._pending
        name_of = {s: n for n, s in program.slot_of.items()}
        reads = [(st.name, [name_of[s] for s in st.const_reads if name_of[s] in pending])
                 for st in program.steps]
        if streaming and pending:
            order = dict.fromkeys(n for _, names in reads for n in names)
            order.update(dict.fromkeys(pending))         # weights no step reads go last
            self.pager = DevicePager(self.runtime, [(n, pending[n]) for n in order], reads,
                                     window_bytes, self.authority, self.holder, self.stream)
            self._uploaded = {n: self.pager.views[n] for n in pending}
        else:
            for n, arr in pending.items():
                self._upload(n, arr)
            self.runtime.synchronize(self.stream)
        self._pending = {}
        self._placed = True

    def adopt(self, program: Program) -> None:
        """Let the runtime prepare ``program``'s device kernels (its optional ``prepare``:
        CUDA compiles their families in parallel); replace ``program``'s
        :class:`PendingWeight` constants by the placed weights; under streaming, check it
        numbers the weights as the pager serves them."""
        prepare = getattr(self.runtime, "prepare", None)
        if prepare is not None:
            prepare([s.kernel for s in program.placement.steps
                     if isinstance(s, PlacedNode) and s.device == self.device])
        if not self._placed:
            return
        for i, (_, v) in enumerate(program.constants):
            if isinstance(v, PendingWeight):
                program.replace_constant(i, self._uploaded[v.name])
        if self.pager is not None:
            self.pager.check_slots(program.slot_of)

    def bind_plan(self, plan: ExecutionPlan, *, shared: bool = False) -> None:
        """Allocate the plan's arena and workspace slots; pre-bind every device output;
        upload the plan's folded device values (``plan.device_constants``) once.

        Held until :meth:`release_plan` or :meth:`close` (one stream runs one run at a
        time), so a cached signature allocates nothing.

        :param shared: the plan's workspaces are views of the binding's two shared slots
            (step-scoped, session-persistent), each sized to the peak over the shared plans
            bound now, instead of slots of its own. The session's plans share them: they
            never run at once. A control-flow body's plan does not: it runs inside its
            caller's step, whose scratch (a Loop's carried state) is live meanwhile.
        :raises PlanError: a device step whose output size is unknown at plan time.
        :raises AdmissionRefused: the arena does not fit the budget.
        """
        mark, amark = len(self._held), len(self._allocations)
        try:
            self._bind(plan, shared)
        except BaseException:
            # roll back whatever this plan got: the ledger is as before the call
            for a in self._allocations[amark:]:
                a.free()
            for r in self._held[mark:]:
                r.release()
            del self._allocations[amark:], self._held[mark:]
            self._sharing.pop(id(plan), None)
            raise
        self._plan_memory[id(plan)] = (self._allocations[amark:], self._held[mark:])

    def slot_growth(self, plan: ExecutionPlan) -> tuple[int, int]:
        """Bytes binding ``plan`` shared adds for its (step, session) workspace slots: a
        slot that must grow is allocated anew at its new size before the old one is freed,
        so admitting the plan asks for the whole new size."""
        ws = plan.workspace
        return tuple(need if need > self._slot_bytes(kind) else 0   # type: ignore[return-value]
                     for kind, need in (("step", ws.step_peak), ("session", ws.session_peak)))

    def _slot_bytes(self, kind: str) -> int:
        slot = self._slots[kind]
        return slot[1] if slot is not None else 0

    def release_plan(self, plan: ExecutionPlan) -> None:
        """Free what :meth:`bind_plan` took for ``plan`` (a plan the session evicts); the
        shared slots shrink to the peak over the plans still bound. The plan cannot run
        afterwards."""
        # kernels queued on the stream may still read the plan's buffers, and a freed block
        # can go to another session's stream at once
        self.runtime.synchronize(self.stream)
        allocs, held = self._plan_memory.pop(id(plan), ([], []))
        gone = {id(x) for x in (*allocs, *held)}
        self._allocations = [a for a in self._allocations if id(a) not in gone]
        self._held = [r for r in self._held if id(r) not in gone]
        for a in allocs:
            a.free()
        for r in held:
            r.release()
        plan.prebound = plan.device_workspaces = None
        if self._sharing.pop(id(plan), None) is not None:
            self._fit_slots()

    def _fit_slots(self) -> None:
        """Size each shared slot to the peak over the shared plans bound now; re-carve their
        views and drop their recorded graphs when a slot moved (the graphs hold its old
        address and record again at their next run). All or nothing: when a new slot cannot
        be had, the old ones stay."""
        plans = list(self._sharing.values())
        want = {"step": max((p.workspace.step_peak for p in plans), default=0),
                "session": max((p.workspace.session_peak for p in plans), default=0)}
        changed = [k for k, need in want.items() if need != self._slot_bytes(k)]
        if not changed:
            return
        fresh: dict[str, tuple[Any, int, Reservation]] = {}
        try:
            for kind in changed:
                if want[kind]:
                    fresh[kind] = (*self._allocate_slot(want[kind], kind),)
        except BaseException:
            for alloc, _, r in fresh.values():
                alloc.free()
                r.release()
            raise
        old_session = self._slots["session"]
        new_session = fresh.get("session")
        if "session" in changed and old_session is not None and new_session is not None:
            # persistent contents survive a move, as on the host
            from onnx_ep.core.executor import copy_all
            n = min(old_session[1], new_session[1])
            copy_all(self.runtime, [(self._slot_view(old_session[0], 0, n),
                                     self._slot_view(new_session[0], 0, n))], self.stream)
        # kernels queued on the stream may still use the old slots
        self.runtime.synchronize(self.stream)
        for kind in changed:
            old, self._slots[kind] = self._slots[kind], fresh.get(kind)
            if old is not None:
                old[0].free()
                old[2].release()
        for p in plans:
            p.device_workspaces = self._views(p)
            if p.capture is not None:
                p.capture.evict()

    def _allocate_slot(self, nbytes: int, kind: str) -> tuple[Any, int, Reservation]:
        role = Role.WORKSPACE_STEP if kind == "step" else Role.WORKSPACE_SESSION
        r = self.authority.reserve(nbytes, role, self.holder)
        try:
            return self.runtime.allocate(r), nbytes, r
        except BaseException:
            r.release()
            raise

    def _slot_view(self, alloc: Any, off: int, n: int) -> Any:
        return self.runtime.tensor(alloc, off, TensorSpec("uint8", (n,)))

    def _views(self, plan: ExecutionPlan, step_ws: Any = None,
               session_ws: Any = None) -> list[Any]:
        """Workspace views of ``plan``'s device steps carved from the given blocks, else the
        shared slots. A host step of a device plan (a node that fell back) gets ``None``: its
        kernel makes its own host scratch (KERNELS.md), as a device buffer is no use to it."""
        if step_ws is None and self._slots["step"] is not None:
            step_ws = self._slots["step"][0]
        if session_ws is None and self._slots["session"] is not None:
            session_ws = self._slots["session"][0]
        views = workspace_views(plan.workspace,
                                lambda off, n: self._slot_view(session_ws, off, n),
                                lambda n: self._slot_view(step_ws, 0, n))
        return [v if step_device(st) == self.device else None
                for st, v in zip(plan.program.steps, views)]

    def _bind(self, plan: ExecutionPlan, shared: bool) -> None:
        program, arena, ws = plan.program, plan.arena, plan.workspace
        base = self._allocate(max(arena.size, 1), Role.ACTIVATIONS)
        name_of = {s: n for n, s in program.slot_of.items()}
        prebound: list[tuple[Any, ...]] = []
        for st in program.steps:
            on_device = step_device(st) == self.device
            if on_device and getattr(getattr(st.placed, "kernel", None), "sizes_at_run", False):
                prebound.append((None,) * len(st.out_slots))   # it makes its own (dynamic.py)
                continue
            aliases = step_aliases(st, [plan.specs.get(name_of.get(s, "")) for s in st.in_slots],
                                   program)
            outs: list[Any] = []
            for j, s in enumerate(st.out_slots):
                if on_device and s >= 0 and j in aliases:
                    outs.append(plan.specs.get(name_of[s]))   # a view: its planned spec
                    continue
                if not on_device or s < 0:
                    outs.append(None)       # host value or unused output
                    continue
                off = arena.offsets.get(s)
                spec = plan.specs.get(name_of[s])
                if off is None or spec is None:
                    raise PlanError(f"step {st.name!r} on {self.device}: the size of output "
                                    f"{name_of[s]!r} is unknown at plan time (onnx shape "
                                    f"inference and the kernel's infer_outputs() gave none)")
                outs.append(self.runtime.tensor(base, off, spec))
            prebound.append(tuple(outs))
        if shared:
            self._sharing[id(plan)] = plan
            self._fit_slots()
            plan.device_workspaces = self._views(plan)
        else:
            step_ws = self._allocate(ws.step_peak, Role.WORKSPACE_STEP) if ws.step_peak else None
            session_ws = (self._allocate(ws.session_peak, Role.WORKSPACE_SESSION)
                          if ws.session_peak else None)
            plan.device_workspaces = self._views(plan, step_ws, session_ws)
        plan.prebound = prebound
        if plan.device_constants:
            self._upload_folded(plan)

    def _upload_folded(self, plan: ExecutionPlan) -> None:
        """Upload the plan's folded device values into one block and hand them to its
        program's steps (``program.folded``), which read them like weights: same address on
        every run, nothing copied during a run.

        The block is charged like the plan's arena (``activations``, held by the session
        until it closes): bytes of this one signature, not weights of the model.
        """
        layout: list[tuple[int, np.ndarray, TensorSpec, int]] = []
        total = 0
        for slot, arr in plan.device_constants.items():
            spec = TensorSpec(arr.dtype, arr.shape)
            layout.append((slot, arr, spec, total))
            total += align_up(spec.nbytes, FOLDED_ALIGNMENT)
        block = self._allocate(max(total, 1), Role.ACTIVATIONS)
        for slot, arr, spec, off in layout:
            tensor = self.runtime.tensor(block, off, spec)
            if spec.nbytes:
                # order="C" keeps a 0-d value 0-d (ascontiguousarray would make it 1-d)
                tensor = self.runtime.upload(np.asarray(arr, order="C"), tensor, self.stream)
            plan.program.folded[slot] = tensor
        # as for the weights: the values are on the device before any run reads them
        self.runtime.synchronize(self.stream)

    def close(self) -> None:
        """Free device memory and release every reservation (idempotent)."""
        pager, self.pager = self.pager, None
        if pager is not None:
            # unmapping is not stream-ordered: let queued readers of the weights finish
            try:
                self.runtime.synchronize(self.stream)
            finally:
                pager.close()
        self._plan_memory.clear()
        self._sharing.clear()
        slots = [v for v in self._slots.values() if v is not None]
        self._slots = {"step": None, "session": None}
        for alloc, _, r in slots:
            alloc.free()
            r.release()
        allocations, self._allocations = self._allocations, []
        for a in allocations:
            a.free()
        held, self._held = self._held, []
        for r in held:
            r.release()
        self._uploaded.clear()
