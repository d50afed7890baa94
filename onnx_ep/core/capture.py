"""Capture segments: which runs of a device plan could be recorded into a CUDA graph.

After the first (eager, warm-up) run of a shape signature on a device, the session asks
every step's kernel :meth:`~onnx_ep.core.kernel.Kernel.capture_support` and cuts the plan
into *segments* (maximal runs of consecutive device steps whose kernel answered SUPPORTED)
and *seams* (the steps between them, each with the reason it cannot be captured: a host
step, a copy between host and device, or the kernel's own reason). The answer is kept on
the plan and reported by ``Session.capture_report()``. Recording and replaying the
segments is not implemented yet; docs/CAPTURE.md says what is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from onnx_ep.core.kernel import CaptureSupport
from onnx_ep.core.placement import HOST
from onnx_ep.errors import KernelContractError


@attrs.frozen
class Seam:
    """A step that runs eagerly between segments, and why."""

    index: int
    name: str
    reason: str


@attrs.frozen
class CaptureLayout:
    """Segments and seams of one plan, in step order.

    :ivar segments: each a tuple of step indices, consecutive and all capture-supported.
    :ivar seams: the steps outside every segment.
    """

    segments: tuple[tuple[int, ...], ...]
    seams: tuple[Seam, ...]

    def report(self, names: Sequence[str]) -> dict[str, Any]:
        """JSON-ready: segments as step names, seams with reasons."""
        return {"segments": [[names[i] for i in seg] for seg in self.segments],
                "captured_steps": sum(len(seg) for seg in self.segments),
                "seams": [{"step": s.name, "reason": s.reason} for s in self.seams]}


def step_support(step: Any) -> CaptureSupport:
    """Whether ``step`` (a planner ``Step``) may be recorded, with the reason if not."""
    if step.copy is not None:
        c = step.copy
        return CaptureSupport.unsupported(f"copies {c.src!r} from {c.src_device} to "
                                          f"{c.dst_device}")
    placed = step.placed
    if placed is None or placed.device == HOST:
        provider = placed.provider if placed is not None else "the host"
        return CaptureSupport.unsupported(f"runs on the host ({provider})")
    answer = placed.kernel.capture_support()
    if not isinstance(answer, CaptureSupport):
        raise KernelContractError(
            f"node {step.name!r}: {type(placed.kernel).__name__}.capture_support() returned "
            f"{type(answer).__name__}, expected a CaptureSupport")
    return answer


def segment(steps: Sequence[Any]) -> CaptureLayout:
    """Cut ``steps`` into segments and seams by each step's :func:`step_support`."""
    segments: list[tuple[int, ...]] = []
    seams: list[Seam] = []
    current: list[int] = []
    for i, step in enumerate(steps):
        support = step_support(step)
        if support.supported:
            current.append(i)
            continue
        if current:
            segments.append(tuple(current))
            current = []
        seams.append(Seam(i, step.name, support.reason or "capture unsupported"))
    if current:
        segments.append(tuple(current))
    return CaptureLayout(tuple(segments), tuple(seams))
