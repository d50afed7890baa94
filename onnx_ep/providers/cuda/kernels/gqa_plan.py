"""Sizes and launch plans of the CUDA GroupQueryAttention (``gqa.py`` / ``gqa.cu``): THE
formulas both planning (workspace) and execution use."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

THREADS = 128                 #: GQA_THREADS of gqa.cu
WARPS = THREADS // 32
MAX_SPLITS = 64               #: GQA_MAX_SPLITS of gqa.cu
#: blocks a split grid aims at (about two waves of a 132-SM GPU's 128-thread blocks)
TARGET_BLOCKS = 256
#: head-size bound -> (keys per shared tile, rows per warp): gqa.cu's EP_GQA instantiations
VARIANTS: dict[int, tuple[int, int]] = {64: (32, 4), 128: (32, 4), 256: (16, 2)}
MAX_GRID_YZ = 65535
ALIGN = 256
#: the decode kernel (``gqa_decode_<sfx>_d<head>``, q_len == 1): its head sizes, the most
#: q heads per kv head (GQA_DEC_REP), its splits' fewest keys and most splits
#: (GQA_DEC_MAX_SPLITS), and the blocks it aims at (two per SM of a 132-SM GPU)
DECODE_HEADS = (64, 128)
DECODE_MAX_REP = 8
DECODE_MIN_KEYS = 32
DECODE_MAX_SPLITS = 64
DECODE_TARGET_BLOCKS = 264
#: the one-block decode kernel (``gqa_decode_short_<sfx>_d<head>``): its threads
#: (GQA_SHORT_THREADS) and the most present rows it takes (GQA_SHORT_KEYS). Where every key
#: fits one block's shared memory, one block per (batch, kv head) without splits finishes
#: sooner than split blocks and their combine: the step is a chain of latencies, not a
#: bandwidth problem.
SHORT_THREADS = 256
SHORT_MAX_KEYS = 256


@attrs.frozen
class GqaDims:
    """Sizes of one call, from static shapes."""

    batch: int
    q_len: int
    q_heads: int
    kv_heads: int
    head: int
    past_len: int
    packed: bool

    @property
    def rep(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def rows(self) -> int:
        """(query, q head) rows of one (batch, kv head)."""
        return self.rep * self.q_len

    @property
    def span(self) -> int:
        """The most keys a row can see: past + new (the reference's present bound)."""
        return self.past_len + self.q_len

    @property
    def q_row(self) -> int:
        """Elements of one token of query (with K and V when packed)."""
        return (self.q_heads + 2 * self.kv_heads if self.packed else self.q_heads) * self.head


def gqa_dims(q: Sequence[int], k: Sequence[int] | None, v: Sequence[int] | None,
             past_k: Sequence[int] | None, past_v: Sequence[int] | None,
             hq: int, hkv: int) -> GqaDims:
    """Sizes from static shapes; :raises ValueError: the reference's reasons."""
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise ValueError(f"num_heads={hq} must be a positive multiple of kv_num_heads={hkv}")
    if len(q) != 3:
        raise ValueError(f"query must be 3-D (batch, seq, hidden), got {tuple(q)}")
    batch, q_len, hidden = (int(x) for x in q)
    if (k is None) != (v is None):
        raise ValueError("key and value must both be given, or both be absent (packed QKV)")
    packed = k is None
    heads = hq + 2 * hkv if packed else hq
    head = hidden // heads
    if head <= 0 or head * heads != hidden:
        raise ValueError(f"query hidden size {hidden} is not {heads} heads of one size")
    if not packed and (tuple(k) != (batch, q_len, hkv * head) or tuple(v) != tuple(k)):
        raise ValueError(f"query {tuple(q)}, key {tuple(k)}, value {tuple(v)} do not hold "
                         f"{hq} query and {hkv} kv heads of one size over one (batch, seq)")
    if (past_k is None) != (past_v is None):
        raise ValueError("past_key and past_value must be given together")
    past_len = 0
    if past_k is not None:
        if tuple(past_k) != tuple(past_v) or len(past_k) != 4 or (
                tuple(past_k[:2]) != (batch, hkv) or past_k[3] != head):
            raise ValueError(f"past_key {tuple(past_k)} and past_value {tuple(past_v)} must "
                             f"both be (batch={batch}, kv_num_heads={hkv}, past, head={head})")
        past_len = int(past_k[2])
    return GqaDims(batch, q_len, hq, hkv, head, past_len, packed)


def variant(head: int) -> int | None:
    """The head-size bound of the attend symbol for ``head``, or None past the largest."""
    return next((dmax for dmax in sorted(VARIANTS) if head <= dmax), None)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@attrs.frozen
class GqaPlan:
    """Launch geometry and workspace of one call: THE formula (plan and execute).

    The workspace fits both attend kernels when the decode kernel may run (``dec_splits``):
    execution falls back to ``gqa_attend`` where the present buffers are not 16-byte
    aligned."""

    dmax: int
    tile_rows: int           #: query rows per block (WARPS x rows per warp)
    tiles: int
    splits: int
    scratch_bytes: int       #: one present's rows when the node leaves that output out
    partial_bytes: int       #: per-split (max, sum, output) rows; 0 without splits
    counters: int            #: one per (batch, kv head, tile) with splits, else 0
    dec_splits: int = 0      #: the decode kernel's key splits; 0: it does not apply
    dec_partial_bytes: int = 0
    dec_counters: int = 0    #: one per (batch, kv head) with splits, else 0

    @property
    def partial_offset(self) -> int:
        return 2 * _align(self.scratch_bytes)

    @property
    def counter_offset(self) -> int:
        return self.partial_offset + _align(max(self.partial_bytes, self.dec_partial_bytes))

    @property
    def workspace_bytes(self) -> int:
        if not self.scratch_bytes and not self.counters and not self.dec_counters:
            return 0
        return self.counter_offset + 4 * max(self.counters, self.dec_counters)


def decode_splits(d: GqaDims) -> int:
    """Key splits of the decode kernel for ``d``, 0 where it does not apply (q_len != 1,
    another head size, more than :data:`DECODE_MAX_REP` q heads per kv head)."""
    if d.q_len != 1 or d.head not in DECODE_HEADS or d.rep > DECODE_MAX_REP:
        return 0
    bkv = max(d.batch * d.kv_heads, 1)
    return max(1, min(DECODE_MAX_SPLITS, -(-d.span // DECODE_MIN_KEYS),
                      -(-DECODE_TARGET_BLOCKS // bkv)))


def decode_short(d: GqaDims, present_len: int) -> bool:
    """Whether a decode step of ``d`` over presents of ``present_len`` rows takes the
    one-block kernel (where the decode kernel applies and the rows fit its shared memory)."""
    return decode_splits(d) > 0 and present_len <= SHORT_MAX_KEYS


def gqa_plan(d: GqaDims, itemsize: int, scratch: bool) -> GqaPlan:
    """Tiles, splits and workspace for ``d``; ``scratch``: some present output is left out.

    Splits: enough blocks to fill the GPU (:data:`TARGET_BLOCKS`), no more than one per
    shared tile of keys the rows can see, at most :data:`MAX_SPLITS`.

    :raises ValueError: the head is too large or the grid past CUDA's limits.
    """
    dmax = variant(d.head)
    if dmax is None:
        raise ValueError(f"head size {d.head} is above {max(VARIANTS)}")
    tk, rpw = VARIANTS[dmax]
    tile_rows = WARPS * rpw
    tiles = max(1, -(-d.rows // tile_rows))
    if tiles > MAX_GRID_YZ or d.batch * d.kv_heads > MAX_GRID_YZ:
        raise ValueError(f"{tiles} row tiles over {d.batch * d.kv_heads} (batch, kv head) "
                         f"pairs exceed the grid's {MAX_GRID_YZ}")
    groups = d.batch * d.kv_heads * tiles
    splits = max(1, min(MAX_SPLITS, -(-d.span // tk), -(-TARGET_BLOCKS // max(groups, 1))))
    partial = groups * splits * tile_rows * (d.head + 2) * 4 if splits > 1 else 0
    rows = d.batch * d.kv_heads * d.span * d.head * itemsize if scratch else 0
    dec = decode_splits(d)
    bkv = d.batch * d.kv_heads
    dec_partial = bkv * dec * d.rep * (d.head + 2) * 4 if dec > 1 else 0
    return GqaPlan(dmax, tile_rows, tiles, splits, rows, partial, groups if splits > 1 else 0,
                   dec, dec_partial, bkv if dec > 1 else 0)
