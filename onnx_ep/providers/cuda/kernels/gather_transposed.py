"""``onnx_ep.fused::TransposedGather`` on CUDA (the fusion pass's node for a Gather of a
transposed matrix, core/fusion.py ``GatherTransposed``), launched from ``movement.cu``."""

from __future__ import annotations

import numpy as np

from onnx_ep.core.fusion import FUSED_DOMAIN
from onnx_ep.core.kernel import NodeMeta, OpKey, Support, TensorSpec
from onnx_ep.providers.cuda.kernels.base import BLOCK, I32, I64, PTR, grid_1d, replayed
from onnx_ep.providers.cuda.kernels.movement import _Movement, _sym


class TransposedGather(_Movement):
    """``onnx_ep.fused::TransposedGather(w, indices)`` = ``Gather(Transpose(w), indices)``
    of a matrix ``w`` [K, N] (core/fusion.py): one launch that reads the gathered columns,
    where the unfused graph transposes the whole matrix (a tied embedding) every run."""

    def __init__(self) -> None:
        super().__init__("TransposedGather")
        self.key = OpKey(FUSED_DOMAIN, "TransposedGather", 1)

    def supports(self, meta: NodeMeta) -> Support:
        s = super().supports(meta)
        if not s:
            return s
        x, idx = meta.inputs[0], meta.inputs[1]
        if len(x.shape) != 2:
            return Support.no(f"data must be a matrix, got rank {len(x.shape)}")
        if idx is None or idx.dtype not in (np.int32, np.int64):
            return Support.no("indices must be int32 or int64")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x, idx = meta.inputs[0], meta.inputs[1]
        return [TensorSpec(x.dtype, tuple(idx.shape) + (x.shape[0],))]

    @replayed
    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x, idx, y = inputs[0], inputs[1], outputs[0]
        if y.size == 0:
            return
        rows, cols = x.shape
        if cols == 0:
            raise self.fail(ctx, f"cannot gather from an empty matrix (shape {x.shape})")
        n = idx.size * rows
        self.launch(self.function(_sym("gather_cols", x.dtype.itemsize), x), grid_1d(n),
                    (BLOCK, 1, 1),
                    [(x.ptr, PTR), (idx.ptr, PTR), (int(idx.dtype == np.int64), I32),
                     (y.ptr, PTR), (rows, I64), (cols, I64), (idx.size, I64)], ctx.stream)
