"""String ops against onnxruntime (exact), plus NodeError paths."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, requires_ort, run_ours

WORDS = np.array(["Monday", "tuesday", "WEDNESDAY", "monday", "Ünïcode"], dtype=object)


@requires_ort("1.27", "earlier releases construct the en_US.UTF-8 locale for stopwords and "
                     "fail where it is not installed")
def test_string_normalizer_stopwords_match_ort() -> None:
    feeds = {"x": WORDS}
    model = node_model("StringNormalizer", feeds, opset=21, stopwords=["monday"],
                       is_case_sensitive=1)
    assert_matches_ort(model, feeds)


@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
def test_string_normalizer_case_change_is_unicode_case_mapping(action: str) -> None:
    # onnxruntime needs the en_US.UTF-8 locale installed to change case; the oracle
    # here is Python's Unicode case mapping, applied after case-insensitive stopwords
    feeds = {"x": WORDS}
    model = node_model("StringNormalizer", feeds, opset=21, case_change_action=action,
                       stopwords=["MONDAY"])
    out = run_ours(model, feeds)[0]
    kept = [w for w in WORDS.tolist() if w.lower() != "monday"]
    assert out.tolist() == [w.lower() if action == "LOWER" else w.upper() for w in kept]


def test_string_normalizer_removing_everything_returns_one_empty_string() -> None:
    feeds = {"x": np.array(["a", "A"], dtype=object)}
    out = run_ours(node_model("StringNormalizer", feeds, opset=21, stopwords=["a"]), feeds)[0]
    assert out.tolist() == [""]


def test_string_concat_broadcasts_like_ort() -> None:
    feeds = {"a": np.array([["x", "yy"], ["", "的"]], dtype=object),
             "b": np.array(["-s"], dtype=object)}
    assert_matches_ort(node_model("StringConcat", feeds, opset=21), feeds)


@pytest.mark.parametrize("attrs", [{"delimiter": "-"}, {}, {"delimiter": "-", "maxsplit": 1}])
def test_string_split_matches_ort(attrs: dict) -> None:
    feeds = {"x": np.array([["a-b--c", " lone "], ["-", "x y  z"]], dtype=object)}
    assert_matches_ort(node_model("StringSplit", feeds, 2, opset=21, **attrs), feeds)


def test_regex_full_match_matches_ort() -> None:
    feeds = {"x": np.array(["abc123", "abc", "123abc", ""], dtype=object)}
    assert_matches_ort(node_model("RegexFullMatch", feeds, opset=21, pattern=r"[a-z]+\d*"),
                       feeds)


def test_regex_full_match_rejects_an_invalid_pattern() -> None:
    feeds = {"x": np.array(["a"], dtype=object)}
    with pytest.raises(NodeError, match="invalid pattern"):
        run_ours(node_model("RegexFullMatch", feeds, opset=21, pattern="(unclosed"), feeds)
