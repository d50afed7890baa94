"""Choosing the next token from logits: greedy (argmax) or sampling with temperature,
top-k and top-p, deterministic for a seed (docs/GENAI.md).

Sampling follows onnxruntime-genai's order: logits divided by the temperature, softmax,
the ``top_k`` most likely tokens kept (0: all), then the smallest prefix of them, most
likely first, whose probability reaches ``top_p`` (the most likely token is always kept);
the kept probabilities are renormalised and one token is drawn per row. The draws come from
one ``numpy.random.Generator`` per generator, so a seed fixes every token.
"""

from __future__ import annotations

import numpy as np


def greedy(logits: np.ndarray) -> np.ndarray:
    """``[batch, vocab]`` -> ``[batch]`` int64: the first maximum of each row (ties go to the
    lowest id, as ``argmax``)."""
    return np.argmax(logits, axis=-1).astype(np.int64)


def filtered_probs(row: np.ndarray, temperature: float, top_k: int,
                   top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """The candidate ids of one row of logits, most likely first, and their renormalised
    probabilities after temperature, top-k and top-p."""
    scaled = row.astype(np.float64) / float(temperature)
    order = np.argsort(-scaled, kind="stable")
    if 0 < top_k < order.size:
        order = order[:top_k]
    z = scaled[order]
    p = np.exp(z - z[0])
    p /= p.sum()
    if top_p < 1.0:
        cum = np.cumsum(p)
        keep = int(np.searchsorted(cum, top_p, side="left")) + 1   # reach top_p, at least 1
        order, p = order[:keep], p[:keep]
        p = p / p.sum()
    return order, p


def sample(logits: np.ndarray, rng: np.random.Generator, *, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """``[batch, vocab]`` -> ``[batch]`` int64 drawn from each row's filtered distribution."""
    out = np.empty(logits.shape[0], np.int64)
    for b, row in enumerate(logits):
        ids, p = filtered_probs(row, temperature, top_k, top_p)
        out[b] = ids[min(int(np.searchsorted(np.cumsum(p), rng.random(), side="right")),
                         ids.size - 1)]
    return out
