"""ai.onnx.ml operators: ArrayFeatureExtractor, Binarizer, LabelEncoder, TreeEnsemble.

Numerics: ArrayFeatureExtractor, Binarizer and LabelEncoder move or compare values and are
EXACT. TreeEnsemble compares features with thresholds in the input dtype (exact), sums
leaf weights in float64 and rounds once to the input dtype; post transforms are computed
in float64 and rounded once. onnxruntime sums in the input dtype, hence a tolerance.

Where the spec is silent we follow onnxruntime: ArrayFeatureExtractor of a 1-D input
returns ``[1, k]`` and rejects indices outside ``[0, last_dim)``; TreeEnsemble's MIN/MAX
leave a target no leaf contributed to at 0; PROBIT uses the same erfinv approximation
(Winitzki, a = 0.147) as onnxruntime and onnx's reference. Where onnxruntime 1.32
departs from the spec we follow the spec: post_transform 1 is SOFTMAX and 2 LOGISTIC
(onnxruntime swaps them), a repeated LabelEncoder key takes its last value (onnxruntime
its first), BRANCH_MEMBER tests exact equality (onnxruntime truncates some features).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, Parity
from onnx_ep.providers.cpu_reference.base import CpuKernel

ML = "ai.onnx.ml"


def _is_string(a: np.ndarray) -> bool:
    return a.dtype.kind in "OUS"


# ---------------------------------------------------------------- ArrayFeatureExtractor

class ArrayFeatureExtractor(CpuKernel):
    """Gather along the last axis with all of ``Y`` (flattened) as indices."""

    def run(self, ctx: ExecutionContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if x.ndim == 0:
            raise self.fail(ctx, "input X must have rank >= 1, got a scalar")
        if y.dtype != np.int64:
            raise self.fail(ctx, f"indices Y must be int64, got {y.dtype}")
        index = y.reshape(-1)
        last = x.shape[-1]
        bad = (index < 0) | (index >= last)
        if bad.any():
            raise self.fail(ctx, f"index {int(index[bad][0])} in Y is out of range: "
                                 f"expected 0 <= index < {last} (negative indices are invalid)")
        out = np.take(x, index, axis=-1)
        # a vector is a single row, as onnxruntime does
        return out.reshape(1, -1) if x.ndim == 1 else out


# ---------------------------------------------------------------- Binarizer

class Binarizer(CpuKernel):
    """``1`` where ``x > threshold`` else ``0`` (NaN gives 0), in the input dtype."""

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        t = float(ctx.node.attr("threshold", 0.0))
        if x.dtype.kind == "f":
            above = x > np.asarray(t, dtype=x.dtype)
        elif x.dtype.kind in "iu":
            # exact for any int64: x > t  <=>  x > floor(t); no float64 rounding of x
            if np.isnan(t):
                above = np.zeros(x.shape, dtype=bool)
            else:
                info = np.iinfo(x.dtype)
                f = np.floor(t)
                if f >= info.max:
                    above = np.zeros(x.shape, dtype=bool)
                elif f < info.min:
                    above = np.ones(x.shape, dtype=bool)
                else:
                    above = x > x.dtype.type(int(f))
        else:
            raise self.fail(ctx, f"input must be float, double, int32 or int64, got {x.dtype}")
        return above.astype(x.dtype)


# ---------------------------------------------------------------- LabelEncoder

def _lookup(x: np.ndarray, keys: np.ndarray, values: np.ndarray, default: Any) -> np.ndarray:
    """Map ``x`` through ``keys -> values`` (last duplicate key wins, NaN key matches NaN)."""
    out = np.full(x.shape, default, dtype=values.dtype)
    if keys.size == 0 or x.size == 0:
        return out
    if _is_string(keys):
        keys, x = keys.astype(str), x.astype(str)
    # unique of the reversed keys keeps each key's last occurrence
    uniq, first = np.unique(keys[::-1], return_index=True)
    uvals = values[::-1][first]
    pos = np.minimum(np.searchsorted(uniq, x), uniq.size - 1)
    found = uniq[pos]
    hit = found == x
    if x.dtype.kind == "f":
        hit |= np.isnan(x) & np.isnan(found)
    out[hit] = uvals[pos[hit]]
    return out


_LIST_KEYS = {"keys_strings": object, "keys_int64s": np.int64, "keys_floats": np.float32}
_LIST_VALUES = {"values_strings": (object, "default_string", "_Unused"),
                "values_int64s": (np.int64, "default_int64", -1),
                "values_floats": (np.float32, "default_float", -0.0)}


class LabelEncoder(CpuKernel):
    """Opset 1: strings <-> indices of ``classes_strings``; opset 2+: ``keys_*`` -> ``values_*``."""

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        if ctx.node.opset < 2:
            return self._classes(ctx, x)
        node = ctx.node
        kname = self._one_of(ctx, [*_LIST_KEYS, "keys_tensor"])
        vname = self._one_of(ctx, [*_LIST_VALUES, "values_tensor"])
        if kname == "keys_tensor":
            keys = np.asarray(node.attr(kname)).reshape(-1)
        else:
            keys = np.asarray(node.attr(kname), dtype=_LIST_KEYS[kname])
        if vname == "values_tensor":
            values = np.asarray(node.attr(vname)).reshape(-1)
            default = ("_Unused" if _is_string(values)
                       else -1 if values.dtype.kind in "iu" else -0.0)
        else:
            dtype, dname, fallback = _LIST_VALUES[vname]
            values = np.asarray(node.attr(vname), dtype=dtype)
            default = node.attr(dname, fallback)
        if keys.size != values.size:
            raise self.fail(ctx, f"{kname} has {keys.size} entries but {vname} has "
                                 f"{values.size}; they must have the same length")
        if _is_string(keys) != _is_string(x) or (
                not _is_string(x) and keys.dtype != x.dtype):
            raise self.fail(ctx, f"input dtype {x.dtype} does not match {kname} dtype "
                                 f"{keys.dtype}; they must be identical")
        dt = node.attr("default_tensor")
        if dt is not None:
            dt = np.asarray(dt)
            if dt.size != 1 or _is_string(dt) != _is_string(values):
                raise self.fail(ctx, f"default_tensor must hold one value of the values "
                                     f"type ({values.dtype}), got {dt.dtype} of shape {dt.shape}")
            default = dt.reshape(-1)[0]
        if _is_string(values):
            values = values.astype(object)
            default = str(default)
        return _lookup(x, keys, values, default)

    def _one_of(self, ctx: ExecutionContext, names: list[str]) -> str:
        given = [n for n in names if ctx.node.attr(n) is not None]
        if len(given) != 1:
            raise self.fail(ctx, f"exactly one of {', '.join(names)} must be set, "
                                 f"got {given or 'none'}")
        return given[0]

    def _classes(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        classes = np.asarray(ctx.node.attr("classes_strings", []), dtype=object)
        if _is_string(x):
            idx = np.arange(classes.size, dtype=np.int64)
            return _lookup(x, classes, idx, int(ctx.node.attr("default_int64", -1)))
        if x.dtype != np.int64:
            raise self.fail(ctx, f"opset-1 input must be string or int64, got {x.dtype}")
        ok = (x >= 0) & (x < classes.size)
        out = np.full(x.shape, ctx.node.attr("default_string", "_Unused"), dtype=object)
        out[ok] = classes[x[ok]]
        return out


# ---------------------------------------------------------------- TreeEnsemble

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AVERAGE, SUM, MIN, MAX = range(4)
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)


def _post_transform(scores: np.ndarray, kind: int) -> np.ndarray:
    """Post transforms of onnx's ml spec on float64 ``[N, targets]`` scores."""
    if kind == SOFTMAX:
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if kind == LOGISTIC:
        # stable on both sides: exp of a non-positive number only
        e = np.exp(-np.abs(scores))
        return np.where(scores >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    if kind == SOFTMAX_ZERO:
        # exact zeros stay (scaled) zeros: they mean "no score", not score 0
        vmax = scores.max(axis=1, keepdims=True)
        nonzero = np.abs(scores) > 1e-7
        e = np.where(nonzero, np.exp(scores - vmax), scores * np.exp(-vmax))
        s = e.sum(axis=1, keepdims=True)
        return np.where(s == 0, 0.5, e / np.where(s == 0, 1.0, s))
    if kind == PROBIT:
        with np.errstate(invalid="ignore", divide="ignore"):
            v = 2.0 * scores - 1.0
            sgn = np.where(v < 0, -1.0, 1.0)
            log = np.log((1.0 - v) * (1.0 + v))
            a = 2.0 / (np.pi * 0.147) + 0.5 * log
            return np.sqrt(2.0) * sgn * np.sqrt(-a + np.sqrt(a * a - log / 0.147))
    return scores


_NODE_ATTRS = {"modes": "nodes_modes", "splits": "nodes_splits",
               "true_id": "nodes_truenodeids", "false_id": "nodes_falsenodeids",
               "true_leaf": "nodes_trueleafs", "false_leaf": "nodes_falseleafs",
               "mtt": "nodes_missing_value_tracks_true"}


class TreeEnsemble(CpuKernel):
    """Ensemble of decision trees (ai.onnx.ml opset 5): ``[N, F]`` -> ``[N, n_targets]``.

    Every (sample, tree) pair walks its tree at once, one level per step, so the loop
    runs over depth, never over samples.
    """

    parity = Parity.tolerance(rtol=1e-6, atol=1e-6)

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        if x.dtype.kind != "f":
            raise self.fail(ctx, f"X must be float16, float or double, got {x.dtype}")
        if x.ndim != 2:
            raise self.fail(ctx, f"X must be [N, F], got shape {x.shape}")
        t = self._tables(ctx, x)
        n, n_trees = x.shape[0], t["roots"].size
        leaf = self._walk(ctx, x, t)                                 # (N, trees)
        weights = t["weights"][leaf]
        targets = t["targetids"][leaf]
        n_targets = t["n_targets"]
        flat = (np.arange(n)[:, None] * n_targets + targets).reshape(-1)
        agg = int(ctx.node.attr("aggregate_function", SUM))
        size = n * n_targets
        if agg in (SUM, AVERAGE):
            scores = np.bincount(flat, weights=weights.reshape(-1), minlength=size)
            if agg == AVERAGE and n_trees:
                scores = scores / n_trees
        elif agg in (MIN, MAX):
            fill, ufunc = (np.inf, np.minimum) if agg == MIN else (-np.inf, np.maximum)
            scores = np.full(size, fill)
            ufunc.at(scores, flat, weights.reshape(-1))
            scores[np.bincount(flat, minlength=size) == 0] = 0.0
        else:
            raise self.fail(ctx, f"aggregate_function must be 0 (AVERAGE), 1 (SUM), "
                                 f"2 (MIN) or 3 (MAX), got {agg}")
        post = int(ctx.node.attr("post_transform", NONE))
        if post not in range(5):
            raise self.fail(ctx, f"post_transform must be in 0..4 (NONE, SOFTMAX, LOGISTIC, "
                                 f"SOFTMAX_ZERO, PROBIT), got {post}")
        scores = _post_transform(scores.reshape(n, n_targets), post)
        return scores.astype(x.dtype)

    def _tables(self, ctx: ExecutionContext, x: np.ndarray) -> dict[str, Any]:
        """Read and validate the node/leaf attributes into numpy arrays."""
        node = ctx.node

        def ints(name: str, default: Any = None) -> np.ndarray:
            v = node.attr(name, default)
            if v is None:
                raise self.fail(ctx, f"attribute {name!r} is required")
            return np.asarray(v, dtype=np.int64).reshape(-1)

        def floats(name: str) -> np.ndarray:
            v = node.attr(name)
            if v is None:
                raise self.fail(ctx, f"attribute {name!r} is required")
            v = np.asarray(v).reshape(-1)
            if v.dtype != x.dtype:
                raise self.fail(ctx, f"attribute {name!r} is {v.dtype} but X is {x.dtype}; "
                                     f"they must have the same type")
            return v

        t: dict[str, Any] = {
            "feature": ints("nodes_featureids"), "modes": ints("nodes_modes"),
            "splits": floats("nodes_splits"),
            "true_id": ints("nodes_truenodeids"), "false_id": ints("nodes_falsenodeids"),
            "true_leaf": ints("nodes_trueleafs").astype(bool),
            "false_leaf": ints("nodes_falseleafs").astype(bool),
            "targetids": ints("leaf_targetids"), "weights": floats("leaf_weights"),
            "roots": ints("tree_roots"), "n_targets": int(node.attr("n_targets", 0) or 0),
        }
        m = t["feature"].size
        mtt = node.attr("nodes_missing_value_tracks_true")
        t["mtt"] = (np.zeros(m, bool) if mtt is None
                    else np.asarray(mtt, dtype=np.int64).reshape(-1).astype(bool))
        for k, name in _NODE_ATTRS.items():
            if t[k].size != m:
                raise self.fail(ctx, f"{name} has {t[k].size} entries, expected {m} "
                                     f"(the length of nodes_featureids)")
        n_leaves = t["weights"].size
        if t["targetids"].size != n_leaves:
            raise self.fail(ctx, f"leaf_targetids has {t['targetids'].size} entries but "
                                 f"leaf_weights has {n_leaves}")
        checks = [
            ("nodes_featureids", t["feature"], x.shape[1]),
            ("tree_roots", t["roots"], m),
            ("leaf_targetids", t["targetids"], t["n_targets"]),
            ("nodes_truenodeids", t["true_id"][~t["true_leaf"]], m),
            ("nodes_falsenodeids", t["false_id"][~t["false_leaf"]], m),
            ("nodes_truenodeids (leaf)", t["true_id"][t["true_leaf"]], n_leaves),
            ("nodes_falsenodeids (leaf)", t["false_id"][t["false_leaf"]], n_leaves),
        ]
        for name, ids, bound in checks:
            bad = (ids < 0) | (ids >= bound)
            if bad.any():
                raise self.fail(ctx, f"{name} holds {int(ids[bad][0])}, expected an index "
                                     f"in [0, {bound})")
        if ((t["modes"] < LEQ) | (t["modes"] > MEMBER)).any():
            raise self.fail(ctx, f"nodes_modes must be in 0..6, got {t['modes'].tolist()}")
        t["members"] = self._member_sets(ctx, t["modes"], x.dtype)
        t["splits"] = t["splits"].astype(x.dtype)
        return t

    def _member_sets(self, ctx: ExecutionContext, modes: np.ndarray,
                     dtype: np.dtype) -> np.ndarray:
        """``[nodes, widest set]`` NaN-padded members of each BRANCH_MEMBER node."""
        is_member = modes == MEMBER
        raw = ctx.node.attr("membership_values")
        values = (np.zeros(0, dtype) if raw is None
                  else np.asarray(raw).reshape(-1).astype(dtype))
        gaps = np.isnan(values)
        if int(gaps.sum()) != int(is_member.sum()):
            raise self.fail(ctx, f"membership_values holds {int(gaps.sum())} NaN-terminated "
                                 f"sets but {int(is_member.sum())} nodes are BRANCH_MEMBER; "
                                 f"give one set per BRANCH_MEMBER node, each ended by NaN")
        set_of = np.cumsum(gaps) - gaps                  # which set each value belongs to
        keep = ~gaps
        sizes = np.bincount(set_of[keep], minlength=int(is_member.sum()))
        width = int(sizes.max()) if sizes.size else 0
        table = np.full((modes.size, width), np.nan, dtype=dtype)
        rows = np.flatnonzero(is_member)[set_of[keep]]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        cols = np.arange(int(keep.sum())) - starts[set_of[keep]]
        table[rows, cols] = values[keep]
        return table

    def _walk(self, ctx: ExecutionContext, x: np.ndarray, t: dict[str, Any]) -> np.ndarray:
        """Leaf index reached by every (sample, tree) pair, ``[N, trees]``."""
        n, n_trees, m = x.shape[0], t["roots"].size, t["feature"].size
        leaf = np.empty(n * n_trees, dtype=np.int64)
        pos = np.arange(n * n_trees)                     # pairs still on interior nodes
        cur = np.tile(t["roots"], n)
        for _ in range(m + 1):
            if pos.size == 0:
                return leaf.reshape(n, n_trees)
            v = x[pos // n_trees, t["feature"][cur]]
            s = t["splits"][cur]
            mode = t["modes"][cur]
            member = (v[:, None] == t["members"][cur]).any(axis=1)
            with np.errstate(invalid="ignore"):
                go = np.select(
                    [mode == LEQ, mode == LT, mode == GTE, mode == GT, mode == EQ,
                     mode == NEQ],
                    [v <= s, v < s, v >= s, v > s, v == s, v != s], default=member)
            go |= t["mtt"][cur] & np.isnan(v)
            nxt = np.where(go, t["true_id"][cur], t["false_id"][cur])
            done = np.where(go, t["true_leaf"][cur], t["false_leaf"][cur])
            leaf[pos[done]] = nxt[done]
            pos, cur = pos[~done], nxt[~done]
        raise self.fail(ctx, f"a tree did not reach a leaf within {m} steps; "
                             f"nodes_truenodeids/nodes_falsenodeids contain a cycle")


KERNELS: list[CpuKernel] = [
    ArrayFeatureExtractor("ArrayFeatureExtractor", domain=ML, since=1),
    Binarizer("Binarizer", domain=ML, since=1),
    LabelEncoder("LabelEncoder", domain=ML, since=1),
    TreeEnsemble("TreeEnsemble", domain=ML, since=5),
]
