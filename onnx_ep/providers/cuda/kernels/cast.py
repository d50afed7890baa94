"""CUDA Cast and CastLike between every numeric type of cpu_reference/cast.py: float32,
float16, bfloat16, float64, int64, int32, int16, int8, uint64, uint32, uint16, uint8, bool,
the float8s (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0), float4e2m1 and int4, uint4, int2,
uint2 (``cast.cu``, symbols ``cast_<src>_<dst>``). Sub-byte types are one element per byte,
as ml_dtypes arrays hold them. ``saturate`` (opset 19+) and ``round_mode`` (float8e8m0)
are kernel arguments.

Parity: exact against cpu_reference/cast.py, including the values ONNX leaves undefined
(float -> int of NaN or out of range), which the kernels reproduce as numpy on x86 gives
them (see cast.cu). One exception the reference itself makes unreproducible: float32 /
float64 / bfloat16 / float8 -> uint32 of NaN, +-inf or values outside (-2^31, 2^32) is
numpy's vectorized loop's result, but numpy's scalar tail (the last n % 4 elements, all of
a short array) gives another. String is declined (it falls back).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from onnx_ep.core.dtypes import np_dtype
from onnx_ep.core.kernel import (
    ExecutionContext,
    NodeMeta,
    Parity,
    Support,
    TensorSpec,
)
from onnx_ep.providers.cuda.kernels import elementwise
from onnx_ep.providers.cuda.kernels.base import (
    I32,
    I64,
    PTR,
    BoundLaunch,
    BoundRow,
    CudaKernel,
    attr_str,
    dtype_names,
    flat_geometry,
    launch_geometry,
    suffixes_of,
)

SOURCE = "cast"
#: numpy dtype -> symbol suffix in cast.cu (every pair is instantiated), from
#: base.TYPES
SUFFIXES: dict[np.dtype, str] = suffixes_of((
    np.float32, np.float16, ml_dtypes.bfloat16, np.float64,
    np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32, np.uint16, np.uint8,
    np.bool_,
    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e8m0fnu,
    ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2))
#: the dtypes cast.cu instantiates
DTYPES: frozenset[np.dtype] = frozenset(SUFFIXES)
#: ``round_mode`` (float8e8m0 targets) -> the kernels' code
ROUND_MODES = {"up": 0, "down": 1, "nearest": 2}


def target_dtype(to: Any) -> np.dtype | None:
    """numpy dtype of Cast's ``to`` (an ONNX element type, or its name before opset 6).

    ``None`` for STRING and for values that name no element type.
    """
    try:
        if isinstance(to, (str, bytes)):
            name = to.decode() if isinstance(to, bytes) else to
            to = onnx.TensorProto.DataType.Value(name.upper())
        if int(to) == onnx.TensorProto.STRING:
            return None
        return np_dtype(int(to))
    except (KeyError, ValueError, TypeError):
        return None


class _BoundCast(BoundLaunch):
    """A Cast node with its source and target dtypes settled; launch only (capture-safe)."""

    source = SOURCE

    def __init__(self, row: Cast, src: np.dtype, dst: np.dtype, *, saturate: bool = True,
                 round_mode: str = "up") -> None:
        super().__init__(row, f"cast_{SUFFIXES[np.dtype(src)]}_{SUFFIXES[np.dtype(dst)]}")
        self.dst = dst
        #: cast.cu's flat path (16-byte packs) runs between the elementwise family's
        #: dtypes; the byte formats (float8, int4, ...) keep the plain loop
        self.flat_sizes = ((np.dtype(src).itemsize, np.dtype(dst).itemsize)
                           if np.dtype(src) in elementwise.DTYPES
                           and np.dtype(dst) in elementwise.DTYPES else None)
        self.saturate = int(bool(saturate))
        self.round_mode = ROUND_MODES[round_mode]

    def launch_key(self, stream: Any, inputs: Sequence[Any], y: Any) -> tuple[Any, ...]:
        """The stream, input and output pointers and the shape."""
        return (stream, inputs[0].ptr, y.ptr, y.shape)

    def geometry(self, n: int, inputs: Sequence[Any], y: Any
                 ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        flat = None if self.flat_sizes is None else flat_geometry(
            n, [(inputs[0].ptr, self.flat_sizes[0], False)], (y.ptr, self.flat_sizes[1]),
            lambda: self.wave(y.device))
        return flat if flat is not None else launch_geometry(n)

    def arguments(self, n: int, inputs: Sequence[Any], y: Any) -> list[tuple[Any, Any]]:
        return [(int(inputs[0].ptr), PTR), (int(y.ptr), PTR), (n, I64), (self.saturate, I32),
                (self.round_mode, I32)]


class Cast(BoundRow):
    """Cast (target from attribute ``to``) or CastLike (target = dtype of input 1)."""

    def __init__(self, op_type: str, since: int) -> None:
        super().__init__(op_type, since, Parity.EXACT)
        self.like = op_type == "CastLike"

    def __repr__(self) -> str:
        return f"Cast({self.key})"

    def target(self, meta: NodeMeta) -> np.dtype | None:
        if self.like:
            # input 1's dtype; where its spec is unknown (a value of unknown rank), the
            # inferred output's, which onnx types from input 1 even then
            spec = meta.inputs[1] if len(meta.inputs) > 1 else None
            if spec is None and meta.outputs:
                spec = meta.outputs[0]
            return None if spec is None else np.dtype(spec.dtype)
        return target_dtype(meta.attr("to"))

    def supports(self, meta: NodeMeta) -> Support:
        if not meta.inputs or meta.inputs[0] is None:
            return Support.no("needs a tensor input of known dtype and rank")
        src = meta.inputs[0].dtype  # type: ignore[union-attr]
        dst = self.target(meta)
        if dst is None:
            return Support.no("the dtype of input 1 (and of the output) is unknown" if self.like
                              else f"target type {meta.attr('to')!r} is string or unknown")
        for what, dt in (("source", src), ("target", dst)):
            if np.dtype(dt) not in DTYPES:
                return Support.no(f"{what} dtype {dt} not in ({dtype_names(DTYPES)})")
        mode = attr_str(meta.attr("round_mode", "up"))
        if mode not in ROUND_MODES:
            return Support.no(f"round_mode {mode!r} not in {tuple(ROUND_MODES)}")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        x = meta.inputs[0]
        dst = self.target(meta)
        assert x is not None and dst is not None
        return [TensorSpec(dst, x.shape)]

    def bind(self, meta: NodeMeta) -> _BoundCast:
        dst = self.target(meta)
        assert dst is not None and meta.inputs[0] is not None
        return _BoundCast(self, meta.inputs[0].dtype, dst,
                          saturate=bool(int(meta.attr("saturate", 1))),
                          round_mode=attr_str(meta.attr("round_mode", "up")))


#: bits per element of the types BitCast may reinterpret (ONNX widths, not itemsizes)
_SUB_BYTE_BITS = {np.dtype(ml_dtypes.int4): 4, np.dtype(ml_dtypes.uint4): 4,
                  np.dtype(ml_dtypes.float4_e2m1fn): 4, np.dtype(ml_dtypes.int2): 2,
                  np.dtype(ml_dtypes.uint2): 2}


def _bits(dt: np.dtype) -> int:
    return _SUB_BYTE_BITS.get(np.dtype(dt), np.dtype(dt).itemsize * 8)


class BitCast(CudaKernel):
    """BitCast: output 0 is a view of input 0's bytes as ``to`` (equal bit widths; no
    launch). Sub-byte types keep their value in a byte's low bits, so equal widths mean
    equal bytes, as in cpu_reference (which masks to the width: a no-op on such bytes)."""

    aliases = {0: 0}

    def __init__(self, op_type: str, since: int) -> None:
        super().__init__(op_type, since, Parity.EXACT)

    def __repr__(self) -> str:
        return f"BitCast({self.key})"

    def supports(self, meta: NodeMeta) -> Support:
        if not meta.inputs or meta.inputs[0] is None:
            return Support.no("needs a tensor input of known dtype and rank")
        src = np.dtype(meta.inputs[0].dtype)  # type: ignore[union-attr]
        dst = target_dtype(meta.attr("to"))
        if dst is None or src.kind in "OUS":
            return Support.no(f"to={meta.attr('to')!r} / input {src}: strings or unknown types")
        if _bits(src) != _bits(dst):
            return Support.no(f"{src} ({_bits(src)} bits) and {dst} ({_bits(dst)} bits) "
                              f"differ in width")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        x = meta.inputs[0]
        dst = target_dtype(meta.attr("to"))
        assert x is not None and dst is not None
        return [TensorSpec(dst, x.shape)]

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        spec = outputs[0]
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"BitCast expects its planned TensorSpec as output 0, got "
                            f"{type(spec).__name__}")
        outputs[0] = inputs[0].view(spec.dtype, spec.shape)


KERNELS: list[Any] = [Cast("Cast", since=1), Cast("CastLike", since=15),
                      BitCast("BitCast", since=26)]
