// SiluMul (domain onnx_ep.fused): Y = G * sigmoid(G) * U, G and U of one shape (the SwiGLU
// gate of Llama / Qwen MLPs, fused from Mul(Mul(G, Sigmoid(G)), U)).
//
// Symbols: silu_mul_<suffix> (f32 f16 bf16)
//   (const T* g, const T* u, T* y, long long n)
//
// One grid-stride pass over the n elements, 16-byte packs through ep_flat.cuh when the three
// pointers are aligned to a pack (a misaligned view runs the element loop; same results).
//
// Numerics (kernels/gated.py has the error bound): float32, rounded once to T:
//   e = expf(-|g|);  s = (g >= 0 ? 1 : e) / (1 + e);  v = g * (s * u)
// expf, not __expf: expf is within 2 ulp over its whole range and keeps subnormals, while
// __expf's error grows with |g| (2 + 1.173 |g| ulp) and flushes them. The kernel moves
// 3 x sizeof(T) bytes per element, so the accurate expf does not set its speed.
// s * u first: s <= 1, so it cannot overflow, and a subnormal s * u is amplified by |g| <= 87
// only (G * s first would amplify a subnormal G * s by |U|, up to 3.4e38).
// Two edges take cpu_reference/gated.py's float64 recipe instead (rare, so the double path
// is out of line): g < -87, where expf(g) is subnormal in float32 and loses its relative
// precision; and a float32 result that is not finite or lies within the error bound of T's
// overflow threshold, where float32 rounding could make inf of a finite reference (or the
// reverse), and where the IEEE special cases (-inf * 0, 0 * inf) are decided.
#include "ep_float.cuh"
#include "ep_flat.cuh"

using namespace ep;

// below this, expf(g) is subnormal in float32 (expf(-87) = 1.6e-38 > FLT_MIN = 1.2e-38)
constexpr float SILU_TAIL = -87.0f;

// |v| below this: v and the exact product round to finite T alike (the float32 error is
// under 2^-20 relative, and limit * (1 + 2^-20) is below T's overflow threshold)
template <class T> struct SiluLimit;
// 2^128 (1 - 2^-19); float32 rounds to inf from 2^128 (1 - 2^-25)
template <> struct SiluLimit<float> { static constexpr float value = 0x1.ffffcp127f; };
// the largest float16; it rounds to inf from 65520
template <> struct SiluLimit<f16> { static constexpr float value = 65504.0f; };
// the largest bfloat16; it rounds to inf from 2^128 (1 - 2^-9)
template <> struct SiluLimit<bf16> { static constexpr float value = 0x1.fep127f; };

// cpu_reference/gated.py: (g * sigmoid(g)) * u in double, sigmoid from exp(-|g|), rounded once
template <class T>
__device__ __noinline__ T silu_mul_ref(T gt, T ut) {
    const double g = to_f64(gt);
    const double e = exp(-fabs(g));
    const double s = g >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    return round_from64<T>(g * s * to_f64(ut));
}

template <class T>
__device__ __forceinline__ T silu_mul_elem(T gt, T ut) {
    const float g = to_f32(gt);
    if (g < SILU_TAIL) return silu_mul_ref<T>(gt, ut);
    const float u = to_f32(ut);
    const float e = expf(-fabsf(g));
    const float s = (g >= 0.0f ? 1.0f : e) / (1.0f + e);
    const float v = g * (s * u);
    if (!(fabsf(v) < SiluLimit<T>::value)) return silu_mul_ref<T>(gt, ut);  // NaN too
    return round_from32<T>(v);
}

template <class T>
__device__ __forceinline__ void silu_mul(const T* g, const T* u, T* y, long long n) {
    auto f = [](T a, T b) { return silu_mul_elem<T>(a, b); };
    if (flat2(g, false, u, false, y, n, f)) return;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = f(g[i], u[i]);
}

#define EP_SILU_MUL(T, S)                                                                      \
extern "C" __global__ void silu_mul_##S(const T* g, const T* u, T* y, long long n) {          \
    silu_mul<T>(g, u, y, n);                                                                   \
}

EP_SILU_MUL(float, f32)
EP_SILU_MUL(f16, f16)
EP_SILU_MUL(bf16, bf16)
