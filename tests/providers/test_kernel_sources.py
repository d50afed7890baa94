"""Every CUDA source compiles with NVRTC for sm_90 (no GPU needed; skipped without NVRTC)."""

from __future__ import annotations

import pytest

from onnx_ep.errors import NvrtcError


def _nvrtc_available() -> str | None:
    try:
        from cuda.bindings import nvrtc as _nvrtc

        _nvrtc.nvrtcVersion()
    except Exception as exc:  # ImportError, or the NVRTC library missing
        return f"NVRTC is not available ({type(exc).__name__}: {exc})"
    return None


@pytest.mark.slow
def test_every_kernel_source_compiles_with_nvrtc_for_sm90():
    why = _nvrtc_available()
    if why:
        pytest.skip(why)
    from onnx_ep.providers.cuda import nvrtc

    failures = []
    for path in sorted(nvrtc.KERNELS_DIR.glob("*.cu")):
        try:
            nvrtc.compile_cubin(path.read_text(), path.name, nvrtc.full_options("sm_90"), "sm_90")
        except NvrtcError as exc:
            failures.append(f"{path.name}:\n{exc.log or exc}")
    assert not failures, "\n\n".join(failures)
