"""Suite-wide fixtures only; importable helpers live in tests/helpers/."""

from __future__ import annotations

import os

import pytest

# tests load no third-party plugins unless a test opts in
os.environ.setdefault("ONNX_EP_PLUGINS", "none")


@pytest.fixture(autouse=True)
def _hide_cuda_from_host_tests(request: pytest.FixtureRequest,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests outside tests/providers/cuda/ that are not marked ``cuda`` see no CUDA provider,
    so the host-behaviour tests (provider priority, memory limits, admission, error recovery)
    mean the same on a GPU machine; CUDA tests are marked and name ``providers=["cuda"]``."""
    if (request.node.get_closest_marker("cuda") is not None
            or "cuda" in request.node.path.relative_to(request.config.rootpath).parts[:3]):
        return
    from onnx_ep.core.kernel import Support
    from onnx_ep.providers.cuda import driver

    monkeypatch.setattr(driver, "is_available",
                        lambda: Support.no("hidden from tests not marked cuda (tests/conftest.py)"))
