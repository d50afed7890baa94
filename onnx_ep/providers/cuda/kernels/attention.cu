// Attention (opset 23-25): one thread block per (batch, query head, query row).
//
// The kernel replays cpu_reference/attention.py's operations in its compute type C (the
// type its scores matrix has: float32; float64 for float64 inputs or
// softmax_precision=DOUBLE; float16 for float16 inputs unless softmax_precision asks for
// more). Every value is carried in double and rounded to C after each step the reference
// rounds (Comp<C>::rnd), so + - * / agree with it exactly (double holds more than 2p + 2
// bits of every C):
//
//   qs = round_T(q * root), ks = round_T(k * root)      (root = sqrt(scale) in T, host)
//   s  = rnd(sum_d qs*ks)   float16: float32 sum in d order (numpy's half matmul), else
//                           a float64 sum (the reference's float64 GEMM) rounded once
//   softcap: s = rnd(rnd(tanh(rnd(s / c))) * c)         (tanh in float64)
//   s  = rnd(s + bias)      bias = mask (0/-inf for bool; -inf past its last column)
//                           + -inf where causal / window / nonpad_kv_seqlen forbid
//   softmax: max (NaN propagates; -inf -> 0), e = rnd(exp(rnd(s - max))), total =
//            rnd(sum e) (float64 sum; 0 -> 1), p = rnd(e / total); a row whose bias is
//            -inf everywhere gets p = 0
//   y  = round_T(rnd(sum_j round_T(p_j) * v_j))         (the same accumulation as QK)
//
// What differs from the reference: the order of float64 sums (and of its float32 pairwise
// softmax sum), exp/tanh's last bit, and the reference's float32 GEMV when a product has
// one row: hence a tolerance, not bytes. The optional 4th output is s after softcap
// (qk_matmul_output_mode 0/1), after the bias (2) or p (3), rounded to T.
//
// Scores live in dynamic shared memory when the row fits (ws == nullptr), else in the
// step workspace: one row of ``total`` scores per block, blocks loop over rows.
// present_key / present_value are written by attention_present_* (past then new rows).
#include "ep_block.cuh"
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

#define ATT_BLOCK 128

// Python: onnx_ep.providers.cuda.kernels.attention.AttnGeo (same field order)
struct AttnGeo {
    long long batch, q_heads, kv_heads, q_len, kv_len, past_len, head, v_head;
    long long q_sb, q_sh, q_ss;   // element strides of Q for (batch, head, seq); d is 1
    long long k_sb, k_sh, k_ss;
    long long v_sb, v_sh, v_ss;
    long long y_sb, y_sh, y_ss;
    long long m_sb, m_sh, m_sq;   // mask strides for (batch, q head, q row); 0 broadcasts
    long long mask_k;             // the mask's last dim (columns past it are -inf)
    long long left, right;        // window sizes, -1: none
    double root;                  // sqrt(scale) rounded to T
    double softcap;               // <= 0: none
    int is_causal;
    int mask_kind;                // 0 none, 1 bool, 2 float32, 3 float16, 4 bfloat16, 5 float64
    int qk_mode;                  // -1: no 4th output, else qk_matmul_output_mode
    int pad_;
};

template <int C> struct Comp;
template <> struct Comp<16> {
    typedef float S;     // scores storage
    typedef float Acc;   // numpy's float16 matmul accumulates in float32, in order
    static __device__ __forceinline__ double rnd(double x) { return to_f64(round_from64<f16>(x)); }
};
template <> struct Comp<32> {
    typedef float S;
    typedef double Acc;
    static __device__ __forceinline__ double rnd(double x) { return to_f64(round_from64<float>(x)); }
};
template <> struct Comp<64> {
    typedef double S;
    typedef double Acc;
    static __device__ __forceinline__ double rnd(double x) { return x; }
};

template <class T> __device__ __forceinline__ double round_t(double x) {
    return to_f64(round_from64<T>(x));
}

__device__ __forceinline__ double mask_at(const void* m, int kind, long long idx) {
    switch (kind) {
        case 1: return reinterpret_cast<const unsigned char*>(m)[idx] ? 0.0 : -inf64();
        case 2: return to_f64(reinterpret_cast<const float*>(m)[idx]);
        case 3: return to_f64(reinterpret_cast<const f16*>(m)[idx]);
        case 4: return to_f64(reinterpret_cast<const bf16*>(m)[idx]);
        default: return reinterpret_cast<const double*>(m)[idx];
    }
}

// logical or of 0.0 / 1.0 flags, for block_reduce (ep_block.cuh)
struct AnyOp {
    static __device__ __forceinline__ double comb(double a, double b) {
        return (a != 0.0 || b != 0.0) ? 1.0 : 0.0;
    }
};

template <class T, int C>
__device__ void attention_rows(const T* __restrict__ q, const T* __restrict__ k,
                               const T* __restrict__ v, const T* __restrict__ pk,
                               const T* __restrict__ pv, const void* __restrict__ mask,
                               const long long* __restrict__ nonpad, T* __restrict__ y,
                               T* __restrict__ qk, typename Comp<C>::S* __restrict__ ws,
                               const AttnGeo g) {
    typedef Comp<C> P;
    typedef typename P::S S;
    typedef typename P::Acc Acc;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ double red[ATT_BLOCK];
    const long long total = g.past_len + g.kv_len;
    const long long rows = g.batch * g.q_heads * g.q_len;
    const long long rep = g.q_heads / g.kv_heads;
    const long long P_ = g.past_len;
    S* qrow = reinterpret_cast<S*>(smem);
    S* sc = ws ? ws + (long long)blockIdx.x * total : qrow + g.head;
    const double cap = g.softcap > 0.0 ? P::rnd(g.softcap) : 0.0;
    const int t = threadIdx.x, nt = blockDim.x;

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const long long i = r % g.q_len;
        const long long bh = r / g.q_len;
        const long long h = bh % g.q_heads;
        const long long b = bh / g.q_heads;
        const long long kvh = h / rep;
        const T* qp = q + b * g.q_sb + h * g.q_sh + i * g.q_ss;
        for (long long d = t; d < g.head; d += nt) qrow[d] = (S)round_t<T>(to_f64(qp[d]) * g.root);
        __syncthreads();
        // query i sits at absolute position i + offset (past length, or nonpad - q_len)
        const long long offset = nonpad ? nonpad[b] - g.q_len : P_;
        const long long limit = nonpad ? nonpad[b] : total;
        const T* pk_row = pk + (b * g.kv_heads + kvh) * P_ * g.head;
        const T* k_row = k + b * g.k_sb + kvh * g.k_sh;
        double alive = 0.0;
        double mx = -inf64();
        for (long long j = t; j < total; j += nt) {
            const T* kp = j < P_ ? pk_row + j * g.head : k_row + (j - P_) * g.k_ss;
            Acc acc = (Acc)0;
            for (long long d = 0; d < g.head; ++d) {
                Acc kd = (Acc)round_t<T>(to_f64(kp[d]) * g.root);
                Acc prod = (Acc)qrow[d] * kd;
                acc = acc + prod;
            }
            double s = P::rnd((double)acc);
            if (cap > 0.0) {
                s = P::rnd(s / cap);
                s = P::rnd(tanh(s));
                s = P::rnd(s * cap);
            }
            if (qk && g.qk_mode <= 1) qk[r * total + j] = round_from64<T>(s);
            double bias = 0.0;
            if (g.mask_kind) {
                double m = -inf64();
                if (j < g.mask_k) {
                    m = mask_at(mask, g.mask_kind, b * g.m_sb + h * g.m_sh + i * g.m_sq + j);
                    if (g.mask_kind != 1) m = P::rnd(m);
                }
                bias = bias + m;
            }
            const long long p = i + offset;
            if (g.is_causal && j > p) bias = bias + -inf64();
            if (g.left >= 0 || g.right >= 0) {
                bool ok = (g.left < 0 || p - j <= g.left) && (g.right < 0 || j - p <= g.right);
                if (!ok) bias = bias + -inf64();
            }
            if (nonpad && j >= limit) bias = bias + -inf64();
            if (!(bias == -inf64())) alive = 1.0;
            s = P::rnd(s + bias);
            if (qk && g.qk_mode == 2) qk[r * total + j] = round_from64<T>(s);
            sc[j] = (S)s;
            mx = nan_extreme<true>(mx, s);
        }
        alive = block_reduce<AnyOp>(alive, red);
        mx = block_reduce<MaxOp>(mx, red);
        if (mx == -inf64()) mx = 0.0;
        double sum = 0.0;
        for (long long j = t; j < total; j += nt) {
            double e = P::rnd(exp(P::rnd((double)sc[j] - mx)));
            sc[j] = (S)e;
            sum += e;
        }
        double tot = P::rnd(block_reduce<SumOp>(sum, red));
        if (tot == 0.0) tot = 1.0;
        for (long long j = t; j < total; j += nt) {
            double pj = alive != 0.0 ? P::rnd((double)sc[j] / tot) : 0.0;
            if (qk && g.qk_mode == 3) qk[r * total + j] = round_from64<T>(pj);
            sc[j] = (S)round_t<T>(pj);   // the reference rounds P to T before P @ V
        }
        __syncthreads();
        const T* pv_row = pv + (b * g.kv_heads + kvh) * P_ * g.v_head;
        const T* v_row = v + b * g.v_sb + kvh * g.v_sh;
        T* yp = y + b * g.y_sb + h * g.y_sh + i * g.y_ss;
        for (long long e = t; e < g.v_head; e += nt) {
            Acc acc = (Acc)0;
            for (long long j = 0; j < total; ++j) {
                const T* vp = j < P_ ? pv_row + j * g.v_head : v_row + (j - P_) * g.v_ss;
                Acc prod = (Acc)sc[j] * (Acc)to_f64(vp[e]);
                acc = acc + prod;
            }
            yp[e] = round_from64<T>(P::rnd((double)acc));
        }
        __syncthreads();   // qrow and sc are reused by the next row
    }
}

// present[b, g, j, :] = past[b, g, j, :] for j < past_len, else new[b, g, j - past_len, :]
// (new laid out by its strides: 4-D or 3-D); a plain element copy.
template <class T>
__device__ void present_copy(const T* __restrict__ past, const T* __restrict__ nw,
                             T* __restrict__ out, long long batch, long long heads,
                             long long past_len, long long new_len, long long dim,
                             long long n_sb, long long n_sh, long long n_ss) {
    const long long total = past_len + new_len;
    const long long n = batch * heads * total * dim;
    for (long long idx = global_tid(); idx < n; idx += grid_threads()) {
        long long d = idx % dim;
        long long rest = idx / dim;
        long long j = rest % total;
        long long bh = rest / total;
        long long hh = bh % heads;
        long long b = bh / heads;
        out[idx] = j < past_len ? past[(bh * past_len + j) * dim + d]
                                : nw[b * n_sb + hh * n_sh + (j - past_len) * n_ss + d];
    }
}

#define EP_ATTENTION(T, SFX, C)                                                             \
extern "C" __global__ void __launch_bounds__(ATT_BLOCK) attention_##SFX##_c##C(               \
        const T* q, const T* k, const T* v, const T* pk, const T* pv, const void* mask,     \
        const long long* nonpad, T* y, T* qk, Comp<C>::S* ws, const AttnGeo g) {            \
    attention_rows<T, C>(q, k, v, pk, pv, mask, nonpad, y, qk, ws, g);                      \
}

#define EP_PRESENT(T, SFX)                                                                  \
extern "C" __global__ void attention_present_##SFX(const T* past, const T* nw, T* out,        \
        long long batch, long long heads, long long past_len, long long new_len,            \
        long long dim, long long n_sb, long long n_sh, long long n_ss) {                    \
    present_copy<T>(past, nw, out, batch, heads, past_len, new_len, dim, n_sb, n_sh, n_ss); \
}

EP_ATTENTION(float, f32, 32)
EP_ATTENTION(float, f32, 64)
EP_ATTENTION(f16, f16, 16)
EP_ATTENTION(f16, f16, 32)
EP_ATTENTION(f16, f16, 64)
EP_ATTENTION(bf16, bf16, 32)
EP_ATTENTION(bf16, bf16, 64)
EP_ATTENTION(double, f64, 64)

EP_PRESENT(float, f32)
EP_PRESENT(f16, f16)
EP_PRESENT(bf16, bf16)
EP_PRESENT(double, f64)
