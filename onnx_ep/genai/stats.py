"""Per-step statistics of a generator: tokens, time, shape signature, captured or eager.

Each model run is one :class:`StepStat`: ``prefill`` (a prompt chunk) or ``decode`` (one
token per row). Its ``capture`` is the session's ``last_capture()`` after the run was
queued: ``captured`` when the run replayed recorded CUDA graphs, ``recorded`` when it
recorded them, ``eager`` when a device plan ran without graphs, ``host`` when the plan runs
on the host (nothing to capture; docs/CAPTURE.md).

A step's ``seconds`` run from the later of its start and the previous step's end to its
end (the generator has its result). A generator that queues the next decode step before it
waits for the current one (one step in flight, docs/GENAI.md) so counts the interval
between consecutive tokens, and never counts the same time twice.
"""

from __future__ import annotations

import time
from typing import Any

import attrs


@attrs.frozen
class StepStat:
    kind: str            #: "prefill" or "decode"
    tokens: int          #: real (not padding) tokens fed, all rows together
    seconds: float
    signature: str       #: input names, dtypes and shapes
    capture: str         #: "captured", "recorded", "eager" or "host"
    ahead: bool = False  #: queued before the previous step's result was read


@attrs.define
class OpenStep:
    """A step begun (its run queued) and not yet ended."""

    kind: str
    tokens: int
    signature: str
    start: float
    ahead: bool = False
    capture: str = ""


class GenerationStats:
    """Steps of one generator and their totals (``as_dict()`` is JSON-ready)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.steps: list[StepStat] = []
        self._last_end = 0.0

    def begin(self, kind: str, *, tokens: int, signature: str,
              ahead: bool = False) -> OpenStep:
        return OpenStep(kind, tokens, signature, time.perf_counter(), ahead)

    def queued(self, step: OpenStep) -> None:
        """The step's run is queued: what it did with CUDA graphs is known now."""
        step.capture = self._session.last_capture()

    def end(self, step: OpenStep) -> None:
        t1 = time.perf_counter()
        seconds = t1 - max(step.start, self._last_end)
        self._last_end = t1
        self.steps.append(StepStat(step.kind, step.tokens, seconds, step.signature,
                                   step.capture, step.ahead))

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
                    "ahead": sum(1 for s in self.steps if s.kind == "decode" and s.ahead),
                    "signatures": len({s.signature for s in self.steps
                                       if s.kind == "decode"})},
                "steps": [attrs.asdict(s) for s in self.steps]}
