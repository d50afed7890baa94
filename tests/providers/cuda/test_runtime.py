"""providers/cuda/runtime.py: availability, error mapping, devices, streams, launch, copies, capture."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from onnx_ep.errors import CaptureError, CudaError
from onnx_ep.providers.cuda import runtime

# ---------------------------------------------------------------- CPU-runnable


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_importing_onnx_ep_and_the_cuda_provider_does_not_import_cuda() -> None:
    proc = _run_python("""
        import sys
        import onnx_ep
        import onnx_ep.providers.cuda
        from onnx_ep.providers.cuda import allocator, nvrtc, runtime, tensor
        assert onnx_ep.providers.cuda.PROVIDER.name == "cuda"
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
    support = runtime.is_available()
    assert support or support.reason
    assert runtime.is_available() is support   # cached


def test_check_unwraps_result_tuples() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    ok = drv.CUresult.CUDA_SUCCESS
    assert runtime.check((ok,)) is None
    assert runtime.check((ok, 5)) == 5
    assert runtime.check((ok, 1, 2)) == (1, 2)


def test_check_raises_cuda_error_with_the_driver_error_name() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    with pytest.raises(CudaError) as info:
        runtime.check((drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None), "cuMemAlloc(1 TiB)")
    assert info.value.error_name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert "cuMemAlloc(1 TiB)" in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_grid_1d_covers_n_with_at_least_one_block() -> None:
    assert runtime.grid_1d(0) == (1, 1, 1)
    assert runtime.grid_1d(1) == (1, 1, 1)
    assert runtime.grid_1d(256) == (1, 1, 1)
    assert runtime.grid_1d(257) == (2, 1, 1)
    assert runtime.grid_1d(10**12)[0] == 65535 * 32   # grid-stride loops cover the rest


def test_pack_args_splits_values_and_ctypes() -> None:
    packed = runtime.pack_args([(1, ctypes.c_void_p), (2.5, ctypes.c_float), (7, ctypes.c_int64)])
    assert packed == ((1, 2.5, 7), (ctypes.c_void_p, ctypes.c_float, ctypes.c_int64))


# ---------------------------------------------------------------- GPU


@pytest.mark.cuda
def test_device_reports_name_arch_and_memory(cuda_device) -> None:
    assert runtime.get_device(0) is cuda_device
    major, minor = cuda_device.compute_capability
    assert cuda_device.arch == f"sm_{major}{minor}"
    assert cuda_device.name
    assert 0 < cuda_device.free_bytes() <= cuda_device.total_bytes


@pytest.mark.cuda
def test_get_device_of_a_missing_ordinal_raises_invalid_device(cuda_device) -> None:
    with pytest.raises(CudaError) as info:
        runtime.get_device(1000)
    assert info.value.error_name == "CUDA_ERROR_INVALID_DEVICE"


@pytest.mark.cuda
def test_streams_are_non_blocking(cuda_device, stream) -> None:
    drv = runtime.driver()
    flags = runtime.check(drv.cuStreamGetFlags(stream.handle))
    assert flags & drv.CUstream_flags.CU_STREAM_NON_BLOCKING.value
    assert stream.ptr == int(stream.handle) != 0
    assert not stream.is_capturing()
    assert cuda_device.default_stream is cuda_device.default_stream


@pytest.mark.cuda
def test_copies_round_trip_through_device_memory(allocator, stream) -> None:
    from onnx_ep.core.memory import Role

    x = np.arange(1000, dtype=np.float32)
    a = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    b = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    runtime.copy_htod(a.ptr, x, stream)
    runtime.copy_dtod(b.ptr, a.ptr, x.nbytes, stream)
    out = np.empty_like(x)
    runtime.copy_dtoh(out, b.ptr, stream)
    stream.synchronize()
    np.testing.assert_array_equal(out, x)
    runtime.memset_d8(b.ptr, 0xFF, 8, stream)
    runtime.copy_dtoh(out, b.ptr, stream)
    stream.synchronize()
    assert out[:2].view(np.uint32).tolist() == [0xFFFFFFFF, 0xFFFFFFFF]
    np.testing.assert_array_equal(out[2:], x[2:])
    a.free()
    b.free()


@pytest.mark.cuda
def test_launch_fill_and_axpy_are_bit_exact(cuda_device, allocator, stream) -> None:
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda import nvrtc

    n = 100_003
    fill = nvrtc.get_function("testing", "fill_f32", cuda_device)
    axpy = nvrtc.get_function("testing", "axpy_f32", cuda_device)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    dx = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    dy = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    runtime.copy_htod(dx.ptr, x, stream)
    runtime.launch(fill, runtime.grid_1d(n), (256, 1, 1),
                   [(dy.ptr, runtime.PTR), (1.5, runtime.F32), (n, runtime.I64)], stream)
    a = np.float32(0.3)
    runtime.launch(axpy, runtime.grid_1d(n, max_blocks=64), (256, 1, 1),
                   [(float(a), runtime.F32), (dx.ptr, runtime.PTR), (dy.ptr, runtime.PTR),
                    (n, runtime.I64)], stream)
    out = np.empty_like(x)
    runtime.copy_dtoh(out, dy.ptr, stream)
    stream.synchronize()
    expected = a * x + np.float32(1.5)   # float32 multiply, then float32 add: no FMA
    np.testing.assert_array_equal(out, expected)
    dx.free()
    dy.free()


@pytest.mark.cuda
def test_launch_failure_raises_cuda_error_naming_the_kernel(cuda_device, stream) -> None:
    from onnx_ep.providers.cuda import nvrtc

    fill = nvrtc.get_function("testing", "fill_f32", cuda_device)
    with pytest.raises(CudaError) as info:
        runtime.launch(fill, (1, 1, 1), (4096, 1, 1),   # more threads than a block may have
                       [(0, runtime.PTR), (0.0, runtime.F32), (0, runtime.I64)], stream)
    assert info.value.error_name == "CUDA_ERROR_INVALID_VALUE"
    assert "fill_f32" in str(info.value)


@pytest.mark.cuda
def test_missing_symbol_raises_not_found(cuda_device) -> None:
    from onnx_ep.providers.cuda import nvrtc

    with pytest.raises(CudaError) as info:
        nvrtc.get_function("testing", "no_such_kernel", cuda_device)
    assert info.value.error_name == "CUDA_ERROR_NOT_FOUND"


@pytest.mark.cuda
def test_synchronize_while_capturing_raises_capture_error_and_keeps_the_capture(
        cuda_device, allocator, stream) -> None:
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda import nvrtc

    drv = runtime.driver()
    fill = nvrtc.get_function("testing", "fill_f32", cuda_device)
    n = 1024
    y = allocator.allocate(4 * n, Role.ACTIVATIONS, "test")
    runtime.check(drv.cuStreamBeginCapture(
        stream.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
    try:
        assert stream.is_capturing()
        with pytest.raises(CaptureError):
            stream.synchronize()
        with pytest.raises(CaptureError):
            cuda_device.synchronize()
        runtime.launch(fill, runtime.grid_1d(n), (256, 1, 1),
                       [(y.ptr, runtime.PTR), (7.0, runtime.F32), (n, runtime.I64)], stream)
    finally:
        graph = runtime.check(drv.cuStreamEndCapture(stream.handle), "cuStreamEndCapture")
    assert not stream.is_capturing()
    exe = runtime.check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    runtime.check(drv.cuGraphLaunch(exe, stream.handle), "cuGraphLaunch")
    out = np.zeros(n, np.float32)
    runtime.copy_dtoh(out, y.ptr, stream)
    stream.synchronize()
    assert (out == 7.0).all()
    runtime.check(drv.cuGraphExecDestroy(exe))
    runtime.check(drv.cuGraphDestroy(graph))
    y.free()


@pytest.mark.cuda
def test_events_time_work_on_a_stream(cuda_device, stream) -> None:
    start, end = cuda_device.new_event(timing=True), cuda_device.new_event(timing=True)
    start.record(stream)
    end.record(stream)
    end.synchronize()
    assert end.query()
    assert start.elapsed_ms(end) >= 0.0
    start.close()
    end.close()
