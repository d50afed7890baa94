"""The CUDA allocator: the only module that allocates, maps or frees device memory.

Every byte is reserved in the device's :class:`~onnx_ep.core.memory.DeviceMemoryAuthority`
(``"cuda:N"``) before the driver is asked for it, and released after the
driver gave it back. A source-scan test fails on cuMemAlloc / cuMemFree /
cuMemCreate / cuMemMap / cuMemUnmap / cuMemAddressReserve / cuMemSetAccess /
cuMemRelease anywhere else. See docs/MEMORY.md.

Two kinds of memory:

- **Blocks** (:meth:`CudaAllocator.allocate`): ``cuMemAlloc``, pooled by
  size class. A freed block keeps its device memory and goes to the pool; its
  bytes move in the ledger from the owner to the holder ``"cuda-pool"`` (role
  of the freed block), so the ledger always equals what the driver holds for
  us. ``allocate`` reuses a pooled block of the same rounded size, and when
  the budget (or the driver) runs short it trims the pool and retries, so
  pooled bytes never cause a refusal. :meth:`CudaAllocator.trim` frees the
  pool explicitly. Reuse is stream-ordered: a block freed after launching work
  on stream S may be handed out again at once, which is safe for work queued
  on S (the provider-wide stream); callers that used it on another stream
  synchronize that stream before freeing.
- **Backing blocks** (:meth:`CudaAllocator.back`): device memory for a
  reservation the core made itself (a session's arena, weights, workspace
  slots). Never pooled: the core reserves and releases, the block goes
  straight back to the driver.
- **Stable regions** (:meth:`CudaAllocator.stable_region`): CUDA virtual
  memory management for weight streaming. The virtual range is reserved once
  and never moves; physical granules (:meth:`CudaAllocator.create_physical`,
  ``cuMemCreate``, 2 MiB on the H200) are mapped and unmapped under it. A
  captured graph reads whatever is mapped at its addresses, so pages move
  without re-capture. Only physical granules are charged to the ledger; a
  virtual reservation costs no device memory.

Accounting granularity: 512 bytes for blocks. ``cuMemAlloc`` returns
addresses aligned to at least 256 bytes and the driver sub-allocates small
requests from larger pages, so a block's true footprint is not observable
per call; charging multiples of 512 (the block size PyTorch's caching
allocator rounds to, for the same reason) keeps each charge at or above the
request plus alignment padding and makes size classes coarse enough for the
pool to reuse blocks. VMM granules (2 MiB) are multiples of 512, so they are
charged exactly.

Must not be called while a stream captures: ``cuMemAlloc``/``cuMemFree``
invalidate a capture. The planner allocates before capture.
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Any

from onnx_ep.core.memory import DeviceMemoryAuthority, Reservation, Role, authority_for
from onnx_ep.errors import CudaError, MemoryBudgetError
from onnx_ep.providers.cuda.device import Device
from onnx_ep.providers.cuda.driver import check, driver
from onnx_ep.providers.cuda.graphs import refuse_while_capturing

#: ledger granule for cuMemAlloc blocks (see the module docstring)
BLOCK_GRANULARITY = 512
#: holder that owns pooled (freed, not yet trimmed) blocks in the ledger
POOL_HOLDER = "cuda-pool"


def round_block(nbytes: int) -> int:
    """The size class of a request: ``nbytes`` rounded up to :data:`BLOCK_GRANULARITY`."""
    g = BLOCK_GRANULARITY
    return -(-int(nbytes) // g) * g


class DeviceAllocation:
    """A device block from :meth:`CudaAllocator.allocate` or :meth:`CudaAllocator.back`.

    :ivar ptr: device address (0 for a zero-byte allocation).
    :ivar nbytes: bytes asked for. :ivar capacity: size class actually held.
    :ivar reservation: the ledger entry charged for it.

    :meth:`free` gives the block back: a block from :meth:`~CudaAllocator.allocate`
    goes to the pool and its reservation is released; a block backing a
    caller's reservation (:meth:`~CudaAllocator.back`) is freed to the driver
    and the caller releases the reservation. Dropping the last reference does
    the same, later, from the allocator's next call (a finalizer must not take
    locks).
    """

    __slots__ = ("ptr", "nbytes", "capacity", "reservation", "_allocator", "_finalizer",
                 "__weakref__")

    def __init__(self, ptr: int, nbytes: int, capacity: int, reservation: Reservation,
                 allocator: CudaAllocator, owns_reservation: bool = True) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.capacity = capacity
        self.reservation = reservation
        self._allocator = allocator
        self._finalizer = weakref.finalize(self, allocator._pending.append,
                                           (ptr, capacity, reservation, owns_reservation))

    def __repr__(self) -> str:
        state = "freed" if not self._finalizer.alive else "live"
        return (f"<DeviceAllocation 0x{self.ptr:x} {self.nbytes} bytes "
                f"{self.reservation.role.value}/{self.reservation.holder} {state}>")

    @property
    def freed(self) -> bool:
        return not self._finalizer.alive

    def free(self) -> None:
        """Give the block back (idempotent)."""
        args = self._finalizer.detach()
        if args is not None:
            self._allocator._give_back(*args[2][0])


class PhysicalMemory:
    """A physical allocation from ``cuMemCreate`` (a multiple of the VMM granularity).

    Map it under a :class:`StableRegion`; :meth:`release` frees it (after
    every mapping of it was unmapped) and returns its bytes to the ledger (when it
    owns its reservation: :meth:`CudaAllocator.back_physical` pages do not).
    """

    __slots__ = ("handle", "nbytes", "reservation", "_allocator", "released", "_owns")

    def __init__(self, handle: Any, nbytes: int, reservation: Reservation,
                 allocator: CudaAllocator, owns_reservation: bool = True) -> None:
        self.handle = handle
        self.nbytes = nbytes
        self.reservation = reservation
        self._allocator = allocator
        self.released = False
        self._owns = owns_reservation

    def release(self) -> None:
        """``cuMemRelease`` the handle (idempotent). Mapped ranges keep it alive until unmapped."""
        if not self.released:
            self.released = True
            check(driver().cuMemRelease(self.handle), "cuMemRelease")
            if self._owns:
                self.reservation.release()


class StableRegion:
    """A reserved virtual address range whose address never changes.

    :ivar ptr: base address, fixed for the region's lifetime.
    :ivar nbytes: size of the range (a multiple of ``granularity``).
    :ivar granularity: mapping granule (``cuMemGetAllocationGranularity``).
    :ivar maps, unmaps: counters of map / unmap calls.
    """

    def __init__(self, allocator: CudaAllocator, ptr: int, nbytes: int, holder: str) -> None:
        self._allocator = allocator
        self.ptr = ptr
        self.nbytes = nbytes
        self.holder = holder
        self.granularity = allocator.vmm_granularity
        self._mapped: dict[int, PhysicalMemory] = {}   # offset -> physical mapped there
        self.maps = 0
        self.unmaps = 0
        self.closed = False

    def __repr__(self) -> str:
        return (f"<StableRegion 0x{self.ptr:x} {self.nbytes} bytes, "
                f"{len(self._mapped)} mapping(s)>")

    def _check_range(self, offset: int, nbytes: int) -> None:
        g = self.granularity
        if self.closed:
            raise MemoryBudgetError(f"{self!r} is closed")
        if offset % g or nbytes % g or nbytes <= 0:
            raise ValueError(f"offset {offset} and size {nbytes} must be positive multiples "
                             f"of the VMM granularity {g}")
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"[{offset}, {offset + nbytes}) is outside the region of "
                             f"{self.nbytes} bytes")

    def map(self, offset: int, memory: PhysicalMemory) -> int:
        """Map all of ``memory`` at ``ptr + offset`` with read/write access for this device.

        :returns: the device address of the mapping.
        :raises ValueError: misaligned, out of range, or overlapping a mapping.
        """
        self._check_range(offset, memory.nbytes)
        end = offset + memory.nbytes
        for o, m in self._mapped.items():
            if o < end and offset < o + m.nbytes:
                raise ValueError(f"[{offset}, {end}) overlaps the mapping at offset {o}; "
                                 f"unmap it first")
        self._allocator._vmm_map(self.ptr + offset, memory)
        self._mapped[offset] = memory
        self.maps += 1
        return self.ptr + offset

    def unmap(self, offset: int, nbytes: int) -> list[PhysicalMemory]:
        """Unmap the mappings that start in ``[offset, offset + nbytes)``.

        Each mapping must lie wholly inside the range. The physical memory is
        not released: the caller reuses it (maps it elsewhere) or releases it.

        :returns: the physical allocations that were unmapped.
        """
        self._check_range(offset, nbytes)
        end = offset + nbytes
        hit = sorted(o for o, m in self._mapped.items() if o < end and offset < o + m.nbytes)
        for o in hit:
            if o < offset or o + self._mapped[o].nbytes > end:
                raise ValueError(f"the mapping at offset {o} ({self._mapped[o].nbytes} bytes) "
                                 f"crosses the edge of [{offset}, {end})")
        out = []
        for o in hit:
            m = self._mapped.pop(o)
            self._allocator._vmm_unmap(self.ptr + o, m.nbytes)
            self.unmaps += 1
            out.append(m)
        return out

    def mapped(self) -> dict[int, PhysicalMemory]:
        """``{offset: PhysicalMemory}`` of the current mappings."""
        return dict(self._mapped)

    def close(self) -> None:
        """Unmap everything (not releasing the physical memory) and free the address range."""
        if self.closed:
            return
        for o in sorted(self._mapped):
            m = self._mapped.pop(o)
            self._allocator._vmm_unmap(self.ptr + o, m.nbytes)
            self.unmaps += 1
        self.closed = True
        check(driver().cuMemAddressFree(self.ptr, self.nbytes), "cuMemAddressFree")


_allocators: dict[tuple[int, int | None], CudaAllocator] = {}
_allocators_lock = threading.Lock()


class CudaAllocator:
    """Device memory for one device, every byte through its authority.

    Use :meth:`for_device`; allocators with the same device and limit are shared.
    """

    def __init__(self, device: Device, authority: DeviceMemoryAuthority) -> None:
        self.device = device
        self.authority = authority
        self._lock = threading.RLock()
        self._pool: dict[int, list[tuple[int, Reservation]]] = {}
        self._pooled_bytes = 0
        # (ptr, capacity, reservation) of blocks whose DeviceAllocation was garbage
        # collected: deque.append is atomic, so finalizers never take a lock
        self._pending: collections.deque[tuple[int, int, Reservation, bool]] = (
            collections.deque())
        self._vmm_granularity: int | None = None
        self.stats = {"allocs": 0, "reuses": 0, "frees": 0, "trims": 0}

    @classmethod
    def for_device(cls, device: Device, limit: int | None = None) -> CudaAllocator:
        """The allocator of ``device`` with budget ``limit`` (``None``: free memory).

        Its authority is ``authority_for("cuda:N", limit, ...)``, the one the
        core's sessions with the same ``memory_limit`` use; the budget of
        ``limit=None`` is ``cuMemGetInfo``'s free bytes when first asked.
        """
        key = (device.ordinal, limit)
        with _allocators_lock:
            a = _allocators.get(key)
            if a is None:
                # the same key as the core's DeviceBinding, so both share one ledger
                authority = authority_for(f"cuda:{device.ordinal}", limit,
                                          granularity=BLOCK_GRANULARITY,
                                          budget=device.free_bytes)
                a = _allocators[key] = cls(device, authority)
            return a

    # ------------------------------------------------------------ blocks
    def allocate(self, nbytes: int, role: Role, holder: str) -> DeviceAllocation:
        """A device block of at least ``nbytes``, charged to ``holder`` under ``role``.

        Reuses a pooled block of the same size class when there is one.

        :raises TierExhausted, CapacityUnavailable: the budget cannot hold it
            even after trimming the pool.
        :raises CudaError: the driver refused (CUDA_ERROR_OUT_OF_MEMORY when
            other processes took the memory); the ledger is unchanged.
        """
        refuse_while_capturing("allocate device memory")
        self._drain_pending()
        capacity = round_block(nbytes)
        if capacity == 0:
            r = self.authority.reserve(0, role, holder)
            return DeviceAllocation(0, 0, 0, r, self)
        ptr = self._from_pool(capacity)
        try:
            r = self._reserve_trimming(nbytes, role, holder)
        except BaseException:
            if ptr:
                self._driver_free(ptr)
            raise
        if ptr:
            self.stats["reuses"] += 1
        else:
            try:
                ptr = self._driver_alloc(capacity)
            except BaseException:
                r.release()
                raise
        return DeviceAllocation(ptr, int(nbytes), capacity, r, self)

    def back(self, reservation: Reservation) -> DeviceAllocation:
        """Device memory for a reservation the caller made (the core's DeviceBinding).

        The block is never pooled: freeing it returns it to the driver, and the
        caller releases ``reservation`` itself. (Pooling it would leave bytes
        charged to ``"cuda-pool"`` where the core's admission cannot trim them.)

        :raises CudaError: the driver refused; ``reservation`` is untouched.
        """
        refuse_while_capturing("allocate device memory")
        self._drain_pending()
        if reservation.released:
            raise MemoryBudgetError(f"reservation {reservation.id} was released")
        capacity = round_block(reservation.nbytes)
        ptr = self._driver_alloc(capacity) if capacity else 0
        return DeviceAllocation(ptr, int(reservation.requested), capacity, reservation, self,
                                owns_reservation=False)

    def _from_pool(self, capacity: int) -> int:
        """Pop a pooled block of ``capacity`` and drop its pool charge; 0 when none."""
        with self._lock:
            bucket = self._pool.get(capacity)
            if not bucket:
                return 0
            ptr, pool_res = bucket.pop()
            self._pooled_bytes -= capacity
            pool_res.release()
            return ptr

    def _reserve_trimming(self, nbytes: int, role: Role, holder: str) -> Reservation:
        try:
            return self.authority.reserve(nbytes, role, holder)
        except MemoryBudgetError:
            # the device's pool is shared by every quota: blocks cached by the allocators of
            # other memory limits on this device count against it too
            if not self.trim() + self.trim_device_peers():
                raise
            return self.authority.reserve(nbytes, role, holder)

    def trim_device_peers(self) -> int:
        """Trim the caches of this device's allocators for other memory limits."""
        with _allocators_lock:
            peers = [a for (ordinal, _), a in _allocators.items()
                     if ordinal == self.device.ordinal and a is not self]
        return sum(a.trim() for a in peers)

    def _driver_alloc(self, capacity: int) -> int:
        self.device.set_current()
        drv = driver()
        err, ptr = drv.cuMemAlloc(capacity)
        if err == drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY and self.trim():
            err, ptr = drv.cuMemAlloc(capacity)
        ptr = int(check((err, ptr), f"cuMemAlloc({capacity})"))
        self.stats["allocs"] += 1
        return ptr

    def _driver_free(self, ptr: int) -> None:
        self.device.set_current()
        check(driver().cuMemFree(ptr), "cuMemFree")
        self.stats["frees"] += 1

    def _give_back(self, ptr: int, capacity: int, reservation: Reservation,
                   owns_reservation: bool) -> None:
        if not owns_reservation:
            if ptr:
                self._driver_free(ptr)
            return
        reservation.release()
        if capacity == 0:
            return
        # the freed block's charge passes to POOL_HOLDER: release, then reserve the same bytes
        with self._lock:
            try:
                pool_res = self.authority.reserve(capacity, reservation.role, POOL_HOLDER)
            except MemoryBudgetError:
                # another thread took the bytes between release and reserve: give the
                # block back to the driver rather than hold memory the ledger lacks
                self._driver_free(ptr)
                return
            self._pool.setdefault(capacity, []).append((ptr, pool_res))
            self._pooled_bytes += capacity

    def _drain_pending(self) -> None:
        while self._pending:
            try:
                args = self._pending.popleft()
            except IndexError:
                return
            self._give_back(*args)

    @property
    def pooled_bytes(self) -> int:
        """Bytes held by freed blocks waiting for reuse (charged to ``"cuda-pool"``)."""
        return self._pooled_bytes

    def trim(self) -> int:
        """``cuMemFree`` every pooled block and release its ledger charge.

        :returns: bytes given back to the driver.
        """
        self._drain_pending()
        with self._lock:
            freed = 0
            for capacity, bucket in self._pool.items():
                for ptr, pool_res in bucket:
                    self._driver_free(ptr)
                    pool_res.release()
                    freed += capacity
            self._pool.clear()
            self._pooled_bytes = 0
            if freed:
                self.stats["trims"] += 1
            return freed

    # ------------------------------------------------------------ virtual memory
    def _alloc_prop(self) -> Any:
        drv = driver()
        prop = drv.CUmemAllocationProp()
        prop.type = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = self.device.ordinal
        return prop

    @property
    def vmm_granularity(self) -> int:
        """Minimum VMM granule of this device (2 MiB on the H200)."""
        if self._vmm_granularity is None:
            drv = driver()
            self.device.set_current()
            g = check(drv.cuMemGetAllocationGranularity(
                self._alloc_prop(),
                drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                "cuMemGetAllocationGranularity")
            self._vmm_granularity = int(g)
        return self._vmm_granularity

    def round_granule(self, nbytes: int) -> int:
        """``nbytes`` rounded up to the VMM granularity."""
        g = self.vmm_granularity
        return -(-int(nbytes) // g) * g

    def create_physical(self, nbytes: int, role: Role, holder: str) -> PhysicalMemory:
        """Physical device memory (``cuMemCreate``) for mapping under a :class:`StableRegion`.

        ``nbytes`` is rounded up to the VMM granularity and charged to ``holder``.

        :raises TierExhausted, CapacityUnavailable: the budget cannot hold it.
        """
        self._drain_pending()
        size = self.round_granule(nbytes)
        r = self._reserve_trimming(size, role, holder)
        try:
            self.device.set_current()
            handle = check(driver().cuMemCreate(size, self._alloc_prop(), 0),
                           f"cuMemCreate({size})")
        except BaseException:
            r.release()
            raise
        return PhysicalMemory(handle, size, r, self)

    def back_physical(self, reservation: Reservation, nbytes: int) -> PhysicalMemory:
        """Physical memory (``cuMemCreate``) of ``nbytes`` covered by the caller's reservation.

        Charges nothing: the core reserved the bytes (the weight pager's window) and backs
        it page by page. :meth:`PhysicalMemory.release` frees the handle only.

        :raises ValueError: ``nbytes`` is not a multiple of the VMM granularity.
        :raises CudaError: the driver refused; nothing is held.
        """
        refuse_while_capturing("allocate device memory")
        self._drain_pending()
        if reservation.released:
            raise MemoryBudgetError(f"reservation {reservation.id} was released")
        if nbytes <= 0 or nbytes % self.vmm_granularity:
            raise ValueError(f"physical pages are positive multiples of the VMM granularity "
                             f"{self.vmm_granularity}, got {nbytes}")
        self.device.set_current()
        handle = check(driver().cuMemCreate(nbytes, self._alloc_prop(), 0),
                       f"cuMemCreate({nbytes})")
        return PhysicalMemory(handle, nbytes, reservation, self, owns_reservation=False)

    def stable_region(self, nbytes: int, holder: str) -> StableRegion:
        """Reserve ``nbytes`` (rounded to the granularity) of virtual addresses, once.

        Costs no device memory and no ledger bytes until physical memory is mapped.
        """
        size = self.round_granule(nbytes)
        if size <= 0:
            raise ValueError(f"a stable region needs a positive size, got {nbytes}")
        self.device.set_current()
        ptr = check(driver().cuMemAddressReserve(size, self.vmm_granularity, 0, 0),
                    f"cuMemAddressReserve({size})")
        return StableRegion(self, int(ptr), size, holder)

    def _vmm_map(self, address: int, memory: PhysicalMemory) -> None:
        drv = driver()
        if memory.released:
            raise CudaError("cannot map released physical memory",
                            error_name="CUDA_ERROR_INVALID_VALUE")
        check(drv.cuMemMap(address, memory.nbytes, 0, memory.handle, 0),
              f"cuMemMap(0x{address:x}, {memory.nbytes})")
        access = drv.CUmemAccessDesc()
        access.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = self.device.ordinal
        access.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        try:
            check(drv.cuMemSetAccess(address, memory.nbytes, [access], 1),
                  f"cuMemSetAccess(0x{address:x}, {memory.nbytes})")
        except CudaError:
            check(drv.cuMemUnmap(address, memory.nbytes), "cuMemUnmap")
            raise

    def _vmm_unmap(self, address: int, nbytes: int) -> None:
        check(driver().cuMemUnmap(address, nbytes), f"cuMemUnmap(0x{address:x}, {nbytes})")
