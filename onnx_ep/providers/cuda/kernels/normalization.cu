// Hardmax, LpNormalization, InstanceNormalization / GroupNormalization, BatchNormalization.
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

// ------------------------------------------------------------------ instantiation
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
