"""Selection on CUDA: ``NonZero``, whose output size only the run knows.

The kernel sizes its output at run time (``sizes_at_run``, :mod:`onnx_ep.core.dynamic`): it
counts the non-zeros per chunk on the device, reads those counts back once (the size),
uploads each chunk's first output column, and writes the coordinates into session scratch
sized for the worst case (every element non-zero); its output is a view of that scratch
of the size it found. The nodes reading it run in a region the session plans per size.

Parity: EXACT (coordinates, in row-major element order, as cpu_reference). The read-back
makes it capture-unsupported: a capture plan runs it between segments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import (
    CaptureSupport,
    NodeMeta,
    Support,
    TensorSpec,
    WorkspaceLifetime,
    WorkspaceRequirement,
)
from onnx_ep.core.memory import align_up
from onnx_ep.providers.cuda import copies
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    I64,
    MAX_DIMS,
    PTR,
    CudaKernel,
    Geo,
    dtype_support,
    prod,
    struct_arg,
    suffix,
)

#: threads per block and elements per block (``NZ_THREADS``, ``NZ_CHUNK`` of selection.cu)
THREADS, CHUNK = 256, 1024
#: byte alignment of each part of the scratch
ALIGN = 256
DTYPES: frozenset[np.dtype] = frozenset(
    [np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int64, np.int32, np.int16,
                           np.int8, np.uint64, np.uint32, np.uint16, np.uint8, np.bool_)]
    + [BF16])


def scratch_layout(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Byte offsets of the per-chunk counts, the chunk starts and the coordinates in the
    scratch of an input of ``shape``, and the scratch's size (every element non-zero)."""
    n, rank = prod(shape), len(shape)
    blocks = -(-n // CHUNK)
    starts = align_up(4 * blocks, ALIGN)
    coords = starts + align_up(8 * blocks, ALIGN)
    return 0, starts, coords, max(coords + align_up(8 * rank * n, ALIGN), ALIGN)


class NonZero(CudaKernel):
    source = "selection"
    #: its output is sized by the run (core/dynamic.py): never pre-bound
    sizes_at_run = True

    def __init__(self) -> None:
        super().__init__("NonZero", since=9)

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.unsupported("reads the count of non-zero elements back to the "
                                          "host to size its output")

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0] if meta.inputs else None
        if x is None:
            return Support.no("input is not a tensor of known dtype and rank")
        s = dtype_support(x.dtype, DTYPES)
        if not s:
            return s
        if len(x.shape) > MAX_DIMS:
            return Support.no(f"rank {len(x.shape)} > {MAX_DIMS}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        return [None]                 # the count of non-zeros: only the run knows it

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        x = meta.inputs[0]
        if x is None or not x.is_static:
            return WorkspaceRequirement.NONE
        return WorkspaceRequirement(scratch_layout(tuple(x.shape) or (1,))[3],
                                    WorkspaceLifetime.SESSION_PERSISTENT)

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        x = inputs[0]
        # a scalar is a one-element vector (as onnxruntime and cpu_reference): (1, 0 or 1)
        shape, stream = tuple(x.shape) or (1,), ctx.stream
        n, rank = prod(shape), len(shape)
        counts_at, starts_at, coords_at, need = scratch_layout(shape)
        if workspace is None or workspace.nbytes < need:
            raise self.fail(ctx, f"scratch of {getattr(workspace, 'nbytes', 0)} bytes for an "
                                 f"input of shape {list(shape)}, which needs {need}")
        buf = workspace.buffer
        blocks = -(-n // CHUNK)
        total = 0
        sfx = suffix(x.dtype)
        if blocks:
            counts = buf.view(np.int32, (blocks,), counts_at)
            self.launch(self.function(f"nonzero_count_{sfx}", x), (blocks, 1, 1),
                        (THREADS, 1, 1), [(x.ptr, PTR), (n, I64), (counts.ptr, PTR)], stream)
            host = np.empty(blocks, np.int32)
            copies.copy_dtoh(host, counts.ptr, stream)
            stream.synchronize()                   # the one read-back: the size
            first = np.zeros(blocks, np.int64)
            np.cumsum(host[:-1], out=first[1:])
            total = int(host.sum(dtype=np.int64))
        y = buf.view(np.int64, (rank, total), coords_at)
        if total and rank:
            starts = buf.view(np.int64, (blocks,), starts_at)
            copies.copy_htod(starts.ptr, first, stream)
            self.launch(self.function(f"nonzero_write_{sfx}", x), (blocks, 1, 1),
                        (THREADS, 1, 1),
                        [(x.ptr, PTR), (n, I64), (starts.ptr, PTR), (y.ptr, PTR), (total, I64),
                         struct_arg(Geo.of(shape, [1] * rank))], stream)
        outputs[0] = y


KERNELS: list[Any] = [NonZero()]
