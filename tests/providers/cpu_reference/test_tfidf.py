"""TfIdfVectorizer against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

POOL = dict(ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
            pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("lo, skip", [(1, 0), (2, 3), (1, 5)])
def test_tfidf_vectorizer_matches_ort(mode: str, lo: int, skip: int) -> None:
    feeds = {"x": np.array([[1, 1, 3, 3, 3, 7, 5, 6], [8, 6, 7, 5, 6, 8, 2, 3]], np.int64)}
    model = node_model("TfIdfVectorizer", feeds, opset=9, mode=mode, min_gram_length=lo,
                       max_gram_length=2, max_skip_count=skip,
                       weights=[0.5, 1, 2, 1, 1, 3, 1], **POOL)
    assert_matches_ort(model, feeds)


def test_tfidf_vectorizer_rejects_unknown_mode() -> None:
    feeds = {"x": np.array([1, 2], np.int64)}
    model = node_model("TfIdfVectorizer", feeds, opset=9, mode="BM25", min_gram_length=1,
                       max_gram_length=1, max_skip_count=0, **POOL)
    with pytest.raises(NodeError, match="mode"):
        run_ours(model, feeds)
