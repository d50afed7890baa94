"""Host-side logic of the CUDA Attention kernel (no GPU): which onnx node-suite cases it
accepts, output shapes, mask broadcasting, the one workspace formula, the launch struct."""

from __future__ import annotations

import ctypes
import re
import warnings

import numpy as np
import onnx
import pytest

from onnx_ep.core.kernel import NodeMeta, TensorSpec, WorkspaceRequirement
from onnx_ep.providers.cpu_reference import attention as ref
from onnx_ep.providers.cuda.kernels import attention as att

K = att.KERNELS[0]
F32 = np.float32

#: node-suite cases the CUDA kernel declines on purpose (none today)
DECLINED: dict[str, str] = {}


def _meta(inputs, n_out=1, opset=23, **attrs):
    return NodeMeta(name="n", op_type="Attention", domain="", opset=opset, attrs=attrs,
                    inputs=tuple(None if s is None else TensorSpec(*s) for s in inputs),
                    output_names=tuple(f"y{i}" for i in range(n_out)))


def _attention_cases():
    from onnx.backend.test.loader import load_node_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_node_model_tests()
    return [c for c in cases if re.match(r"test_attention", c.name)
            and not c.name.endswith("_expanded")]


def case_meta(case) -> tuple[NodeMeta, list[np.ndarray]]:
    """The Attention node of a node-suite case as NodeMeta (specs from the first data set)."""
    from onnx.backend.test.runner import _normalize_tensor

    graph = case.model.graph
    node = graph.node[0]
    feeds = dict(zip([i.name for i in graph.input],
                     [_normalize_tensor(x) for x in case.data_sets[0][0]]))
    refs = [_normalize_tensor(x) for x in case.data_sets[0][1]]
    specs = tuple(TensorSpec(feeds[n].dtype, feeds[n].shape) if n else None
                  for n in node.input)
    opset = next(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
    meta = NodeMeta(name=node.name or "n", op_type="Attention", domain="", opset=opset,
                    attrs={a.name: onnx.helper.get_attribute_value(a) for a in node.attribute},
                    inputs=specs, output_names=tuple(node.output))
    return meta, refs


CASES = _attention_cases()


def test_the_node_suite_has_attention_cases():
    assert len(CASES) >= 80


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_suite_case_is_accepted_with_the_expected_outputs(case):
    meta, refs = case_meta(case)
    s = K.supports(meta)
    if case.name in DECLINED:
        assert not s and DECLINED[case.name] in s.reason
        return
    assert s, s.reason
    outs = K.infer_outputs(meta)
    # the node's outputs in order; ONNX's expected values give their dtypes and shapes
    produced = [o for o, name in zip(outs, meta.output_names) if name]
    assert [(np.dtype(o.dtype), tuple(o.shape)) for o in produced] == \
        [(r.dtype, r.shape) for r in refs]
    req = K.workspace_requirement(meta)
    assert req == WorkspaceRequirement.NONE   # node-suite rows fit in shared memory


def test_compute_dtype_mirrors_the_reference():
    bf16 = att.BF16
    for dt in (np.float32, np.float16, np.float64, bf16):
        for prec in (None, 1, 10, 11, 16):
            assert att.compute_dtype(dt, prec) == ref._compute_dtype(np.dtype(dt), prec)


def test_dims_4d_3d_gqa_and_past():
    d = att.attention_dims((2, 8, 5, 16), (2, 2, 7, 16), (2, 2, 7, 12), (2, 2, 3, 16), {})
    assert (d.q_heads, d.kv_heads, d.q_len, d.kv_len, d.past_len, d.head, d.v_head) == \
        (8, 2, 5, 7, 3, 16, 12)
    assert d.total == 10 and d.rows == 80 and not d.three_d
    d3 = att.attention_dims((2, 5, 64), (2, 7, 32), (2, 7, 24), None,
                            {"q_num_heads": 4, "kv_num_heads": 2})
    assert (d3.q_heads, d3.kv_heads, d3.head, d3.v_head, d3.three_d) == (4, 2, 16, 12, True)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        att.attention_dims((2, 3, 5, 16), (2, 2, 7, 16), (2, 2, 7, 16), None, {})
    with pytest.raises(ValueError, match="head size"):
        att.attention_dims((2, 5, 64), (2, 7, 16), (2, 7, 24), None,
                           {"q_num_heads": 4, "kv_num_heads": 2})


def test_layout_strides():
    assert att.layout_strides(False, 3, 5, 8) == (120, 40, 8)
    assert att.layout_strides(True, 3, 5, 8) == (120, 8, 24)


def test_mask_strides_broadcast_right_aligned():
    d = att.attention_dims((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8), None, {})
    assert att.mask_strides((6,), d) == (0, 0, 0)
    assert att.mask_strides((4, 6), d) == (0, 0, 6)
    assert att.mask_strides((1, 4, 6), d) == (0, 0, 6)
    assert att.mask_strides((3, 4, 6), d) == (0, 24, 6)
    assert att.mask_strides((2, 1, 4, 6), d) == (24, 0, 6)
    assert att.mask_strides((2, 3, 4, 6), d) == (72, 24, 6)
    assert att.mask_strides((2, 3, 1, 4), d) == (12, 4, 0)     # short rows: padded
    with pytest.raises(ValueError, match="broadcast"):
        att.mask_strides((5, 6), d)
    with pytest.raises(ValueError, match="columns"):
        att.mask_strides((4, 7), d)


def test_workspace_only_when_a_row_of_scores_leaves_shared_memory():
    small = _meta([(F32, (1, 2, 4, 64)), (F32, (1, 2, 1000, 64)), (F32, (1, 2, 1000, 64))])
    assert K.workspace_requirement(small) == WorkspaceRequirement.NONE
    q, kv = (F32, (2, 4, 3, 64)), (F32, (2, 4, 20000, 64))
    big = _meta([q, kv, kv])
    d = att.attention_dims(q[1], kv[1], kv[1], None, {})
    plan = att.attention_plan(d, np.dtype(F32))
    assert plan.workspace_bytes == plan.grid * 20000 * 4 and plan.grid == 24
    assert plan.shared_bytes == 64 * 4
    assert K.workspace_requirement(big) == WorkspaceRequirement(plan.workspace_bytes)
    # float64 scores (softmax_precision=DOUBLE) take twice the bytes
    dbl = _meta([q, kv, kv], softmax_precision=11)
    assert K.workspace_requirement(dbl).nbytes == 2 * plan.workspace_bytes
    # grid capped: blocks loop over rows, the workspace holds one row per block
    many = att.attention_dims((64, 32, 512, 64), (64, 32, 20000, 64), (64, 32, 20000, 64),
                              None, {})
    assert att.attention_plan(many, np.dtype(F32)).grid == att.MAX_ROW_BLOCKS


def test_shared_plan_fits_the_budget():
    d = att.attention_dims((1, 1, 1, 128), (1, 1, 11000, 128), (1, 1, 11000, 128), None, {})
    p = att.attention_plan(d, np.dtype(F32))
    assert p.workspace_bytes == 0 and p.shared_bytes == (128 + 11000) * 4
    assert p.shared_bytes <= att.SHARED_BUDGET
    assert att.SHARED_BUDGET + 8 * att.ATT_BLOCK <= 48 * 1024


def test_supports_declines_with_reasons():
    q = (F32, (1, 2, 3, 8))
    cases = [
        ([(np.int32, (1, 2, 3, 8)), q, q], "dtype"),
        ([q, (np.float16, (1, 2, 3, 8)), q], "K is float16"),
        ([q, q, q, (np.int64, (3, 3))], "attn_mask dtype"),
        ([q, q, q, None, (F32, (1, 2, 2, 8)), None], "together"),
        ([q, q, q, None, (F32, (1, 2, 2, 8)), (F32, (1, 2, 2, 8)), (np.int64, (1,))],
         "nonpad_kv_seqlen"),
        ([q, q, q, (F32, (5, 3))], "broadcast"),
        ([(F32, (1, 3, 16)), (F32, (1, 3, 16)), (F32, (1, 3, 16))], "q_num_heads"),
        ([q, (F32, (1, 2, 0, 8)), (F32, (1, 2, 0, 8))], "no keys"),
        ([(F32, (1, 1, 1, 20000)), (F32, (1, 1, 1, 20000)), (F32, (1, 1, 1, 20000))],
         "shared-memory"),
    ]
    for inputs, reason in cases:
        s = K.supports(_meta(inputs))
        assert not s and reason in s.reason, (inputs, s)
    s = K.supports(_meta([q, q, q], n_out=4, qk_matmul_output_mode=7))
    assert not s and "qk_matmul_output_mode" in s.reason
    assert K.supports(_meta([q, q, q], n_out=1, qk_matmul_output_mode=7))
    # symbolic shapes are accepted (checked when the shapes are known)
    assert K.supports(_meta([(F32, ("b", 2, 3, 8)), q, q]))


def test_infer_outputs_all_four():
    outs = K.infer_outputs(_meta([(F32, (2, 8, 5, 16)), (F32, (2, 2, 7, 16)),
                                  (F32, (2, 2, 7, 12)), None, (F32, (2, 2, 3, 16)),
                                  (F32, (2, 2, 3, 12))], n_out=4))
    assert [o.shape for o in outs] == [(2, 8, 5, 12), (2, 2, 10, 16), (2, 2, 10, 12),
                                       (2, 8, 5, 10)]
    outs3 = K.infer_outputs(_meta([(np.float16, (2, 5, 64)), (np.float16, (2, 7, 32)),
                                   (np.float16, (2, 7, 24))], n_out=3, q_num_heads=4,
                                  kv_num_heads=2))
    assert [o.shape for o in outs3] == [(2, 5, 48), (2, 2, 7, 16), (2, 2, 7, 12)]
    assert all(o.dtype == np.float16 for o in outs3)
    sym = K.infer_outputs(_meta([(F32, ("b", 8, 5, 16)), (F32, ("b", 2, "s", 16)),
                                 (F32, ("b", 2, "s", 12)), None, (F32, ("b", 2, 3, 16)),
                                 (F32, ("b", 2, 3, 12))], n_out=2))
    assert sym[0].shape == ("b", 8, 5, 12) and sym[1].shape == ("b", 2, None, 16)


def test_parity_per_dtype():
    assert K.bind(_meta([(F32, (1, 1, 1, 8))] * 3)).parity == att.PARITY["float32"]
    assert K.bind(_meta([(np.float16, (1, 1, 1, 8))] * 3)).parity == att.PARITY["float16"]
    assert K.bind(_meta([(att.BF16, (1, 1, 1, 8))] * 3)).parity == att.PARITY["bfloat16"]


def test_geo_struct_layout_matches_the_cu_struct():
    # 26 int64, 2 double, 4 int32: no padding, as in attention.cu
    assert ctypes.sizeof(att.AttnGeo) == 26 * 8 + 2 * 8 + 4 * 4
    src = (att.__file__[:-3] + ".cu")
    text = open(src).read()
    body = text[text.index("struct AttnGeo {"):text.index("};", text.index("struct AttnGeo {"))]
    names = re.findall(r"\b([a-z_]+)\s*[,;]", re.sub(r"//[^\n]*", "", body))
    assert names == [f[0] for f in att.AttnGeo._fields_]


def test_root_is_rounded_to_the_input_dtype():
    node = NodeMeta(name="n", op_type="Attention", domain="", opset=23, attrs={"scale": 0.3},
                    inputs=())
    d = att.attention_dims((1, 1, 1, 8), (1, 1, 1, 8), (1, 1, 1, 8), None, {})
    g = K._geo(node, d, np.float16, None, (0, 0, 0), False)
    assert g.root == float(np.float16(np.sqrt(0.3))) and g.qk_mode == -1
