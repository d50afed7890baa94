"""Module functions: providers, device, version, build info, logging, telemetry, provider
argument checks, ``install()``."""

from __future__ import annotations

import logging
import sys
import warnings

import numpy as np
import pytest

import onnx_ep.onnxruntime as compat
from onnx_ep.errors import OnnxEpError
from onnx_ep.onnxruntime.capi import _pybind_state as C
from onnx_ep.onnxruntime.capi.onnxruntime_inference_collection import (
    check_and_normalize_provider_args,
)
from tests.onnxruntime_compat import models as M


def test_provider_lists_use_onnxruntimes_names_cpu_last(ort):
    assert "CPUExecutionProvider" in ort.get_available_providers()
    assert ort.get_available_providers()[-1] == "CPUExecutionProvider"
    assert ort.get_all_providers()[-1] == "CPUExecutionProvider"
    assert "CUDAExecutionProvider" in ort.get_all_providers()
    sess = ort.InferenceSession(M.mul_1().SerializeToString(),
                                providers=ort.get_available_providers())
    assert "CPUExecutionProvider" in sess.get_providers()


def test_get_device_version_and_build_info(ort):
    assert ort.get_device() in ("CPU", "GPU")
    assert ort.get_version_string() == ort.__version__
    assert "Build Info" in ort.get_build_info()
    ort.disable_telemetry_events()
    ort.enable_telemetry_events()


@pytest.mark.parametrize("providers", [None, ["CPUExecutionProvider"],
                                       [("CPUExecutionProvider", {"x": 1})]])
def test_providers_none_names_and_tuples(ort, providers):
    sess = ort.InferenceSession(M.mul_1().SerializeToString(), providers=providers)
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_provider_options_come_back_as_strings(ort):
    sess = ort.InferenceSession(M.mul_1().SerializeToString(),
                                providers=["CPUExecutionProvider"], provider_options=[{"a": 1}])
    assert sess.get_provider_options() == {"CPUExecutionProvider": {"a": "1"}}


def test_an_unavailable_provider_is_dropped_with_a_warning(ort):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here")
    with pytest.warns(UserWarning, match="not in available provider names"):
        sess = ort.InferenceSession(M.mul_1().SerializeToString(),
                                    providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_an_unknown_provider_falls_back_at_construction_and_raises_from_set_providers(ort):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = ort.InferenceSession(M.mul_1().SerializeToString(), providers=["Bogus"])
    assert any("Unknown Provider Type: Bogus" in str(w.message) for w in caught)
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
            sess.set_providers(["InvalidProvider"])
    sess.set_providers(["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_allclose(sess.run(None, {"X": M.W})[0], M.W * M.W)


def test_check_and_normalize_provider_args():
    valid = ["a", "b", "c"]

    def ok(providers, options, names, opts):
        assert check_and_normalize_provider_args(providers, options, valid) == (names, opts)
    ok(None, None, [], [])
    ok(["a"], None, ["a"], [{}])
    ok([("a", {1: 2}), "b"], None, ["a", "b"], [{"1": "2"}, {}])
    ok(["a", "b"], [{1: 2}, {}], ["a", "b"], [{"1": "2"}, {}])
    with pytest.warns(UserWarning, match="Duplicate provider 'a'"):
        ok(["a", "b", "a"], [{"x": 1}, {}, {"y": 2}], ["a", "b"], [{"x": "1"}, {}])
    for providers, options in ((3, None), ([3], None), (["a"], 3), (["a"], ["not dict"]),
                               (["a", "b"], [{1: 2}]), ([("a", {1: 2})], [{3: 4}])):
        with pytest.raises(ValueError):
            check_and_normalize_provider_args(providers, options, valid)


def test_logger_severity_is_validated_and_sets_the_onnx_ep_logger(ort):
    logger = logging.getLogger("onnx_ep")
    before = logger.level
    try:
        ort.set_default_logger_severity(3)
        assert logger.level == logging.ERROR
        with pytest.raises(RuntimeError, match="Invalid logging severity"):
            ort.set_default_logger_severity(5)
        ort.set_default_logger_verbosity(1)
    finally:
        logger.setLevel(before)


def test_logger_callback_receives_onnx_ep_records(ort):
    logger = logging.getLogger("onnx_ep")
    before = logger.level
    messages = []
    try:
        ort.set_default_logger_callback(lambda *rec: messages.append(rec), severity=0)
        sess = ort.InferenceSession(M.mul_1().SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        sess.run(["Y"], {"X": M.W})
        assert messages
        for severity, category, logid, location, message in messages:
            assert isinstance(severity, int) and 0 <= severity <= 4
            assert all(isinstance(s, str) for s in (category, logid, location, message))
        ort.set_default_logger_callback(None)
        count = len(messages)
        ort.InferenceSession(M.mul_1().SerializeToString())
        assert len(messages) == count
    finally:
        ort.set_default_logger_callback(None)
        logger.setLevel(before)


def test_logger_callback_arguments_are_checked_and_a_raising_one_is_contained(ort,
                                                                               monkeypatch):
    logger = logging.getLogger("onnx_ep")
    before = logger.level
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    try:
        for severity in (5, -1):
            with pytest.raises(RuntimeError):
                ort.set_default_logger_callback(print, severity=severity)
        with pytest.raises(RuntimeError):
            ort.set_default_logger_callback("not a callable")

        def boom(*_):
            raise ValueError("intentional")
        ort.set_default_logger_callback(boom, severity=0)
        ort.InferenceSession(M.mul_1().SerializeToString())
        assert reported and reported[0].exc_type is ValueError
    finally:
        ort.set_default_logger_callback(None)
        logger.setLevel(before)


def test_capi_modules_export_the_types_tests_import():
    from onnx_ep.onnxruntime.capi import onnxruntime_pybind11_state as S

    for name in ("Fail", "InvalidArgument", "NoSuchFile", "InvalidProtobuf", "RuntimeException",
                 "NotImplemented", "EPFail", "OrtValueVector", "RunOptions"):
        assert getattr(S, name) is getattr(C, name)
    assert issubclass(C.Fail, RuntimeError) and issubclass(C.Fail, OnnxEpError)


def test_install_aliases_onnxruntime_only_when_no_other_is_imported(monkeypatch):
    names = ["onnxruntime", *(f"onnxruntime.{s}" for s in compat._SUBMODULES)]
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    other = type(sys)("onnxruntime")
    monkeypatch.setitem(sys.modules, "onnxruntime", other)
    assert compat.install() is False
    assert sys.modules["onnxruntime"] is other
    monkeypatch.delitem(sys.modules, "onnxruntime")
    assert compat.install() is True
    import onnxruntime
    from onnxruntime.capi import _pybind_state
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    assert onnxruntime is compat and _pybind_state is C and Fail is C.Fail
    assert compat.install() is True
    for name in names:          # the aliases go; monkeypatch then restores what was there
        sys.modules.pop(name, None)


def test_a_raising_logger_callback_is_contained_under_the_default_unraisablehook(ort, monkeypatch,
                                                                                 capfd):
    """CPython's own ``sys.unraisablehook`` accepts only its ``UnraisableHookArgs``: with
    it in place (no test runner's hook), a raising callback is printed, and sessions load
    and run as before."""
    logger = logging.getLogger("onnx_ep")
    before = logger.level
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)

    def broken_callback(*_):
        raise ZeroDivisionError("callback broke")
    try:
        ort.set_default_logger_callback(broken_callback, severity=0)
        sess = ort.InferenceSession(M.mul_1().SerializeToString())
        np.testing.assert_array_equal(sess.run(None, {"X": M.W})[0], M.W * M.W)
    finally:
        ort.set_default_logger_callback(None)
        logger.setLevel(before)
    err = capfd.readouterr().err
    assert "logging callback" in err and "ZeroDivisionError: callback broke" in err
