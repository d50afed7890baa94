"""providers/cuda/driver.py: importing without cuda, availability, error mapping."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from onnx_ep.errors import CudaError
from onnx_ep.providers.cuda import driver


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_importing_onnx_ep_and_the_cuda_provider_does_not_import_cuda() -> None:
    proc = _run_python("""
        import sys
        import onnx_ep
        import onnx_ep.providers.cuda
        from onnx_ep.providers.cuda import (allocator, copies, device, driver, launch, nvrtc,
                                            tensor)
        from onnx_ep.providers.cuda.kernels import base
        modules = onnx_ep.providers.cuda.kernel_modules()
        assert onnx_ep.providers.cuda.PROVIDER.name == "cuda" and modules
        loaded = sorted(m for m in sys.modules if m == "cuda" or m.startswith("cuda."))
        print(loaded)
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_is_available_says_cuda_bindings_is_missing_when_it_cannot_be_imported() -> None:
    proc = _run_python("""
        import sys
        sys.modules["cuda.bindings.driver"] = None   # makes the import raise ImportError
        from onnx_ep.providers.cuda import PROVIDER
        support = PROVIDER.is_available()
        assert not support
        print(support.reason)
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cuda-bindings is not installed" in proc.stdout


def test_is_available_is_a_support_value_with_a_reason_when_false() -> None:
    pytest.importorskip("cuda.bindings.driver")
    support = driver.is_available()
    assert support or support.reason
    assert driver.is_available() is support   # cached


def test_check_unwraps_result_tuples() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    ok = drv.CUresult.CUDA_SUCCESS
    assert driver.check((ok,)) is None
    assert driver.check((ok, 5)) == 5
    assert driver.check((ok, 1, 2)) == (1, 2)


def test_check_raises_cuda_error_with_the_driver_error_name() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    with pytest.raises(CudaError) as info:
        driver.check((drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None), "cuMemAlloc(1 TiB)")
    assert info.value.error_name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert "cuMemAlloc(1 TiB)" in str(info.value)
    assert isinstance(info.value, RuntimeError)
