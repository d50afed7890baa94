"""Elementwise ops: unary math, broadcasting binary ops, variadic ops, Where.

Parity (docs/PARITY.md): integer, bool, comparison, bitwise and IEEE basic arithmetic
(+ - * / sqrt, fmod) are exact, computed in the input dtype. Transcendental functions
(exp, log, trig, erf, pow) of float16 / bfloat16 / float32 are computed in float64 and
rounded once to the output dtype (see :mod:`.numerics`); float64 inputs use numpy's libm.
Formats numpy ufuncs do not know (bfloat16, float8) go through float64 and round once,
which is exact for every op of the first group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

import numpy as np

from onnx_ep.core.kernel import ExecutionContext, NodeMeta, Parity, WorkspaceRequirement
from onnx_ep.providers.cpu_reference.base import CpuKernel, FnKernel
from onnx_ep.providers.cpu_reference.formats import source_value
from onnx_ep.providers.cpu_reference.lowfloat import round_to, upcast
from onnx_ep.providers.cpu_reference.numerics import (
    ML_FLOATS,
    erf,
    is_float,
    is_int,
    is_signed_int,
    round_from_float64,
)

# dtype categories a table row accepts
FLOAT = "float"
SIGNED = "signed"      # signed ints and floats
NUMERIC = "numeric"    # ints and floats
INT = "int"
BOOL = "bool"
ANY = "any"            # numeric, bool and string


def _accepts(category: str, dt: np.dtype) -> bool:
    if category == ANY:
        return True
    if category == FLOAT:
        return is_float(dt)
    if category == SIGNED:
        return is_float(dt) or is_signed_int(dt)
    if category == NUMERIC:
        return is_float(dt) or is_int(dt)
    if category == INT:
        return is_int(dt)
    return dt == np.bool_


def check_dtype(kernel: CpuKernel, ctx: ExecutionContext, category: str,
                *arrays: np.ndarray) -> None:
    """Raise a NodeError unless every array is of ``category`` (and, for several, one dtype)."""
    for a in arrays:
        if not _accepts(category, a.dtype):
            raise kernel.fail(ctx, f"input dtype {a.dtype} is not supported; "
                                   f"{ctx.node.op_type} takes {category} tensors")
    if len({a.dtype for a in arrays}) > 1:
        got = ", ".join(str(a.dtype) for a in arrays)
        raise kernel.fail(ctx, f"inputs must share one dtype, got {got}")


# ------------------------------------------------------------------ unary


class Unary(CpuKernel):
    """``y = fn(x)``, one instance per table row.

    :param transcendental: evaluate float inputs in float64 and round once.
    """

    def __init__(self, op_type: str, fn: Callable[[np.ndarray], np.ndarray], *,
                 accepts: str = FLOAT, transcendental: bool = False, since: int = 1,
                 out_bool: bool = False) -> None:
        super().__init__(op_type, since=since, parity=Parity.EXACT)
        self.fn = fn
        self.accepts = accepts
        self.transcendental = transcendental
        self.out_bool = out_bool

    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        # no np.errstate here: the executor runs every step under errstate(all="ignore")
        check_dtype(self, ctx, self.accepts, x)
        if is_float(x.dtype) and (self.transcendental or x.dtype in ML_FLOATS):
            y = self.fn(source_value(x))
            if self.out_bool:
                return np.asarray(y, dtype=np.bool_)
            return round_from_float64(y, x.dtype)
        y = self.fn(x)
        return np.asarray(y, dtype=np.bool_ if self.out_bool else x.dtype)


class IsInf(CpuKernel):
    def run(self, ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
        check_dtype(self, ctx, FLOAT, x)
        x = source_value(x) if x.dtype in ML_FLOATS else x
        pos = bool(ctx.node.attr("detect_positive", 1))
        neg = bool(ctx.node.attr("detect_negative", 1))
        return np.asarray(np.isinf(x) & ((x > 0) & pos | (x < 0) & neg))


_UNARY = [
    Unary("Abs", np.abs, accepts=NUMERIC),
    Unary("Neg", np.negative, accepts=SIGNED),
    Unary("Floor", np.floor),
    Unary("Ceil", np.ceil),
    Unary("Round", np.rint, since=11),  # rint: halves to even, as ONNX asks
    Unary("Sign", np.sign, accepts=NUMERIC, since=9),
    Unary("Sqrt", np.sqrt),
    Unary("Reciprocal", np.reciprocal),
    Unary("IsNaN", np.isnan, since=9, out_bool=True),
    Unary("Not", np.logical_not, accepts=BOOL),
    Unary("BitwiseNot", np.invert, accepts=INT, since=18),
    IsInf("IsInf", since=10),
] + [
    Unary(op, fn, transcendental=True, since=since) for op, fn, since in (
        ("Exp", np.exp, 1), ("Log", np.log, 1),
        ("Sin", np.sin, 7), ("Cos", np.cos, 7), ("Tan", np.tan, 7),
        ("Asin", np.arcsin, 7), ("Acos", np.arccos, 7), ("Atan", np.arctan, 7),
        ("Sinh", np.sinh, 9), ("Cosh", np.cosh, 9), ("Tanh", np.tanh, 1),
        ("Asinh", np.arcsinh, 9), ("Acosh", np.arccosh, 9), ("Atanh", np.arctanh, 9),
        ("Erf", erf, 9),
    )
]


# ------------------------------------------------------------------ binary

BinaryFn = Callable[[ExecutionContext, np.ndarray, np.ndarray], np.ndarray]


def _int_zero_check(ctx: ExecutionContext, b: np.ndarray, what: str) -> None:
    if is_int(b.dtype) and np.any(b == 0):
        raise CpuKernel.fail(ctx, f"integer {what} by zero (divisor contains 0); "
                                  f"ONNX leaves it undefined")


def _div(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not is_int(a.dtype):
        return np.divide(a, b)
    _int_zero_check(ctx, b, "division")
    # ONNX integer Div truncates toward zero (C semantics); numpy floors
    q = np.floor_divide(a, b)
    if is_signed_int(a.dtype):
        r = a - q * b
        q = q + ((r != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    return q


def _mod(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fmod = int(ctx.node.attr("fmod", 0))
    if fmod not in (0, 1):
        raise CpuKernel.fail(ctx, f"attribute fmod must be 0 or 1, got {fmod}")
    _int_zero_check(ctx, b, "modulo")
    # fmod=1: sign of the dividend (C fmod); fmod=0: sign of the divisor (Python %),
    # whose float special cases (spelled out from opset 28 on) are numpy's np.mod
    return np.fmod(a, b) if fmod else np.mod(a, b)


def _bitshift(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    direction = ctx.node.attr("direction", "")
    if direction == "LEFT":
        return np.left_shift(a, b)
    if direction == "RIGHT":
        return np.right_shift(a, b)
    raise CpuKernel.fail(ctx, f"attribute direction must be 'LEFT' or 'RIGHT', got {direction!r}")


def _equal(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(np.equal(a, b), dtype=np.bool_)


def _plain(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> BinaryFn:
    def call(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fn(a, b)
    call.ufunc = fn  # type: ignore[attr-defined]
    return call


class _BoundUfunc:
    """A Binary row bound to one node whose dtypes were checked at placement.

    The hot path is one ufunc call: dtype validity was settled by ``supports``/``bind``,
    the executor already runs under ``np.errstate(all="ignore")``, and shapes that do
    not broadcast make numpy raise, which the executor reports as a NodeError naming
    the node.
    """

    __slots__ = ("key", "parity", "ufunc", "row")

    def __init__(self, row: Binary, ufunc: Callable[..., Any]) -> None:
        self.key, self.parity, self.ufunc, self.row = row.key, row.parity, ufunc, row

    def __repr__(self) -> str:
        return repr(self.row)

    def capture_support(self) -> Any:
        return self.row.capture_support()

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        y = self.ufunc(inputs[0], inputs[1])
        outputs[0] = y if type(y) is np.ndarray else np.asarray(y)


class Binary(CpuKernel):
    """``y = fn(a, b)`` with numpy (multidirectional) broadcasting; one instance per row.

    :param out_bool: the result is bool (comparisons) rather than the input dtype.
    """

    def __init__(self, op_type: str, fn: BinaryFn, *, accepts: str = NUMERIC,
                 out_bool: bool = False, since: int = 1) -> None:
        super().__init__(op_type, since=since, parity=Parity.EXACT)
        self.fn = fn
        self.accepts = accepts
        self.out_bool = out_bool

    def bind(self, meta: NodeMeta) -> Any:
        """The one-ufunc fast path when static dtypes settle every check of :meth:`run`."""
        ufunc = getattr(self.fn, "ufunc", None)
        specs = meta.inputs
        if ufunc is None or meta.opset < 7 or len(specs) != 2 or None in specs:
            return self
        da, db = specs[0].dtype, specs[1].dtype  # type: ignore[union-attr]
        if da != db or da in ML_FLOATS or not _accepts(self.accepts, da):
            return self
        return _BoundUfunc(self, ufunc)

    def run(self, ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        check_dtype(self, ctx, self.accepts, a, b)
        b = legacy_broadcast(self, ctx, a, b)
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError as exc:
            raise self.fail(ctx, f"cannot broadcast shapes {a.shape} and {b.shape}: {exc}")
        dtype = a.dtype
        if dtype in ML_FLOATS:
            # exact for + - * / and comparisons: float64 holds > 2p+2 bits of any of them
            a, b = source_value(a), source_value(b)
        y = self.fn(ctx, a, b)          # under the executor's errstate(all="ignore")
        if self.out_bool:
            return np.asarray(y, dtype=np.bool_)
        if dtype in ML_FLOATS:
            return round_from_float64(y, dtype)
        return np.asarray(y, dtype=dtype)


def legacy_broadcast(kernel: CpuKernel, ctx: ExecutionContext, a: np.ndarray,
                     b: np.ndarray) -> np.ndarray:
    """Before opset 7 arithmetic ops broadcast ``b`` only when ``broadcast=1``, at ``axis``."""
    if ctx.node.opset >= 7 or "broadcast" not in ctx.node.attrs and a.shape == b.shape:
        return b
    if not ctx.node.attr("broadcast", 0):
        if a.shape != b.shape:
            raise kernel.fail(ctx, f"shapes {a.shape} and {b.shape} differ and "
                                   f"broadcast=0 (opset {ctx.node.opset})")
        return b
    axis = ctx.node.attr("axis")
    if axis is None or b.ndim == 0:
        return b
    axis = axis + a.ndim if axis < 0 else axis
    if not 0 <= axis <= a.ndim - b.ndim:
        raise kernel.fail(ctx, f"axis {axis} cannot place a rank-{b.ndim} B in rank-{a.ndim} A")
    return b.reshape(b.shape + (1,) * (a.ndim - axis - b.ndim))


class Pow(CpuKernel):
    """``x ** y``; the exponent may have another dtype; the result has the base's dtype."""

    def run(self, ctx: ExecutionContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        check_dtype(self, ctx, NUMERIC, x)
        check_dtype(self, ctx, NUMERIC, y)
        y = legacy_broadcast(self, ctx, x, y)
        try:
            shape = np.broadcast_shapes(x.shape, y.shape)
        except ValueError as exc:
            raise self.fail(ctx, f"cannot broadcast shapes {x.shape} and {y.shape}: {exc}")
        if x.dtype == np.float32 and y.size == 1 and upcast(y).reshape(-1)[0] == 2:
            # the float64 square of a float32 is exact and pow returns an exactly
            # representable result unchanged, so pow rounded once is the correctly rounded
            # float32 product (numpy's AVX-512 pow: the same bits for all 2**32 inputs,
            # NaN payloads included)
            z = np.empty(x.shape, np.float32)
            np.multiply(x, x, out=z)
            return z if z.shape == shape else np.broadcast_to(z, shape).copy()
        with np.errstate(all="ignore"):
            if is_float(x.dtype):
                # upcast, not source_value: an int64 exponent converts as it always did
                xs, ys = source_value(x), upcast(y).astype(np.float64)
                z = np.power(xs, ys)
                # numpy computes a power of 0.5 as sqrt, whose -inf and -0 differ from C99
                # pow (and onnxruntime): pow(-inf, 0.5) = +inf, pow(-0, 0.5) = +0
                half = ys == 0.5
                if np.any(half):
                    z = np.where(half & (xs == -np.inf), np.inf, z)
                    z = np.where(half & (xs == 0), 0.0, z)
                return np.broadcast_to(round_from_float64(z, x.dtype), shape).copy()
            if is_int(y.dtype):
                # integer powers stay integer (float64 would lose int64 precision)
                xi, yi = x.astype(np.int64), y.astype(np.int64)
                z = np.power(xi, np.maximum(yi, 0))
                if np.any(yi < 0):
                    neg = np.trunc(np.power(xi.astype(np.float64), yi.astype(np.float64)))
                    z = np.where(yi < 0, np.nan_to_num(neg).astype(np.int64), z)
            else:
                z = np.trunc(np.power(x.astype(np.float64), source_value(y)))
        return np.asarray(np.broadcast_to(z, shape).astype(x.dtype))


_BINARY = [
    Binary("Add", _plain(np.add)),
    Binary("Sub", _plain(np.subtract)),
    Binary("Mul", _plain(np.multiply)),
    Binary("Div", _div),
    Binary("Mod", _mod, since=10),
    Binary("BitShift", _bitshift, accepts=INT, since=11),
    Binary("BitwiseAnd", _plain(np.bitwise_and), accepts=INT, since=18),
    Binary("BitwiseOr", _plain(np.bitwise_or), accepts=INT, since=18),
    Binary("BitwiseXor", _plain(np.bitwise_xor), accepts=INT, since=18),
    Binary("And", _plain(np.logical_and), accepts=BOOL, out_bool=True),
    Binary("Or", _plain(np.logical_or), accepts=BOOL, out_bool=True),
    Binary("Xor", _plain(np.logical_xor), accepts=BOOL, out_bool=True),
    Binary("Equal", _equal, accepts=ANY, out_bool=True),
    Binary("Less", _plain(np.less), out_bool=True),
    Binary("LessOrEqual", _plain(np.less_equal), out_bool=True, since=12),
    Binary("Greater", _plain(np.greater), out_bool=True),
    Binary("GreaterOrEqual", _plain(np.greater_equal), out_bool=True, since=12),
    Pow("Pow", since=1, parity=Parity.EXACT),
]


# ------------------------------------------------------------------ variadic


class Variadic(CpuKernel):
    """Max / Min / Sum / Mean over any number of broadcast inputs, folded left to right."""

    def __init__(self, op_type: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], *,
                 accepts: str = NUMERIC, mean: bool = False) -> None:
        super().__init__(op_type, since=1, parity=Parity.EXACT)
        self.fn = fn
        self.accepts = accepts
        self.mean = mean

    def run(self, ctx: ExecutionContext, *xs: Any) -> np.ndarray:
        arrays = [x for x in xs if x is not None]
        if not arrays:
            raise self.fail(ctx, "needs at least one input")
        check_dtype(self, ctx, self.accepts, *arrays)
        dtype = arrays[0].dtype
        try:
            shape = np.broadcast_shapes(*(x.shape for x in arrays))
        except ValueError as exc:
            shapes = ", ".join(str(x.shape) for x in arrays)
            raise self.fail(ctx, f"cannot broadcast shapes {shapes}: {exc}")

        def step(fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 acc: np.ndarray, x: np.ndarray) -> np.ndarray:
            # every step rounds to the input dtype, like a chain of binary nodes
            if dtype in ML_FLOATS:
                return round_from_float64(fn(source_value(acc), source_value(x)), dtype)
            return np.asarray(fn(acc, x), dtype=dtype)

        with np.errstate(all="ignore"):
            y = reduce(lambda acc, x: step(self.fn, acc, x), arrays[1:], arrays[0])
            if self.mean:
                y = step(np.divide, y, round_to(len(arrays), dtype))
        return np.broadcast_to(y, shape).copy()


_VARIADIC = [
    Variadic("Max", np.maximum),
    Variadic("Min", np.minimum),
    Variadic("Sum", np.add),
    Variadic("Mean", np.add, accepts=FLOAT, mean=True),
]


def _where(ctx: ExecutionContext, cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if cond.dtype != np.bool_:
        raise CpuKernel.fail(ctx, f"condition must be bool, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise CpuKernel.fail(ctx, f"X and Y must share one dtype, got {x.dtype} and {y.dtype}")
    try:
        return np.asarray(np.where(cond, x, y), dtype=x.dtype)
    except ValueError as exc:
        raise CpuKernel.fail(ctx, f"cannot broadcast shapes {cond.shape}, {x.shape}, "
                                  f"{y.shape}: {exc}")


KERNELS: list[CpuKernel] = [*_UNARY, *_BINARY, *_VARIADIC, FnKernel("Where", _where, since=9)]
