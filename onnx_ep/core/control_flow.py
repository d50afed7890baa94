"""``If``, ``Loop`` and ``Scan`` for any device provider: bodies run on the device.

The kernels here do no arithmetic of their own: they read what decides the control (an
``If``'s condition, a ``Loop``'s trip count and its body's condition) back to the host,
run the chosen body through ``ctx.run_subgraph`` (the executor runs it as a plan of its
own on the same device, :mod:`onnx_ep.core.subgraphs`) and copy the body's outputs into
their pre-bound buffers on the device. Values never go through the host.

What a device provider supplies is its :class:`~onnx_ep.core.provider.DeviceRuntime`
(``download``, ``copy``; ``copy_many`` when it has it) and, for ``Loop`` scan outputs and
``Scan``, device tensors with ``view(dtype, shape, offset_bytes)`` (a view of part of a
buffer). A provider registers them with :func:`device_control_flow`::

    for k in device_control_flow(my_runtime):
        register(k, provider="mydevice")

Each condition read is a synchronization of the stream (the declared read-back of control
flow); so they answer capture-unsupported and the capture plan runs them as seams. A body
whose output is its own condition input (``Loop`` with a constant condition) is not read
back. Carried state keeps its shape: a body that changes it raises a clear error (the
host kernels run such loops).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.dynamic import REGION_DOMAIN, REGION_OP
from onnx_ep.core.executor import copy_all
from onnx_ep.core.graph import Graph, infer_node
from onnx_ep.core.kernel import (
    CaptureSupport,
    ExecutionContext,
    NodeMeta,
    OpKey,
    Parity,
    Support,
    TensorSpec,
    WorkspaceRequirement,
)
from onnx_ep.core.memory import align_up
from onnx_ep.errors import NodeError

#: byte alignment of each carried value's home in a Loop's or Scan's scratch
HOME_ALIGNMENT = 256

#: why a device control-flow kernel is never recorded into a CUDA graph
NOT_CAPTURED = ("reads its condition or trip count back to the host and runs its bodies as "
                "plans of their own")


class DeviceControlFlow:
    """What ``If``, ``Loop`` and ``Scan`` share: the runtime, the contract answers, the
    copies of body outputs into pre-bound buffers."""

    parity = Parity.EXACT
    key: OpKey
    #: the attributes holding this op's bodies
    bodies: tuple[str, ...] = ("body",)

    def __init__(self, runtime: Callable[[], Any], since: int) -> None:
        self.runtime = runtime
        self.key = OpKey("", type(self).__name__, since)

    def __repr__(self) -> str:
        return f"<device {self.key.op_type}>"

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.unsupported(NOT_CAPTURED)

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE

    def supports(self, meta: NodeMeta) -> Support:
        for attr in self.bodies:
            body = meta.attr(attr)
            if not isinstance(body, Graph):
                return Support.no(f"attribute {attr!r} is not a graph")
            for v in (*body.inputs, *body.outputs):
                if v.kind != "tensor":
                    return Support.no(f"body {attr!r} has a {v.kind} value {v.name!r}; "
                                      f"device bodies carry tensors only")
        return Support.YES

    def body_signatures(self, meta: NodeMeta) -> list[tuple[Graph, list[TensorSpec | None]]]:
        """The bodies this node will run at ``meta``'s specs and their feeds' specs (the
        session plans them with the caller's signature)."""
        raise NotImplementedError

    def fail(self, ctx: ExecutionContext, why: str) -> NodeError:
        return NodeError(why, node=ctx.node.name, op_type=ctx.node.op_type)

    def read(self, ctx: ExecutionContext, value: Any, index: int) -> np.ndarray:
        """Input ``index`` on the host: the plan's known value, else read back (a sync)."""
        known = ctx.node.constant(index)
        if known is not None:
            return np.asarray(known)
        if isinstance(value, np.ndarray):
            return value
        return np.asarray(self.runtime().download(value, ctx.stream))

    def deliver(self, ctx: ExecutionContext, pairs: Sequence[tuple[Any, Any, str]]) -> None:
        """Copy each ``(body value, pre-bound buffer, what)`` on the device, checking that
        the body made what the plan sized."""
        copies = []
        for src, dst, what in pairs:
            if tuple(src.shape) != tuple(dst.shape) or np.dtype(src.dtype) != np.dtype(
                    dst.dtype):
                raise self.fail(ctx, f"{what}: the body made {np.dtype(src.dtype)}"
                                     f"{list(src.shape)} but the plan sized "
                                     f"{np.dtype(dst.dtype)}{list(dst.shape)} (a device body "
                                     f"keeps the shapes it was planned with; run this node on "
                                     f"a host provider)")
            if src is not dst:
                copies.append((src, dst))
        copy_all(self.runtime(), copies, ctx.stream)

    def run_body(self, ctx: ExecutionContext, body: Graph, feeds: list[Any]) -> list[Any]:
        if ctx.run_subgraph is None:
            raise self.fail(ctx, "the executor gave this control-flow node no run_subgraph")
        return list(ctx.run_subgraph(body, feeds))


class SizedRegion(DeviceControlFlow):
    """The nodes that depend on a run-sized value (:mod:`onnx_ep.core.dynamic`), as one
    body planned per size its feeds have at a run: its outputs are the body plan's own
    buffers (views of its arena), valid until the region runs again."""

    #: its outputs are sized by the run, not pre-bound, and so are its feeds (see
    #: :mod:`onnx_ep.core.dynamic`)
    sizes_at_run = True
    reads_run_sized = True

    def __init__(self, runtime: Callable[[], Any]) -> None:
        super().__init__(runtime, 1)
        self.key = OpKey(REGION_DOMAIN, REGION_OP, 1)

    def body_signatures(self, meta: NodeMeta) -> list[tuple[Graph, list[TensorSpec | None]]]:
        return [(meta.attr("body"), list(meta.inputs))]

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        res = self.run_body(ctx, ctx.node.attr("body"), list(inputs))
        for j, v in enumerate(res[:len(outputs)]):
            outputs[j] = v


def row(tensor: Any, index: int) -> Any:
    """Row ``index`` along axis 0 of a contiguous device tensor, as a view."""
    shape = tuple(tensor.shape)
    dtype = np.dtype(tensor.dtype)
    per_row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    return tensor.view(dtype, shape[1:], index * per_row)


class If(DeviceControlFlow):
    bodies = ("then_branch", "else_branch")

    def body_signatures(self, meta: NodeMeta) -> list[tuple[Graph, list[TensorSpec | None]]]:
        return [(meta.attr("then_branch"), []), (meta.attr("else_branch"), [])]

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        cond = self.read(ctx, inputs[0], 0)
        if cond.size != 1:
            raise self.fail(ctx, f"cond must hold one element, got shape {list(cond.shape)}")
        which = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
        res = self.run_body(ctx, ctx.node.attr(which), [])
        pairs = []
        for j, v in enumerate(res):
            if outputs[j] is None:      # an output nobody reads: no buffer was planned
                outputs[j] = v
            else:
                pairs.append((v, outputs[j], f"{which} output {j}"))
        self.deliver(ctx, pairs)


class Loop(DeviceControlFlow):
    """``Loop``: carried state ping-pongs through the node's pre-bound outputs (a body's
    feeds are copied into its own buffers, so nothing it writes overlaps what it reads);
    scan outputs are written row by row into theirs."""

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        # carried values whose final output nobody reads have no pre-bound buffer: they
        # ping-pong through scratch instead
        return WorkspaceRequirement(_unused_state_bytes(meta, 2, len(meta.inputs) - 2))

    def body_signatures(self, meta: NodeMeta) -> list[tuple[Graph, list[TensorSpec | None]]]:
        return [(meta.attr("body"), [TensorSpec(np.int64, ()), TensorSpec(np.bool_, ()),
                                     *meta.inputs[2:]])]

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        """Carried values that keep their shape through the body (onnx's inference leaves
        every carried value's shape open); scan outputs when the trip count is known and
        the body cannot stop early (it hands its condition input back as is)."""
        body: Graph = meta.attr("body")
        ((_, feeds),) = self.body_signatures(meta)
        got = body_output_specs(body, feeds, meta.outer)
        n_state = len(meta.inputs) - 2
        out: list[TensorSpec | None] = [
            g if g is not None and g == init else None
            for g, init in zip(got[1:1 + n_state], meta.inputs[2:])]
        trip = meta.constant(0)
        cond = meta.constant(1)
        fixed = (body.outputs[0].name == body.inputs[1].name
                 and (len(meta.inputs) < 2 or not meta.input_names[1]
                      or (cond is not None and bool(np.asarray(cond).reshape(-1)[0]))))
        for g in got[1 + n_state:]:
            out.append(TensorSpec(g.dtype, (int(np.asarray(trip).reshape(-1)[0]), *g.shape))
                       if g is not None and trip is not None and fixed else None)
        return out[:len(meta.outputs)]

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        body: Graph = ctx.node.attr("body")
        n_state = len(inputs) - 2
        n_scan = len(body.outputs) - 1 - n_state
        trip = None if inputs[0] is None and ctx.node.constant(0) is None else int(
            self.read(ctx, inputs[0], 0).reshape(-1)[0])
        going = True if inputs[1] is None and ctx.node.constant(1) is None else bool(
            self.read(ctx, inputs[1], 1).reshape(-1)[0])
        # a body that hands its condition input back as is never stops the loop early
        fixed_cond = body.outputs[0].name == body.inputs[1].name
        homes = _state_homes(ctx, outputs[:n_state], workspace, inputs[2:])
        state = list(inputs[2:])
        i = 0
        while going and (trip is None or i < trip):
            res = self.run_body(ctx, body, [np.array(i, np.int64), np.array(going), *state])
            if not fixed_cond:
                going = bool(self.read(ctx, res[0], -1).reshape(-1)[0])
            self.deliver(ctx, [(v, h, f"carried value {k}") for k, (v, h) in
                               enumerate(zip(res[1:1 + n_state], homes))]
                         + [(v, _scan_row(self, ctx, outputs[n_state + k], i, k), f"scan "
                             f"output {k}") for k, v in enumerate(res[1 + n_state:])
                            if n_state + k < len(outputs) and outputs[n_state + k] is not None])
            state = list(homes)
            i += 1
        if i == 0:
            self.deliver(ctx, [(v, h, f"carried value {k}")
                               for k, (v, h) in enumerate(zip(inputs[2:], homes))])
        for k in range(n_scan):
            out = outputs[n_state + k] if n_state + k < len(outputs) else None
            if out is not None and out.shape[0] != i:
                raise self.fail(ctx, f"scan output {k} was planned for {out.shape[0]} "
                                     f"iterations but the loop ran {i}")
        for k, h in enumerate(homes[:len(outputs)]):
            if outputs[k] is None:
                outputs[k] = h


class Scan(DeviceControlFlow):
    """``Scan`` (opset 9 and later) along axis 0 of its scan inputs and outputs."""

    def supports(self, meta: NodeMeta) -> Support:
        ok = super().supports(meta)
        if not ok:
            return ok
        for attr in ("scan_input_axes", "scan_output_axes"):
            if any(int(a) != 0 for a in (meta.attr(attr) or ())):
                return Support.no(f"{attr} other than 0 (the device Scan walks axis 0)")
        return Support.YES

    def _split(self, meta: NodeMeta) -> tuple[int, int]:
        n_scan_in = int(meta.attr("num_scan_inputs"))
        return len(meta.inputs) - n_scan_in, n_scan_in

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        n_state, _ = self._split(meta)
        return WorkspaceRequirement(_unused_state_bytes(meta, 0, n_state))

    def body_signatures(self, meta: NodeMeta) -> list[tuple[Graph, list[TensorSpec | None]]]:
        n_state, _ = self._split(meta)
        rows = [None if s is None or len(s.shape) == 0 else TensorSpec(s.dtype, s.shape[1:])
                for s in meta.inputs[n_state:]]
        return [(meta.attr("body"), [*meta.inputs[:n_state], *rows])]

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        node = ctx.node
        n_state, n_scan_in = self._split(node)
        body: Graph = node.attr("body")
        n_scan_out = len(body.outputs) - n_state
        in_rev = [bool(d) for d in (node.attr("scan_input_directions") or [0] * n_scan_in)]
        out_rev = [bool(d) for d in (node.attr("scan_output_directions") or [0] * n_scan_out)]
        scans = list(inputs[n_state:])
        lengths = {int(x.shape[0]) for x in scans}
        if len(lengths) != 1:
            raise self.fail(ctx, f"scan inputs have different lengths {sorted(lengths)} "
                                 f"along axis 0")
        length = lengths.pop()
        homes = _state_homes(ctx, outputs[:n_state], workspace, inputs[:n_state])
        state = list(inputs[:n_state])
        for t in range(length):
            slices = [row(x, length - 1 - t if rev else t) for x, rev in zip(scans, in_rev)]
            res = self.run_body(ctx, body, [*state, *slices])
            self.deliver(ctx, [(v, h, f"state {k}") for k, (v, h) in
                               enumerate(zip(res[:n_state], homes))]
                         + [(v, row(outputs[n_state + k], length - 1 - t if out_rev[k] else t),
                             f"scan output {k}") for k, v in enumerate(res[n_state:])
                            if n_state + k < len(outputs) and outputs[n_state + k] is not None])
            state = list(homes)
        if length == 0:
            self.deliver(ctx, [(v, h, f"state {k}")
                               for k, (v, h) in enumerate(zip(inputs[:n_state], homes))])
        for k, h in enumerate(homes[:len(outputs)]):
            if outputs[k] is None:
                outputs[k] = h


def body_output_specs(body: Graph, feeds: Sequence[TensorSpec | None],
                      outer: Mapping[str, TensorSpec | None]) -> list[TensorSpec | None]:
    """The specs of ``body``'s outputs at these feeds and outer values, from onnx's
    inference of each node in turn (``None`` where it cannot size one: a body the planner
    then sends to the host)."""
    specs: dict[str, TensorSpec | None] = {
        name: v.spec for name, v in body.values.items()
        if v.spec is not None and v.spec.is_static}
    specs.update(outer)
    specs.update(zip([v.name for v in body.inputs], feeds))
    known: dict[str, Any] = dict(body.initializers)
    for name, arr in known.items():
        specs[name] = TensorSpec(arr.dtype, arr.shape)
    for node in body.nodes:
        if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            x = specs.get(node.inputs[0])
            if x is not None and x.is_static:
                start, end = node.attrs.get("start", 0), node.attrs.get("end")
                known[node.outputs[0]] = np.array(x.shape[start:end], np.int64)
        if all(not o or (specs.get(o) is not None and specs[o].is_static)
               for o in node.outputs):
            continue
        ins = [specs.get(i) if i else None for i in node.inputs]
        got = infer_node(node, body.opset(node.domain), ins,
                         {j: known[i] for j, i in enumerate(node.inputs) if i in known})
        for name, g in zip(node.outputs, got):
            if name and g is not None:
                specs[name] = g
    return [specs.get(v.name) for v in body.outputs]


def _home_bytes(spec: TensorSpec) -> int:
    """Bytes one carried value takes in the node's scratch (planning and running alike)."""
    return align_up(spec.nbytes, HOME_ALIGNMENT)


def _unused_state_bytes(meta: NodeMeta, first: int, n_state: int) -> int:
    """Scratch for the carried values whose final output is unused (ping-pong homes)."""
    total = 0
    for k in range(n_state):
        spec = meta.inputs[first + k]
        if (k >= len(meta.output_names) or not meta.output_names[k]) and spec is not None:
            total += _home_bytes(spec)
    return total


def _state_homes(ctx: ExecutionContext, outs: Sequence[Any], workspace: Any,
                 initial: Sequence[Any]) -> list[Any]:
    """Where each carried value lives between iterations: its pre-bound final output, else
    a view of the node's scratch."""
    homes: list[Any] = []
    offset = 0
    outs = [*outs, *[None] * (len(initial) - len(outs))]   # trailing outputs may be omitted
    for out, x in zip(outs, initial):
        if out is not None:
            homes.append(out)
            continue
        if workspace is None:
            raise NodeError("a carried value has neither an output buffer nor scratch",
                            node=ctx.node.name, op_type=ctx.node.op_type)
        homes.append(workspace.buffer.view(np.dtype(x.dtype), tuple(x.shape), offset))
        offset += _home_bytes(TensorSpec(np.dtype(x.dtype), tuple(x.shape)))
    return homes


def _scan_row(kernel: DeviceControlFlow, ctx: ExecutionContext, out: Any, i: int,
              k: int) -> Any:
    if i >= out.shape[0]:
        raise kernel.fail(ctx, f"scan output {k} was planned for {out.shape[0]} iterations "
                               f"but the loop runs more")
    return row(out, i)


def device_control_flow(runtime: Callable[[], Any]) -> list[DeviceControlFlow]:
    """The device ``If`` (opset 1+), ``Loop`` (1+) and ``Scan`` (9+) kernels of a device
    whose runtime ``runtime()`` returns, and its ``onnx_ep::SizedRegion``."""
    return [If(runtime, 1), Loop(runtime, 1), Scan(runtime, 9), SizedRegion(runtime)]
