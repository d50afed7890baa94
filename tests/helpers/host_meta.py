"""NodeMeta for host-side CUDA kernel tests (no GPU): a node of known input specs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from onnx_ep.core.kernel import NodeMeta, TensorSpec


def spec_meta(op: str, inputs: Sequence[TensorSpec | None], opset: int = 21, n_out: int = 1,
              **attrs: Any) -> NodeMeta:
    """Node ``n`` of ``op`` over ``inputs`` with outputs ``y0``, ``y1``, ..."""
    return NodeMeta(name="n", op_type=op, domain="", opset=opset, attrs=attrs,
                    inputs=tuple(inputs), output_names=tuple(f"y{i}" for i in range(n_out)))


def by_op(kernels: Iterable[Any]) -> dict[str, Any]:
    """A family's kernels keyed by op type."""
    return {k.key.op_type: k for k in kernels}
