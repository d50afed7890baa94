"""Node-suite cases that onnx's own comparison cannot judge, checked here instead.

Each case listed here is skipped in ``onnx_ep/testing/node_suite_skips.toml`` with a reason
pointing to this file. Loading the node suite takes ~10-20 s, hence ``slow``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_ep.testing.node_suite import load_cases


def _assert_same_value(ours: Any, ref: Any, where: str, rtol: float, atol: float) -> None:
    """Compare one output recursively: sequences by length then element, tensors by
    dtype, shape and values (within the case's rtol/atol, as onnx's runner would)."""
    if isinstance(ref, list):
        assert isinstance(ours, list), f"{where}: expected a sequence, got {type(ours).__name__}"
        assert len(ours) == len(ref), f"{where}: sequence length {len(ours)} != {len(ref)}"
        for i, (a, b) in enumerate(zip(ours, ref)):
            _assert_same_value(a, b, f"{where}[{i}]", rtol, atol)
        return
    assert isinstance(ours, np.ndarray), f"{where}: expected a tensor, got {type(ours).__name__}"
    assert ours.dtype == ref.dtype, f"{where}: dtype {ours.dtype} != expected {ref.dtype}"
    assert ours.shape == ref.shape, f"{where}: shape {ours.shape} != expected {ref.shape}"
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol, err_msg=where)


@pytest.mark.slow
def test_loop16_seq_none_outputs_match_expected_element_by_element() -> None:
    # onnx's Runner.assert_similar_outputs recurses into the output sequence and calls
    # len() on its first element, a 0-d tensor (TypeError), so the case is compared here.
    from onnx.backend.test.runner import _normalize_tensor

    from onnx_ep.backend import OnnxEpBackend

    (case,) = load_cases("^test_loop16_seq_none$")
    rep = OnnxEpBackend.prepare(case.model, "CPU")
    assert case.data_sets, "the case has no data set"
    for inputs, ref_outputs in case.data_sets:
        outs = list(rep.run([_normalize_tensor(x) for x in inputs]))
        refs = [_normalize_tensor(x) for x in ref_outputs]
        assert len(outs) == len(refs)
        for k, (ours, ref) in enumerate(zip(outs, refs)):
            _assert_same_value(ours, ref, f"output {k}", case.rtol, case.atol)
        # the sequence starts with the 0-d initial element, then grows by one each step
        assert refs[0][0].shape == ()
