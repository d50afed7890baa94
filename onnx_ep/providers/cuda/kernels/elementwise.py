"""CUDA elementwise family: unary math, broadcasting binary ops, variadic Sum / Mean / Max /
Min, Where. The activations (Relu, Gelu, Clip, PRelu, ...) are rows of the same families in
:mod:`.activation`, on the same ``elementwise.cu``.

One class per family (:class:`Unary`, :class:`Binary`, :class:`Variadic`, :class:`Where`),
one instance per table row; the CUDA bodies are templates in ``elementwise.cu`` named
``<op>_<suffix>``. :meth:`bind` parses attributes once and returns a
:class:`BoundElementwise` node object that caches the broadcast layout per shape tuple on
the host; execution only launches (:class:`~.base.BoundLaunch`).

Parity (docs/PARITY.md): every row promises ``exact`` (the one exception is an activation,
see :mod:`.activation`). Integer, bool, comparison, Where, Clip and IEEE basic arithmetic
are correctly rounded; transcendental functions and activations of float16 / bfloat16 /
float32 are evaluated in float64 and rounded once, like cpu_reference. float64 inputs of
libm functions (Exp, Tanh, Pow, ...) are declined: CUDA's float64 libm may differ from
numpy's by an ulp, and there is no wider type to hide it.

NaNs are NaN exactly where the reference's are, but their sign and payload are not
promised: the reference's depend on the host CPU (numpy's AVX-512 paths return x86's
default -NaN for ``log(-1)`` or ``arccos(2)`` and may pick either operand's NaN in
``NaN + NaN``; glibc returns +NaN). The kernels follow glibc/SSE.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    Support,
    TensorSpec,
)
from onnx_ep.providers.cuda import copies
from onnx_ep.providers.cuda.kernels.base import (
    BF16,
    F64,
    I64,
    PTR,
    BoundLaunch,
    BoundRow,
    CudaKernel,
    attr_str,
    dtype_names,
    flat_geometry,
    launch_geometry,
    prod,
    suffix,
    types_of,
)

SOURCE = "elementwise"
MAX_RANK = 6

BOOL = np.dtype(np.bool_)

#: numpy dtype -> (symbol suffix, C++ type in the .cu files): the dtypes elementwise.cu
#: instantiates, rows of base.TYPES
DTYPES: dict[np.dtype, tuple[str, str]] = types_of((
    np.float32, np.float16, BF16, np.float64, np.int64, np.int32, np.int16, np.int8,
    np.uint64, np.uint32, np.uint16, np.uint8, BOOL))

FLOAT64 = frozenset({np.dtype(np.float64)})
FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float16, BF16, np.float64))
NARROW_FLOATS = FLOATS - FLOAT64  # libm functions: float64 declined (see module docstring)
SIGNED_INTS = frozenset(np.dtype(t) for t in (np.int64, np.int32, np.int16, np.int8))
UNSIGNED_INTS = frozenset(np.dtype(t) for t in (np.uint64, np.uint32, np.uint16, np.uint8))
INTS = SIGNED_INTS | UNSIGNED_INTS
NUMERIC = FLOATS | INTS
ALL = NUMERIC | {BOOL}


# ---------------------------------------------------------------- broadcast layout


class Bcast(ctypes.Structure):
    """The by-value kernel argument ``ep::Bcast`` of elementwise.cu."""

    _fields_ = [("ndim", ctypes.c_int64),
                ("dims", ctypes.c_int64 * MAX_RANK),
                ("strides", (ctypes.c_int64 * MAX_RANK) * 3)]


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy's multidirectional broadcast of ``shapes``; ValueError when they do not broadcast."""
    return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))


def broadcast_layout(out_shape: Sequence[int], in_shapes: Sequence[Sequence[int]]
                     ) -> tuple[int, tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Collapsed dims and per-input element strides for reading ``in_shapes`` at ``out_shape``.

    :returns: ``(ndim, dims, strides)``; ``ndim == 0`` means every input has the output's
        shape (the kernel uses the flat index). Broadcast dims get stride 0; dims of size 1
        are dropped and neighbours that are contiguous in every input are merged, so a
        row-vector bias over a matrix stays 2-D whatever the rank.
    :raises ValueError: more than :data:`MAX_RANK` dims remain after collapsing.
    """
    out = tuple(int(d) for d in out_shape)
    if all(tuple(s) == out for s in in_shapes):
        return 0, (), tuple(() for _ in in_shapes)
    rank = len(out)
    strides: list[list[int]] = []
    for shape in in_shapes:
        padded = (1,) * (rank - len(shape)) + tuple(int(d) for d in shape)
        st, acc = [0] * rank, 1
        for d in range(rank - 1, -1, -1):
            st[d] = 0 if padded[d] == 1 else acc
            acc *= padded[d]
        strides.append(st)
    dims: list[int] = []
    cols: list[list[int]] = [[] for _ in in_shapes]
    for d in range(rank):
        if out[d] == 1:
            continue
        if dims and all(cols[k][-1] == strides[k][d] * out[d] for k in range(len(in_shapes))):
            dims[-1] *= out[d]
            for k in range(len(in_shapes)):
                cols[k][-1] = strides[k][d]
            continue
        dims.append(out[d])
        for k in range(len(in_shapes)):
            cols[k].append(strides[k][d])
    if not dims:  # every dim is 1: one element
        dims, cols = [1], [[0] for _ in in_shapes]
    if len(dims) > MAX_RANK:
        raise ValueError(f"broadcast of {list(map(tuple, in_shapes))} to {out} needs "
                         f"{len(dims)} dims after collapsing; the kernels take {MAX_RANK}")
    return len(dims), tuple(dims), tuple(tuple(c) for c in cols)


def make_bcast(layout: tuple[int, tuple[int, ...], tuple[tuple[int, ...], ...]]) -> Bcast:
    ndim, dims, strides = layout
    bc = Bcast()
    bc.ndim = ndim
    for d, v in enumerate(dims):
        bc.dims[d] = v
    for k, col in enumerate(strides):
        for d, v in enumerate(col):
            bc.strides[k][d] = v
    return bc


# ---------------------------------------------------------------- helpers


def known(spec: TensorSpec | None) -> bool:
    """A tensor of known dtype and rank: the kernels read the sizes from the device tensors at
    run time, and the planner sizes the outputs per shape signature (or sends the node to
    the host where it cannot)."""
    return spec is not None


class BoundElementwise(BoundLaunch):
    """One node bound to one table row: the symbol, scalar attributes and a layout cache.

    Launches only: no allocation, synchronization or host copy (capture-safe).
    """

    source = SOURCE

    def __init__(self, row: Any, symbol: str, scalars: tuple[float, ...] = ()) -> None:
        super().__init__(row, symbol)
        self.scalars = scalars
        self._layouts: dict[tuple[tuple[int, ...], ...], Bcast] = {}

    def layout(self, out_shape: tuple[int, ...], shapes: tuple[tuple[int, ...], ...]) -> Bcast:
        key = (out_shape, *shapes)
        bc = self._layouts.get(key)
        if bc is None:
            if len(self._layouts) >= 16:  # dynamic shapes: keep the cache small
                self._layouts.clear()
            bc = self._layouts[key] = make_bcast(broadcast_layout(out_shape, shapes))
        return bc

    def launch_key(self, stream: Any, inputs: Sequence[Any], y: Any) -> tuple[Any, ...]:
        """The stream, output and input pointers and shapes."""
        n_in = len(inputs)
        if n_in == 2:
            a, b = inputs
            return (stream, y.ptr, y.shape, a.ptr, a.shape, b.ptr, b.shape)
        if n_in == 1:
            a = inputs[0]
            return (stream, y.ptr, y.shape, a.ptr, a.shape)
        return (stream, y.ptr, y.shape,
                *[None if t is None else (t.ptr, t.shape) for t in inputs])

    def arguments(self, n: int, inputs: Sequence[Any], y: Any) -> list[tuple[Any, Any]]:
        if self.row.family == "clip":  # (x, lo or null, hi or null, y, n, lo, hi)
            ptrs = [(int(inputs[k].ptr) if k < len(inputs) and inputs[k] is not None else 0,
                     PTR) for k in range(3)]
        else:
            ptrs = [(int(t.ptr), PTR) for t in inputs]
        args: list[tuple[Any, Any]] = [*ptrs, (int(y.ptr), PTR), (n, I64)]
        if self.row.family in ("unary", "clip"):
            args += [(self.scalars[0], F64), (self.scalars[1], F64)]
        else:
            shapes = tuple(tuple(t.shape) for t in inputs)
            args.append((self.layout(tuple(y.shape), shapes), None))  # struct by value
        return args

    def geometry(self, n: int, inputs: Sequence[Any], y: Any
                 ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """The flat path's grid when the kernel takes it (every operand the output's shape
        or a scalar, pointers aligned: elementwise.cu ``flat_operand``), else one thread
        per element."""
        family = self.row.family
        if any(getattr(t, "dtype", None) is None for t in (y, *inputs[:1])):
            return launch_geometry(n)  # a tensor stand-in without a dtype (host tests)
        if family in ("unary", "clip"):
            scalars = [False]
        elif family in ("binary", "where"):
            ndim, _, strides = broadcast_layout(tuple(y.shape), tuple(tuple(t.shape)
                                                                      for t in inputs))
            if ndim == 0:
                scalars = [False] * len(inputs)
            elif ndim == 1 and all(col[0] <= 1 for col in strides):
                scalars = [col[0] == 0 for col in strides]
            else:
                return launch_geometry(n)
        else:
            return launch_geometry(n)
        operands = [(t.ptr, t.dtype.itemsize, sc) for t, sc in zip(inputs, scalars)]
        flat = flat_geometry(n, operands, (y.ptr, y.dtype.itemsize),
                             lambda: self.wave(y.device))
        return flat if flat is not None else launch_geometry(n)


# ---------------------------------------------------------------- unary


class Unary(BoundRow):
    """``y = f(x)``, one instance per table row.

    :param symbol: the kernel name in elementwise.cu without the dtype suffix.
    :param dtypes: input dtypes the row accepts.
    :param attrs: ``((name, default), ...)``: float attributes passed as p0, p1.
    :param out_bool: the output is bool (IsNaN).
    """

    family = "unary"

    def __init__(self, op_type: str, symbol: str, dtypes: frozenset[np.dtype], *,
                 since: int = 1, attrs: tuple[tuple[str, float], ...] = (),
                 out_bool: bool = False) -> None:
        super().__init__(op_type, since, Parity.EXACT)
        self.symbol = symbol
        self.dtypes = dtypes
        self.attrs = attrs
        self.out_bool = out_bool

    def __repr__(self) -> str:
        return f"Unary({self.key})"

    def supports(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) != 1 or not known(meta.inputs[0]):
            return Support.no("needs one tensor input of known dtype and rank")
        dt = meta.inputs[0].dtype  # type: ignore[union-attr]
        if dt not in self.dtypes:
            why = (" (float64 libm results may differ from numpy's by an ulp)"
                   if dt in FLOAT64 and self.dtypes == NARROW_FLOATS else "")
            return Support.no(f"dtype {dt} not in ({dtype_names(self.dtypes)}){why}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        x = meta.inputs[0]
        assert x is not None
        return [TensorSpec(BOOL if self.out_bool else x.dtype, x.shape)]

    def symbol_for(self, meta: NodeMeta) -> str:
        """The kernel name of this node without the dtype suffix (attributes may pick it)."""
        return self.symbol

    def bind(self, meta: NodeMeta) -> BoundElementwise:
        values = [float(meta.attr(name, default)) for name, default in self.attrs]
        values += [0.0] * (2 - len(values))
        dtype = meta.inputs[0].dtype  # type: ignore[union-attr]
        return BoundElementwise(self, f"{self.symbol_for(meta)}_{suffix(dtype)}", tuple(values))


_UNARY: list[Unary] = [
    Unary("Abs", "abs", NUMERIC),
    Unary("Neg", "neg", FLOATS | SIGNED_INTS),
    Unary("Floor", "floor", FLOATS),
    Unary("Ceil", "ceil", FLOATS),
    Unary("Round", "round", FLOATS, since=11),
    Unary("Sign", "sign", NUMERIC, since=9),
    Unary("Sqrt", "sqrt", FLOATS),
    Unary("Reciprocal", "reciprocal", FLOATS),
    Unary("IsNaN", "isnan", FLOATS, since=9, out_bool=True),
    Unary("Not", "not", frozenset({BOOL})),
    Unary("IsInf", "isinf", FLOATS, since=10, out_bool=True,
          attrs=(("detect_positive", 1.0), ("detect_negative", 1.0))),
    Unary("BitwiseNot", "bitwise_not", INTS, since=18),
] + [
    # libm functions: float64 in, rounded once; float64 inputs declined
    Unary(op, op.lower(), NARROW_FLOATS, since=since) for op, since in (
        ("Exp", 1), ("Log", 1), ("Sin", 7), ("Cos", 7), ("Tan", 7), ("Asin", 7), ("Acos", 7),
        ("Atan", 7), ("Sinh", 9), ("Cosh", 9), ("Tanh", 1), ("Asinh", 9), ("Acosh", 9),
        ("Atanh", 9), ("Erf", 9))
]


# ---------------------------------------------------------------- binary


class Binary(BoundRow):
    """``y = a op b`` with numpy broadcasting of up to 6 dims; one instance per row.

    :param out_bool: the result is bool (comparisons, logic) rather than the input dtype.
    """

    family = "binary"

    def __init__(self, op_type: str, symbol: str, dtypes: frozenset[np.dtype], *,
                 since: int = 1, out_bool: bool = False) -> None:
        super().__init__(op_type, since, Parity.EXACT)
        self.symbol = symbol
        self.dtypes = dtypes
        self.out_bool = out_bool

    def __repr__(self) -> str:
        return f"Binary({self.key})"

    def supports(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) != 2:
            return Support.no(f"needs two inputs, got {len(meta.inputs)}")
        a, b = meta.inputs
        if not (known(a) and known(b)):
            return Support.no("needs tensor inputs of known dtype and rank")
        assert a is not None and b is not None
        if a.dtype != b.dtype:
            return Support.no(f"inputs must share one dtype, got {a.dtype} and {b.dtype}")
        if a.dtype not in self.dtypes:
            why = (" (float64 pow may differ from numpy's by an ulp)"
                   if self.key.op_type == "Pow" and a.dtype in FLOAT64 else "")
            return Support.no(f"dtype {a.dtype} not in ({dtype_names(self.dtypes)}){why}")
        if meta.opset < 7 and tuple(a.shape) != tuple(b.shape):
            return Support.no(f"legacy broadcast (opset {meta.opset} < 7) of {a.shape} and "
                              f"{b.shape} is not implemented")
        if self.key.op_type == "Mod" and int(meta.attr("fmod", 0)) not in (0, 1):
            return Support.no(f"fmod={meta.attr('fmod')!r} is not 0 or 1")
        return _check_broadcast(a.shape, b.shape)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        a, b = meta.inputs
        assert a is not None and b is not None
        return [TensorSpec(BOOL if self.out_bool else a.dtype, broadcast_shape(a.shape, b.shape))]

    def bind(self, meta: NodeMeta) -> BoundElementwise:
        symbol = self.symbol
        if self.key.op_type == "Mod" and int(meta.attr("fmod", 0)) == 1:
            symbol = "fmod"
        return BoundElementwise(self, f"{symbol}_{suffix(meta.inputs[0].dtype)}")  # type: ignore[union-attr]


def _check_broadcast(*shapes: Sequence[Any]) -> Support:
    if not all(isinstance(d, int) for s in shapes for d in s):
        # symbolic dims: sizes are checked when planned; the collapsed layout of any
        # broadcast of these ranks fits the kernels' MAX_RANK
        rank = max((len(s) for s in shapes), default=0)
        return Support.YES if rank <= MAX_RANK else Support.no(
            f"rank {rank} with symbolic dims; the kernels take {MAX_RANK} dims")
    try:
        out = broadcast_shape(*shapes)
    except ValueError as exc:
        return Support.no(f"shapes {', '.join(map(str, map(tuple, shapes)))} do not "
                          f"broadcast: {exc}")
    try:
        broadcast_layout(out, shapes)
    except ValueError as exc:
        return Support.no(str(exc))
    return Support.YES


class BitShift(Binary):
    """BitShift: ``direction`` picks the symbol (``shl`` / ``shr``); numpy's shifts, where a
    count >= the width gives 0 (-1 for a right shift of a negative value)."""

    def supports(self, meta: NodeMeta) -> Support:
        direction = attr_str(meta.attr("direction", ""))
        if direction not in ("LEFT", "RIGHT"):
            return Support.no(f"direction={direction!r} is not 'LEFT' or 'RIGHT'")
        return super().supports(meta)

    def bind(self, meta: NodeMeta) -> BoundElementwise:
        symbol = "shl" if attr_str(meta.attr("direction", "")) == "LEFT" else "shr"
        return BoundElementwise(self, f"{symbol}_{suffix(meta.inputs[0].dtype)}")  # type: ignore[union-attr]


#: exponent dtypes of Pow with a float base of another dtype (kernels ``pow_<base>_<exp>``)
POW_EXPONENTS = NUMERIC


class Pow(Binary):
    """Pow: ONNX lets the exponent have another dtype than the base. A float16 / bfloat16 /
    float32 base with an exponent of :data:`POW_EXPONENTS` runs ``pow_<base>_<exp>``: both
    widened to float64 as the reference does, ``pow`` there, rounded once to the base's
    dtype. Integer bases with float exponents are declined: the reference truncates the
    float64 power to an integer, where a one-ulp libm difference below an exact integer
    would change the result."""

    def supports(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) != 2 or not all(known(s) for s in meta.inputs):
            return super().supports(meta)
        a, b = meta.inputs
        assert a is not None and b is not None
        if a.dtype == b.dtype:
            return super().supports(meta)
        if a.dtype not in NARROW_FLOATS or b.dtype not in POW_EXPONENTS:
            return Support.no(f"base {a.dtype} with exponent {b.dtype}: mixed dtypes run for "
                              f"a ({dtype_names(NARROW_FLOATS)}) base and a "
                              f"({dtype_names(POW_EXPONENTS)}) exponent")
        if meta.opset < 7 and tuple(a.shape) != tuple(b.shape):
            return Support.no(f"legacy broadcast (opset {meta.opset} < 7) of {a.shape} and "
                              f"{b.shape} is not implemented")
        return _check_broadcast(a.shape, b.shape)

    def bind(self, meta: NodeMeta) -> BoundElementwise:
        a, b = meta.inputs
        assert a is not None and b is not None
        if a.dtype != b.dtype:
            return BoundElementwise(self, f"pow_{suffix(a.dtype)}_{suffix(b.dtype)}")
        return super().bind(meta)


_BINARY: list[Binary] = [
    Binary("Add", "add", NUMERIC),
    Binary("Sub", "sub", NUMERIC),
    Binary("Mul", "mul", NUMERIC),
    Binary("Div", "div", NUMERIC),
    Binary("Mod", "mod", NUMERIC, since=10),
    Pow("Pow", "pow", NARROW_FLOATS | INTS),
    BitShift("BitShift", "shl", INTS, since=11),
    Binary("BitwiseAnd", "bitwise_and", INTS, since=18),
    Binary("BitwiseOr", "bitwise_or", INTS, since=18),
    Binary("BitwiseXor", "bitwise_xor", INTS, since=18),
    Binary("And", "and", frozenset({BOOL}), out_bool=True),
    Binary("Or", "or", frozenset({BOOL}), out_bool=True),
    Binary("Xor", "xor", frozenset({BOOL}), out_bool=True),
    Binary("Equal", "equal", ALL, out_bool=True),
    Binary("Less", "less", NUMERIC, out_bool=True),
    Binary("LessOrEqual", "less_equal", NUMERIC, out_bool=True, since=12),
    Binary("Greater", "greater", NUMERIC, out_bool=True),
    Binary("GreaterOrEqual", "greater_equal", NUMERIC, out_bool=True, since=12),
]


# ---------------------------------------------------------------- variadic


class Variadic(BoundRow):
    """Sum / Mean / Max / Min of one or more inputs with numpy broadcasting.

    Folded left to right as cpu_reference folds them: ``y = x0 op x1``, then ``y = y op xk``
    for each further input, in place, one binary launch per step, so every step rounds to
    the dtype as the reference's does (a chain of binary nodes). Mean then divides ``y`` by
    the input count rounded to the dtype, correctly rounded in the dtype like the
    reference's ``np.divide``. One input: Sum / Max / Min copy it, Mean divides it by 1.

    :param symbol: the binary kernel of one step (``add``, ``max``, ``min``).
    :param mean: divide by the number of inputs at the end.
    """

    family = "variadic"

    def __init__(self, op_type: str, symbol: str, dtypes: frozenset[np.dtype], *,
                 since: int = 1, mean: bool = False) -> None:
        super().__init__(op_type, since, Parity.EXACT)
        self.symbol = symbol
        self.dtypes = dtypes
        self.mean = mean
        # private rows the bound node launches through (never registered)
        self.pair = Binary(op_type, symbol, dtypes, since=since)
        self.divide = Unary(op_type, "div_by", dtypes, since=since) if mean else None

    def __repr__(self) -> str:
        return f"Variadic({self.key})"

    def supports(self, meta: NodeMeta) -> Support:
        specs = meta.inputs
        if not specs or not all(known(s) for s in specs):
            return Support.no("needs one or more tensor inputs of known dtype and rank")
        dts = [s.dtype for s in specs]  # type: ignore[union-attr]
        if len(set(dts)) > 1:
            return Support.no(f"inputs must share one dtype, got {', '.join(map(str, dts))}")
        dt = dts[0]
        if dt not in self.dtypes:
            return Support.no(f"dtype {dt} not in ({dtype_names(self.dtypes)})")
        return _check_broadcast(*(s.shape for s in specs))  # type: ignore[union-attr]

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        specs = meta.inputs
        assert all(s is not None for s in specs)
        return [TensorSpec(specs[0].dtype,  # type: ignore[union-attr]
                           broadcast_shape(*(s.shape for s in specs)))]  # type: ignore[union-attr]

    def bind(self, meta: NodeMeta) -> _BoundVariadic:
        dtype = meta.inputs[0].dtype  # type: ignore[union-attr]
        pair = BoundElementwise(self.pair, f"{self.symbol}_{suffix(dtype)}")
        divide = None
        if self.divide is not None:
            # the count as the reference divides by it: np.asarray(n, dtype), widened
            count = float(np.asarray(len(meta.inputs), dtype=dtype).astype(np.float64))
            divide = BoundElementwise(self.divide, f"div_by_{suffix(dtype)}", (count, 0.0))
        return _BoundVariadic(self, pair, divide)


class _BoundVariadic(CudaKernel):
    """A Variadic node: a chain of launches of one bound binary step (and Mean's division)
    into the output. Launches and device copies only (capture-safe). The planner never
    places an output over a live input, so stepping ``y = y op xk`` in place is safe: each
    element is read and written by the same thread."""

    def __init__(self, row: Variadic, pair: BoundElementwise,
                 divide: BoundElementwise | None) -> None:
        self.row = row
        self.key = row.key
        self.parity = row.parity
        self.pair = pair
        self.divide = divide

    def __repr__(self) -> str:
        return f"Variadic({self.key}, {self.pair.symbol})"

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        return self.row.infer_outputs(meta)

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        y = outputs[0]
        if prod(y.shape) == 0:
            return
        if len(inputs) == 1:
            if self.divide is not None:
                self.divide.execute_with_workspace(ctx, [inputs[0]], [y], None)
            else:  # one input has the output's shape
                copies.copy_dtod(int(y.ptr), int(inputs[0].ptr), y.nbytes, ctx.stream)
            return
        self.pair.execute_with_workspace(ctx, [inputs[0], inputs[1]], [y], None)
        for x in inputs[2:]:
            self.pair.execute_with_workspace(ctx, [y, x], [y], None)
        if self.divide is not None:
            self.divide.execute_with_workspace(ctx, [y], [y], None)


_VARIADIC: list[Variadic] = [
    Variadic("Max", "max", NUMERIC),
    Variadic("Min", "min", NUMERIC),
    Variadic("Sum", "add", NUMERIC),
    Variadic("Mean", "add", FLOATS, mean=True),
]


# ---------------------------------------------------------------- Where


class Where(BoundRow):
    """``cond ? x : y`` with three-way broadcasting; moves bytes (exact for every dtype)."""

    family = "where"

    def __init__(self, op_type: str = "Where", since: int = 9) -> None:
        super().__init__(op_type, since, Parity.EXACT)
        self.dtypes = ALL

    def __repr__(self) -> str:
        return f"Where({self.key})"

    def supports(self, meta: NodeMeta) -> Support:
        if len(meta.inputs) != 3 or not all(known(s) for s in meta.inputs):
            return Support.no("needs three tensor inputs of known dtype and rank")
        c, x, y = meta.inputs
        assert c is not None and x is not None and y is not None
        if c.dtype != BOOL:
            return Support.no(f"condition must be bool, got {c.dtype}")
        if x.dtype != y.dtype:
            return Support.no(f"X and Y must share one dtype, got {x.dtype} and {y.dtype}")
        if x.dtype not in self.dtypes:
            return Support.no(f"dtype {x.dtype} not in ({dtype_names(self.dtypes)})")
        return _check_broadcast(c.shape, x.shape, y.shape)

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        c, x, y = meta.inputs
        assert c is not None and x is not None and y is not None
        return [TensorSpec(x.dtype, broadcast_shape(c.shape, x.shape, y.shape))]

    def bind(self, meta: NodeMeta) -> BoundElementwise:
        return BoundElementwise(self, f"where_{suffix(meta.inputs[1].dtype)}")  # type: ignore[union-attr]


ROWS: Mapping[str, Any] = {k.key.op_type: k for k in (*_UNARY, *_BINARY, *_VARIADIC)}
KERNELS: list[Any] = [*_UNARY, *_BINARY, *_VARIADIC, Where()]
