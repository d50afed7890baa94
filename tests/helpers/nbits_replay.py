"""A fake CUDA device for the host tests of nbits.cu (tests/providers/cuda/test_nbits_host.py):
buffers at fake addresses, and numpy models of the kernels that replay recorded launches on
them with the same bit extraction, index arithmetic and float32 sums as the CUDA source."""

from __future__ import annotations

import numpy as np

from onnx_ep.providers.cpu_reference.formats import round_to
from onnx_ep.providers.cuda.kernels import nbits_mma as nm
from onnx_ep.providers.cuda.kernels.base import BF16

SFX = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16}


class FakeTensor:
    """A device tensor's host-visible face."""

    def __init__(self, ptr, dtype, shape):
        self.ptr, self.dtype, self.shape, self.device = ptr, np.dtype(dtype), tuple(shape), 0
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize

    @property
    def ndim(self):
        return len(self.shape)


class FakeBuffer:
    def __init__(self, ptr):
        self.ptr = ptr


class Memory:
    """Buffers at fake 4 KiB-aligned addresses, read and written through typed views."""

    def __init__(self):
        self.buffers: dict[int, np.ndarray] = {}
        self.top = 1 << 20

    def alloc(self, nbytes, offset=0):
        base = self.top
        self.top += -(-(nbytes + offset + 1) // 4096) * 4096 + 4096
        self.buffers[base] = np.zeros(nbytes + offset + 1, np.uint8)
        return base + offset

    def view(self, ptr, dtype, count):
        dtype = np.dtype(dtype)
        for base, buf in self.buffers.items():
            if base <= ptr < base + len(buf):
                off = ptr - base
                return buf[off:off + count * dtype.itemsize].view(dtype)
        raise KeyError(hex(ptr))

    def tensor(self, arr, offset=0):
        arr = np.ascontiguousarray(arr)
        ptr = self.alloc(arr.nbytes, offset)
        self.view(ptr, np.uint8, arr.nbytes)[:] = arr.reshape(-1).view(np.uint8)
        return FakeTensor(ptr, arr.dtype, arr.shape)

    def empty(self, dtype, shape):
        return self.tensor(np.zeros(shape, dtype))

    def read(self, t):
        return self.view(t.ptr, t.dtype, t.size).reshape(t.shape).copy()


def codes_model(words: np.ndarray, bits: int) -> np.ndarray:
    """group_codes: the 16 codes of ``words`` (..., bits / 2) uint32, as float32 2^23 + code."""
    def byte(x, i):
        return (x >> np.uint32(8 * i)) & np.uint32(0xFF)

    q = np.zeros(words.shape[:-1] + (16,), np.uint32)
    if bits == 8:
        for h in range(4):
            for i in range(4):
                q[..., 4 * h + i] = byte(words[..., h], i)
    elif bits == 4:
        for h in range(2):
            lo = words[..., h] & np.uint32(0x0F0F0F0F)
            hi = (words[..., h] >> np.uint32(4)) & np.uint32(0x0F0F0F0F)
            for i in range(4):
                q[..., h * 8 + 2 * i] = byte(lo, i)
                q[..., h * 8 + 2 * i + 1] = byte(hi, i)
    else:
        for s in range(4):
            t = (words[..., 0] >> np.uint32(2 * s)) & np.uint32(0x03030303)
            for i in range(4):
                q[..., 4 * i + s] = byte(t, i)
    return (q | np.uint32(0x4B000000)).view(np.float32)


def zero_point_model(mem, zp_ptr, g, bits, dtype, blk):
    n = g.n
    if g.zp_mode == 1:
        rows = mem.view(zp_ptr, np.uint8, n * g.zp_row_bytes).reshape(n, g.zp_row_bytes)
        bit = blk * bits
        return ((rows[:, bit >> 3] >> (bit & 7)) & ((1 << bits) - 1)).astype(np.float32)
    if g.zp_mode == 2:
        return mem.view(zp_ptr, dtype, n * g.n_blocks).reshape(n, -1)[:, blk].astype(
            np.float32)
    return np.full(n, 1 << (bits - 1), np.float32)


def gemv_model(mem, sym, args, shared):
    bits, rows, dtype = int(sym.split("_")[2][1:]), int(sym.split("_")[3][1:].split("r")[0]), \
        SFX[sym.split("_")[4]]
    a_ptr, b_ptr, s_ptr, zp_ptr, bias_ptr, y_ptr = (int(v) for v, _ in args[:6])
    g = args[6][0]
    stride = g.padded_k + 4 * (-(-g.padded_k // 32))     # apad's 4 floats after every 32
    assert g.m <= rows and shared == 4 * g.m * (stride + g.padded_k // 16)
    f32 = np.float32
    a = np.zeros((g.m, g.padded_k), f32)
    a[:, :g.k] = mem.view(a_ptr, dtype, g.m * g.k).reshape(g.m, g.k).astype(f32)
    asum = a.reshape(g.m, -1, 16).sum(-1, dtype=f32)
    words = mem.view(b_ptr, np.uint8, g.n * g.row_bytes).reshape(g.n, -1).view("<u4")
    scales = mem.view(s_ptr, dtype, g.n * g.n_blocks).reshape(g.n, -1).astype(f32)
    codes = 128 // bits
    one_block = (1 << g.log2_block) >= codes
    acc = np.zeros((g.m, g.n), f32)
    assert g.chunks * 4 == words.shape[1]
    for c in range(g.chunks):
        if c * codes >= g.k:
            continue
        s = zb = zf = None
        part = np.zeros((g.m, g.n), f32)
        for gi in range(8 // bits):
            k = c * codes + gi * 16
            if k >= g.k:
                break
            if gi == 0 or not one_block:
                if gi > 0:
                    acc += part * s
                blk = k >> g.log2_block
                s = scales[:, blk]
                z = zero_point_model(mem, zp_ptr, g, bits, dtype, blk)
                zi = np.rint(z)
                zb, zf = f32(8388608.0) + zi, zi - z
                part = np.zeros((g.m, g.n), f32)
            w = words[:, 4 * c + gi * bits // 2: 4 * c + (gi + 1) * bits // 2]
            q = codes_model(w, bits) - zb[:, None]
            part += a[:, k:k + 16] @ q.T
            if g.zp_mode == 2:
                part += zf[None, :] * asum[:, k // 16, None]
        acc += part * s
    if bias_ptr:
        acc = acc + mem.view(bias_ptr, dtype, g.n).astype(f32)
    mem.view(y_ptr, dtype, g.m * g.n)[:] = acc.reshape(-1).astype(dtype)


def mma_model(mem, sym, args, shared, threads):
    """nbits_mma_b4_<T>: each 32-code unit's exact sum of (code - zero point) * A, rounded to
    float32 (the tensor core's float32 sums), scaled by its block's scale; the units of a
    row split into ``kw`` warps' ranges of ``upw`` (each summed in order, the ranges then
    added in order), as the kernel does."""
    dtype = SFX[sym.split("_")[3]]
    a_ptr, b_ptr, s_ptr, zp_ptr, bias_ptr, y_ptr = (int(v) for v, _ in args[:6])
    g = args[6][0]
    assert g.k % 32 == 0 and g.units == g.k // 32 and 1 <= g.m <= 8 and g.log2_block >= 5
    assert g.kw in (1, 2, 4, 8) and g.upw * g.kw >= g.units and threads // 32 % g.kw == 0
    # warps past the first split a row's units in parts of MMA_SPLIT units
    assert g.kw == 1 or g.upw % nm.MMA_SPLIT == 0
    assert threads <= 256 and shared == nm.mma_shared_bytes(g.m, g.k, threads)
    f32 = np.float32
    a = mem.view(a_ptr, dtype, g.m * g.k).reshape(g.m, g.k).astype(np.float64)
    rows = mem.view(b_ptr, np.uint8, g.n * g.row_bytes).reshape(g.n, g.row_bytes)
    codes = np.stack([rows & 15, rows >> 4], axis=-1).reshape(g.n, -1)[:, :g.k]
    scales = mem.view(s_ptr, dtype, g.n * g.n_blocks).reshape(g.n, -1).astype(f32)
    if g.zp_mode == 1:
        zrow = mem.view(zp_ptr, np.uint8, g.n * g.zp_row_bytes).reshape(g.n, -1)
        zp = np.stack([zrow & 15, zrow >> 4], axis=-1).reshape(g.n, -1)[:, :g.n_blocks]
    else:
        assert g.zp_mode == 0
        zp = np.full((g.n, g.n_blocks), 8)
    acc = np.zeros((g.m, g.n), f32)
    for p in range(g.kw):
        part = np.zeros((g.m, g.n), f32)
        for u in range(p * g.upw, min((p + 1) * g.upw, g.units)):
            blk = (u * 32) >> g.log2_block
            q = codes[:, 32 * u:32 * u + 32].astype(np.float64) - zp[:, blk, None]
            unit = (a[:, 32 * u:32 * u + 32] @ q.T).astype(f32)
            part = part + scales[None, :, blk] * unit
        acc = acc + part
    if bias_ptr:
        acc = acc + mem.view(bias_ptr, dtype, g.n).astype(f32)
    mem.view(y_ptr, dtype, g.m * g.n)[:] = acc.reshape(-1).astype(dtype)


def dequant_model(mem, sym, args):
    bits, dtype = int(sym.split("_")[2][1:]), SFX[sym.split("_")[3]]
    b_ptr, s_ptr, zp_ptr, w_ptr = (int(v) for v, _ in args[:4])
    g, n0, rows = args[4][0], int(args[5][0]), int(args[6][0])
    words = mem.view(b_ptr, np.uint8, g.n * g.row_bytes).reshape(g.n, -1).view("<u4")
    scales = mem.view(s_ptr, dtype, g.n * g.n_blocks).reshape(g.n, -1).astype(np.float32)
    w = np.zeros((g.n, g.padded_k), np.float32)
    for grp in range(g.padded_k // 16):
        k = grp * 16
        blk = k >> g.log2_block
        z = zero_point_model(mem, zp_ptr, g, bits, dtype, blk)
        q = codes_model(words[:, grp * bits // 2:(grp + 1) * bits // 2], bits)
        if g.zp_mode == 2:
            q = (q - np.float32(8388608.0)) - z[:, None]
        else:
            q = q - (np.float32(8388608.0) + z[:, None])
        w[:, k:k + 16] = q * scales[:, blk, None]
    out = w[n0:n0 + rows, :g.k].astype(dtype)
    mem.view(w_ptr, dtype, rows * g.k)[:] = out.reshape(-1)


def replay(mem, calls, dtype):
    """Run the recorded launches on the fake memory, in order."""
    for call in calls:
        if call[0] == "gemm":
            _, p, a_ptr, w_ptr, d_ptr, _, _, beta = call
            a = mem.view(a_ptr, dtype, p.m * p.k).reshape(p.m, p.k).astype(np.float32)
            w = mem.view(w_ptr, dtype, p.n * p.k).reshape(p.n, p.k).astype(np.float32)
            d = mem.view(d_ptr, dtype, p.m * p.n)
            prod = (a @ w.T).astype(dtype).reshape(-1)
            # the worse of cuBLASLt's behaviours: the product rounded before C is added
            d[:] = (prod.astype(np.float32) + d.astype(np.float32)).astype(dtype) if beta \
                else prod
            continue
        if call[0] == "memset":
            _, ptr, byte, n = call
            mem.view(ptr, np.uint8, n)[:] = byte
            continue
        sym, grid, block, args, shared = call
        if sym.startswith("nbits_gemv_"):
            assert block[0] % args[6][0].tpr == 0
            gemv_model(mem, sym, args, shared)
        elif sym.startswith("nbits_mma_"):
            mma_model(mem, sym, args, shared, block[0])
        elif sym.startswith("nbits_dequant_"):
            dequant_model(mem, sym, args)
        elif sym.startswith("broadcast_rows_"):
            dst, src, total, rows, cols, rs, cs = (int(v) for v, _ in args)
            i = np.arange(total)
            bits_t = np.uint32 if sym.endswith("f32") else np.uint16
            s = mem.view(src, bits_t, int(((i // cols) % rows * rs + i % cols * cs).max()) + 1)
            mem.view(dst, bits_t, total)[:] = s[(i // cols) % rows * rs + i % cols * cs]
        elif sym.startswith("nbits_scatter_"):
            y, src, m, cols, n, n0 = (int(v) for v, _ in args)
            bits_t = np.uint32 if sym.endswith("b32") else np.uint16
            out = mem.view(y, bits_t, m * n).reshape(m, n)
            out[:, n0:n0 + cols] = mem.view(src, bits_t, m * cols).reshape(m, cols)
        elif sym.startswith("gbq_"):
            gbq_model(mem, sym, args)
        else:
            raise AssertionError(sym)


def gbq_model(mem, sym, args):
    _, ds, _, os_ = sym.split("_")
    out_t = SFX[os_]
    data_ptr, idx_ptr, s_ptr, zp_ptr, out_ptr = (int(v) for v, _ in args[:5])
    g = args[5][0]
    idx_t = np.int64 if sym.split("_")[2] == "i64" else np.int32
    o = np.arange(g.total, dtype=np.int64)
    p, rest = o % g.post, o // g.post
    qi, pre = rest % g.nidx, rest // g.nidx
    idx = mem.view(idx_ptr, idx_t, g.nidx).astype(np.int64)[qi]
    idx = np.where(idx < 0, idx + g.dim, idx)
    ok = (idx >= 0) & (idx < g.dim)
    idx = np.where(ok, idx, 0)
    d = (pre * g.dim + idx) * g.post + p
    iq, aq, oq = d % g.inner_q, (d // g.inner_q) % g.dq, d // (g.inner_q * g.dq)
    sidx = (oq * g.nb + aq // g.block) * g.inner_q + iq
    n_data = int(d.max()) // g.per + 1 if d.size else 0
    data = mem.view(data_ptr, np.uint8, n_data).astype(np.int64)
    mask = (1 << g.bits) - 1
    if not g.packed:
        def dec(c):
            v = c & mask
            return np.where(g.is_signed & (v >> (g.bits - 1)).astype(bool), v - (1 << g.bits), v)
        code = dec(data[d])
        z = dec(mem.view(zp_ptr, np.uint8, int(sidx.max()) + 1).astype(np.int64)[sidx]) \
            if g.has_zp else 0
    else:
        code = (data[d // g.per] >> ((d % g.per) * g.bits)) & mask
        if g.has_zp:
            zr, zc = sidx // g.nb, sidx % g.nb
            zb = mem.view(zp_ptr, np.uint8, int(zr.max()) * g.zp_cols + g.zp_cols).astype(
                np.int64)
            z = (zb[zr * g.zp_cols + zc // g.per] >> ((zc % g.per) * g.bits)) & mask
        else:
            z = 1 << (g.bits - 1)
    s = mem.view(s_ptr, out_t, int(sidx.max()) + 1).astype(np.float64)[sidx]
    val = np.where(ok, (code - z).astype(np.float64) * s, 0.0)
    mem.view(out_ptr, out_t, g.total)[:] = round_to(val, out_t)
