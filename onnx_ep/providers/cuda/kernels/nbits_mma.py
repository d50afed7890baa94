"""The tensor-core route of com.microsoft::MatMulNBits on CUDA (``nbits_mma_b4_*`` of
``nbits.cu``; the kernel class is :class:`~.nbits.MatMulNBits`): its launch struct, its
geometry, pure Python (tested on the CPU), and the persistent grid it launches.

A warp takes 16 rows of B and splits nothing (``kw`` 1) when B has rows enough for the
GPU's warps; otherwise ``kw`` warps split a row's 32-code units in parts of
:data:`MMA_SPLIT` units. A warp reads its part in stages (:data:`MMA_STAGE` units of 16
rows, loaded into registers while the warp sums the previous stage from its shared memory).
B that leaves fewer than :data:`MMA_MIN_WARPS` warps busy takes the float32 gemv instead.
"""

from __future__ import annotations

import ctypes
from typing import Any

import attrs
import numpy as np

from onnx_ep.core.kernel import ExecutionContext
from onnx_ep.providers.cuda.kernels.base import BF16
from onnx_ep.providers.shared.nbits import NBitsGeometry

#: rows of A it takes at most: the n = 8 of mma.m16n8k16
MMA_MAX_M = 8
#: dynamic shared memory a block of either MatMulNBits gemv may opt in to: every sm_80+
#: device allows 96 KiB (sm_86 / sm_89 at most 99); nbits.py's GEMV_SMEM_MAX is this one
SMEM_MAX = 96 * 1024


class NbMma(ctypes.Structure):
    """``struct NbMma`` of nbits.cu (by value)."""

    _fields_ = [("n", ctypes.c_int64), ("k", ctypes.c_int32), ("m", ctypes.c_int32),
                ("n_blocks", ctypes.c_int32), ("log2_block", ctypes.c_int32),
                ("row_bytes", ctypes.c_int32), ("units", ctypes.c_int32),
                ("kw", ctypes.c_int32), ("upw", ctypes.c_int32), ("zp_mode", ctypes.c_int32),
                ("zp_row_bytes", ctypes.c_int32)]


#: take the tensor-core gemv where it applies (False: the float32 gemv for every decode)
MMA_ROUTE = True
#: activations the tensor-core gemv takes (float32 would need tf32, which rounds A)
MMA_FLOATS = frozenset((np.dtype(np.float16), BF16))
#: threads of its blocks, and warps it aims for (16 per H200 multiprocessor). Where ``kw``
#: warps split a row, a block holds 32 * kw threads at least (the kernel allows 256)
MMA_THREADS = 128
MMA_MAX_KW = 8
MMA_TARGET_WARPS = 132 * 16
#: nbits.cu's stages: 32-code units of 16 rows a stage, and a warp's shared memory (the
#: stage's codes, float scales and zero-point pairs)
MMA_STAGE = 16
MMA_WARP_BYTES = 16 * (MMA_STAGE * 16 + 16) + 2 * 16 * (MMA_STAGE + 1) * 4
#: units a part of a split row is a multiple of (a part's last stage may be partial: lanes
#: past its units reread its last one, and only its units are summed)
MMA_SPLIT = 8
#: warps (16-row groups of B x kw) it needs at least: with fewer, the float32 gemv (more
#: threads a row) is taken. On the H200 (L2 flushed by a read; us, float32 gemv against
#: tensor cores) it won at 224 warps (4864 x 896: 10.19 / 8.83 with kw 8; 896 x 896: 7.42 /
#: 6.43) and above (896 x 1152: 7.55 / 6.46; 896 x 4864: 8.64 / 7.42; 11008 x 4096:
#: 45.57 / 15.58); narrower B was not measured
MMA_MIN_WARPS = 224


@attrs.frozen
class Mma:
    """One tensor-core gemv launch (``nbits_mma_b4_*``): ``kw`` warps share 16 rows of B,
    each taking ``upw`` of a row's 32-code units."""

    kw: int
    upw: int
    grid: tuple[int, int, int]
    shared_bytes: int
    threads: int = MMA_THREADS

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.threads, 1, 1)


def mma_shared_bytes(m: int, k: int, threads: int) -> int:
    """Dynamic shared memory of ``nbits_mma_b4_*``: each warp's stage, A as T, and the warps'
    partial sums."""
    return threads // 32 * MMA_WARP_BYTES + 2 * m * k + threads * 16


def mma_geometry(plan: NBitsGeometry, m: int, dtype: Any, zp_mode: int,
                 arch: int) -> Mma | None:
    """The tensor-core gemv for ``m`` rows of A, or ``None`` where it does not apply: it
    takes 4-bit codes in blocks of 32 or more, K a multiple of 32, zero points none or
    packed, float16 or bfloat16 A of at most 8 rows, on sm_80 and later (``arch`` 80).
    Where few rows of B leave warps idle, ``kw`` warps (up to :data:`MMA_MAX_KW`, a block
    of ``32 * kw`` threads) split a row's units, in parts of :data:`MMA_SPLIT`; B that leaves
    fewer than :data:`MMA_MIN_WARPS` warps busy even so takes the gemv."""
    if (not MMA_ROUTE or arch < 80 or plan.bits != 4 or plan.block < 32 or plan.k % 32
            or zp_mode not in (0, 1) or np.dtype(dtype) not in MMA_FLOATS
            or not 1 <= m <= MMA_MAX_M):
        return None
    units, groups = plan.k // 32, -(-plan.n // 16)
    # a wider block where that many warps split a row, unless A leaves it no shared memory
    for max_kw in dict.fromkeys((max(MMA_MAX_KW, MMA_THREADS // 32), MMA_THREADS // 32)):
        kw, upw = 1, units
        while kw * 2 <= max_kw and groups * kw < MMA_TARGET_WARPS:
            per = -(-units // (2 * kw))
            split = -(-per // MMA_SPLIT) * MMA_SPLIT
            if -(-units // split) <= kw:      # no more warps would have units
                break
            kw, upw = 2 * kw, split
        threads = max(MMA_THREADS, 32 * kw)
        smem = mma_shared_bytes(m, plan.k, threads)
        if smem <= SMEM_MAX:
            break
    else:
        return None
    if groups * kw < MMA_MIN_WARPS:
        return None
    blocks = -(-groups // (threads // 32 // kw))
    return Mma(kw, upw, (min(blocks, 65535), 1, 1), smem, threads)



def resident_blocks(ctx: ExecutionContext, fn: Any, threads: int, shared_bytes: int) -> int:
    """Blocks of ``fn`` the whole device holds at once (0 when the stream does not say)."""
    sms = getattr(getattr(ctx.stream, "device", None), "multiprocessors", 0)
    if not isinstance(sms, int) or sms <= 0:
        return 0
    from onnx_ep.providers.cuda import launch

    return launch.max_active_blocks(fn, threads, shared_bytes) * sms


