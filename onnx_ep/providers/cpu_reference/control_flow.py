"""Control flow: If, Loop, Scan (opset 8 batched form and opset 9+ axes/directions form).

Bodies run through ``ctx.run_subgraph``; values pass through unchanged, so parity
is whatever the body's kernels promise (EXACT for the control flow itself).
Loops over iterations are inherently sequential (each step reads the last one's state).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_ep.core.graph import Graph
from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cpu_reference.base import CpuKernel, normalize_axis


def _run(kernel: CpuKernel, ctx: ExecutionContext, graph: Graph, feeds: list[Any]) -> list[Any]:
    if ctx.run_subgraph is None:
        raise kernel.fail(ctx, "the executor gave this control-flow node no run_subgraph callback")
    return list(ctx.run_subgraph(graph, feeds))


def _empty_scan_output(graph: Graph, index: int) -> np.ndarray:
    """The ``(0, ...)`` value of a scan output whose loop ran zero times (shape from its spec)."""
    v = graph.outputs[index]
    if v.spec is not None and v.spec.is_static:
        return np.zeros((0, *v.spec.shape), dtype=v.spec.dtype)
    dtype = v.spec.dtype if v.spec is not None else np.float32
    return np.zeros((0,), dtype=dtype)


class If(CpuKernel):
    def run(self, ctx: ExecutionContext, cond: np.ndarray) -> Any:
        if cond is None or np.asarray(cond).size != 1:
            raise self.fail(ctx, "cond must be a single-element bool tensor")
        branch = ctx.node.attr("then_branch" if bool(np.asarray(cond).reshape(-1)[0])
                               else "else_branch")
        outs = _run(self, ctx, branch, [])
        return tuple(outs)


class Loop(CpuKernel):
    def run(self, ctx: ExecutionContext, max_trip: Any, cond: Any, *carried: Any) -> Any:
        body: Graph = ctx.node.attr("body")
        n_carried = len(carried)
        n_scan = len(body.outputs) - 1 - n_carried
        if n_scan < 0:
            raise self.fail(ctx, f"body has {len(body.outputs)} outputs but the node carries "
                                 f"{n_carried} values (need 1 + carried + scan outputs)")
        trip = None if max_trip is None else int(np.asarray(max_trip).reshape(-1)[0])
        keep_going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
        state = list(carried)
        scans: list[list[Any]] = [[] for _ in range(n_scan)]
        cond_dtype = np.asarray(cond).dtype if cond is not None else np.dtype(bool)
        i = 0
        while keep_going and (trip is None or i < trip):
            outs = _run(self, ctx, body, [np.array(i, dtype=np.int64),
                                          np.array(keep_going, dtype=cond_dtype), *state])
            keep_going = bool(np.asarray(outs[0]).reshape(-1)[0])
            state = outs[1:1 + n_carried]
            for k in range(n_scan):
                scans[k].append(outs[1 + n_carried + k])
            i += 1
        results: list[Any] = list(state)
        for k in range(n_scan):
            if scans[k]:
                results.append(np.stack([np.asarray(x) for x in scans[k]]))
            else:
                results.append(_empty_scan_output(body, 1 + n_carried + k))
        return tuple(results)


def _scan_core(kernel: CpuKernel, ctx: ExecutionContext, body: Graph, state: list[Any],
               scan_inputs: list[np.ndarray], length: int, in_reverse: list[bool],
               n_outputs: int) -> tuple[list[Any], list[list[np.ndarray]]]:
    """Iterate ``body`` over axis 0 of each scan input; returns final state and per-step outputs."""
    n_state = len(state)
    steps: list[list[np.ndarray]] = [[] for _ in range(n_outputs)]
    for t in range(length):
        slices = [x[length - 1 - t] if rev else x[t] for x, rev in zip(scan_inputs, in_reverse)]
        outs = _run(kernel, ctx, body, [*state, *slices])
        state = outs[:n_state]
        for k in range(n_outputs):
            steps[k].append(np.asarray(outs[n_state + k]))
    return state, steps


class Scan(CpuKernel):
    def run(self, ctx: ExecutionContext, *inputs: Any) -> Any:
        if ctx.node.opset < 9:
            return self._run_v8(ctx, *inputs)
        node = ctx.node
        body: Graph = node.attr("body")
        n_scan_in = int(node.attr("num_scan_inputs"))
        n_state = len(inputs) - n_scan_in
        n_scan_out = len(body.outputs) - n_state
        in_axes = node.attr("scan_input_axes") or [0] * n_scan_in
        in_dirs = node.attr("scan_input_directions") or [0] * n_scan_in
        out_axes = node.attr("scan_output_axes") or [0] * n_scan_out
        out_dirs = node.attr("scan_output_directions") or [0] * n_scan_out
        state = list(inputs[:n_state])
        scan_inputs = []
        for x, ax in zip(inputs[n_state:], in_axes):
            x = np.asarray(x)
            scan_inputs.append(np.moveaxis(x, normalize_axis(ctx, ax, x.ndim), 0))
        lengths = {x.shape[0] for x in scan_inputs}
        if len(lengths) != 1:
            raise self.fail(ctx, f"scan inputs have different lengths {sorted(lengths)} along "
                                 f"their scan axes")
        length = lengths.pop()
        state, steps = _scan_core(self, ctx, body, state, scan_inputs, length,
                                  [bool(d) for d in in_dirs], n_scan_out)
        results = list(state)
        for k in range(n_scan_out):
            seq = steps[k][::-1] if out_dirs[k] else steps[k]
            if seq:
                y = np.stack(seq)
            else:
                y = _empty_scan_output(body, n_state + k)
            results.append(np.moveaxis(y, 0, normalize_axis(ctx, out_axes[k], y.ndim)))
        return tuple(results)

    def _run_v8(self, ctx: ExecutionContext, seq_lens: Any, *inputs: Any) -> Any:
        """Opset 8: axis 0 is a batch axis, axis 1 the sequence axis; per-batch lengths."""
        node = ctx.node
        body: Graph = node.attr("body")
        n_scan_in = int(node.attr("num_scan_inputs"))
        n_state = len(inputs) - n_scan_in
        n_scan_out = len(body.outputs) - n_state
        dirs = node.attr("directions") or [0] * n_scan_in
        states = [np.asarray(s) for s in inputs[:n_state]]
        scans = [np.asarray(x) for x in inputs[n_state:]]
        batch = (states or scans)[0].shape[0]
        max_len = scans[0].shape[1] if scans else 0
        lens = (np.full(batch, max_len, dtype=np.int64) if seq_lens is None
                else np.asarray(seq_lens).astype(np.int64).reshape(-1))
        final: list[list[np.ndarray]] = [[] for _ in range(n_state)]
        outs: list[list[np.ndarray]] = [[] for _ in range(n_scan_out)]
        for b in range(batch):
            n = int(lens[b])
            if not 0 <= n <= max_len:
                raise self.fail(ctx, f"sequence_lens[{b}] = {n} is outside [0, {max_len}]")
            st, steps = _scan_core(self, ctx, body, [s[b] for s in states],
                                   [x[b, :n] for x in scans], n, [bool(d) for d in dirs],
                                   n_scan_out)
            for k in range(n_state):
                final[k].append(np.asarray(st[k]))
            for k in range(n_scan_out):
                if steps[k]:
                    y = np.stack(steps[k])
                    pad = np.zeros((max_len - n, *y.shape[1:]), dtype=y.dtype)
                    outs[k].append(np.concatenate([y, pad]))
                else:
                    outs[k].append(_empty_scan_output(body, n_state + k))
        return tuple([np.stack(f) for f in final] + [np.stack(o) for o in outs])


KERNELS: list[CpuKernel] = [
    If("If", since=1),
    Loop("Loop", since=1),
    Scan("Scan", since=8),
]
