"""String ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch.

String tensors are numpy ``object`` arrays of Python ``str``. Case changes and
concatenation use numpy's vectorized ``np.strings`` routines; splitting and regular
expressions have no vectorized numpy form, so they run per element (strings are not
numeric tensor data and have no other route). All ops are EXACT.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, FnKernel


def _text(ctx: ExecutionContext, x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "OUS":
        raise CpuKernel.fail(ctx, f"expected a string tensor, got dtype {a.dtype}")
    if a.dtype.kind == "S":
        a = np.char.decode(a, "utf-8")
    return a.astype(np.str_) if a.size else a.astype("U1")


def _objects(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(object)


def _string_normalizer(ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
    node = ctx.node
    action = node.attr("case_change_action", "NONE")
    if action not in ("NONE", "LOWER", "UPPER"):
        raise CpuKernel.fail(ctx, f"case_change_action must be NONE, LOWER or UPPER, got "
                                  f"{action!r}")
    a = _text(ctx, x)
    if not (a.ndim == 1 or (a.ndim == 2 and a.shape[0] == 1)):
        raise CpuKernel.fail(ctx, f"input must be [C] or [1, C], got shape {a.shape}")
    flat = a.reshape(-1)
    stops = np.asarray(list(node.attr("stopwords") or []), dtype=np.str_)
    if stops.size:
        if int(node.attr("is_case_sensitive", 0)):
            keep = ~np.isin(flat, stops)
        else:
            keep = ~np.isin(np.strings.lower(flat), np.strings.lower(stops))
        flat = flat[keep]
    if action == "LOWER":
        flat = np.strings.lower(flat)
    elif action == "UPPER":
        flat = np.strings.upper(flat)
    if flat.size == 0:
        flat = np.array([""], dtype=np.str_)
    return _objects(flat.reshape((1, -1) if a.ndim == 2 else (-1,)))


def _string_concat(ctx: ExecutionContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    a, b = _text(ctx, x), _text(ctx, y)
    return _objects(np.asarray(np.strings.add(a, b)))


class StringSplit(CpuKernel):
    def run(self, ctx: ExecutionContext, x: np.ndarray) -> Any:
        node = ctx.node
        delim = node.attr("delimiter") or None         # "" or absent: split on whitespace runs
        maxsplit = node.attr("maxsplit")
        limit = -1 if maxsplit is None else int(maxsplit)
        a = _text(ctx, x)
        parts = [s.split(delim, limit) for s in a.reshape(-1).tolist()]
        counts = np.array([len(p) for p in parts], dtype=np.int64)
        width = int(counts.max()) if counts.size else 0
        out = np.full((len(parts), width), "", dtype=object)
        for i, p in enumerate(parts):
            out[i, :len(p)] = p
        return out.reshape(a.shape + (width,)), counts.reshape(a.shape)


class RegexFullMatch(CpuKernel):
    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        pattern = ctx.node.attr("pattern")
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise self.fail(ctx, f"invalid pattern {pattern!r}: {exc}") from exc
        a = _text(ctx, x)
        hits = [rx.fullmatch(s) is not None for s in a.reshape(-1).tolist()]
        return np.array(hits, dtype=bool).reshape(a.shape)


KERNELS: list[CpuKernel] = [
    FnKernel("StringNormalizer", _string_normalizer, since=10),
    FnKernel("StringConcat", _string_concat, since=20),
    StringSplit("StringSplit", since=20),
    RegexFullMatch("RegexFullMatch", since=20),
]
