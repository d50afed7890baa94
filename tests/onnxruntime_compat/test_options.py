"""SessionOptions and RunOptions: fields, defaults, config entries, and what the session
does with them (free dims, initializers, external data, ort_config, custom ops)."""

from __future__ import annotations

import json
import os

import attrs
import numpy as np
import pytest

import onnx_ep
from onnx_ep.onnxruntime.capi import _pybind_state as C
from onnx_ep.onnxruntime.capi._options import native_options
from tests.onnxruntime_compat import models as M


def test_session_options_defaults_are_onnxruntimes(ort):
    so = ort.SessionOptions()
    assert (so.intra_op_num_threads, so.inter_op_num_threads) == (0, 0)
    assert (so.log_severity_level, so.log_verbosity_level, so.logid) == (-1, 0, "")
    assert (so.enable_profiling, so.profile_file_prefix) == (False, "onnxruntime_profile_")
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert so.execution_order == ort.ExecutionOrder.DEFAULT
    assert so.optimized_model_filepath == ""
    assert so.enable_cpu_mem_arena and so.enable_mem_pattern and so.enable_mem_reuse
    assert not so.use_deterministic_compute
    with pytest.raises(AttributeError):
        so.intra_op_threads = 2       # a misspelt field is an error, as in onnxruntime


def test_enums_assign_and_compare(ort):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    so.execution_order = 1
    assert so.execution_order == ort.ExecutionOrder.PRIORITY_BASED
    sess = ort.InferenceSession(M.logical_and().SerializeToString(), sess_options=so)
    a = np.array([[True, False], [True, True]])
    assert sess.run([], {"input1:0": a, "input:0": a})[0].tolist() == a.tolist()


def test_options_map_onto_onnx_eps():
    import onnx_ep.onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_free_dimension_override_by_name("batch", 2)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    native = native_options(so, {"CUDAExecutionProvider": {"gpu_mem_limit": "1024"}})
    assert (native.log_level, native.fusion, native.disable_fallback) == ("error", "off", True)
    assert native.free_dimension_overrides == (("batch", 2),)
    assert native.memory_limit == 1024
    with pytest.raises(C.InvalidArgument, match="gpu_mem_limit"):
        native_options(so, {"CUDAExecutionProvider": {"gpu_mem_limit": "lots"}})


def test_session_config_entries(ort):
    so = ort.SessionOptions()
    so.add_session_config_entry("CONFIG_KEY", "CONFIG_VAL")
    assert so.get_session_config_entry("CONFIG_KEY") == "CONFIG_VAL"
    with pytest.raises(RuntimeError, match="SessionOptions does not have configuration with "
                                           "key: INVALID_KEY"):
        so.get_session_config_entry("INVALID_KEY")


def test_run_options_fields_and_config_entries(ort):
    ro = ort.RunOptions()
    assert (ro.log_severity_level, ro.log_verbosity_level, ro.logid) == (-1, 0, "")
    assert not ro.terminate and not ro.only_execute_path_to_fetches
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    with pytest.raises(RuntimeError, match="RunOptions does not have configuration with key"):
        ro.get_run_config_entry("nothing")
    sess = ort.InferenceSession(M.mul_1().SerializeToString())
    np.testing.assert_allclose(sess.run([], {"X": M.W}, ro)[0], M.W * M.W)


@pytest.mark.parametrize("by, overrides, shape", [
    ("denotation", {"DATA_BATCH": 3, "DATA_CHANNEL": 5}, [3, 5, 5]),
    ("name", {"Dim1": 4, "Dim2": 6}, [4, 6, 5])])
def test_free_dimension_overrides(ort, save, by, overrides, shape):
    so = ort.SessionOptions()
    for key, value in overrides.items():
        getattr(so, f"add_free_dimension_override_by_{by}")(key, value)
    sess = ort.InferenceSession(save(M.abs_free_dimensions(), "abs.onnx"), sess_options=so)
    assert sess.get_inputs()[0].name == "x"
    assert sess.get_inputs()[0].shape == shape


def test_add_initializer_replaces_the_models_value(ort):
    so = ort.SessionOptions()
    w = np.array([[2.0, 1.0], [4.0, 3.0], [6.0, 5.0]], np.float32)
    so.add_initializer("W", ort.OrtValue.ortvalue_from_numpy(w))
    sess = ort.InferenceSession(M.mul_1().SerializeToString(), sess_options=so,
                                providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(["Y"], {"X": M.W})[0], M.W * w)
    bad = ort.SessionOptions()
    bad.add_initializer("W", ort.OrtValue.ortvalue_from_numpy(np.ones(2, np.float32)))
    with pytest.raises(C.InvalidArgument, match="add_initializer"):
        ort.InferenceSession(M.mul_1().SerializeToString(), sess_options=bad)


def test_external_initializers_come_from_the_options(ort, save):
    path = save(M.pad_with_external_pads(), "pads.onnx")
    x = np.ones((1, 2), np.float32)
    with pytest.raises(C.Fail, match="external data"):
        ort.InferenceSession(path)
    so = ort.SessionOptions()
    so.add_external_initializers(["Pads_not_on_disk"], [
        ort.OrtValue.ortvalue_from_numpy(np.array([0, 0, 1, 1], np.int64))])
    assert ort.InferenceSession(path, sess_options=so).run(None, {"x": x})[0].shape == (2, 3)
    pads = np.array([0, 0, 1, 1], np.int64).tobytes()
    so = ort.SessionOptions()
    so.add_external_initializers_from_files_in_memory(["Pads_not_on_disk.bin"], [pads],
                                                      [len(pads)])
    assert ort.InferenceSession(path, sess_options=so).run(None, {"x": x})[0].shape == (2, 3)


def test_register_custom_ops_library_names_itself_as_unsupported(ort):
    with pytest.raises(C.NotImplemented, match="register_custom_ops_library.*not supported"):
        ort.SessionOptions().register_custom_ops_library("./libcustom_op_library.so")


def test_session_options_from_the_models_ort_config(ort, monkeypatch):
    model = M.with_ort_config({"session_options": {
        "inter_op_num_threads": 5, "intra_op_num_threads": 2, "graph_optimization_level": 99,
        "execution_mode": 0}})
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    got = ort.InferenceSession(model.SerializeToString()).get_session_options()
    assert (got.inter_op_num_threads, got.intra_op_num_threads) == (5, 2)
    assert got.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert got.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "0")
    assert ort.InferenceSession(model.SerializeToString()).get_session_options() \
        .inter_op_num_threads == 0


def test_get_session_options_is_a_copy_of_the_given_options(ort):
    so = ort.SessionOptions()
    so.logid = "mine"
    sess = ort.InferenceSession(M.mul_1().SerializeToString(), so)
    assert sess.get_session_options().logid == "mine"
    so.logid = "changed"
    assert sess.get_session_options().logid == "mine"


@pytest.mark.skipif("profile" not in {a.name for a in attrs.fields(onnx_ep.SessionOptions)},
                    reason="onnx-ep's profiler is not in this tree")
def test_enable_profiling_writes_a_trace(ort, tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof_")
    sess = ort.InferenceSession(M.mul_1().SerializeToString(), sess_options=so)
    assert sess.get_profiling_start_time_ns() > 0
    sess.run([], {"X": M.W})
    path = sess.end_profiling()
    assert os.path.dirname(path) == str(tmp_path)
    with open(path) as f:
        assert isinstance(json.load(f), (list, dict))


def test_optimized_model_filepath_writes_a_loadable_model(ort, tmp_path):
    pytest.importorskip("onnx_ep.core.export")
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(M.mul_1().SerializeToString(), sess_options=so)
    sess = ort.InferenceSession(so.optimized_model_filepath)
    np.testing.assert_allclose(sess.run(None, {"X": M.W})[0], M.W * M.W)
