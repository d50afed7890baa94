"""ai.onnx.ml kernels (ArrayFeatureExtractor, Binarizer, LabelEncoder, TreeEnsemble)
against onnxruntime, and against numpy formulas where onnxruntime lacks a case."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx_ep.core.dtypes import onnx_elem_type
from onnx_ep.errors import NodeError
from tests.helpers.oracle import ORACLE_IR_VERSION, run_ort, run_ours

ML = "ai.onnx.ml"


def ml_model(op_type: str, feeds: dict[str, np.ndarray], ml_opset: int,
             **attrs: Any) -> onnx.ModelProto:
    """A one-node ai.onnx.ml model importing the ml domain at ``ml_opset``."""
    node = helper.make_node(op_type, list(feeds), ["y"], domain=ML, **attrs)
    inputs = [helper.make_tensor_value_info(k, onnx_elem_type(v.dtype), v.shape)
              for k, v in feeds.items()]
    graph = helper.make_graph([node], f"{op_type}_test", inputs,
                              [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, ir_version=ORACLE_IR_VERSION, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)])


def assert_same(ours: np.ndarray, ref: np.ndarray, rtol: float = 0.0,
                atol: float = 0.0) -> None:
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape, (ours.dtype, ours.shape,
                                                                  ref.dtype, ref.shape)
    if ours.dtype == object or (rtol == 0 and atol == 0):
        np.testing.assert_array_equal(ours, ref)
    else:
        np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol, equal_nan=True)


def matches_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **tol: float) -> None:
    assert_same(run_ours(model, feeds)[0], run_ort(model, feeds)[0], **tol)


# ---------------------------------------------------------------- ArrayFeatureExtractor

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, object])
@pytest.mark.parametrize("shape, index", [((3, 4), [[0], [3]]), ((4,), [2, 1, 2]),
                                          ((2, 3, 5), [4, 0])])
def test_array_feature_extractor_matches_ort(dtype: Any, shape: tuple[int, ...],
                                             index: list[Any]) -> None:
    x = np.arange(int(np.prod(shape))).reshape(shape)
    x = x.astype(str).astype(object) if dtype is object else x.astype(dtype)
    feeds = {"x": x, "i": np.array(index, np.int64)}
    matches_ort(ml_model("ArrayFeatureExtractor", feeds, 1), feeds)


@pytest.mark.parametrize("index", [-1, 4])
def test_array_feature_extractor_rejects_index_outside_last_axis(index: int) -> None:
    feeds = {"x": np.zeros((2, 4), np.float32), "i": np.array([0, index], np.int64)}
    with pytest.raises(NodeError, match="out of range"):
        run_ours(ml_model("ArrayFeatureExtractor", feeds, 1), feeds)


# ---------------------------------------------------------------- Binarizer

def test_binarizer_float32_matches_ort() -> None:
    feeds = {"x": np.random.default_rng(0).normal(size=(3, 7)).astype(np.float32)}
    feeds["x"][0, :2] = [0.5, np.float32(0.5) + np.float32(1e-7)]
    matches_ort(ml_model("Binarizer", feeds, 1, threshold=0.5), feeds)


@pytest.mark.parametrize("x, threshold, expected", [
    (np.array([np.nan, 1.0, 1.5, np.inf], np.float64), 1.0, [0, 0, 1, 1]),
    (np.array([2**53, 2**53 + 1, -3], np.int64), float(2**53), [0, 1, 0]),
    (np.array([-2, -1, 0], np.int32), -1.5, [0, 1, 1]),
    (np.array([-2, 7], np.int32), float("nan"), [0, 0]),
])
def test_binarizer_is_exact_greater_than_in_the_input_dtype(x: np.ndarray, threshold: float,
                                                           expected: list[int]) -> None:
    out = run_ours(ml_model("Binarizer", {"x": x}, 1, threshold=threshold), {"x": x})[0]
    assert_same(out, np.array(expected, x.dtype))


# ---------------------------------------------------------------- LabelEncoder

STR_IN = np.array([["a", "b", "zz"], ["c", "", "a"]], dtype=object)
F_IN = np.array([1.5, np.nan, -0.0, 7.0, 2.0], np.float32)

LABEL_CASES = {
    "string_to_int64": (STR_IN, dict(keys_strings=["a", "b", "c"], values_int64s=[1, 2, 3],
                                     default_int64=-7)),
    "string_to_float_default": (STR_IN, dict(keys_strings=["a", "c"],
                                             values_floats=[0.5, 2.5])),
    "int64_to_string": (np.array([3, 1, 9, -4], np.int64),
                        dict(keys_int64s=[1, 3, -4], values_strings=["x", "y", "z"],
                             default_string="none")),
    "float_nan_key": (F_IN, dict(keys_floats=[np.nan, 0.0, 2.0], values_int64s=[10, 20, 30])),
    "tensor_int64_to_double": (np.array([5, 6, 7, 5], np.int64), dict(
        keys_tensor=numpy_helper.from_array(np.array([5, 7], np.int64)),
        values_tensor=numpy_helper.from_array(np.array([0.25, -1.0])),
        default_tensor=numpy_helper.from_array(np.array([9.0])))),
    "tensor_string_to_int16_type_default": (STR_IN, dict(
        keys_tensor=numpy_helper.from_array(np.array(["b", "c"], dtype=object)),
        values_tensor=numpy_helper.from_array(np.array([4, 5], np.int16)))),
}


@pytest.mark.parametrize("case", sorted(LABEL_CASES))
def test_label_encoder_opset4_matches_ort(case: str) -> None:
    x, attrs = LABEL_CASES[case]
    feeds = {"x": x}
    matches_ort(ml_model("LabelEncoder", feeds, 4, **attrs), feeds)


def test_label_encoder_repeated_key_takes_the_last_value() -> None:
    # the spec says the last repeated key wins; onnxruntime 1.32 keeps the first
    feeds = {"x": np.array([2, 3, 2], np.int16)}
    model = ml_model("LabelEncoder", feeds, 4,
                     keys_tensor=numpy_helper.from_array(np.array([2, 3, 2], np.int16)),
                     values_tensor=numpy_helper.from_array(np.array([1.0, 2.0, 3.0],
                                                                    np.float32)))
    assert_same(run_ours(model, feeds)[0], np.array([3.0, 2.0, 3.0], np.float32))


def test_label_encoder_opset2_lists_match_ort() -> None:
    feeds = {"x": STR_IN}
    model = ml_model("LabelEncoder", feeds, 2, keys_strings=["c", "a"], values_int64s=[1, 2])
    matches_ort(model, feeds)


@pytest.mark.parametrize("x, attrs", [
    (STR_IN, dict(classes_strings=["c", "a", "b"], default_int64=-3)),
    (np.array([[0, 2], [5, -1]], np.int64), dict(classes_strings=["p", "q", "r"],
                                                 default_string="?")),
])
def test_label_encoder_opset1_classes_match_ort(x: np.ndarray, attrs: dict[str, Any]) -> None:
    feeds = {"x": x}
    matches_ort(ml_model("LabelEncoder", feeds, 1, **attrs), feeds)


@pytest.mark.parametrize("x, attrs, match", [
    (STR_IN, dict(keys_strings=["a", "b"], values_int64s=[1]), "same length"),
    (np.array([1], np.int32), dict(keys_int64s=[1], values_int64s=[1]), "does not match"),
    (STR_IN, dict(keys_strings=["a"], keys_int64s=[1], values_int64s=[1]), "exactly one"),
    (STR_IN, dict(keys_strings=["a"]), "exactly one"),
])
def test_label_encoder_rejects_inconsistent_attributes(x: np.ndarray, attrs: dict[str, Any],
                                                       match: str) -> None:
    with pytest.raises(NodeError, match=match):
        run_ours(ml_model("LabelEncoder", {"x": x}, 4, **attrs), {"x": x})


# ---------------------------------------------------------------- TreeEnsemble

def random_ensemble(rng: np.random.Generator, n_trees: int, depth: int, n_features: int,
                    n_targets: int, dtype: Any, modes: list[int]) -> dict[str, Any]:
    """Attributes of ``n_trees`` random full trees of ``depth`` levels of interior nodes."""
    feat, mode, split, tid, fid, tleaf, fleaf, mtt = ([] for _ in range(8))
    members: list[float] = []
    leaf_t: list[int] = []
    roots = []

    def build(level: int) -> tuple[int, bool]:
        if level == depth:
            leaf_t.append(int(rng.integers(n_targets)))
            return len(leaf_t) - 1, True
        i = len(feat)
        m = int(rng.choice(modes))
        feat.append(int(rng.integers(n_features)))
        mode.append(m)
        split.append(float(rng.integers(-2, 3)))
        mtt.append(int(rng.integers(2)))
        for lst in (tid, fid, tleaf, fleaf):
            lst.append(0)
        if m == 6:
            # onnxruntime only implements integer members
            members.extend(sorted({float(v) for v in rng.integers(-2, 3, size=3)}))
            members.append(np.nan)
        tid[i], is_leaf = build(level + 1)
        tleaf[i] = int(is_leaf)
        fid[i], is_leaf = build(level + 1)
        fleaf[i] = int(is_leaf)
        return i, False

    for _ in range(n_trees):
        roots.append(build(0)[0])
    attrs = dict(
        n_targets=n_targets, tree_roots=roots, nodes_featureids=feat,
        nodes_modes=numpy_helper.from_array(np.array(mode, np.uint8)),
        nodes_splits=numpy_helper.from_array(np.array(split, dtype)),
        nodes_truenodeids=tid, nodes_falsenodeids=fid, nodes_trueleafs=tleaf,
        nodes_falseleafs=fleaf, nodes_missing_value_tracks_true=mtt, leaf_targetids=leaf_t,
        leaf_weights=numpy_helper.from_array(rng.normal(size=len(leaf_t)).astype(dtype)))
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.array(members, dtype))
    return attrs


def tree_input(rng: np.random.Generator, n: int, f: int, dtype: Any) -> np.ndarray:
    """Integers near the splits (so EQ/NEQ/MEMBER hit) with some NaNs.

    onnxruntime truncates non-integer features in some BRANCH_MEMBER nodes (1.5 is a member
    of {-1, 1}); the spec tests equality, checked in
    test_tree_ensemble_set_membership_is_exact_equality.
    """
    x = rng.integers(-3, 4, size=(n, f)).astype(dtype)
    x[rng.random(size=x.shape) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_all_modes_and_aggregates_match_ort(dtype: Any, aggregate: int) -> None:
    rng = np.random.default_rng(aggregate)
    attrs = random_ensemble(rng, n_trees=5, depth=4, n_features=3, n_targets=3, dtype=dtype,
                            modes=[0, 1, 2, 3, 4, 5, 6])
    feeds = {"x": tree_input(rng, 64, 3, dtype)}
    model = ml_model("TreeEnsemble", feeds, 5, aggregate_function=aggregate, **attrs)
    matches_ort(model, feeds, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("post", [3, 4])
def test_tree_ensemble_softmax_zero_and_probit_match_ort(post: int) -> None:
    rng = np.random.default_rng(post)
    attrs = random_ensemble(rng, n_trees=3, depth=3, n_features=2, n_targets=4,
                            dtype=np.float32, modes=[0, 3, 6])
    feeds = {"x": tree_input(rng, 32, 2, np.float32)}
    model = ml_model("TreeEnsemble", feeds, 5, post_transform=post, **attrs)
    matches_ort(model, feeds, rtol=1e-5, atol=1e-6)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("post, formula", [
    (1, _softmax),
    (2, lambda s: 1.0 / (1.0 + np.exp(-s))),
])
def test_tree_ensemble_softmax_and_logistic_follow_the_spec_numbering(post: int,
                                                                      formula: Any) -> None:
    # onnxruntime 1.32 swaps these two (its own enum: 1 = LOGISTIC), so check the formula
    rng = np.random.default_rng(7)
    attrs = random_ensemble(rng, n_trees=4, depth=3, n_features=2, n_targets=3,
                            dtype=np.float64, modes=[0, 2, 4])
    feeds = {"x": tree_input(rng, 16, 2, np.float64)}
    raw = run_ours(ml_model("TreeEnsemble", feeds, 5, **attrs), feeds)[0]
    out = run_ours(ml_model("TreeEnsemble", feeds, 5, post_transform=post, **attrs), feeds)[0]
    assert_same(out, formula(raw), rtol=1e-12, atol=1e-15)


def test_tree_ensemble_single_leaf_tree_and_missing_target_are_zero_under_max() -> None:
    # a tree that is a leaf: one node whose branches both name leaf 0
    x = np.array([[np.nan], [5.0]], np.float32)
    attrs = dict(n_targets=2, tree_roots=[0], nodes_featureids=[0],
                 nodes_modes=numpy_helper.from_array(np.array([0], np.uint8)),
                 nodes_splits=numpy_helper.from_array(np.array([0.0], np.float32)),
                 nodes_truenodeids=[0], nodes_falsenodeids=[0], nodes_trueleafs=[1],
                 nodes_falseleafs=[1], leaf_targetids=[1],
                 leaf_weights=numpy_helper.from_array(np.array([-2.5], np.float32)))
    feeds = {"x": x}
    model = ml_model("TreeEnsemble", feeds, 5, aggregate_function=3, **attrs)
    assert_same(run_ours(model, feeds)[0], np.array([[0, -2.5], [0, -2.5]], np.float32))
    matches_ort(model, feeds)


def test_tree_ensemble_set_membership_is_exact_equality() -> None:
    x = np.array([[1.2], [-1.5], [1.5], [-1.0], [np.nan], [0.0]], np.float32)
    attrs = dict(n_targets=1, tree_roots=[0], nodes_featureids=[0],
                 nodes_modes=numpy_helper.from_array(np.array([6], np.uint8)),
                 nodes_splits=numpy_helper.from_array(np.array([0.0], np.float32)),
                 nodes_truenodeids=[0], nodes_falsenodeids=[1], nodes_trueleafs=[1],
                 nodes_falseleafs=[1], leaf_targetids=[0, 0],
                 leaf_weights=numpy_helper.from_array(np.array([1.0, 0.0], np.float32)),
                 membership_values=numpy_helper.from_array(
                     np.array([1.2, -1.0, 1.0, np.nan], np.float32)))
    out = run_ours(ml_model("TreeEnsemble", {"x": x}, 5, **attrs), {"x": x})[0]
    assert_same(out, np.array([[1], [0], [0], [1], [0], [0]], np.float32))


def _broken(**change: Any) -> dict[str, Any]:
    attrs = dict(n_targets=1, tree_roots=[0], nodes_featureids=[0, 0],
                 nodes_modes=numpy_helper.from_array(np.array([0, 0], np.uint8)),
                 nodes_splits=numpy_helper.from_array(np.array([0.0, 1.0], np.float32)),
                 nodes_truenodeids=[1, 0], nodes_falsenodeids=[0, 1], nodes_trueleafs=[0, 1],
                 nodes_falseleafs=[1, 1], leaf_targetids=[0, 0],
                 leaf_weights=numpy_helper.from_array(np.array([1.0, 2.0], np.float32)))
    attrs.update(change)
    return attrs


@pytest.mark.parametrize("change, match", [
    (dict(nodes_trueleafs=[0, 0]), "cycle"),
    (dict(nodes_featureids=[0, 3]), "nodes_featureids"),
    (dict(leaf_targetids=[0, 1]), "leaf_targetids"),
    (dict(nodes_splits=numpy_helper.from_array(np.array([0.0, 1.0]))), "same type"),
    (dict(nodes_modes=numpy_helper.from_array(np.array([6, 0], np.uint8))), "BRANCH_MEMBER"),
    (dict(nodes_modes=numpy_helper.from_array(np.array([9, 0], np.uint8))), "nodes_modes"),
    (dict(nodes_trueleafs=[0]), "nodes_trueleafs"),
    (dict(aggregate_function=7), "aggregate_function"),
])
def test_tree_ensemble_rejects_malformed_trees(change: dict[str, Any], match: str) -> None:
    feeds = {"x": np.zeros((2, 2), np.float32)}
    with pytest.raises(NodeError, match=match):
        run_ours(ml_model("TreeEnsemble", feeds, 5, **_broken(**change)), feeds)
