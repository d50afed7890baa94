"""The session's plans, one per shape signature, bounded: least recently used first out.

A plan holds its arena (on a device, real memory) and on a device its captured graphs, so a
session that meets many signatures (a decode loop over a growing KV cache) must not keep
them all. The cache keeps at most ``max_plans`` plans and, when ``max_bytes`` is set, at
most that many bytes of arenas and workspaces; beyond that it evicts the plan run longest
ago, through ``release`` (which gives its memory back to the authority). A signature that
comes back is planned again. See docs/MEMORY.md.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from typing import Any


def plan_bytes(plan: Any) -> int:
    """What a cached plan holds: its arena and its workspace peaks."""
    return int(plan.arena.size + plan.workspace.step_peak + plan.workspace.session_peak)


class PlanCache:
    """Plans by signature, in least-recently-used order.

    :param max_plans: at most this many plans are kept.
    :param max_bytes: at most this many bytes (:func:`plan_bytes`) over the kept plans;
        ``None``: no bound by bytes. The plan just added is kept whatever its size.
    :param release: called with each evicted plan, once.
    """

    def __init__(self, max_plans: int, max_bytes: int | None,
                 release: Callable[[Any], None]) -> None:
        self.max_plans = max_plans
        self.max_bytes = max_bytes
        self._release = release
        self._plans: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def __contains__(self, signature: object) -> bool:
        return signature in self._plans

    def __len__(self) -> int:
        return len(self._plans)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(list(self._plans))

    def values(self) -> list[Any]:
        return list(self._plans.values())

    def get(self, signature: tuple[Any, ...]) -> Any:
        """The plan of ``signature`` (now the most recently used), else None."""
        with self._lock:
            plan = self._plans.get(signature)
            if plan is not None:
                self._plans.move_to_end(signature)
            return plan

    def add(self, signature: tuple[Any, ...], plan: Any) -> None:
        """Keep ``plan``; evict the least recently used plans beyond the bounds."""
        with self._lock:
            self._plans[signature] = plan
            self._plans.move_to_end(signature)
            evicted = []
            total = sum(plan_bytes(p) for p in self._plans.values())
            while len(self._plans) > 1 and (
                    len(self._plans) > self.max_plans
                    or (self.max_bytes is not None and total > self.max_bytes)):
                _, old = self._plans.popitem(last=False)
                total -= plan_bytes(old)
                evicted.append(old)
            self.evictions += len(evicted)
        for old in evicted:
            self._release(old)

    def evict_oldest(self) -> bool:
        """Evict the plan run longest ago (to make room for a new one); False when empty."""
        with self._lock:
            if not self._plans:
                return False
            _, old = self._plans.popitem(last=False)
            self.evictions += 1
        self._release(old)
        return True

    def bytes(self) -> int:
        return sum(plan_bytes(p) for p in self.values())

    def report(self) -> dict[str, Any]:
        return {"plans": len(self._plans), "max_plans": self.max_plans,
                "bytes": self.bytes(), "max_bytes": self.max_bytes,
                "evictions": self.evictions}
