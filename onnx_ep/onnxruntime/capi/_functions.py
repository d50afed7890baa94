"""onnxruntime's module functions that are not about providers or logging: version and build
information, telemetry, global thread pools, seeds, shared allocators."""

from __future__ import annotations

from typing import Any

import numpy as np

import onnx_ep

#: the onnxruntime Python API release whose names and behaviour this module follows
ORT_API_VERSION = "1.22.0"
#: what ``onnxruntime.__version__`` says: the API version, with onnx-ep's as a local label
VERSION = f"{ORT_API_VERSION}+onnxep.{onnx_ep.__version__}"

#: allocators registered with ``create_and_register_allocator``: recorded, not used
registered_allocators: list[tuple[str, Any, Any]] = []


def get_version_string() -> str:
    return VERSION


def get_build_info() -> str:
    return (f"onnx-ep Build Info: onnx-ep {onnx_ep.__version__}, onnxruntime Python API "
            f"{ORT_API_VERSION} compatibility module (onnx_ep.onnxruntime), providers "
            f"{', '.join(onnx_ep.available_providers())}")


def enable_telemetry_events() -> None:
    """onnx-ep sends no telemetry: nothing to enable."""


def disable_telemetry_events() -> None:
    """onnx-ep sends no telemetry: nothing to disable."""


def set_seed(seed: int) -> None:
    """Seed numpy's global generator (what random ops without a seed attribute may use)."""
    np.random.seed(int(seed))


def set_global_thread_pool_sizes(intra_op_num_threads: int = 0,
                                 inter_op_num_threads: int = 0) -> None:
    """A hint, as the per-session thread counts: onnx-ep leaves threading to numpy/BLAS."""


def create_and_register_allocator(mem_info: Any, arena_cfg: Any) -> None:
    """Recorded only: onnx-ep's memory authority plans every session's memory."""
    registered_allocators.append(("", mem_info, arena_cfg))


def create_and_register_allocator_v2(provider_type: str, mem_info: Any,
                                     provider_options: dict[str, str], arena_cfg: Any) -> None:
    """Recorded only, as :func:`create_and_register_allocator`."""
    registered_allocators.append((provider_type, mem_info, arena_cfg))
