"""CUDA Cast and CastLike between float32, float16, bfloat16, float64, int64, int32, int8,
uint8 and bool (``cast.cu``, symbols ``cast_<src>_<dst>``).

Parity: exact against cpu_reference/cast.py, including the values ONNX leaves undefined
(float -> int of NaN or out of range), which the kernels reproduce as numpy on x86 gives
them (see cast.cu). String and float8 / int4 types are declined (they fall back).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from onnx_ep.core.dtypes import np_dtype
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
from onnx_ep.providers.cuda.kernels.elementwise import (
    BF16,
    BoundLaunch,
    _numel,
    dtype_names,
    launch_geometry,
    suffix,
)

SOURCE = "cast"
#: the dtypes cast.cu instantiates (the elementwise family takes more integers)
DTYPES: frozenset[np.dtype] = frozenset(np.dtype(t) for t in (
    np.float32, np.float16, BF16, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_))


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

    def __init__(self, row: Cast, src: np.dtype, dst: np.dtype) -> None:
        super().__init__(row, f"cast_{suffix(src)}_{suffix(dst)}")
        self.dst = dst
        #: prebuilt launches by (stream, input and output pointers, shape)
        self._launches: dict[tuple[Any, ...], Any] = {}

    def __repr__(self) -> str:
        return f"Cast({self.key}, {self.symbol})"

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        # steady state: one dict lookup and one driver call (a plan's pointers are fixed)
        x, y = inputs[0], outputs[0]
        key = (ctx.stream, x.ptr, y.ptr, y.shape)
        rec = self._launches.get(key)
        if rec is None:
            rec = self.prepare(ctx.stream, x, y, key)
        rec()

    def prepare(self, stream: Any, x: Any, y: Any, key: tuple[Any, ...]) -> Any:
        """Build (and remember under ``key``) the launch casting ``x`` into ``y``."""
        from onnx_ep.providers.cuda import runtime

        n = _numel(y.shape)
        if n == 0:
            return runtime.remember(self._launches, key, runtime.no_launch,
                                    runtime.LAUNCHES_PER_NODE)
        grid, block = launch_geometry(n)
        rec = runtime.prepare(self.function(y.device), grid, block,
                              [(int(x.ptr), ctypes.c_void_p), (int(y.ptr), ctypes.c_void_p),
                               (n, ctypes.c_int64)], stream)
        return runtime.remember(self._launches, key, rec, runtime.LAUNCHES_PER_NODE)


class Cast:
    """Cast (target from attribute ``to``) or CastLike (target = dtype of input 1)."""

    def __init__(self, op_type: str, since: int) -> None:
        self.key = OpKey("", op_type, since)
        self.parity = Parity.EXACT
        self.like = op_type == "CastLike"

    def __repr__(self) -> str:
        return f"Cast({self.key})"

    def target(self, meta: NodeMeta) -> np.dtype | None:
        if self.like:
            spec = meta.inputs[1] if len(meta.inputs) > 1 else None
            return None if spec is None else spec.dtype
        return target_dtype(meta.attr("to"))

    def supports(self, meta: NodeMeta) -> Support:
        if not meta.inputs or meta.inputs[0] is None:
            return Support.no("needs a tensor input of known dtype and rank")
        src = meta.inputs[0].dtype  # type: ignore[union-attr]
        dst = self.target(meta)
        if dst is None:
            return Support.no(f"target type {meta.attr('to')!r} is not supported (string or "
                              f"unknown)")
        for what, dt in (("source", src), ("target", dst)):
            if dt not in DTYPES:
                return Support.no(f"{what} dtype {dt} not in ({dtype_names(DTYPES)})")
        return Support.YES

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec]:
        x = meta.inputs[0]
        dst = self.target(meta)
        assert x is not None and dst is not None
        return [TensorSpec(dst, x.shape)]

    def bind(self, meta: NodeMeta) -> _BoundCast:
        dst = self.target(meta)
        assert dst is not None and meta.inputs[0] is not None
        return _BoundCast(self, meta.inputs[0].dtype, dst)

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.SUPPORTED

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: Any) -> None:
        self.bind(ctx.node).execute_with_workspace(ctx, inputs, outputs, workspace)


KERNELS: list[Any] = [Cast("Cast", since=1), Cast("CastLike", since=15)]
