"""DeviceMemoryAuthority: one budget per device, a ledger of every byte by role and holder.

Every byte a session uses is reserved here before it is used. Reservations
are rounded up to the allocation granularity (a 1-byte request costs a
granule), growth goes through transactional grants, and the authority is
thread-safe: concurrent sessions on one device never over-commit.
Allocation itself (numpy buffers on the host, cuMemAlloc on a GPU) happens
only in allocator modules, which take a :class:`Reservation` first.
See docs/MEMORY.md.
"""

from __future__ import annotations

import enum
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import attrs

from onnx_ep.errors import CapacityUnavailable, MemoryBudgetError, TierExhausted


class Role(enum.Enum):
    """What reserved bytes are for."""

    WEIGHTS = "weights"
    ACTIVATIONS = "activations"
    KV_CACHE = "kv_cache"
    WORKSPACE_STEP = "workspace_step"
    WORKSPACE_SESSION = "workspace_session"
    STAGING = "staging"
    GRAPHS = "graphs"            #: instantiated CUDA graphs (core/capture.py)


def align_up(nbytes: int, alignment: int) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment`` (0 stays 0): THE rounding of
    ledger charges, arena offsets, session workspaces and weight-region offsets."""
    return -(-int(nbytes) // alignment) * alignment


class Fit(enum.Enum):
    """The answer of :func:`fit`."""

    FITS = "fits"
    NOT_NOW = "not_now"    #: fits the budget, but not in what is free now (TierExhausted)
    NEVER = "never"        #: more than the budget allows at all (CapacityUnavailable)


def fit(need: int, *, budget: int, committed: int, held: int = 0) -> Fit:
    """THE decision whether ``need`` more bytes fit: the authority's reservations and growth,
    every admission strategy and the weight windows ask this function and no other.

    :param need: bytes to add, already rounded to the granule.
    :param budget: the bytes the caller may use (a strategy keeping headroom passes less
        than the authority's budget).
    :param committed: bytes committed now, by everyone.
    :param held: bytes the same holder (a session) already has among ``committed``; they
        count against ``budget`` when deciding NEVER, since they will not be released to
        make room for this request.
    """
    if need + held > budget:
        return Fit.NEVER
    if need > budget - committed:
        return Fit.NOT_NOW
    return Fit.FITS


_SEVERITY = {Fit.FITS: 0, Fit.NOT_NOW: 1, Fit.NEVER: 2}


def worst(*verdicts: Fit) -> Fit:
    """The most severe of several :func:`fit` answers (a quota's and its device's)."""
    return max(verdicts, key=_SEVERITY.__getitem__)


class DevicePool:
    """The bytes of one physical device, shared by every quota (authority) on it.

    A session's ``memory_limit`` is a quota inside its device's pool: each quota keeps its
    own ledger, and a reservation must fit the quota and the pool, so no combination of
    sessions, whatever their limits, commits more than the device has. The pool also
    holds the device's admission queue (:meth:`DeviceMemoryAuthority.turn`).

    :ivar budget: bytes all quotas may commit together: the device's free memory (the
        host's ``MemAvailable``) when the pool was made, or :func:`set_device_budget`.
    """

    def __init__(self, device: str, budget: int) -> None:
        if budget <= 0:
            raise ValueError(f"budget must be positive, got {budget}")
        self.device = device
        self.budget = int(budget)
        self.committed = 0
        self.peak_committed = 0
        #: one lock for every ledger change on the device; notified on each release
        self.changed = threading.Condition(threading.Lock())
        #: first come, first served: tickets of requests waiting to be admitted
        self.queue: deque[object] = deque()


@attrs.frozen
class LedgerView:
    """What an admission strategy sees of one device's ledger: values, read at one moment.

    :ivar device: the ledger's device (``"cuda:0"``).
    :ivar budget: the authority's budget in bytes.
    :ivar committed: bytes reserved now, by every session on the device.
    :ivar held: bytes the asking session holds now (weights, persistent workspace, ...).
    :ivar granularity: the accounting granule; requests are charged rounded up to it.
    :ivar device_budget: what every session on the physical device may use together (the
        device pool); ``None``: the same as ``budget``.
    :ivar device_committed: bytes reserved now on the device by every quota.
    """

    device: str
    budget: int
    committed: int
    held: int
    granularity: int
    device_budget: int | None = None
    device_committed: int = 0

    def round_up(self, nbytes: int) -> int:
        """Bytes charged for a request of ``nbytes``."""
        return align_up(nbytes, self.granularity)

    def fit(self, need: int, budget: int | None = None) -> Fit:
        """:func:`fit` for ``need`` bytes on top of what the session holds, within ``budget``
        (default: the whole budget), and within what the physical device has left."""
        verdict = fit(need, budget=self.budget if budget is None else budget,
                      committed=self.committed, held=self.held)
        if self.device_budget is None:
            return verdict
        return worst(verdict, fit(need, budget=self.device_budget,
                                  committed=self.device_committed, held=self.held))


class MemoryPolicy(Protocol):
    """What ``onnx_ep_select_memory_policy`` returns: how a session keeps its weights.

    :ivar name: shown in ``Session.resources()`` (``"full_resident"``).
    :ivar streams: ``False``: every weight is resident for the session's life. ``True``:
        weights stay in host memory and page into a bounded window before the steps that
        read them (docs/MEMORY.md); the session then reads ``window_bytes`` (``None``
        sizes the window itself) and hands the window it builds to the policy as
        ``store``, whose ``counters()`` the policy may report.
    """

    name: str
    streams: bool

    def counters(self) -> dict[str, int]:
        """Paging counters for ``Session.resources()``: at least ``page_ins``,
        ``evictions`` and ``bytes_moved`` (all 0 for a policy that never pages)."""
        ...


#: host allocations are accounted in 64-byte granules (numpy's alignment); CUDA uses 2 MiB
HOST_GRANULARITY = 64


def host_available_bytes() -> int:
    """MemAvailable from /proc/meminfo, else physical pages; the host budget's default."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


@attrs.define(eq=False)
class Reservation:
    """Bytes held in the ledger. Release exactly once (idempotent)."""

    id: int
    nbytes: int          # granule-rounded bytes charged to the budget
    requested: int       # bytes asked for
    role: Role
    holder: str
    authority: DeviceMemoryAuthority
    released: bool = False

    def release(self) -> None:
        self.authority.release(self)


class DeviceMemoryAuthority:
    """The budget and ledger of one device.

    :param device: ``"cpu"`` or e.g. ``"cuda:0"``.
    :param budget: bytes this authority may grant (its quota).
    :param granularity: accounting granule in bytes.
    :param pool: the physical device's pool this quota draws from; ``None``: a pool of its
        own with the same budget (a standalone authority, as tests make).
    """

    def __init__(self, device: str, budget: int, granularity: int = HOST_GRANULARITY,
                 pool: DevicePool | None = None) -> None:
        if budget <= 0:
            raise ValueError(f"budget must be positive, got {budget}")
        self.device = device
        self.budget = int(budget)
        self.granularity = int(granularity)
        self.pool = pool if pool is not None else DevicePool(device, budget)
        self._lock = self.pool.changed
        self._live: dict[int, Reservation] = {}
        self._committed = 0
        self._ids = itertools.count(1)
        self.peak_committed = 0

    # ------------------------------------------------------------ accounting
    def round_up(self, nbytes: int) -> int:
        """Bytes charged for a request of ``nbytes`` (0 stays 0)."""
        return align_up(nbytes, self.granularity)

    @property
    def committed(self) -> int:
        return self._committed

    @property
    def available(self) -> int:
        """Bytes this quota could reserve now: what it has left, at most what the device
        has left."""
        return min(self.budget - self._committed, self.pool.budget - self.pool.committed)

    def fit(self, nbytes: int) -> Fit:
        """:func:`fit` for a new request of ``nbytes`` (charged rounded to a granule), now."""
        return self._fit(self.round_up(nbytes))

    def _fit(self, charged: int, held: int = 0) -> Fit:
        pool = self.pool
        return worst(fit(charged, budget=self.budget, committed=self._committed, held=held),
                     fit(charged, budget=pool.budget, committed=pool.committed, held=held))

    def _commit(self, delta: int) -> None:
        """Add ``delta`` bytes (negative: released) to the quota and its pool; under the
        lock. A release wakes the requests waiting for bytes."""
        pool = self.pool
        self._committed += delta
        pool.committed += delta
        if delta > 0:
            self.peak_committed = max(self.peak_committed, self._committed)
            pool.peak_committed = max(pool.peak_committed, pool.committed)
        elif delta < 0:
            pool.changed.notify_all()

    def reserve(self, nbytes: int, role: Role, holder: str) -> Reservation:
        """Charge ``nbytes`` (rounded to a granule) to ``holder`` under ``role``.

        :raises CapacityUnavailable: more than the whole budget.
        :raises TierExhausted: does not fit in what is free now.
        """
        charged = self.round_up(nbytes)
        with self._lock:
            self._check_fits(charged, holder, role)
            r = Reservation(next(self._ids), charged, int(nbytes), role, holder, self)
            self._live[r.id] = r
            self._commit(charged)
            return r

    def reserve_many(self, requests: list[tuple[int, Role]], holder: str) -> list[Reservation]:
        """Reserve several amounts atomically: all or none."""
        charged = [(self.round_up(n), n, role) for n, role in requests]
        total = sum(c for c, _, _ in charged)
        with self._lock:
            self._check_fits(total, holder, None)
            out = []
            for c, n, role in charged:
                r = Reservation(next(self._ids), c, int(n), role, holder, self)
                self._live[r.id] = r
                out.append(r)
            self._commit(total)
            return out

    def _check_fits(self, charged: int, holder: str, role: Role | None) -> None:
        what = f" for {role.value}" if role is not None else ""
        verdict = self._fit(charged)
        if verdict is Fit.NEVER:
            raise CapacityUnavailable(
                f"{holder} asked {charged} bytes{what} on {self.device}, more than the whole "
                f"budget of {min(self.budget, self.pool.budget)} bytes; raise memory_limit or "
                f"use a smaller model/batch",
                requested=charged, available=self.available, holder=holder)
        if verdict is Fit.NOT_NOW:
            raise TierExhausted(
                f"{holder} asked {charged} bytes{what} on {self.device} but only "
                f"{self.available} are free now ({self._where()}); retry later",
                requested=charged, available=self.available, holder=holder)

    def _where(self) -> str:
        """Which budget is short, for refusals."""
        pool = self.pool
        if pool.budget - pool.committed < self.budget - self._committed:
            return (f"the device has {pool.budget - pool.committed} of {pool.budget} left "
                    f"across all sessions")
        return f"{self.budget - self._committed} of this budget's {self.budget}"

    def release(self, r: Reservation) -> None:
        """Return a reservation's bytes. Releasing twice is a no-op."""
        with self._lock:
            if r.released:
                return
            r.released = True
            del self._live[r.id]
            self._commit(-r.nbytes)

    def grow(self, r: Reservation, new_nbytes: int) -> None:
        """Grow ``r`` to ``new_nbytes`` as one transaction: committed whole or not at all.

        :raises TierExhausted, CapacityUnavailable: the ledger is unchanged.
        """
        with self._lock:
            if r.released:
                raise MemoryBudgetError(f"cannot grow released reservation {r.id}")
            new_charged = self.round_up(new_nbytes)
            extra = new_charged - r.nbytes
            if extra <= 0:
                return
            verdict = self._fit(extra, held=r.nbytes)
            if verdict is Fit.NEVER:
                raise CapacityUnavailable(
                    f"{r.holder}: growing {r.role.value} to {new_charged} bytes exceeds the "
                    f"whole budget of {min(self.budget, self.pool.budget)} bytes on "
                    f"{self.device}", requested=extra, available=self.available,
                    holder=r.holder)
            if verdict is Fit.NOT_NOW:
                raise TierExhausted(
                    f"{r.holder}: growing {r.role.value} by {extra} bytes does not fit; "
                    f"{self.available} free on {self.device} ({self._where()})",
                    requested=extra, available=self.available, holder=r.holder)
            r.nbytes = new_charged
            r.requested = int(new_nbytes)
            self._commit(extra)

    @contextmanager
    def grant(self) -> Iterator[Grant]:
        """A transactional growth grant: every reservation/growth inside commits together.

        If the block raises, everything it reserved or grew is rolled back and the
        ledger is exactly as before.
        """
        g = Grant(self)
        try:
            yield g
        except BaseException:
            g.rollback()
            raise

    # ------------------------------------------------------------ reporting
    def ledger(self) -> dict[str, Any]:
        """JSON-ready ledger: totals by role and by holder."""
        with self._lock:
            by_role: dict[str, int] = {r.value: 0 for r in Role}
            by_holder: dict[str, dict[str, int]] = {}
            for r in self._live.values():
                by_role[r.role.value] += r.nbytes
                h = by_holder.setdefault(r.holder, {})
                h[r.role.value] = h.get(r.role.value, 0) + r.nbytes
            pool = self.pool
            return {"device": self.device, "budget": self.budget,
                    "committed": self._committed, "available": self.available,
                    "peak_committed": self.peak_committed, "granularity": self.granularity,
                    "device_budget": pool.budget, "device_committed": pool.committed,
                    "waiting": len(pool.queue), "by_role": by_role, "by_holder": by_holder}

    def held_by(self, holder: str) -> int:
        """Bytes reserved under exactly ``holder`` (a run's ``session-3/run-7`` is its own)."""
        with self._lock:
            return self._held(holder)

    def _held(self, holder: str) -> int:
        """:meth:`held_by` for a caller that holds the lock already."""
        return sum(r.nbytes for r in self._live.values() if r.holder == holder)

    def view(self, session: str) -> LedgerView:
        """A :class:`LedgerView` of this ledger now, with ``session``'s holdings."""
        held = self.held_by(session)
        with self._lock:
            return LedgerView(self.device, self.budget, self._committed, held,
                              self.granularity, self.pool.budget, self.pool.committed)

    @contextmanager
    def turn(self, need: int, session: str, holder: str, timeout: float) -> Iterator[None]:
        """Wait, first come first served among waiting requests on this device, until
        ``need`` bytes fit now; the caller reserves them inside the block, while later
        requests still wait their turn.

        :param need: bytes, already rounded to the granule.
        :param session: whose holdings count when deciding the request can never fit.
        :raises CapacityUnavailable: ``need`` can never fit (at once, without waiting).
        :raises TierExhausted: it did not fit within ``timeout`` seconds.
        """
        pool = self.pool
        ticket = object()
        t0 = time.monotonic()
        with pool.changed:
            pool.queue.append(ticket)
            try:
                while True:
                    held = self._held(session)
                    verdict = self._fit(need, held)
                    if verdict is Fit.NEVER:
                        raise CapacityUnavailable(
                            f"{holder} needs {need} bytes on top of {held} held by {session}: "
                            f"more than the budget of {min(self.budget, pool.budget)} on "
                            f"{self.device} allows; waiting cannot help",
                            requested=need, available=self.available, holder=holder)
                    if pool.queue[0] is ticket and verdict is Fit.FITS:
                        break
                    left = timeout - (time.monotonic() - t0)
                    if left <= 0:
                        raise TierExhausted(
                            f"{holder} waited {timeout:g} s for {need} bytes on {self.device} "
                            f"({len(pool.queue) - 1} other requests waiting; "
                            f"{self.available} free now); retry later",
                            requested=need, available=self.available, holder=holder)
                    pool.changed.wait(left)
            except BaseException:
                pool.queue.remove(ticket)
                pool.changed.notify_all()
                raise
        try:
            yield
        finally:
            with pool.changed:
                pool.queue.remove(ticket)
                pool.changed.notify_all()


class Grant:
    """Collects reservations and growths made through it; see :meth:`DeviceMemoryAuthority.grant`."""

    def __init__(self, authority: DeviceMemoryAuthority) -> None:
        self.authority = authority
        self._new: list[Reservation] = []
        self._grown: list[tuple[Reservation, int, int]] = []

    def reserve(self, nbytes: int, role: Role, holder: str) -> Reservation:
        r = self.authority.reserve(nbytes, role, holder)
        self._new.append(r)
        return r

    def grow(self, r: Reservation, new_nbytes: int) -> None:
        before = (r, r.nbytes, r.requested)
        self.authority.grow(r, new_nbytes)
        self._grown.append(before)

    def rollback(self) -> None:
        a = self.authority
        for r in reversed(self._new):
            a.release(r)
        with a._lock:
            for r, nbytes, requested in reversed(self._grown):
                if not r.released:
                    a._commit(nbytes - r.nbytes)
                    r.nbytes, r.requested = nbytes, requested


_pools: dict[str, DevicePool] = {}
_authorities: dict[tuple[str, int | None], DeviceMemoryAuthority] = {}
_authorities_lock = threading.Lock()


def _pool(device: str, budget: Any) -> DevicePool:
    pool = _pools.get(device)
    if pool is None:
        size = int(budget()) if budget is not None else host_available_bytes()
        pool = _pools[device] = DevicePool(device, size)
    return pool


def authority_for(device: str, limit: int | None = None,
                  granularity: int = HOST_GRANULARITY,
                  budget: Any = None) -> DeviceMemoryAuthority:
    """The authority (quota) of ``limit`` bytes on ``device``.

    One pool per physical device holds what every session on it may use together: its
    free memory (``budget()``, a device runtime's; on the host ``MemAvailable``) read when
    the device is first asked for, or :func:`set_device_budget`. Each ``memory_limit`` is
    a quota inside that pool: sessions with the same ``limit`` share one quota (they
    compete for it), and every quota's reservations also count against the pool. Without
    a limit the quota is the whole pool.
    """
    key = (device, limit)
    with _authorities_lock:
        a = _authorities.get(key)
        if a is None:
            pool = _pool(device, budget)
            a = _authorities[key] = DeviceMemoryAuthority(
                device, limit if limit is not None else pool.budget, granularity, pool)
        return a


def set_device_budget(device: str, nbytes: int) -> None:
    """Cap what all sessions together may commit on ``device`` (``"cpu"``, ``"cuda:0"``).

    Quotas without a ``memory_limit`` follow the new cap.

    :raises MemoryBudgetError: ``nbytes`` is below what is committed on the device now.
    """
    if nbytes <= 0:
        raise MemoryBudgetError(f"a device budget must be positive, got {nbytes}")
    with _authorities_lock:
        pool = _pools.get(device) or _pool(device, lambda: nbytes)
        with pool.changed:
            if nbytes < pool.committed:
                raise MemoryBudgetError(
                    f"{device} has {pool.committed} bytes committed now; cannot cap it at "
                    f"{nbytes}")
            pool.budget = int(nbytes)
            for (dev, limit), a in _authorities.items():
                if dev == device and limit is None:
                    a.budget = pool.budget
            pool.changed.notify_all()


def allocate_host(nbytes: int, reservation: Reservation) -> Any:
    """A host buffer of ``nbytes`` (uint8) carved from what ``reservation`` holds.

    The only place in core/ and plugins/ that creates arena, workspace or
    weight-window buffers; callers view it with ``.view(dtype).reshape(shape)``.

    :raises MemoryBudgetError: the reservation was released or is too small.
    """
    import numpy as np

    if reservation.released:
        raise MemoryBudgetError(f"reservation {reservation.id} was released")
    if nbytes > reservation.nbytes:
        raise MemoryBudgetError(f"{nbytes} bytes asked from reservation {reservation.id} "
                                f"which holds {reservation.nbytes}")
    return np.empty(nbytes, dtype=np.uint8)
