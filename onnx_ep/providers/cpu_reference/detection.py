"""Detection ops: NonMaxSuppression and RoiAlign.

NonMaxSuppression: greedy selection is sequential by definition (each pick suppresses
later candidates), so it loops over picks per (batch, class); IoU against the candidates
is vectorized. IoU is computed in the boxes' dtype (float16 in float32) as the spec's
reference does, so threshold comparisons match: EXACT.
RoiAlign: bilinear samples are gathered and weighted in float64 for all bins of one ROI
at once (ROIs loop like a batch, each with its own adaptive sampling grid); rounded once.
Parity: tolerance (summation order of the average).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast


def _scalar(v: Any, default: float) -> float:
    if v is None or np.asarray(v).size == 0:
        return default
    return np.asarray(v).reshape(-1)[0].item()


def _corners(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """(x_min, y_min, x_max, y_max) columns of ``boxes`` (N, 4)."""
    if center_point_box:
        xc, yc, w, h = boxes.T
        return xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2
    y1, x1, y2, x2 = boxes.T
    return np.minimum(x1, x2), np.minimum(y1, y2), np.maximum(x1, x2), np.maximum(y1, y2)


class NonMaxSuppression(CpuKernel):
    def run(self, ctx: ExecutionContext, boxes: np.ndarray, scores: np.ndarray,
            max_out: Any = None, iou_thr: Any = None, score_thr: Any = None) -> np.ndarray:
        if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or \
                scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise self.fail(ctx, f"boxes must be (batch, N, 4) and scores (batch, classes, N); "
                                 f"got {boxes.shape} and {scores.shape}")
        center = int(ctx.node.attr("center_point_box", 0))
        if center not in (0, 1):
            raise self.fail(ctx, f"center_point_box must be 0 or 1, got {center}")
        limit = int(_scalar(max_out, 0))
        iou_threshold = _scalar(iou_thr, 0.0)
        has_score_thr = score_thr is not None and np.asarray(score_thr).size > 0
        score_threshold = _scalar(score_thr, 0.0)
        cdt = np.float64 if boxes.dtype == np.float64 else np.float32
        selected: list[tuple[int, int, int]] = []
        for b in range(boxes.shape[0]):
            x0, y0, x1, y1 = _corners(upcast(boxes[b]).astype(cdt), center)
            area = (x1 - x0) * (y1 - y0)
            for c in range(scores.shape[1]):
                s = upcast(scores[b, c]).astype(cdt)
                order = np.argsort(-s, kind="stable")   # score desc, index asc on ties
                if has_score_thr:
                    order = order[s[order] > score_threshold]
                picks: list[int] = []
                while order.size and len(picks) < limit:
                    top, rest = order[0], order[1:]
                    picks.append(int(top))
                    iw = np.minimum(x1[top], x1[rest]) - np.maximum(x0[top], x0[rest])
                    ih = np.minimum(y1[top], y1[rest]) - np.maximum(y0[top], y0[rest])
                    inter = iw * ih
                    union = area[top] + area[rest] - inter
                    overlap = (iw > 0) & (ih > 0) & (area[top] > 0) & (area[rest] > 0) & \
                        (union > 0)
                    with np.errstate(divide="ignore", invalid="ignore"):
                        suppress = overlap & (inter / np.where(union > 0, union, 1) >
                                              iou_threshold)
                    order = rest[~suppress]
                selected.extend((b, c, i) for i in picks)
        return np.array(selected, dtype=np.int64).reshape(-1, 3)


def _axis_samples(start: float, bin_size: float, pooled: int, grid: int,
                  size: int) -> tuple[np.ndarray, ...]:
    """Low/high indices, low/high weights and validity of sample points along one axis."""
    pos = (start + np.arange(pooled)[:, None] * bin_size
           + (np.arange(grid)[None, :] + 0.5) * bin_size / grid)
    valid = (pos >= -1.0) & (pos <= size)
    pos = np.maximum(pos, 0.0)
    low = pos.astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    pos = np.where(edge, low, pos)
    frac = pos - low
    return low, high, (1.0 - frac) * valid, frac * valid


class RoiAlign(CpuKernel):
    parity = Parity.tolerance(1e-5, 1e-6)

    def run(self, ctx: ExecutionContext, x: np.ndarray, rois: np.ndarray,
            batch_indices: np.ndarray) -> np.ndarray:
        node = ctx.node
        default_mode = "half_pixel" if node.opset >= 16 else "output_half_pixel"
        half_pixel = node.attr("coordinate_transformation_mode", default_mode) == "half_pixel"
        mode = node.attr("mode", "avg")
        if mode not in ("avg", "max"):
            raise self.fail(ctx, f"mode must be 'avg' or 'max', got {mode!r}")
        ph_n, pw_n = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
        ratio = int(node.attr("sampling_ratio", 0))
        scale = float(node.attr("spatial_scale", 1.0))
        if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or \
                batch_indices.shape != (rois.shape[0],):
            raise self.fail(ctx, f"X must be (N, C, H, W), rois (R, 4), batch_indices (R,); got "
                                 f"{x.shape}, {rois.shape}, {batch_indices.shape}")
        bidx = np.asarray(batch_indices).astype(np.int64)
        if ((bidx < 0) | (bidx >= x.shape[0])).any():
            raise self.fail(ctx, f"batch_indices must lie in [0, {x.shape[0]})")
        height, width = x.shape[2:]
        xf = source_value(x)
        out = np.zeros((rois.shape[0], x.shape[1], ph_n, pw_n))
        offset = 0.5 if half_pixel else 0.0
        for r, roi in enumerate(source_value(rois)):
            sw, sh, ew, eh = roi * scale - offset
            rw, rh = ew - sw, eh - sh
            if not half_pixel:
                rw, rh = max(rw, 1.0), max(rh, 1.0)
            bh, bw = rh / ph_n, rw / pw_n
            gh = ratio if ratio > 0 else int(np.ceil(rh / ph_n))
            gw = ratio if ratio > 0 else int(np.ceil(rw / pw_n))
            if gh <= 0 or gw <= 0:
                continue
            yl, yh, wyl, wyh = _axis_samples(sh, bh, ph_n, gh, height)   # (PH, GH)
            xl, xh, wxl, wxh = _axis_samples(sw, bw, pw_n, gw, width)    # (PW, GW)
            img = xf[bidx[r]]                                            # (C, H, W)
            # four bilinear corners as (C, PH, GH, PW, GW) weighted samples
            terms = [(wy_[:, :, None, None] * wx_[None, None]) *
                     img[:, yi[:, :, None, None], xi[None, None]]
                     for yi, wy_ in ((yl, wyl), (yh, wyh))
                     for xi, wx_ in ((xl, wxl), (xh, wxh))]
            if mode == "avg":
                out[r] = sum(terms).sum(axis=(2, 4)) / max(gh * gw, 1)
            else:
                out[r] = np.maximum.reduce(terms).max(axis=(2, 4))
        return round_to(out, x.dtype)


KERNELS: list[CpuKernel] = [
    NonMaxSuppression("NonMaxSuppression", since=10),
    RoiAlign("RoiAlign", since=10),
]
