"""providers/cuda/tensor.py: DeviceTensor metadata, the DLPack ctypes ABI (on CPU), device round trips."""

from __future__ import annotations

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

from onnx_ep.providers.cuda import tensor as T
from onnx_ep.providers.cuda.tensor import DeviceTensor, DLPackImport

BF16 = np.dtype(ml_dtypes.bfloat16)

# ---------------------------------------------------------------- CPU: the DLPack struct layout


class CpuExport:
    """A kDLCPU producer built on our capsule code, so numpy can consume it."""

    def __init__(self, arr: np.ndarray, owner: object) -> None:
        self.arr = arr
        self.owner = owner

    def __dlpack_device__(self) -> tuple[int, int]:
        return (T.kDLCPU, 0)

    def __dlpack__(self, **_: object) -> object:
        return T.make_capsule(self.arr.ctypes.data, self.arr.dtype, self.arr.shape, self.owner,
                              device_type=T.kDLCPU, device_id=0)


class Owner:
    """Something weak-referenceable standing for the memory's owner."""


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int64", "int32", "int8",
                                   "uint8", "bool"])
@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), (), (0, 3)])
def test_numpy_consumes_our_capsule_zero_copy(dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    arr = np.asarray((rng.standard_normal(shape) * 10)).astype(dtype)
    got = np.from_dlpack(CpuExport(arr, Owner()))
    assert got.dtype == arr.dtype and got.shape == arr.shape
    np.testing.assert_array_equal(got, arr)
    if arr.size:
        assert got.ctypes.data == arr.ctypes.data   # the same memory, not a copy


def test_consumer_deleter_drops_the_owner_reference() -> None:
    arr = np.arange(6, dtype=np.float32)
    owner = Owner()
    ref = weakref.ref(owner)
    before = len(T._exports)
    got = np.from_dlpack(CpuExport(arr, owner))
    del owner
    gc.collect()
    assert ref() is not None                       # the consumer's array keeps it alive
    del got
    gc.collect()
    assert ref() is None
    assert len(T._exports) == before


def test_unconsumed_capsule_releases_the_owner_when_it_dies() -> None:
    arr = np.arange(6, dtype=np.float32)
    owner = Owner()
    ref = weakref.ref(owner)
    capsule = CpuExport(arr, owner).__dlpack__()
    del owner
    gc.collect()
    assert ref() is not None
    del capsule
    gc.collect()
    assert ref() is None


def test_import_reads_numpys_capsule_and_calls_its_deleter() -> None:
    arr = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    imp = DLPackImport(arr.__dlpack__(), arr)
    assert imp.device_type == T.kDLCPU
    assert imp.ptr == arr.ctypes.data
    assert imp.dtype == np.int64 and imp.shape == (2, 3, 4)
    assert imp.is_contiguous()
    del imp            # calls numpy's deleter; a wrong layout would crash here
    gc.collect()


def test_import_detects_non_contiguous_strides() -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4).T
    imp = DLPackImport(arr.__dlpack__(), arr)
    assert imp.shape == (4, 3) and imp.strides == (1, 4)
    assert not imp.is_contiguous()


@pytest.mark.parametrize("dtype", [BF16, np.dtype("float16"), np.dtype("bool"),
                                   np.dtype("uint8")])
def test_our_capsule_round_trips_through_our_import(dtype: np.dtype) -> None:
    arr = np.arange(6).astype(dtype).reshape(2, 3)
    capsule = T.make_capsule(arr.ctypes.data, arr.dtype, arr.shape, arr, device_type=T.kDLCPU)
    imp = DLPackImport(capsule, None)
    assert (imp.dtype, imp.shape, imp.ptr) == (dtype, (2, 3), arr.ctypes.data)
    assert imp.strides == (3, 1)


def test_dtype_codes_follow_dlpack() -> None:
    assert T.dl_dtype(np.float32) == (T.kDLFloat, 32, 1)
    assert T.dl_dtype(BF16) == (T.kDLBfloat, 16, 1)
    assert T.dl_dtype(np.bool_) == (T.kDLBool, 8, 1)
    assert T.dl_dtype(np.uint8) == (T.kDLUInt, 8, 1)
    assert T.dl_dtype(np.int64) == (T.kDLInt, 64, 1)
    with pytest.raises(TypeError):
        T.dl_dtype(np.dtype(ml_dtypes.float8_e4m3fn))
    assert T.np_dtype_of(T.kDLBfloat, 16, 1) == BF16
    with pytest.raises(TypeError):
        T.np_dtype_of(T.kDLFloat, 32, 4)


# ---------------------------------------------------------------- CPU: DeviceTensor metadata


def test_device_tensor_metadata_and_views() -> None:
    t = DeviceTensor(0x1000, np.float16, (2, 3, 4))
    assert t.nbytes == 48 and t.size == 24 and t.ndim == 3
    assert t.strides == (24, 8, 2)
    assert t.spec.shape == (2, 3, 4) and t.spec.dtype == np.float16
    assert t.__dlpack_device__() == (T.kDLCUDA, 0)
    v = t.view(np.uint8, (8,), offset_bytes=40)
    assert v.ptr == 0x1000 + 40 and v.owner is t
    with pytest.raises(ValueError):
        t.view(np.uint8, (9,), offset_bytes=40)


def test_from_dlpack_refuses_host_producers() -> None:
    with pytest.raises(TypeError, match="CUDA"):
        DeviceTensor.from_dlpack(np.zeros(3, np.float32))


# ---------------------------------------------------------------- GPU


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int64, np.int32, np.int8,
                                   np.uint8, np.bool_])
def test_from_numpy_and_back_is_exact(allocator, stream, dtype) -> None:
    arr = (np.arange(-30, 30) * 1.25).astype(dtype).reshape(3, 4, 5)
    t = DeviceTensor.from_numpy(arr, allocator, stream, holder="test")
    assert allocator.authority.held_by("test") >= arr.nbytes
    out = t.numpy(stream)
    assert out.dtype == arr.dtype
    np.testing.assert_array_equal(out, arr)
    t.owner.free()


@pytest.mark.cuda
def test_zero_dim_and_empty_tensors_round_trip(allocator, stream) -> None:
    for arr in (np.array(3.5, np.float32), np.zeros((0, 4), np.float32)):
        t = DeviceTensor.from_numpy(arr, allocator, stream, holder="test")
        out = t.numpy(stream)
        assert out.shape == arr.shape
        np.testing.assert_array_equal(out, arr)


@pytest.mark.cuda
def test_provider_to_host_and_from_host_round_trip(cuda_device) -> None:
    from onnx_ep.providers import cuda

    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = cuda.from_host(arr)
    assert t.owner.reservation.holder == cuda.TRANSFER_HOLDER
    np.testing.assert_array_equal(cuda.to_host(t), arr)
    t.owner.free()


@pytest.mark.cuda
def test_torch_shares_memory_both_ways(allocator, stream) -> None:
    torch = pytest.importorskip("torch")
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = DeviceTensor.from_numpy(arr, allocator, stream, holder="test")
    stream.synchronize()
    tt = torch.from_dlpack(t)
    assert tt.device.type == "cuda" and tt.data_ptr() == t.ptr
    assert torch.equal(tt.cpu(), torch.from_numpy(arr))
    src = torch.arange(10, dtype=torch.float16, device="cuda")
    back = DeviceTensor.from_dlpack(src)
    assert back.ptr == src.data_ptr() and back.dtype == np.float16 and back.shape == (10,)
    np.testing.assert_array_equal(back.numpy(back_stream(back)), np.arange(10, dtype=np.float16))
    with pytest.raises(TypeError, match="contiguous"):
        DeviceTensor.from_dlpack(torch.zeros(4, 3, device="cuda").t())


def back_stream(t: DeviceTensor):
    from onnx_ep.providers.cuda.device import get_device

    return get_device(t.device).default_stream


@pytest.mark.cuda
def test_cupy_shares_memory_both_ways(allocator, stream) -> None:
    cp = pytest.importorskip("cupy")
    arr = np.arange(8, dtype=np.int32)
    t = DeviceTensor.from_numpy(arr, allocator, stream, holder="test")
    stream.synchronize()
    c = cp.from_dlpack(t)
    assert c.data.ptr == t.ptr
    np.testing.assert_array_equal(cp.asnumpy(c), arr)
    src = cp.arange(5, dtype=cp.float32)
    back = DeviceTensor.from_dlpack(src)
    assert back.ptr == src.data.ptr
    np.testing.assert_array_equal(back.numpy(back_stream(back)), np.arange(5, dtype=np.float32))
