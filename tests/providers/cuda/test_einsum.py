"""GPU parity of the CUDA Einsum against cpu_reference (float64 sums, one rounding, within
the reference's float32 tolerance; narrow floats one more output ulp).

Run: python -m pytest -q -m cuda tests/providers/cuda/test_einsum.py
"""

from __future__ import annotations

import pytest

from tests.helpers.cuda_family import FLOATS, check, model, random
from tests.providers.cuda.test_einsum_host import CASES

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("dtype", list(FLOATS.values()), ids=list(FLOATS))
@pytest.mark.parametrize("eq,shapes", CASES)
def test_einsum_matches_reference(cuda_device, dtype, eq, shapes):
    feeds = {f"x{i}": random(s, dtype, i) for i, s in enumerate(shapes)}
    check(model("Einsum", feeds, {"equation": eq}, opset=13), feeds)
