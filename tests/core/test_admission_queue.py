"""The ``queue`` admission strategy: requests wait first come, first served for their bytes,
and are refused with TierExhausted when their timeout passes."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import onnx_ep
from onnx_ep import SessionOptions
from onnx_ep.core.memory import DeviceMemoryAuthority, DevicePool, Role
from onnx_ep.errors import CapacityUnavailable, OptionsError, TierExhausted
from tests.helpers.memory import ScratchKernel, ScratchPlugin, scratch_model


def test_waiters_are_admitted_in_the_order_they_arrived():
    pool = DevicePool("q", 1000)
    authority = DeviceMemoryAuthority("q", 1000, 1, pool)
    blocker = authority.reserve(900, Role.ACTIVATIONS, "session-0")
    order: list[int] = []
    threads = []

    def wait_then_take(i: int, need: int) -> None:
        with authority.turn(need, f"session-{i}", f"session-{i}/run", timeout=10):
            r = authority.reserve(need, Role.ACTIVATIONS, f"session-{i}/run")
            order.append(i)
        time.sleep(0.01)
        r.release()

    # 1 asks for more than 2 and 3 do: they must not overtake it when a little frees up
    for i, need in ((1, 600), (2, 100), (3, 100)):
        t = threading.Thread(target=wait_then_take, args=(i, need))
        t.start()
        threads.append(t)
        while len(pool.queue) < i:           # each is queued before the next arrives
            time.sleep(0.001)
    assert order == []                       # 100 bytes free: 1 heads the queue and waits
    blocker.release()
    for t in threads:
        t.join(10)
    assert order == [1, 2, 3]
    assert pool.committed == 0 and not pool.queue


def test_a_waiter_whose_time_passes_is_refused_and_leaves_the_queue():
    pool = DevicePool("q", 1000)
    authority = DeviceMemoryAuthority("q", 1000, 1, pool)
    blocker = authority.reserve(900, Role.ACTIVATIONS, "session-0")
    t0 = time.monotonic()
    with pytest.raises(TierExhausted, match="waited 0.2 s") as e:
        with authority.turn(500, "session-1", "session-1/run-1", timeout=0.2):
            pass
    assert time.monotonic() - t0 >= 0.2 and e.value.http_status == 429
    assert not pool.queue
    blocker.release()


def test_a_request_that_can_never_fit_is_refused_at_once_not_after_the_timeout():
    s = onnx_ep.Session(scratch_model(), plugins=[ScratchPlugin(ScratchKernel())],
                        options=SessionOptions(memory_limit=1 << 16, admission="queue",
                                               admission_timeout=30))
    t0 = time.monotonic()
    with pytest.raises(CapacityUnavailable):
        s.run(None, {"x": np.ones(1 << 15, np.float32)})
    assert time.monotonic() - t0 < 1
    assert s.resources()["admission"] == "queue"


def test_admission_timeout_is_validated():
    with pytest.raises(OptionsError, match="admission_timeout"):
        SessionOptions(admission_timeout=-1)


def _run_all(admission: str, sessions: int = 3, threads: int = 3, runs: int = 8):
    """threads x sessions on one budget where one run fits at a time, starting while another
    tenant holds most of the budget for 0.2 s (so they contend whatever the machine's speed);
    per session, the runs done and refused."""
    limit = 128 * 1024
    opts = SessionOptions(memory_limit=limit, admission=admission, admission_timeout=30)
    kernels = [ScratchKernel() for _ in range(sessions)]
    ss = [onnx_ep.Session(scratch_model(), plugins=[ScratchPlugin(k)], options=opts)
          for k in kernels]
    # 48 KiB of scratch and 48 KiB of output per run: one fits, two do not
    x = np.ones(12 * 1024, np.float32)
    done = [0] * sessions
    refused = [0] * sessions
    wrong = []
    lock = threading.Lock()
    start = threading.Barrier(sessions * threads + 1)

    def worker(i: int) -> None:
        start.wait()
        for _ in range(runs):
            try:
                (y,) = ss[i].run(None, {"x": x})
            except TierExhausted:
                with lock:
                    refused[i] += 1
                continue
            with lock:
                done[i] += 1
                if not np.array_equal(y, x * 2):
                    wrong.append(i)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(sessions)
          for _ in range(threads)]
    for t in ts:
        t.start()
    authority = ss[0]._authority
    other = authority.reserve(limit - 32 * 1024, Role.ACTIVATIONS, "another-tenant")
    start.wait()
    threading.Timer(0.2, other.release).start()
    for t in ts:
        t.join(60)
    for s in ss:
        assert authority.held_by(f"{s.holder}") == 0
        s.close()
    assert not wrong
    return done, refused, authority


def test_queue_admission_lets_every_session_finish_where_strict_refuses_most_runs():
    done, refused, authority = _run_all("queue")
    assert refused == [0, 0, 0] and done == [24, 24, 24]
    assert authority.peak_committed <= authority.budget
    done_strict, refused_strict, _ = _run_all("strict")
    assert sum(refused_strict) > 0 and sum(done_strict) + sum(refused_strict) == 72
