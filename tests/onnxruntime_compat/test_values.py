"""OrtValue, DLPack, SparseTensor, OrtDevice, OrtMemoryInfo, OrtArenaCfg."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from onnx_ep.onnxruntime.capi import _pybind_state as C
from tests.onnxruntime_compat import models as M


def test_ortvalue_from_numpy_describes_and_shares_the_array(ort):
    x = M.W.copy()
    v = ort.OrtValue.ortvalue_from_numpy(x)
    assert (v.device_name(), v.shape(), v.data_type()) == ("cpu", [3, 2], "tensor(float)")
    assert v.is_tensor() and not v.is_sparse_tensor() and v.has_value()
    assert v.element_type() == 1 and v.tensor_size_in_bytes() == 24
    assert v.data_ptr() == x.ctypes.data
    np.testing.assert_array_equal(v.numpy(), x)
    v.update_inplace(x * 2)
    np.testing.assert_array_equal(x, M.W * 2)
    with pytest.raises(RuntimeError, match="does not contain SparseTensor"):
        v.as_sparse_tensor()


def test_ortvalue_feeds_a_run_and_stays_valid(ort):
    v = ort.OrtValue.ortvalue_from_numpy(M.W)
    sess = ort.InferenceSession(M.mul_1().SerializeToString())
    np.testing.assert_array_equal(sess.run(["Y"], {"X": v})[0], M.W * M.W)
    vect = sess._sess.run_with_ort_values({"X": v._get_c_value()}, ["Y"], C.RunOptions())
    assert isinstance(vect, C.OrtValueVector)
    (out,) = sess.run_with_ort_values(["Y"], {"X": v})
    assert out.data_type() == "tensor(float)"
    np.testing.assert_array_equal(out.numpy(), M.W * M.W)
    np.testing.assert_array_equal(v.numpy(), M.W)


def test_ortvalue_with_onnx_type_and_from_shape_and_type(ort):
    v = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(M.W, 1)
    assert v.is_tensor() and v.element_type() == 1 and v.shape() == [3, 2]
    e = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.int64)
    assert e.numpy().shape == (2, 3) and e.numpy().dtype == np.int64
    assert ort.OrtValue.ortvalue_from_shape_and_type([1], 7).numpy().dtype == np.int64


def test_a_device_ortvalue_without_the_device_raises(ort):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here")
    with pytest.raises(RuntimeError):
        ort.OrtValue.ortvalue_from_numpy(M.W, "cuda", 0)


def test_array_protocol_shares_memory_and_converts(ort):
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    v = ort.OrtValue.ortvalue_from_numpy(x)
    assert np.asarray(v).ctypes.data == v.data_ptr()
    assert np.asarray(v, dtype=np.float32).ctypes.data == v.data_ptr()
    assert np.asarray(v, dtype=np.float64).dtype == np.float64
    np.testing.assert_equal(np.array(v), x)
    for arr in (np.array([1, 2, 3]), np.array([True, False])):
        r = np.asarray(ort.OrtValue.ortvalue_from_numpy(arr))
        assert r.dtype == arr.dtype and (r == arr).all()


def test_dlpack_round_trips_without_copying(ort):
    x = M.W.copy()
    v = ort.OrtValue.ortvalue_from_numpy(x)
    assert v.__dlpack_device__() == (1, 0) and v._ortvalue.__dlpack_device__() == (1, 0)
    for capsule in (v._ortvalue.to_dlpack(), v._ortvalue.__dlpack__()):
        assert not C.is_dlpack_uint8_tensor(capsule)
        back = C.OrtValue.from_dlpack(capsule, False)
        assert back.data_ptr() == v.data_ptr()
        np.testing.assert_equal(back.numpy(), x)
    assert C.is_dlpack_uint8_tensor(np.zeros(2, np.uint8).__dlpack__())
    np.testing.assert_equal(ort.OrtValue.from_dlpack(v.__dlpack__()).numpy(), x)
    same = ort.OrtValue.from_dlpack(v)
    assert same.data_ptr() == v.data_ptr()
    np.testing.assert_equal(ort.OrtValue.from_dlpack(x).numpy(), x)


@pytest.mark.parametrize("shape", [(1, 8, 0, 128), (0,), (0, 4), (4, 0)])
def test_dlpack_accepts_zero_size_tensors(ort, shape):
    arr = np.zeros(shape, np.float32)
    assert C.OrtValue.from_dlpack(arr.__dlpack__(), False).shape() == list(shape)
    v = ort.OrtValue.ortvalue_from_numpy(arr)
    assert C.OrtValue.from_dlpack(v._ortvalue.to_dlpack(), False).shape() == list(shape)


def test_dlpack_keeps_bool_and_uint8_apart(ort):
    flags = np.array([True, False, True])
    assert ort.OrtValue.from_dlpack(ort.OrtValue.ortvalue_from_numpy(flags)).numpy().dtype == bool
    u8 = ort.OrtValue.from_dlpack(ort.OrtValue.ortvalue_from_numpy(np.array([1, 255], np.uint8)))
    assert u8.numpy().dtype == np.uint8
    as_bool = C.OrtValue.from_dlpack(np.array([1, 0], np.uint8).__dlpack__(), True)
    assert as_bool.numpy().dtype == bool


def test_sparse_coo_tensor(ort):
    cpu = ort.OrtDevice.make("cpu", 0)
    values, indices = np.array([1.0, 2.0, 3.0], np.float32), np.array([3, 5, 15])
    st = ort.SparseTensor.sparse_coo_from_numpy([9, 9], values, indices, cpu)
    assert st.format() == ort.OrtSparseFormat.ORT_SPARSE_COO
    assert (st.dense_shape(), st.data_type(), st.device_name()) == ([9, 9],
                                                                    "sparse_tensor(float)", "cpu")
    got_values, got_indices = st.values(), st.as_coo_view().indices()
    assert not got_values.flags.writeable and not got_indices.flags.writeable
    gc.collect()
    assert np.array_equal(got_values, values) and np.array_equal(got_indices, indices)
    v = ort.OrtValue.ort_value_from_sparse_tensor(st)
    assert v.is_sparse_tensor() and np.array_equal(v.as_sparse_tensor().values(), values)
    words = np.array(["xyz", "yxz", "zyx"], dtype=str)
    sst = ort.SparseTensor.sparse_coo_from_numpy([9, 9], words, indices, cpu)
    assert sst.data_type() == "sparse_tensor(string)"
    assert np.array_equal(sst.values(), words)
    with pytest.raises(RuntimeError):
        st.to_cuda(ort.OrtDevice.make("cuda", 0))
    dense = st.dense()
    assert dense.reshape(-1)[[3, 5, 15]].tolist() == [1.0, 2.0, 3.0] and dense.sum() == 6


def test_sparse_csr_tensor(ort):
    inner, outer = np.array([1, 1, 1]), np.array([0, 1, 2, 3, 3, 3, 3, 3, 3, 3])
    st = ort.SparseTensor.sparse_csr_from_numpy([9, 9], np.array([1.0, 2.0, 3.0], np.float32),
                                                inner, outer, ort.OrtDevice.make("cpu", 0))
    assert st.format() == ort.OrtSparseFormat.ORT_SPARSE_CSRC
    view = st.as_csrc_view()
    assert np.array_equal(view.inner(), inner) and np.array_equal(view.outer(), outer)
    assert not view.inner().flags.writeable
    assert st.dense()[:3, 1].tolist() == [1.0, 2.0, 3.0]


def test_ort_device(ort):
    cpu = ort.OrtDevice.make("cpu", 0)
    assert (cpu.device_id(), cpu.device_type(), cpu.device_mem_type()) == (0, 0, 0)
    assert cpu.device_vendor_id() == ort.OrtDeviceVendorId.NONE
    cuda = ort.OrtDevice.make("cuda", 1)
    assert cuda.device_vendor_id() == ort.OrtDeviceVendorId.NVIDIA == 0x10DE
    assert (cuda.device_type(), cuda.device_id()) == (C.OrtDevice.cuda(), 1)
    assert C.OrtDevice.cpu() == 0 and C.OrtDevice.default_memory() == 0


def test_ort_memory_info(ort):
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                             ort.OrtMemType.DEFAULT)
    assert (info.name, info.device_id, info.mem_type) == ("Cpu", 0, ort.OrtMemType.DEFAULT)
    assert info.allocator_type == ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR
    assert info.device_mem_type == ort.OrtDeviceMemoryType.DEFAULT
    assert info.device_vendor_id == 0
    v2 = ort.OrtMemoryInfo.create_v2("Test", ort.OrtMemoryInfoDeviceType.CPU, 0, 0,
                                     ort.OrtDeviceMemoryType.DEFAULT, 128,
                                     ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR)
    assert (v2.name, v2.mem_type, v2.device_vendor_id) == ("Test", ort.OrtMemType.DEFAULT, 0)


def test_arena_config_and_allocator_registration_are_accepted(ort):
    cfg = ort.OrtArenaCfg(8, 0, 4, 2)
    assert (cfg.max_mem, cfg.arena_extend_strategy, cfg.initial_chunk_size_bytes,
            cfg.max_dead_bytes_per_chunk) == (8, 0, 4, 2)
    kv = {"max_mem": 32, "arena_extend_strategy": 11, "initial_chunk_size_bytes": 18,
          "max_dead_bytes_per_chunk": 14, "initial_growth_chunk_size_bytes": 12,
          "max_power_of_two_extend_bytes": 17}
    cfg = ort.OrtArenaCfg(kv)
    assert {k: getattr(cfg, k) for k in kv} == kv
    with pytest.raises(RuntimeError, match="unknown key"):
        ort.OrtArenaCfg({"bogus": 1})
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                             ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, None)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.use_env_allocators", "1")
    sess = ort.InferenceSession(M.mul_1().SerializeToString(), sess_options=so)
    np.testing.assert_array_equal(sess.run(None, {"X": M.W})[0], M.W * M.W)
