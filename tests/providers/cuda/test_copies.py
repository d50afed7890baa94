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


@pytest.mark.cuda
@pytest.mark.parametrize("count", [2, 5, copies.COPY_MANY, copies.COPY_MANY + 3])
def test_copy_many_moves_every_buffer_byte_for_byte(allocator, stream, count) -> None:
    """Sizes from 1 byte to 100 KiB, aligned and odd offsets, in ceil(count / 48) launches."""
    from onnx_ep.core.memory import Role

    rng = np.random.default_rng(count)
    sizes = [int(rng.integers(1, 100_000)) if k % 3 else int(rng.integers(1, 40))
             for k in range(count)]
    total = sum(sizes) + 16 * count
    src = allocator.allocate(total, Role.ACTIVATIONS, "test")
    dst = allocator.allocate(total, Role.ACTIVATIONS, "test")
    data = rng.integers(0, 256, total, dtype=np.uint8)
    copies.copy_htod(src.ptr, data, stream)
    copies.memset_d8(dst.ptr, 0, total, stream)
    jobs, at = [], 0
    for k, n in enumerate(sizes):
        at += k % 2 * 3                      # every other buffer at an odd offset
        jobs.append((dst.ptr + at, src.ptr + at, n))
        at += n + 8
    copies.copy_many(jobs + [(dst.ptr, src.ptr, 0)], stream.device, stream)
    out = np.empty(total, np.uint8)
    copies.copy_dtoh(out, dst.ptr, stream)
    stream.synchronize()
    expected = np.zeros(total, np.uint8)
    for d, s, n in jobs:
        expected[d - dst.ptr:d - dst.ptr + n] = data[s - src.ptr:s - src.ptr + n]
    np.testing.assert_array_equal(out, expected)
    src.free()
    dst.free()


@pytest.mark.cuda
def test_runtime_copy_many_checks_shapes_and_copies_tensors(cuda_device, stream) -> None:
    from onnx_ep.core.kernel import TensorSpec
    from onnx_ep.providers.cuda.device_runtime import cuda_runtime

    rt = cuda_runtime(cuda_device.ordinal)
    xs = [np.arange(k * 10 + 1, dtype=np.float16) for k in range(4)]
    srcs, dsts = [], []
    for x in xs:
        block = rt.pooled(x.nbytes * 2 + 512, "test")
        s = rt.tensor(block, 0, TensorSpec(x.dtype, x.shape))
        d = rt.tensor(block, 256 + x.nbytes, TensorSpec(x.dtype, x.shape))
        rt.upload(x, s, stream)
        srcs.append(s)
        dsts.append(d)
    rt.copy_many(list(zip(srcs, dsts)), stream)
    for x, d in zip(xs, dsts):
        np.testing.assert_array_equal(rt.download(d, stream), x)
    with pytest.raises(ValueError, match="copy of"):
        rt.copy_many([(srcs[0], dsts[1])], stream)
