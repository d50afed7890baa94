"""nvrtc.precompile: the families a session needs compile in parallel into the disk cache
before its first run (no GPU needed; skipped without NVRTC)."""

from __future__ import annotations

import pytest

from tests.providers.test_kernel_sources import _nvrtc_available


def test_precompile_fills_the_cache_once_and_skips_what_it_cannot_name(tmp_path, monkeypatch):
    why = _nvrtc_available()
    if why:
        pytest.skip(why)
    from onnx_ep.providers.cuda import nvrtc

    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(nvrtc.PREBUILT_ENV, "0")   # the cubins a wheel ships would be skipped
    done = nvrtc.precompile(["copies", "testing", "no_such_family"], "sm_90", 12080)
    assert done == ["copies", "testing"]
    cubins = sorted(p.name.split("-")[0] for p in (tmp_path / "cubin").glob("*.cubin"))
    assert cubins == ["copies", "testing"]
    assert all(p.read_bytes()[:4] == b"\x7fELF" for p in (tmp_path / "cubin").glob("*.cubin"))
    # cached now: nothing to do; another driver version is another key
    assert nvrtc.precompile(["copies", "testing"], "sm_90", 12080) == []
    assert nvrtc.precompile(["copies"], "sm_90", 13000) == ["copies"]
