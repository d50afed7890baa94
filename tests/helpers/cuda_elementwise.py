"""Helpers for the GPU tests of the CUDA elementwise and Cast kernels: the kernels by op
type on both providers, and the cpu_reference output they are compared with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, NodeMeta
from onnx_ep.providers.cpu_reference import activation as ref_activation
from onnx_ep.providers.cpu_reference import cast as ref_cast
from onnx_ep.providers.cpu_reference import elementwise as ref_elementwise
from onnx_ep.providers.cuda.kernels import cast, elementwise

#: cpu_reference kernels by op type
REF = {k.key.op_type: k for k in
       ref_elementwise.KERNELS + ref_activation.KERNELS + ref_cast.KERNELS}
#: CUDA kernels by op type
ROWS = {k.key.op_type: k for k in elementwise.KERNELS + cast.KERNELS}


def reference(op: str, arrays: Sequence[Any], meta: NodeMeta) -> np.ndarray:
    """cpu_reference's output of the ``op`` node ``meta`` on host ``arrays``."""
    out = [None]
    with np.errstate(all="ignore"):
        REF[op].execute_with_workspace(ExecutionContext(meta), list(arrays), out, None)
    return np.asarray(out[0])
