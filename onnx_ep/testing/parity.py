"""The parity harness: run one model on two providers and hold each result to its promise.

``compare(model, feeds, provider="cuda")`` runs the model on ``[provider, reference]``
(nodes the provider cannot run fall back to the reference, and are then held to
``exact``) and on ``[reference]`` alone, and reports, per model output, whether the
bytes are equal, the max ULP distance, the max abs and rel error and whether the
promise of the node that produced it holds. With ``per_node=True`` it also compares
every node's outputs, in topological order, each node fed the reference's inputs, and
names the first node that breaks its promise. docs/PARITY.md says what the promises
mean; ``onnx-ep parity`` and the pytest fixture ``parity`` are thin shells around this.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import onnx

from onnx_ep.core.kernel import Parity
from onnx_ep.core.placement import PlacedNode
from onnx_ep.errors import OnnxEpError
from onnx_ep.testing.rewrite import expose_intermediates, isolate_node, node_protos_by_outputs
from onnx_ep.testing.ulp import Diff, bytes_equal, judge

#: how a node's outputs were obtained for the per-node comparison
SHARED = "shared"          # its inputs were byte-equal in the full run: compared there
ISOLATED = "isolated"      # re-run alone on the provider with the reference's inputs
COMPOUNDED = "compounded"  # could not be isolated: compared with the provider's own inputs

#: rows of diverging nodes ``str(report)`` prints before summarizing the rest
MAX_NODE_ROWS = 40


@attrs.frozen
class OutputParity:
    """One value compared: a model output, or one output of a node.

    :ivar name: the value's name. :ivar dtype, shape: the provider's (``shape`` is
        ``None`` for sequences and optionals).
    :ivar bytes_equal: identical bytes (and dtype and shape).
    :ivar max_ulp: largest ULP distance for floats (``math.inf`` where NaN/inf
        positions differ), ``None`` for other types.
    :ivar max_abs, max_rel: largest abs and relative error (numbers only).
    :ivar promise: the promise of the kernel that produced it on the provider under
        test (``exact`` when the reference ran it as a fallback or it is a model input).
    :ivar node, provider: the producing node and the provider that ran it (``""`` for
        a model input or initializer passed through).
    :ivar kept: whether the promise holds. :ivar reason: why not.
    """

    name: str
    dtype: str
    shape: tuple[int, ...] | None
    bytes_equal: bool
    max_ulp: int | float | None
    max_abs: float | None
    max_rel: float | None
    promise: Parity
    kept: bool
    node: str = ""
    provider: str = ""
    reason: str = ""
    differing: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype,
                "shape": None if self.shape is None else list(self.shape),
                "bytes_equal": self.bytes_equal, "differing": self.differing,
                "max_ulp": _json_number(self.max_ulp), "max_abs": _json_number(self.max_abs),
                "max_rel": _json_number(self.max_rel), "promise": _promise_dict(self.promise),
                "kept": self.kept, "reason": self.reason, "node": self.node,
                "provider": self.provider}


@attrs.frozen
class NodeParity:
    """One node's outputs compared with the reference's (``per_node=True``).

    :ivar index: position in topological order. :ivar kernel: ``repr`` of the kernel.
    :ivar mode: :data:`SHARED`, :data:`ISOLATED` or :data:`COMPOUNDED` (see module).
    :ivar note: why a node could not be isolated, else ``""``.
    """

    index: int
    name: str
    op_type: str
    provider: str
    kernel: str
    promise: Parity
    outputs: tuple[OutputParity, ...]
    mode: str = SHARED
    note: str = ""

    @property
    def kept(self) -> bool:
        return all(o.kept for o in self.outputs)

    @property
    def bytes_equal(self) -> bool:
        return all(o.bytes_equal for o in self.outputs)

    @property
    def max_ulp(self) -> int | float | None:
        return _max(o.max_ulp for o in self.outputs)

    @property
    def max_abs(self) -> float | None:
        return _max(o.max_abs for o in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "op_type": self.op_type,
                "provider": self.provider, "kernel": self.kernel,
                "promise": _promise_dict(self.promise), "kept": self.kept,
                "bytes_equal": self.bytes_equal, "max_ulp": _json_number(self.max_ulp),
                "max_abs": _json_number(self.max_abs), "mode": self.mode, "note": self.note,
                "outputs": [o.to_dict() for o in self.outputs]}


@attrs.frozen
class ParityReport:
    """What :func:`compare` found.

    :ivar outputs: one :class:`OutputParity` per model output, compared end to end
        (differences from upstream nodes included).
    :ivar nodes: one :class:`NodeParity` per top-level node in topological order
        (``per_node=True``), else ``None``.
    :ivar placement: nodes per provider in the session under test.
    :ivar reference_kernels: which reference it was: ``provider``, the ``onnx_ep`` version,
        the ``plugins`` whose kernels the reference run used, and a ``fingerprint`` of those
        kernels (ops, versions, classes and their source files), so a changed oracle shows.
    """

    model: str
    provider: str
    reference: str
    outputs: tuple[OutputParity, ...]
    nodes: tuple[NodeParity, ...] | None = None
    placement: Mapping[str, int] = attrs.Factory(dict)
    reference_kernels: Mapping[str, Any] = attrs.Factory(dict)

    @property
    def ok(self) -> bool:
        """Every promise holds.

        With ``per_node`` the node verdicts decide, since each node was fed the
        reference's inputs and so is judged on its own error; the end-to-end output
        verdicts may also count upstream drift. Without it the output verdicts decide.
        """
        if self.nodes is not None:
            return all(n.kept for n in self.nodes)
        return all(o.kept for o in self.outputs)

    @property
    def first_broken(self) -> NodeParity | None:
        """The first node, in topological order, whose outputs break its promise (per_node)."""
        return next((n for n in self.nodes or () if not n.kept), None)

    @property
    def first_diverged(self) -> NodeParity | None:
        """The first node whose outputs are not byte-equal to the reference's (per_node)."""
        return next((n for n in self.nodes or () if not n.bytes_equal), None)

    @property
    def broken_outputs(self) -> list[OutputParity]:
        return [o for o in self.outputs if not o.kept]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: dicts, lists, str, int, float and bool only (``inf`` as ``"inf"``)."""
        first = self.first_broken
        diverged = self.first_diverged
        return {"model": self.model, "provider": self.provider, "reference": self.reference,
                "reference_kernels": dict(self.reference_kernels),
                "ok": self.ok, "placement": dict(self.placement),
                "outputs": [o.to_dict() for o in self.outputs],
                "per_node": self.nodes is not None,
                "first_broken": None if first is None else first.to_dict(),
                "first_diverged": None if diverged is None else diverged.name,
                "nodes": None if self.nodes is None else [n.to_dict() for n in self.nodes]}

    def __str__(self) -> str:
        return format_report(self)


# ---------------------------------------------------------------- compare


def compare(model: str | os.PathLike[str] | bytes | onnx.ModelProto,
            feeds: Mapping[str, Any], provider: str = "cuda",
            reference: str = "cpu_reference", per_node: bool = False,
            plugins: Sequence[Any] = ()) -> ParityReport:
    """Run ``model`` on ``provider`` and on ``reference`` and compare the results.

    :param model: a path, serialized bytes or an ``onnx.ModelProto``.
    :param feeds: input name -> numpy array, given to both sessions.
    :param provider: the provider under test; nodes it cannot run fall back to
        ``reference`` (and are held to ``exact``).
    :param per_node: also compare every node, fed the reference's inputs, and find the
        first one that breaks its promise (runs a rewritten copy of the model whose
        graph outputs include every intermediate value).
    :param plugins: in-process plugins for both sessions (a test provider, say).
    :raises ProviderUnavailable: ``provider`` or ``reference`` cannot run here.
    :raises OnnxEpError: whatever loading or running the model raises.
    """
    from onnx_ep.core.graph import load_model

    proto = load_model(model)
    label = os.fspath(model) if isinstance(model, (str, os.PathLike)) else (
        proto.graph.name or "<model>")
    providers = [provider] if provider == reference else [provider, reference]
    run_model = expose_intermediates(proto) if per_node else proto
    tested = _Run(run_model, providers, feeds, plugins)
    ref = _Run(run_model, [reference], feeds, plugins)
    producers = tested.producers()
    outputs = []
    for out in tested.session.get_outputs()[:len(proto.graph.output)]:
        step = producers.get(out.name)
        promise = _promise(step, reference)
        outputs.append(_output_parity(out.name, tested.values[out.name],
                                      ref.values[out.name], promise, step))
    nodes = None
    if per_node:
        nodes = tuple(_compare_nodes(proto, tested, ref, providers, reference, plugins))
    return ParityReport(label, provider, reference, tuple(outputs), nodes,
                        tested.session.placement_summary(), reference_kernels(ref.session))


def reference_kernels(session: Any) -> dict[str, Any]:
    """Which kernels ``session`` (the reference run) used: its provider(s), the onnx_ep
    version, the plugins that registered them and a fingerprint over each kernel's op,
    version, plugin, class and the bytes of the file defining it."""
    import hashlib
    import inspect

    import onnx_ep

    registry = session._plugins.registry
    rows: set[tuple[str, ...]] = set()
    files: dict[str, str] = {}
    for step in session._program.placement.steps:
        if not isinstance(step, PlacedNode):
            continue
        meta = step.meta
        entry = registry.kernel_for(step.provider, meta.domain, meta.op_type, meta.opset)
        cls = type(entry.kernel if entry is not None else step.kernel)
        try:
            path = inspect.getsourcefile(cls) or ""
        except TypeError:
            path = ""
        if path and path not in files:
            with open(path, "rb") as f:
                files[path] = hashlib.sha256(f.read()).hexdigest()
        rows.add((step.provider, meta.domain, meta.op_type,
                  str(entry.since if entry is not None else ""),
                  entry.plugin if entry is not None else "", f"{cls.__module__}.{cls.__qualname__}",
                  files.get(path, "")))
    digest = hashlib.sha256("\n".join("|".join(r) for r in sorted(rows)).encode()).hexdigest()
    return {"providers": sorted({r[0] for r in rows}), "onnx_ep": onnx_ep.__version__,
            "plugins": sorted({r[4] for r in rows}), "kernels": len(rows),
            "fingerprint": digest[:16]}


class _Run:
    """One session over ``model`` and its outputs by name (on the host)."""

    def __init__(self, model: onnx.ModelProto, providers: list[str],
                 feeds: Mapping[str, Any], plugins: Sequence[Any]) -> None:
        from onnx_ep import Session

        self.session = Session(model, providers=providers, plugins=plugins)
        self.feeds = dict(feeds)
        names = [o.name for o in self.session.get_outputs()]
        self.values = dict(zip(names, (_host(v) for v in self.session.run(None, dict(feeds)))))

    def placed(self) -> list[PlacedNode]:
        steps = self.session._program.placement.steps
        return [s for s in steps if isinstance(s, PlacedNode)]

    def producers(self) -> dict[str, PlacedNode]:
        return {o: s for s in self.placed() for o in s.node.outputs if o}


def _compare_nodes(proto: onnx.ModelProto, tested: _Run, ref: _Run, providers: list[str],
                   reference: str, plugins: Sequence[Any]) -> list[NodeParity]:
    protos = node_protos_by_outputs(proto)
    out: list[NodeParity] = []
    for index, step in enumerate(tested.placed()):
        node = step.node
        reads = tuple(n for n in (*node.inputs, *node.implicit_inputs) if n)
        names = [o for o in node.outputs if o]
        mode, note, values = SHARED, "", tested.values
        if not all(_same(tested.values.get(n), ref.values.get(n)) for n in reads
                   if n in ref.values):
            isolated = isolate_node(proto, protos[tuple(node.outputs)], reads,
                                    {**ref.feeds, **ref.values})
            if isolated is None:
                mode, note = COMPOUNDED, "an input is not a tensor; compared with the " \
                                         "provider's own inputs"
            else:
                try:
                    alone = _Run(isolated, providers, {
                        n: ref.values.get(n, ref.feeds.get(n)) for n in _fed(isolated)},
                        plugins)
                except OnnxEpError as exc:
                    mode, note = COMPOUNDED, f"cannot run alone ({type(exc).__name__}: {exc})"
                else:
                    mode, values, step = ISOLATED, alone.values, alone.placed()[0]
        promise = _promise(step, reference)
        outputs = tuple(_output_parity(n, values[n], ref.values[n], promise, step)
                        for n in names)
        out.append(NodeParity(index, node.name, node.op_type, step.provider, repr(step.kernel),
                              promise, outputs, mode, note))
    return out


def _fed(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _promise(step: PlacedNode | None, reference: str) -> Parity:
    """The producing kernel's promise; ``exact`` for the reference itself and pass-throughs."""
    if step is None or step.provider == reference:
        return Parity.EXACT
    promise = getattr(step.kernel, "parity", None)
    return promise if isinstance(promise, Parity) else Parity.EXACT


def _output_parity(name: str, x: Any, ref: Any, promise: Parity,
                   step: PlacedNode | None) -> OutputParity:
    d: Diff = judge(x, ref, promise)
    if isinstance(x, np.ndarray):
        dtype, shape = str(x.dtype), tuple(int(s) for s in x.shape)
    else:
        dtype, shape = ("sequence" if isinstance(x, (list, tuple)) else type(x).__name__), None
    return OutputParity(name, dtype, shape, d.bytes_equal, d.max_ulp, d.max_abs, d.max_rel,
                        promise, d.kept, step.node.name if step else "",
                        step.provider if step else "", d.reason, d.differing)


def _host(value: Any) -> Any:
    """Device tensors (anything with ``numpy()``) as numpy arrays; sequences elementwise."""
    if isinstance(value, np.ndarray) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_host(v) for v in value]
    to_numpy = getattr(value, "numpy", None)
    return to_numpy() if callable(to_numpy) else value


def _same(a: Any, b: Any) -> bool:
    """Byte-identical values (missing on both sides counts as the same)."""
    return bytes_equal(a, b)


# ---------------------------------------------------------------- formatting


def _json_number(v: int | float | None) -> int | float | str | None:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _promise_dict(p: Parity) -> dict[str, Any]:
    return {"kind": p.kind.value, "max_ulp": p.max_ulp, "rtol": p.rtol, "atol": p.atol,
            "text": str(p)}


def _max(values: Any) -> Any:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _num(v: int | float | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, int) or (isinstance(v, float) and math.isinf(v)):
        return str(v)
    return "0" if v == 0 else f"{v:.3g}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]


def format_report(r: ParityReport) -> str:
    """The readable form of a report (what ``str(report)`` and ``onnx-ep parity`` print)."""
    where = ", ".join(f"{p}: {n}" for p, n in r.placement.items())
    lines = [f"parity of {r.model}: {r.provider} against {r.reference} (nodes per provider: "
             f"{where or 'none'})"]
    ref = r.reference_kernels
    if ref:
        lines.append(f"reference kernels: {ref['kernels']} from {', '.join(ref['plugins'])} "
                     f"(onnx_ep {ref['onnx_ep']}, fingerprint {ref['fingerprint']})")
    lines.append("")
    rows = [[o.name, o.dtype, "-" if o.shape is None else str(list(o.shape)),
             "yes" if o.bytes_equal else "no", _num(o.max_ulp), _num(o.max_abs),
             _num(o.max_rel), str(o.promise), f"{o.node} ({o.provider})" if o.node else "-",
             "kept" if o.kept else "BROKEN"] for o in r.outputs]
    lines += _table(["output", "dtype", "shape", "bytes equal", "max ulp", "max abs", "max rel",
                     "promise", "produced by", "verdict"], rows)
    lines += [f"  {o.name}: {o.reason}" for o in r.outputs if o.reason]
    if r.nodes is not None:
        lines += [""] + _node_lines(r)
    lines += ["", _verdict(r)]
    return "\n".join(lines)


def _node_lines(r: ParityReport) -> list[str]:
    nodes = r.nodes or ()
    equal = sum(n.bytes_equal for n in nodes)
    broken = sum(not n.kept for n in nodes)
    lines = [f"per node (each fed the reference's inputs): {len(nodes)} nodes, {equal} "
             f"byte-equal, {len(nodes) - equal - broken} within their promise, {broken} broken"]
    diverged = [n for n in nodes if not n.bytes_equal or n.mode == COMPOUNDED]
    rows = [[str(n.index), n.name, n.op_type, n.provider, str(n.promise), _num(n.max_ulp),
             _num(n.max_abs), n.mode, "kept" if n.kept else "BROKEN"]
            for n in diverged[:MAX_NODE_ROWS]]
    if rows:
        lines += _table(["#", "node", "op", "provider", "promise", "max ulp", "max abs",
                         "inputs", "verdict"], rows)
    if len(diverged) > MAX_NODE_ROWS:
        lines.append(f"... {len(diverged) - MAX_NODE_ROWS} more diverging nodes (see --json)")
    return lines


def _verdict(r: ParityReport) -> str:
    first = r.first_broken
    if first is not None:
        why = "; ".join(f"{o.name}: {o.reason}" for o in first.outputs if not o.kept)
        return (f"BROKEN: first node breaking its promise: {first.name!r} ({first.op_type} on "
                f"{first.provider}, promise {first.promise}): max ulp {_num(first.max_ulp)}, "
                f"max abs {_num(first.max_abs)} ({why})")
    if r.ok:
        drift = [o.name for o in r.outputs if not o.kept]
        if drift:
            return (f"OK: every node keeps its promise; outputs {', '.join(drift)} drift "
                    f"beyond their last node's promise only through upstream differences")
        return "OK: every promise holds"
    names = ", ".join(o.name for o in r.broken_outputs)
    return (f"BROKEN: output(s) {names} break the promise of the node that produced them "
            f"(upstream differences included); run with per_node=True (onnx-ep parity "
            f"--per-node) to find the first node that breaks its own")
