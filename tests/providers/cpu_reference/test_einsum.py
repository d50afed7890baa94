"""cpu_reference Einsum against onnxruntime, plus its NodeError path."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_ep.errors import NodeError
from tests.helpers.oracle import assert_matches_ort, node_model, run_ours

RNG = np.random.default_rng(1)


def _x(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]), ("ij->", [(3, 4)]), ("i,i", [(5,), (5,)]), ("...ij->...ji", [(2, 3, 4)]),
])
def test_einsum_matches_ort(equation: str, shapes: list[tuple[int, ...]]) -> None:
    feeds = {f"x{i}": _x(*s) for i, s in enumerate(shapes)}
    assert_matches_ort(node_model("Einsum", feeds, equation=equation), feeds,
                       rtol=1e-5, atol=1e-6)


def test_einsum_with_mismatched_operands_raises_node_error() -> None:
    feeds = {"a": _x(3, 4), "b": _x(5, 6)}
    with pytest.raises(NodeError, match="Einsum"):
        run_ours(node_model("Einsum", feeds, equation="ij,jk->ik"), feeds)
