"""gqa.cu replayed in numpy on a byte-addressed fake device, so that the CUDA
GroupQueryAttention's host code (geometry, pointers, workspace layout, in-place and growing
routes, split counts) runs end to end without a GPU and is compared with cpu_reference.

:class:`FakeDevice` hands out addresses into one numpy byte buffer; :func:`launch` is a
stand-in for ``CudaKernel.launch`` that interprets the two symbols with the kernels'
index math, block by block (blocks in a shuffled order: the split combine must not depend
on which block finishes last). Arithmetic is float32 where the kernels use float32, double
for the rotations, so results agree with the device within the kernel's promise.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

import onnx_ep
from onnx_ep.providers.cpu_reference.lowfloat import round_to
from onnx_ep.providers.cuda.kernels import gqa, gqa_plan
from onnx_ep.providers.cuda.kernels.base import BF16

F32 = np.float32
NEG = F32(-np.inf)
SUFFIX = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16}


class FakeTensor:
    """A device tensor's host-visible face (address, shape, dtype) over FakeDevice bytes."""

    def __init__(self, dev: FakeDevice, ptr: int, dtype: Any, shape: tuple[int, ...]) -> None:
        self.dev, self.ptr, self.dtype, self.shape = dev, int(ptr), np.dtype(dtype), tuple(shape)
        self.device = 0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def view(self, dtype: Any, shape: Any, offset_bytes: int = 0) -> FakeTensor:
        return FakeTensor(self.dev, self.ptr + offset_bytes, dtype, tuple(shape))

    def read(self) -> np.ndarray:
        return self.dev.array(self.ptr, self.dtype, self.size).reshape(self.shape).copy()


class FakeDevice:
    """Addresses from BASE into one byte buffer (0 stays the null pointer)."""

    BASE = 1 << 16

    def __init__(self, nbytes: int = 1 << 26) -> None:
        self.mem = np.zeros(nbytes, np.uint8)
        self.top = self.BASE

    def alloc(self, nbytes: int, dtype: Any = np.uint8, shape: Any = None) -> FakeTensor:
        ptr = self.top
        self.top += -(-max(int(nbytes), 1) // 256) * 256
        assert self.top - self.BASE <= self.mem.size, "fake device full"
        self.mem[ptr - self.BASE:self.top - self.BASE] = 0xAB    # garbage, not zeros
        return FakeTensor(self, ptr, dtype, (int(nbytes),) if shape is None else shape)

    def put(self, arr: np.ndarray) -> FakeTensor:
        arr = np.ascontiguousarray(arr)
        t = self.alloc(arr.nbytes, arr.dtype, arr.shape)
        self.array(t.ptr, arr.dtype, arr.size)[:] = arr.reshape(-1)
        return t

    def empty(self, dtype: Any, shape: tuple[int, ...]) -> FakeTensor:
        return self.alloc(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize,
                          dtype, shape)

    def array(self, ptr: int, dtype: Any, count: int) -> np.ndarray:
        """``count`` values of ``dtype`` at ``ptr`` (a writable view)."""
        assert ptr >= self.BASE, f"null or bad pointer {ptr}"
        dt = np.dtype(dtype)
        lo = ptr - self.BASE
        assert lo + count * dt.itemsize <= self.mem.size, "read past the fake device"
        return self.mem[lo:lo + count * dt.itemsize].view(dt)


# ---------------------------------------------------------------- the kernels

def _row_lens(seqlens: np.ndarray, total: int, g: Any, b: int) -> tuple[int, int, bool]:
    t = int(seqlens[b]) + 1
    first = g.q_len == total
    return (0 if first else t - g.q_len), t, first


def _rot_row(pid: np.ndarray | None, g: Any, b: int, s: int, past: int, first: bool) -> int:
    if g.pid_kind == 0:
        p = past + s
    else:
        off = 0 if first else b * g.pid_sb + s * g.pid_ss
        p = int(pid[off]) + (s if first else 0)
    return min(max(p, 0), g.cos_rows - 1)


def _rotated_head(x: np.ndarray, g: Any, cs: np.ndarray, sn: np.ndarray, row: int,
                  dtype: Any) -> np.ndarray:
    """One head (D values of T) with its first 2 * half channels rotated at cache row."""
    half, out = int(g.rot_half), x.astype(np.float64)
    c = cs[row * half:(row + 1) * half].astype(np.float64)
    s = sn[row * half:(row + 1) * half].astype(np.float64)
    v = x.astype(np.float64)
    if g.interleaved:
        x1, x2 = v[0:2 * half:2], v[1:2 * half:2]
        out[0:2 * half:2], out[1:2 * half:2] = c * x1 - s * x2, s * x1 + c * x2
    else:
        x1, x2 = v[:half], v[half:2 * half]
        out[:half], out[half:2 * half] = c * x1 - s * x2, s * x1 + c * x2
    return round_to(out, dtype)


def _pids(dev: Any, pid: int, g: Any) -> np.ndarray | None:
    if not g.pid_kind:
        return None
    n = (g.batch - 1) * g.pid_sb + (g.q_len - 1) * g.pid_ss + 1
    return dev.array(pid, np.int32 if g.pid_kind == 1 else np.int64, n)


def _total(dev: Any, ptr: int, g: Any) -> int:
    return int(dev.array(ptr, np.int32, 1)[0]) if ptr else int(g.total_val)


def gqa_kv(dev: FakeDevice, dtype: Any, a: list[Any], g: Any) -> None:
    kn, vn, pk, pv, ok, ov, seq, tot, cs, sn, pid, counters, n_counters = a
    D, H, R, Lp, B = int(g.head), int(g.kv_heads), int(g.write_rows), int(g.present_len), \
        int(g.batch)
    if n_counters:
        dev.array(counters, np.uint32, n_counters)[:] = 0
    seqlens = dev.array(seq, np.int32, B)
    total = _total(dev, tot, g)
    okv, ovv = dev.array(ok, dtype, B * H * Lp * D), dev.array(ov, dtype, B * H * Lp * D)
    rot = g.rot_half > 0
    csa = dev.array(cs, dtype, int(g.cos_rows * g.rot_half)) if rot else None
    sna = dev.array(sn, dtype, int(g.cos_rows * g.rot_half)) if rot else None
    pida = _pids(dev, pid, g)
    for b in range(B):
        past, _, first = _row_lens(seqlens, total, g, b)
        for h in range(H):
            bh = b * H + h
            for r in range(R):
                if g.in_place:
                    s, t = r, past + r
                    if t < 0 or t >= Lp:
                        continue
                else:
                    t, s = r, r - past
                o = (bh * Lp + t) * D
                if 0 <= s < g.q_len:
                    ko = b * g.k_sb + s * g.k_ss + h * D
                    vo = b * g.v_sb + s * g.v_ss + h * D
                    krow = dev.array(kn + ko * dtype.itemsize, dtype, D).copy()
                    if rot:
                        row = _rot_row(pida, g, b, s, past, first)
                        krow[:2 * g.rot_half] = _rotated_head(krow, g, csa, sna, row,
                                                              dtype)[:2 * g.rot_half]
                    okv[o:o + D] = krow
                    ovv[o:o + D] = dev.array(vn + vo * dtype.itemsize, dtype, D)
                elif t < past and t < g.past_len:
                    po = (bh * g.past_len + t) * D
                    okv[o:o + D] = dev.array(pk, dtype, (bh + 1) * g.past_len * D)[po:po + D]
                    ovv[o:o + D] = dev.array(pv, dtype, (bh + 1) * g.past_len * D)[po:po + D]
                else:
                    okv[o:o + D] = 0
                    ovv[o:o + D] = 0


def gqa_attend(dev: FakeDevice, dtype: Any, dmax: int, grid: tuple[int, int, int],
               a: list[Any], g: Any, order_seed: int = 0) -> None:
    q, kc, vc, seq, tot, cs, sn, pid, bias, sink, y, ws, counters = a
    tk, rpw = gqa.VARIANTS[dmax]
    ROWS = gqa.WARPS * rpw
    assert g.head <= dmax and grid[0] == g.splits and grid[1] == g.tiles
    blocks = [(x, yy, z) for z in range(grid[2]) for yy in range(grid[1]) for x in range(grid[0])]
    np.random.default_rng(order_seed).shuffle(blocks)
    with np.errstate(invalid="ignore"):     # -inf - -inf where np.where masks it anyway
        for blk in blocks:
            _attend_block(dev, dtype, tk, ROWS, blk, grid, a, g)


def _attend_block(dev, dtype, TK, ROWS, blk, grid, a, g) -> None:   # noqa: N803
    q, kc, vc, seq, tot, cs, sn, pid, bias, sink, y, ws, counters = a
    split, tile, bh = blk
    D, S, Hkv, Hq = int(g.head), int(g.q_len), int(g.kv_heads), int(g.q_heads)
    rep, B, Lp = Hq // Hkv, int(g.batch), int(g.present_len)
    b, kvh = bh // Hkv, bh % Hkv
    rows, r0 = rep * S, tile * ROWS
    seqlens = dev.array(seq, np.int32, B)
    past, T, first = _row_lens(seqlens, _total(dev, tot, g), g, b)
    cap = min(T, Lp)

    def hi_of(s: int) -> int:
        return min(cap, past + s + 1) if g.causal else cap

    def lo_of(s: int) -> int:
        return max(0, past + s - g.window + 1) if g.window >= 0 else 0

    r_end = min(r0 + ROWS, rows)
    lo_t, hi_t = lo_of(r0 // rep), hi_of((r_end - 1) // rep)
    start = end = 0
    if hi_t > lo_t:
        chunk = -(-(hi_t - lo_t) // g.splits)
        chunk = -(-chunk // TK) * TK
        start = lo_t + split * chunk
        end = min(start + chunk, hi_t)
    rot = g.rot_half > 0
    csa = dev.array(cs, dtype, int(g.cos_rows * g.rot_half)) if rot else None
    sna = dev.array(sn, dtype, int(g.cos_rows * g.rot_half)) if rot else None
    pida = _pids(dev, pid, g)
    qs = np.zeros((ROWS, D), F32)
    heads: dict[int, tuple[int, int]] = {}
    for lr in range(ROWS):
        r = r0 + lr
        if r >= rows:
            continue
        s, h = r // rep, kvh * rep + r % rep
        heads[lr] = (s, h)
        qx = dev.array(q + (b * g.q_sb + s * g.q_ss + h * D) * dtype.itemsize, dtype, D).copy()
        if rot:
            qx[:2 * g.rot_half] = _rotated_head(qx, g, csa, sna,
                                                _rot_row(pida, g, b, s, past, first),
                                                dtype)[:2 * g.rot_half]
        qs[lr] = qx.astype(F32)
    m = {lr: NEG for lr in heads}
    l_ = {lr: F32(0) for lr in heads}
    acc = {lr: np.zeros(D, F32) for lr in heads}
    kall = dev.array(kc, dtype, (bh + 1) * Lp * D)[bh * Lp * D:].reshape(Lp, D)
    vall = dev.array(vc, dtype, (bh + 1) * Lp * D)[bh * Lp * D:].reshape(Lp, D)
    bias_a = dev.array(bias, dtype, (B - 1) * g.bias_sb + (Hq - 1) * g.bias_sh
                       + (S - 1) * g.bias_ss + g.bias_cols) if bias else None
    for t0 in range(start, end, TK):
        t1 = min(t0 + TK, end)
        kt, vt = kall[t0:t1].astype(F32), vall[t0:t1].astype(F32)
        ts = np.arange(t0, t1)
        for lr, (s, h) in heads.items():
            v = (kt @ qs[lr]).astype(F32) * F32(g.scale)
            if g.softcap > 0:
                v = (np.tanh(v / F32(g.softcap)) * F32(g.softcap)).astype(F32)
            if bias_a is not None:
                cols = ts < g.bias_cols
                idx = b * g.bias_sb + h * g.bias_sh + s * g.bias_ss + ts[cols]
                v[cols] += bias_a[idx].astype(F32)
            v[(ts < lo_of(s)) | (ts >= hi_of(s))] = NEG
            mnew = max(m[lr], v.max())
            if mnew == NEG:
                continue
            corr = np.exp(F32(m[lr] - mnew))
            p = np.where(v == NEG, F32(0), np.exp(v - mnew)).astype(F32)
            l_[lr] = F32(l_[lr] * corr + p.sum(dtype=F32))
            m[lr] = mnew
            acc[lr] = (acc[lr] * corr + p @ vt).astype(F32)
    sink_a = dev.array(sink, dtype, Hq) if sink else None
    yarr = dev.array(y, dtype, B * S * Hq * D)

    def sink_of(h: int) -> np.float32:
        if not g.has_sink:
            return NEG
        return F32(sink_a[h]) if sink_a is not None else F32(0)

    if g.splits == 1:
        for lr, (s, h) in heads.items():
            sk = sink_of(h)
            M = max(m[lr], sk)
            e = F32(0) if M == NEG else np.exp(F32(m[lr] - M))
            lsum = F32(l_[lr] * e + (np.exp(F32(sk - M)) if g.has_sink and M != NEG else 0))
            out = acc[lr] * e / lsum if lsum > 0 else np.zeros(D, F32)
            o = (b * S + s) * Hq * D + h * D
            yarr[o:o + D] = round_to(out.astype(F32), dtype)
        return
    splits, grp = int(g.splits), bh * g.tiles + tile
    groups = grid[2] * g.tiles
    wacc = dev.array(ws, F32, groups * splits * ROWS * D)
    wml = dev.array(ws + groups * splits * ROWS * D * 4, F32, groups * splits * ROWS * 2)
    for lr in heads:
        slot = (grp * splits + split) * ROWS + lr
        wacc[slot * D:(slot + 1) * D] = acc[lr]
        wml[slot * 2], wml[slot * 2 + 1] = m[lr], l_[lr]
    cnt = dev.array(counters, np.uint32, groups)
    cnt[grp] += 1
    if cnt[grp] != splits:
        return
    for lr, (s, h) in heads.items():
        sk = sink_of(h)
        ml = wml.reshape(groups, splits, ROWS, 2)[grp, :, lr]
        M = max(sk, ml[:, 0].max())
        e = np.where((ml[:, 0] == NEG) | (M == NEG), F32(0),
                     np.exp((ml[:, 0] - M).astype(F32))).astype(F32)
        lsum = F32((ml[:, 1] * e).sum(dtype=F32)
                   + (np.exp(F32(sk - M)) if g.has_sink and M != NEG else 0))
        parts = wacc.reshape(groups, splits, ROWS, D)[grp, :, lr]
        o_ = (e[e != 0][:, None] * parts[e != 0]).sum(axis=0, dtype=F32)
        out = o_ / lsum if lsum > 0 else np.zeros(D, F32)
        o = (b * S + s) * Hq * D + h * D
        yarr[o:o + D] = round_to(out.astype(F32), dtype)
    cnt[grp] = 0


def gqa_decode(dev: FakeDevice, dtype: Any, head: int, grid: tuple[int, int, int],
               a: list[Any], g: Any, order_seed: int = 0) -> None:
    """``gqa_decode_<sfx>_d<head>``: one block per (split, batch * kv head), all the
    group's q heads; the same key ranges, partial layout and split combine as gqa.cu."""
    assert g.head == head and g.q_len == 1 and g.tiles == 1
    assert grid == (g.splits, g.batch * g.kv_heads, 1)
    assert g.q_heads // g.kv_heads <= gqa.DECODE_MAX_REP and g.splits <= gqa.DECODE_MAX_SPLITS
    assert a[1] % 16 == 0 and a[2] % 16 == 0, "K/V rows are loaded in 16-byte vectors"
    blocks = [(x, z) for z in range(grid[1]) for x in range(grid[0])]
    np.random.default_rng(order_seed).shuffle(blocks)
    with np.errstate(invalid="ignore"):
        for blk in blocks:
            _decode_block(dev, dtype, blk, a, g)


def _capped_biased(dev: Any, dtype: Any, v: np.ndarray, g: Any, bias: int, b: int,
                   heads: list[int], ts: np.ndarray) -> np.ndarray:
    """Scaled scores ``v`` (one row per q head of ``heads``, keys ``ts``) after softcap
    and attention_bias, in gqa.cu's order."""
    if g.softcap > 0:
        v = (np.tanh(v / F32(g.softcap)) * F32(g.softcap)).astype(F32)
    if bias:
        B, Hq = int(g.batch), int(g.q_heads)
        bias_a = dev.array(bias, dtype, (B - 1) * g.bias_sb + (Hq - 1) * g.bias_sh
                           + g.bias_cols)
        cols = ts < g.bias_cols
        for hh, h in enumerate(heads):
            v[hh, cols] += bias_a[b * g.bias_sb + h * g.bias_sh + ts[cols]].astype(F32)
    return v


def _decode_keys(g: Any, past: int, total: int) -> tuple[int, int]:
    """The keys [lo, hi) a decode step's query attends (gqa.cu decode_keys)."""
    hi = min(total, int(g.present_len))
    if g.causal:
        hi = min(hi, past + 1)
    return (max(0, past - g.window + 1) if g.window >= 0 else 0), hi


def _decode_block(dev, dtype, blk, a, g) -> None:
    q, kc, vc, seq, tot, cs, sn, pid, bias, sink, y, ws, counters = a
    split, bh = blk
    D, Hkv, Hq, B, Lp = int(g.head), int(g.kv_heads), int(g.q_heads), int(g.batch), \
        int(g.present_len)
    rep, splits = Hq // Hkv, int(g.splits)
    b, kvh = bh // Hkv, bh % Hkv
    past, T, first = _row_lens(dev.array(seq, np.int32, B), _total(dev, tot, g), g, b)
    lo, hi = _decode_keys(g, past, T)
    start = end = 0
    if hi > lo:
        chunk = -(-(hi - lo) // splits)
        start = lo + split * chunk
        end = min(start + chunk, hi)
    rot = g.rot_half > 0
    kall = dev.array(kc, dtype, (bh + 1) * Lp * D)[bh * Lp * D:].reshape(Lp, D)
    vall = dev.array(vc, dtype, (bh + 1) * Lp * D)[bh * Lp * D:].reshape(Lp, D)
    heads = [kvh * rep + hh for hh in range(rep)]
    qs = np.zeros((rep, D), F32)
    for hh, h in enumerate(heads):
        qx = dev.array(q + (b * g.q_sb + h * D) * dtype.itemsize, dtype, D).copy()
        if rot:
            csa = dev.array(cs, dtype, int(g.cos_rows * g.rot_half))
            sna = dev.array(sn, dtype, int(g.cos_rows * g.rot_half))
            row = _rot_row(_pids(dev, pid, g), g, b, 0, past, first)
            qx[:2 * g.rot_half] = _rotated_head(qx, g, csa, sna, row, dtype)[:2 * g.rot_half]
        qs[hh] = qx.astype(F32)
    kt, vt = kall[start:max(start, end)].astype(F32), vall[start:max(start, end)].astype(F32)
    ts = np.arange(start, max(start, end))
    v = _capped_biased(dev, dtype, (kt @ qs.T).T.astype(F32) * F32(g.scale), g, bias, b,
                       heads, ts)                       # (rep, keys)
    M = v.max(axis=1) if v.shape[1] else np.full(rep, NEG, F32)
    p = np.where(M[:, None] == NEG, F32(0), np.exp(v - M[:, None])).astype(F32)
    lsum, o = p.sum(axis=1, dtype=F32), (p @ vt).astype(F32)
    sink_a = dev.array(sink, dtype, Hq) if sink else None
    yarr = dev.array(y, dtype, B * Hq * D)

    def sink_of(h: int) -> np.float32:
        if not g.has_sink:
            return NEG
        return F32(sink_a[h]) if sink_a is not None else F32(0)

    if splits == 1:
        for hh, h in enumerate(heads):
            sk = sink_of(h)
            M2 = max(M[hh], sk)
            e = F32(0) if M2 == NEG else np.exp(F32(M[hh] - M2))
            lt = F32(lsum[hh] * e + (np.exp(F32(sk - M2)) if g.has_sink and M2 != NEG else 0))
            out = o[hh] * e / lt if lt > 0 else np.zeros(D, F32)
            yarr[(b * Hq + h) * D:(b * Hq + h + 1) * D] = round_to(out.astype(F32), dtype)
        return
    bkv = B * Hkv
    wacc = dev.array(ws, F32, bkv * splits * rep * D).reshape(bkv, splits, rep, D)
    wml = dev.array(ws + bkv * splits * rep * D * 4, F32, bkv * splits * rep * 2).reshape(
        bkv, splits, rep, 2)
    wacc[bh, split], wml[bh, split, :, 0], wml[bh, split, :, 1] = o, M, lsum
    cnt = dev.array(counters, np.uint32, bkv)
    cnt[bh] += 1
    if cnt[bh] != splits:
        return
    for hh, h in enumerate(heads):
        sk = sink_of(h)
        ml = wml[bh, :, hh]
        Mh = max(sk, ml[:, 0].max())
        e = np.where((ml[:, 0] == NEG) | (Mh == NEG), F32(0),
                     np.exp((ml[:, 0] - Mh).astype(F32))).astype(F32)
        lt = F32((ml[:, 1] * e).sum(dtype=F32)
                 + (np.exp(F32(sk - Mh)) if g.has_sink and Mh != NEG else 0))
        parts = wacc[bh, :, hh]
        o_ = (e[e != 0][:, None] * parts[e != 0]).sum(axis=0, dtype=F32)
        out = o_ / lt if lt > 0 else np.zeros(D, F32)
        yarr[(b * Hq + h) * D:(b * Hq + h + 1) * D] = round_to(out.astype(F32), dtype)
    cnt[bh] = 0


def gqa_decode_short(dev: FakeDevice, dtype: Any, head: int, grid: tuple[int, int, int],
                     a: list[Any], g: Any) -> None:
    """``gqa_decode_short_<sfx>_d<head>``: one block per (batch * kv head), every key of
    the row at once, exp(s - max(M, sink)) normalised by its sum (plus the sink's term)."""
    assert g.head == head and g.q_len == 1
    assert grid == (1, g.batch * g.kv_heads, 1)
    assert g.q_heads // g.kv_heads <= gqa.DECODE_MAX_REP
    assert g.present_len <= gqa_plan.SHORT_MAX_KEYS, "the scores of every key fit shared memory"
    assert a[1] % 16 == 0 and a[2] % 16 == 0, "K rows are loaded in 16-byte vectors"
    q, kc, vc, seq, tot, cs, sn, pid, bias, sink, y, _ws, _counters = a
    D, Hkv, Hq, B, Lp = int(g.head), int(g.kv_heads), int(g.q_heads), int(g.batch), \
        int(g.present_len)
    rep = Hq // Hkv
    sink_a = dev.array(sink, dtype, Hq) if sink else None
    yarr = dev.array(y, dtype, B * Hq * D)
    for bh in range(grid[1]):
        b, kvh = bh // Hkv, bh % Hkv
        past, T, first = _row_lens(dev.array(seq, np.int32, B), _total(dev, tot, g), g, b)
        lo, hi = _decode_keys(g, past, T)
        hi = max(hi, lo)
        kall = dev.array(kc, dtype, (bh + 1) * Lp * D)[bh * Lp * D:].reshape(Lp, D)
        vall = dev.array(vc, dtype, (bh + 1) * Lp * D)[bh * Lp * D:].reshape(Lp, D)
        kt, vt = kall[lo:hi].astype(F32), vall[lo:hi].astype(F32)
        ts = np.arange(lo, hi)
        for hh in range(rep):
            h = kvh * rep + hh
            qx = dev.array(q + (b * g.q_sb + h * D) * dtype.itemsize, dtype, D).copy()
            if g.rot_half > 0:
                csa = dev.array(cs, dtype, int(g.cos_rows * g.rot_half))
                sna = dev.array(sn, dtype, int(g.cos_rows * g.rot_half))
                row = _rot_row(_pids(dev, pid, g), g, b, 0, past, first)
                qx[:2 * g.rot_half] = _rotated_head(qx, g, csa, sna, row, dtype)[:2 * g.rot_half]
            v = _capped_biased(dev, dtype, (kt @ qx.astype(F32)).astype(F32)[None, :]
                               * F32(g.scale), g, bias, b, [h], ts)[0]
            sk = (F32(sink_a[h]) if sink_a is not None else F32(0)) if g.has_sink else NEG
            M = max(v.max() if v.size else NEG, sk)
            with np.errstate(invalid="ignore"):
                e = np.zeros_like(v) if M == NEG else np.exp(v - M).astype(F32)
            lt = F32(e.sum(dtype=F32) + (np.exp(F32(sk - M)) if g.has_sink and M != NEG
                                         else 0))
            out = (e @ vt).astype(F32) / lt if lt > 0 else np.zeros(D, F32)
            yarr[(b * Hq + h) * D:(b * Hq + h + 1) * D] = round_to(out.astype(F32), dtype)


def run_launch(dev: Any, fn: str, grid: tuple[int, int, int], values: list[Any],
               order_seed: int = 0) -> None:
    """Replay one launch of ``fn`` (a symbol name) with argument ``values``."""
    g = values[-1]
    assert isinstance(g, gqa.GqaGeo) and ctypes.sizeof(g) == 232
    name = str(fn)
    dtype = SUFFIX[name.removeprefix("gqa_decode_short_").split("_")[0]] \
        if name.startswith("gqa_decode_short_") else SUFFIX[name.split("_")[2]]
    if name.startswith("gqa_kv_"):
        gqa_kv(dev, dtype, values[:-1], g)
    elif name.startswith("gqa_decode_short_"):
        gqa_decode_short(dev, dtype, int(name.rsplit("_d", 1)[1]), grid, values[:-1], g)
    elif name.startswith("gqa_decode_"):
        gqa_decode(dev, dtype, int(name.rsplit("_d", 1)[1]), grid, values[:-1], g, order_seed)
    else:
        gqa_attend(dev, dtype, int(name.rsplit("_d", 1)[1]), grid, values[:-1], g, order_seed)


def launcher(dev: FakeDevice, calls: list[Any], order_seed: int = 0) -> Any:
    """A ``CudaKernel.launch`` stand-in running the replay (``fn``: the symbol name)."""

    def launch(fn, grid, block, args, stream, shared_bytes=0) -> None:
        calls.append((fn, grid, block))
        run_launch(dev, fn, grid, [v for v, _ in args], order_seed)

    return launch


# ---------------------------------------------------------------- on the fake provider

class HostMemory:
    """Pointers that are host addresses: tests/helpers/fake_device.py's tensors."""

    @staticmethod
    def array(ptr: int, dtype: Any, count: int) -> np.ndarray:
        assert ptr, "null pointer"
        dt = np.dtype(dtype)
        raw = (ctypes.c_char * (count * dt.itemsize)).from_address(ptr)
        return np.frombuffer(raw, dtype=dt, count=count)


class FakeGqa(gqa.GroupQueryAttention):
    """The CUDA kernel's host code for provider ``fake`` (tests/helpers/fake_device.py),
    its launches replayed in numpy on the fake stream (recorded while it captures) and kept
    in the open launch recording like real launches (``kernels.base.replayed``)."""

    def __init__(self) -> None:
        super().__init__()
        self.launches: list[str] = []

    def function(self, symbol: str, tensor: Any, source: str | None = None) -> str:
        return symbol

    def launch(self, fn, grid, block, args, stream, shared_bytes=0) -> None:
        from onnx_ep.providers.cuda import launch as cuda_launch

        values = [v for v, _ in args]
        launches = self.launches

        def call() -> None:
            launches.append((str(fn), int(values[-1].in_place)))
            stream.enqueue(lambda: run_launch(HostMemory, fn, grid, values))

        cuda_launch.record(call)
        call()


class FakeGqaPlugin:
    """Registers :class:`FakeGqa` for provider ``fake``; pass ``plugins()`` to a Session
    (with the fake device itself, whose other ops are none: they run on cpu_reference)."""

    def __init__(self, ops: tuple[str, ...] = (), lag: bool = False) -> None:
        from tests.helpers.fake_device import FakeDevicePlugin

        self.device = FakeDevicePlugin(ops=ops, lag=lag)
        self.runtime = self.device.runtime
        self.kernel = FakeGqa()

    def plugins(self) -> list[Any]:
        return [self.device, self]

    @onnx_ep.hookimpl
    def onnx_ep_register_kernels(self, register: Any) -> None:
        register(self.kernel, provider="fake")
