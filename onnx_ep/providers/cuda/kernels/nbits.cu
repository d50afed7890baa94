// onnxruntime's block-quantized weight ops (com.microsoft): MatMulNBits and
// GatherBlockQuantized (cpu_reference/quant_contrib.py is the oracle).
//
// MatMulNBits: W[n, k] = (code[n, k] - zp[n, b]) * scale[n, b], b = k / block_size; codes of
// BITS (2, 4, 8) packed low bits first, row n of B is its padded_k * BITS / 8 bytes, contiguous.
// Zero points: zp_mode 0 none (2^(BITS-1)), 1 packed uint8 like B (a row of zp_row_bytes), 2 of
// T (T is A's type, also the scales' and the bias'). Codes past K (the last block's padding)
// are never used.
//
// - nbits_gemv_b<BITS>_m<MAXM>r<RB>_<T>: Y = A W^T (+ bias) for M <= MAXM rows of A (decode).
//   Reads B in its stored layout, 16 bytes a load (the host takes this route only for rows of
//   whole 16-byte chunks, and B 16-byte aligned): tpr threads per output row n (8..256, a
//   power of two), thread t takes the row's 16-byte chunks t, t + tpr, ..., cpt of them a
//   pass, for RB rows of B at once (RB 4 for one row of A and many rows of B: the LM head),
//   all loaded before any is used.
//   A is staged in shared memory as float (zero past K), with the sum of each 16 of its
//   values. Each 16-code group lies in one quantization block (block_size is a power of two
//   >= 16): its codes become exact floats by the magic-number trick (byte | 0x4B000000 is
//   2^23 + byte), minus the zero point's integer part, exactly; a float32 dot product with
//   A (two partial sums) per block is scaled once, a fractional zero point (of T) enters
//   through the group's sum of A. Lanes of a row reduce by xor shuffles, rows of more than
//   32 threads through shared memory, always in the same order (deterministic). The bias is
//   added in float32 and the sum rounded once to T.
// - nbits_dequant_b<BITS>_<T>: W rows [n0, n0 + rows) as T ([rows, K], float32 arithmetic,
//   rounded once), the operand of the cuBLASLt GEMM of large M (prefill).
// - nbits_scatter_b16 / _b32: a [M, cols] block into columns [n0, n0 + cols) of Y [M, N].
//
// GatherBlockQuantized, gbq_<data>_<index>_<T>: one thread per output element; data int4 /
// uint4 (one element per byte, low nibble, as ml_dtypes stores them) or uint8 holding
// 8 / bits codes along the last axis. (code - zp) * scale in float64, rounded once: exact.
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

// the most threads of a gemv block (the host launches 64, 128 or 256)
#define NB_THREADS 256

// one MatMulNBits call's geometry (Python: nbits.NbGeo); by value
struct NbGeo {
    long long n;       // N, output columns (rows of B)
    int k;             // K
    int padded_k;      // K rounded up to whole blocks
    int m;             // rows of A
    int n_blocks;      // blocks per row of B
    int log2_block;    // log2(block_size)
    int row_bytes;     // bytes of a row of B
    int chunks;        // row_bytes / chunk bytes (gemv)
    int tpr;           // threads per output row (gemv)
    int cpt;           // chunks a thread loads per pass (gemv; at most the kernel's MAXU)
    int zp_mode;       // 0 none, 1 packed uint8, 2 of T
    int zp_row_bytes;  // bytes of a row of packed zero points
};

// ------------------------------------------------------------------ helpers

// the float 2^23 + byte I of w: exact for any byte. The selector is an immediate and the
// magic word a register (PTX prmt), so the permute costs one instruction
template <int I>
__device__ __forceinline__ float magic_byte(u32 w, u32 magic) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(w), "r"(magic), "n"(0x7440 + I));
    return __uint_as_float(r);
}

// the 16 codes of a group held in words w[0 .. BITS / 2) as 2^23 + code, in k order
template <int BITS>
__device__ __forceinline__ void group_codes(const u32* w, float (&q)[16]) {
    const u32 magic = 0x4B000000u;
    if constexpr (BITS == 8) {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            q[4 * h] = magic_byte<0>(w[h], magic);
            q[4 * h + 1] = magic_byte<1>(w[h], magic);
            q[4 * h + 2] = magic_byte<2>(w[h], magic);
            q[4 * h + 3] = magic_byte<3>(w[h], magic);
        }
    } else if constexpr (BITS == 4) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32 lo = w[h] & 0x0F0F0F0Fu, hi = (w[h] >> 4) & 0x0F0F0F0Fu;
            q[h * 8] = magic_byte<0>(lo, magic);
            q[h * 8 + 1] = magic_byte<0>(hi, magic);
            q[h * 8 + 2] = magic_byte<1>(lo, magic);
            q[h * 8 + 3] = magic_byte<1>(hi, magic);
            q[h * 8 + 4] = magic_byte<2>(lo, magic);
            q[h * 8 + 5] = magic_byte<2>(hi, magic);
            q[h * 8 + 6] = magic_byte<3>(lo, magic);
            q[h * 8 + 7] = magic_byte<3>(hi, magic);
        }
    } else {
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const u32 t = (w[0] >> (2 * s)) & 0x03030303u;
            q[s] = magic_byte<0>(t, magic);
            q[4 + s] = magic_byte<1>(t, magic);
            q[8 + s] = magic_byte<2>(t, magic);
            q[12 + s] = magic_byte<3>(t, magic);
        }
    }
}

// zero point of block blk of row n as float
template <class T, int BITS>
__device__ __forceinline__ float zero_point(const void* __restrict__ zp, const NbGeo& g,
                                            long long n, int blk) {
    if (g.zp_mode == 1) {
        const u8* row = (const u8*)zp + n * g.zp_row_bytes;
        const int bit = blk * BITS;
        return (float)((__ldg(row + (bit >> 3)) >> (bit & 7)) & ((1 << BITS) - 1));
    }
    if (g.zp_mode == 2) return to_f32(__ldg(((const T*)zp) + n * g.n_blocks + blk));
    return (float)(1 << (BITS - 1));
}

// q[j] = code - zero point: one exact subtraction for an integer zero point, the float
// code minus a zero point of T (one rounding) otherwise
__device__ __forceinline__ void minus_zero_point(float (&q)[16], float z, bool typed) {
    if (!typed) {
        const float zb = 8388608.0f + z;
#pragma unroll
        for (int j = 0; j < 16; ++j) q[j] = q[j] - zb;
    } else {
#pragma unroll
        for (int j = 0; j < 16; ++j) q[j] = (q[j] - 8388608.0f) - z;
    }
}

// a 16-byte load that does not displace A and the scales from L1: B is read once
__device__ __forceinline__ uint4 load_stream16(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// ------------------------------------------------------------------ gemv (small M)

// A is staged with 4 floats of padding after every 32: the threads of a row read chunks
// 64-256 bytes apart, which would otherwise all fall in the same shared-memory banks
__device__ __forceinline__ int apad(int k) { return k + ((k >> 5) << 2); }
__device__ __forceinline__ int a_stride(const NbGeo& g) {
    return g.padded_k + (((g.padded_k + 31) >> 5) << 2);
}

// 16 bytes of a row of B: 128 / BITS codes, 8 / BITS groups of 16
template <int BITS> struct Chunk {
    static constexpr int BYTES = 16;
    static constexpr int CODES = 128 / BITS;
    static constexpr int GROUPS = 8 / BITS;
    u32 w[4];

    __device__ __forceinline__ void load(const u8* __restrict__ p) {
        const uint4 r = load_stream16(p);
        w[0] = r.x; w[1] = r.y; w[2] = r.z; w[3] = r.w;
    }
};

// A [m, K] into shared memory as float, zero past K. Every load of a batch is in flight
// before any store (K / blockDim loads one after the other would cost a memory latency
// each); rows of whole, aligned 16-byte vectors are read 16 bytes a load, so a row of
// thousands of values is one batch.
template <class T>
__device__ __forceinline__ void stage_a(const T* __restrict__ a, float* __restrict__ as,
                                        const NbGeo& g) {
    constexpr int V = 16 / sizeof(T), APER = 8;
    const int stride = a_stride(g);
    if ((reinterpret_cast<size_t>(a) & 15) == 0 && g.k % V == 0) {
        const int per_row = g.padded_k / V, total = g.m * per_row;   // padded_k % 16 == 0
        for (int i0 = threadIdx.x; i0 < total; i0 += APER * blockDim.x) {
            uint4 v[APER];
#pragma unroll
            for (int u = 0; u < APER; ++u) {
                const int i = i0 + u * blockDim.x, k = (i % per_row) * V;
                v[u] = make_uint4(0, 0, 0, 0);
                if (i < total && k < g.k)
                    v[u] = __ldg(reinterpret_cast<const uint4*>(a + (long long)(i / per_row)
                                                                * g.k + k));
            }
#pragma unroll
            for (int u = 0; u < APER; ++u) {
                const int i = i0 + u * blockDim.x, k = (i % per_row) * V;
                if (i >= total) break;
                const T* x = reinterpret_cast<const T*>(&v[u]);
                // V values from k (a multiple of V) never cross apad's 32-value rows
                float4* dst = reinterpret_cast<float4*>(as + (i / per_row) * stride + apad(k));
#pragma unroll
                for (int j = 0; j < V / 4; ++j)
                    dst[j] = make_float4(to_f32(x[4 * j]), to_f32(x[4 * j + 1]),
                                         to_f32(x[4 * j + 2]), to_f32(x[4 * j + 3]));
            }
        }
        return;
    }
    for (int m = 0; m < g.m; ++m)
        for (int k0 = 0; k0 < g.padded_k; k0 += APER * blockDim.x) {
            float v[APER];
#pragma unroll
            for (int u = 0; u < APER; ++u) {
                const int k = k0 + threadIdx.x + u * blockDim.x;
                v[u] = k < g.k ? to_f32(a[(long long)m * g.k + k]) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < APER; ++u) {
                const int k = k0 + threadIdx.x + u * blockDim.x;
                if (k < g.padded_k) as[m * stride + apad(k)] = v[u];
            }
        }
}

// one quantization block's zero point for a row, as the subtrahend of a magic code zb (its
// integer part) and a fraction zf (only a zero point of T has one)
template <class T, int BITS>
__device__ __forceinline__ void block_zero(const void* __restrict__ zp, const NbGeo& g,
                                           long long n, int blk, float& zb, float& zf) {
    const float z = zero_point<T, BITS>(zp, g, n, blk);
    const float zi = rintf(z);
    zb = 8388608.0f + zi;
    zf = zi - z;
}

// acc[r][m] += scale * sum over a block's codes of chunk c of row n0 + r * rstep of B times
// A[m, k] * (code - zp), for RB rows of B (RB > 1 only with one row of A: its values are
// read from shared memory once for every row). The zero point splits into its integer part,
// subtracted from each code exactly, and a fraction (only a zero point of T has one),
// applied once per group through the group's sum of A, asum. A chunk inside one block
// (one_block: block_size >= its codes) uses the scale s_first loaded beside its codes.
template <class T, int BITS, int MAXM, int RB, int MAXU>
__device__ __forceinline__ void gemv_chunk(const Chunk<BITS> (&ch)[RB][MAXU], int u, int c,
                                           long long n0, long long rstep,
                                           const float* __restrict__ as,
                                           const float* __restrict__ asum,
                                           const T* __restrict__ scales,
                                           const void* __restrict__ zp, const NbGeo& g,
                                           bool one_block, const float (&s_first)[RB][MAXU],
                                           float (&acc)[RB][MAXM]) {
    constexpr int CODES = Chunk<BITS>::CODES;
    if (c * CODES >= g.k) return;   // all padding (K far below the last block's end)
    float s[RB], zb[RB], zf[RB], pa[RB][MAXM], pb[RB][MAXM];
#pragma unroll
    for (int gi = 0; gi < Chunk<BITS>::GROUPS; ++gi) {
        const int k = c * CODES + gi * 16;
        if (k >= g.k) break;   // the last block's padding
        if (gi == 0 || !one_block) {
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                if (gi > 0) {
#pragma unroll
                    for (int m = 0; m < MAXM; ++m)
                        acc[r][m] = fmaf(pa[r][m] + pb[r][m], s[r], acc[r][m]);
                }
                // a row past N (its sums are dropped) reads the last row's parameters
                const long long n = min(n0 + r * rstep, g.n - 1);
                const int blk = k >> g.log2_block;
                s[r] = gi == 0 ? s_first[r][u] : to_f32(__ldg(scales + n * g.n_blocks + blk));
                block_zero<T, BITS>(zp, g, n, blk, zb[r], zf[r]);
#pragma unroll
                for (int m = 0; m < MAXM; ++m) pa[r][m] = pb[r][m] = 0.0f;
            }
        }
        if constexpr (RB == 1) {
            float q[16];
            group_codes<BITS>(&ch[0][u].w[gi * BITS / 2], q);
#pragma unroll
            for (int j = 0; j < 16; ++j) q[j] = q[j] - zb[0];
#pragma unroll
            for (int m = 0; m < MAXM; ++m) {
                if (m >= g.m) break;
                const float4* p = reinterpret_cast<const float4*>(as + m * a_stride(g) +
                                                                  apad(k));
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float4 x = p[i];
                    pa[0][m] = fmaf(x.x, q[4 * i], pa[0][m]);
                    pb[0][m] = fmaf(x.y, q[4 * i + 1], pb[0][m]);
                    pa[0][m] = fmaf(x.z, q[4 * i + 2], pa[0][m]);
                    pb[0][m] = fmaf(x.w, q[4 * i + 3], pb[0][m]);
                }
                if (g.zp_mode == 2)
                    pb[0][m] = fmaf(zf[0], asum[m * (g.padded_k >> 4) + (k >> 4)], pb[0][m]);
            }
        } else {
            static_assert(MAXM == 1, "several rows of B per thread take one row of A");
            const float4* p = reinterpret_cast<const float4*>(as + apad(k));
            float4 x[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) x[i] = p[i];
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                float q[16];
                group_codes<BITS>(&ch[r][u].w[gi * BITS / 2], q);
#pragma unroll
                for (int j = 0; j < 16; ++j) q[j] = q[j] - zb[r];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    pa[r][0] = fmaf(x[i].x, q[4 * i], pa[r][0]);
                    pb[r][0] = fmaf(x[i].y, q[4 * i + 1], pb[r][0]);
                    pa[r][0] = fmaf(x[i].z, q[4 * i + 2], pa[r][0]);
                    pb[r][0] = fmaf(x[i].w, q[4 * i + 3], pb[r][0]);
                }
                if (g.zp_mode == 2) pb[r][0] = fmaf(zf[r], asum[k >> 4], pb[r][0]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int m = 0; m < MAXM; ++m) acc[r][m] = fmaf(pa[r][m] + pb[r][m], s[r], acc[r][m]);
}

// MAXU: 16-byte chunks of a row a thread holds at once (g.cpt of them are used), RB: rows
// of B a thread takes at once. A block of `rows` slots (tpr threads each) covers RB * rows
// rows of B a pass: slot j takes rows base + j, base + j + rows, ... (neighbouring slots
// read neighbouring rows). Each thread loads every chunk of its rows for a pass (up to
// RB * MAXU loads in flight) before it computes; a row of more than tpr * cpt chunks takes
// several passes.
template <class T, int BITS, int MAXM, int RB, int MAXU>
__device__ void nbits_gemv(const T* __restrict__ a, const u8* __restrict__ b,
                           const T* __restrict__ scales, const void* __restrict__ zp,
                           const T* __restrict__ bias, T* __restrict__ y, NbGeo g) {
    extern __shared__ float4 nb_smem[];
    __shared__ float red[NB_THREADS / 32][RB * MAXM];
    float* as = reinterpret_cast<float*>(nb_smem);
    const int groups = g.padded_k >> 4;
    float* asum = as + g.m * a_stride(g);
    typedef Chunk<BITS> C;
    const int tpr = g.tpr, cpt = g.cpt, rows = blockDim.x / tpr;
    const int slot = threadIdx.x / tpr, t = threadIdx.x % tpr;
    const int per_pass = tpr * cpt, passes = (g.chunks + per_pass - 1) / per_pass;
    const long long span = (long long)rows * RB;
    C ch[RB][MAXU];
    float s0[RB][MAXU];      // each chunk's first scale, loaded beside its codes
    // a pass's loads: chunks c0 + u * tpr of rows base + slot + r * rows
    auto load = [&](long long base, int c0) {
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            const long long n = base + slot + r * rows;
#pragma unroll
            for (int u = 0; u < MAXU; ++u) {
                const int c = c0 + u * tpr;
                s0[r][u] = 0.0f;
                ch[r][u].w[0] = ch[r][u].w[1] = ch[r][u].w[2] = ch[r][u].w[3] = 0u;
                if (u < cpt && n < g.n && c < g.chunks) {
                    ch[r][u].load(b + n * g.row_bytes + (long long)c * C::BYTES);
                    if (c * C::CODES < g.k)
                        s0[r][u] = to_f32(__ldg(scales + n * g.n_blocks +
                                                ((c * C::CODES) >> g.log2_block)));
                }
            }
        }
    };
    // B does not depend on A: the first pass's chunks load before A is staged, so their
    // memory latency overlaps A's instead of following it
    long long base = (long long)blockIdx.x * span;
    if (base < g.n) load(base, t);
    stage_a<T>(a, as, g);
    __syncthreads();
    if (g.zp_mode == 2) {     // only a zero point of T has a fraction that reads the sums
        for (int i = threadIdx.x; i < g.m * groups; i += blockDim.x) {
            const float* x = as + (i / groups) * a_stride(g) + apad((i % groups) * 16);
            float v = 0.0f;
            for (int j = 0; j < 16; ++j) v = v + x[j];
            asum[i] = v;
        }
        __syncthreads();
    }
    const int width = tpr < 32 ? tpr : 32;
    const bool one_block = (1 << g.log2_block) >= C::CODES;
    for (; base < g.n; base += (long long)gridDim.x * span) {
        float acc[RB][MAXM];
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int m = 0; m < MAXM; ++m) acc[r][m] = 0.0f;
        const long long n0 = base + slot;
        for (int p = 0; p < passes; ++p) {
            const int c0 = t + p * per_pass;
            if (p > 0) load(base, c0);
#pragma unroll
            for (int u = 0; u < MAXU; ++u) {
                const int c = c0 + u * tpr;
                if (u < cpt && c < g.chunks && n0 < g.n)
                    gemv_chunk<T, BITS, MAXM, RB, MAXU>(ch, u, c, n0, rows, as, asum, scales,
                                                        zp, g, one_block, s0, acc);
            }
        }
        // rows past N (n0 + r * rows >= N) summed codes of no row: their sums are dropped
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int m = 0; m < MAXM; ++m)
                for (int off = width >> 1; off > 0; off >>= 1)
                    acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], off);
        if (tpr > 32) {
            const int warp = threadIdx.x >> 5;
            if ((threadIdx.x & 31) == 0) {
#pragma unroll
                for (int r = 0; r < RB; ++r)
#pragma unroll
                    for (int m = 0; m < MAXM; ++m) red[warp][r * MAXM + m] = acc[r][m];
            }
            __syncthreads();
            if (t == 0) {
#pragma unroll
                for (int r = 0; r < RB; ++r)
#pragma unroll
                    for (int m = 0; m < MAXM; ++m) {
                        float v = red[warp][r * MAXM + m];
                        for (int i = 1; i < tpr / 32; ++i) v += red[warp + i][r * MAXM + m];
                        acc[r][m] = v;
                    }
            }
            __syncthreads();
        }
        if (t == 0) {
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const long long n = n0 + r * rows;
                if (n >= g.n) break;
                const float bv = bias ? to_f32(bias[n]) : 0.0f;
#pragma unroll
                for (int m = 0; m < MAXM; ++m) {
                    if (m >= g.m) break;
                    y[(long long)m * g.n + n] = round_from32<T>(acc[r][m] + bv);
                }
            }
        }
        if (base + (long long)gridDim.x * span < g.n) load(base + (long long)gridDim.x * span, t);
    }
}

// ------------------------------------------------------------------ gemv on tensor cores

// nbits_mma_b4_<T> (T f16 or bf16, sm_80+): Y = A W^T (+ bias) for M <= 8 rows of A, 4-bit
// codes, block_size a multiple of 32, zero points none or packed uint8, K a multiple of 32
// (the host takes this route only then). A warp takes 16 rows of B (base + g, base + g + 8
// for lane group g = lane / 4) and a range of 32-code units of them; lane q = lane % 4 holds
// word q of a unit (codes 8q .. 8q + 7) of both rows. Each code pair becomes an exact pair of
// T by the magic trick (0x6400 | code is 1024 + code in f16, 0x4300 | code 128 + code in
// bf16) less the same magic of the zero point: code - zp, exactly. Two mma.m16n8k16 steps
// take a unit, their k order the word's codes 0,4,1,5 | 2,6,3,7, and A is staged in shared
// memory as T in that order, so a lane's B fragment (column g: row g of A) is 4 consecutive
// values. A unit's sum (exact products, float32 sums in the tensor core) is scaled by its
// block's scale in float32 and accumulated; kw warps sharing 16 rows split the units and add
// their sums in shared memory in a fixed order (deterministic). The bias is added in float32
// and the sum rounded once to T.
//
// B reaches the warp in stages of 16 rows x MMA_STAGE units: each lane loads 16-byte units
// (lane l: unit l % 16 of rows 2j + l / 16, eight 16-byte loads, two rows of 256 contiguous
// bytes a warp load) and the scales and zero points of its units into registers, while the
// warp sums the previous stage from shared memory; then it stores them there (the scales as
// float32, the zero points as the pair the codes subtract). One stage is in flight a warp
// and a multiprocessor holds 16 warps (128 registers a thread). On the H200 this reads the
// LM head's 68 MB (896 x 151936) at 2.2 TB/s; a ring of cp.async stages of 8 units (the
// previous design) read it at 1.5, and a lane's 4-byte word of 16 rows read straight from
// global memory (the first) at 1.2: every load touched 16 cache lines for 64 useful bytes.
// With B in L2 it takes as long, so the arithmetic, not HBM, sets its pace now.
struct NbMma {
    long long n;       // N
    int k;             // K (a multiple of 32)
    int m;             // rows of A (<= 8)
    int n_blocks;      // blocks per row of B
    int log2_block;    // log2(block_size) (>= 5)
    int row_bytes;     // bytes of a row of B
    int units;         // K / 32
    int kw;            // warps sharing 16 rows (1, 2, 4 or 8)
    int upw;           // units per warp (the host splits in multiples of 8)
    int zp_mode;       // 0 none, 1 packed uint8
    int zp_row_bytes;  // bytes of a row of packed zero points
};

// units of a stage, and a warp's shared memory: 16 rows of MMA_STAGE 16-byte units (16 bytes
// of padding a row: lanes reading word q of 8 rows hit 32 different banks), then 16 rows of
// MMA_SROW float scales and as many zero-point pairs (an odd row length: conflict-free)
#define MMA_STAGE 16
// a lane loads one unit of a stage: MMA_STAGE lanes a row, MMA_RPL rows a warp load,
// MMA_LOADS loads a lane
#define MMA_RPL (32 / MMA_STAGE)
#define MMA_LOADS (16 / MMA_RPL)
#define MMA_ROWB (MMA_STAGE * 16 + 16)
#define MMA_SROW (MMA_STAGE + 1)
#define MMA_WARP_BYTES (16 * MMA_ROWB + 2 * 16 * MMA_SROW * 4)
// the most threads of its blocks (the host launches 128 or 256), and blocks of that many a
// multiprocessor's registers hold: 128 registers a thread, 16 warps
#define MMA_THREADS 256
#define MMA_MIN_BLOCKS 2

template <class T> struct MmaOf;
template <> struct MmaOf<f16> {
    static constexpr u32 MAGIC = 0x64006400u;   // 1024 in both halves
    static constexpr u32 ONE = 0x3C003C00u;
    static constexpr int BASE = 1024;
    static __device__ __forceinline__ u32 pair(int v) {      // v (exact) in both halves
        const u32 h = bits16(__float2half_rn((float)v));
        return h | (h << 16);
    }
};
template <> struct MmaOf<bf16> {
    static constexpr u32 MAGIC = 0x43004300u;   // 128 in both halves
    static constexpr u32 ONE = 0x3F803F80u;
    static constexpr int BASE = 128;
    static __device__ __forceinline__ u32 pair(int v) {
        const u32 h = bits16(__float2bfloat16_rn((float)v));
        return h | (h << 16);
    }
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// x - z on pairs of T, as x * 1 + (-z): exact for these small integers
template <class T> __device__ __forceinline__ u32 pair_minus(u32 x, u32 neg_z);
template <> __device__ __forceinline__ u32 pair_minus<f16>(u32 x, u32 neg_z) {
    u32 r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(MmaOf<f16>::ONE), "r"(neg_z));
    return r;
}
template <> __device__ __forceinline__ u32 pair_minus<bf16>(u32 x, u32 neg_z) {
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(MmaOf<bf16>::ONE), "r"(neg_z));
    return r;
}

template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3,
                                         u32 b0, u32 b1);
template <> __device__ __forceinline__ void mma16816<f16>(float (&d)[4], u32 a0, u32 a1,
                                                          u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma16816<bf16>(float (&d)[4], u32 a0, u32 a1,
                                                           u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// codes (s, s + 4) of word w as a pair of magic T: (w >> 4s) & 0x000F000F | MAGIC
template <class T>
__device__ __forceinline__ u32 code_pair(u32 w, int s) {
    u32 r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w >> (4 * s)), "r"(0x000F000Fu),
        "r"(MmaOf<T>::MAGIC));
    return r;
}

// the pairs (codes s, s + 4) - z of word w for s = 0..3 (neg_z: the magic pair of -z). In
// float16 the odd pairs skip their shift: (w & 0x00F000F0) | magic is 1024 + 16 code, and
// fma(x, 1/16, -(64 + z)) is code - z exactly; bfloat16's magic leaves no room for that
template <class T>
__device__ __forceinline__ void word_pairs(u32 w, u32 neg_z, u32 (&p)[4]) {
#pragma unroll
    for (int s = 0; s < 4; ++s) p[s] = pair_minus<T>(code_pair<T>(w, s), neg_z);
}
template <>
__device__ __forceinline__ void word_pairs<f16>(u32 w, u32 neg_z, u32 (&p)[4]) {
    u32 neg_hi, h0, h1;
    // -(1024 + z) + 960 = -(64 + z), exact
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(neg_hi) : "r"(neg_z), "r"(0x63806380u));
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(h0) : "r"(w), "r"(0x00F000F0u),
        "r"(MmaOf<f16>::MAGIC));
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(h1) : "r"(w >> 8), "r"(0x00F000F0u),
        "r"(MmaOf<f16>::MAGIC));
    p[0] = pair_minus<f16>(code_pair<f16>(w, 0), neg_z);
    p[2] = pair_minus<f16>(code_pair<f16>(w, 2), neg_z);
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(p[1]) : "r"(h0), "r"(0x2C002C00u), "r"(neg_hi));
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(p[3]) : "r"(h1), "r"(0x2C002C00u), "r"(neg_hi));
}
#endif

// A [m, K] into shared memory as T, each 8 values in the order 0,4,1,5,2,6,3,7
template <class T>
__device__ __forceinline__ void stage_a_mma(const T* __restrict__ a, T* __restrict__ as,
                                            const NbMma& g) {
    const int total = g.m * g.k;
    if ((reinterpret_cast<size_t>(a) & 15) == 0) {
        for (int i = threadIdx.x * 8; i < total; i += blockDim.x * 8) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(a + i));
            uint4 p;
            p.x = __byte_perm(v.x, v.z, 0x5410);
            p.y = __byte_perm(v.x, v.z, 0x7632);
            p.z = __byte_perm(v.y, v.w, 0x5410);
            p.w = __byte_perm(v.y, v.w, 0x7632);
            *reinterpret_cast<uint4*>(as + i) = p;
        }
        return;
    }
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
        const int j = i & 7;
        as[(i & ~7) | ((j & 3) << 1) | (j >> 2)] = a[i];
    }
}

// a scale as float: a NaN scale makes the sums NaN whatever its payload (the GPU's float
// arithmetic returns its canonical NaN), so the plain conversion is enough here
__device__ __forceinline__ float scale_f32(f16 x) { return __half2float(x); }
__device__ __forceinline__ float scale_f32(bf16 x) { return __bfloat162float(x); }

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// a scale's bits as float
template <class T> __device__ __forceinline__ float scale_bits_f32(u16 h);
template <> __device__ __forceinline__ float scale_bits_f32<f16>(u16 h) {
    return scale_f32(f16_from_bits(h));
}
template <> __device__ __forceinline__ float scale_bits_f32<bf16>(u16 h) {
    return scale_f32(bf16_from_bits(h));
}

// four 16-byte loads in one statement: all are in flight before any is used, and a volatile
// statement stays ahead of the sums that follow it (the mma statements are volatile too)
#define MMA_LD4(V, P)                                                                        \
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%16];\n"                               \
                 "ld.global.cs.v4.u32 {%4,%5,%6,%7}, [%17];\n"                               \
                 "ld.global.cs.v4.u32 {%8,%9,%10,%11}, [%18];\n"                             \
                 "ld.global.cs.v4.u32 {%12,%13,%14,%15}, [%19];\n"                           \
                 : "=r"((V)[0].x), "=r"((V)[0].y), "=r"((V)[0].z), "=r"((V)[0].w),          \
                   "=r"((V)[1].x), "=r"((V)[1].y), "=r"((V)[1].z), "=r"((V)[1].w),          \
                   "=r"((V)[2].x), "=r"((V)[2].y), "=r"((V)[2].z), "=r"((V)[2].w),          \
                   "=r"((V)[3].x), "=r"((V)[3].y), "=r"((V)[3].z), "=r"((V)[3].w)           \
                 : "l"((P)[0]), "l"((P)[1]), "l"((P)[2]), "l"((P)[3]))
__device__ __forceinline__ u16 ld_u16(const void* p) {
    u16 v;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ u16 ld_u8(const void* p) {
    u16 v;
    asm volatile("ld.global.nc.u8 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

// acc += the sums of units us .. us + n of the stage in the warp's shared memory (n =
// MMA_STAGE for every stage but a part's last: a compile-time count leaves no branch between
// units, so the units' loads, conversions and mma chains interleave). ZP: the zero points'
// pairs are in shared memory; otherwise nz8, code - 8's subtrahend.
template <class T, bool ZP, int N>
__device__ __forceinline__ void mma_stage(const u8* __restrict__ slot, int us, int n,
                                          const T* __restrict__ xa, int gr, int q, u32 nz8,
                                          float (&acc)[4]) {
    const float* sc = reinterpret_cast<const float*>(slot + 16 * MMA_ROWB);
    const u32* zq = reinterpret_cast<const u32*>(sc + 16 * MMA_SROW);
#pragma unroll
    for (int i = 0; i < N; ++i) {
        if (N != MMA_STAGE && i >= n) break;
        const u32 wa = *reinterpret_cast<const u32*>(slot + gr * MMA_ROWB + i * 16 + q * 4);
        const u32 wb = *reinterpret_cast<const u32*>(slot + (gr + 8) * MMA_ROWB + i * 16 +
                                                      q * 4);
        const float sa = sc[gr * MMA_SROW + i], sb = sc[(gr + 8) * MMA_SROW + i];
        u32 nza = nz8, nzb = nz8;
        if constexpr (ZP) {
            nza = zq[gr * MMA_SROW + i];
            nzb = zq[(gr + 8) * MMA_SROW + i];
        }
        const uint2 x0 = *reinterpret_cast<const uint2*>(xa + (us + i) * 32);
        const uint2 x1 = *reinterpret_cast<const uint2*>(xa + (us + i) * 32 + 4);
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        u32 pa[4], pb[4];
        word_pairs<T>(wa, nza, pa);
        word_pairs<T>(wb, nzb, pb);
        mma16816<T>(d, pa[0], pb[0], pa[1], pb[1], x0.x, x0.y);
        mma16816<T>(d, pa[2], pb[2], pa[3], pb[3], x1.x, x1.y);
        acc[0] = fmaf(sa, d[0], acc[0]);
        acc[1] = fmaf(sa, d[1], acc[1]);
        acc[2] = fmaf(sb, d[2], acc[2]);
        acc[3] = fmaf(sb, d[3], acc[3]);
    }
}

// mma_stage for a stage of n units: a whole stage, or a part's last
template <class T, bool ZP>
__device__ __forceinline__ void mma_stages(const u8* __restrict__ slot, int us, int n,
                                           const T* __restrict__ xa, int gr, int q, u32 nz8,
                                           float (&acc)[4]) {
    if (n == MMA_STAGE)
        mma_stage<T, ZP, MMA_STAGE>(slot, us, n, xa, gr, q, nz8, acc);
    else
        mma_stage<T, ZP, MMA_STAGE - 1>(slot, us, n, xa, gr, q, nz8, acc);
}
#endif

template <class T>
__device__ void nbits_mma(const T* __restrict__ a, const u8* __restrict__ b,
                          const T* __restrict__ scales, const u8* __restrict__ zp,
                          const T* __restrict__ bias, T* __restrict__ y, NbMma g) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    extern __shared__ float4 nb_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    u8* slot = reinterpret_cast<u8*>(nb_smem) + warp * MMA_WARP_BYTES;
    float* sc = reinterpret_cast<float*>(slot + 16 * MMA_ROWB);
    u32* zq = reinterpret_cast<u32*>(sc + 16 * MMA_SROW);
    T* as = reinterpret_cast<T*>(reinterpret_cast<u8*>(nb_smem) + warps * MMA_WARP_BYTES);
    float* red = reinterpret_cast<float*>(as + g.m * g.k);   // [warps][32 lanes][4]
    const int gr = lane >> 2, q = lane & 3;
    const int groups = warps / g.kw;                     // 16-row groups a block takes
    const int grp = warp / g.kw, part = warp % g.kw;
    const int u0 = min(part * g.upw, g.units), u1 = min(u0 + g.upw, g.units);
    const int stages = (u1 - u0 + MMA_STAGE - 1) / MMA_STAGE;
    const long long step = (long long)gridDim.x * groups * 16;
    const long long first0 = (long long)blockIdx.x * groups * 16;
    // The warp's stages form one sequence over its tiles (tile j: the 16 rows from
    // first0 + j * step + grp * 16), so the next tile's first stage is in flight while this
    // one's last is summed: the grid can be persistent (as many blocks as the device holds).
    // load() reads the next stage of the sequence into registers: lane l takes unit l % 16
    // of the stage in rows 2j + l / 16 (j < 8), with its scale and zero-point byte; store()
    // writes them into the warp's shared memory.
    const int li = lane % MMA_STAGE, lh = lane / MMA_STAGE;
    uint4 v[MMA_LOADS];
    u16 sv[MMA_LOADS], zv[MMA_LOADS];
    int zshift = 0;
    bool loaded = false;
    long long next_tile = 0;
    int next_stage = 0;
    auto load = [&]() {
        const long long base = first0 + next_tile * step + grp * 16;
        loaded = stages > 0 && base < g.n;
        if (loaded) {
            // lanes past the part's units reread its last one (never summed)
            const int u = min(u0 + next_stage * MMA_STAGE + li, u1 - 1);
            const int blk = (u * 32) >> g.log2_block;
            long long row[MMA_LOADS];
            const u8* pb[MMA_LOADS];
#pragma unroll
            for (int j = 0; j < MMA_LOADS; ++j) {
                // rows past N read the last row (their sums are dropped)
                row[j] = min(base + MMA_RPL * j + lh, g.n - 1);
                pb[j] = b + row[j] * g.row_bytes + (long long)u * 16;
            }
#pragma unroll
            for (int j = 0; j < MMA_LOADS; j += 4) MMA_LD4(v + j, pb + j);
#pragma unroll
            for (int j = 0; j < MMA_LOADS; ++j) sv[j] = ld_u16(scales + row[j] * g.n_blocks + blk);
            if (g.zp_mode == 1) {
                zshift = (blk & 1) * 4;
#pragma unroll
                for (int j = 0; j < MMA_LOADS; ++j) zv[j] = ld_u8(zp + row[j] * g.zp_row_bytes + (blk >> 1));
            }
        }
        if (++next_stage >= stages) {
            next_stage = 0;
            ++next_tile;
        }
    };
    auto store = [&]() {
        if (!loaded) return;
#pragma unroll
        for (int j = 0; j < MMA_LOADS; ++j) {
            const int r = MMA_RPL * j + lh;
            *reinterpret_cast<uint4*>(slot + r * MMA_ROWB + li * 16) = v[j];
            sc[r * MMA_SROW + li] = scale_bits_f32<T>(sv[j]);
            if (g.zp_mode == 1)
                zq[r * MMA_SROW + li] = MmaOf<T>::pair(-(MmaOf<T>::BASE + ((zv[j] >> zshift) & 15)));
        }
    };
    // code - 8 for no zero points: the magic pair's subtrahend, the same for every unit
    const u32 nz8 = MmaOf<T>::pair(-(MmaOf<T>::BASE + 8));
    // column gr of the B fragment is row gr of A (rows past M read row 0; dropped)
    const T* xa = as + (gr < g.m ? gr : 0) * g.k + 8 * q;
    load();     // the first stage's latency overlaps A's staging
    stage_a_mma<T>(a, as, g);
    __syncthreads();
    // the loop is the block's (uniform: the partial sums meet at barriers)
    for (long long first = first0; first < g.n; first += step) {
        const long long base = first + grp * 16;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int t = 0; t < stages; ++t) {
            store();        // this stage (waits for its loads)
            __syncwarp();   // the other lanes' stores are visible
            load();         // the next one is in flight while this one is summed
            if (base < g.n) {
                const int us = u0 + t * MMA_STAGE;
                const int n = min(MMA_STAGE, u1 - us);
                if (g.zp_mode == 1)
                    mma_stages<T, true>(slot, us, n, xa, gr, q, nz8, acc);
                else
                    mma_stages<T, false>(slot, us, n, xa, gr, q, nz8, acc);
            }
            __syncwarp();   // every lane is done with the stage before the next is stored
        }
        if (g.kw > 1) {
            float* mine = red + (warp * 32 + lane) * 4;
#pragma unroll
            for (int j = 0; j < 4; ++j) mine[j] = acc[j];
            __syncthreads();
            if (part == 0) {
                for (int p = 1; p < g.kw; ++p) {
                    const float* other = red + ((warp + p) * 32 + lane) * 4;
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[j] += other[j];
                }
            }
            __syncthreads();
        }
        if (part == 0 && base < g.n) {
            // d[0], d[1]: row gr, columns 2q, 2q + 1; d[2], d[3]: row gr + 8
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int col = 2 * q + (j & 1);
                const long long row = base + gr + (j >> 1) * 8;
                if (col < g.m && row < g.n) {
                    const float bv = bias ? to_f32(bias[row]) : 0.0f;
                    y[(long long)col * g.n + row] = round_from32<T>(acc[j] + bv);
                }
            }
        }
    }
#else
    __trap();
#endif
}

// ------------------------------------------------------------------ dequantize (large M)

// one thread per 16-code group of rows [n0, n0 + rows): w[r, k] for k < K, row stride K;
// vec: rows of w are 16-byte aligned (16-byte stores)
template <class T, int BITS>
__device__ void nbits_dequant(const u8* __restrict__ b, const T* __restrict__ scales,
                              const void* __restrict__ zp, T* __restrict__ w, NbGeo g,
                              long long n0, long long rows, int vec) {
    const int groups = g.padded_k >> 4;
    const long long total = rows * groups;
    for (long long i = global_tid(); i < total; i += grid_threads()) {
        const long long r = i / groups;
        const int k = (int)(i - r * groups) << 4;
        if (k >= g.k) continue;
        const long long n = n0 + r;
        const u32* src = reinterpret_cast<const u32*>(b + n * g.row_bytes + (k * BITS >> 3));
        u32 words[BITS / 2];
#pragma unroll
        for (int j = 0; j < BITS / 2; ++j) words[j] = __ldg(src + j);
        const int blk = k >> g.log2_block;
        const float s = to_f32(__ldg(scales + n * g.n_blocks + blk));
        float q[16];
        group_codes<BITS>(words, q);
        minus_zero_point(q, zero_point<T, BITS>(zp, g, n, blk), g.zp_mode == 2);
        alignas(16) T out[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) out[j] = round_from32<T>(q[j] * s);
        T* dst = w + r * g.k + k;
        if (vec && k + 16 <= g.k) {
#pragma unroll
            for (int i2 = 0; i2 < (int)sizeof(out) / 16; ++i2)
                reinterpret_cast<uint4*>(dst)[i2] = reinterpret_cast<const uint4*>(out)[i2];
        } else {
            for (int j = 0; j < 16 && k + j < g.k; ++j) dst[j] = out[j];
        }
    }
}

// y[m, n0 + j] = src[m, j] for m < M, j < cols (y has N columns)
template <class Bits>
__device__ void nbits_scatter(Bits* __restrict__ y, const Bits* __restrict__ src, long long m,
                              long long cols, long long n, long long n0) {
    const long long total = m * cols;
    for (long long i = global_tid(); i < total; i += grid_threads()) {
        const long long r = i / cols, j = i - r * cols;
        y[r * n + n0 + j] = src[i];
    }
}

// ------------------------------------------------------------------ GatherBlockQuantized

// one call's geometry (Python: nbits.GbqGeo); by value
struct GbqGeo {
    long long total;    // output elements
    long long post;     // elements after the gathered axis (logical)
    long long nidx;     // indices
    long long dim;      // data's gathered axis
    long long inner_q;  // elements after the quantized axis (logical)
    long long dq;       // data's quantized axis (logical)
    long long nb;       // blocks along the quantized axis
    long long block;    // block_size
    int per;            // codes per byte of data: 1 (int4 / uint4) or 8 / bits (uint8)
    int bits;           // bits of a code
    int is_signed;      // int4 codes
    int has_zp;         // zero points given
    int zp_cols;        // bytes of a row of packed uint8 zero points
    int packed;         // uint8 data (codes packed along the last axis; per may be 1)
};

// a code of `bits` bits in the low bits of c, sign-extended for int4
__device__ __forceinline__ int int_code(int c, int bits, int is_signed) {
    int v = c & ((1 << bits) - 1);
    if (is_signed && (v >> (bits - 1))) v -= 1 << bits;
    return v;
}

template <class I, class T>
__device__ void gbq(const u8* __restrict__ data, const I* __restrict__ indices,
                    const T* __restrict__ scales, const u8* __restrict__ zp, T* __restrict__ out,
                    GbqGeo g) {
    const int mask = (1 << g.bits) - 1;
    for (long long o = global_tid(); o < g.total; o += grid_threads()) {
        const long long p = o % g.post, rest = o / g.post;
        const long long qi = rest % g.nidx, pre = rest / g.nidx;
        long long idx = (long long)indices[qi];
        if (idx < 0) idx += g.dim;
        if (idx < 0 || idx >= g.dim) {
            out[o] = round_from64<T>(0.0);
            continue;
        }
        const long long d = (pre * g.dim + idx) * g.post + p;   // logical element of data
        const long long iq = d % g.inner_q, aq = (d / g.inner_q) % g.dq;
        const long long oq = d / (g.inner_q * g.dq);
        const long long sidx = (oq * g.nb + aq / g.block) * g.inner_q + iq;
        int code, z;
        if (!g.packed) {
            code = int_code(data[d], g.bits, g.is_signed);
            z = g.has_zp ? int_code(zp[sidx], g.bits, g.is_signed) : 0;
        } else {
            code = (data[d / g.per] >> ((d % g.per) * g.bits)) & mask;
            if (g.has_zp) {
                // packed along the scales' last axis, which is the quantized one (inner_q 1)
                const long long zr = sidx / g.nb, zc = sidx % g.nb;
                z = (zp[zr * g.zp_cols + zc / g.per] >> ((zc % g.per) * g.bits)) & mask;
            } else {
                z = 1 << (g.bits - 1);
            }
        }
        const double diff = (double)(code - z), s = to_f64(scales[sidx]);
        out[o] = round_from64<T>(fix_nan2(diff * s, diff, s));
    }
}

// ------------------------------------------------------------------ instantiation

// RB rows of B and MAXU chunks of each a thread holds at once (see nbits_gemv); MINB:
// resident blocks per multiprocessor the registers must allow
#define EP_NB_GEMV(T, S, BITS, MAXM, RB, MAXU, MINB)                                         \
extern "C" __global__ void __launch_bounds__(NB_THREADS, MINB)                               \
nbits_gemv_b##BITS##_m##MAXM##r##RB##_##S(const T* a, const u8* b, const T* scales,          \
                                          const void* zp, const T* bias, T* y, NbGeo g) {    \
    nbits_gemv<T, BITS, MAXM, RB, MAXU>(a, b, scales, zp, bias, y, g);                       \
}
#define EP_NB_BITS(T, S, BITS)                                                               \
    EP_NB_GEMV(T, S, BITS, 1, 1, 4, 3) EP_NB_GEMV(T, S, BITS, 1, 4, 2, 2)                     \
    EP_NB_GEMV(T, S, BITS, 4, 1, 2, 3) EP_NB_GEMV(T, S, BITS, 8, 1, 2, 2)                     \
extern "C" __global__ void nbits_dequant_b##BITS##_##S(const u8* b, const T* scales,        \
        const void* zp, T* w, NbGeo g, long long n0, long long rows, int vec) {             \
    nbits_dequant<T, BITS>(b, scales, zp, w, g, n0, rows, vec);                             \
}
#define EP_NB(T, S) EP_NB_BITS(T, S, 2) EP_NB_BITS(T, S, 4) EP_NB_BITS(T, S, 8)
#define EP_NB_MMA(T, S)                                                                      \
extern "C" __global__ void __launch_bounds__(MMA_THREADS, MMA_MIN_BLOCKS)                   \
nbits_mma_b4_##S(const T* a, const u8* b, const T* scales, const u8* zp, const T* bias,     \
                 T* y, NbMma g) {                                                            \
    nbits_mma<T>(a, b, scales, zp, bias, y, g);                                              \
}

EP_NB(float, f32)
EP_NB(f16, f16)
EP_NB(bf16, bf16)
EP_NB_MMA(f16, f16)
EP_NB_MMA(bf16, bf16)

extern "C" __global__ void nbits_scatter_b16(unsigned short* y, const unsigned short* src,
                                             long long m, long long cols, long long n,
                                             long long n0) {
    nbits_scatter<unsigned short>(y, src, m, cols, n, n0);
}
extern "C" __global__ void nbits_scatter_b32(unsigned int* y, const unsigned int* src,
                                             long long m, long long cols, long long n,
                                             long long n0) {
    nbits_scatter<unsigned int>(y, src, m, cols, n, n0);
}

// data: i4 / u4 (one element per byte) or u8 (packed codes); the symbol names data's type
#define EP_GBQ(DS, IT, IS, T, S)                                                            \
extern "C" __global__ void gbq_##DS##_##IS##_##S(const u8* data, const IT* indices,         \
        const T* scales, const u8* zp, T* out, GbqGeo g) {                                  \
    gbq<IT, T>(data, indices, scales, zp, out, g);                                      \
}
#define EP_GBQ_T(DS, IT, IS) EP_GBQ(DS, IT, IS, float, f32) EP_GBQ(DS, IT, IS, f16, f16)     \
    EP_GBQ(DS, IT, IS, bf16, bf16)
#define EP_GBQ_I(DS) EP_GBQ_T(DS, int, i32) EP_GBQ_T(DS, long long, i64)

EP_GBQ_I(i4)
EP_GBQ_I(u4)
EP_GBQ_I(u8)
