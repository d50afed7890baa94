"""Built-in memory policies ``full_resident`` and ``weight_streaming``: a plugin like any other.

``full_resident`` keeps every weight on the device for the session's life.
``weight_streaming`` keeps weights in host memory and pages them into a
bounded window before the steps that read them, evicting least recently used
weights; counters record page-ins, evictions and bytes moved. The window itself
is the core's (:class:`onnx_ep.core.pager.WeightStore` on the host,
:class:`onnx_ep.core.pager.DevicePager` on a device); the session hands it to the
policy as ``store``. See docs/MEMORY.md.

The default choice answers ``trylast``, so any plugin's policy wins over it; a policy
forced by ``ONNX_EP_MEMORY_POLICY`` or ``SessionOptions(memory_policy=...)`` beats every
plugin (the wrapper below replaces whatever the others chose).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

from onnx_ep.core.hookspecs import hookimpl
from onnx_ep.core.memory import MemoryPolicy
from onnx_ep.core.pager import WeightStore
from onnx_ep.errors import OptionsError

#: overrides the policy choice of every session (``full_resident`` / ``weight_streaming``)
POLICY_ENV = "ONNX_EP_MEMORY_POLICY"


class FullResident:
    """Every weight resident for the session's life. Never pages."""

    name = "full_resident"
    streams = False

    def counters(self) -> dict[str, int]:
        return {"page_ins": 0, "evictions": 0, "bytes_moved": 0}


class WeightStreaming:
    """Weights live on the host and page into a bounded window of ``window_bytes``.

    :param window_bytes: window size; ``None`` sizes it when the session binds
        (half the free budget, but at least what the largest step reads at once).
    """

    name = "weight_streaming"
    streams = True

    def __init__(self, window_bytes: int | None = None) -> None:
        self.window_bytes = window_bytes
        self.store: WeightStore | None = None

    def counters(self) -> dict[str, int]:
        if self.store is None:
            return {"page_ins": 0, "evictions": 0, "bytes_moved": 0}
        return self.store.counters()


def policy_by_name(name: str) -> MemoryPolicy:
    if name == "full_resident":
        return FullResident()
    if name == "weight_streaming":
        return WeightStreaming()
    raise OptionsError(f"unknown memory policy {name!r}; built-ins are 'full_resident' and "
                       f"'weight_streaming'")


def forced_policy(options: Any) -> MemoryPolicy | None:
    """The policy forced by ``ONNX_EP_MEMORY_POLICY`` or ``options.memory_policy``, else None."""
    forced = os.environ.get(POLICY_ENV) or getattr(options, "memory_policy", None)
    return policy_by_name(forced) if forced else None


@hookimpl(wrapper=True)
def onnx_ep_select_memory_policy(model_bytes: int, planned_peak: int, budget: int,
                                 options: Any) -> Generator[None, Any, Any]:
    chosen = yield
    forced = forced_policy(options)
    return forced if forced is not None else chosen


@hookimpl(trylast=True, specname="onnx_ep_select_memory_policy")
def default_memory_policy(model_bytes: int, planned_peak: int, budget: int,
                          options: Any) -> MemoryPolicy:
    if model_bytes + planned_peak <= budget:
        return FullResident()
    return WeightStreaming()
