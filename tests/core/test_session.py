"""Session: onnxruntime-shaped API, plan cache, threads, feed errors, recovery after failures."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest

import onnx_ep
from onnx_ep.core import planner, session as session_mod
from onnx_ep.errors import FeedError, ModelError, NodeError, ProviderUnavailable
from tests.helpers.models import mlp_model, two_input_model
from tests.helpers.oracle import node_model, run_ort


def _x(batch: int = 3, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 8)).astype(np.float32)


def test_run_matches_onnxruntime_for_path_bytes_and_proto(tmp_path):
    model = mlp_model()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    x = _x()
    expected = run_ort(model, {"x": x})[0]
    for source in (model, model.SerializeToString(), str(path), path):
        (y,) = onnx_ep.Session(source, providers=["cpu_reference"]).run(None, {"x": x})
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_external_data_model_loads(tmp_path):
    model = mlp_model(d_in=64, d_hidden=64)
    x = np.ones((2, 64), np.float32)
    expected = run_ort(model, {"x": x})[0]
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    (y,) = onnx_ep.Session(str(path)).run(None, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-4)


def test_metadata_is_onnxruntime_shaped():
    s = onnx_ep.Session(mlp_model())
    (inp,) = s.get_inputs()
    assert (inp.name, inp.shape, inp.type) == ("x", ["batch", 8], "tensor(float)")
    (out,) = s.get_outputs()
    assert (out.name, out.type) == ("y", "tensor(float)")
    assert s.get_providers() == ["cpu_reference"]
    assert "cpu_reference" in onnx_ep.available_providers()


def test_output_names_select_and_order_outputs():
    s = onnx_ep.Session(mlp_model())
    full = s.run(None, {"x": _x()})
    assert len(full) == 1
    np.testing.assert_array_equal(s.run(["y"], {"x": _x()})[0], full[0])
    with pytest.raises(FeedError, match="unknown output 'nope'"):
        s.run(["nope"], {"x": _x()})


def test_second_run_with_same_shapes_does_no_planning(monkeypatch):
    calls = []
    real = planner.plan_signature

    def counting(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(session_mod, "plan_signature", counting)
    s = onnx_ep.Session(mlp_model())
    s.run(None, {"x": _x(3)})
    s.run(None, {"x": _x(3, seed=2)})
    assert len(calls) == 1
    s.run(None, {"x": _x(5)})          # a new shape signature plans once more
    s.run(None, {"x": _x(5)})
    assert len(calls) == 2
    assert s.stats["plans"] == 2 and s.stats["plan_cache_hits"] == 2


def test_runs_start_from_the_programs_constant_slots_and_replacing_one_keeps_them_in_step():
    s = onnx_ep.Session(mlp_model())
    prog = s._program
    assert len(prog.env0) == prog.n_slots + 2 and prog.constants
    for slot, value in prog.constants:
        assert prog.env0[slot] is value
    assert sum(v is not None for v in prog.env0) == len(prog.constants)
    want = s.run(None, {"x": _x(3)})[0]
    slot, value = prog.constants[0]
    prog.replace_constant(0, np.zeros_like(value))
    assert prog.constants[0][1] is prog.env0[slot] and not prog.env0[slot].any()
    assert not np.array_equal(s.run(None, {"x": _x(3)})[0], want)   # runs read the new one
    prog.replace_constant(0, value)
    np.testing.assert_array_equal(s.run(None, {"x": _x(3)})[0], want)


def test_concurrent_runs_from_threads_give_correct_results():
    s = onnx_ep.Session(mlp_model())
    model = mlp_model()
    inputs = [_x(batch=1 + i % 4, seed=i) for i in range(16)]
    expected = [run_ort(model, {"x": x})[0] for x in inputs]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(20):
                results[i] = s.run(None, {"x": inputs[i]})[0]
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, y in results.items():
        np.testing.assert_allclose(y, expected[i], rtol=1e-5, atol=1e-5)


class TestFeedErrors:
    def test_missing_feed_names_the_input_and_expectation(self):
        s = onnx_ep.Session(mlp_model())
        with pytest.raises(FeedError, match=r"missing feed for input 'x'.*tensor\(float\)") as e:
            s.run(None, {})
        assert e.value.input_name == "x"

    def test_extra_feed_lists_known_inputs(self):
        s = onnx_ep.Session(mlp_model())
        with pytest.raises(FeedError, match="unknown input 'z'.*inputs are: x"):
            s.run(None, {"x": _x(), "z": _x()})

    def test_wrong_dtype(self):
        s = onnx_ep.Session(mlp_model())
        with pytest.raises(FeedError, match="expects dtype float32.*got float64") as e:
            s.run(None, {"x": _x().astype(np.float64)})
        assert e.value.got.startswith("float64")

    def test_wrong_rank(self):
        s = onnx_ep.Session(mlp_model())
        with pytest.raises(FeedError, match=r"expects rank 2 .*got rank 1"):
            s.run(None, {"x": np.zeros(8, np.float32)})

    def test_wrong_fixed_dim(self):
        s = onnx_ep.Session(mlp_model())
        with pytest.raises(FeedError, match=r"expects dim 1 = 8.*got 7"):
            s.run(None, {"x": np.zeros((2, 7), np.float32)})

    def test_symbolic_dims_must_agree_across_inputs(self):
        s = onnx_ep.Session(two_input_model())
        with pytest.raises(FeedError, match="symbolic 'k'"):
            s.run(None, {"a": np.zeros((2, 3), np.float32), "b": np.zeros(4, np.float32)})
        (c,) = s.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32)})
        np.testing.assert_array_equal(c, np.full((2, 3), 2, np.float32))

    def test_non_array_feed(self):
        s = onnx_ep.Session(mlp_model())
        with pytest.raises(FeedError, match="expects a numpy array"):
            s.run(None, {"x": {"not": "a tensor"}})
        # a list converts to the input's type, as onnxruntime converts it
        assert s.run(None, {"x": [[1.0] * 8]})[0].shape == (1, 4)

    def test_feeds_must_be_a_mapping(self):
        s = onnx_ep.Session(mlp_model())
        with pytest.raises(FeedError, match="feeds must be a dict"):
            s.run(None, [_x()])  # type: ignore[arg-type]

    def test_session_still_works_after_every_feed_error(self):
        s = onnx_ep.Session(mlp_model())
        for bad in ({}, {"x": _x().astype(np.float64)}, {"x": np.zeros(8, np.float32)}):
            with pytest.raises(FeedError):
                s.run(None, bad)
        (y,) = s.run(None, {"x": _x()})
        np.testing.assert_allclose(y, run_ort(mlp_model(), {"x": _x()})[0], rtol=1e-5,
                                   atol=1e-5)


def test_kernel_error_names_node_and_session_recovers():
    # Gather with an out-of-range index is invalid input, not a wrap-around
    model = node_model("Gather", {"data": np.arange(6, dtype=np.float32).reshape(3, 2),
                                  "idx": np.array([0, 1], np.int64)}, axis=0)
    s = onnx_ep.Session(model)
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    with pytest.raises(NodeError, match="Gather"):
        s.run(None, {"data": data, "idx": np.array([0, 7], np.int64)})
    (y,) = s.run(None, {"data": data, "idx": np.array([2, -1], np.int64)})
    np.testing.assert_array_equal(y, data[[2, -1]])


class TestModelErrors:
    def test_truncated_file(self, tmp_path):
        path = tmp_path / "t.onnx"
        path.write_bytes(mlp_model().SerializeToString()[:50])
        with pytest.raises(ModelError, match="truncated"):
            onnx_ep.Session(str(path))

    def test_missing_file(self, tmp_path):
        with pytest.raises(ModelError, match="does not exist"):
            onnx_ep.Session(str(tmp_path / "nope.onnx"))

    def test_garbage_bytes(self):
        with pytest.raises(ModelError):
            onnx_ep.Session(b"\xff\x00 this is not protobuf \x12\x99")

    def test_unknown_opset(self):
        model = mlp_model()
        model.opset_import[0].version = 999
        with pytest.raises(ModelError, match="unknown ai.onnx opset 999"):
            onnx_ep.Session(model)

    def test_cycle(self):
        from onnx import TensorProto, helper
        g = helper.make_graph(
            [helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
             helper.make_node("Relu", ["a"], ["b"], name="n2")], "cyc",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
        with pytest.raises(ModelError, match="cycle"):
            onnx_ep.Session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))

    def test_undefined_value(self):
        from onnx import TensorProto, helper
        g = helper.make_graph(
            [helper.make_node("Relu", ["ghost"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        with pytest.raises(ModelError, match="ghost"):
            onnx_ep.Session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_unknown_provider_is_a_clear_error():
    with pytest.raises(ProviderUnavailable, match="'warp' is unavailable.*no such provider") as e:
        onnx_ep.Session(mlp_model(), providers=["warp"])
    assert e.value.provider == "warp" and "cpu_reference" in str(e.value)


def test_cuda_without_a_usable_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("ONNX_EP_PROVIDERS", raising=False)   # the real default below
    if "cuda" in onnx_ep.available_providers():
        pytest.skip("this machine has a usable GPU")
    with pytest.raises(ProviderUnavailable, match="'cuda' is unavailable: .+Available providers: "
                                                  "cpu_reference"):
        onnx_ep.Session(mlp_model(), providers=["cuda"])
    # providers=None picks what is available: cpu_reference here
    assert onnx_ep.Session(mlp_model()).get_providers() == ["cpu_reference"]


def test_onnx_ep_providers_names_the_default_provider_list(monkeypatch):
    monkeypatch.setenv("ONNX_EP_PROVIDERS", " cpu_reference , ")
    assert onnx_ep.Session(mlp_model()).get_providers() == ["cpu_reference"]
    monkeypatch.setenv("ONNX_EP_PROVIDERS", "warp")
    with pytest.raises(ProviderUnavailable, match="'warp'"):
        onnx_ep.Session(mlp_model())
    # an explicit providers= wins over the variable
    assert onnx_ep.Session(mlp_model(), providers=["cpu_reference"]).get_providers() == \
        ["cpu_reference"]
    monkeypatch.delenv("ONNX_EP_PROVIDERS")
    assert onnx_ep.Session(mlp_model()).get_providers() == onnx_ep.available_providers()


def test_options_from_toml(tmp_path):
    p = tmp_path / "o.toml"
    p.write_text('providers = ["cpu_reference"]\nlog_level = "info"\nvram_limit = 1048576\n')
    opts = onnx_ep.SessionOptions.from_toml(p)
    assert opts.providers == ("cpu_reference",) and opts.memory_limit == 1 << 20
    s = onnx_ep.Session(mlp_model(), options=opts)
    assert s.get_providers() == ["cpu_reference"]
    p.write_text("bogus = 1\n")
    with pytest.raises(onnx_ep.errors.OptionsError, match="unknown option.*bogus"):
        onnx_ep.SessionOptions.from_toml(p)


def test_a_closed_session_refuses_to_run_and_close_is_idempotent():
    s = onnx_ep.Session(mlp_model())
    s.run(None, {"x": _x()})
    s.close()
    s.close()
    with pytest.raises(onnx_ep.errors.PlanError, match="is closed"):
        s.run(None, {"x": _x()})
