// com.microsoft::GroupQueryAttention (cpu_reference/contrib_attention.py GroupQueryAttention).
//
// Two launches per call, both reading seqlens_k (and total_sequence_length) on the device,
// so a call is capturable and never reads a value back:
//
//   gqa_kv_<sfx>      writes present_key / present_value. In place (present is past's
//                     buffer): only the S new rows, at P_b .. P_b + S - 1. Otherwise every
//                     present row: past's rows [0, P_b), the new rows, zeros after. New
//                     keys are rotated (do_rotary) at their positions. It also zeroes the
//                     split counters the attend launch uses.
//   gqa_attend_<sfx>_d<DMAX>
//                     one block per (split, row tile, batch * kv head): a tile holds ROWS
//                     query rows of one kv head's group (row r = s * rep + g: query s of
//                     q head kv_head * rep + g), Q rotated into shared memory, K/V of the
//                     present streamed through shared memory TK positions at a time, an
//                     online float32 softmax per row (one warp per row, lane j scoring
//                     position j of the tile). With splits > 1 the tile's key range is cut
//                     into `splits` chunks (flash decoding): each block writes (max, sum,
//                     unnormalized output) per row to the workspace and the last block of
//                     the tile (an atomic counter) combines them in split order.
//   gqa_decode_<sfx>_d<64|128>
//                     replaces gqa_attend for a decode step (q_len == 1, head exactly 64 or
//                     128, rep <= GQA_DEC_REP, 16-byte aligned presents: the host decides):
//                     one block per (split, batch * kv head) holding all rep q heads, so
//                     each K/V row is loaded once, in 16-byte vectors (D * sizeof(T) / 16
//                     lanes per row); each lane group runs its own online softmax over the
//                     rows grp, grp + NG, ... of the block's key chunk (GQA_DEC_U rows'
//                     loads issued before any is used, the next batch's during the current
//                     one's math), the block merges its groups in group order, and splits
//                     are combined by the last block as above (counters zeroed by gqa_kv).
//                     Same numerics recipe as gqa_attend (only the float32 summation order
//                     differs); fixed reduction orders, so replays repeat eager bytes.
//
// Per batch entry b (the reference's rules): T_b = seqlens_k[b] + 1 tokens after this
// step; first prompt (S == total_sequence_length): P_b = 0, else P_b = T_b - S. Query s
// sits at P_b + s and attends keys j in [lo, hi): hi = min(T_b, present_len, causal ?
// P_b + s + 1 : inf), lo = local_window_size >= 0 ? P_b + s - window + 1 : 0. Rotary
// positions are P_b + s, or position_ids (first prompt: position_ids[0] + s), clamped to
// the cache rows (the reference fails the node there instead).
//
// Numerics: rotations in double from the exact values, rounded once to T (the reference's
// bytes); Q K^T accumulated in float32 (the reference: float64 rounded to float32), then
// * scale, softcap (tanh), + attention_bias, softmax with expf in float32 (head_sink /
// smooth_softmax: one more logit in the denominator), P V in float32, rounded once to T.
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

#define GQA_THREADS 128
#define GQA_WARPS 4
// the most splits of a tile's key range (Python: gqa.MAX_SPLITS)
#define GQA_MAX_SPLITS 64
// the decode kernel: most q heads per kv head, most splits, rows per lane group per batch
// (Python: gqa_plan.DECODE_MAX_REP, DECODE_MAX_SPLITS)
#define GQA_DEC_REP 8
#define GQA_DEC_MAX_SPLITS 64
#define GQA_DEC_U 4
// the one-block decode kernel: threads, most keys (Python: gqa_plan.SHORT_THREADS,
// SHORT_MAX_KEYS)
#define GQA_SHORT_THREADS 256
#define GQA_SHORT_KEYS 256
// bytes of V a chunk stages in shared memory (a multiple of 16 * GQA_SHORT_THREADS and of
// every head's row)
#define GQA_SHORT_VBYTES 32768

// Python: onnx_ep.providers.cuda.kernels.gqa.GqaGeo (same field order)
struct GqaGeo {
    long long batch, q_len, q_heads, kv_heads, head;
    long long present_len;      // rows of the present buffers (their capacity)
    long long past_len;         // rows of past_key / past_value (0: none)
    long long q_sb, q_ss;       // element strides of query's (batch, seq); head h at h * head
    long long k_sb, k_ss, v_sb, v_ss;   // the same for the new keys / values (packed: query)
    long long rot_half;         // rotary_dim / 2 (0: no rotary)
    long long cos_rows;         // rows of cos_cache / sin_cache
    long long pid_sb, pid_ss;   // position_ids strides broadcast to (batch, seq)
    long long bias_sb, bias_sh, bias_ss, bias_cols;   // attention_bias strides, columns
    long long tiles, splits;    // row tiles per (batch, kv head); key-range splits
    long long write_rows;       // rows gqa_kv writes per (batch, kv head): S in place, else
                                // present_len
    int total_val;              // total_sequence_length when total_ptr is null
    int pid_kind;               // 0 none, 1 int32, 2 int64
    int interleaved, causal, window, has_sink, in_place, pad_;
    float scale, softcap;       // softcap <= 0: none
};

struct RowLens {
    long long past;    // P_b
    long long total;   // T_b
    bool first;        // first prompt
};

__device__ __forceinline__ RowLens row_lens(const int* seqlens, const int* total,
                                            const GqaGeo& g, long long b) {
    const long long tot = total ? (long long)total[0] : (long long)g.total_val;
    RowLens r;
    r.total = (long long)seqlens[b] + 1;
    r.first = g.q_len == tot;
    r.past = r.first ? 0 : r.total - g.q_len;
    return r;
}

// the keys [lo, hi) the one query of a decode step attends (hi <= lo: none)
__device__ __forceinline__ void decode_keys(const GqaGeo& g, const RowLens& L, long long& lo,
                                            long long& hi) {
    hi = L.total < g.present_len ? L.total : g.present_len;
    if (g.causal && L.past + 1 < hi) hi = L.past + 1;
    lo = 0;
    if (g.window >= 0 && L.past - g.window + 1 > lo) lo = L.past - g.window + 1;
}

// the cos/sin row of query s of entry b
__device__ __forceinline__ long long rot_row(const void* pid, const GqaGeo& g, long long b,
                                             long long s, const RowLens& L) {
    long long p;
    if (g.pid_kind == 0) {
        p = L.past + s;
    } else {
        const long long off = L.first ? 0 : b * g.pid_sb + s * g.pid_ss;
        const long long v = g.pid_kind == 1 ? (long long)((const int*)pid)[off]
                                            : ((const long long*)pid)[off];
        p = L.first ? v + s : v;
    }
    return p < 0 ? 0 : (p >= g.cos_rows ? g.cos_rows - 1 : p);
}

// channel d (< 2 * half) of head x rotated at cache row `row`: the reference's
// c * x1 - s * x2 / s * x1 + c * x2 in double (exact products), rounded once to T
template <class T>
__device__ __forceinline__ T rotated(const T* x, long long d, long long half, int inter,
                                     const T* cs, const T* sn, long long row) {
    long long i, i1, i2;
    bool lower;
    if (inter) {
        i = d >> 1;
        i1 = 2 * i;
        i2 = i1 + 1;
        lower = (d & 1) == 0;
    } else {
        lower = d < half;
        i = lower ? d : d - half;
        i1 = i;
        i2 = i + half;
    }
    const double c = to_f64(cs[row * half + i]), s = to_f64(sn[row * half + i]);
    const double x1 = to_f64(x[i1]), x2 = to_f64(x[i2]);
    const double r = lower ? c * x1 - s * x2 : s * x1 + c * x2;
    return round_from64<T>(r);
}

// ------------------------------------------------------------------ present

template <class T>
__device__ __forceinline__ void gqa_kv(const T* __restrict__ kn, const T* __restrict__ vn,
                                       const T* pk, const T* pv, T* ok, T* ov,
                                       const int* __restrict__ seqlens,
                                       const int* __restrict__ total,
                                       const T* __restrict__ cs, const T* __restrict__ sn,
                                       const void* __restrict__ pid,
                                       unsigned* __restrict__ counters, long long n_counters,
                                       const GqaGeo& g) {
    const long long D = g.head, H = g.kv_heads, R = g.write_rows, Lp = g.present_len;
    const long long n = g.batch * H * R * D;
    const long long span = n > n_counters ? n : n_counters;
    const T zero = round_from32<T>(0.0f);
    for (long long i = global_tid(); i < span; i += grid_threads()) {
        if (i < n_counters) counters[i] = 0u;
        if (i >= n) continue;
        const long long d = i % D;
        const long long r = (i / D) % R;
        const long long bh = i / (D * R);
        const long long b = bh / H, h = bh % H;
        const RowLens L = row_lens(seqlens, total, g, b);
        long long t, s;
        if (g.in_place) {
            s = r;
            t = L.past + s;
            if (t < 0 || t >= Lp) continue;
        } else {
            t = r;
            s = t - L.past;
        }
        const long long o = (bh * Lp + t) * D + d;
        if (s >= 0 && s < g.q_len) {
            const T* kx = kn + b * g.k_sb + s * g.k_ss + h * D;
            ok[o] = d < 2 * g.rot_half
                        ? rotated<T>(kx, d, g.rot_half, g.interleaved, cs, sn,
                                     rot_row(pid, g, b, s, L))
                        : kx[d];
            ov[o] = vn[b * g.v_sb + s * g.v_ss + h * D + d];
        } else if (t < L.past && t < g.past_len) {
            const long long po = (bh * g.past_len + t) * D + d;
            ok[o] = pk[po];
            ov[o] = pv[po];
        } else {
            ok[o] = zero;
            ov[o] = zero;
        }
    }
}

// ------------------------------------------------------------------ attention

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// a butterfly: every lane gets the same sum (each step adds the same two values)
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp combines a row's split results (max, sum) at ml[k * stride], k < splits: w[k] =
// exp(m_k - M) in split order, *lsum = the row's denominator (plus the sink's term; sk is
// -inf without one)
__device__ __forceinline__ void split_weights(const float* ml, long long stride,
                                              long long splits, float sk, bool has_sink,
                                              float* w, float* lsum) {
    const float NEG = -inf32();
    const int lane = threadIdx.x & 31;
    float M = sk;
    for (long long k = lane; k < splits; k += 32) M = fmaxf(M, __ldcg(ml + k * stride));
    M = warp_max(M);
    float part = 0.0f;
    for (long long k = lane; k < splits; k += 32) {
        const float mk = __ldcg(ml + k * stride);
        const float e = (M == NEG || mk == NEG) ? 0.0f : expf(mk - M);
        w[k] = e;
        part += __ldcg(ml + k * stride + 1) * e;
    }
    const float l = warp_sum(part);
    if (lane == 0) *lsum = l + (has_sink && M != NEG ? expf(sk - M) : 0.0f);
}

// NS: output channels per lane (DMAX = 32 * NS); TK: keys per shared tile; RPW: rows per warp
template <class T, int NS, int TK, int RPW>
__device__ __forceinline__ void gqa_attend(const T* __restrict__ q, const T* __restrict__ kc,
                                           const T* __restrict__ vc,
                                           const int* __restrict__ seqlens,
                                           const int* __restrict__ total,
                                           const T* __restrict__ cs, const T* __restrict__ sn,
                                           const void* __restrict__ pid,
                                           const T* __restrict__ bias,
                                           const T* __restrict__ sink, T* __restrict__ y,
                                           float* ws, unsigned* counters, const GqaGeo& g) {
    constexpr int DMAX = 32 * NS;
    constexpr int ROWS = GQA_WARPS * RPW;
    __shared__ float qs[ROWS * DMAX];
    __shared__ float ks[TK * (DMAX + 1)];   // padded: lane j reads row j conflict-free
    __shared__ float vs[TK * DMAX];
    __shared__ float wsh[ROWS * GQA_MAX_SPLITS];
    __shared__ float lsh[ROWS];
    __shared__ int last;

    const float NEG = -inf32();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int D = (int)g.head;
    const long long S = g.q_len, Hkv = g.kv_heads, Hq = g.q_heads;
    const long long rep = Hq / Hkv;
    const long long split = blockIdx.x, tile = blockIdx.y, bh = blockIdx.z;
    const long long b = bh / Hkv, kvh = bh % Hkv;
    const long long rows = rep * S;
    const long long r0 = tile * ROWS;
    const RowLens L = row_lens(seqlens, total, g, b);
    const long long cap = L.total < g.present_len ? L.total : g.present_len;

    // the key range of query s: [lo, hi)
    auto hi_of = [&](long long s) {
        long long h = cap;
        if (g.causal && L.past + s + 1 < h) h = L.past + s + 1;
        return h;
    };
    auto lo_of = [&](long long s) {
        long long l = 0;
        if (g.window >= 0 && L.past + s - g.window + 1 > l) l = L.past + s - g.window + 1;
        return l;
    };

    // this block's keys: its split of the tile's range (lo and hi grow with s)
    const long long r_end = r0 + ROWS < rows ? r0 + ROWS : rows;
    const long long lo_t = lo_of(r0 / rep), hi_t = hi_of((r_end - 1) / rep);
    long long start = 0, end = 0;
    if (hi_t > lo_t) {
        const long long n = hi_t - lo_t;
        long long chunk = (n + g.splits - 1) / g.splits;
        chunk = (chunk + TK - 1) / TK * TK;
        start = lo_t + split * chunk;
        end = start + chunk < hi_t ? start + chunk : hi_t;
    }

    // Q rows of the tile, rotated and rounded to T as the reference, widened to float32.
    // Each thread computes all its values before storing any: the loads of every
    // iteration are then in flight together (a decode step is a chain of latencies)
    if (start < end) {
        constexpr int QPER = (ROWS * DMAX + GQA_THREADS - 1) / GQA_THREADS;
        float qv[QPER];
#pragma unroll
        for (int u = 0; u < QPER; ++u) {
            const int idx = tid + u * GQA_THREADS;
            const int lr = idx / D, d = idx - lr * D;
            const long long r = r0 + lr;
            float v = 0.0f;
            if (idx < ROWS * D && r < rows) {
                const long long s = r / rep, h = kvh * rep + r % rep;
                const T* qx = q + b * g.q_sb + s * g.q_ss + h * D;
                v = d < 2 * g.rot_half
                        ? to_f32(rotated<T>(qx, d, g.rot_half, g.interleaved, cs, sn,
                                            rot_row(pid, g, b, s, L)))
                        : to_f32(qx[d]);
            }
            qv[u] = v;
        }
#pragma unroll
        for (int u = 0; u < QPER; ++u) {
            const int idx = tid + u * GQA_THREADS;
            if (idx < ROWS * D) qs[(idx / D) * DMAX + idx % D] = qv[u];
        }
    }

    int lo_r[RPW], hi_r[RPW], s_r[RPW], h_r[RPW];   // positions and heads fit an int
    bool valid[RPW];
    float m[RPW], l[RPW], acc[RPW][NS];
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
        const long long r = r0 + warp + GQA_WARPS * i;
        valid[i] = r < rows;
        s_r[i] = valid[i] ? (int)(r / rep) : 0;
        h_r[i] = valid[i] ? (int)(kvh * rep + r % rep) : 0;
        lo_r[i] = (int)lo_of(s_r[i]);
        hi_r[i] = (int)hi_of(s_r[i]);
        m[i] = NEG;
        l[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < NS; ++k) acc[i][k] = 0.0f;
    }
    __syncthreads();

    const T* kb = kc + bh * g.present_len * D;
    const T* vb = vc + bh * g.present_len * D;
    // K/V tile loads: KVPER of each per thread issued before any is stored (one round
    // trip per batch instead of one per element)
    constexpr int KVPER = 8;
    for (long long t0 = start; t0 < end; t0 += TK) {
        for (int base = 0; base < TK * D; base += KVPER * GQA_THREADS) {
            float kr[KVPER], vr[KVPER];
#pragma unroll
            for (int u = 0; u < KVPER; ++u) {
                const int idx = base + tid + u * GQA_THREADS;
                const int jj = idx / D, d = idx - jj * D;
                const long long t = t0 + jj;
                kr[u] = vr[u] = 0.0f;
                if (idx < TK * D && t < end) {
                    kr[u] = to_f32(kb[t * D + d]);
                    vr[u] = to_f32(vb[t * D + d]);
                }
            }
#pragma unroll
            for (int u = 0; u < KVPER; ++u) {
                const int idx = base + tid + u * GQA_THREADS;
                if (idx < TK * D) {
                    const int jj = idx / D, d = idx - jj * D;
                    ks[jj * (DMAX + 1) + d] = kr[u];
                    vs[jj * DMAX + d] = vr[u];
                }
            }
        }
        __syncthreads();

        // scores: lane j scores key t0 + j for each of the warp's rows
        const int t = (int)t0 + lane;
        float sc[RPW];
#pragma unroll
        for (int i = 0; i < RPW; ++i) sc[i] = 0.0f;
        if (lane < TK) {
            const float* kr = ks + lane * (DMAX + 1);
            for (int d = 0; d < D; ++d) {
                const float kd = kr[d];
#pragma unroll
                for (int i = 0; i < RPW; ++i)
                    sc[i] = fmaf(qs[(warp + GQA_WARPS * i) * DMAX + d], kd, sc[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < RPW; ++i) {
            if (!valid[i]) continue;   // warp-uniform
            float v = NEG;
            if (lane < TK && t < end && t >= lo_r[i] && t < hi_r[i]) {
                v = sc[i] * g.scale;
                if (g.softcap > 0.0f) v = tanhf(v / g.softcap) * g.softcap;
                if (bias != nullptr && t < g.bias_cols)
                    v += to_f32(bias[b * g.bias_sb + h_r[i] * g.bias_sh + s_r[i] * g.bias_ss + t]);
            }
            const float mnew = fmaxf(m[i], warp_max(v));
            if (mnew == NEG) continue;   // no key of this row yet (warp-uniform)
            const float corr = expf(m[i] - mnew);
            const float p = v == NEG ? 0.0f : expf(v - mnew);
            l[i] = l[i] * corr + warp_sum(p);
            m[i] = mnew;
#pragma unroll
            for (int k = 0; k < NS; ++k) acc[i][k] *= corr;
            sc[i] = p;
        }
        // P V: lane holds channels lane + 32 k
        for (int j = 0; j < TK; ++j) {
            float vv[NS];
#pragma unroll
            for (int k = 0; k < NS; ++k) {
                const int d = lane + 32 * k;
                vv[k] = d < D ? vs[j * DMAX + d] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < RPW; ++i) {
                if (!valid[i] || m[i] == NEG) continue;   // warp-uniform
                const float pj = __shfl_sync(0xffffffffu, sc[i], j);
#pragma unroll
                for (int k = 0; k < NS; ++k) acc[i][k] = fmaf(pj, vv[k], acc[i][k]);
            }
        }
        __syncthreads();
    }

    const long long y_row = Hq * D;   // y is (batch, seq, num_heads * head)
    if (g.splits == 1) {
#pragma unroll
        for (int i = 0; i < RPW; ++i) {
            if (!valid[i]) continue;
            const float sk = g.has_sink ? (sink ? to_f32(sink[h_r[i]]) : 0.0f) : NEG;
            const float M = fmaxf(m[i], sk);
            const float e = M == NEG ? 0.0f : expf(m[i] - M);
            const float lsum = l[i] * e + (g.has_sink && M != NEG ? expf(sk - M) : 0.0f);
            T* yr = y + (b * S + s_r[i]) * y_row + h_r[i] * D;
#pragma unroll
            for (int k = 0; k < NS; ++k) {
                const int d = lane + 32 * k;
                if (d < D) yr[d] = round_from32<T>(lsum > 0.0f ? acc[i][k] * e / lsum : 0.0f);
            }
        }
        return;
    }

    // split: partial (max, sum, unnormalized output) of each row, then the last block
    const long long splits = g.splits;
    const long long grp = bh * g.tiles + tile;
    const long long groups = (long long)gridDim.z * g.tiles;
    float* wacc = ws;
    float* wml = ws + groups * splits * ROWS * D;
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
        if (!valid[i]) continue;
        const long long slot = (grp * splits + split) * ROWS + warp + GQA_WARPS * i;
#pragma unroll
        for (int k = 0; k < NS; ++k) {
            const int d = lane + 32 * k;
            if (d < D) wacc[slot * D + d] = acc[i][k];
        }
        if (lane == 0) {
            wml[slot * 2] = m[i];
            wml[slot * 2 + 1] = l[i];
        }
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(counters + grp, 1u) == (unsigned)(splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();

    // weights exp(m_k - M) of each split, in split order, and the row's denominator
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
        if (!valid[i]) continue;
        const int lr = warp + GQA_WARPS * i;
        const float sk = g.has_sink ? (sink ? to_f32(sink[h_r[i]]) : 0.0f) : NEG;
        split_weights(wml + (grp * splits * ROWS + lr) * 2, (long long)ROWS * 2, splits, sk,
                      g.has_sink, wsh + lr * GQA_MAX_SPLITS, lsh + lr);
    }
    __syncthreads();
    for (int idx = tid; idx < ROWS * D; idx += GQA_THREADS) {
        const int lr = idx / D, d = idx - lr * D;
        const long long r = r0 + lr;
        if (r >= rows) continue;
        float o = 0.0f;
#pragma unroll 8
        for (long long k = 0; k < splits; ++k) {
            const float e = wsh[lr * GQA_MAX_SPLITS + k];
            const float w = __ldcg(wacc + ((grp * splits + k) * ROWS + lr) * D + d);
            if (e != 0.0f) o = fmaf(e, w, o);
        }
        const float lsum = lsh[lr];
        const long long s = r / rep, h = kvh * rep + r % rep;
        y[(b * S + s) * y_row + h * D + d] = round_from32<T>(lsum > 0.0f ? o / lsum : 0.0f);
    }
    if (tid == 0) counters[grp] = 0u;
}

// ------------------------------------------------------------------ decode (q_len == 1)

// element i of a 16-byte vector of T, widened exactly (little endian: element 0 low)
__device__ __forceinline__ unsigned vec_word(const uint4& u, int w) {
    return w == 0 ? u.x : (w == 1 ? u.y : (w == 2 ? u.z : u.w));
}
template <class T> __device__ __forceinline__ float vec_elem(const uint4& u, int i);
template <> __device__ __forceinline__ float vec_elem<float>(const uint4& u, int i) {
    return __uint_as_float(vec_word(u, i));
}
template <> __device__ __forceinline__ float vec_elem<f16>(const uint4& u, int i) {
    return to_f32(f16_from_bits((u16)(vec_word(u, i >> 1) >> (16 * (i & 1)))));
}
template <> __device__ __forceinline__ float vec_elem<bf16>(const uint4& u, int i) {
    return to_f32(bf16_from_bits((u16)(vec_word(u, i >> 1) >> (16 * (i & 1)))));
}

// U rows' slices of K and V: row t = base + grp + NG * u, 16 bytes at channel d0
template <class T, int D, int NG, int U>
__device__ __forceinline__ void dec_load(uint4 (&kr)[U], uint4 (&vr)[U], const T* kb,
                                         const T* vb, long long base, long long end, int grp,
                                         int d0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long t = base + grp + (long long)NG * u;
        if (t < end) {
            kr[u] = *reinterpret_cast<const uint4*>(kb + t * D + d0);
            vr[u] = *reinterpret_cast<const uint4*>(vb + t * D + d0);
        } else {
            kr[u] = make_uint4(0u, 0u, 0u, 0u);
            vr[u] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// Q of the rep q heads of kv head kvh (rows of D), rotated and rounded to T as rotated()
// does, into qs as float32 (heads past rep zero): every load is issued before any value is
// used
template <class T, int D, int THREADS>
__device__ __forceinline__ void stage_q(const T* __restrict__ q, const T* __restrict__ cs,
                                        const T* __restrict__ sn, const void* __restrict__ pid,
                                        const GqaGeo& g, long long b, long long kvh, int rep,
                                        const RowLens& L, float* qs) {
    const int tid = threadIdx.x;
    constexpr int QPER = GQA_DEC_REP * D / THREADS;
    const long long half = g.rot_half;
    const long long row = half ? rot_row(pid, g, b, 0, L) : 0;
    const T zero = round_from32<T>(0.0f);
    T x1[QPER], x2[QPER], cv[QPER], sv[QPER];
#pragma unroll
    for (int u = 0; u < QPER; ++u) {
        const int idx = tid + u * THREADS;
        const int hh = idx / D, d = idx - hh * D;
        const bool ok = hh < rep, rot = ok && d < 2 * half;
        const T* qx = q + b * g.q_sb + (kvh * rep + (ok ? hh : 0)) * D;
        long long i = 0, i1 = d, i2 = d;
        if (rot) {
            if (g.interleaved) {
                i = d >> 1;
                i1 = 2 * i;
                i2 = i1 + 1;
            } else {
                i = d < half ? d : d - half;
                i1 = i;
                i2 = i + half;
            }
        }
        x1[u] = ok ? qx[i1] : zero;
        x2[u] = rot ? qx[i2] : zero;
        cv[u] = rot ? cs[row * half + i] : zero;
        sv[u] = rot ? sn[row * half + i] : zero;
    }
#pragma unroll
    for (int u = 0; u < QPER; ++u) {
        const int idx = tid + u * THREADS;
        const int hh = idx / D, d = idx - hh * D;
        float v = to_f32(x1[u]);
        if (hh < rep && d < 2 * half) {
            const bool lower = g.interleaved ? (d & 1) == 0 : d < half;
            const double c = to_f64(cv[u]), sn_ = to_f64(sv[u]);
            const double a = to_f64(x1[u]), bb = to_f64(x2[u]);
            v = to_f32(round_from64<T>(lower ? c * a - sn_ * bb : sn_ * a + c * bb));
        }
        qs[idx] = v;
    }
}

// One block per (key split, batch * kv head), all rep (<= GQA_DEC_REP) q heads of the kv
// head in it. LPR lanes hold one K/V row (16 bytes each); a warp takes KG rows at a time,
// the block's NG lane groups rows base + grp + NG * u (U rows per group loaded before any
// is used, the first batch while Q is rotated). Each lane group keeps its own online
// softmax per head; the block merges the NG states in group order, then (splits > 1)
// writes (max, sum, unnormalized output) per head and the last block of the (batch, kv
// head) merges the splits in split order. K/V rows must be 16-byte aligned (the host
// checks), D * sizeof(T) a multiple of 16.
template <class T, int D>
__device__ __forceinline__ void gqa_decode(const T* __restrict__ q, const T* __restrict__ kc,
                                           const T* __restrict__ vc,
                                           const int* __restrict__ seqlens,
                                           const int* __restrict__ total,
                                           const T* __restrict__ cs, const T* __restrict__ sn,
                                           const void* __restrict__ pid,
                                           const T* __restrict__ bias,
                                           const T* __restrict__ sink, T* __restrict__ y,
                                           float* ws, unsigned* counters, const GqaGeo& g) {
    constexpr int VEC = 16 / (int)sizeof(T);
    constexpr int LPR = D / VEC;
    constexpr int KG = 32 / LPR;
    constexpr int NG = GQA_WARPS * KG;
    constexpr int R = GQA_DEC_REP, U = GQA_DEC_U;
    static_assert(D % VEC == 0 && LPR <= 32 && 32 % LPR == 0, "decode geometry");
    __shared__ __align__(16) float qs[R * D];
    __shared__ __align__(16) float gacc[NG * R * D];
    __shared__ float gm[NG * R], gl[NG * R];
    __shared__ float wsh[R * GQA_DEC_MAX_SPLITS];
    __shared__ float lsh[R];
    __shared__ int last;

    const float NEG = -inf32();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int grp = warp * KG + lane / LPR, d0 = (lane % LPR) * VEC;
    const long long split = blockIdx.x, bh = blockIdx.y;
    const long long Hkv = g.kv_heads, Hq = g.q_heads, splits = g.splits;
    const int rep = (int)(Hq / Hkv);
    const long long b = bh / Hkv, kvh = bh % Hkv;
    const RowLens L = row_lens(seqlens, total, g, b);
    long long lo, hi;
    decode_keys(g, L, lo, hi);
    long long start = 0, end = 0;
    if (hi > lo) {
        const long long chunk = (hi - lo + splits - 1) / splits;
        start = lo + split * chunk;
        end = start + chunk < hi ? start + chunk : hi;
    }

    const T* kb = kc + bh * g.present_len * D;
    const T* vb = vc + bh * g.present_len * D;
    uint4 kr[U], vr[U];
    dec_load<T, D, NG, U>(kr, vr, kb, vb, start, end, grp, d0);

    stage_q<T, D, GQA_THREADS>(q, cs, sn, pid, g, b, kvh, rep, L, qs);
    __syncthreads();

    float m[R], l[R], acc[R][VEC];
#pragma unroll
    for (int h = 0; h < R; ++h) {
        m[h] = NEG;
        l[h] = 0.0f;
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[h][i] = 0.0f;
    }
    const T* brow = bias != nullptr ? bias + b * g.bias_sb + kvh * rep * g.bias_sh : nullptr;
    for (long long base = start; base < end; base += (long long)NG * U) {
        // the next batch's loads are in flight while this one is used
        const long long next = base + (long long)NG * U;
        uint4 kn[U], vn[U];
        if (next < end) dec_load<T, D, NG, U>(kn, vn, kb, vb, next, end, grp, d0);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long t = base + grp + (long long)NG * u;
            float kf[VEC];
#pragma unroll
            for (int i = 0; i < VEC; ++i) kf[i] = vec_elem<T>(kr[u], i);
            float sc[R];
#pragma unroll
            for (int h = 0; h < R; ++h) {
                sc[h] = NEG;
                if (h >= rep) continue;   // block-uniform
                const float4* qp = reinterpret_cast<const float4*>(qs + h * D + d0);
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < VEC / 4; ++i) {
                    const float4 qq = qp[i];
                    dot = fmaf(qq.x, kf[4 * i], dot);
                    dot = fmaf(qq.y, kf[4 * i + 1], dot);
                    dot = fmaf(qq.z, kf[4 * i + 2], dot);
                    dot = fmaf(qq.w, kf[4 * i + 3], dot);
                }
#pragma unroll
                for (int o = 1; o < LPR; o <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
                float v = dot * g.scale;
                if (g.softcap > 0.0f) v = tanhf(v / g.softcap) * g.softcap;
                if (brow != nullptr && t < end && t < g.bias_cols)
                    v += to_f32(brow[h * g.bias_sh + t]);
                sc[h] = v;
            }
            if (t >= end) continue;
            float vf[VEC];
#pragma unroll
            for (int i = 0; i < VEC; ++i) vf[i] = vec_elem<T>(vr[u], i);
#pragma unroll
            for (int h = 0; h < R; ++h) {
                if (h >= rep) continue;
                const float mnew = fmaxf(m[h], sc[h]);
                if (mnew == NEG) continue;   // no key of this head yet
                const float corr = expf(m[h] - mnew);
                const float p = expf(sc[h] - mnew);
                l[h] = l[h] * corr + p;
                m[h] = mnew;
#pragma unroll
                for (int i = 0; i < VEC; ++i) acc[h][i] = fmaf(p, vf[i], acc[h][i] * corr);
            }
        }
        if (next < end) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                kr[u] = kn[u];
                vr[u] = vn[u];
            }
        }
    }

    // merge the NG lane groups' states, in group order
#pragma unroll
    for (int h = 0; h < R; ++h) {
        if (h >= rep) continue;
        if (lane % LPR == 0) {
            gm[grp * R + h] = m[h];
            gl[grp * R + h] = l[h];
        }
        float4* ap = reinterpret_cast<float4*>(gacc + (grp * R + h) * D + d0);
#pragma unroll
        for (int i = 0; i < VEC / 4; ++i)
            ap[i] = make_float4(acc[h][4 * i], acc[h][4 * i + 1], acc[h][4 * i + 2],
                                acc[h][4 * i + 3]);
    }
    __syncthreads();
    const long long y_row = Hq * D;
    float* wacc = ws;
    float* wml = ws + (long long)gridDim.y * splits * rep * D;
    for (int idx = tid; idx < rep * D; idx += GQA_THREADS) {
        const int h = idx / D, d = idx - h * D;
        float M = NEG;
#pragma unroll
        for (int G = 0; G < NG; ++G) M = fmaxf(M, gm[G * R + h]);
        float o = 0.0f, lsum = 0.0f;
        if (M != NEG) {
#pragma unroll
            for (int G = 0; G < NG; ++G) {
                const float mg = gm[G * R + h];
                const float e = mg == NEG ? 0.0f : expf(mg - M);
                o = fmaf(e, gacc[(G * R + h) * D + d], o);
                lsum = fmaf(gl[G * R + h], e, lsum);
            }
        }
        const long long hq = kvh * rep + h;
        if (splits == 1) {
            const float sk = g.has_sink ? (sink ? to_f32(sink[hq]) : 0.0f) : NEG;
            const float M2 = fmaxf(M, sk);
            const float e = M2 == NEG ? 0.0f : expf(M - M2);
            const float lt = lsum * e + (g.has_sink && M2 != NEG ? expf(sk - M2) : 0.0f);
            y[b * y_row + hq * D + d] = round_from32<T>(lt > 0.0f ? o * e / lt : 0.0f);
        } else {
            const long long slot = (bh * splits + split) * rep + h;
            wacc[slot * D + d] = o;
            if (d == 0) {
                wml[slot * 2] = M;
                wml[slot * 2 + 1] = lsum;
            }
        }
    }
    if (splits == 1) return;
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(counters + bh, 1u) == (unsigned)(splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();

    // weights exp(m_k - M) of each split, in split order, and each head's denominator
    for (int h = warp; h < rep; h += GQA_WARPS) {
        const float sk = g.has_sink ? (sink ? to_f32(sink[kvh * rep + h]) : 0.0f) : NEG;
        split_weights(wml + (bh * splits * rep + h) * 2, (long long)rep * 2, splits, sk,
                      g.has_sink, wsh + h * GQA_DEC_MAX_SPLITS, lsh + h);
    }
    __syncthreads();
    constexpr int D4 = D / 4;
    for (int idx = tid; idx < rep * D4; idx += GQA_THREADS) {
        const int h = idx / D4, d4 = idx - h * D4;
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
        for (long long k = 0; k < splits; ++k) {
            const float e = wsh[h * GQA_DEC_MAX_SPLITS + k];
            const float4 w = __ldcg(reinterpret_cast<const float4*>(
                wacc + ((bh * splits + k) * rep + h) * D) + d4);
            if (e != 0.0f) {
                o.x = fmaf(e, w.x, o.x);
                o.y = fmaf(e, w.y, o.y);
                o.z = fmaf(e, w.z, o.z);
                o.w = fmaf(e, w.w, o.w);
            }
        }
        const float lsum = lsh[h];
        T* yr = y + b * y_row + (kvh * rep + h) * D + 4 * d4;
        yr[0] = round_from32<T>(lsum > 0.0f ? o.x / lsum : 0.0f);
        yr[1] = round_from32<T>(lsum > 0.0f ? o.y / lsum : 0.0f);
        yr[2] = round_from32<T>(lsum > 0.0f ? o.z / lsum : 0.0f);
        yr[3] = round_from32<T>(lsum > 0.0f ? o.w / lsum : 0.0f);
    }
    if (tid == 0) counters[bh] = 0u;
}

// a shared-memory float4 the compiler may not keep in registers across loop iterations (Q
// of all heads is too large for registers; hoisting its reads out of the key loop spills)
__device__ __forceinline__ float4 lds_f4(const float* p) {
    float4 r;
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "r"(a));
    return r;
}

// One block per (batch * kv head) for a decode step over at most GQA_SHORT_KEYS keys (the
// host takes this route when the present buffers have no more rows): no splits, so no
// partial results, counters or second pass. Thread j scores keys lo + j, lo + j + threads,
// ... for all rep heads (its K row loaded whole, Q read from shared memory), warp h takes
// head h's softmax over the block's scores, then each thread accumulates two channels of
// one head's output over the keys in order, from V staged in shared memory a chunk of
// GQA_SHORT_VBYTES at a time (the first chunk's loads, and the first key row's, are issued
// before anything else, so their latency overlaps Q's; each next chunk's while the current
// one is used). Fixed orders throughout: replays repeat eager
// bytes. Numerics as gqa_decode (Q K^T, softmax and P V in float32, rounded once to T).
template <class T, int D>
__device__ __forceinline__ void gqa_decode_short(const T* __restrict__ q,
                                                 const T* __restrict__ kc,
                                                 const T* __restrict__ vc,
                                                 const int* __restrict__ seqlens,
                                                 const int* __restrict__ total,
                                                 const T* __restrict__ cs,
                                                 const T* __restrict__ sn,
                                                 const void* __restrict__ pid,
                                                 const T* __restrict__ bias,
                                                 const T* __restrict__ sink, T* __restrict__ y,
                                                 const GqaGeo& g) {
    constexpr int VEC = 16 / (int)sizeof(T);
    constexpr int R = GQA_DEC_REP, NT = GQA_SHORT_THREADS;
    constexpr int KV = D / VEC;                 // 16-byte vectors of a row
    constexpr int KB = KV < 8 ? KV : 8;         // of them loaded before any is used
    constexpr int VCH = GQA_SHORT_VBYTES / (D * (int)sizeof(T));   // keys of a V chunk
    constexpr int VPT = GQA_SHORT_VBYTES / 16 / NT;                 // its vectors per thread
    constexpr int HALF = D / 2;
    constexpr int ITEMS = (R * HALF + NT - 1) / NT;                 // (head, pair)s a thread
    static_assert(VCH * D * (int)sizeof(T) == GQA_SHORT_VBYTES && VPT * 16 * NT ==
                  GQA_SHORT_VBYTES, "V chunk geometry");
    __shared__ __align__(16) float qs[R * D];
    __shared__ float ps[R][GQA_SHORT_KEYS];
    __shared__ __align__(16) uint4 vsm[GQA_SHORT_VBYTES / 16];
    __shared__ float hl[R];

    const float NEG = -inf32();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long bh = blockIdx.y;
    const long long Hkv = g.kv_heads, Hq = g.q_heads;
    const int rep = (int)(Hq / Hkv);
    const long long b = bh / Hkv, kvh = bh % Hkv;
    const RowLens L = row_lens(seqlens, total, g, b);
    long long lo, hi;
    decode_keys(g, L, lo, hi);
    const int n = hi > lo ? (int)(hi - lo) : 0;   // <= present_len <= GQA_SHORT_KEYS
    const T* kb = kc + (bh * g.present_len + lo) * D;
    const T* vb = vc + (bh * g.present_len + lo) * D;

    // V chunk c0's vectors of this thread (rows are contiguous: vector i of the chunk is
    // row i / KV, vector i % KV of it)
    uint4 vr[VPT];
    auto load_v = [&](int c0) {
        const uint4* src = reinterpret_cast<const uint4*>(vb + (long long)c0 * D);
        const int lim = (n - c0 < VCH ? n - c0 : VCH) * KV;
#pragma unroll
        for (int u = 0; u < VPT; ++u) {
            const int i = tid + u * NT;
            vr[u] = i < lim ? src[i] : make_uint4(0u, 0u, 0u, 0u);
        }
    };
    load_v(0);
    // this thread's first key row (its first KB vectors) too: every load that depends only
    // on the row lengths is in flight before Q is rotated
    uint4 k0[KB];
#pragma unroll
    for (int u = 0; u < KB; ++u)
        k0[u] = tid < n ? reinterpret_cast<const uint4*>(kb + (long long)tid * D)[u]
                        : make_uint4(0u, 0u, 0u, 0u);

    stage_q<T, D, NT>(q, cs, sn, pid, g, b, kvh, rep, L, qs);
    __syncthreads();

    // scores
    const T* brow = bias != nullptr ? bias + b * g.bias_sb + kvh * rep * g.bias_sh : nullptr;
    for (int j = tid; j < n; j += NT) {
        const uint4* kr = reinterpret_cast<const uint4*>(kb + (long long)j * D);
        float sc[R];
#pragma unroll
        for (int h = 0; h < R; ++h) sc[h] = 0.0f;
#pragma unroll
        for (int c0 = 0; c0 < KV; c0 += KB) {
            uint4 kv[KB];
#pragma unroll
            for (int u = 0; u < KB; ++u) kv[u] = (c0 == 0 && j == tid) ? k0[u] : kr[c0 + u];
#pragma unroll
            for (int u = 0; u < KB; ++u) {
                float kf[VEC];
#pragma unroll
                for (int i = 0; i < VEC; ++i) kf[i] = vec_elem<T>(kv[u], i);
#pragma unroll
                for (int h = 0; h < R; ++h) {
                    if (h >= rep) continue;   // block-uniform
                    const float* qp = qs + h * D + (c0 + u) * VEC;
#pragma unroll
                    for (int i = 0; i < VEC / 4; ++i) {
                        const float4 qq = lds_f4(qp + 4 * i);
                        sc[h] = fmaf(qq.x, kf[4 * i], sc[h]);
                        sc[h] = fmaf(qq.y, kf[4 * i + 1], sc[h]);
                        sc[h] = fmaf(qq.z, kf[4 * i + 2], sc[h]);
                        sc[h] = fmaf(qq.w, kf[4 * i + 3], sc[h]);
                    }
                }
            }
        }
        const long long t = lo + j;
#pragma unroll
        for (int h = 0; h < R; ++h) {
            if (h >= rep) continue;
            float v = sc[h] * g.scale;
            if (g.softcap > 0.0f) v = tanhf(v / g.softcap) * g.softcap;
            if (brow != nullptr && t < g.bias_cols) v += to_f32(brow[h * g.bias_sh + t]);
            ps[h][j] = v;
        }
    }
    __syncthreads();

    // softmax of head `warp`: the scores become exp(s - M), hl its denominator
    if (warp < rep) {
        const int h = warp;
        float m = NEG;
        for (int j = lane; j < n; j += 32) m = fmaxf(m, ps[h][j]);
        m = warp_max(m);
        const float sk = g.has_sink ? (sink ? to_f32(sink[kvh * rep + h]) : 0.0f) : NEG;
        const float M = fmaxf(m, sk);
        float part = 0.0f;
        for (int j = lane; j < n; j += 32) {
            const float e = M == NEG ? 0.0f : expf(ps[h][j] - M);
            ps[h][j] = e;
            part += e;
        }
        const float l = warp_sum(part);
        if (lane == 0) hl[h] = l + (g.has_sink && M != NEG ? expf(sk - M) : 0.0f);
    }

    // P V: item (head h, channels 2c, 2c + 1) over the keys in order, chunk by chunk
    float a0[ITEMS], a1[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) a0[it] = a1[it] = 0.0f;
    const T* vs = reinterpret_cast<const T*>(vsm);
    for (int c0 = 0; c0 < n; c0 += VCH) {
        if (c0 > 0) __syncthreads();          // the previous chunk is used up
#pragma unroll
        for (int u = 0; u < VPT; ++u) vsm[tid + u * NT] = vr[u];
        __syncthreads();                      // (the first time: the softmax's too)
        if (c0 + VCH < n) load_v(c0 + VCH);   // the next chunk's loads fly meanwhile
        const int m = n - c0 < VCH ? n - c0 : VCH;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int idx = tid + it * NT;
            if (idx >= rep * HALF) break;
            const int h = idx / HALF, c = 2 * (idx - h * HALF);
            const float* pr = &ps[h][c0];
            float x0 = a0[it], x1 = a1[it];
#pragma unroll 8
            for (int j = 0; j < m; ++j) {
                const float p = pr[j];
                x0 = fmaf(p, to_f32(vs[j * D + c]), x0);
                x1 = fmaf(p, to_f32(vs[j * D + c + 1]), x1);
            }
            a0[it] = x0;
            a1[it] = x1;
        }
    }
    if (n == 0) __syncthreads();              // hl is written before it is read
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const int idx = tid + it * NT;
        if (idx >= rep * HALF) break;
        const int h = idx / HALF, c = 2 * (idx - h * HALF);
        const float l = hl[h];
        T* yr = y + b * Hq * D + (kvh * rep + h) * D + c;
        yr[0] = round_from32<T>(l > 0.0f ? a0[it] / l : 0.0f);
        yr[1] = round_from32<T>(l > 0.0f ? a1[it] / l : 0.0f);
    }
}

// ------------------------------------------------------------------ symbols

#define EP_GQA_KV(T, S)                                                                        \
extern "C" __global__ void gqa_kv_##S(const T* kn, const T* vn, const T* pk, const T* pv,      \
                                      T* ok, T* ov, const int* seqlens, const int* total,      \
                                      const T* cs, const T* sn, const void* pid,               \
                                      unsigned* counters, long long n_counters, GqaGeo g) {    \
    gqa_kv<T>(kn, vn, pk, pv, ok, ov, seqlens, total, cs, sn, pid, counters, n_counters, g);   \
}

#define EP_GQA_ATTEND(T, S, DMAX, NS, TK, RPW)                                                 \
extern "C" __global__ void __launch_bounds__(GQA_THREADS)                                      \
gqa_attend_##S##_d##DMAX(const T* q, const T* kc, const T* vc, const int* seqlens,             \
                         const int* total, const T* cs, const T* sn, const void* pid,          \
                         const T* bias, const T* sink, T* y, float* ws, unsigned* counters,    \
                         GqaGeo g) {                                                           \
    gqa_attend<T, NS, TK, RPW>(q, kc, vc, seqlens, total, cs, sn, pid, bias, sink, y, ws,     \
                               counters, g);                                                   \
}

#define EP_GQA_DECODE(T, S, D)                                                                 \
extern "C" __global__ void __launch_bounds__(GQA_THREADS)                                      \
gqa_decode_##S##_d##D(const T* q, const T* kc, const T* vc, const int* seqlens,                \
                      const int* total, const T* cs, const T* sn, const void* pid,             \
                      const T* bias, const T* sink, T* y, float* ws, unsigned* counters,       \
                      GqaGeo g) {                                                              \
    gqa_decode<T, D>(q, kc, vc, seqlens, total, cs, sn, pid, bias, sink, y, ws, counters, g);  \
}

#define EP_GQA_DECODE_SHORT(T, S, D)                                                           \
extern "C" __global__ void __launch_bounds__(GQA_SHORT_THREADS)                                \
gqa_decode_short_##S##_d##D(const T* q, const T* kc, const T* vc, const int* seqlens,          \
                            const int* total, const T* cs, const T* sn, const void* pid,       \
                            const T* bias, const T* sink, T* y, float* ws, unsigned* counters, \
                            GqaGeo g) {                                                        \
    gqa_decode_short<T, D>(q, kc, vc, seqlens, total, cs, sn, pid, bias, sink, y, g);         \
}

// (DMAX, NS, TK, RPW): Python gqa.VARIANTS; decode head sizes: gqa_plan.DECODE_HEADS
#define EP_GQA(T, S)                      \
    EP_GQA_KV(T, S)                       \
    EP_GQA_DECODE(T, S, 64)               \
    EP_GQA_DECODE(T, S, 128)              \
    EP_GQA_DECODE_SHORT(T, S, 64)         \
    EP_GQA_DECODE_SHORT(T, S, 128)        \
    EP_GQA_ATTEND(T, S, 64, 2, 32, 4)     \
    EP_GQA_ATTEND(T, S, 128, 4, 32, 4)    \
    EP_GQA_ATTEND(T, S, 256, 8, 16, 2)

EP_GQA(float, f32)
EP_GQA(f16, f16)
EP_GQA(bf16, bf16)
