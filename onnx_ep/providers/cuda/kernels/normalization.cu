// Hardmax, LpNormalization, InstanceNormalization / GroupNormalization, BatchNormalization,
// and onnxruntime's RMS normalizations (SimplifiedLayerNormalization,
// SkipSimplifiedLayerNormalization: rms_norm_*, at the end, computed in float32 throughout;
// com.microsoft::SkipLayerNormalization: skip_layer_norm_*, after it, in float64; what
// follows here holds for the others).
//
// W is the reference's compute type (cpu_reference/normalization.py, lowfloat.float_compute):
// float32 for float32/float16/bfloat16, float64 for float64. Every step the reference takes
// in W is one IEEE operation in W here (compiled with --fmad=false); sums of statistics are
// accumulated in double and rounded once to W (the reference sums in W, in numpy's order:
// hence the tolerance promises, except Hardmax and inference BatchNormalization, which are
// exact). Statistics reductions use a fixed tree per block: deterministic, no atomics.
#include "ep_block.cuh"
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

template <class T> struct Work { typedef float type; };
template <> struct Work<double> { typedef double type; };

// ------------------------------------------------------------------ Hardmax
// one thread per (outer, inner): 1 at the first maximum along the axis (np.argmax: the
// first NaN wins), 0 elsewhere
template <class T>
__device__ void hardmax(const T* __restrict__ x, T* __restrict__ y, long long outer,
                        long long dim, long long inner) {
    const long long n = outer * inner;
    for (long long k = global_tid(); k < n; k += grid_threads()) {
        long long o = k / inner, i = k - o * inner;
        const T* xo = x + o * dim * inner + i;
        T* yo = y + o * dim * inner + i;
        long long best = 0;
        double bv = to_f64(xo[0]);
        if (!isnan(bv)) {
            for (long long r = 1; r < dim; ++r) {
                double v = to_f64(xo[r * inner]);
                if (isnan(v)) { best = r; break; }
                if (v > bv) { bv = v; best = r; }
            }
        }
        for (long long r = 0; r < dim; ++r) yo[r * inner] = round_from64<T>(r == best ? 1.0 : 0.0);
    }
}

// ------------------------------------------------------------------ LpNormalization
// one thread per (outer, inner): norm = sum |v| (p=1) or sqrt(sum v*v) (p=2), y = v / norm
// (0 where norm == 0); v and norm in W
template <class T>
__device__ void lp_norm(const T* __restrict__ x, T* __restrict__ y, long long outer,
                        long long dim, long long inner, int p) {
    typedef typename Work<T>::type W;
    const long long n = outer * inner;
    for (long long k = global_tid(); k < n; k += grid_threads()) {
        long long o = k / inner, i = k - o * inner;
        const T* xo = x + o * dim * inner + i;
        T* yo = y + o * dim * inner + i;
        double acc = 0.0;
        for (long long r = 0; r < dim; ++r) {
            W v = (W)to_f64(xo[r * inner]);
            acc += p == 1 ? (double)fabs(v) : (double)(v * v);
        }
        W norm = round_from64<W>(acc);
        if (p != 1) norm = sqrt(norm);
        for (long long r = 0; r < dim; ++r) {
            W v = (W)to_f64(xo[r * inner]);
            yo[r * inner] = round_from64<T>(norm == (W)0 ? 0.0 : (double)(v / norm));
        }
    }
}

// ------------------------------------------------------------------ Instance / Group
// One block per row of ``len`` elements: row r is (n, g) with g in [0, groups); element j
// of the row belongs to channel c = g * cpr + j / spatial. scale/bias index: c, or g when
// ``per_group``. y = (v - mean) / sqrt(var + eps) * scale + bias in W.
template <class T>
__device__ void group_norm(const T* __restrict__ x, const T* __restrict__ scale,
                           const T* __restrict__ bias, T* __restrict__ y, long long rows,
                           long long len, long long groups, long long cpr, long long spatial,
                           int per_group, double eps) {
    typedef typename Work<T>::type W;
    __shared__ double red[EP_BLOCK];
    const double count = (double)len;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * len;
        T* yr = y + row * len;
        const long long g = row % groups;
        double acc = 0.0;
        for (long long j = threadIdx.x; j < len; j += blockDim.x) acc += to_f64(xr[j]);
        const W mean = round_from64<W>(block_reduce<SumOp>(acc, red) / count);
        acc = 0.0;
        for (long long j = threadIdx.x; j < len; j += blockDim.x) {
            W d = (W)to_f64(xr[j]) - mean;
            acc += (double)(d * d);
        }
        const W var = round_from64<W>(block_reduce<SumOp>(acc, red) / count);
        const W den = sqrt(var + (W)eps);
        for (long long j = threadIdx.x; j < len; j += blockDim.x) {
            long long c = per_group ? g : g * cpr + j / spatial;
            W v = ((W)to_f64(xr[j]) - mean) / den;
            v = v * (W)to_f64(scale[c]) + (W)to_f64(bias[c]);
            yr[j] = round_from64<T>((double)v);
        }
    }
}

// ------------------------------------------------------------------ BatchNormalization
// One block per channel c of X (N, C, spatial). Inference: the running mean/var inputs.
// Training: batch statistics over (N, spatial) (mean, then mean of squared deviations),
// and running_mean/var outputs = input * momentum + batch * (1 - momentum) in W.
// gain = scale / sqrt(var + eps) in float64, rounded once to W; y = (v - mean) * gain + bias.
template <class T>
__device__ void batch_norm(const T* __restrict__ x, const T* __restrict__ scale,
                           const T* __restrict__ bias, const T* __restrict__ mean_in,
                           const T* __restrict__ var_in, T* __restrict__ y,
                           T* __restrict__ mean_out, T* __restrict__ var_out, long long N,
                           long long C, long long spatial, double eps, int training,
                           double momentum) {
    typedef typename Work<T>::type W;
    __shared__ double red[EP_BLOCK];
    const long long len = N * spatial;
    const double count = (double)len;
    for (long long c = blockIdx.x; c < C; c += gridDim.x) {
        W mean = (W)to_f64(mean_in[c]);
        W var = (W)to_f64(var_in[c]);
        if (training) {
            double acc = 0.0;
            for (long long j = threadIdx.x; j < len; j += blockDim.x) {
                long long n = j / spatial, s = j - n * spatial;
                acc += to_f64(x[(n * C + c) * spatial + s]);
            }
            mean = round_from64<W>(block_reduce<SumOp>(acc, red) / count);
            acc = 0.0;
            for (long long j = threadIdx.x; j < len; j += blockDim.x) {
                long long n = j / spatial, s = j - n * spatial;
                W d = (W)to_f64(x[(n * C + c) * spatial + s]) - mean;
                acc += (double)(d * d);
            }
            var = round_from64<W>(block_reduce<SumOp>(acc, red) / count);
            if (threadIdx.x == 0) {
                const W mom = (W)momentum;
                const W rest = (W)1 - mom;
                if (mean_out) mean_out[c] = round_from64<T>((double)((W)to_f64(mean_in[c]) * mom + mean * rest));
                if (var_out) var_out[c] = round_from64<T>((double)((W)to_f64(var_in[c]) * mom + var * rest));
            }
        }
        const W gain = round_from64<W>(to_f64(scale[c]) / sqrt((double)var + eps));
        const W b = (W)to_f64(bias[c]);
        for (long long j = threadIdx.x; j < len; j += blockDim.x) {
            long long n = j / spatial, s = j - n * spatial;
            long long at = (n * C + c) * spatial + s;
            W v = (W)to_f64(x[at]) - mean;
            v = v * gain;
            v = v + b;
            y[at] = round_from64<T>((double)v);
        }
    }
}

// ------------------------------------------------------------------ RMS normalization
// onnxruntime's SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization, one block
// per row of ``cols`` values (grid-stride over rows), everything in float32 (the reference
// computes in float64; the promise is a tolerance):
//   s = x (+ skip) (+ bias)                  skip row: row % skip_rows (skip repeats over
//                                            leading dims); bias: one value per column
//   inv = 1 / sqrt(sum(s * s) / cols + eps)  per-thread float sums, then block_reduce's tree
//   y = s * inv * gamma                      gamma index: column % gamma_n (scale broadcast)
// Outputs are null when not wanted (y too, when nothing reads it): sum_out = s rounded to T,
// inv_out = inv, mean_out = 0 (onnxruntime computes no mean for the RMS form and returns
// zeros).
// The row is read twice (sum of squares, then output); the second pass recomputes s with
// the same operations, so both passes see the same values. V = 16 bytes of T when the host
// found every pointer, cols and gamma_n aligned to it (one 128-bit load per pack), else 1.

// one 32-bit word <-> its 1 (float) or 2 (float16 / bfloat16, lower address in the low
// half) values as float; conversions through ep_float.cuh, NaN rules included
template <class T> struct Lanes {
    static constexpr int N = 2;
    static __device__ __forceinline__ T half_of(unsigned w, int i) {
        return from_bits16((unsigned short)(i ? w >> 16 : w & 0xffffu));
    }
    static __device__ __forceinline__ T from_bits16(unsigned short b);
    static __device__ __forceinline__ void get(unsigned w, float* f) {
        f[0] = to_f32(half_of(w, 0));
        f[1] = to_f32(half_of(w, 1));
    }
    static __device__ __forceinline__ unsigned put(const float* f) {
        return (unsigned)bits16(round_from32<T>(f[0])) |
               (unsigned)bits16(round_from32<T>(f[1])) << 16;
    }
};
template <> __device__ __forceinline__ f16 Lanes<f16>::from_bits16(unsigned short b) {
    return f16_from_bits(b);
}
template <> __device__ __forceinline__ bf16 Lanes<bf16>::from_bits16(unsigned short b) {
    return bf16_from_bits(b);
}
template <> struct Lanes<float> {
    static constexpr int N = 1;
    static __device__ __forceinline__ void get(unsigned w, float* f) { f[0] = __uint_as_float(w); }
    static __device__ __forceinline__ unsigned put(const float* f) { return __float_as_uint(f[0]); }
};

// V values of T at p (V * sizeof(T) == 16: one read-only 128-bit load) as float, and back
template <class T, int V>
__device__ __forceinline__ void rms_load(const T* __restrict__ p, float (&f)[V]) {
    if constexpr (V * sizeof(T) == 16) {
        constexpr int N = Lanes<T>::N;
        const uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
        Lanes<T>::get(r.x, &f[0]);
        Lanes<T>::get(r.y, &f[N]);
        Lanes<T>::get(r.z, &f[2 * N]);
        Lanes<T>::get(r.w, &f[3 * N]);
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) f[k] = to_f32(p[k]);
    }
}
template <class T, int V>
__device__ __forceinline__ void rms_store(T* __restrict__ p, const float (&f)[V]) {
    if constexpr (V * sizeof(T) == 16) {
        constexpr int N = Lanes<T>::N;
        uint4 r;
        r.x = Lanes<T>::put(&f[0]);
        r.y = Lanes<T>::put(&f[N]);
        r.z = Lanes<T>::put(&f[2 * N]);
        r.w = Lanes<T>::put(&f[3 * N]);
        *reinterpret_cast<uint4*>(p) = r;
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) p[k] = round_from32<T>(f[k]);
    }
}

// s at columns [c, c + V) of a row: x (+ skip) (+ bias), added in that order in float
template <class T, int V>
__device__ __forceinline__ void rms_sum(const T* __restrict__ xr, const T* __restrict__ sr,
                                        const T* __restrict__ bias, long long c, float (&s)[V]) {
    rms_load<T, V>(xr + c, s);
    if (sr) {
        float t[V];
        rms_load<T, V>(sr + c, t);
#pragma unroll
        for (int k = 0; k < V; ++k) s[k] = s[k] + t[k];
    }
    if (bias) {
        float t[V];
        rms_load<T, V>(bias + c, t);
#pragma unroll
        for (int k = 0; k < V; ++k) s[k] = s[k] + t[k];
    }
}

template <class T, int V>
__device__ void rms_norm(const T* __restrict__ x, const T* __restrict__ skip,
                         const T* __restrict__ bias, const T* __restrict__ gamma,
                         T* __restrict__ y, T* __restrict__ sum_out,
                         float* __restrict__ mean_out, float* __restrict__ inv_out,
                         long long rows, long long cols, long long skip_rows, long long gamma_n,
                         float eps) {
    __shared__ float red[EP_BLOCK];
    const long long nv = cols / V;
    const float n = (float)cols;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        const T* sr = skip ? skip + (row % skip_rows) * cols : nullptr;
        float acc = 0.0f;
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            float s[V];
            rms_sum<T, V>(xr, sr, bias, j * V, s);
            if (sum_out) rms_store<T, V>(sum_out + row * cols + j * V, s);
#pragma unroll
            for (int k = 0; k < V; ++k) acc = acc + s[k] * s[k];
        }
        const float inv = 1.0f / sqrtf(block_reduce<SumOp>(acc, red) / n + eps);
        for (long long j = threadIdx.x; y && j < nv; j += blockDim.x) {
            float s[V], g[V];
            rms_sum<T, V>(xr, sr, bias, j * V, s);
            // the modulo only where the scale repeats within the row (a rare layout)
            rms_load<T, V>(gamma + (gamma_n == cols ? j * V : (j * V) % gamma_n), g);
#pragma unroll
            for (int k = 0; k < V; ++k) s[k] = s[k] * inv * g[k];
            rms_store<T, V>(y + row * cols + j * V, s);
        }
        if (threadIdx.x == 0) {
            if (inv_out) inv_out[row] = inv;
            if (mean_out) mean_out[row] = 0.0f;
        }
    }
}

// ------------------------------------------------------------------ SkipLayerNormalization
// com.microsoft::SkipLayerNormalization, one block per row like rms_norm, in float64 (the
// reference's type: the narrow inputs are widened exactly, the sums are the only
// difference):
//   s = x + skip (+ bias)                     in double (exact for float16 / bfloat16)
//   mean = sum(s) / cols, var = sum((s - mean)^2) / cols   (block_reduce's fixed tree)
//   inv = 1 / sqrt(var + eps)
//   y = (s - mean) * inv * gamma (+ beta)     rounded once to T
// sum_out = s rounded once to T, mean_out / inv_out = mean / inv rounded to float; null
// outputs are skipped. The row is read three times (mean, variance, output) and s is
// recomputed with the same operations each time. V as rms_norm.

template <class T, int V>
__device__ __forceinline__ void sln_load(const T* __restrict__ p, double (&d)[V]) {
    float f[V];
    rms_load<T, V>(p, f);
#pragma unroll
    for (int k = 0; k < V; ++k) d[k] = to_f64(f[k]);
}

template <class T, int V>
__device__ __forceinline__ void sln_store(T* __restrict__ p, const double (&d)[V]) {
    if constexpr (V * sizeof(T) == 16) {
        __align__(16) T t[V];
#pragma unroll
        for (int k = 0; k < V; ++k) t[k] = round_from64<T>(d[k]);
        *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(t);
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) p[k] = round_from64<T>(d[k]);
    }
}

// s at columns [c, c + V) of a row: (x + skip) (+ bias) in double
template <class T, int V>
__device__ __forceinline__ void sln_sum(const T* __restrict__ xr, const T* __restrict__ sr,
                                        const T* __restrict__ bias, long long c,
                                        double (&s)[V]) {
    double t[V];
    sln_load<T, V>(xr + c, s);
    sln_load<T, V>(sr + c, t);
#pragma unroll
    for (int k = 0; k < V; ++k) s[k] = s[k] + t[k];
    if (bias) {
        sln_load<T, V>(bias + c, t);
#pragma unroll
        for (int k = 0; k < V; ++k) s[k] = s[k] + t[k];
    }
}

template <class T, int V>
__device__ void skip_layer_norm(const T* __restrict__ x, const T* __restrict__ skip,
                                const T* __restrict__ bias, const T* __restrict__ gamma,
                                const T* __restrict__ beta, T* __restrict__ y,
                                T* __restrict__ sum_out, float* __restrict__ mean_out,
                                float* __restrict__ inv_out, long long rows, long long cols,
                                long long skip_rows, float eps) {
    __shared__ double red[EP_BLOCK];
    const long long nv = cols / V;
    const double n = (double)cols;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        const T* sr = skip + (row % skip_rows) * cols;
        double acc = 0.0;
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            double s[V];
            sln_sum<T, V>(xr, sr, bias, j * V, s);
            if (sum_out) sln_store<T, V>(sum_out + row * cols + j * V, s);
#pragma unroll
            for (int k = 0; k < V; ++k) acc = acc + s[k];
        }
        const double mean = block_reduce<SumOp>(acc, red) / n;
        acc = 0.0;
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            double s[V];
            sln_sum<T, V>(xr, sr, bias, j * V, s);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const double d = s[k] - mean;
                acc = acc + d * d;
            }
        }
        const double inv = 1.0 / sqrt(block_reduce<SumOp>(acc, red) / n + (double)eps);
        for (long long j = threadIdx.x; y && j < nv; j += blockDim.x) {
            double s[V], g[V];
            sln_sum<T, V>(xr, sr, bias, j * V, s);
            sln_load<T, V>(gamma + j * V, g);
#pragma unroll
            for (int k = 0; k < V; ++k) s[k] = (s[k] - mean) * inv * g[k];
            if (beta) {
                sln_load<T, V>(beta + j * V, g);
#pragma unroll
                for (int k = 0; k < V; ++k) s[k] = s[k] + g[k];
            }
            sln_store<T, V>(y + row * cols + j * V, s);
        }
        if (threadIdx.x == 0) {
            if (mean_out) mean_out[row] = round_from64<float>(mean);
            if (inv_out) inv_out[row] = round_from64<float>(inv);
        }
    }
}

// ------------------------------------------------------------------ instantiation
#define EP_RMS_NORM(T, S, V)                                                                \
extern "C" __global__ void rms_norm_v##V##_##S(const T* x, const T* skip, const T* bias,    \
        const T* gamma, T* y, T* sum_out, float* mean_out, float* inv_out, long long rows,  \
        long long cols, long long skip_rows, long long gamma_n, float eps) {                \
    rms_norm<T, V>(x, skip, bias, gamma, y, sum_out, mean_out, inv_out, rows, cols,         \
                   skip_rows, gamma_n, eps);                                                \
}

// V: 1 (any alignment) and 16 bytes' worth
EP_RMS_NORM(float, f32, 1)
EP_RMS_NORM(float, f32, 4)
EP_RMS_NORM(f16, f16, 1)
EP_RMS_NORM(f16, f16, 8)
EP_RMS_NORM(bf16, bf16, 1)
EP_RMS_NORM(bf16, bf16, 8)

#define EP_SKIP_LAYER_NORM(T, S, V)                                                         \
extern "C" __global__ void skip_layer_norm_v##V##_##S(const T* x, const T* skip,            \
        const T* bias, const T* gamma, const T* beta, T* y, T* sum_out, float* mean_out,    \
        float* inv_out, long long rows, long long cols, long long skip_rows, float eps) {   \
    skip_layer_norm<T, V>(x, skip, bias, gamma, beta, y, sum_out, mean_out, inv_out, rows,  \
                          cols, skip_rows, eps);                                            \
}

EP_SKIP_LAYER_NORM(float, f32, 1)
EP_SKIP_LAYER_NORM(float, f32, 4)
EP_SKIP_LAYER_NORM(f16, f16, 1)
EP_SKIP_LAYER_NORM(f16, f16, 8)
EP_SKIP_LAYER_NORM(bf16, bf16, 1)
EP_SKIP_LAYER_NORM(bf16, bf16, 8)

#define EP_NORM(T, S)                                                                       \
extern "C" __global__ void hardmax_##S(const T* x, T* y, long long outer, long long dim,    \
                                       long long inner) {                                   \
    hardmax<T>(x, y, outer, dim, inner);                                                    \
}                                                                                           \
extern "C" __global__ void lp_norm_##S(const T* x, T* y, long long outer, long long dim,    \
                                       long long inner, int p) {                            \
    lp_norm<T>(x, y, outer, dim, inner, p);                                                 \
}                                                                                           \
extern "C" __global__ void group_norm_##S(const T* x, const T* scale, const T* bias, T* y,  \
        long long rows, long long len, long long groups, long long cpr, long long spatial,  \
        int per_group, double eps) {                                                        \
    group_norm<T>(x, scale, bias, y, rows, len, groups, cpr, spatial, per_group, eps);      \
}                                                                                           \
extern "C" __global__ void batch_norm_##S(const T* x, const T* scale, const T* bias,        \
        const T* mean_in, const T* var_in, T* y, T* mean_out, T* var_out, long long N,      \
        long long C, long long spatial, double eps, int training, double momentum) {        \
    batch_norm<T>(x, scale, bias, mean_in, var_in, y, mean_out, var_out, N, C, spatial,     \
                  eps, training, momentum);                                                 \
}

EP_NORM(float, f32)
EP_NORM(f16, f16)
EP_NORM(bf16, bf16)
EP_NORM(double, f64)
