"""InferenceSession: loading, metadata, runs, feeds and results, providers."""

from __future__ import annotations

import pathlib
import threading

import numpy as np
import pytest

import onnx_ep
from onnx_ep.onnxruntime.capi import _pybind_state as C
from tests.onnxruntime_compat import models as M

X = M.W
SQUARES = X * X


def test_run_from_path_pathlib_and_bytes(ort, save):
    path = save(M.mul_1(), "mul_1.onnx")
    for source in (path, pathlib.Path(path), open(path, "rb").read()):
        sess = ort.InferenceSession(source, providers=ort.get_available_providers())
        (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
        assert (inp.name, inp.shape, inp.type) == ("X", [3, 2], "tensor(float)")
        assert (out.name, out.shape) == ("Y", [3, 2])
        np.testing.assert_allclose(sess.run([out.name], {inp.name: X})[0], SQUARES)


def test_an_empty_or_none_output_list_returns_every_output(ort):
    sess = ort.InferenceSession(M.passthrough().SerializeToString())
    feed = {"input_0": np.zeros((1, 2, 2, 2), np.float32)}
    assert len(sess.run([], feed)) == len(sess.run(None, feed)) == 2


def test_matmul_and_a_non_contiguous_feed(ort):
    sess = ort.InferenceSession(M.matmul().SerializeToString())
    assert sess.get_outputs()[0].shape == [3, 1]
    x = np.array([[2.0, 1.0], [4.0, 3.0], [6.0, 5.0]], np.float32)[:, [1, 0]]
    expected = np.array([[5.0], [11.0], [17.0]], np.float32)
    np.testing.assert_allclose(sess.run(["Y"], {"X": x})[0], expected)
    np.testing.assert_allclose(sess.run(["Y"], {"X": np.ascontiguousarray(x)})[0], expected)


def test_a_symbolic_dim_is_reported_by_its_name(ort):
    sess = ort.InferenceSession(M.matmul(symbolic=True).SerializeToString())
    assert sess.get_inputs()[0].shape == ["None", 2]
    assert sess.get_outputs()[0].shape == ["None", 1]
    assert sess.run(["Y"], {"X": X})[0].shape == (3, 1)


def test_boolean_inputs_keep_the_models_order_and_types(ort):
    sess = ort.InferenceSession(M.logical_and().SerializeToString())
    a, b = sess.get_inputs()
    assert (a.name, b.name, a.type) == ("input1:0", "input:0", "tensor(bool)")
    assert sess.get_outputs()[0].type == "tensor(bool)"
    av = np.array([[True, True], [False, False]])
    bv = np.array([[True, False], [True, False]])
    np.testing.assert_equal(sess.run(["output:0"], {"input1:0": av, "input:0": bv})[0], av & bv)


def test_a_missing_input_is_a_value_error_naming_it(ort):
    sess = ort.InferenceSession(M.logical_and().SerializeToString())
    with pytest.raises(ValueError, match=r"Required inputs \(\['input1:0'\]\) are missing from "
                                         r"input feed \(\['input:0'\]\)"):
        sess.run([], {"input:0": np.ones((2, 2), bool)})


def test_a_list_feed_converts_to_the_inputs_type(ort):
    sess = ort.InferenceSession(M.mul_1().SerializeToString())
    np.testing.assert_allclose(sess.run([], {"X": X.tolist()})[0], SQUARES)


@pytest.mark.parametrize("feed", [
    np.array(["this", "is", "identity", "test"], dtype=str).reshape(2, 2),
    np.array(["Olá", "你好", "여보세요", "hello"], dtype=str).reshape(2, 2),
    np.array(["this", "is", "identity", "test"], dtype=object).reshape(2, 2)])
def test_string_tensors_round_trip(ort, feed):
    sess = ort.InferenceSession(M.identity_string().SerializeToString())
    assert sess.get_inputs()[0].type == sess.get_outputs()[0].type == "tensor(string)"
    np.testing.assert_equal(sess.run(["output:0"], {"input:0": feed})[0], feed)
    np.testing.assert_equal(sess.run([], {"input:0": feed.tolist()})[0], feed)


def test_bytes_and_void_string_feeds_come_back_as_text(ort):
    sess = ort.InferenceSession(M.identity_string().SerializeToString())
    raw = np.array([b"this", b"is", b"identity", b"test"]).reshape(2, 2)
    np.testing.assert_equal(sess.run(None, {"input:0": raw})[0].astype("|S8"), raw)
    void = np.array([b"must", b"have", b"same", b"size"], dtype=np.void).reshape(2, 2)
    np.testing.assert_equal(sess.run(None, {"input:0": void})[0],
                            np.array([["must", "have"], ["same", "size"]], dtype=object))


def test_sequences_in_and_out(ort):
    sess = ort.InferenceSession(M.sequence_length().SerializeToString())
    assert sess.get_inputs()[0].type == "seq(tensor(float))"
    assert sess.get_outputs()[0].type == "tensor(int64)"
    x = [np.arange(6, dtype=np.float32).reshape(2, 3)] * 2
    assert sess.run(None, {"X": x})[0] == 2
    t1, t2 = np.arange(6).reshape(2, 3), np.ones((2, 3), np.int64)
    sess = ort.InferenceSession(M.sequence_construct().SerializeToString())
    assert sess.get_outputs()[0].type == "seq(tensor(int64))"
    np.testing.assert_array_equal(sess.run(None, {"tensor1": t1, "tensor2": t2})[0], [t1, t2])
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(M.sequence_insert().SerializeToString(), sess_options=so)
    assert [i.type for i in sess.get_inputs()] == ["seq(tensor(int64))", "tensor(int64)"]
    np.testing.assert_array_equal(sess.run(None, {"tensor": t1, "input_seq": []})[0], [t1])


def test_an_optional_sequence_input_takes_a_list(ort):
    sess = ort.InferenceSession(M.identity_optional_sequence().SerializeToString())
    x = [np.arange(5, dtype=np.float32)]
    np.testing.assert_allclose(sess.run([sess.get_outputs()[0].name], {"x": x})[0], x)


def test_a_passed_through_input_is_copied_and_results_are_views(ort):
    sess = ort.InferenceSession(M.passthrough().SerializeToString())
    kept = []
    for i in range(3):
        x = np.full((1, 2, 2, 2), float(i), np.float32)
        plus, same = sess.run(None, {"input_0": x})
        assert not np.shares_memory(same, x)
        kept.append((plus, same))
        x[...] = -1
    for i, (plus, same) in enumerate(kept):
        assert plus.flat[0] == i + 10 and same.flat[0] == i
    y = ort.InferenceSession(M.mul_1().SerializeToString()).run(None, {"X": X})[0]
    assert y.base is not None


def test_concurrent_runs_with_their_own_run_options(ort):
    so = ort.SessionOptions()
    so.log_verbosity_level = 1
    so.logid = "threads"
    sess = ort.InferenceSession(M.mul_1().SerializeToString(), sess_options=so)
    errors = []

    def work(tag: str) -> None:
        ro = ort.RunOptions()
        ro.logid = tag
        try:
            for _ in range(20):
                np.testing.assert_allclose(sess.run([], {"X": X}, run_options=ro)[0], SQUARES)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_run_async_calls_back_with_results_and_user_data(ort):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(M.mul_1().SerializeToString(), so)
    done = threading.Event()
    got = []

    def callback(results, data, err):
        got.append((results, data, err))
        done.set()
    sess.run_async(["Y"], {"X": X}, callback, {"id": 7})
    assert done.wait(10)
    results, data, err = got[0]
    assert err == "" and data == {"id": 7}
    np.testing.assert_allclose(results[0], SQUARES)


def test_run_async_reports_a_failure_as_text(ort):
    sess = ort.InferenceSession(M.mul_1().SerializeToString())
    done = threading.Event()
    got = []
    sess.run_async(None, {"X": np.ones((2, 2), np.float32)},
                   lambda r, d, e: (got.append((r, e)), done.set()), None)
    assert done.wait(10)
    assert got[0][0] == [] and "INVALID_ARGUMENT" in got[0][1]


def test_feed_errors_are_invalid_argument_and_feed_error(ort):
    sess = ort.InferenceSession(M.mul_1().SerializeToString())
    for bad in (np.ones((3, 2)), np.ones((2, 2), np.float32)):
        with pytest.raises(C.InvalidArgument) as info:
            sess.run(None, {"X": bad})
        assert isinstance(info.value, onnx_ep.errors.FeedError)
        assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)
        assert str(info.value).startswith("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ")
    with pytest.raises(C.InvalidArgument, match="unknown output 'Q'"):
        sess.run(["Q"], {"X": X})


def test_load_errors_map_to_onnxruntimes_types(ort, tmp_path):
    with pytest.raises(C.NoSuchFile, match="File doesn't exist"):
        ort.InferenceSession(str(tmp_path / "missing.onnx"))
    with pytest.raises(C.InvalidProtobuf):
        ort.InferenceSession(b"not a model")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(C.InvalidProtobuf):
        ort.InferenceSession(str(tmp_path / "bad.onnx"))
    with pytest.raises(TypeError, match="Unable to load from type"):
        ort.InferenceSession(3)


def test_model_metadata(ort):
    model = M.mul_1()
    model.producer_name, model.domain, model.doc_string = "maker", "ai.test", "a model"
    model.model_version = 3
    model.graph.doc_string = "the graph"
    model.metadata_props.add(key="author", value="me")
    meta = ort.InferenceSession(model.SerializeToString()).get_modelmeta()
    assert (meta.producer_name, meta.graph_name, meta.domain) == ("maker", "test", "ai.test")
    assert (meta.description, meta.graph_description, meta.version) == ("a model",
                                                                         "the graph", 3)
    assert meta.custom_metadata_map == {"author": "me"}
    assert ort.InferenceSession(M.mul_1().SerializeToString()).get_modelmeta().version == \
        2**63 - 1


def test_overridable_initializers_are_listed_and_can_be_fed(ort):
    sess = ort.InferenceSession(M.mul_1(listed_weight=True).SerializeToString())
    assert [i.name for i in sess.get_inputs()] == ["X"]
    (w,) = sess.get_overridable_initializers()
    assert (w.name, w.shape, w.type) == ("W", [3, 2], "tensor(float)")
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], SQUARES)
    ones = np.ones((3, 2), np.float32)
    np.testing.assert_allclose(sess.run(None, {"X": X, "W": ones})[0], X)


def test_memory_infos_and_ep_devices_have_one_entry_per_value(ort):
    sess = ort.InferenceSession(M.mul_1().SerializeToString())
    (mi,) = sess.get_input_memory_infos()
    assert mi.name == "Cpu" and len(sess.get_output_memory_infos()) == 1
    assert len(sess.get_input_epdevices()) == 1


def test_graph_assignment_info_needs_its_config_entry(ort):
    sess = ort.InferenceSession(M.add_mul_add().SerializeToString())
    with pytest.raises(C.Fail, match="'session.record_ep_graph_assignment_info' must be set "
                                     "to \"1\""):
        sess.get_provider_graph_assignment_info()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    info = ort.InferenceSession(M.add_mul_add().SerializeToString(),
                                sess_options=so).get_provider_graph_assignment_info()
    assert {s.ep_name for s in info} == {"CPUExecutionProvider"}
    ids = sorted(f"{n.domain}:{n.op_type}/{n.name}" for s in info for n in s.get_nodes())
    assert ids == [":Add/add_0", ":Add/add_1", ":Mul/mul_0"]


def test_terminate_cancels_a_run_with_fail(ort):
    sess = ort.InferenceSession(M.mul_1().SerializeToString())
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(C.Fail):
        sess.run(None, {"X": X}, ro)
    ro.terminate = False
    np.testing.assert_allclose(sess.run(None, {"X": X}, ro)[0], SQUARES)


def test_end_profiling_without_profiling_returns_an_empty_path(ort):
    sess = ort.InferenceSession(M.mul_1().SerializeToString())
    assert sess.end_profiling() == ""
    assert sess.get_profiling_start_time_ns() == 0
