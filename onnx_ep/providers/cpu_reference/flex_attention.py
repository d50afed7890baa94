"""FlexAttention (ai.onnx.preview, version 1): attention with score_mod / prob_mod subgraphs.

The spec's computation, step by step::

    Scores = (Q @ K^T) * scale          # T1; Q and K each pre-scaled by sqrt(scale)
    Scores = score_mod(Scores)          # in the softmax dtype, if score_mod is given
    Probs  = Softmax(Scores, axis=-1)
    Probs  = prob_mod(Probs)            # if prob_mod is given
    Y      = Probs @ V                  # in the softmax dtype, rounded to T1

Numerics: as the ONNX reference, Q and K are pre-scaled by ``sqrt(scale)`` (rounded to
the input dtype) and Q @ K^T is rounded to the input dtype before it is cast to the
softmax dtype (``softmax_precision``; default float32, float64 for float64 inputs).
Matmuls accumulate float16/bfloat16 in float32 (one rounding per result, more accurate
than the reference's half-precision matmul); a float16/bfloat16 softmax runs in float32
and rounds once. A row whose scores are all -inf (fully masked by score_mod) yields NaN
probabilities, exactly as ``Softmax`` does. Parity: tolerance (summation order is not
specified).

The scores matrix ``(batch, q_heads, q_len, kv_len)`` in the softmax dtype lives in the
node's workspace; :func:`scores_spec` is the one sizing formula for planning and execution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from onnx_ep.core.graph import Graph
from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    TensorSpec,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.providers.cpu_reference.base import CpuKernel
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast

DOMAIN = "ai.onnx.preview"

#: softmax_precision (a TensorProto data type) -> numpy dtype of scores and probabilities
_PRECISION: dict[int, np.dtype] = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    onnx.TensorProto.DOUBLE: np.dtype(np.float64),
}
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def softmax_dtype(q_dtype: Any, softmax_precision: int | None) -> np.dtype | None:
    """The dtype of scores and probabilities; ``None`` for an unknown softmax_precision."""
    if softmax_precision is not None:
        return _PRECISION.get(int(softmax_precision))
    return _F64 if np.dtype(q_dtype) == _F64 else _F32


def _accumulator(dtype: np.dtype) -> np.dtype:
    """Matmul accumulator: float64 for float64, float32 for everything narrower."""
    return _F64 if dtype == _F64 else _F32


def scores_spec(q_shape: Sequence[Any], k_shape: Sequence[Any], q_dtype: Any,
                attrs: Any) -> TensorSpec | None:
    """dtype and shape of the attention-scores scratch: THE workspace formula.

    ``None`` when softmax_precision names no supported type (the kernel reports it).
    """
    dt = softmax_dtype(q_dtype, attrs.get("softmax_precision"))
    if dt is None:
        return None
    return TensorSpec(dt, (q_shape[0], q_shape[1], q_shape[2], k_shape[2]))


class FlexAttention(CpuKernel):
    parity = Parity.tolerance(1e-5, 1e-6)

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        q = meta.inputs[0] if meta.inputs else None
        k = meta.inputs[1] if len(meta.inputs) > 1 else None
        if q is None or k is None or len(q.shape) != 4 or len(k.shape) != 4:
            return WorkspaceRequirement.NONE
        spec = scores_spec(q.shape, k.shape, q.dtype, meta.attrs)
        if spec is None or not spec.is_static:
            return WorkspaceRequirement.NONE
        return WorkspaceRequirement(spec.nbytes)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        outputs[0] = self._attention(ctx, *inputs, workspace=workspace)

    def run(self, ctx: ExecutionContext, q: np.ndarray, k: np.ndarray,
            v: np.ndarray) -> np.ndarray:
        return self._attention(ctx, q, k, v, workspace=None)

    # -----------------------------------------------------------------------------
    def _check(self, ctx: ExecutionContext, q: np.ndarray, k: np.ndarray,
               v: np.ndarray) -> None:
        if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
            raise self.fail(ctx, f"Q, K and V must be rank-4 (batch, heads, seq, size), got "
                                 f"shapes {q.shape}, {k.shape}, {v.shape}")
        if not (q.dtype == k.dtype == v.dtype):
            raise self.fail(ctx, f"Q, K and V must share one dtype, got {q.dtype}, "
                                 f"{k.dtype}, {v.dtype}")
        batch, hq, _, head = q.shape
        if k.shape[0] != batch or v.shape[0] != batch:
            raise self.fail(ctx, f"Q, K and V must share the batch size, got {q.shape}, "
                                 f"{k.shape}, {v.shape}")
        if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
            raise self.fail(ctx, f"K and V must share heads and sequence length, got "
                                 f"K {k.shape}, V {v.shape}")
        if k.shape[3] != head:
            raise self.fail(ctx, f"Q and K must share the head size, got Q {q.shape}, "
                                 f"K {k.shape}")
        hkv = k.shape[1]
        if hkv == 0 or hq % hkv:
            raise self.fail(ctx, f"q_num_heads {hq} must be a multiple of kv_num_heads {hkv}")

    def _modify(self, ctx: ExecutionContext, name: str, x: np.ndarray) -> np.ndarray:
        """Run the ``name`` subgraph on ``x``; its one output must keep shape and dtype."""
        graph: Graph | None = ctx.node.attr(name)
        if graph is None:
            return x
        if len(graph.inputs) != 1 or len(graph.outputs) != 1:
            raise self.fail(ctx, f"{name} must have exactly 1 input and 1 output, got "
                                 f"{len(graph.inputs)} inputs and {len(graph.outputs)} outputs")
        if ctx.run_subgraph is None:
            raise self.fail(ctx, "the executor gave this node no run_subgraph callback")
        outs = list(ctx.run_subgraph(graph, [x]))
        y = np.asarray(outs[0]) if len(outs) == 1 else None
        if y is None or y.shape != x.shape or y.dtype != x.dtype:
            got = (f"{len(outs)} outputs" if y is None
                   else f"shape {y.shape} dtype {y.dtype}")
            raise self.fail(ctx, f"{name} must return one tensor of shape {x.shape} and "
                                 f"dtype {x.dtype} (softmax_precision), got {got}")
        return y

    def _attention(self, ctx: ExecutionContext, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   *, workspace: WorkspaceView | None) -> np.ndarray:
        self._check(ctx, q, k, v)
        node = ctx.node
        spec = scores_spec(q.shape, k.shape, q.dtype, node.attrs)
        if spec is None:
            names = ", ".join(f"{onnx.TensorProto.DataType.Name(t)} ({t})" for t in _PRECISION)
            raise self.fail(ctx, f"softmax_precision {node.attr('softmax_precision')} is not "
                                 f"supported; expected one of {names}")
        ct = spec.dtype
        batch, hq, q_len, head = q.shape
        hkv, kv_len = k.shape[1], k.shape[2]
        rep = hq // hkv

        scale = node.attr("scale")
        scale = 1.0 / np.sqrt(head) if scale is None else float(scale)
        acc = _accumulator(q.dtype)
        # the products of two narrow floats are exact in float32: one rounding, as in T1
        # (upcast gives the accumulator dtype: float64 for float64, float32 otherwise)
        root = upcast(round_to(np.sqrt(scale), q.dtype)).astype(acc)
        qs = upcast(round_to(upcast(q) * root, q.dtype))
        ks = upcast(round_to(upcast(k) * root, q.dtype))
        # Grouped-query attention: q head h reads kv head h // rep, done by broadcasting.
        qs = qs.reshape(batch, hkv, rep, q_len, head)
        ks = ks.swapaxes(2, 3).reshape(batch, hkv, 1, head, kv_len)

        if workspace is not None:
            scores = workspace.array(ct, spec.shape)
        else:
            scores = np.empty(spec.shape, dtype=ct)
        grouped = (batch, hkv, rep, q_len, kv_len)
        if acc == q.dtype == ct:
            np.matmul(qs, ks, out=scores.reshape(grouped))
        else:
            # Q @ K^T is a T1 value: round to the input dtype, then to the softmax dtype
            t1 = upcast(round_to(np.matmul(qs, ks), q.dtype))
            scores[...] = round_to(t1, ct).reshape(spec.shape)

        modded = self._modify(ctx, "score_mod", scores)
        if modded is not scores:
            np.copyto(scores, modded)
        self._softmax(scores)
        probs = self._modify(ctx, "prob_mod", scores)

        pacc = _accumulator(ct)
        vs = upcast(round_to(upcast(v), ct))
        y = np.matmul(upcast(probs).astype(pacc).reshape(grouped),
                      vs.astype(pacc).reshape(batch, hkv, 1, kv_len, v.shape[3]))
        return round_to(upcast(round_to(y, ct)), v.dtype).reshape(batch, hq, q_len, v.shape[3])

    @staticmethod
    def _softmax(scores: np.ndarray) -> None:
        """Softmax over the last axis, in place; float16/bfloat16 go through float32."""
        if scores.shape[-1] == 0:
            return
        wide = scores.dtype in (_F32, _F64)
        x = scores if wide else upcast(scores)
        # an all -inf row gives -inf - -inf = NaN, as Softmax does
        with np.errstate(invalid="ignore"):
            np.subtract(x, x.max(axis=-1, keepdims=True), out=x)
        np.exp(x, out=x)
        np.divide(x, x.sum(axis=-1, keepdims=True), out=x)
        if not wide:
            scores[...] = round_to(x, scores.dtype)


KERNELS: list[CpuKernel] = [
    FlexAttention("FlexAttention", since=1, domain=DOMAIN),
]
