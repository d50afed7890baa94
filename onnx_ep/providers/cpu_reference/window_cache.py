"""onnxruntime's window-sized KV cache (GroupQueryAttention ``sliding_window_cache=1``): which
rows a cache of C rows holds after t positions, and one step over it (the kernel, its checks
and its attention are in :mod:`.contrib_attention`).

The cache never wraps: rows ``[0, L(t))`` hold the newest ``L(t)`` positions in order and
later rows are unspecified (here: the past's bytes, as onnxruntime's in-place compaction
leaves them). ``L(t) = t`` up to C; beyond it the cache reclaims ``G = C - W + 1`` rows at
once, so ``L(t) = t - G * ceil((t - C) / G)``, between W and C.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def resident_rows(t: int, capacity: int, window: int) -> int:
    """Rows a cache of ``capacity`` rows and window ``window`` holds after ``t`` positions."""
    if t <= capacity:
        return t
    reclaim = capacity - window + 1
    return t - reclaim * -(-(t - capacity) // reclaim)


def step(q: np.ndarray, k_new: np.ndarray, v_new: np.ndarray, past_k: np.ndarray,
         past_v: np.ndarray, pasts: np.ndarray, totals: np.ndarray, window: int, causal: bool,
         bias: np.ndarray | None,
         attend: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any], np.ndarray],
         dtype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step over the cache: float32 attention output ``(B, Hq, S, Dv)`` and the presents.

    Entry b has ``pasts[b]`` positions before the step (rows ``[0, L(pasts[b]))`` of the
    past) and ``totals[b]`` after it. Its queries (absolute positions ``pasts[b] + s``)
    attend the resident past rows and the S new keys, causal and at most ``window - 1``
    positions back (or, not causal, every key before ``totals[b]``) through ``attend(q,
    keys, values, allowed, bias)``; ``bias`` has absolute columns. The presents are the past
    with rows ``[0, L(totals[b]))`` replaced by the newest positions."""
    batch, hq, q_len, _ = q.shape
    cap = past_k.shape[2]
    present_k, present_v = np.array(past_k, dtype), np.array(past_v, dtype)
    y = np.zeros((batch, hq, q_len, v_new.shape[3]), np.float32)
    for b in range(batch):
        p, t = int(pasts[b]), int(totals[b])
        kept = resident_rows(p, cap, window)
        keys = np.concatenate([past_k[b:b + 1, :, :kept], k_new[b:b + 1]], axis=2)
        vals = np.concatenate([past_v[b:b + 1, :, :kept], v_new[b:b + 1]], axis=2)
        first = p - kept                          # the absolute position of key 0
        j = first + np.arange(kept + q_len).reshape(1, -1)
        qpos = p + np.arange(q_len).reshape(-1, 1)
        allowed = (qpos - j < window) & ((j <= qpos) if causal else (j < t))
        b_bias = None if bias is None else bias[min(b, bias.shape[0] - 1):][:1, :, :, first:t]
        y[b:b + 1] = attend(q[b:b + 1], keys, vals, allowed[None, None], b_bias)
        rows = resident_rows(t, cap, window)
        present_k[b, :, :rows] = keys[0, :, kept + q_len - rows:]
        present_v[b, :, :rows] = vals[0, :, kept + q_len - rows:]
    return y, present_k, present_v
