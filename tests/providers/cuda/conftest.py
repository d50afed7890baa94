"""Fixtures for CUDA provider tests: ``cuda_device``, ``stream``, ``allocator``.

GPU tests are marked ``@pytest.mark.cuda`` and take ``cuda_device``, which
skips with :func:`onnx_ep.providers.cuda.driver.is_available`'s reason when
there is no usable GPU. The skip happens at setup, never around a test body.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.cuda import CUDA_TEST_LIMIT


@pytest.fixture(scope="session")
def cuda_device() -> Any:
    from onnx_ep.providers.cuda import device, driver

    support = driver.is_available()
    if not support:
        pytest.skip(f"CUDA unavailable: {support.reason}")
    return device.get_device(0)


@pytest.fixture
def stream(cuda_device: Any) -> Iterator[Any]:
    s = cuda_device.new_stream()
    yield s
    s.synchronize()
    s.close()


@pytest.fixture
def allocator(cuda_device: Any) -> Iterator[Any]:
    """The device-0 allocator capped at CUDA_TEST_LIMIT; its pool is trimmed after each test."""
    from onnx_ep.providers.cuda.allocator import CudaAllocator

    a = CudaAllocator.for_device(cuda_device, CUDA_TEST_LIMIT)
    yield a
    cuda_device.synchronize()
    a.trim()
