"""providers/cuda/allocator.py: ledger-first blocks, the pool, VMM stable regions.

The pool and ledger logic runs on CPU against a fake driver module; the GPU
tests repeat the essentials on the real driver and prove that a stable region
keeps its address while physical memory is remapped under it, even for a
captured graph.
"""

from __future__ import annotations

import gc
import itertools
import types

import numpy as np
import pytest

from onnx_ep.core.memory import DeviceMemoryAuthority, Role
from onnx_ep.errors import CapacityUnavailable, CudaError, TierExhausted
from onnx_ep.providers.cuda import allocator as A
from onnx_ep.providers.cuda import copies, driver, launch
from onnx_ep.providers.cuda.kernels.base import F32, I64, PTR

# ---------------------------------------------------------------- CPU: a fake driver


class FakeDriver(types.SimpleNamespace):
    """cuMemAlloc / cuMemFree over a byte counter; ``capacity`` bytes of 'device memory'."""

    def __init__(self, capacity: int = 1 << 20) -> None:
        super().__init__()
        self.CUresult = types.SimpleNamespace(CUDA_SUCCESS=0, CUDA_ERROR_OUT_OF_MEMORY=2)
        self.capacity = capacity
        self.live: dict[int, int] = {}
        self.ids = itertools.count(0x10000, 0x10000)
        self.alloc_calls = 0

    def cuMemAlloc(self, n: int) -> tuple[int, int]:  # noqa: N802
        self.alloc_calls += 1
        if sum(self.live.values()) + n > self.capacity:
            return (2, 0)
        p = next(self.ids)
        self.live[p] = n
        return (0, p)

    def cuMemFree(self, p: int) -> tuple[int]:  # noqa: N802
        del self.live[p]
        return (0,)

    def cuGetErrorName(self, err: int) -> tuple[int, bytes]:  # noqa: N802
        return (0, {2: b"CUDA_ERROR_OUT_OF_MEMORY"}.get(err, b"CUDA_ERROR_UNKNOWN"))

    def cuGetErrorString(self, err: int) -> tuple[int, bytes]:  # noqa: N802
        return (0, b"fake")


class FakeDevice:
    ordinal = 0

    def set_current(self) -> None:
        pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> tuple[A.CudaAllocator, FakeDriver]:
    drv = FakeDriver()
    monkeypatch.setattr(A, "driver", lambda: drv)
    monkeypatch.setattr(driver, "driver", lambda: drv)
    authority = DeviceMemoryAuthority("cuda:fake", 8192, granularity=A.BLOCK_GRANULARITY)
    return A.CudaAllocator(FakeDevice(), authority), drv  # type: ignore[arg-type]


def test_blocks_are_charged_in_512_byte_granules(fake) -> None:
    alloc, drv = fake
    b = alloc.allocate(1000, Role.ACTIVATIONS, "s1")
    assert b.capacity == 1024 and b.nbytes == 1000
    assert drv.live == {b.ptr: 1024}
    ledger = alloc.authority.ledger()
    assert ledger["by_holder"] == {"s1": {"activations": 1024}}
    assert A.round_block(1) == 512 and A.round_block(512) == 512 and A.round_block(0) == 0


def test_freed_blocks_move_to_the_pool_and_are_reused(fake) -> None:
    alloc, drv = fake
    b = alloc.allocate(1000, Role.ACTIVATIONS, "s1")
    ptr = b.ptr
    b.free()
    b.free()   # idempotent
    assert alloc.pooled_bytes == 1024
    assert alloc.authority.held_by(A.POOL_HOLDER) == 1024
    assert alloc.authority.held_by("s1") == 0
    c = alloc.allocate(900, Role.WEIGHTS, "s2")   # same size class
    assert c.ptr == ptr and drv.alloc_calls == 1
    assert alloc.pooled_bytes == 0 and alloc.authority.held_by(A.POOL_HOLDER) == 0
    assert alloc.authority.ledger()["by_holder"] == {"s2": {"weights": 1024}}


def test_trim_frees_pooled_blocks_and_their_ledger_charge(fake) -> None:
    alloc, drv = fake
    for n in (512, 1024, 1024):
        alloc.allocate(n, Role.ACTIVATIONS, "s").free()
    assert alloc.trim() == 512 + 1024   # the second 1024 reused the first 1024 block
    assert drv.alloc_calls == 2
    assert drv.live == {} and alloc.authority.committed == 0


def test_pooled_bytes_never_cause_a_refusal(fake) -> None:
    alloc, drv = fake
    alloc.allocate(6144, Role.ACTIVATIONS, "s").free()    # pooled: 6144 of 8192 charged
    b = alloc.allocate(4096, Role.ACTIVATIONS, "s")       # does not fit beside the pool
    assert b.capacity == 4096 and alloc.pooled_bytes == 0
    assert alloc.authority.committed == 4096 and list(drv.live.values()) == [4096]


def test_over_budget_requests_are_refused_before_the_driver_is_asked(fake) -> None:
    alloc, drv = fake
    with pytest.raises(CapacityUnavailable):
        alloc.allocate(10_000, Role.ACTIVATIONS, "s")
    held = alloc.allocate(8000, Role.ACTIVATIONS, "s")
    with pytest.raises(TierExhausted):
        alloc.allocate(512, Role.ACTIVATIONS, "s")
    assert drv.alloc_calls == 1 and held.capacity == 8192


def test_driver_out_of_memory_raises_cuda_error_and_leaves_the_ledger_unchanged(fake) -> None:
    alloc, drv = fake
    drv.capacity = 1024
    with pytest.raises(CudaError) as info:
        alloc.allocate(4096, Role.ACTIVATIONS, "s")
    assert info.value.error_name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert alloc.authority.committed == 0


def test_a_dropped_allocation_returns_to_the_pool_on_the_next_call(fake) -> None:
    alloc, drv = fake
    b = alloc.allocate(512, Role.ACTIVATIONS, "s")
    ptr = b.ptr
    del b
    gc.collect()
    c = alloc.allocate(512, Role.ACTIVATIONS, "s")
    assert c.ptr == ptr and drv.alloc_calls == 1


def test_backing_a_callers_reservation_never_pools(fake) -> None:
    alloc, drv = fake
    r = alloc.authority.reserve(3000, Role.WEIGHTS, "session")
    b = alloc.back(r)
    assert b.capacity == 3072 and drv.live == {b.ptr: 3072}
    assert alloc.authority.committed == 3072         # charged once, by the caller
    b.free()
    assert drv.live == {} and alloc.pooled_bytes == 0
    assert not r.released                            # the caller releases it
    r.release()
    assert alloc.authority.committed == 0


def test_zero_byte_allocations_cost_nothing(fake) -> None:
    alloc, drv = fake
    b = alloc.allocate(0, Role.ACTIVATIONS, "s")
    assert b.ptr == 0 and drv.alloc_calls == 0
    b.free()
    assert alloc.authority.committed == 0


# ---------------------------------------------------------------- GPU


@pytest.mark.cuda
def test_device_blocks_are_charged_pooled_and_trimmed(allocator, stream) -> None:
    base = allocator.authority.committed
    b = allocator.allocate(1 << 20, Role.ACTIVATIONS, "test")
    assert allocator.authority.committed == base + (1 << 20)
    x = np.arange(1 << 18, dtype=np.float32)
    copies.copy_htod(b.ptr, x, stream)
    out = np.empty_like(x)
    copies.copy_dtoh(out, b.ptr, stream)
    stream.synchronize()
    np.testing.assert_array_equal(out, x)
    ptr = b.ptr
    b.free()
    assert allocator.authority.held_by(A.POOL_HOLDER) >= 1 << 20
    again = allocator.allocate(1 << 20, Role.ACTIVATIONS, "test")
    assert again.ptr == ptr
    again.free()
    assert allocator.trim() >= 1 << 20
    assert allocator.authority.committed == base


@pytest.mark.cuda
def test_allocator_budget_refuses_beyond_the_cap(allocator) -> None:
    from tests.helpers.cuda import CUDA_TEST_LIMIT

    assert allocator.authority.budget == CUDA_TEST_LIMIT
    with pytest.raises(CapacityUnavailable):
        allocator.allocate(CUDA_TEST_LIMIT + 1, Role.ACTIVATIONS, "test")


@pytest.mark.cuda
def test_for_device_shares_the_cores_authority(cuda_device) -> None:
    from onnx_ep.core.memory import authority_for

    a = A.CudaAllocator.for_device(cuda_device, 64 << 20)
    assert A.CudaAllocator.for_device(cuda_device, 64 << 20) is a
    assert authority_for("cuda:0", 64 << 20) is a.authority


@pytest.mark.cuda
def test_stable_region_keeps_its_address_while_granules_are_remapped(allocator, stream) -> None:
    g = allocator.vmm_granularity
    assert g > 0 and g % A.BLOCK_GRANULARITY == 0
    base = allocator.authority.committed
    region = allocator.stable_region(2 * g, holder="test")
    assert allocator.authority.committed == base      # virtual addresses cost nothing
    p1 = allocator.create_physical(g, Role.WEIGHTS, "test")
    p2 = allocator.create_physical(g, Role.WEIGHTS, "test")
    assert allocator.authority.committed == base + 2 * g
    n = g // 4
    a = np.full(n, 1.0, np.float32)
    b = np.full(n, 2.0, np.float32)
    assert region.map(0, p1) == region.ptr
    copies.copy_htod(region.ptr, a, stream)
    region.unmap(0, g)
    region.map(0, p2)
    copies.copy_htod(region.ptr, b, stream)
    out = np.empty(n, np.float32)
    copies.copy_dtoh(out, region.ptr, stream)
    stream.synchronize()
    assert (out == 2.0).all()
    region.unmap(0, g)
    region.map(0, p1)                                  # physical contents survived unmapping
    copies.copy_dtoh(out, region.ptr, stream)
    stream.synchronize()
    assert (out == 1.0).all()
    with pytest.raises(ValueError):
        region.map(0, p2)                              # overlaps the mapping of p1
    region.map(g, p2)
    assert region.maps == 4 and region.unmaps == 2
    region.close()
    p1.release()
    p2.release()
    assert allocator.authority.committed == base


@pytest.mark.cuda
def test_a_captured_graph_reads_whatever_is_mapped_at_a_stable_address(
        cuda_device, allocator, stream) -> None:
    from onnx_ep.providers.cuda import nvrtc

    drv = driver.driver()
    g = allocator.vmm_granularity
    n = g // 4
    axpy = nvrtc.get_function("testing", "axpy_f32", cuda_device)
    region = allocator.stable_region(g, holder="test")
    pages = [allocator.create_physical(g, Role.WEIGHTS, "test") for _ in range(2)]
    for value, page in zip((1.0, 10.0), pages):
        region.map(0, page)
        copies.copy_htod(region.ptr, np.full(n, value, np.float32), stream)
        stream.synchronize()
        region.unmap(0, g)
    y = allocator.allocate(4 * n, Role.ACTIVATIONS, "test")
    region.map(0, pages[0])
    copies.memset_d8(y.ptr, 0, 4 * n, stream)
    driver.check(drv.cuStreamBeginCapture(
        stream.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
    try:
        launch.launch(axpy, launch.grid_1d(n), (256, 1, 1),
                      [(1.0, F32), (region.ptr, PTR), (y.ptr, PTR), (n, I64)], stream)
    finally:
        graph = driver.check(drv.cuStreamEndCapture(stream.handle))
    exe = driver.check(drv.cuGraphInstantiate(graph, 0))
    driver.check(drv.cuGraphLaunch(exe, stream.handle))   # y = 0 + 1
    stream.synchronize()
    region.unmap(0, g)
    region.map(0, pages[1])                                # page in other "weights"
    driver.check(drv.cuGraphLaunch(exe, stream.handle))   # y = 1 + 10, no re-capture
    out = np.empty(n, np.float32)
    copies.copy_dtoh(out, y.ptr, stream)
    stream.synchronize()
    assert (out == 11.0).all()
    driver.check(drv.cuGraphExecDestroy(exe))
    driver.check(drv.cuGraphDestroy(graph))
    region.close()
    for page in pages:
        page.release()
    y.free()


# ---------------------------------------------------------------- source audit

RAW_MEMORY_CALLS = ("cuMemAlloc", "cuMemFree", "cuMemCreate", "cuMemMap", "cuMemUnmap",
                    "cuMemAddressReserve", "cuMemAddressFree", "cuMemSetAccess", "cuMemRelease")


def test_only_the_allocator_calls_raw_device_memory_functions() -> None:
    from pathlib import Path

    import onnx_ep

    root = Path(onnx_ep.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path == Path(A.__file__):
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(root)}: {name}" for name in RAW_MEMORY_CALLS
                      if f"{name}(" in text or f".{name}" in text]
    assert not offenders, offenders
