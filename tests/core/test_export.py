"""Writing the model as onnx-ep runs it (core/export.py): folded, loadable by onnxruntime."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_ep
from onnx_ep.core import export
from onnx_ep.core.export import optimize_model, write_optimized_model
from onnx_ep.errors import OptionsError
from tests.helpers.oracle import ORACLE_IR_VERSION, ORACLE_OPSET

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(16)


def _model(nodes: list, inputs: list, outputs: list, inits: dict, **kw) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "export", inputs, outputs,
                              initializer=[numpy_helper.from_array(np.asarray(v), k)
                                           for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", ORACLE_OPSET)],
                             ir_version=ORACLE_IR_VERSION, **kw)


def _n(op: str, ins: list[str], out: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, [out], name=out, **attrs)


def shape_model() -> onnx.ModelProto:
    """x[batch, 4, 6] -> y[batch, 3]: Reshape to (batch, 24) by a shape chain, a MatMul with
    the sum of two initializers, a bias from a Constant node, a Cast of a small constant."""
    nodes = [
        _n("Shape", ["x"], "xs"),
        helper.make_node("Constant", [], ["zero"], name="zero",
                         value=numpy_helper.from_array(np.array(0, np.int64))),
        _n("Gather", ["xs", "zero"], "b", axis=0),
        _n("Unsqueeze", ["b", "axis0"], "b1"),
        _n("Concat", ["b1", "minus1"], "new_shape", axis=0),
        _n("Reshape", ["x", "new_shape"], "flat"),
        _n("Add", ["w1", "w2"], "w"),                      # a constant subexpression
        _n("MatMul", ["flat", "w"], "mm"),
        helper.make_node("Constant", [], ["bias"], name="bias",
                         value_floats=[0.5, -1.0, 2.0]),
        _n("Add", ["mm", "bias"], "y"),
    ]
    rng = np.random.default_rng(4)
    inits = {"axis0": np.array([0], np.int64), "minus1": np.array([-1], np.int64),
             "w1": rng.standard_normal((24, 3)).astype(np.float32),
             "w2": rng.standard_normal((24, 3)).astype(np.float32)}
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        ["batch", 4, 6])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], inits)


def _ort(model: str | onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feeds)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_free_dim_override_folds_the_shape_chain_and_onnxruntime_runs_it(tmp_path):
    model = shape_model()
    out = tmp_path / "opt.onnx"
    written = write_optimized_model(model, out, free_dims={"batch": 2})
    loaded = onnx.load(out)
    assert _ops(loaded) == ["Reshape", "MatMul", "Add"], _ops(loaded)
    assert len(loaded.graph.node) < len(model.graph.node)
    assert loaded == written
    inits = {t.name: numpy_helper.to_array(t) for t in loaded.graph.initializer}
    assert inits["new_shape"].tolist() == [2, -1]
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(inits["w"], w["w1"] + w["w2"])
    assert {"w1", "w2", "axis0", "minus1", "zero"}.isdisjoint(inits)   # nothing reads them
    assert [d.dim_value for d in loaded.graph.input[0].type.tensor_type.shape.dim] == [2, 4, 6]

    feeds = {"x": RNG.standard_normal((2, 4, 6)).astype(np.float32)}
    (got,) = _ort(str(out), feeds)
    (ort_original,) = _ort(model, feeds)
    (ep,) = onnx_ep.Session(model, providers=["cpu_reference"]).run(None, feeds)
    (ep_written,) = onnx_ep.Session(str(out), providers=["cpu_reference"]).run(None, feeds)
    np.testing.assert_allclose(got, ort_original, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, ep, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(ep_written, ep)


def test_without_the_override_only_constants_fold():
    folded = optimize_model(shape_model())
    assert _ops(folded) == ["Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "MatMul", "Add"]
    assert {t.name for t in folded.graph.initializer} >= {"w", "bias", "zero"}
    feeds = {"x": RNG.standard_normal((5, 4, 6)).astype(np.float32)}
    np.testing.assert_allclose(_ort(folded, feeds)[0], _ort(shape_model(), feeds)[0],
                               rtol=1e-6, atol=1e-6)


def test_input_shapes_fix_dims_by_input_name():
    folded = optimize_model(shape_model(), input_shapes={"x": [3, 4, 6]})
    assert "Shape" not in _ops(folded)
    with pytest.raises(OptionsError, match="rank 3"):
        optimize_model(shape_model(), input_shapes={"x": [3, 4]})
    with pytest.raises(OptionsError, match="fixed at 4"):
        optimize_model(shape_model(), input_shapes={"x": [3, 5, 6]})
    with pytest.raises(OptionsError, match="not a graph input"):
        optimize_model(shape_model(), input_shapes={"nope": [1]})


def test_a_denotation_override_fixes_the_dims_it_denotes():
    model = shape_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    folded = optimize_model(model, free_dim_denotations={"DATA_BATCH": 2})
    assert "Shape" not in _ops(folded)
    assert folded.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2


def test_written_model_carries_inferred_shapes(tmp_path):
    write_optimized_model(shape_model(), tmp_path / "m.onnx", free_dims={"batch": 2})
    vi = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
          for v in onnx.load(tmp_path / "m.onnx").graph.value_info}
    assert vi == {"flat": [2, 24], "mm": [2, 3]}


def test_external_initializers_by_size_load_from_another_directory(tmp_path, monkeypatch):
    model = shape_model()
    big = RNG.standard_normal((64, 64)).astype(np.float32)        # 16 KiB: external
    model.graph.initializer.append(numpy_helper.from_array(big, "big"))
    model.graph.node.append(_n("ReduceSum", ["big"], "big_sum", keepdims=0))
    model.graph.output.append(helper.make_tensor_value_info("big_sum", TensorProto.FLOAT, []))
    out = tmp_path / "sub" / "m.onnx"
    write_optimized_model(model, out, free_dims={"batch": 2}, external_data_file="weights.bin",
                          external_min_bytes=200)
    assert (tmp_path / "sub" / "weights.bin").exists()
    plain = onnx.load(out, load_external_data=False)
    where = {t.name: t.data_location for t in plain.graph.initializer}
    # big_sum folds (a graph output stays an Identity's); w is 288 B, new_shape 16 B
    assert where["w"] == TensorProto.EXTERNAL
    assert where["new_shape"] == TensorProto.DEFAULT
    assert (tmp_path / "sub" / "weights.bin").stat().st_size == 24 * 3 * 4

    feeds = {"x": RNG.standard_normal((2, 4, 6)).astype(np.float32)}
    expected = _ort(model, feeds)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    got = _ort(str(out), feeds)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    ep = onnx_ep.Session(str(out), providers=["cpu_reference"]).run(None, feeds)
    for a, b in zip(ep, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_external_data_file_must_stay_beside_the_model(tmp_path):
    with pytest.raises(OptionsError, match="relative"):
        write_optimized_model(shape_model(), tmp_path / "m.onnx",
                              external_data_file=str(tmp_path / "w.bin"))
    with pytest.raises(OptionsError, match="relative"):
        write_optimized_model(shape_model(), tmp_path / "m.onnx",
                              external_data_file="../w.bin")


def test_a_model_past_protobufs_limit_goes_external_by_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "PROTOBUF_LIMIT", 100)
    returned = write_optimized_model(shape_model(), tmp_path / "m.onnx", external_min_bytes=256)
    assert (tmp_path / "m.onnx.data").exists()
    plain = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    assert {t.name for t in plain.graph.initializer
            if t.data_location == TensorProto.EXTERNAL} == {"w"}
    assert all(t.data_location == TensorProto.DEFAULT for t in returned.graph.initializer)
    feeds = {"x": RNG.standard_normal((2, 4, 6)).astype(np.float32)}
    np.testing.assert_allclose(_ort(str(tmp_path / "m.onnx"), feeds)[0],
                               _ort(shape_model(), feeds)[0], rtol=1e-6, atol=1e-6)


def test_a_model_with_external_data_is_read_from_its_path(tmp_path):
    src = tmp_path / "src" / "m.onnx"
    src.parent.mkdir()
    onnx.save(shape_model(), src, save_as_external_data=True, location="m.data",
              size_threshold=0)
    write_optimized_model(src, tmp_path / "opt.onnx", free_dims={"batch": 2})
    feeds = {"x": RNG.standard_normal((2, 4, 6)).astype(np.float32)}
    np.testing.assert_allclose(_ort(str(tmp_path / "opt.onnx"), feeds)[0],
                               _ort(shape_model(), feeds)[0], rtol=1e-6, atol=1e-6)


def test_metadata_and_opsets_are_kept(tmp_path):
    model = shape_model()
    model.producer_name, model.producer_version = "exporter", "9.1"
    model.domain, model.model_version, model.doc_string = "org.example", 7, "the model"
    model.graph.doc_string = "the graph"
    helper.set_model_props(model, {"author": "me", "license": "MIT"})
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    model.graph.node[-1].doc_string = "final add"
    write_optimized_model(model, tmp_path / "m.onnx", free_dims={"batch": 2})
    got = onnx.load(tmp_path / "m.onnx")
    for field in ("producer_name", "producer_version", "domain", "model_version",
                  "doc_string", "ir_version"):
        assert getattr(got, field) == getattr(model, field), field
    assert got.graph.doc_string == "the graph" and got.graph.name == model.graph.name
    assert {p.key: p.value for p in got.metadata_props} == {"author": "me", "license": "MIT"}
    assert list(got.opset_import) == list(model.opset_import)
    assert got.graph.node[-1].doc_string == "final add"
    meta = ort.InferenceSession(str(tmp_path / "m.onnx"),
                                providers=["CPUExecutionProvider"]).get_modelmeta()
    assert meta.producer_name == "exporter" and meta.custom_metadata_map["author"] == "me"


def control_flow_model() -> onnx.ModelProto:
    """If on a graph input picks x * k or x - k (k: an outer Constant); a Loop adds step
    (an outer initializer sum) n times."""
    then_g = helper.make_graph([_n("Mul", ["x", "k"], "t")], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([_n("Sub", ["x", "k"], "e")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    body = helper.make_graph(
        [_n("Identity", ["cond_in"], "cond_out"), _n("Add", ["acc_in", "step"], "acc_out")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Constant", [], ["k"], name="k", value_floats=[2.0, 3.0]),
        _n("Add", ["s1", "s2"], "step"),
        helper.make_node("If", ["flag"], ["picked"], name="if", then_branch=then_g,
                         else_branch=else_g),
        helper.make_node("Loop", ["n", "true", "picked"], ["y"], name="loop", body=body),
    ]
    inits = {"s1": np.array([1.0, 1.0], np.float32), "s2": np.array([0.5, 0.25], np.float32),
             "n": np.array(3, np.int64), "true": np.array(True)}
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                          helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], inits)


def test_control_flow_bodies_are_left_as_they_are(tmp_path):
    model = control_flow_model()
    write_optimized_model(model, tmp_path / "m.onnx")
    got = onnx.load(tmp_path / "m.onnx")
    assert _ops(got) == ["If", "Loop"]
    bodies = {n.name: [a.g.SerializeToString() for a in n.attribute]
              for n in model.graph.node if n.op_type in ("If", "Loop")}
    assert {n.name: [a.g.SerializeToString() for a in n.attribute]
            for n in got.graph.node} == bodies
    inits = {t.name: numpy_helper.to_array(t) for t in got.graph.initializer}
    assert inits["step"].tolist() == [1.5, 1.25] and inits["k"].tolist() == [2.0, 3.0]
    for flag in (True, False):
        feeds = {"x": np.array([1.0, -2.0], np.float32), "flag": np.array(flag)}
        expected = _ort(model, feeds)[0]
        np.testing.assert_allclose(_ort(str(tmp_path / "m.onnx"), feeds)[0], expected)
        np.testing.assert_allclose(
            onnx_ep.Session(str(tmp_path / "m.onnx"), providers=["cpu_reference"]).run(
                None, feeds)[0], expected)


def test_an_output_made_only_of_constants_is_still_an_output(tmp_path):
    nodes = [_n("Add", ["a", "b"], "c"), _n("Mul", ["c", "x"], "y"),
             helper.make_node("Constant", [], ["k"], name="k", value_ints=[4, 5])]
    outputs = [helper.make_tensor_value_info(n, t, None)
               for n, t in (("y", TensorProto.FLOAT), ("c", TensorProto.FLOAT),
                            ("k", TensorProto.INT64))]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                   outputs, {"a": np.ones(3, np.float32), "b": np.arange(3, dtype=np.float32)})
    write_optimized_model(model, tmp_path / "m.onnx")
    got = onnx.load(tmp_path / "m.onnx")
    assert [o.name for o in got.graph.output] == ["y", "c", "k"]
    assert sorted(_ops(got)) == ["Constant", "Identity", "Mul"]
    feeds = {"x": np.array([1.0, 2.0, 3.0], np.float32)}
    expected = _ort(model, feeds)
    ep = onnx_ep.Session(str(tmp_path / "m.onnx"), providers=["cpu_reference"]).run(None, feeds)
    for a, b, c in zip(_ort(str(tmp_path / "m.onnx"), feeds), ep, expected):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)
    written_twice = optimize_model(got)
    assert _ops(written_twice) == _ops(got)          # a fixed point: nothing left to fold


def test_random_large_and_overridable_values_are_not_folded():
    shape = np.array([1100, 1000], np.int64)        # 4.4 MB of float32: past the bound
    nodes = [
        helper.make_node("RandomNormal", [], ["r"], name="r", shape=[3], seed=1.0),
        _n("Add", ["r", "x"], "y"),
        _n("ConstantOfShape", ["big_shape"], "big",
           value=numpy_helper.from_array(np.array([1.0], np.float32))),
        _n("ReduceSum", ["big"], "total", keepdims=0),
        _n("Mul", ["over", "two"], "z"),
    ]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                           helper.make_tensor_value_info("over", TensorProto.FLOAT, [3])],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                    for n in ("y", "total", "z")],
                   {"big_shape": shape, "over": np.ones(3, np.float32),
                    "two": np.array(2.0, np.float32)})
    folded = optimize_model(model)
    assert _ops(folded) == _ops(model)
    assert [i.name for i in folded.graph.input] == ["x", "over"]
    feeds = {"x": np.zeros(3, np.float32), "over": np.full(3, 5.0, np.float32)}
    assert _ort(folded, feeds)[2].tolist() == [10.0, 10.0, 10.0]


def test_the_callers_model_is_not_modified():
    model = shape_model()
    before = model.SerializeToString()
    optimize_model(model, free_dims={"batch": 2})
    assert model.SerializeToString() == before


def test_before_ir_4_initializers_declared_inputs_are_constants():
    model = shape_model()
    model.ir_version = 3
    model.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                             for t in model.graph.initializer)
    folded = optimize_model(model, free_dims={"batch": 3})
    assert _ops(folded) == ["Reshape", "MatMul", "Add"]
    assert sorted(i.name for i in folded.graph.input) == ["bias", "new_shape", "w", "x"]
    feeds = {"x": RNG.standard_normal((3, 4, 6)).astype(np.float32)}
    np.testing.assert_allclose(_ort(folded, feeds)[0], _ort(model, feeds)[0], rtol=1e-6,
                               atol=1e-6)


def test_an_exported_transformer_keeps_its_outputs_with_a_quarter_of_its_nodes(tmp_path):
    src = os.path.join(os.path.dirname(__file__), "..", "models", "exported_transformer.onnx")
    out = tmp_path / "t.onnx"
    written = write_optimized_model(src, out, free_dims={"batch": 2})
    assert len(written.graph.node) < len(onnx.load(src).graph.node) // 3
    assert not {"Shape", "Constant", "Concat"} & set(_ops(written))
    feeds = {"input_ids": RNG.integers(0, 50, (2, 16)).astype(np.int64)}
    expected = _ort(src, feeds)[0]
    np.testing.assert_allclose(_ort(str(out), feeds)[0], expected, rtol=1e-5, atol=1e-5)
    ep = onnx_ep.Session(str(out), providers=["cpu_reference"]).run(None, feeds)[0]
    np.testing.assert_allclose(ep, expected, rtol=1e-5, atol=1e-5)
