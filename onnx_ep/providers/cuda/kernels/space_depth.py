"""DepthToSpace and SpaceToDepth on CUDA: the reference's reshape to 6-D and transpose, run
through movement.cu's transpose kernels (:func:`.movement_plan.transpose_plan`).

Parity: EXACT (bytes are moved). The kernels are listed in the indexing family
(``indexing.KERNELS``), as cpu_reference keeps the ops in its indexing.py; they live here
because they launch movement.cu's kernels, not indexing.cu's.
"""

from __future__ import annotations

from typing import Any

from onnx_ep.core.kernel import NodeMeta, Support, TensorSpec
from onnx_ep.providers.cuda import copies
from onnx_ep.providers.cuda.kernels.base import I64, PTR, CudaKernel


def space_depth_plan(op: str, shape: tuple[int, ...], bs: int, mode: str
                     ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """(6-D view of the input, permutation, output shape) as the reference reshapes and
    transposes, or ``None`` when the shape does not fit the block size."""
    if len(shape) != 4 or bs < 1 or mode not in ("DCR", "CRD"):
        return None
    b, c, h, w = shape
    if op == "DepthToSpace":
        if c % (bs * bs):
            return None
        cc = c // (bs * bs)
        if mode == "DCR":
            return (b, bs, bs, cc, h, w), (0, 3, 4, 1, 5, 2), (b, cc, h * bs, w * bs)
        return (b, cc, bs, bs, h, w), (0, 1, 4, 2, 5, 3), (b, cc, h * bs, w * bs)
    if h % bs or w % bs:
        return None
    view = (b, c, h // bs, bs, w // bs, bs)
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return view, perm, (b, c * bs * bs, h // bs, w // bs)


class SpaceDepth(CudaKernel):
    """DepthToSpace / SpaceToDepth: a 6-D transpose through movement.cu's kernels."""

    source = "movement"

    def _mode(self, meta: Any) -> str:
        return str(meta.attr("mode", "DCR"))

    def supports(self, meta: NodeMeta) -> Support:
        x = meta.inputs[0] if meta.inputs else None
        if x is None:
            return Support.no("input is not a tensor (sequence, optional or missing)")
        if x.dtype.kind in "OUSc" or x.dtype.itemsize not in (1, 2, 4, 8):
            return Support.no(f"dtype {x.dtype} cannot live on cuda")
        if len(x.shape) != 4:
            return Support.no(f"input must be 4-D, got rank {len(x.shape)}")
        if not meta.attr("blocksize") or int(meta.attr("blocksize")) < 1:
            return Support.no("attribute blocksize must be >= 1")
        if self._mode(meta) not in ("DCR", "CRD"):
            return Support.no(f"mode {self._mode(meta)!r} must be 'DCR' or 'CRD'")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        x = meta.inputs[0]
        if not all(isinstance(d, int) for d in x.shape):
            return [None]
        plan = space_depth_plan(self.key.op_type, tuple(x.shape),
                                int(meta.attr("blocksize")), self._mode(meta))
        return [None if plan is None else TensorSpec(x.dtype, plan[2])]

    def execute_with_workspace(self, ctx, inputs, outputs, workspace) -> None:
        from onnx_ep.providers.cuda.kernels import movement as mv

        x, y = inputs[0], outputs[0]
        plan = space_depth_plan(self.key.op_type, tuple(x.shape),
                                int(ctx.node.attr("blocksize")), self._mode(ctx.node))
        if plan is None or tuple(y.shape) != plan[2]:
            raise self.fail(ctx, f"input {x.shape} does not fit blocksize "
                                 f"{ctx.node.attr('blocksize')} (output {y.shape})")
        if y.size == 0:
            return
        view, perm, _ = plan
        route, w, geo = mv.transpose_plan(view, perm, x.dtype.itemsize, (x.ptr, y.ptr))
        if route == "copy":
            copies.copy_dtod(y.ptr, x.ptr, y.nbytes, ctx.stream)
        elif route == "tile":
            b, r, c = geo
            self.launch(self.function(f"transpose_tile_x{w}", x), mv.tile_grid(b, r, c),
                        (32, 8, 1), [(x.ptr, PTR), (y.ptr, PTR), (r, I64), (c, I64), (b, I64)],
                        ctx.stream)
        else:
            nd = len(geo) // 2
            mv._strided(self, ctx, x, x.ptr, y, w, geo[:nd], geo[nd:])
