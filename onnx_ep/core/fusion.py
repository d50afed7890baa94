"""Graph fusion: node patterns a device runs better as one kernel, rewritten at load.

A decode step of a transformer spends most of its device time in tiny launches: an RMS
norm written as Pow -> ReduceMean -> Add -> Sqrt -> Reciprocal -> Mul -> Mul is seven
kernels of ~2 µs each where one does the same work. A :class:`FusionRule` recognises such a
pattern, anchored at its last node, and names one node that computes it.

A rewrite happens only where it is safe and useful:

- every value inside the pattern is read by the pattern alone (no other node, no graph
  output, no subgraph reads it), so removing it changes nothing else;
- a **device** provider of the session claims the fused node (its kernel's ``supports``
  says yes for these types). A host-only session runs the model as written: the reference
  is the oracle of the graph the user gave, not of our rewrite;
- the session's ``fusion`` option is ``"auto"`` (``"off"`` keeps every node).

Fused nodes keep the anchor's output name, so shape inference, feeds and fetches are
unchanged. Ops that no public standard defines live in :data:`FUSED_DOMAIN`; every fused op
has a reference kernel too, so a fused kernel is held to the reference like any other.
:func:`fuse` returns the rewritten graph and a :class:`FusionReport` of what was fused and
what was declined, with the reason.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import attrs
import numpy as np

from onnx_ep.core.graph import Graph, Node
from onnx_ep.core.kernel import TensorSpec
from onnx_ep.core.placement import HOST, node_meta
from onnx_ep.core.registry import KernelRegistry
from onnx_ep.errors import NoKernelError

__all__ = ["BUILTIN_RULES", "FUSED_DOMAIN", "FusionReport", "FusionRule", "Match", "Node",
           "View", "fuse"]

log = logging.getLogger("onnx_ep")

#: the domain of the ops the fusion pass emits that no public standard defines
FUSED_DOMAIN = "onnx_ep.fused"


@attrs.frozen
class Match:
    """A pattern found: the nodes it replaces (the anchor last) and the node replacing them."""

    nodes: tuple[Node, ...]
    node: Node


class View:
    """What a rule may ask of the graph: producers, consumers, constants and specs."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._producer: dict[str, Node] = {}
        self._readers: dict[str, list[Node]] = {}
        for n in graph.nodes:
            for o in n.outputs:
                if o:
                    self._producer[o] = n
            for i in (*n.inputs, *n.implicit_inputs):
                if i:
                    self._readers.setdefault(i, []).append(n)
        self._outputs = {v.name for v in graph.outputs}

    def producer(self, name: str, *op_types: str) -> Node | None:
        """The ai.onnx node producing ``name`` when its type is one of ``op_types``."""
        n = self._producer.get(name)
        if n is None or n.domain not in ("", "ai.onnx") or n.op_type not in op_types:
            return None
        return n

    def readers(self, name: str) -> list[Node]:
        return self._readers.get(name, [])

    def private(self, name: str, within: Iterable[Node]) -> bool:
        """Whether only nodes of ``within`` read ``name`` (and it is not a graph output)."""
        ids = {id(n) for n in within}
        return name not in self._outputs and all(id(n) in ids for n in self.readers(name))

    def const(self, name: str) -> np.ndarray | None:
        return self.graph.initializers.get(name) if name else None

    def scalar(self, name: str) -> float | None:
        """The value of a one-element constant, else None."""
        c = self.const(name)
        if c is None or c.size != 1 or c.dtype.kind not in "fiu":
            return None
        return float(c.reshape(-1)[0])

    def spec(self, name: str) -> TensorSpec | None:
        c = self.const(name)
        if c is not None:
            return TensorSpec(c.dtype, c.shape)
        v = self.graph.values.get(name)
        return v.spec if v is not None else None


class FusionRule(Protocol):
    """A pattern anchored at its last node. ``match`` returns None where it does not apply."""

    name: str

    def match(self, anchor: Node, view: View) -> Match | None: ...


@attrs.define
class FusionReport:
    """What :func:`fuse` did: patterns fused per rule, and the matches it left alone."""

    mode: str = "auto"
    fused: Counter[str] = attrs.Factory(Counter)
    nodes_removed: int = 0
    #: ``(rule, anchor node, why)`` for matches no device provider claimed
    declined: list[tuple[str, str, str]] = attrs.Factory(list)

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "fused": dict(self.fused), "nodes_removed": self.nodes_removed,
                "declined": [{"rule": r, "node": n, "reason": w} for r, n, w in self.declined]}


def fuse(graph: Graph, registry: KernelRegistry, providers: Sequence[str],
         rules: Sequence[FusionRule] | None = None, mode: str = "auto") -> tuple[Graph,
                                                                                FusionReport]:
    """Rewrite the patterns of ``rules`` that a device provider of ``providers`` claims.

    Subgraphs (If/Loop bodies) are left as they are: they run on the host.
    """
    report = FusionReport(mode)
    devices = [p for p in providers if registry.providers[p].device != HOST]
    if mode == "off" or not devices:
        return graph, report
    rules = BUILTIN_RULES if rules is None else rules
    view = View(graph)
    taken: set[int] = set()
    replace: dict[int, Node] = {}        # id(anchor) -> fused node
    for anchor in reversed(graph.nodes):  # last nodes first: the widest pattern wins
        if id(anchor) in taken:
            continue
        for rule in rules:
            m = rule.match(anchor, view)
            if m is None or any(id(n) in taken for n in m.nodes):
                continue
            if not all(view.private(o, m.nodes) for n in m.nodes[:-1] for o in n.outputs if o):
                continue
            why = _claimed(m.node, graph, registry, devices)
            if why:
                report.declined.append((rule.name, anchor.name, why))
                continue
            taken.update(id(n) for n in m.nodes)
            replace[id(anchor)] = m.node
            report.fused[rule.name] += 1
            report.nodes_removed += len(m.nodes) - 1
            break
    if not replace:
        return graph, report
    nodes = [replace.get(id(n), n) for n in graph.nodes
             if id(n) not in taken or id(n) in replace]
    if report.fused:
        log.info("fusion: %s (%d nodes fewer)", ", ".join(
            f"{k} x{v}" for k, v in sorted(report.fused.items())), report.nodes_removed)
    return attrs.evolve(graph, nodes=nodes), report


def _claimed(node: Node, graph: Graph, registry: KernelRegistry,
             devices: Sequence[str]) -> str:
    """'' when a device provider's kernel supports ``node``, else why none does."""
    try:
        registry.select(node_meta(node, graph), devices)
    except NoKernelError as exc:
        return str(exc)
    return ""


# ------------------------------------------------------------------ pattern helpers


def _other(node: Node, name: str) -> str | None:
    """The other input of a two-input node one of whose inputs is ``name``."""
    a, b = (node.inputs + ("", ""))[:2]
    return b if a == name else a if b == name else None


def _slice(node: Node, view: View) -> tuple[int, int, int] | None:
    """(start, end, axis) of a one-axis, unit-step Slice with constant bounds."""
    if node.op_type != "Slice":
        return None
    if len(node.inputs) >= 3:            # opset >= 10: bounds are inputs
        ins = node.inputs + ("",) * (5 - len(node.inputs))
        st, en, ax, sp = (view.const(n) for n in ins[1:5])
        if st is None or en is None or (ins[3] and ax is None) or (ins[4] and sp is None):
            return None
    else:
        st, en = node.attrs.get("starts"), node.attrs.get("ends")
        ax, sp = node.attrs.get("axes"), None
        if st is None or en is None:
            return None
    st, en = np.asarray(st).reshape(-1), np.asarray(en).reshape(-1)
    ax = np.asarray(ax).reshape(-1) if ax is not None else np.arange(len(st))
    if len(st) != 1 or len(en) != 1 or len(ax) != 1:
        return None
    if sp is not None and int(np.asarray(sp).reshape(-1)[0]) != 1:
        return None
    return int(st[0]), int(en[0]), int(ax[0])


def _rank(spec: TensorSpec | None) -> int | None:
    return len(spec.shape) if spec is not None else None


# ------------------------------------------------------------------ rules


class RmsNorm:
    """``x / sqrt(mean(x^2, trailing axes) + eps) * scale`` -> SimplifiedLayerNormalization.

    The normalisation may be written ``x * Reciprocal(Sqrt(.))``, ``x * (1 / Sqrt(.))`` or
    ``x / Sqrt(.)``; the square ``Pow(x, 2)`` or ``Mul(x, x)``; the scale on either side.
    The normalisation may run in float32 between two Casts, as Hugging Face writes it
    (``x.to(float32)`` ... ``.to(input_dtype) * weight``): the fused node then reads x.
    """

    name = "rms_norm"

    def match(self, anchor: Node, view: View) -> Match | None:
        if anchor.op_type != "Mul" or anchor.domain not in ("", "ai.onnx"):
            return None
        for normed, scale in (anchor.inputs, anchor.inputs[::-1]):
            back = view.producer(normed, "Cast")
            found = self._normed(back.inputs[0] if back is not None else normed, view)
            if found is None:
                continue
            x, eps, axis, nodes = found
            if back is not None:
                nodes.append(back)
                up = view.producer(x, "Cast")
                if up is not None:
                    nodes.insert(0, up)
                    x = up.inputs[0]
            xs, ss = view.spec(x), view.spec(scale)
            if xs is None or ss is None or xs.dtype != ss.dtype or x == scale:
                continue
            ys = view.spec(anchor.outputs[0])
            if ys is None or ys.dtype != xs.dtype:
                continue
            r = len(xs.shape)
            tail = tuple(xs.shape[axis % r:])
            # the scale must only span the normalised axes (ones in front are a broadcast)
            sshape = tuple(ss.shape)
            while len(sshape) > len(tail) and sshape[0] == 1:
                sshape = sshape[1:]
            if sshape != tail:
                continue
            node = Node(name=f"{anchor.name}/rms_norm", op_type="SimplifiedLayerNormalization",
                        domain="", inputs=(x, scale), outputs=(anchor.outputs[0],),
                        attrs={"axis": axis - r if axis >= 0 else axis, "epsilon": eps,
                               "stash_type": 1})
            return Match((*nodes, anchor), node)
        return None

    def _normed(self, name: str, view: View) -> tuple[str, float, int, list[Node]] | None:
        """(x, eps, axis, nodes) when ``name`` is ``x`` divided by its RMS."""
        m = view.producer(name, "Mul", "Div")
        if m is None or len(m.inputs) != 2:
            return None
        if m.op_type == "Div":
            x, sq = m.inputs
            s = view.producer(sq, "Sqrt")
            chain = [s] if s is not None else None
        else:
            chain = None
            for x, inv in (m.inputs, m.inputs[::-1]):
                r = view.producer(inv, "Reciprocal")
                if r is not None and (s := view.producer(r.inputs[0], "Sqrt")) is not None:
                    chain = [s, r]
                    break
                d = view.producer(inv, "Div")
                if (d is not None and view.scalar(d.inputs[0]) == 1.0
                        and (s := view.producer(d.inputs[1], "Sqrt")) is not None):
                    chain = [s, d]
                    break
        if not chain:
            return None
        add = view.producer(chain[0].inputs[0], "Add")
        if add is None:
            return None
        for ms_name, eps_name in (add.inputs, add.inputs[::-1]):
            eps = view.scalar(eps_name)
            mean = view.producer(ms_name, "ReduceMean")
            if eps is None or mean is None:
                continue
            axis = self._trailing_axis(mean, view, x)
            sq = view.producer(mean.inputs[0], "Pow", "Mul")
            if axis is None or sq is None or len(sq.inputs) != 2:
                continue
            if sq.op_type == "Pow" and not (sq.inputs[0] == x and view.scalar(sq.inputs[1]) == 2):
                continue
            if sq.op_type == "Mul" and sq.inputs != (x, x):
                continue
            return x, eps, axis, [sq, mean, add, *chain, m]
        return None

    @staticmethod
    def _trailing_axis(mean: Node, view: View, x: str) -> int | None:
        """The first reduced axis (negative) when ReduceMean keeps dims over trailing axes."""
        r = _rank(view.spec(x))
        if r is None or not int(mean.attrs.get("keepdims", 1)):
            return None
        if len(mean.inputs) > 1 and mean.inputs[1]:
            axes = view.const(mean.inputs[1])
        else:
            axes = mean.attrs.get("axes")
        if axes is None:
            return None
        got = sorted(int(a) % r for a in np.asarray(axes).reshape(-1))
        if not got or got != list(range(got[0], r)):
            return None
        return got[0] - r


class RotaryHalf:
    """``x * cos + rotate_half(x) * sin`` with rotate_half = Concat(-x[.., D/2:], x[.., :D/2]).

    The rotary embedding as Hugging Face writes it (``torch.cat((-x2, x1), dim=-1)``),
    fused into :data:`FUSED_DOMAIN` ``RotaryHalf(x, cos, sin)``.
    """

    name = "rotary_half"

    def match(self, anchor: Node, view: View) -> Match | None:
        if anchor.op_type != "Add" or anchor.domain not in ("", "ai.onnx"):
            return None
        m1, m2 = (view.producer(i, "Mul") for i in anchor.inputs[:2])
        if m1 is None or m2 is None or len(anchor.inputs) != 2:
            return None
        for a, b in ((m1, m2), (m2, m1)):
            for rot, sin in (b.inputs, b.inputs[::-1]):
                found = self._rotate_half(rot, view)
                if found is None:
                    continue
                x, nodes = found
                cos = _other(a, x)
                if cos is None or cos == x:
                    continue
                node = Node(name=f"{anchor.name}/rotary_half", op_type="RotaryHalf",
                            domain=FUSED_DOMAIN, inputs=(x, cos, sin),
                            outputs=(anchor.outputs[0],), attrs={})
                return Match((*nodes, a, b, anchor), node)
        return None

    @staticmethod
    def _rotate_half(name: str, view: View) -> tuple[str, list[Node]] | None:
        cat = view.producer(name, "Concat")
        if cat is None or len(cat.inputs) != 2:
            return None
        neg = view.producer(cat.inputs[0], "Neg")
        lo = view.producer(cat.inputs[1], "Slice")
        hi = view.producer(neg.inputs[0], "Slice") if neg is not None else None
        if lo is None or hi is None or lo.inputs[0] != hi.inputs[0]:
            return None
        x = lo.inputs[0]
        xs = view.spec(x)
        if xs is None or not xs.shape or not isinstance(xs.shape[-1], int):
            return None
        r, d = len(xs.shape), xs.shape[-1]
        if d % 2 or int(cat.attrs.get("axis", 0)) % r != r - 1:
            return None
        a, b = _slice(lo, view), _slice(hi, view)
        if a is None or b is None or a[2] % r != r - 1 or b[2] % r != r - 1:
            return None
        if (a[0], min(a[1], d)) != (0, d // 2) or (b[0] % d, min(b[1], d)) != (d // 2, d):
            return None
        return x, [lo, hi, neg, cat]


class MatMulAdd:
    """``MatMul(a, b) + bias`` -> :data:`FUSED_DOMAIN` ``MatMulAdd(a, b, bias)``.

    The biased projections of a transformer (a constant bias, added in the GEMM's
    epilogue) and its residual connections (``x + MatMul(h, W)``, a bias of the product's
    shape, the GEMM's C). The sum must have the product's shape (the bias broadcasts into
    it, never the other way); a fed bias that broadcasts is left alone.
    """

    name = "matmul_add"

    def match(self, anchor: Node, view: View) -> Match | None:
        if anchor.op_type != "Add" or anchor.domain not in ("", "ai.onnx"):
            return None
        for prod, bias in (anchor.inputs, anchor.inputs[::-1]):
            mm = view.producer(prod, "MatMul")
            if mm is None or prod == bias:
                continue
            ps, bs, ys = view.spec(prod), view.spec(bias), view.spec(anchor.outputs[0])
            if ps is None or bs is None or ys is None or ps.dtype != bs.dtype:
                continue
            # a fed bias only with the product's shape (symbols are the same dims there)
            if view.const(bias) is None and (bs != ps or None in tuple(ps.shape)):
                continue
            if tuple(ys.shape) != tuple(ps.shape) or len(bs.shape) > len(ps.shape):
                continue
            node = Node(name=f"{anchor.name}/matmul_add", op_type="MatMulAdd",
                        domain=FUSED_DOMAIN, inputs=(*mm.inputs, bias),
                        outputs=(anchor.outputs[0],), attrs={})
            return Match((mm, anchor), node)
        return None


class SiluMul:
    """``g * sigmoid(g) * u`` (the SwiGLU gate of Llama/Qwen MLPs) -> ``SiluMul(g, u)``."""

    name = "silu_mul"

    def match(self, anchor: Node, view: View) -> Match | None:
        if anchor.op_type != "Mul" or anchor.domain not in ("", "ai.onnx"):
            return None
        for act, up in (anchor.inputs, anchor.inputs[::-1]):
            m = view.producer(act, "Mul")
            if m is None or len(m.inputs) != 2:
                continue
            for g, sg in (m.inputs, m.inputs[::-1]):
                sig = view.producer(sg, "Sigmoid")
                if sig is None or sig.inputs[0] != g:
                    continue
                gs, us, ys = view.spec(g), view.spec(up), view.spec(anchor.outputs[0])
                if gs is None or us is None or ys is None or gs != us or gs != ys:
                    continue
                node = Node(name=f"{anchor.name}/silu_mul", op_type="SiluMul",
                            domain=FUSED_DOMAIN, inputs=(g, up),
                            outputs=(anchor.outputs[0],), attrs={})
                return Match((sig, m, anchor), node)
        return None


class ScaledMatMul:
    """``MatMul(a, Transpose(b))`` scaled by a constant (``Mul`` or ``Div``), the attention
    scores ``q @ k^T * scale`` -> onnxruntime's ``com.microsoft::FusedMatMul`` with
    ``alpha`` and ``transB``: the GEMM transposes and scales, no kernel does either apart.

    Anchored at the scaling (a ``Div`` by a constant, or constant ``Mul``s; with or without
    the transpose) or at the MatMul (a transpose, scaled operands or grouped heads alone).
    The transpose must swap the last two axes only.
    """

    name = "scaled_matmul"

    @staticmethod
    def _unscale(name: str, view: View) -> tuple[str, float, list[Node]]:
        """``name`` without the constant scalings feeding it: (source, factor, nodes)."""
        factor, nodes = 1.0, []
        while (m := view.producer(name, "Mul")) is not None and len(m.inputs) == 2:
            for v, k in (m.inputs, m.inputs[::-1]):
                c = view.scalar(k)
                if c is not None and v != k:
                    factor, name, nodes = factor * c, v, [m, *nodes]
                    break
            else:
                break
        return name, factor, nodes

    def match(self, anchor: Node, view: View) -> Match | None:
        if anchor.domain not in ("", "ai.onnx"):
            return None
        alpha, top, nodes = 1.0, anchor.outputs[0], []
        if anchor.op_type == "Div" and len(anchor.inputs) == 2:
            c = view.scalar(anchor.inputs[1])
            if not c:
                return None
            alpha, top, nodes = 1.0 / c, anchor.inputs[0], [anchor]
        top, f, ns = self._unscale(top, view)       # Mul anchors (and chains of them)
        alpha, nodes = alpha * f, [*ns, *nodes]
        mm = view.producer(top, "MatMul")
        if mm is None or len(mm.inputs) != 2 or (mm is not anchor and not nodes):
            return None
        nodes = [mm, *nodes] if mm is not anchor else [mm]
        # scaled operands (scaled dot-product attention scales q and k by sqrt(scale) each)
        a, fa, na = self._unscale(mm.inputs[0], view)
        b, fb, nb = self._unscale(mm.inputs[1], view)
        alpha, nodes = alpha * fa * fb, [*na, *nb, *nodes]
        trans = view.producer(b, "Transpose")
        perm = trans.attrs.get("perm") if trans is not None else None
        r = _rank(view.spec(trans.inputs[0])) if trans is not None else None
        swaps = (perm is not None and r is not None and r >= 2
                 and list(perm) == [*range(r - 2), r - 1, r - 2])
        if swaps:
            b, fk, nk = self._unscale(trans.inputs[0], view)
            alpha, nodes = alpha * fk, [*nk, trans, *nodes]
        grouped = _grouped(b, view)
        if grouped is not None:
            b, ng = grouped
            nodes = [*ng, *nodes]
        if len(nodes) == 1:
            return None                      # neither a scale nor a transpose to fold
        ys = view.spec(anchor.outputs[0])
        if ys is None or ys.dtype.kind != "f":
            return None
        if grouped is not None:
            node = Node(name=f"{anchor.name}/grouped_matmul", op_type="GroupedMatMul",
                        domain=FUSED_DOMAIN, inputs=(a, b), outputs=(anchor.outputs[0],),
                        attrs={"alpha": float(alpha), "transB": int(swaps)})
        else:
            node = Node(name=f"{anchor.name}/scaled_matmul", op_type="FusedMatMul",
                        domain="com.microsoft", inputs=(a, b), outputs=(anchor.outputs[0],),
                        attrs={"alpha": float(alpha), "transA": 0, "transB": int(swaps)})
        return Match(tuple(nodes), node)


def _grouped(name: str, view: View) -> tuple[str, list[Node]] | None:
    """(kv, nodes) when ``name`` is grouped-query attention's repeat of the key/value heads:
    ``Reshape(Expand(Unsqueeze(kv [B, G, T, D], 2) -> [B, G, rep, T, D]) -> [B, G*rep, T, D])``
    (Hugging Face's ``repeat_kv``), which a GroupedMatMul reads without the copy."""
    r = view.producer(name, "Reshape")
    e = view.producer(r.inputs[0], "Expand") if r is not None else None
    u = view.producer(e.inputs[0], "Unsqueeze") if e is not None else None
    if u is None:
        return None
    kv = u.inputs[0]
    ks, es, rs = view.spec(kv), view.spec(e.outputs[0]), view.spec(r.outputs[0])
    if ks is None or es is None or rs is None:
        return None
    if (len(ks.shape), len(es.shape), len(rs.shape)) != (4, 5, 4):
        return None
    axes = view.const(u.inputs[1]) if len(u.inputs) > 1 else u.attrs.get("axes")
    if axes is None or [int(x) % 5 for x in np.asarray(axes).reshape(-1)] != [2]:
        return None
    b, g, t, d = ks.shape
    eb, eg, rep, et, ed = es.shape
    if (eb, eg, et, ed) != (b, g, t, d) or not isinstance(rep, int) or not isinstance(g, int):
        return None
    # dims 0, 1 and 3 fixed, dim 2 is T by the element count: the reshape merges G and rep
    if (rs.shape[0], rs.shape[1], rs.shape[3]) != (b, g * rep, d) or None in (b, d):
        return None
    return kv, [u, e, r]


class GatherTransposed:
    """``Gather(Transpose(w), indices, axis=0)`` of a matrix ``w`` [K, N] ->
    ``onnx_ep.fused::TransposedGather(w, indices)``: out[..., k] = w[k, indices[...]].

    onnxruntime-genai's builder ties a model's embedding to its lm_head this way: the
    weight is stored once as the lm_head's [hidden, vocab] and the embedding lookup reads it
    through a Transpose, which would otherwise transpose the whole weight on every step to
    gather one row of it.
    """

    name = "gather_transposed"

    def match(self, anchor: Node, view: View) -> Match | None:
        if anchor.domain not in ("", "ai.onnx") or anchor.op_type != "Gather" or len(
                anchor.inputs) != 2:
            return None
        trans = view.producer(anchor.inputs[0], "Transpose")
        w = view.spec(trans.inputs[0]) if trans is not None else None
        if w is None or len(w.shape) != 2 or list(trans.attrs.get("perm", [1, 0])) != [1, 0]:
            return None
        if int(anchor.attrs.get("axis", 0)) not in (0, -2):
            return None
        node = Node(name=f"{anchor.name}/gather_transposed", op_type="TransposedGather",
                    domain=FUSED_DOMAIN, inputs=(trans.inputs[0], anchor.inputs[1]),
                    outputs=(anchor.outputs[0],), attrs={})
        return Match((trans, anchor), node)


#: the rules :func:`fuse` applies unless given others
BUILTIN_RULES: tuple[FusionRule, ...] = (RmsNorm(), RotaryHalf(), MatMulAdd(), SiluMul(),
                                         ScaledMatMul(), GatherTransposed())
