"""Weight streaming: the windows weights page through, on the host and on a device.

On the host, :class:`WeightStore` keeps an LRU of weight copies in a bounded window
charged to the authority as one ``weights`` reservation.

A device session whose memory policy streams (docs/MEMORY.md) uploads no weight into
ordinary blocks. :class:`DevicePager` lays every initializer read on the device into one
:class:`~onnx_ep.core.provider.StableRegion` (packed in first-use order, 256-byte aligned),
keeps the host copies, and backs a bounded window of physical pages, all charged to the
authority as one ``weights`` reservation. Before a step runs, :meth:`DevicePager.page_in`
makes the pages its weights lie on resident: a free page, or the least recently used page
the step does not need, unmapped and mapped at the new offset, then filled from the host
with an async copy on the session's stream. A weight has the same address on every run,
so a CUDA graph recorded once stays valid while pages move underneath it.

Ordering. The page copies and the kernels share one stream, so a copy never overtakes an
earlier kernel. Unmapping is different: it takes effect on the host at once, outside
stream order, while a kernel still queued may read the page being taken away (PyTorch's
expandable segments synchronize the stream before ``cuMemUnmap`` for the same reason).
So each page-in records a fence on the stream covering the steps queued so far, and an
eviction first waits for the victim's fence: a page last read long ago costs nothing (its
fence has passed), a page the previous step read drains the stream first. ``fence_waits``
counts those host waits.

Pages vs weights. The unit of residency is the page (the runtime's mapping granule,
2 MiB on an H200), not the weight: small weights (biases, norms) share pages instead of
costing a granule each, and a step's need is the set of pages its weights touch.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import (
    DeviceMemoryAuthority,
    Fit,
    Reservation,
    Role,
    align_up,
    allocate_host,
)
from onnx_ep.errors import CapacityUnavailable, PlanError

#: byte alignment of each weight inside the region (cuBLASLt and vector loads want >= 16)
ALIGN = 256
#: fences kept before the oldest finished ones are recycled
_FENCE_BACKLOG = 16


class _Weight:
    __slots__ = ("name", "array", "offset", "nbytes", "pages")

    def __init__(self, name: str, array: np.ndarray, offset: int, page_bytes: int) -> None:
        self.name = name
        self.array = array
        self.offset = offset
        self.nbytes = array.nbytes
        end = offset + self.nbytes
        self.pages = range(offset // page_bytes, -(-end // page_bytes)) if self.nbytes else \
            range(0)


class DevicePager:
    """The streamed weights of one device session: a stable region and a window of pages.

    :param runtime: the device runtime; must define ``stable_region(nbytes, holder)``.
    :param weights: ``(device value name, host array)`` of every weight, in first-use order.
    :param step_reads: ``(step name, weight names)`` per step, to size the window.
    :param window_bytes: the window; ``None`` takes half of what the budget has free (after
        the plan's arena and workspaces), but at least what one step reads at once.
    :param authority: the device's authority; the window is charged as ``weights``.
    :param stream: the session's stream; page copies and fences go there.
    :raises PlanError: the runtime cannot page (no ``stable_region``).
    :raises CapacityUnavailable: one step reads more pages than the window can hold.
    """

    def __init__(self, runtime: Any, weights: Sequence[tuple[str, np.ndarray]],
                 step_reads: Sequence[tuple[str, Sequence[str]]], window_bytes: int | None,
                 authority: DeviceMemoryAuthority, holder: str, stream: Any) -> None:
        make = getattr(runtime, "stable_region", None)
        if make is None:
            raise PlanError(
                f"{holder}: weight_streaming on {authority.device}: the device runtime "
                f"{type(runtime).__name__} has no stable_region(), so its weights cannot be "
                f"paged; raise memory_limit so they fit, or run on cpu_reference")
        self.holder = holder
        self.stream = stream
        self.authority = authority
        total = 0
        hosts: list[tuple[str, np.ndarray, int]] = []
        for name, arr in weights:
            host = np.asarray(arr, order="C")   # ascontiguousarray would make 0-d 1-d
            hosts.append((name, host, total))
            total += align_up(host.nbytes, ALIGN)
        self.region = make(max(total, 1), holder)
        try:
            self._setup(hosts, step_reads, window_bytes)
        except BaseException:
            self.region.close()
            raise

    def _setup(self, hosts: list[tuple[str, np.ndarray, int]],
               step_reads: Sequence[tuple[str, Sequence[str]]],
               window_bytes: int | None) -> None:
        region, authority = self.region, self.authority
        P = self.page_bytes = int(region.page_bytes)
        self.weights = {n: _Weight(n, a, off, P) for n, a, off in hosts}
        n_pages = region.nbytes // P
        # host bytes to copy into each page: (region offset, uint8 view of a weight)
        self._segments: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(n_pages)]
        for w in self.weights.values():
            raw = w.array.reshape(-1).view(np.uint8)
            for p in w.pages:
                lo, hi = max(w.offset, p * P), min(w.offset + w.nbytes, (p + 1) * P)
                self._segments[p].append((lo, raw[lo - w.offset:hi - w.offset]))
        need, need_step = 0, ""
        for step, names in step_reads:
            k = len({p for n in names if n in self.weights for p in self.weights[n].pages})
            if k > need:
                need, need_step = k, step
        free = authority.available
        if window_bytes is None:
            n_window = min(n_pages, max(need, free // 2 // P))
        else:
            n_window = min(n_pages, int(window_bytes) // P)
        if n_window < need or authority.fit(n_window * P) is not Fit.FITS:
            fits = authority.budget - free + need * P
            where = (f"the streaming window is {int(window_bytes)} bytes"
                     if window_bytes is not None and n_window < need else
                     f"only {free} of the {authority.budget}-byte budget on "
                     f"{authority.device} are free for the streaming window (after the "
                     f"plan's arena and workspaces)")
            raise CapacityUnavailable(
                f"{self.holder}: weight streaming: step {need_step!r} reads {need} page(s) of "
                f"{P} bytes ({need * P} bytes) of weights at once, but {where}; a "
                f"memory_limit of at least {fits} bytes would fit it", requested=need * P,
                available=free, holder=self.holder)
        self.window_pages = n_window
        self.reservation = authority.reserve(n_window * P, Role.WEIGHTS, self.holder)
        try:
            self._free = [region.new_page(self.reservation) for _ in range(n_window)]
        except BaseException:
            self.reservation.release()
            raise
        #: the stable device tensor of each weight, by device value name
        self.views: dict[str, Any] = {
            w.name: region.tensor(w.offset, TensorSpec(w.array.dtype, w.array.shape))
            for w in self.weights.values()}
        self._resident: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._fence_of: dict[int, int] = {}     # page -> seq of the fence after its last use
        self._fences: collections.deque[tuple[int, Any]] = collections.deque()
        self._seq = self._done = 0
        self._last: tuple[int, ...] = ()        # pages of the previous page-in
        self._calls: dict[tuple[int, ...], tuple[tuple[int, ...], list[Any]]] = {}
        self._slot_weight: dict[int, _Weight] = {}
        self._slot_host: dict[int, Any] = {}
        self._slot_of: dict[str, int] = {}
        self._lock = threading.Lock()
        self.page_ins = self.evictions = self.remaps = self.bytes_moved = 0
        self.fence_waits = 0
        self.closed = False

    # ------------------------------------------------------------ the executor's side
    def bind(self, slot_of: Mapping[str, int], constants: Sequence[tuple[int, Any]]) -> None:
        """Resolve the executor's slots: device weights by name, other constants as given.

        Every program of the session numbers its constants alike (the graph's initializers,
        then every device weight in one order), so one binding serves them all; see
        :meth:`check_slots`.
        """
        self._slot_of = {n: slot_of[n] for n in self.weights if n in slot_of}
        self._slot_weight = {s: self.weights[n] for n, s in self._slot_of.items()}
        self._slot_host = {s: v for s, v in constants if s not in self._slot_weight}
        self._calls.clear()

    def check_slots(self, slot_of: Mapping[str, int]) -> None:
        """Raise :exc:`PlanError` if a program numbers a weight unlike the bound one."""
        for n, s in self._slot_of.items():
            if slot_of.get(n, s) != s:
                raise PlanError(f"{self.holder}: weight {n!r} has slot {slot_of[n]} in a "
                                f"re-placed program but {s} in the first; the pager serves "
                                f"one numbering")

    def page_in(self, slots: Sequence[int]) -> list[Any]:
        """The values of constant ``slots`` for the next step, its weights made resident.

        The executor calls it before each step that reads constants (``Step.const_reads``).
        """
        entry = self._calls.get(tuple(slots))
        if entry is None:
            pages = sorted({p for s in slots if s in self._slot_weight
                            for p in self._slot_weight[s].pages})
            values = [self.views[self._slot_weight[s].name] if s in self._slot_weight
                      else self._slot_host[s] for s in slots]
            entry = self._calls[tuple(slots)] = (tuple(pages), values)
        if entry[0]:
            self.make_resident(entry[0])
        return entry[1]

    # ------------------------------------------------------------ paging
    def pages_of(self, name: str) -> range:
        """The pages weight ``name`` lies on."""
        return self.weights[name].pages

    def resident_pages(self) -> list[int]:
        """Resident pages, least recently used first."""
        return list(self._resident)

    def make_resident(self, pages: Sequence[int]) -> None:
        """Map and fill ``pages`` (evicting least recently used others); none is evicted
        while this call runs, and the copies are queued before the caller's next kernel."""
        with self._lock:
            if self.closed:
                raise PlanError(f"{self.holder}: the weight pager is closed")
            P = self.page_bytes
            region, stream = self.region, self.stream
            if self._last:
                # everything queued so far, including every reader of the previous pages
                self._seq += 1
                self._fences.append((self._seq, region.fence(stream)))
                for p in self._last:
                    self._fence_of[p] = self._seq
                self._retire()
            need = set(pages)
            for p in pages:
                if p in self._resident:
                    self._resident.move_to_end(p)
                    continue
                if self._free:
                    page, reused = self._free.pop(), False
                else:
                    victim = next(v for v in self._resident if v not in need)
                    self._wait(self._fence_of.pop(victim, 0))
                    page, reused = region.unmap(victim * P), True
                    del self._resident[victim]
                    self.evictions += 1
                try:
                    region.map(p * P, page)
                except BaseException:
                    self._free.append(page)
                    raise
                self._resident[p] = page
                for off, data in self._segments[p]:
                    region.write(off, data, stream)
                    self.bytes_moved += data.nbytes
                self.page_ins += 1
                self.remaps += reused
            self._last = tuple(pages)

    def _wait(self, seq: int) -> None:
        """Block until the work fence ``seq`` covers is done (recycling older fences)."""
        if seq <= self._done:
            return
        while self._fences and self._fences[0][0] <= seq:
            s, f = self._fences.popleft()
            if s == seq:
                f.wait()
                self.fence_waits += 1
            f.release()     # reused only by a later fence() call, after this wait
        self._done = seq

    def _retire(self) -> None:
        while len(self._fences) > _FENCE_BACKLOG and self._fences[0][1].done():
            s, f = self._fences.popleft()
            f.release()
            self._done = max(self._done, s)

    # ------------------------------------------------------------ reporting and close
    def counters(self) -> dict[str, int]:
        """``page_ins``, ``evictions``, ``bytes_moved`` (host to device), ``remaps`` (a
        physical page moved to a new address), ``fence_waits``, and the window's size."""
        return {"page_ins": self.page_ins, "evictions": self.evictions,
                "bytes_moved": self.bytes_moved, "remaps": self.remaps,
                "fence_waits": self.fence_waits, "page_bytes": self.page_bytes,
                "window_bytes": self.window_pages * self.page_bytes,
                "resident_bytes": len(self._resident) * self.page_bytes,
                "region_bytes": int(self.region.nbytes)}

    def close(self) -> None:
        """Free the region, its pages and the window's reservation (idempotent).

        The caller has waited for the work that reads the weights.
        """
        with self._lock:
            if self.closed:
                return
            self.closed = True
            while self._fences:
                self._fences.popleft()[1].release()
            self._resident.clear()
            self._free.clear()
            try:
                self.region.close()
            finally:
                self.reservation.release()


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
            if authority.fit(window_bytes) is not Fit.FITS:
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
        self._resident: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
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
