"""providers/cuda/device_runtime.py: the DeviceRuntime the core's DeviceBinding drives."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.memory import Role, authority_for


@pytest.mark.cuda
def test_runtime_backs_core_reservations_and_copies(cuda_device) -> None:
    from onnx_ep.providers import cuda
    from onnx_ep.providers.cuda.tensor import DeviceTensor

    rt = cuda.PROVIDER.runtime()
    assert rt.device == "cuda:0" and rt.granularity == 512
    assert 0 < rt.budget() <= cuda_device.total_bytes
    authority = authority_for(rt.device, 32 << 20, rt.granularity, budget=rt.budget)
    r = authority.reserve(1000, Role.ACTIVATIONS, "session-x")
    alloc = rt.allocate(r)
    stream = rt.new_stream()
    t = rt.tensor(alloc, 512, TensorSpec(np.float32, (2, 3)))
    assert isinstance(t, DeviceTensor) and t.ptr == alloc.ptr + 512
    with pytest.raises(ValueError):
        rt.tensor(alloc, 512, TensorSpec(np.float32, (200,)))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert rt.upload(x, t, stream) is t
    with pytest.raises(ValueError):
        rt.upload(x.astype(np.float64), t, stream)
    np.testing.assert_array_equal(rt.download(t, stream), x)
    rt.synchronize(stream)
    alloc.free()
    r.release()
    assert authority.held_by("session-x") == 0
