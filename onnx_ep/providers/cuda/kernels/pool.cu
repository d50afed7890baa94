// Pooling: MaxPool, AveragePool (1-3 spatial dims, as 3-D with leading 1s) and the Global forms.
//
// Parity with cpu_reference (pool.py):
// - Max: selection, exact. The first NaN met in tap order wins (np.maximum keeps a NaN
//   accumulator and takes a NaN tap); ties keep the earlier value; padding is -inf.
//   The selected element is stored with its own bits.
// - Average: the reference sums the taps of the padded input in C order of the kernel in
//   float32 (float16/bfloat16 widened), padding contributing +0.0, starting from the first
//   tap, then divides once by the window count: done here in the same order with the x86
//   NaN rules of ep_float.cuh, so the bytes match. Counts per axis as the reference:
//   positions inside [-pad_begin, size + pad_end) with count_include_pad, else [0, size).
// - GlobalMaxPool: exact (a max). GlobalAveragePool: float32 tree sum per plane (fixed order,
//   deterministic, not numpy's pairwise order): tolerance.
// Element counts are int64; grid-stride loops, 256 threads per block.
#include "ep_float.cuh"

// -inf by bits: NVRTC has no <cmath>, so no INFINITY macro
__device__ __forceinline__ float neg_inf() { return ep::from_bits32(0xff800000u); }

struct PoolDims {
    long long in[3], out[3], kernel[3], stride[3], pad[3], pad_end[3], dil[3];
};

// Grid-stride over the planes * out_plane outputs: body(i, base, start) for output i, with
// base its plane of x and start the window's first position per axis (negative in padding).
template <class T, class Body>
__device__ __forceinline__ void for_each_window(const T* __restrict__ x, long long planes,
                                                const PoolDims& g, Body body) {
    const long long out_plane = g.out[0] * g.out[1] * g.out[2];
    const long long in_plane = g.in[0] * g.in[1] * g.in[2];
    const long long total = planes * out_plane;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long o2 = i % g.out[2];
        long long o1 = (i / g.out[2]) % g.out[1];
        long long o0 = (i / (g.out[2] * g.out[1])) % g.out[0];
        const T* base = x + (i / out_plane) * in_plane;
        long long start[3] = {o0 * g.stride[0] - g.pad[0], o1 * g.stride[1] - g.pad[1],
                              o2 * g.stride[2] - g.pad[2]};
        body(i, base, start);
    }
}

// tap(v) for each tap of the window inside the input, in C order of the kernel (padding
// skipped: the callers' reductions leave it out or, adding +0.0 to non-negative terms, are
// unchanged by it)
template <class T, class Tap>
__device__ __forceinline__ void for_each_tap(const T* base, const long long (&start)[3],
                                             const PoolDims& g, Tap tap) {
    for (long long a = 0; a < g.kernel[0]; ++a) {
        long long p0 = start[0] + a * g.dil[0];
        if (p0 < 0 || p0 >= g.in[0]) continue;
        for (long long b = 0; b < g.kernel[1]; ++b) {
            long long p1 = start[1] + b * g.dil[1];
            if (p1 < 0 || p1 >= g.in[1]) continue;
            for (long long c = 0; c < g.kernel[2]; ++c) {
                long long p2 = start[2] + c * g.dil[2];
                if (p2 < 0 || p2 >= g.in[2]) continue;
                tap(base[(p0 * g.in[1] + p1) * g.in[2] + p2]);
            }
        }
    }
}

template <class T>
__device__ __forceinline__ void window_pool(const T* __restrict__ x, T* __restrict__ y,
                                            long long planes, const PoolDims& g, int mode) {
    // mode 0: max, 1: average excluding pads, 2: average including pads
    for_each_window(x, planes, g, [&](long long i, const T* base, const long long (&start)[3]) {
        if (mode == 0) {
            float best = neg_inf();
            T best_t = ep::round_from32<T>(neg_inf());
            for_each_tap(base, start, g, [&](T v_t) {
                float v = ep::widen(v_t);
                if (!isnan(best) && (isnan(v) || v > best)) {
                    best = v;
                    best_t = v_t;
                }
            });
            y[i] = best_t;
        } else {
            long long count = 1;
            for (int ax = 0; ax < 3; ++ax) {
                long long lo = mode == 2 ? -g.pad[ax] : 0;
                long long hi = mode == 2 ? g.in[ax] + g.pad_end[ax] : g.in[ax];
                long long n = 0;
                for (long long t = 0; t < g.kernel[ax]; ++t) {
                    long long p = start[ax] + t * g.dil[ax];
                    n += (p >= lo && p < hi) ? 1 : 0;
                }
                count *= n;
            }
            float acc = 0.0f;
            bool first = true;
            for (long long a = 0; a < g.kernel[0]; ++a) {
                long long p0 = start[0] + a * g.dil[0];
                bool in0 = p0 >= 0 && p0 < g.in[0];
                for (long long b = 0; b < g.kernel[1]; ++b) {
                    long long p1 = start[1] + b * g.dil[1];
                    bool in1 = in0 && p1 >= 0 && p1 < g.in[1];
                    for (long long c = 0; c < g.kernel[2]; ++c) {
                        long long p2 = start[2] + c * g.dil[2];
                        float v = 0.0f;
                        if (in1 && p2 >= 0 && p2 < g.in[2]) {
                            v = ep::widen(base[(p0 * g.in[1] + p1) * g.in[2] + p2]);
                        }
                        if (first) {
                            acc = v;
                            first = false;
                        } else {
                            acc = ep::fix_nan2(acc + v, acc, v);
                        }
                    }
                }
            }
            float cnt = (float)count;
            y[i] = ep::round_from32<T>(ep::fix_nan2(acc / cnt, acc, cnt));
        }
    });
}

// one block per plane (grid-stride over planes); a fixed tree order, so runs are bit-identical
template <class T>
__device__ __forceinline__ void global_pool(const T* __restrict__ x, T* __restrict__ y,
                                            long long planes, long long size, int mode) {
    // mode 0: max, 1: average
    __shared__ float partial[256];
    __shared__ T partial_t[256];
    for (long long plane = blockIdx.x; plane < planes; plane += gridDim.x) {
        const T* base = x + plane * size;
        float acc = mode == 0 ? neg_inf() : 0.0f;
        T acc_t = ep::round_from32<T>(neg_inf());
        for (long long j = threadIdx.x; j < size; j += blockDim.x) {
            T v_t = base[j];
            float v = ep::widen(v_t);
            if (mode == 0) {
                if (!isnan(acc) && (isnan(v) || v > acc)) {
                    acc = v;
                    acc_t = v_t;
                }
            } else {
                acc += v;
            }
        }
        partial[threadIdx.x] = acc;
        partial_t[threadIdx.x] = acc_t;
        __syncthreads();
        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) {
                float a = partial[threadIdx.x], b = partial[threadIdx.x + s];
                if (mode == 0) {
                    if (!isnan(a) && (isnan(b) || b > a)) {
                        partial[threadIdx.x] = b;
                        partial_t[threadIdx.x] = partial_t[threadIdx.x + s];
                    }
                } else {
                    partial[threadIdx.x] = a + b;
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            y[plane] = mode == 0 ? partial_t[0]
                                 : ep::round_from32<T>(partial[0] / (float)size);
        }
        __syncthreads();
    }
}

// the window geometry travels as scalars (a struct by value is not portable across
// cuda-bindings versions' argument packing): per axis in, out, kernel, stride, pad begin,
// pad end, dilation, axes outermost first
#define EP_DIMS_PARAMS(A)                                                                      \
    long long in##A, long long out##A, long long k##A, long long s##A, long long p##A,         \
        long long e##A, long long d##A
#define EP_DIMS_SET(A)                                                                         \
    g.in[A] = in##A; g.out[A] = out##A; g.kernel[A] = k##A; g.stride[A] = s##A;               \
    g.pad[A] = p##A; g.pad_end[A] = e##A; g.dil[A] = d##A;
// kernel NAME(x, y, planes, <the geometry>, ARG_T ARG): FN<T>(x, y, planes, g, ARG)
#define EP_WINDOW_KERNEL(NAME, T, ARG_T, ARG, FN)                                              \
    extern "C" __global__ void NAME(                                                           \
        const T* __restrict__ x, T* __restrict__ y, long long planes, EP_DIMS_PARAMS(0),       \
        EP_DIMS_PARAMS(1), EP_DIMS_PARAMS(2), ARG_T ARG) {                                     \
        PoolDims g;                                                                            \
        EP_DIMS_SET(0) EP_DIMS_SET(1) EP_DIMS_SET(2)                                           \
        FN<T>(x, y, planes, g, ARG);                                                           \
    }

#define EP_POOL(SUFFIX, T)                                                                     \
    EP_WINDOW_KERNEL(window_pool_##SUFFIX, T, int, mode, window_pool)                          \
    extern "C" __global__ void global_pool_##SUFFIX(const T* __restrict__ x, T* __restrict__ y, \
                                                    long long planes, long long size,          \
                                                    int mode) {                                \
        global_pool<T>(x, y, planes, size, mode);                                              \
    }

EP_POOL(f32, float)
EP_POOL(f16, ep::f16)
EP_POOL(bf16, ep::bf16)

// LpPool: (sum over the window of |x|^p)^(1/p) in float64 as the reference computes it:
// taps in C order of the kernel, padding skipped (the reference adds +0.0 for it, which
// leaves a sum of non-negative terms unchanged), rounded once to T. p = 1 and p = 2 follow
// numpy's fast paths (identity; x*x and sqrt, both correctly rounded): exact. Other p use
// CUDA's double pow (within 2 ulp of libm's): one ulp of the output type.
template <class T>
__device__ __forceinline__ void lp_pool(const T* __restrict__ x, T* __restrict__ y,
                                        long long planes, const PoolDims& g, double p) {
    for_each_window(x, planes, g, [&](long long i, const T* base, const long long (&start)[3]) {
        double acc = 0.0;
        for_each_tap(base, start, g, [&](T t) {
            double v = fabs(ep::to_f64(t));
            acc += p == 2.0 ? v * v : (p == 1.0 ? v : pow(v, p));
        });
        double r = p == 2.0 ? sqrt(acc) : (p == 1.0 ? acc : pow(acc, 1.0 / p));
        y[i] = ep::round_from64<T>(r);
    });
}

#define EP_LP_POOL(SUFFIX, T) EP_WINDOW_KERNEL(lp_pool_##SUFFIX, T, double, p, lp_pool)

EP_LP_POOL(f32, float)
EP_LP_POOL(f16, ep::f16)
EP_LP_POOL(bf16, ep::bf16)
