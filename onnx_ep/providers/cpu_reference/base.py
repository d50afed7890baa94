"""Base classes for cpu_reference kernels: numpy bodies behind the Kernel protocol.

A cpu_reference kernel only writes :meth:`CpuKernel.run`: it receives numpy
arrays (``None`` for missing optional inputs) and returns one array or a tuple
of arrays, one per node output. The base class supplies the protocol methods.

The functions after the classes read and check inputs that several op families
share (axes, integer lists, indices, one float dtype for all inputs); each raises
a :exc:`NodeError` naming the node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import (
    CaptureSupport,
    ExecutionContext,
    NodeMeta,
    OpKey,
    Parity,
    Support,
    WorkspaceRequirement,
    WorkspaceView,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cpu_reference.numerics import is_float

_HOST_ONLY = CaptureSupport.unsupported("cpu_reference runs numpy on the host")

#: sequential products / dot products reordered by parallel implementations.
PRODUCT_PARITY = Parity.tolerance(rtol=1e-5, atol=1e-6)


class CpuKernel:
    """A numpy kernel. Subclasses set ``key`` (or pass ``op_type``) and override :meth:`run`.

    :param op_type: operator name; alternatively set ``key`` as a class attribute.
    :param since: first opset this kernel implements.
    :param domain: operator domain (``""`` is ai.onnx).
    :param parity: the promise other providers are held to *by* this kernel; the
        reference itself is the oracle, so this documents how values are computed.
    :param dtypes: if given, the input-0 dtypes this kernel accepts.
    """

    key: OpKey
    parity: Parity = Parity.EXACT
    dtypes: frozenset[np.dtype] | None = None

    def __init__(self, op_type: str | None = None, *, since: int = 1, domain: str = "",
                 parity: Parity | None = None,
                 dtypes: Sequence[Any] | None = None) -> None:
        if op_type is not None:
            self.key = OpKey(domain, op_type, since)
        if parity is not None:
            self.parity = parity
        if dtypes is not None:
            self.dtypes = frozenset(np.dtype(d) for d in dtypes)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key})"

    # -- protocol -----------------------------------------------------------------
    def supports(self, meta: NodeMeta) -> Support:
        if self.dtypes is not None and meta.inputs and meta.inputs[0] is not None:
            if meta.inputs[0].dtype not in self.dtypes:
                names = ", ".join(sorted(str(d) for d in self.dtypes))
                return Support.no(f"dtype {meta.inputs[0].dtype} not in ({names})")
        return Support.YES

    def capture_support(self) -> CaptureSupport:
        return _HOST_ONLY

    def workspace_requirement(self, meta: NodeMeta) -> WorkspaceRequirement:
        return WorkspaceRequirement.NONE

    def execute_with_workspace(self, ctx: ExecutionContext, inputs: Sequence[Any],
                               outputs: list[Any], workspace: WorkspaceView | None) -> None:
        result = self.run(ctx, *inputs)
        if isinstance(result, tuple):
            outputs[: len(result)] = result
        else:
            outputs[0] = result

    # -- to override --------------------------------------------------------------
    def run(self, ctx: ExecutionContext, *inputs: Any) -> Any:
        """Compute the node's outputs from numpy inputs. Override this."""
        raise NotImplementedError(f"{type(self).__name__}.run")

    # -- helpers for subclasses ---------------------------------------------------
    @staticmethod
    def fail(ctx: ExecutionContext, message: str) -> NodeError:
        """Build a :exc:`NodeError` naming the node; ``raise self.fail(ctx, "...")``."""
        return NodeError(message, node=ctx.node.name, op_type=ctx.node.op_type)


class FnKernel(CpuKernel):
    """A table-row kernel: ``run`` calls ``fn(ctx, *inputs)``. Used by op families."""

    def __init__(self, op_type: str, fn: Callable[..., Any], **kw: Any) -> None:
        super().__init__(op_type, **kw)
        self.fn = fn

    def run(self, ctx: ExecutionContext, *inputs: Any) -> Any:
        return self.fn(ctx, *inputs)


def normalize_axis(ctx: ExecutionContext, axis: int, rank: int) -> int:
    """Map a possibly negative axis into ``[0, rank)`` or raise a NodeError naming the node."""
    if not -rank <= axis < max(rank, 1):
        raise CpuKernel.fail(ctx, f"axis {axis} is out of range for rank {rank} "
                                  f"(expected {-rank} <= axis < {rank})")
    return axis + rank if axis < 0 else axis


def normalize_axes(ctx: ExecutionContext, axes: list[int], rank: int,
                   what: str = "axes") -> list[int]:
    """Normalize ``axes`` into ``[0, rank)``; duplicates are a NodeError."""
    out = [normalize_axis(ctx, a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise CpuKernel.fail(ctx, f"{what} {axes} contain duplicates")
    return out


def int_list(ctx: ExecutionContext, value: Any, what: str) -> list[int]:
    """A 1-D (or scalar) integer tensor or attribute as a list of Python ints."""
    arr = np.asarray(value)
    if arr.ndim > 1:
        raise CpuKernel.fail(ctx, f"{what} must be 1-D, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise CpuKernel.fail(ctx, f"{what} must be integers, got dtype {arr.dtype}")
    return [int(v) for v in arr.reshape(-1)]


def axes_arg(ctx: ExecutionContext, axes_input: Any, since_input: int,
             attr: str = "axes") -> list[int] | None:
    """Axes from the attribute before opset ``since_input``, from the input after."""
    if ctx.node.opset < since_input:
        value = ctx.node.attr(attr)
        return None if value is None else [int(a) for a in value]
    if axes_input is None:
        return None
    return int_list(ctx, axes_input, attr)


def checked_index(ctx: ExecutionContext, idx: np.ndarray, dim: int, what: str) -> np.ndarray:
    """``idx`` as int64 in ``[0, dim)``; values outside ``[-dim, dim-1]`` are a NodeError."""
    idx = np.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise CpuKernel.fail(ctx, f"{what} must be integers, got dtype {idx.dtype}")
    idx = idx.astype(np.int64)
    bad = (idx < -dim) | (idx >= dim)
    if bad.any():
        first = int(idx[bad].reshape(-1)[0])
        raise CpuKernel.fail(ctx, f"{what} value {first} is out of range for a dim of size "
                                  f"{dim} (expected {-dim} <= index <= {dim - 1})")
    return np.where(idx < 0, idx + dim, idx)


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an operand of ``shape`` broadcasts to ``target`` without enlarging it (a bias
    or a scale added into a result keeps the result's shape)."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def check_same_dtype(kernel: CpuKernel, ctx: ExecutionContext,
                     **arrays: np.ndarray | None) -> np.dtype:
    """The common dtype of the given (present) inputs, or a NodeError naming the odd one."""
    present = {k: v for k, v in arrays.items() if v is not None}
    first, ref = next(iter(present.items()))
    for name, a in present.items():
        if a.dtype != ref.dtype:
            raise kernel.fail(ctx, f"input '{name}' is {a.dtype} but '{first}' is "
                                   f"{ref.dtype}; they must match")
    if not is_float(ref.dtype):
        raise kernel.fail(ctx, f"{ctx.node.op_type} takes float tensors, got {ref.dtype}")
    return ref.dtype
