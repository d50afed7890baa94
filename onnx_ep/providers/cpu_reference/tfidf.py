"""TfIdfVectorizer: n-gram (with skips) counts against a pool, as TF, IDF or TF-IDF.

Counting is integer and exact; the output is float32 counts times float32 weights: EXACT.
Loops run over gram lengths and skip distances (attribute-sized); every window of the
input is matched against the pool at once.
"""

from __future__ import annotations

import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel


class TfIdfVectorizer(CpuKernel):
    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        node = ctx.node
        mode = node.attr("mode")
        if mode not in ("TF", "IDF", "TFIDF"):
            raise self.fail(ctx, f"mode must be TF, IDF or TFIDF, got {mode!r}")
        lo, hi = int(node.attr("min_gram_length")), int(node.attr("max_gram_length"))
        max_skip = int(node.attr("max_skip_count"))
        counts_attr = list(node.attr("ngram_counts"))
        indexes = np.asarray(node.attr("ngram_indexes"), dtype=np.int64)
        pool_i, pool_s = node.attr("pool_int64s"), node.attr("pool_strings")
        pool = (np.asarray(pool_i, dtype=np.int64) if pool_i is not None
                else np.asarray(pool_s, dtype=object))
        if not 1 <= lo <= hi or max_skip < 0 or len(counts_attr) < hi:
            raise self.fail(ctx, f"need 1 <= min_gram_length <= max_gram_length <= "
                                 f"len(ngram_counts) and max_skip_count >= 0; got {lo}, {hi}, "
                                 f"{len(counts_attr)}, {max_skip}")
        if x.ndim not in (1, 2):
            raise self.fail(ctx, f"input must be [C] or [N, C], got shape {x.shape}")
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        if pool.dtype == object:
            rows = rows.astype(object)
        width = int(indexes.max()) + 1 if indexes.size else 0
        out = np.zeros((rows.shape[0], width), dtype=np.float32)
        bounds = counts_attr + [pool.size]
        gram_base = 0          # index into ngram_indexes of the first n-gram of length n
        for n in range(1, hi + 1):
            start, stop = bounds[n - 1], bounds[n]
            grams = pool[start:stop].reshape(-1, n)
            if lo <= n and grams.size:
                idx = indexes[gram_base:gram_base + len(grams)]
                # unigrams have no gaps: count them once whatever max_skip_count says
                for skip in range(max_skip + 1 if n > 1 else 1):
                    span = (n - 1) * (skip + 1) + 1
                    if span > rows.shape[1]:
                        break
                    starts = np.arange(rows.shape[1] - span + 1)
                    cols = starts[:, None] + np.arange(n)[None, :] * (skip + 1)
                    windows = rows[:, cols]                       # (N, starts, n)
                    hits = (windows[:, :, None, :] == grams[None, None]).all(-1)
                    np.add.at(out, (slice(None), idx), hits.sum(axis=1).astype(np.float32))
            gram_base += len(grams)
        weights = node.attr("weights")
        w = (np.ones(width, dtype=np.float32) if weights is None
             else np.asarray(weights, dtype=np.float32))
        if mode == "IDF":
            out = (out > 0).astype(np.float32) * w
        elif mode == "TFIDF":
            out = out * w
        return out.reshape(-1) if x.ndim == 1 else out


KERNELS: list[CpuKernel] = [TfIdfVectorizer("TfIdfVectorizer", since=9)]
