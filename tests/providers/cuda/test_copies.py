"""providers/cuda/copies.py: host <-> device and device <-> device copies, byte fills."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.providers.cuda import copies


@pytest.mark.cuda
def test_copies_round_trip_through_device_memory(allocator, stream) -> None:
    from onnx_ep.core.memory import Role

    x = np.arange(1000, dtype=np.float32)
    a = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    b = allocator.allocate(x.nbytes, Role.ACTIVATIONS, "test")
    copies.copy_htod(a.ptr, x, stream)
    copies.copy_dtod(b.ptr, a.ptr, x.nbytes, stream)
    out = np.empty_like(x)
    copies.copy_dtoh(out, b.ptr, stream)
    stream.synchronize()
    np.testing.assert_array_equal(out, x)
    copies.memset_d8(b.ptr, 0xFF, 8, stream)
    copies.copy_dtoh(out, b.ptr, stream)
    stream.synchronize()
    assert out[:2].view(np.uint32).tolist() == [0xFFFFFFFF, 0xFFFFFFFF]
    np.testing.assert_array_equal(out[2:], x[2:])
    a.free()
    b.free()
