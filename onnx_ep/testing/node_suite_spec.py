"""Node-suite cases whose expected data contradicts the written ONNX specification.

onnx generates a Cast case's inputs and expected output in memory with the installed
ml_dtypes' conversions (``astype``), so where that release departs from the specification
the expected data does too: ml_dtypes 0.7 turns a float out of int4's range into 0 where
technical/int4.md says "round to the nearest even integer and truncate" (keep the low
bits), and NaN -> float4e2m1 becomes -0 where technical/float4.md says 6. The runner
replaces exactly those elements of the expected output by the specification's answer,
computed here from the case's input with Python integers (independently of the reference's
own code), and only where the rule's condition holds; every other element is compared as
onnx generated it. docs/PARITY.md lists the rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import attrs
import numpy as np

from onnx_ep.providers.cpu_reference.formats import decode, round_to, source_value


@attrs.frozen
class Rule:
    """Where a case's data departs from the spec, and the spec's answer there."""

    pattern: re.Pattern[str]
    why: str
    #: float64 input values -> (mask of the elements the rule covers, spec's values there)
    answer: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def _sub_byte(bits: int, signed: bool) -> Callable[[np.ndarray],
                                                    tuple[np.ndarray, np.ndarray]]:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)

    def answer(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = np.zeros(x.shape, np.float64)
        mask = np.zeros(x.shape, bool)
        for i, v in enumerate(x.reshape(-1).tolist()):
            if not math.isfinite(v):
                continue                      # undefined by the spec: compared as generated
            r = round(v)                      # Python rounds half to even
            if lo <= r <= hi:
                continue                      # in range: the generated data is the spec's
            low = r % (1 << bits)
            mask.flat[i] = True
            out.flat[i] = low - (1 << bits) if signed and low > hi else low
        return mask, out

    return answer


def _float4_nan(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.isnan(x), np.full(x.shape, 6.0)


_CAST = r"^test_cast(like)?_(FLOAT|FLOAT16)_to_{}(_expanded)?$"
RULES: tuple[Rule, ...] = (
    *(Rule(re.compile(_CAST.format(name)), f"float -> {name.lower()} out of range: "
           f"technical/{doc}.md rounds half to even and keeps the low {bits} bits (ml_dtypes "
           f"0.7 gives 0)", _sub_byte(bits, signed))
      for name, doc, bits, signed in (("INT4", "int4", 4, True), ("UINT4", "int4", 4, False),
                                      ("INT2", "int2", 2, True), ("UINT2", "int2", 2, False))),
    Rule(re.compile(_CAST.format("FLOAT4E2M1")),
         "NaN -> float4e2m1: technical/float4.md says 6 (ml_dtypes gives -0)",
         _float4_nan),
)


def rule_for(case_name: str) -> Rule | None:
    """The rule that covers ``case_name``, if any."""
    return next((r for r in RULES if r.pattern.match(case_name)), None)


def corrected(rule: Rule, x: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, int]:
    """``expected`` with the rule's elements replaced by the spec's answer for input ``x``,
    and how many elements changed (in ``expected``'s dtype; the input is widened first)."""
    mask, answer = rule.answer(source_value(x))
    values = decode(expected)       # the rules' formats have no NaN: != compares them all
    changed = int(np.count_nonzero(mask & (answer != values)))
    return round_to(np.where(mask, answer, values), expected.dtype), changed
