"""providers/cuda/device.py: devices, streams, events, and synchronization under capture."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import CaptureError, CudaError
from onnx_ep.providers.cuda import copies, device, driver, launch
from onnx_ep.providers.cuda.kernels.base import F32, I64, PTR


@pytest.mark.cuda
def test_device_reports_name_arch_and_memory(cuda_device) -> None:
    assert device.get_device(0) is cuda_device
    major, minor = cuda_device.compute_capability
    assert cuda_device.arch == f"sm_{major}{minor}"
    assert cuda_device.name
    assert 0 < cuda_device.free_bytes() <= cuda_device.total_bytes


@pytest.mark.cuda
def test_get_device_of_a_missing_ordinal_raises_invalid_device(cuda_device) -> None:
    with pytest.raises(CudaError) as info:
        device.get_device(1000)
    assert info.value.error_name == "CUDA_ERROR_INVALID_DEVICE"


@pytest.mark.cuda
def test_streams_are_non_blocking(cuda_device, stream) -> None:
    drv = driver.driver()
    flags = driver.check(drv.cuStreamGetFlags(stream.handle))
    assert flags & drv.CUstream_flags.CU_STREAM_NON_BLOCKING.value
    assert stream.ptr == int(stream.handle) != 0
    assert not stream.is_capturing()
    assert cuda_device.default_stream is cuda_device.default_stream


@pytest.mark.cuda
def test_synchronize_while_capturing_raises_capture_error_and_keeps_the_capture(
        cuda_device, allocator, stream) -> None:
    from onnx_ep.core.memory import Role
    from onnx_ep.providers.cuda import nvrtc

    drv = driver.driver()
    fill = nvrtc.get_function("testing", "fill_f32", cuda_device)
    n = 1024
    y = allocator.allocate(4 * n, Role.ACTIVATIONS, "test")
    driver.check(drv.cuStreamBeginCapture(
        stream.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
    try:
        assert stream.is_capturing()
        with pytest.raises(CaptureError):
            stream.synchronize()
        with pytest.raises(CaptureError):
            cuda_device.synchronize()
        launch.launch(fill, launch.grid_1d(n), (256, 1, 1),
                      [(y.ptr, PTR), (7.0, F32), (n, I64)], stream)
    finally:
        graph = driver.check(drv.cuStreamEndCapture(stream.handle), "cuStreamEndCapture")
    assert not stream.is_capturing()
    exe = driver.check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    driver.check(drv.cuGraphLaunch(exe, stream.handle), "cuGraphLaunch")
    out = np.zeros(n, np.float32)
    copies.copy_dtoh(out, y.ptr, stream)
    stream.synchronize()
    assert (out == 7.0).all()
    driver.check(drv.cuGraphExecDestroy(exe))
    driver.check(drv.cuGraphDestroy(graph))
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
