"""Host-side geometry of the movement kernels (pure Python, tested without a GPU): dims
coalesced and elements widened for the copy kernels, transpose tiles, broadcast strides,
and the grouping of a Concat's inputs into launches.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import attrs

from onnx_ep.providers.cuda.kernels.base import contiguous_strides

#: element widths (bytes) the kernels are instantiated for
WIDTHS = (16, 8, 4, 2, 1)


def coalesce(sizes: Sequence[int], strides: Sequence[int]) -> tuple[list[int], list[int]]:
    """Drop size-1 dims and merge neighbours whose strides make them one run.

    ``sizes`` are output dims in row-major order, ``strides`` the input strides (elements)
    that each output dim steps by (0 for broadcast). Dims ``i, i+1`` merge when
    ``stride[i] == stride[i+1] * size[i+1]``. An empty result means one element.
    """
    out_n: list[int] = []
    out_s: list[int] = []
    for n, s in zip(sizes, strides):
        n, s = int(n), int(s)
        if n == 1:
            continue
        if out_n and out_s[-1] == s * n:
            out_n[-1] *= n
            out_s[-1] = s
        else:
            out_n.append(n)
            out_s.append(s)
    return out_n, out_s


def widen(itemsize: int, sizes: list[int], strides: list[int],
          ptrs: Sequence[int]) -> tuple[int, list[int], list[int]]:
    """The widest element (bytes) that keeps every access aligned, and the dims in it.

    Only the innermost dim may widen, and only when it is contiguous (stride 1).
    """
    if not sizes or strides[-1] != 1:
        return itemsize, sizes, strides
    run = sizes[-1] * itemsize
    for w in WIDTHS:
        if w <= itemsize:
            break
        if run % w or any(p % w for p in ptrs) or any((s * itemsize) % w
                                                      for s in strides[:-1]):
            continue
        k = w // itemsize
        return (w, *coalesce(sizes[:-1] + [sizes[-1] // k],
                             [s // k for s in strides[:-1]] + [1]))
    return itemsize, sizes, strides


def transpose_plan(shape: Sequence[int], perm: Sequence[int], itemsize: int,
                   ptrs: Sequence[int] = (0, 0)) -> tuple[str, int, tuple[int, ...]]:
    """How to run a Transpose: ``("copy", width, ())``, ``("tile", width, (B, R, C))``
    (out[b][c][r] = in[b][r][c]) or ``("strided", width, (sizes..., strides...))``."""
    st = contiguous_strides(shape)
    sizes, strides = coalesce([shape[p] for p in perm], [st[p] for p in perm])
    w, sizes, strides = widen(itemsize, sizes, strides, ptrs)
    if not sizes or (len(sizes) == 1 and strides[0] == 1):
        return "copy", w, ()
    if 2 <= len(sizes) <= 3 and strides[-2] == 1 and strides[-1] == sizes[-2]:
        c, r = sizes[-2], sizes[-1]
        if len(sizes) == 2 or strides[0] == r * c:
            return "tile", w, (sizes[0] if len(sizes) == 3 else 1, r, c)
    return "strided", w, tuple(sizes) + tuple(strides)


def tile_grid(batch: int, rows: int, cols: int) -> tuple[int, int, int]:
    """Grid of ``transpose_tile``: x over column tiles; (y, z) cover batch * row tiles
    (the kernel loops when they exceed 65535 * 65535)."""
    total = batch * -(-rows // 32)
    gy = max(1, min(total, 65535))
    gz = max(1, min(-(-total // gy), 65535))
    return (max(1, -(-cols // 32)), gy, gz)


def broadcast_strides(in_shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Input strides (elements) for each output dim, 0 on broadcast dims (right-aligned).

    :raises ValueError: the shapes do not broadcast to ``out_shape``.
    """
    r_in, r_out = len(in_shape), len(out_shape)
    if r_in > r_out:
        raise ValueError(f"input rank {r_in} exceeds output rank {r_out}")
    st = contiguous_strides(in_shape)
    out = []
    for d in range(r_out):
        k = d - (r_out - r_in)
        if k < 0:
            out.append(0)
        elif in_shape[k] == out_shape[d]:
            out.append(st[k])
        elif in_shape[k] == 1:
            out.append(0)
        else:
            raise ValueError(f"input shape {tuple(in_shape)} does not broadcast to "
                             f"{tuple(out_shape)}")
    return out


def block_copy_width(itemsize: int, cols: int, pitches: Sequence[int],
                     ptrs: Sequence[int]) -> int:
    """Widest element for a 2-D block copy of ``cols`` elements per row."""
    for w in WIDTHS:
        if w <= itemsize:
            return itemsize
        if (cols * itemsize) % w == 0 and all((p * itemsize) % w == 0 for p in pitches) \
                and all(p % w == 0 for p in ptrs):
            return w
    return itemsize


#: inputs one ``concat_x<w>`` launch copies (``EP_CAT_MAX`` of movement.cu); a Concat of
#: more non-empty inputs takes one launch per group of this many
CONCAT_GROUP = 16


class CatInputs(ctypes.Structure):
    """``struct CatInputs`` of movement.cu, passed by value: a group's input pointers and
    their cumulative column offsets in an output row (elements of the launch's width)."""

    _fields_ = [("src", ctypes.c_uint64 * CONCAT_GROUP),
                ("off", ctypes.c_int64 * (CONCAT_GROUP + 1)),
                ("n", ctypes.c_int32)]


@attrs.frozen
class ConcatGroup:
    """One launch of a Concat: inputs ``srcs`` side by side in each of ``rows`` output rows.

    Counts are in elements of ``width`` bytes. Input k is ``rows x (offsets[k+1] -
    offsets[k])``, contiguous at ``srcs[k]``; it lands in columns ``[offsets[k],
    offsets[k+1])`` of every output row, counted from ``dst``. Output rows are ``pitch``
    apart (``cols`` when there is one row).
    """

    width: int
    dst: int
    pitch: int
    rows: int
    srcs: tuple[int, ...]
    offsets: tuple[int, ...]

    @property
    def cols(self) -> int:
        return self.offsets[-1]

    def table(self) -> CatInputs:
        """The kernel argument."""
        if len(self.srcs) > CONCAT_GROUP:
            raise ValueError(f"{len(self.srcs)} inputs in one launch (max {CONCAT_GROUP})")
        t = CatInputs()
        for k, p in enumerate(self.srcs):
            t.src[k] = p
        for k, o in enumerate(self.offsets):
            t.off[k] = o
        t.n = len(self.srcs)
        return t


def concat_plan(itemsize: int, rows: int, row_elems: Sequence[int], ptrs: Sequence[int],
                out_ptr: int, group: int = CONCAT_GROUP) -> list[ConcatGroup]:
    """The launches of a Concat whose output is viewed as ``[rows, sum(row_elems)]``.

    Input k is viewed as ``[rows, row_elems[k]]`` (``axis_k * inner`` elements of
    ``itemsize`` bytes per row) at ``ptrs[k]``. Empty inputs are dropped; the rest go in
    order into groups of ``group``. Each group takes the widest element (bytes) that
    divides its inputs' row bytes, its pointers, its first output column's address and,
    when there are several rows, the output row bytes (then every access is aligned).
    """
    total = sum(int(n) for n in row_elems)
    if rows == 0 or total == 0:
        return []
    live: list[tuple[int, int, int]] = []        # (output column, elements per row, pointer)
    col = 0
    for n, p in zip(row_elems, ptrs):
        if n:
            live.append((col, int(n), int(p)))
        col += int(n)
    plan = []
    for start in range(0, len(live), group):
        chunk = live[start:start + group]
        dst = out_ptr + chunk[0][0] * itemsize
        counts = [n for _, n, _ in chunk]
        # every input row and (with several rows) the output row are "pitches" that must
        # stay multiples of the width
        pitches = counts[1:] + ([total] if rows > 1 else [])
        w = block_copy_width(itemsize, counts[0], pitches, [dst, *(p for _, _, p in chunk)])
        f = w // itemsize
        offsets = [0]
        for n in counts:
            offsets.append(offsets[-1] + n // f)
        plan.append(ConcatGroup(width=w, dst=dst, pitch=total // f if rows > 1 else offsets[-1],
                                rows=rows, srcs=tuple(p for _, _, p in chunk),
                                offsets=tuple(offsets)))
    return plan


