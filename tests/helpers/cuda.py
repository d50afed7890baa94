"""Shared constants and helpers for CUDA provider tests."""

from __future__ import annotations

#: memory budget of the ``allocator`` fixture: small, so refusals are cheap to provoke
CUDA_TEST_LIMIT = 256 * 2**20
