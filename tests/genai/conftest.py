"""Fixtures of the genai tests: tiny model folders written once per session."""

from __future__ import annotations

import pytest

from tests.helpers import genai_models as gm


@pytest.fixture(scope="session")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """``{"growing": path, "shared": path, "weights": dict}``; EOS 47 in both."""
    root = tmp_path_factory.mktemp("genai")
    w = gm.write_folder(root / "growing", "growing")
    gm.write_folder(root / "shared", "shared")
    return {"growing": root / "growing", "shared": root / "shared", "weights": w}
