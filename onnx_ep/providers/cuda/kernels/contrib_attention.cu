// onnxruntime's com.microsoft RotaryEmbedding and MultiHeadAttention, replaying
// cpu_reference/contrib_attention.py (compiled with --fmad=false: every double / float
// operation below is the one IEEE operation the reference takes).
//
// contrib_rotary_*: one thread per (batch, head, seq, pair) rotates a channel pair in
// float64 from the exact values, rounded once to T (the reference's recipe):
//   real = cos * x1 - sin * x2, imag = sin * x1 + cos * x2
// pairs (2c, 2c + 1) when interleaved, else (c, c + half); channels past 2 * half are
// copied. Positions are read on the device: position_ids[0] + s (the (1,) offset form) or
// position_ids[b, s]. A position outside [0, max_len) (the reference fails the node) writes
// NaN to the pair it would have rotated.
//
// mha_*: one block per (batch, head, query row), in float32 like the reference:
//   q, k, v = round_T(x + bias)               (float64 sum of exact values; no bias: x)
//   s = f32(sum_d q_d k_d)                     float64 accumulation, rounded once
//   s = s * scale                              float32
//   s = s + (masked ? mask_filter_value : 0) (+ attention_bias)   the addend in float32
//   softmax in float32: max (NaN wins; -inf -> 0), e = expf(s - max), total = f32(float64
//   sum of e) (0 -> 1), p = e / total
//   y = round_T(f32(sum_j p_j v_j))            float64 accumulation, rounded to float then T
// masked: key_padding_mask (kind 1: j >= mask[b]; 2: mask[b, j] == 0; 3: mask[b, i, j] ==
// 0) or unidirectional (j > past_len + i). Scores live in dynamic shared memory after the
// Q row when they fit (ws == nullptr), else one row per block in the step workspace.
// mha_present_* writes present_key / present_value: past rows, then round_T(new + bias).
#include "ep_block.cuh"
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

#define MHA_BLOCK 128

// ------------------------------------------------------------------ RotaryEmbedding
// Python: onnx_ep.providers.cuda.kernels.contrib_attention.RopeGeo (same field order)
struct RopeGeo {
    long long batch, heads, seq, head, half, max_len;
    long long sb, sh, ss;         // element strides of (batch, head, seq) in x and y
    int interleaved;
    int offset;                   // 1: position = position_ids[0] + s
};

template <class T>
__device__ void contrib_rotary(const T* __restrict__ x, const long long* __restrict__ pos_ids,
                               const T* __restrict__ cos_c, const T* __restrict__ sin_c,
                               T* __restrict__ y, const RopeGeo g) {
    const long long work = g.head - g.half;   // half pairs, then the pass-through channels
    const long long n = g.batch * g.heads * g.seq * work;
    for (long long idx = global_tid(); idx < n; idx += grid_threads()) {
        const long long c = idx % work;
        const long long r = idx / work;
        const long long s = r % g.seq;
        const long long bh = r / g.seq;
        const long long h = bh % g.heads;
        const long long b = bh / g.heads;
        const long long base = b * g.sb + h * g.sh + s * g.ss;
        if (c >= g.half) {
            y[base + c + g.half] = x[base + c + g.half];
            continue;
        }
        const long long i1 = g.interleaved ? 2 * c : c;
        const long long i2 = g.interleaved ? 2 * c + 1 : c + g.half;
        const long long pos = g.offset ? pos_ids[0] + s : pos_ids[b * g.seq + s];
        if (pos < 0 || pos >= g.max_len) {
            const T nan = round_from64<T>(__longlong_as_double(0x7ff8000000000000ll));
            y[base + i1] = nan;
            y[base + i2] = nan;
            continue;
        }
        const double x1 = to_f64(x[base + i1]), x2 = to_f64(x[base + i2]);
        const double cs = to_f64(cos_c[pos * g.half + c]), sn = to_f64(sin_c[pos * g.half + c]);
        const double real = cs * x1 - sn * x2;
        const double imag = sn * x1 + cs * x2;
        y[base + i1] = round_from64<T>(real);
        y[base + i2] = round_from64<T>(imag);
    }
}

// ------------------------------------------------------------------ MultiHeadAttention
// Python: onnx_ep.providers.cuda.kernels.contrib_attention.MhaGeo (same field order)
struct MhaGeo {
    long long batch, heads, q_len, kv_len, past_len, head, v_head;
    long long ab_sb, ab_sh;       // attention_bias strides of (batch, head); 0 broadcasts
    float scale, mask_filter;
    int mask_kind;                // 0 none, 1 lengths (batch,), 2 (batch, total), 3 (batch, q, total)
    int causal;
};

// round_T(x + b) from the exact values (x when there is no bias)
template <class T>
__device__ __forceinline__ float biased(T x, const T* __restrict__ bias, long long i) {
    if (!bias) return to_f32(x);
    return to_f32(round_from64<T>(to_f64(x) + to_f64(bias[i])));
}

template <class T>
__device__ void mha_rows(const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, const T* __restrict__ bias,
                         const int* __restrict__ pad, const T* __restrict__ ab,
                         const T* __restrict__ pk, const T* __restrict__ pv,
                         T* __restrict__ y, float* __restrict__ ws, const MhaGeo g) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ double red[MHA_BLOCK];
    const long long P = g.past_len;
    const long long total = P + g.kv_len;
    const long long rows = g.batch * g.heads * g.q_len;
    const long long hidden = g.heads * g.head, v_hidden = g.heads * g.v_head;
    const T* bk = bias ? bias + hidden : nullptr;
    const T* bv = bias ? bias + 2 * hidden : nullptr;
    float* qrow = reinterpret_cast<float*>(smem);
    float* sc = ws ? ws + (long long)blockIdx.x * total : qrow + g.head;
    const int t = threadIdx.x, nt = blockDim.x;

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const long long i = r % g.q_len;
        const long long bh = r / g.q_len;
        const long long h = bh % g.heads;
        const long long b = bh / g.heads;
        const T* qp = q + (b * g.q_len + i) * hidden + h * g.head;
        for (long long d = t; d < g.head; d += nt) qrow[d] = biased<T>(qp[d], bias, h * g.head + d);
        __syncthreads();
        const T* pk_row = pk + (b * g.heads + h) * P * g.head;
        const T* k_row = k + b * g.kv_len * hidden + h * g.head;
        const T* ab_row = ab ? ab + b * g.ab_sb + h * g.ab_sh + i * total : nullptr;
        double mx = -inf64();
        for (long long j = t; j < total; j += nt) {
            double acc = 0.0;
            if (j < P) {
                const T* kp = pk_row + j * g.head;
                for (long long d = 0; d < g.head; ++d)
                    acc = acc + (double)qrow[d] * to_f64(kp[d]);
            } else {
                const T* kp = k_row + (j - P) * hidden;
                for (long long d = 0; d < g.head; ++d)
                    acc = acc + (double)qrow[d] * (double)biased<T>(kp[d], bk, h * g.head + d);
            }
            float s = round_from64<float>(acc) * g.scale;
            bool masked = g.causal && j > P + i;
            if (g.mask_kind == 1) masked = masked || j >= (long long)pad[b];
            else if (g.mask_kind == 2) masked = masked || pad[b * total + j] == 0;
            else if (g.mask_kind == 3) masked = masked || pad[(b * g.q_len + i) * total + j] == 0;
            float add = masked ? g.mask_filter : 0.0f;
            if (ab_row) add = add + to_f32(ab_row[j]);
            s = s + add;
            sc[j] = s;
            mx = nan_extreme<true>(mx, (double)s);
        }
        mx = block_reduce<MaxOp>(mx, red);
        const float m = mx == -inf64() ? 0.0f : (float)mx;
        double sum = 0.0;
        for (long long j = t; j < total; j += nt) {
            const float e = expf(sc[j] - m);
            sc[j] = e;
            sum += (double)e;
        }
        float tot = round_from64<float>(block_reduce<SumOp>(sum, red));
        if (tot == 0.0f) tot = 1.0f;
        for (long long j = t; j < total; j += nt) sc[j] = sc[j] / tot;
        __syncthreads();
        const T* pv_row = pv + (b * g.heads + h) * P * g.v_head;
        const T* v_row = v + b * g.kv_len * v_hidden + h * g.v_head;
        T* yp = y + (b * g.q_len + i) * v_hidden + h * g.v_head;
        for (long long e = t; e < g.v_head; e += nt) {
            double acc = 0.0;
            for (long long j = 0; j < P; ++j)
                acc = acc + (double)sc[j] * to_f64(pv_row[j * g.v_head + e]);
            for (long long j = P; j < total; ++j)
                acc = acc + (double)sc[j] *
                      (double)biased<T>(v_row[(j - P) * v_hidden + e], bv, h * g.v_head + e);
            yp[e] = round_from32<T>(round_from64<float>(acc));
        }
        __syncthreads();   // qrow and sc are reused by the next row
    }
}

// present[b, h, j, :] = past[b, h, j, :] for j < past_len, else round_T(new[b, j - past_len,
// h * dim + :] + bias[h * dim + :]) (no bias: the new value)
template <class T>
__device__ void mha_present(const T* __restrict__ past, const T* __restrict__ nw,
                            const T* __restrict__ bias, T* __restrict__ out, long long batch,
                            long long heads, long long past_len, long long new_len,
                            long long dim) {
    const long long total = past_len + new_len;
    const long long n = batch * heads * total * dim;
    for (long long idx = global_tid(); idx < n; idx += grid_threads()) {
        const long long d = idx % dim;
        const long long rest = idx / dim;
        const long long j = rest % total;
        const long long bh = rest / total;
        const long long hh = bh % heads;
        const long long b = bh / heads;
        if (j < past_len) {
            out[idx] = past[(bh * past_len + j) * dim + d];
        } else {
            const T x = nw[(b * new_len + j - past_len) * heads * dim + hh * dim + d];
            out[idx] = bias ? round_from64<T>(to_f64(x) + to_f64(bias[hh * dim + d])) : x;
        }
    }
}

// ------------------------------------------------------------------ instantiation
#define EP_CONTRIB(T, S)                                                                    \
extern "C" __global__ void contrib_rotary_##S(const T* x, const long long* pos_ids,         \
        const T* cos_c, const T* sin_c, T* y, const RopeGeo g) {                            \
    contrib_rotary<T>(x, pos_ids, cos_c, sin_c, y, g);                                      \
}                                                                                           \
extern "C" __global__ void __launch_bounds__(MHA_BLOCK) mha_##S(const T* q, const T* k,      \
        const T* v, const T* bias, const int* pad, const T* ab, const T* pk, const T* pv,   \
        T* y, float* ws, const MhaGeo g) {                                                  \
    mha_rows<T>(q, k, v, bias, pad, ab, pk, pv, y, ws, g);                                  \
}                                                                                           \
extern "C" __global__ void mha_present_##S(const T* past, const T* nw, const T* bias,       \
        T* out, long long batch, long long heads, long long past_len, long long new_len,    \
        long long dim) {                                                                    \
    mha_present<T>(past, nw, bias, out, batch, heads, past_len, new_len, dim);              \
}

EP_CONTRIB(float, f32)
EP_CONTRIB(f16, f16)
EP_CONTRIB(bf16, bf16)
