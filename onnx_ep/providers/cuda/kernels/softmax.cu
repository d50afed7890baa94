// Softmax, LogSoftmax, LayerNormalization and RMSNormalization, one block per row.
//
// Softmax / LogSoftmax follow docs/PARITY.md's recipe: widen to float64, subtract the
// row max (0 where it is not finite), exp, sum and divide in float64, round ONCE to the
// output type. Only the order of the float64 sum differs from the reference, so the
// rounded result agrees with it except in vanishingly rare near-tie cases.
// Softmax caches exp(x - max) in shared memory (the first ``cache_n`` of the row), so exp
// runs once per element for rows up to ``cache_n``.
//
// LayerNormalization / RMSNormalization replay the reference's operation order in its
// stash type W (float32 for float32 and narrower, float64 for float64): every step is an
// IEEE operation in W, except that the two statistics (mean, mean of squares) are
// accumulated in double before rounding to W; only their summation order differs.
//
// Row loads are vectorized (V elements = 16 bytes) when the host finds the row length and
// the pointers aligned; V = 1 otherwise. Block sizes are powers of two (<= 256).
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

#define EP_BLOCK 256

struct SumD { static __device__ double comb(double a, double b) { return a + b; } };
struct MaxD {
    static __device__ double comb(double a, double b) {
        if (isnan(a)) return a;
        if (isnan(b)) return b;
        return b > a ? b : a;
    }
};

template <class Op>
__device__ __forceinline__ double block_reduce(double v, double* sh) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (t < s) sh[t] = Op::comb(sh[t], sh[t + s]);
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// ------------------------------------------------------------------ softmax (rows)
template <class T, int V, bool LOG>
__device__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long rows,
                             long long cols, int cache_n) {
    extern __shared__ double cache[];
    __shared__ double red[EP_BLOCK];
    typedef Vec<T, V> VT;
    const long long nv = cols / V;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const VT* xv = reinterpret_cast<const VT*>(x + row * cols);
        VT* yv = reinterpret_cast<VT*>(y + row * cols);
        double m = -inf64();
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT p = xv[j];
#pragma unroll
            for (int k = 0; k < V; ++k) m = MaxD::comb(m, to_f64(p.v[k]));
        }
        m = block_reduce<MaxD>(m, red);
        const double shift = isfinite(m) ? m : 0.0;
        double s = 0.0;
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT p = xv[j];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                double e = exp(to_f64(p.v[k]) - shift);
                long long idx = j * V + k;
                if (!LOG && idx < cache_n) cache[idx] = e;
                s += e;
            }
        }
        s = block_reduce<SumD>(s, red);
        const double ls = LOG ? log(s) : 0.0;
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT out;
            if (LOG) {
                VT p = xv[j];
#pragma unroll
                for (int k = 0; k < V; ++k) out.v[k] = round_from64<T>((to_f64(p.v[k]) - shift) - ls);
            } else if ((j + 1) * V <= cache_n) {
#pragma unroll
                for (int k = 0; k < V; ++k) out.v[k] = round_from64<T>(cache[j * V + k] / s);
            } else {
                VT p = xv[j];
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    long long idx = j * V + k;
                    double e = idx < cache_n ? cache[idx] : exp(to_f64(p.v[k]) - shift);
                    out.v[k] = round_from64<T>(e / s);
                }
            }
            yv[j] = out;
        }
        __syncthreads();   // the cache is reused by the next row
    }
}

// ------------------------------------------------------------------ softmax (axis with inner > 1)
// one thread per (outer, inner) position walking the axis with stride ``inner``
template <class T, bool LOG>
__device__ void softmax_cols(const T* __restrict__ x, T* __restrict__ y, long long outer,
                             long long axis_dim, long long inner) {
    long long n = outer * inner;
    for (long long k = global_tid(); k < n; k += grid_threads()) {
        long long o = k / inner, i = k - o * inner;
        const T* xo = x + o * axis_dim * inner + i;
        T* yo = y + o * axis_dim * inner + i;
        double m = -inf64();
        for (long long r = 0; r < axis_dim; ++r) m = MaxD::comb(m, to_f64(xo[r * inner]));
        const double shift = isfinite(m) ? m : 0.0;
        double s = 0.0;
        for (long long r = 0; r < axis_dim; ++r) s += exp(to_f64(xo[r * inner]) - shift);
        const double ls = log(s);
        for (long long r = 0; r < axis_dim; ++r) {
            double d = to_f64(xo[r * inner]) - shift;
            yo[r * inner] = round_from64<T>(LOG ? d - ls : exp(d) / s);
        }
    }
}

// ------------------------------------------------------------------ layer / RMS norm
template <class T> struct Stash { typedef float type; };
template <> struct Stash<double> { typedef double type; };

template <class W> __device__ __forceinline__ W w_load(float v) { return (W)v; }

template <class T, int V, bool RMS>
__device__ void norm_rows(const T* __restrict__ x, const T* __restrict__ scale,
                          const T* __restrict__ bias, T* __restrict__ y,
                          typename Stash<T>::type* __restrict__ mean_out,
                          typename Stash<T>::type* __restrict__ inv_out, long long rows,
                          long long cols, double eps) {
    typedef typename Stash<T>::type W;
    __shared__ double red[EP_BLOCK];
    typedef Vec<T, V> VT;
    const long long nv = cols / V;
    const W eps_w = (W)eps;
    const double n = (double)cols;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const VT* xv = reinterpret_cast<const VT*>(x + row * cols);
        VT* yv = reinterpret_cast<VT*>(y + row * cols);
        W mean = (W)0;
        double acc = 0.0;
        if (!RMS) {
            for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
                VT p = xv[j];
#pragma unroll
                for (int k = 0; k < V; ++k) acc += to_f64(p.v[k]);
            }
            mean = round_from64<W>(block_reduce<SumD>(acc, red) / n);
            acc = 0.0;
        }
        // sum of squared deviations (LayerNorm) or of squares (RMSNorm), each squared in W
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT p = xv[j];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                W d = (W)to_f64(p.v[k]) - mean;
                W dd = d * d;
                acc += (double)dd;
            }
        }
        const W var = round_from64<W>(block_reduce<SumD>(acc, red) / n);
        const W inv = (W)1 / sqrt(var + eps_w);
        const VT* sv = reinterpret_cast<const VT*>(scale);
        const VT* bv = reinterpret_cast<const VT*>(bias);
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT p = xv[j], sc = sv[j], out;
            VT b;
            if (bias) b = bv[j];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                W d = (W)to_f64(p.v[k]) - mean;
                W v = d * inv * (W)to_f64(sc.v[k]);
                if (bias) v = v + (W)to_f64(b.v[k]);
                out.v[k] = round_from64<T>(to_f64(v));
            }
            yv[j] = out;
        }
        if (threadIdx.x == 0) {
            if (mean_out) mean_out[row] = mean;
            if (inv_out) inv_out[row] = inv;
        }
    }
}

// ------------------------------------------------------------------ instantiation
#define EP_SOFTMAX_V(T, S, V)                                                               \
extern "C" __global__ void softmax_rows_v##V##_##S(const T* x, T* y, long long rows,        \
                                                   long long cols, int cache_n) {           \
    softmax_rows<T, V, false>(x, y, rows, cols, cache_n);                                   \
}                                                                                           \
extern "C" __global__ void log_softmax_rows_v##V##_##S(const T* x, T* y, long long rows,    \
                                                       long long cols, int cache_n) {       \
    softmax_rows<T, V, true>(x, y, rows, cols, cache_n);                                    \
}                                                                                           \
extern "C" __global__ void layer_norm_v##V##_##S(const T* x, const T* scale, const T* bias, \
        T* y, Stash<T>::type* mean, Stash<T>::type* inv, long long rows, long long cols,    \
        double eps) {                                                                       \
    norm_rows<T, V, false>(x, scale, bias, y, mean, inv, rows, cols, eps);                  \
}                                                                                           \
extern "C" __global__ void rms_norm_v##V##_##S(const T* x, const T* scale, const T* bias,   \
        T* y, Stash<T>::type* mean, Stash<T>::type* inv, long long rows, long long cols,    \
        double eps) {                                                                       \
    norm_rows<T, V, true>(x, scale, bias, y, mean, inv, rows, cols, eps);                   \
}

#define EP_SOFTMAX(T, S, VW)                                                                \
EP_SOFTMAX_V(T, S, 1)                                                                       \
EP_SOFTMAX_V(T, S, VW)                                                                      \
extern "C" __global__ void softmax_cols_##S(const T* x, T* y, long long outer, long long a, \
                                            long long inner) {                              \
    softmax_cols<T, false>(x, y, outer, a, inner);                                          \
}                                                                                           \
extern "C" __global__ void log_softmax_cols_##S(const T* x, T* y, long long outer,          \
                                                long long a, long long inner) {             \
    softmax_cols<T, true>(x, y, outer, a, inner);                                           \
}

// VW: elements per 16-byte vector
EP_SOFTMAX(float, f32, 4)
EP_SOFTMAX(f16, f16, 8)
EP_SOFTMAX(bf16, bf16, 8)
EP_SOFTMAX(double, f64, 2)
