// RotaryHalf (domain onnx_ep.fused): Y = X * cos + rotate_half(X) * sin over the last dim D
// of X, where rotate_half(X)[j] = -X[j + H] for j < H = D/2 and X[j - H] for j >= H.
//
// Symbols: rotary_half_<suffix> (f32 f16 bf16)
//   (const T* x, const T* cos_v, const T* sin_v, T* y, long long pairs, long long half,
//    Geo cos_geo, Geo sin_geo, long long cos_step, long long sin_step, int shared)
//
// One thread per pair (row r, j < H): it reads X[r, j] and X[r, j + H] once and writes
//   Y[r, j]     = X[r, j]     * cos[r, j]     + (-X[r, j + H]) * sin[r, j]
//   Y[r, j + H] = X[r, j + H] * cos[r, j + H] +   X[r, j]      * sin[r, j + H]
// X and Y are contiguous. cos and sin are read through broadcast strides: each Geo spans the
// pair space X.shape[:-1] + (H,) (coalesced on the host, so the offset of pair p is
// geo_offset(p, geo)), and element j + H lies ``step`` further (H times the stride of D;
// 0 when D is broadcast). ``shared``: sin's geometry is cos's, so one offset serves both.
//
// Numerics (cpu_reference/fused.py): in double, where the products of two values of at
// most 24 significant bits are exact; one addition; rounded once to T. These are the
// reference's operations in its order, so the results are its bytes (NaN payloads aside).
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

template <class T>
__device__ __forceinline__ void rotary_half(const T* __restrict__ x, const T* __restrict__ cs,
                                            const T* __restrict__ sn, T* __restrict__ y,
                                            long long pairs, long long half, const Geo& gc,
                                            const Geo& gs, long long cos_step,
                                            long long sin_step, int shared) {
    for (long long p = global_tid(); p < pairs; p += grid_threads()) {
        const long long r = p / half;
        const long long lo = p + r * half;  // r * D + j
        const long long hi = lo + half;
        const long long oc = geo_offset(p, gc);
        const long long os = shared ? oc : geo_offset(p, gs);
        const double x_lo = to_f64(x[lo]);
        const double x_hi = to_f64(x[hi]);
        const double y_lo = x_lo * to_f64(cs[oc]) + (-x_hi) * to_f64(sn[os]);
        const double y_hi = x_hi * to_f64(cs[oc + cos_step]) + x_lo * to_f64(sn[os + sin_step]);
        y[lo] = round_from64<T>(y_lo);
        y[hi] = round_from64<T>(y_hi);
    }
}

#define EP_ROTARY(T, S)                                                                        \
extern "C" __global__ void rotary_half_##S(const T* x, const T* cos_v, const T* sin_v, T* y,   \
                                           long long pairs, long long half, Geo cos_geo,       \
                                           Geo sin_geo, long long cos_step,                    \
                                           long long sin_step, int shared) {                   \
    rotary_half<T>(x, cos_v, sin_v, y, pairs, half, cos_geo, sin_geo, cos_step, sin_step,      \
                   shared);                                                                    \
}

EP_ROTARY(float, f32)
EP_ROTARY(f16, f16)
EP_ROTARY(bf16, bf16)
