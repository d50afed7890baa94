"""Sliding-window geometry shared by Conv and the pooling ops of every provider.

One place computes pads (explicit or ``auto_pad``), output sizes (``ceil_mode``
included), the padded input, and the two ways to read windows: the strided, dilated
patch view (Conv's im2col) and one strided slice per kernel tap (pooling reduces
tap by tap: prod(kernel) vectorized passes over the output), so that Conv's
workspace size and its execution agree by construction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs
import numpy as np

from onnx_ep.core.kernel import NodeMeta
from onnx_ep.errors import NodeError


def node_error(meta: NodeMeta, message: str) -> NodeError:
    """A :exc:`NodeError` naming ``meta``'s node (usable at plan time and at run time)."""
    return NodeError(message, node=meta.name, op_type=meta.op_type)


@attrs.frozen
class WindowGeometry:
    """Where each window of an N-d sliding operation sits.

    :ivar kernel, strides, dilations: per spatial axis.
    :ivar pads_begin, pads_end: padding the op's definition adds (counted by
        ``count_include_pad``).
    :ivar extra_end: extra padding at the end so that ``ceil_mode`` windows fit
        (never counted as padding by averaging ops).
    :ivar out: output spatial sizes.
    """

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    extra_end: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def effective_kernel(self) -> tuple[int, ...]:
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))

    def padded_shape(self, spatial: Sequence[int]) -> tuple[int, ...]:
        """Spatial size of the input after all padding (extra included)."""
        return tuple(i + b + e + x for i, b, e, x in
                     zip(spatial, self.pads_begin, self.pads_end, self.extra_end))

    def pad_widths(self) -> list[tuple[int, int]]:
        """``np.pad`` widths for an (N, C, *spatial) tensor."""
        return [(0, 0), (0, 0)] + [(b, e + x) for b, e, x in
                                   zip(self.pads_begin, self.pads_end, self.extra_end)]


def _ints(meta: NodeMeta, name: str, default: Sequence[int], n: int) -> tuple[int, ...]:
    value = meta.attr(name, None)
    value = tuple(default) if value is None else tuple(int(v) for v in value)
    if len(value) != n:
        raise node_error(meta, f"attribute '{name}' has {len(value)} values, expected {n} "
                               f"(one per spatial axis)")
    return value


def window_geometry(meta: NodeMeta, spatial: Sequence[int], kernel: Sequence[int], *,
                    ceil_mode: bool = False) -> WindowGeometry:
    """Pads and output sizes from ``strides``, ``dilations``, ``pads``, ``auto_pad``.

    :param spatial: the input's spatial sizes.
    :param kernel: the window's spatial sizes.
    :raises NodeError: for malformed attributes or a window larger than the padded input.
    """
    n = len(spatial)
    kernel = tuple(int(k) for k in kernel)
    if len(kernel) != n:
        raise node_error(meta, f"kernel has {len(kernel)} spatial dims but the input has {n}")
    strides = _ints(meta, "strides", [1] * n, n)
    dilations = _ints(meta, "dilations", [1] * n, n)
    if min(strides + dilations + kernel, default=1) < 1:
        raise node_error(meta, f"kernel {kernel}, strides {strides} and dilations "
                               f"{dilations} must all be >= 1")
    ek = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    auto_pad = meta.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-i // s) for i, s in zip(spatial, strides)]
        total = [max(0, (o - 1) * s + e - i) for o, s, e, i in zip(out, strides, ek, spatial)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        extra = [0] * n
    elif auto_pad in ("VALID", "NOTSET"):
        if auto_pad == "VALID":
            pads = [0] * (2 * n)
        else:
            pads = list(_ints(meta, "pads", [0] * (2 * n), 2 * n))
        if min(pads, default=0) < 0:
            raise node_error(meta, f"pads {pads} must be >= 0")
        begin, end = pads[:n], pads[n:]
        out, extra = [], []
        for i, b, e, k, s in zip(spatial, begin, end, ek, strides):
            span = i + b + e - k
            o = (-(-span // s) if ceil_mode else span // s) + 1
            # the last window must start inside the input or its leading padding
            if ceil_mode and (o - 1) * s >= i + b:
                o -= 1
            out.append(o)
            extra.append(max(0, (o - 1) * s + k - (i + b + e)))
    else:
        raise node_error(meta, f"auto_pad {auto_pad!r} is not one of NOTSET, SAME_UPPER, "
                               f"SAME_LOWER, VALID")
    if min(out, default=1) < 1:
        raise node_error(meta, f"window of size {tuple(ek)} (dilated) does not fit the "
                               f"padded input of spatial shape {tuple(spatial)} "
                               f"(pads {tuple(begin)} + {tuple(end)})")
    return WindowGeometry(kernel, strides, dilations, tuple(begin), tuple(end),
                          tuple(extra), tuple(out))


def patches(padded: np.ndarray, g: WindowGeometry) -> np.ndarray:
    """A read-only view (N, C, *out, *kernel) of every window of an already padded input."""
    n = len(g.kernel)
    axes = tuple(range(2, 2 + n))
    view = np.lib.stride_tricks.sliding_window_view(padded, g.effective_kernel, axis=axes)
    index = ((slice(None), slice(None))
             + tuple(slice(None, (o - 1) * s + 1, s) for o, s in zip(g.out, g.strides))
             + tuple(slice(None, None, d) for d in g.dilations))
    return view[index]


def pad_input(x: np.ndarray, g: WindowGeometry, fill: float | int = 0) -> np.ndarray:
    """``x`` (N, C, *spatial) inside a new array of :meth:`WindowGeometry.padded_shape`
    filled with ``fill`` (cheaper than ``np.pad``: one fill, one copy)."""
    out = np.full(x.shape[:2] + g.padded_shape(x.shape[2:]), fill, dtype=x.dtype)
    inner = tuple(slice(b, b + s) for b, s in zip(g.pads_begin, x.shape[2:]))
    out[(slice(None), slice(None)) + inner] = x
    return out


def tap_slices(g: WindowGeometry) -> Iterator[tuple[int, tuple[slice, ...]]]:
    """For each kernel tap, in C order of the kernel: its flat index and the index that
    reads, from an already padded (N, C, *spatial) input, the value that tap sees in
    every window, as an (N, C, *out) strided view."""
    for flat, tap in enumerate(np.ndindex(*g.kernel)):
        yield flat, (slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s)
            for t, d, o, s in zip(tap, g.dilations, g.out, g.strides))


def tap_positions(g: WindowGeometry, axis: int) -> np.ndarray:
    """(out, kernel) input coordinates each window tap reads along spatial ``axis``
    (negative or past the input where the tap lands in padding)."""
    o = np.arange(g.out[axis])[:, None] * g.strides[axis]
    k = np.arange(g.kernel[axis])[None, :] * g.dilations[axis]
    return o + k - g.pads_begin[axis]
