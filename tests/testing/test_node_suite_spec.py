"""The node-suite corrections: which cases, which elements, and the spec's answer there."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from onnx_ep.testing import node_suite_spec


def test_rules_cover_the_float_to_sub_byte_and_float4_casts_only() -> None:
    for name in ("test_cast_FLOAT_to_INT4", "test_castlike_FLOAT16_to_UINT2_expanded",
                 "test_cast_FLOAT_to_FLOAT4E2M1"):
        assert node_suite_spec.rule_for(name) is not None, name
    for name in ("test_cast_INT4_to_FLOAT", "test_cast_FLOAT_to_FLOAT8E4M3FN",
                 "test_cast_FLOAT_to_INT8", "test_quantizelinear_int4"):
        assert node_suite_spec.rule_for(name) is None, name


def test_out_of_range_elements_get_the_specs_wrapped_value() -> None:
    rule = node_suite_spec.rule_for("test_cast_FLOAT_to_INT4")
    x = np.array([-9.0, 9.0, 2.0, -8.0, 10.5, 7.5], np.float32)
    stored = np.array([0, 0, 2, -8, 0, 0]).astype(ml_dtypes.int4)   # ml_dtypes 0.7's
    fixed, changed = node_suite_spec.corrected(rule, x, stored)
    # 10.5 rounds to 10 (even) -> -6; 7.5 rounds to 8 -> -8; in-range values are kept
    assert fixed.astype(np.int8).tolist() == [7, -7, 2, -8, -6, -8]
    assert changed == 4


def test_in_range_elements_are_compared_as_stored() -> None:
    rule = node_suite_spec.rule_for("test_cast_FLOAT_to_UINT4")
    x = np.array([1.0, 2.0, 15.0], np.float32)
    stored = np.array([1, 3, 15]).astype(ml_dtypes.uint4)        # a wrong 3 stays wrong
    fixed, changed = node_suite_spec.corrected(rule, x, stored)
    assert fixed.astype(np.int8).tolist() == [1, 3, 15] and changed == 0


def test_nan_to_float4_is_six() -> None:
    rule = node_suite_spec.rule_for("test_cast_FLOAT16_to_FLOAT4E2M1")
    x = np.array([np.nan, 1.0, -np.inf], np.float16)
    stored = np.array([0x8, 0x2, 0xF], np.uint8).view(ml_dtypes.float4_e2m1fn)
    fixed, changed = node_suite_spec.corrected(rule, x, stored)
    assert fixed.view(np.uint8).tolist() == [0x7, 0x2, 0xF] and changed == 1
