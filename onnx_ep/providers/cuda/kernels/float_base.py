"""Shared base of the float32 / float16 / bfloat16 kernel families (gemm, conv, pool).

:class:`FloatKernel` supplies the protocol methods every such kernel needs:
a dtype check in ``supports``, ``bind`` returning a per-node copy whose
``parity`` is the promise for the node's dtype, capture support (these kernels
only launch on ``ctx.stream``), and helpers to launch ``.cu`` symbols named
``<op>_<suffix>``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnx_ep.core.kernel import (
    NodeMeta,
    OpKey,
    Parity,
    Support,
    TensorSpec,
    WorkspaceRequirement,
)
from onnx_ep.errors import NodeError
from onnx_ep.providers.cuda.kernels.device_kernel import BF16, LaunchOnly, grid_1d, suffixes_of
from onnx_ep.providers.cuda.kernels.device_kernel import launch as launch_grid

#: symbol suffix per dtype name (kernels/*.cu instantiate ``<op>_<suffix>``), from
#: device_kernel.TYPES
SUFFIX = {d.name: sfx for d, sfx in suffixes_of(
    d for d in (np.float32, np.float16, BF16) if d is not None).items()}
FLOAT_NAMES = tuple(SUFFIX)
#: threads per block of the grid-stride kernels
BLOCK = 256


def dtype_name(dtype: Any) -> str:
    return np.dtype(dtype).name


def suffix(dtype: Any) -> str:
    """``"f32"`` / ``"f16"`` / ``"bf16"``; :raises NodeError: for other dtypes."""
    name = dtype_name(dtype)
    try:
        return SUFFIX[name]
    except KeyError:
        raise NodeError(f"dtype {name} is not one of {', '.join(FLOAT_NAMES)}") from None


def static_shape(spec: TensorSpec | None) -> tuple[int, ...] | None:
    """The spec's shape when every dim is a known int, else ``None``."""
    if spec is None or not spec.is_static:
        return None
    return tuple(int(d) for d in spec.shape)


class FloatKernel(LaunchOnly):
    """Base of a float kernel: set ``key``, optionally ``parities``, override the rest.

    :param op_type: the ONNX operator. :param since: first opset implemented.
    :param parities: promise per dtype name; ``bind`` picks the node's.
    """

    parity: Parity = Parity.EXACT
    parities: dict[str, Parity] | None = None

    def __init__(self, op_type: str, since: int = 1,
                 parities: dict[str, Parity] | None = None) -> None:
        self.key = OpKey("", op_type, since)
        if parities is not None:
            self.parities = dict(parities)
            self.parity = self.parities["float32"]

    def __repr__(self) -> str:
        return f"cuda.{type(self).__name__}({self.key.op_type})"

    # ------------------------------------------------------------ protocol
    def supports(self, meta: NodeMeta) -> Support:
        """float32 / float16 / bfloat16, every float input of one dtype; then :meth:`check`."""
        x = meta.inputs[0] if meta.inputs else None
        if x is None:
            return Support.no("input 0 is missing")
        name = dtype_name(x.dtype)
        if name not in SUFFIX:
            return Support.no(f"dtype {name} is not one of {', '.join(FLOAT_NAMES)}")
        for i, spec in enumerate(meta.inputs):
            if spec is not None and dtype_name(spec.dtype) != name:
                return Support.no(f"input {i} is {dtype_name(spec.dtype)} but input 0 is {name}")
        return self.check(meta)

    def check(self, meta: NodeMeta) -> Support:
        """Op-specific acceptance (shapes, attributes). Override."""
        return Support.YES

    def bind(self, meta: NodeMeta) -> FloatKernel:
        """A per-node copy whose ``parity`` is the promise for this node's dtype."""
        bound = copy.copy(self)
        x = meta.inputs[0] if meta.inputs else None
        if self.parities is not None and x is not None:
            bound.parity = self.parities.get(dtype_name(x.dtype), self.parity)
        return bound

    def infer_outputs(self, meta: NodeMeta) -> list[TensorSpec | None]:
        return [None] * max(1, len(meta.output_names))

    # ------------------------------------------------------------ helpers
    @staticmethod
    def fail(meta: NodeMeta, message: str) -> NodeError:
        return NodeError(message, node=meta.name, op_type=meta.op_type)

    @staticmethod
    def plan_time(meta: NodeMeta, fn: Callable[[], WorkspaceRequirement]) -> WorkspaceRequirement:
        """``fn()``, or NONE when ``meta``'s shapes are not static yet."""
        if any(s is not None and not s.is_static for s in meta.inputs):
            return WorkspaceRequirement.NONE
        return fn()


def function(source: str, op: str, dtype: Any, ordinal: int) -> Any:
    """The ``<op>_<suffix>`` kernel of ``kernels/<source>.cu`` on device ``ordinal``."""
    from onnx_ep.providers.cuda import nvrtc, runtime

    return nvrtc.get_function(source, f"{op}_{suffix(dtype)}", runtime.get_device(ordinal))


def launch(fn: Any, n: int, args: Sequence[tuple[Any, Any]], stream: Any,
           grid: tuple[int, int, int] | None = None, block: int = BLOCK) -> None:
    """Launch a grid-stride kernel over ``n`` items on ``stream`` (nothing for ``n == 0``).

    Through :func:`device_kernel.launch`: arguments seen before reuse a prebuilt launch.
    """
    if n <= 0:
        return
    launch_grid(fn, grid or grid_1d(n, block), (block, 1, 1), args, stream)
