"""Per-step statistics of a generator: tokens, time, shape signature, captured or eager.

Each model run is one :class:`StepStat`: ``prefill`` (a prompt chunk) or ``decode`` (one
token per row). Its ``capture`` is the session's ``last_capture()`` after the run:
``captured`` when the run replayed recorded CUDA graphs, ``recorded`` when it recorded
them, ``eager`` when a device plan ran without graphs, ``host`` when the plan runs on the
host (nothing to capture; docs/CAPTURE.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs


@attrs.frozen
class StepStat:
    kind: str            #: "prefill" or "decode"
    tokens: int          #: real (not padding) tokens fed, all rows together
    seconds: float
    signature: str       #: input names, dtypes and shapes
    capture: str         #: "captured", "recorded", "eager" or "host"


class GenerationStats:
    """Steps of one generator and their totals (``as_dict()`` is JSON-ready)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.steps: list[StepStat] = []

    @contextmanager
    def step(self, kind: str, *, tokens: int, signature: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        seconds = time.perf_counter() - t0
        self.steps.append(StepStat(kind, tokens, seconds, signature,
                                   self._session.last_capture()))

    def _total(self, kind: str) -> tuple[int, float]:
        steps = [s for s in self.steps if s.kind == kind]
        return sum(s.tokens for s in steps), sum(s.seconds for s in steps)

    @property
    def prefill_tokens_per_s(self) -> float:
        n, t = self._total("prefill")
        return n / t if t > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        n, t = self._total("decode")
        return n / t if t > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        pn, pt = self._total("prefill")
        dn, dt = self._total("decode")
        captures: dict[str, int] = {}
        for s in self.steps:
            if s.kind == "decode":
                captures[s.capture] = captures.get(s.capture, 0) + 1
        return {"prefill": {"tokens": pn, "seconds": pt,
                            "tokens_per_s": self.prefill_tokens_per_s},
                "decode": {"tokens": dn, "seconds": dt, "steps": sum(
                    1 for s in self.steps if s.kind == "decode"),
                    "tokens_per_s": self.decode_tokens_per_s,
                    "ms_per_step": 1e3 * dt / max(1, sum(
                        1 for s in self.steps if s.kind == "decode")),
                    "capture": captures,
                    "signatures": len({s.signature for s in self.steps
                                       if s.kind == "decode"})},
                "steps": [attrs.asdict(s) for s in self.steps]}
