"""Graph fusion (core/fusion.py): the RMS-norm and rotary patterns become one node where a
device provider claims it, and nowhere else (on the fake device, so every machine runs it)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_ep
from onnx_ep.core.fusion import FUSED_DOMAIN, RmsNorm, RotaryHalf, View, fuse
from onnx_ep.core.graph import build_graph, light_model_for_inference
from onnx_ep.core.kernel import OpKey, Support
from onnx_ep.errors import OptionsError
from tests.helpers.fake_device import FakeDevicePlugin, FakeKernel
from tests.helpers.oracle import ORACLE_IR_VERSION

H, D, EPS = 8, 4, 1e-5
F32 = np.float32


def _rms(x, w, eps=EPS):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rotary(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin


class _Fused(FakeKernel):
    def __init__(self, domain: str, op: str, fn) -> None:
        super().__init__(op, fn)
        self.key = OpKey(domain, op, 1)


def _plugin(dtype_ok=True) -> FakeDevicePlugin:
    plugin = FakeDevicePlugin(ops=("Add", "Mul", "MatMul"))
    rms = _Fused("", "SimplifiedLayerNormalization",
                 lambda x, w: _rms(x.astype(np.float64), w).astype(x.dtype))
    rot = _Fused(FUSED_DOMAIN, "RotaryHalf", lambda x, c, s: _rotary(x, c, s).astype(x.dtype))
    if not dtype_ok:
        rms.supports = lambda meta: Support.no("this device normalises float16 only")
    plugin.kernels |= {"rms": rms, "rot": rot}
    return plugin


def _model(variant: str = "reciprocal", extra_output: str | None = None,
           big_end: bool = False) -> onnx.ModelProto:
    """h = rms(x) * w (written as ``variant``); y = rotary(h[.., :D]-shaped q) = rotary(q)."""
    vi = helper.make_tensor_value_info
    inits = [numpy_helper.from_array(np.linspace(0.5, 1.5, H).astype(F32), "w"),
             numpy_helper.from_array(np.array(EPS, F32), "eps"),
             numpy_helper.from_array(np.array(2.0, F32), "two"),
             numpy_helper.from_array(np.array(1.0, F32), "one"),
             numpy_helper.from_array(np.array([-1]), "axes"),
             numpy_helper.from_array(np.array([0, 0, H // D, D]), "qshape"),
             numpy_helper.from_array(np.array([0]), "s0"),
             numpy_helper.from_array(np.array([D // 2]), "s1"),
             numpy_helper.from_array(np.array([2**62 if big_end else D]), "s2"),
             numpy_helper.from_array(np.array([-1]), "ax")]
    n = helper.make_node
    sq = (n("Mul", ["x", "x"], ["sq"]) if variant == "mulsq"
          else n("Pow", ["x", "two"], ["sq"]))
    nodes = [sq, n("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             n("Add", ["eps", "ms"], ["var"]), n("Sqrt", ["var"], ["std"])]
    if variant == "div":
        nodes.append(n("Div", ["x", "std"], ["normed"]))
    elif variant == "one_over":
        nodes += [n("Div", ["one", "std"], ["inv"]), n("Mul", ["inv", "x"], ["normed"])]
    else:
        nodes += [n("Reciprocal", ["std"], ["inv"]), n("Mul", ["x", "inv"], ["normed"])]
    nodes += [n("Mul", ["w", "normed"], ["h"]),
              n("Reshape", ["h", "qshape"], ["q"]),
              n("Slice", ["q", "s0", "s1", "ax"], ["q1"]),
              n("Slice", ["q", "s1", "s2", "ax"], ["q2"]),
              n("Neg", ["q2"], ["nq2"]),
              n("Concat", ["nq2", "q1"], ["rot"], axis=-1),
              n("Mul", ["q", "cos"], ["qc"]), n("Mul", ["sin", "rot"], ["rs"]),
              n("Add", ["rs", "qc"], ["y"])]
    outs = [vi("y", TensorProto.FLOAT, [2, 3, H // D, D])]
    if extra_output:
        outs.append(vi(extra_output, TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "fusable", [vi("x", TensorProto.FLOAT, [2, 3, H]),
                                             vi("cos", TensorProto.FLOAT, [2, 3, 1, D]),
                                             vi("sin", TensorProto.FLOAT, [2, 3, 1, D])],
                          outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)],
                             ir_version=ORACLE_IR_VERSION)


def _feeds(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 3, H)).astype(F32),
            "cos": rng.standard_normal((2, 3, 1, D)).astype(F32),
            "sin": rng.standard_normal((2, 3, 1, D)).astype(F32)}


def _expected(f):
    h = _rms(f["x"].astype(np.float64), np.linspace(0.5, 1.5, H)).reshape(2, 3, H // D, D)
    return _rotary(h, f["cos"], f["sin"])


def _ops(session):
    return [(n.domain, n.op_type) for n in session.graph.nodes]


@pytest.mark.parametrize("variant", ["reciprocal", "div", "one_over", "mulsq"])
def test_a_device_session_fuses_rms_norm_and_rotary_and_computes_the_same(variant):
    plugin = _plugin()
    s = onnx_ep.Session(_model(variant), providers=["fake", "cpu_reference"], plugins=[plugin])
    assert _ops(s) == [("", "SimplifiedLayerNormalization"), ("", "Reshape"),
                       (FUSED_DOMAIN, "RotaryHalf")]
    fused = s.resources()["fusion"]
    assert fused["fused"] == {"rms_norm": 1, "rotary_half": 1} and not fused["declined"]
    assert fused["nodes_removed"] == len(_model(variant).graph.node) - 3
    f = _feeds()
    for _ in range(3):                              # warm-up, record, replay
        (y,) = s.run(None, f)
        np.testing.assert_allclose(y, _expected(f), rtol=1e-5, atol=1e-5)
    assert plugin.kernels["rms"].calls >= 1 and plugin.kernels["rot"].calls >= 1
    # the reference runs the graph as written and agrees
    ref = onnx_ep.Session(_model(variant), providers=["cpu_reference"])
    assert len(ref.graph.nodes) == len(_model(variant).graph.node)
    assert ref.resources()["fusion"]["fused"] == {}
    np.testing.assert_allclose(ref.run(None, f)[0], y, rtol=1e-5, atol=1e-5)


def test_fusion_off_keeps_every_node():
    s = onnx_ep.Session(_model(), providers=["fake", "cpu_reference"], plugins=[_plugin()],
                        options=onnx_ep.SessionOptions(fusion="off"))
    assert len(s.graph.nodes) == len(_model().graph.node)
    assert s.resources()["fusion"] == {"mode": "off", "fused": {}, "nodes_removed": 0,
                                       "declined": []}
    f = _feeds(1)
    np.testing.assert_allclose(s.run(None, f)[0], _expected(f), rtol=1e-5, atol=1e-5)
    with pytest.raises(OptionsError, match="fusion"):
        onnx_ep.SessionOptions(fusion="always")


def test_a_value_read_outside_the_pattern_blocks_the_fusion():
    # 'ms' is also a graph output: removing ReduceMean would lose it
    s = onnx_ep.Session(_model(extra_output="ms"), providers=["fake", "cpu_reference"],
                        plugins=[_plugin()])
    assert ("", "SimplifiedLayerNormalization") not in _ops(s)
    assert (FUSED_DOMAIN, "RotaryHalf") in _ops(s)
    f = _feeds(2)
    y, ms = s.run(None, f)
    np.testing.assert_allclose(y, _expected(f), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ms, np.mean(f["x"] ** 2, -1, keepdims=True), rtol=1e-5)


def test_a_match_no_device_kernel_supports_is_declined_with_the_reason():
    s = onnx_ep.Session(_model(), providers=["fake", "cpu_reference"],
                        plugins=[_plugin(dtype_ok=False)])
    report = s.resources()["fusion"]
    assert report["fused"] == {"rotary_half": 1}
    (decline,) = report["declined"]
    assert decline["rule"] == "rms_norm" and "float16 only" in decline["reason"]
    assert ("", "ReduceMean") in _ops(s)


def test_rotary_slices_may_end_past_the_axis():
    s = onnx_ep.Session(_model(big_end=True), providers=["fake", "cpu_reference"],
                        plugins=[_plugin()])
    assert (FUSED_DOMAIN, "RotaryHalf") in _ops(s)


def _graph(model):
    return build_graph(model, light_model_for_inference(model))


def test_rules_leave_near_misses_alone():
    g = _graph(_model())
    view = View(g)
    by_out = {n.outputs[0]: n for n in g.nodes}
    assert RmsNorm().match(by_out["h"], view) is not None
    assert RotaryHalf().match(by_out["y"], view) is not None
    # anchored elsewhere, or on a node of another kind: no match
    assert RmsNorm().match(by_out["normed"], view) is None
    assert RotaryHalf().match(by_out["qc"], view) is None
    # a rotary whose halves are swapped (Concat(x1, -x2)) is another function
    m = _model()
    for node in m.graph.node:
        if node.op_type == "Concat":
            node.input[:] = ["q1", "nq2"]
    g2 = _graph(m)
    assert RotaryHalf().match(next(n for n in g2.nodes if n.outputs[0] == "y"), View(g2)) is None
    # a square that is not x*x
    m = _model("mulsq")
    m.graph.node[0].input[:] = ["x", "w"]
    g3 = _graph(m)
    assert RmsNorm().match(next(n for n in g3.nodes if n.outputs[0] == "h"), View(g3)) is None


def test_fuse_without_a_device_provider_changes_nothing():
    g = _graph(_model())
    plugin = _plugin()
    s = onnx_ep.Session(_model(), providers=["cpu_reference"], plugins=[plugin])
    reg = s._plugins.registry
    same, report = fuse(g, reg, ["cpu_reference"])
    assert same is g and report.fused == {}
    fused, report = fuse(g, reg, ["fake", "cpu_reference"])
    assert report.fused == {"rms_norm": 1, "rotary_half": 1}
    assert len(fused.nodes) == 3 and len(g.nodes) == len(_model().graph.node)


def _mlp_model(bias_const: bool = True) -> onnx.ModelProto:
    """y = (g * sigmoid(g) * u) with g = x @ wg + b (biased), u = x @ wu."""
    vi = helper.make_tensor_value_info
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((H, 6)).astype(F32), "wg"),
             numpy_helper.from_array(rng.standard_normal((H, 6)).astype(F32), "wu")]
    ins = [vi("x", TensorProto.FLOAT, [3, H])]
    if bias_const:
        inits.append(numpy_helper.from_array(rng.standard_normal(6).astype(F32), "b"))
    else:
        ins.append(vi("b", TensorProto.FLOAT, [6]))
    n = helper.make_node
    nodes = [n("MatMul", ["x", "wg"], ["xg"]), n("Add", ["b", "xg"], ["g"]),
             n("MatMul", ["x", "wu"], ["u"]), n("Sigmoid", ["g"], ["sg"]),
             n("Mul", ["sg", "g"], ["act"]), n("Mul", ["u", "act"], ["y"])]
    g = helper.make_graph(nodes, "mlp", ins, [vi("y", TensorProto.FLOAT, [3, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)],
                             ir_version=ORACLE_IR_VERSION)


def _mlp_plugin() -> FakeDevicePlugin:
    plugin = FakeDevicePlugin(ops=("Add", "Mul", "MatMul"))
    plugin.kernels |= {
        "mma": _Fused(FUSED_DOMAIN, "MatMulAdd", lambda a, b, c: (a @ b + c).astype(a.dtype)),
        "silu": _Fused(FUSED_DOMAIN, "SiluMul",
                       lambda g, u: (g / (1 + np.exp(-g)) * u).astype(g.dtype))}
    return plugin


def test_biased_matmul_and_swiglu_gate_fuse_and_compute_the_same():
    plugin = _mlp_plugin()
    s = onnx_ep.Session(_mlp_model(), providers=["fake", "cpu_reference"], plugins=[plugin])
    assert sorted(_ops(s)) == [("", "MatMul"), (FUSED_DOMAIN, "MatMulAdd"),
                               (FUSED_DOMAIN, "SiluMul")]
    assert s.resources()["fusion"]["fused"] == {"matmul_add": 1, "silu_mul": 1}
    x = np.random.default_rng(6).standard_normal((3, H)).astype(F32)
    ref = onnx_ep.Session(_mlp_model(), providers=["cpu_reference"])
    for _ in range(3):
        np.testing.assert_allclose(s.run(None, {"x": x})[0], ref.run(None, {"x": x})[0],
                                   rtol=1e-5, atol=1e-5)
    assert plugin.kernels["mma"].calls >= 1 and plugin.kernels["silu"].calls >= 1


def test_a_fed_bias_is_not_a_matmul_add_but_the_gate_still_fuses():
    s = onnx_ep.Session(_mlp_model(bias_const=False), providers=["fake", "cpu_reference"],
                        plugins=[_mlp_plugin()])
    assert s.resources()["fusion"]["fused"] == {"silu_mul": 1}
    assert ("", "Add") in _ops(s)



def test_a_residual_of_the_products_shape_is_a_matmul_add():
    vi = helper.make_tensor_value_info
    w = np.random.default_rng(7).standard_normal((H, H)).astype(F32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["p"]),
                           helper.make_node("Add", ["x", "p"], ["y"])], "res",
                          [vi("x", TensorProto.FLOAT, ["n", H])],
                          [vi("y", TensorProto.FLOAT, ["n", H])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)],
                          ir_version=ORACLE_IR_VERSION)
    s = onnx_ep.Session(m, providers=["fake", "cpu_reference"], plugins=[_mlp_plugin()])
    assert _ops(s) == [(FUSED_DOMAIN, "MatMulAdd")]
    assert s.graph.nodes[0].inputs == ("x", "w", "x")
    x = np.random.default_rng(8).standard_normal((5, H)).astype(F32)
    np.testing.assert_allclose(s.run(None, {"x": x})[0], x + x @ w, rtol=1e-5, atol=1e-5)


def _scores_model(div: bool = False, perm=(0, 2, 1)) -> onnx.ModelProto:
    """s = MatMul(q, Transpose(k)) * 0.25 (or / 4)."""
    vi = helper.make_tensor_value_info
    n = helper.make_node
    nodes = [n("Transpose", ["k"], ["kt"], perm=list(perm)), n("MatMul", ["q", "kt"], ["qk"]),
             n("Div" if div else "Mul", ["qk", "c"], ["s"])]
    g = helper.make_graph(nodes, "scores", [vi("q", TensorProto.FLOAT, [2, 3, 4]),
                                            vi("k", TensorProto.FLOAT, [2, 5, 4])],
                          [vi("s", TensorProto.FLOAT, [2, 3, 5])],
                          [numpy_helper.from_array(np.array(4.0 if div else 0.25, F32), "c")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)],
                             ir_version=ORACLE_IR_VERSION)


def _scores_plugin() -> FakeDevicePlugin:
    plugin = FakeDevicePlugin(ops=("Mul", "MatMul"))

    def fused(a, b):                         # the fake reads alpha/transB from the rule's node
        return (a @ np.swapaxes(b, -1, -2) * 0.25).astype(a.dtype)

    plugin.kernels["fmm"] = _Fused("com.microsoft", "FusedMatMul", fused)
    return plugin


@pytest.mark.parametrize("div", [False, True])
def test_attention_scores_become_one_fused_matmul(div):
    s = onnx_ep.Session(_scores_model(div), providers=["fake", "cpu_reference"],
                        plugins=[_scores_plugin()])
    (node,) = s.graph.nodes
    assert (node.domain, node.op_type) == ("com.microsoft", "FusedMatMul")
    assert node.attrs == {"alpha": 0.25, "transA": 0, "transB": 1}
    assert node.inputs == ("q", "k")
    rng = np.random.default_rng(9)
    f = {"q": rng.standard_normal((2, 3, 4)).astype(F32),
         "k": rng.standard_normal((2, 5, 4)).astype(F32)}
    np.testing.assert_allclose(s.run(None, f)[0], f["q"] @ f["k"].transpose(0, 2, 1) / 4,
                               rtol=1e-5, atol=1e-6)


def test_a_transpose_of_other_axes_is_not_folded_into_the_matmul():
    g = _graph(_scores_model(perm=(1, 0, 2)))
    m = _scores_model(perm=(1, 0, 2))
    anchor = next(n for n in g.nodes if n.op_type == "Mul")
    match = fusion_rules()["scaled_matmul"].match(anchor, View(g))
    assert match is not None and match.node.attrs["transB"] == 0
    assert [n.op_type for n in match.nodes] == ["MatMul", "Mul"]
    assert len(m.graph.node) == 3


def fusion_rules():
    from onnx_ep.core.fusion import BUILTIN_RULES
    return {r.name: r for r in BUILTIN_RULES}


def _hf_rms_model(dtype=TensorProto.FLOAT16) -> onnx.ModelProto:
    """Hugging Face's RMS norm: x.to(float32), normalised, .to(dtype) * weight."""
    vi = helper.make_tensor_value_info
    np_t = helper.tensor_dtype_to_np_dtype(dtype)
    n = helper.make_node
    nodes = [n("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             n("Pow", ["xf", "two"], ["sq"]),
             n("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             n("Add", ["ms", "eps"], ["var"]), n("Sqrt", ["var"], ["std"]),
             n("Div", ["one", "std"], ["inv"]), n("Mul", ["xf", "inv"], ["normed"]),
             n("Cast", ["normed"], ["back"], to=dtype), n("Mul", ["w", "back"], ["y"])]
    inits = [numpy_helper.from_array(np.linspace(0.5, 1.5, H).astype(np_t), "w"),
             numpy_helper.from_array(np.array(2.0, F32), "two"),
             numpy_helper.from_array(np.array(1.0, F32), "one"),
             numpy_helper.from_array(np.array(EPS, F32), "eps"),
             numpy_helper.from_array(np.array([-1]), "axes")]
    g = helper.make_graph(nodes, "hf_rms", [vi("x", dtype, [2, H])], [vi("y", dtype, [2, H])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)],
                             ir_version=ORACLE_IR_VERSION)


def test_the_rms_norm_between_casts_reads_the_uncast_input():
    g = _graph(_hf_rms_model())
    anchor = g.nodes[-1]
    m = RmsNorm().match(anchor, View(g))
    assert m is not None and len(m.nodes) == len(g.nodes)
    assert m.node.inputs == ("x", "w") and m.node.attrs["epsilon"] == pytest.approx(EPS)
    # float32 with no-op casts runs on the (float32-only) fake device and agrees
    s = onnx_ep.Session(_hf_rms_model(TensorProto.FLOAT), providers=["fake", "cpu_reference"],
                        plugins=[_plugin()])
    assert _ops(s) == [("", "SimplifiedLayerNormalization")]
    x = np.random.default_rng(4).standard_normal((2, H)).astype(F32)
    np.testing.assert_allclose(s.run(None, {"x": x})[0], _rms(x, np.linspace(0.5, 1.5, H)),
                               rtol=1e-5, atol=1e-6)


def test_scaled_dot_product_scores_fold_both_scalings_into_alpha():
    vi = helper.make_tensor_value_info
    n = helper.make_node
    nodes = [n("Mul", ["q", "c"], ["qs"]), n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             n("Mul", ["kt", "c"], ["ks"]), n("MatMul", ["qs", "ks"], ["s"])]
    g = helper.make_graph(nodes, "sdpa", [vi("q", TensorProto.FLOAT, [2, 3, 4]),
                                          vi("k", TensorProto.FLOAT, [2, 5, 4])],
                          [vi("s", TensorProto.FLOAT, [2, 3, 5])],
                          [numpy_helper.from_array(np.array(0.5, F32), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)],
                          ir_version=ORACLE_IR_VERSION)
    s = onnx_ep.Session(m, providers=["fake", "cpu_reference"], plugins=[_scores_plugin()])
    (node,) = s.graph.nodes
    assert node.op_type == "FusedMatMul" and node.inputs == ("q", "k")
    assert node.attrs == {"alpha": 0.25, "transA": 0, "transB": 1}


def _layer_model(dtype=np.float32) -> onnx.ModelProto:
    """One Qwen2-style decoder layer as exporters write it: RMS norms, biased q/k/v, rotary,
    grouped-query heads repeated by Unsqueeze/Expand/Reshape, scaled scores, softmax, a
    residual output projection and a SwiGLU MLP with its residual."""
    rng = np.random.default_rng(21)
    hid, nh, kv, d, inter = 16, 4, 2, 4, 24
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits, nodes = [], []

    def w(name, *shape):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(dtype), name))
        return name

    def c(name, value, dt=np.int64):
        # one initializer per name: a second definition makes the model invalid
        if all(t.name != name for t in inits):
            inits.append(numpy_helper.from_array(np.array(value, dt), name))
        return name

    def op(kind, *ins, **attrs):
        out = f"{kind}_{len(nodes)}"
        nodes.append(helper.make_node(kind, list(ins), [out], **attrs))
        return out

    def rms(x, g):
        ms = op("ReduceMean", op("Pow", x, c(f"two{len(nodes)}", 2, dtype)), c("ax", [-1]),
                keepdims=1)
        inv = op("Reciprocal", op("Sqrt", op("Add", ms, c(f"eps{len(nodes)}", 1e-6, dtype))))
        return op("Mul", op("Mul", x, inv), w(g, hid))

    def heads(x, n):
        return op("Transpose", op("Reshape", x, c(f"hs{n}", [0, 0, n, d])), perm=[0, 2, 1, 3])

    def rope(x):
        x1 = op("Slice", x, c("z", [0]), c("h", [d // 2]), c("l", [-1]))
        x2 = op("Slice", x, c("h2", [d // 2]), c("e", [2**62]), c("l2", [-1]))
        rot = op("Concat", op("Neg", x2), x1, axis=-1)
        return op("Add", op("Mul", x, "cos"), op("Mul", rot, "sin"))

    def repeat(x):
        x = op("Expand", op("Unsqueeze", x, c("u2", [2])), c("rep", [1, 1, nh // kv, 1, 1]))
        return op("Reshape", x, c("merge", [0, nh, -1, d]))

    h = rms("x", "ln1")
    q, k, v = (heads(op("Add", op("MatMul", h, w(n, hid, m * d)), w(n + "_b", m * d)), m)
               for n, m in (("q", nh), ("k", kv), ("v", kv)))
    s = op("Mul", op("MatMul", rope(q), op("Transpose", repeat(rope(k)), perm=[0, 1, 3, 2])),
           c("scale", 1 / np.sqrt(d), dtype))
    a = op("MatMul", op("Softmax", s, axis=-1), repeat(v))
    a = op("Reshape", op("Transpose", a, perm=[0, 2, 1, 3]), c("flat", [0, 0, nh * d]))
    x2 = op("Add", "x", op("MatMul", a, w("o", nh * d, hid)))
    g = op("MatMul", rms(x2, "ln2"), w("gate", hid, inter))
    up = op("MatMul", rms(x2, "ln2b"), w("up", hid, inter))
    m = op("Mul", op("Mul", g, op("Sigmoid", g)), up)
    nodes.append(helper.make_node("Add", [x2, op("MatMul", m, w("down", inter, hid))], ["y"]))
    vi = helper.make_tensor_value_info
    g_ = helper.make_graph(nodes, "layer", [vi("x", et, ["b", "s", hid]),
                                            vi("cos", et, ["b", 1, "s", d]),
                                            vi("sin", et, ["b", 1, "s", d])],
                           [vi("y", et, ["b", "s", hid])], inits)
    return helper.make_model(g_, opset_imports=[helper.make_opsetid("", 18)],
                             ir_version=ORACLE_IR_VERSION)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_every_rule_keeps_a_decoder_layers_outputs_on_the_reference(dtype, monkeypatch):
    """The oracle check of the rewrites: the reference runs the layer as written, and again
    fused (the reference counted as a device here), with its own kernels for every fused op."""
    from onnx_ep.core import fusion

    model = _layer_model(dtype)
    ref = onnx_ep.Session(model, providers=["cpu_reference"])
    monkeypatch.setattr(fusion, "HOST", "no-host")
    fused = onnx_ep.Session(model, providers=["cpu_reference"])
    report = fused.resources()["fusion"]
    assert report["fused"] == {"rms_norm": 3, "rotary_half": 2, "matmul_add": 5,
                               "silu_mul": 1, "scaled_matmul": 2}, report
    ops = {n.op_type for n in fused.graph.nodes}
    assert "GroupedMatMul" in ops and "Expand" not in ops and "Pow" not in ops
    rng = np.random.default_rng(3)
    for s in (1, 3):
        f = {"x": rng.standard_normal((2, s, 16)).astype(dtype),
             "cos": rng.standard_normal((2, 1, s, 4)).astype(dtype),
             "sin": rng.standard_normal((2, 1, s, 4)).astype(dtype)}
        want, got = ref.run(None, f)[0], fused.run(None, f)[0]
        tol = 1e-5 if dtype == np.float32 else 2e-2
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=tol)


def _tied_embedding_model(other_reader: bool = False) -> onnx.ModelProto:
    """The builder's tied embedding: Gather(Transpose(lm_head weight [K, N]), ids)."""
    w = np.arange(4 * 10, dtype=F32).reshape(4, 10)
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("Gather", ["wt", "ids"], ["e"], axis=0),
             helper.make_node("Relu", ["e"], ["y"])]
    outs = [vi("y", TensorProto.FLOAT, [2, 3, 4])]
    if other_reader:
        nodes.append(helper.make_node("Relu", ["wt"], ["wt2"]))
        outs.append(vi("wt2", TensorProto.FLOAT, [10, 4]))
    g = helper.make_graph(nodes, "tied", [vi("ids", TensorProto.INT64, [2, 3])], outs,
                          initializer=[numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=ORACLE_IR_VERSION)


class _AnyDtype(_Fused):
    def supports(self, meta):
        return Support.YES


def _gather_plugin() -> FakeDevicePlugin:
    plugin = FakeDevicePlugin(ops=("Relu",))
    plugin.kernels["tg"] = _AnyDtype(FUSED_DOMAIN, "TransposedGather",
                                     lambda w, ids: np.moveaxis(np.take(w, ids, axis=1), 0, -1))
    return plugin


def test_a_gather_of_a_transposed_matrix_reads_its_columns_without_the_transpose():
    plugin = _gather_plugin()
    s = onnx_ep.Session(_tied_embedding_model(), providers=["fake", "cpu_reference"],
                        plugins=[plugin])
    assert [n.op_type for n in s.graph.nodes] == ["TransposedGather", "Relu"]
    ids = np.array([[0, 9, 3], [-1, 5, 5]], np.int64)
    want = np.maximum(np.arange(40, dtype=F32).reshape(4, 10).T[ids], 0)
    np.testing.assert_array_equal(s.run(None, {"ids": ids})[0], want)
    assert plugin.kernels["tg"].calls == 1
    # the reference computes the fused node as the graph the user gave (the oracle)
    ref = onnx_ep.Session(_tied_embedding_model(), providers=["cpu_reference"])
    np.testing.assert_array_equal(ref.run(None, {"ids": ids})[0], want)


def test_the_transposed_gather_reference_kernel_matches_the_unfused_graph():
    from onnx_ep.core.graph import Node
    from onnx_ep.core.kernel import ExecutionContext
    from onnx_ep.providers.cpu_reference.movement import TransposedGather

    w = np.random.default_rng(3).standard_normal((5, 7)).astype(F32)
    ids = np.array([[6, 0], [-7, 2]], np.int64)
    node = Node(name="tg", op_type="TransposedGather", domain=FUSED_DOMAIN,
                inputs=("w", "ids"), outputs=("y",), attrs={})
    ctx = ExecutionContext(node)
    np.testing.assert_array_equal(TransposedGather("TransposedGather").run(ctx, w, ids),
                                  w.T[ids])


def test_a_transpose_read_elsewhere_stays():
    s = onnx_ep.Session(_tied_embedding_model(other_reader=True),
                        providers=["fake", "cpu_reference"], plugins=[_gather_plugin()])
    assert "TransposedGather" not in [n.op_type for n in s.graph.nodes]
