"""Built-in memory policies: ``full_resident`` and ``weight_streaming`` (registered ``trylast``).

``full_resident`` keeps every weight on the device for the session's life.
``weight_streaming`` keeps weights in host memory and pages them into a
bounded window before the steps that read them, evicting least recently used
weights; counters record page-ins, evictions and bytes moved. On the CPU
provider the window is a bounded buffer pool under the same budget
(:class:`WeightStore`); on a device it is a pool of physical pages mapped under
one stable address range (:class:`onnx_ep.core.pager.DevicePager`), which the
session sets as the policy's ``store``. See docs/MEMORY.md.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.memory import DeviceMemoryAuthority, Reservation, Role, allocate_host
from onnx_ep.errors import CapacityUnavailable, OptionsError
from onnx_ep.plugins.hookspecs import hookimpl

#: overrides the policy choice of every session (``full_resident`` / ``weight_streaming``)
POLICY_ENV = "ONNX_EP_MEMORY_POLICY"


class FullResident:
    """Every weight resident for the session's life. Never pages."""

    name = "full_resident"
    streams = False

    def counters(self) -> dict[str, int]:
        return {"page_ins": 0, "evictions": 0, "bytes_moved": 0}


class WeightStreaming:
    """Weights live on the host and page into a bounded window of ``window_bytes``.

    :param window_bytes: window size; ``None`` sizes it when the session binds
        (half the free budget, but at least what the largest step reads at once).
    """

    name = "weight_streaming"
    streams = True

    def __init__(self, window_bytes: int | None = None) -> None:
        self.window_bytes = window_bytes
        self.store: WeightStore | None = None

    def counters(self) -> dict[str, int]:
        if self.store is None:
            return {"page_ins": 0, "evictions": 0, "bytes_moved": 0}
        return self.store.counters()


class WeightStore:
    """The window: LRU of paged-in weights under one WEIGHTS reservation.

    ``page_in`` pins the weights of the step being run so they are never
    evicted under it. A step whose weights exceed the window is refused at
    bind time (:exc:`CapacityUnavailable`), not halfway through a run.
    """

    def __init__(self, host: Mapping[int, np.ndarray], step_reads: Sequence[Sequence[int]],
                 window_bytes: int | None, authority: DeviceMemoryAuthority,
                 holder: str) -> None:
        """:param step_reads: per step, the weight slots it reads (paged in together)."""
        self.host = dict(host)
        self._sizes = {s: authority.round_up(a.nbytes) for s, a in self.host.items()}
        # a step's need in the same granule-rounded bytes page_in charges the window
        need = max((sum(self._sizes[s] for s in reads) for reads in step_reads), default=0)
        total = sum(self._sizes.values())
        if window_bytes is None:
            window_bytes = min(total, max(need, authority.available // 2))
            if window_bytes > authority.available:
                raise CapacityUnavailable(
                    f"{holder}: one step reads {need} weight bytes at once but only "
                    f"{authority.available} bytes of the {authority.budget}-byte budget on "
                    f"{authority.device} are free for the streaming window; raise memory_limit",
                    requested=need, available=authority.available, holder=holder)
        if window_bytes < need:
            raise CapacityUnavailable(
                f"{holder}: one step reads {need} weight bytes at once but the streaming "
                f"window is {window_bytes} bytes; raise memory_limit",
                requested=need, available=window_bytes, holder=holder)
        self.window_bytes = int(window_bytes)
        self.reservation: Reservation = authority.reserve(self.window_bytes, Role.WEIGHTS, holder)
        self._resident: OrderedDict[int, np.ndarray] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self.page_ins = self.evictions = self.bytes_moved = 0

    def page_in(self, slots: Sequence[int]) -> list[np.ndarray]:
        """Make ``slots`` resident (evicting LRU others) and return their window copies."""
        out = []
        with self._lock:
            pinned = set(slots)
            for s in slots:
                buf = self._resident.get(s)
                if buf is not None:
                    self._resident.move_to_end(s)
                    out.append(buf)
                    continue
                size = self._sizes[s]
                while self._used + size > self.window_bytes:
                    victim = next(v for v in self._resident if v not in pinned)
                    del self._resident[victim]
                    self._used -= self._sizes[victim]
                    self.evictions += 1
                src = self.host[s]
                if src.dtype == object:   # strings have no fixed-size bytes to page
                    view = src.copy()
                else:
                    view = allocate_host(src.nbytes, self.reservation).view(
                        src.dtype).reshape(src.shape)
                    np.copyto(view, src)
                self._resident[s] = view
                self._used += size
                self.page_ins += 1
                self.bytes_moved += src.nbytes
                out.append(view)
        return out

    def counters(self) -> dict[str, int]:
        return {"page_ins": self.page_ins, "evictions": self.evictions,
                "bytes_moved": self.bytes_moved, "window_bytes": self.window_bytes,
                "resident_bytes": self._used}

    def close(self) -> None:
        self._resident.clear()
        self.reservation.release()


def policy_by_name(name: str) -> Any:
    if name == "full_resident":
        return FullResident()
    if name == "weight_streaming":
        return WeightStreaming()
    raise OptionsError(f"unknown memory policy {name!r}; built-ins are 'full_resident' and "
                       f"'weight_streaming'")


def forced_policy(options: Any) -> Any:
    """The policy forced by ``ONNX_EP_MEMORY_POLICY`` or ``options.memory_policy``, else None.

    A forced choice beats every plugin's ``onnx_ep_select_memory_policy``.
    """
    forced = os.environ.get(POLICY_ENV) or getattr(options, "memory_policy", None)
    return policy_by_name(forced) if forced else None


@hookimpl(trylast=True)
def onnx_ep_select_memory_policy(model_bytes: int, planned_peak: int, budget: int,
                                 options: Any) -> Any:
    if model_bytes + planned_peak <= budget:
        return FullResident()
    return WeightStreaming()
