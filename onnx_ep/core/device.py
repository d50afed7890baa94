"""A session's hold on one non-host device: runtime, stream, uploaded weights, plan arenas.

Device providers (``Provider.device != "cpu"``) supply a :class:`DeviceRuntime`;
this module reserves every byte through the device's memory authority first and
only then asks the runtime to back the reservation with device memory. Kernels on
the device never allocate: their outputs arrive pre-bound as views of the plan's
arena (see docs/MEMORY.md).
"""

from __future__ import annotations

from typing import Any

from onnx_ep.core.graph import Graph
from onnx_ep.core.kernel import Provider, TensorSpec, WorkspaceLifetime, WorkspaceView
from onnx_ep.core.memory import DeviceMemoryAuthority, Reservation, Role, authority_for
from onnx_ep.core.placement import CopyStep
from onnx_ep.core.planner import ExecutionPlan, step_aliases, step_device
from onnx_ep.errors import PlanError


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
        self.weight_bytes = 0

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

    def upload_constants(self, uploads: list[CopyStep], graph: Graph) -> dict[str, Any]:
        """Upload every initializer read on the device once; reserved as WEIGHTS.

        Idempotent per value: a re-placed program reuses what an earlier one uploaded.
        """
        out: dict[str, Any] = {}
        for c in uploads:
            if c.dst in self._uploaded:
                out[c.dst] = self._uploaded[c.dst]
                continue
            arr = graph.initializers[c.src]
            spec = TensorSpec(arr.dtype, arr.shape)
            alloc = self._allocate(max(spec.nbytes, 1), Role.WEIGHTS)
            out[c.dst] = self._uploaded[c.dst] = self.runtime.upload(
                arr, self.runtime.tensor(alloc, 0, spec), self.stream)
            self.weight_bytes += spec.nbytes
        self.runtime.synchronize(self.stream)
        return out

    def bind_plan(self, plan: ExecutionPlan) -> None:
        """Allocate the plan's arena and workspace slots; pre-bind every device output.

        Held for the session's life (one stream runs one run at a time), so a cached
        signature allocates nothing.

        :raises PlanError: a device step whose output size is unknown at plan time.
        :raises AdmissionRefused: the arena does not fit the budget.
        """
        mark = len(self._held)
        try:
            self._bind(plan)
        except BaseException:
            # roll back whatever this plan got: the ledger is as before the call
            for a in self._allocations[mark:]:
                a.free()
            for r in self._held[mark:]:
                r.release()
            del self._allocations[mark:], self._held[mark:]
            raise

    def _bind(self, plan: ExecutionPlan) -> None:
        program, arena, ws = plan.program, plan.arena, plan.workspace
        base = self._allocate(max(arena.size, 1), Role.ACTIVATIONS)
        step_ws = self._allocate(ws.step_peak, Role.WORKSPACE_STEP) if ws.step_peak else None
        session_ws = (self._allocate(ws.session_peak, Role.WORKSPACE_SESSION)
                      if ws.session_peak else None)
        name_of = {s: n for n, s in program.slot_of.items()}
        prebound: list[tuple[Any, ...]] = []
        for st in program.steps:
            on_device = step_device(st) == self.device
            aliases = step_aliases(st)
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
        plan.prebound = prebound
        views: list[WorkspaceView | None] = []
        for req, off in zip(ws.per_step, ws.session_offsets):
            if req.nbytes == 0:
                views.append(None)
            elif req.lifetime is WorkspaceLifetime.SESSION_PERSISTENT:
                assert session_ws is not None
                views.append(WorkspaceView(self.runtime.tensor(
                    session_ws, off, TensorSpec("uint8", (req.nbytes,))), req.nbytes,
                    req.lifetime))
            else:
                assert step_ws is not None
                views.append(WorkspaceView(self.runtime.tensor(
                    step_ws, 0, TensorSpec("uint8", (req.nbytes,))), req.nbytes, req.lifetime))
        plan.device_workspaces = views

    def close(self) -> None:
        """Free device memory and release every reservation (idempotent)."""
        allocations, self._allocations = self._allocations, []
        for a in allocations:
            a.free()
        held, self._held = self._held, []
        for r in held:
            r.release()
        self._uploaded.clear()
