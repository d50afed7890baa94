"""DeviceMemoryAuthority: budget, granules, ledger by role/holder, grants, thread safety."""

from __future__ import annotations

import threading

import pytest

from onnx_ep.core.memory import DeviceMemoryAuthority, Role
from onnx_ep.errors import AdmissionRefused, CapacityUnavailable, TierExhausted


def test_one_byte_costs_a_granule_and_ledger_reports_roles_and_holders():
    a = DeviceMemoryAuthority("cpu", 10_000, granularity=64)
    r1 = a.reserve(1, Role.WORKSPACE_STEP, "s1")
    r2 = a.reserve(100, Role.WEIGHTS, "s2")
    assert (r1.nbytes, r2.nbytes) == (64, 128)
    led = a.ledger()
    assert led["committed"] == 192 and led["available"] == 10_000 - 192
    assert led["by_role"]["workspace_step"] == 64 and led["by_role"]["weights"] == 128
    assert led["by_holder"] == {"s1": {"workspace_step": 64}, "s2": {"weights": 128}}
    r1.release()
    r1.release()      # idempotent
    assert a.committed == 128


def test_refusals_are_typed_and_carry_http_429():
    a = DeviceMemoryAuthority("cpu", 1024, granularity=64)
    with pytest.raises(CapacityUnavailable) as e:
        a.reserve(2048, Role.ACTIVATIONS, "big")
    assert e.value.http_status == 429 and e.value.requested == 2048 and e.value.holder == "big"
    a.reserve(1000, Role.ACTIVATIONS, "first")
    with pytest.raises(TierExhausted) as e2:
        a.reserve(100, Role.ACTIVATIONS, "second")
    assert isinstance(e2.value, AdmissionRefused) and e2.value.available == 0


def test_reserve_many_is_all_or_nothing():
    a = DeviceMemoryAuthority("cpu", 1024, granularity=64)
    a.reserve(256, Role.WEIGHTS, "s")
    with pytest.raises(TierExhausted):
        a.reserve_many([(512, Role.ACTIVATIONS), (256, Role.WORKSPACE_STEP),
                        (64, Role.STAGING)], "run")
    assert a.committed == 256


def test_grant_that_fails_midway_rolls_back_whole():
    a = DeviceMemoryAuthority("cpu", 4096, granularity=64)
    kv = a.reserve(1024, Role.KV_CACHE, "s")
    baseline = a.ledger()
    with pytest.raises(TierExhausted):
        with a.grant() as g:
            g.grow(kv, 2048)                                   # succeeds inside the grant
            g.reserve(512, Role.WORKSPACE_SESSION, "s")         # succeeds inside the grant
            g.reserve(4096, Role.WORKSPACE_SESSION, "s")        # fails: all of it rolls back
    after = a.ledger()
    after.pop("peak_committed"), baseline.pop("peak_committed")
    assert after == baseline
    assert kv.nbytes == 1024


def test_grant_commits_whole_on_success():
    a = DeviceMemoryAuthority("cpu", 4096, granularity=64)
    kv = a.reserve(1024, Role.KV_CACHE, "s")
    with a.grant() as g:
        g.grow(kv, 2048)
        g.reserve(512, Role.WORKSPACE_SESSION, "s")
    assert a.committed == 2048 + 512


def test_concurrent_reservations_never_over_commit():
    a = DeviceMemoryAuthority("cpu", 64 * 100, granularity=64)
    granted: list = []
    refused = []
    lock = threading.Lock()

    def grab() -> None:
        for _ in range(50):
            try:
                r = a.reserve(64, Role.ACTIVATIONS, threading.current_thread().name)
            except TierExhausted:
                with lock:
                    refused.append(1)
                continue
            with lock:
                granted.append(r)
            assert a.committed <= a.budget

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 100 and len(refused) == 8 * 50 - 100
    assert a.committed == a.budget
