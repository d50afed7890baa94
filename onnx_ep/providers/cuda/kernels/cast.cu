// Cast between float32 float16 bfloat16 float64 int64 int32 int8 uint8 bool, exactly as
// cpu_reference/cast.py does it with numpy on x86:
// - float targets are rounded once, to nearest even, from the exact source value
//   (bfloat16 through float64 and float32-rounded-to-odd, as numerics.round_from_float64);
//   int64 -> float32 rounds directly, int -> bfloat16 goes through float64 as the reference;
// - float -> int truncates toward zero with x86 cvtt semantics for the values ONNX leaves
//   undefined: NaN or out of range gives INT64_MIN (int64) / INT32_MIN (int32), and int8 /
//   uint8 take the low byte of the int32 conversion (numpy's C cast);
// - int -> narrower int wraps; anything -> bool is x != 0 (NaN is true).
// Symbols: cast_<src>_<dst>(const S* x, D* y, long long n).
#include "ep_float.cuh"

namespace ep {

template <class T> struct Kind { static constexpr int v = 0; };  // 0 int, 1 float, 2 bool
template <> struct Kind<float> { static constexpr int v = 1; };
template <> struct Kind<double> { static constexpr int v = 1; };
template <> struct Kind<f16> { static constexpr int v = 1; };
template <> struct Kind<bf16> { static constexpr int v = 1; };
template <> struct Kind<bool> { static constexpr int v = 2; };

template <class A, class B> struct Same { static constexpr bool v = false; };
template <class A> struct Same<A, A> { static constexpr bool v = true; };

__device__ __forceinline__ i32 x86_to_i32(double d) {
    return (d > -2147483649.0 && d < 2147483648.0) ? (i32)d : (i32)0x80000000u;
}
__device__ __forceinline__ i64 x86_to_i64(double d) {
    return (d >= -0x1p63 && d < 0x1p63) ? (i64)d : (i64)0x8000000000000000ull;
}

template <class D> __device__ __forceinline__ D float_to_int(double d) {
    if constexpr (Same<D, i64>::v) return x86_to_i64(d);
    else return (D)x86_to_i32(d);  // int32 itself, or the low byte for int8 / uint8
}

// float source to float target, rounded once
template <class D, class S> __device__ __forceinline__ D float_to_float(S x) {
    if constexpr (Same<D, double>::v) return to_f64(x);
    else if constexpr (Same<D, float>::v) {
        if constexpr (Same<S, double>::v) return round_from64<float>(x);
        else return to_f32(x);  // exact
    } else if constexpr (Same<S, float>::v) return round_from32<D>(x);
    else return round_from64<D>(to_f64(x));
}

// integer source to float target
template <class D, class S> __device__ __forceinline__ D int_to_float(S x) {
    if constexpr (Same<D, double>::v) return (double)x;
    else if constexpr (Same<D, float>::v) return (float)x;  // int64: one rounding, as cvtsi2ss
    else return round_from64<D>((double)x);  // exact for |x| < 2^53; beyond, the reference's way
}

template <class D, class S> __device__ __forceinline__ D convert(S x) {
    if constexpr (Same<D, S>::v) return x;
    else if constexpr (Kind<D>::v == 2) {
        if constexpr (Kind<S>::v == 1) return to_f64(x) != 0.0;
        else return x != 0;
    } else if constexpr (Kind<S>::v == 2) {
        if constexpr (Kind<D>::v == 1) return int_to_float<D>((int)x);
        else return (D)(x ? 1 : 0);
    } else if constexpr (Kind<S>::v == 1) {
        if constexpr (Kind<D>::v == 1) return float_to_float<D>(x);
        else return float_to_int<D>(to_f64(x));
    } else {
        if constexpr (Kind<D>::v == 1) return int_to_float<D>(x);
        else return (D)x;  // wraps
    }
}

template <class S, class D>
__device__ __forceinline__ void cast_kernel(const S* x, D* y, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)blockDim.x * gridDim.x)
        y[i] = convert<D>(x[i]);
}

}  // namespace ep

using namespace ep;

#define CAST(S, SS, D, DS) \
    extern "C" __global__ void cast_##SS##_##DS(const S* x, D* y, long long n) { cast_kernel<S, D>(x, y, n); }
#define CAST_FROM(S, SS) \
    CAST(S, SS, float, f32) CAST(S, SS, __half, f16) CAST(S, SS, __nv_bfloat16, bf16) \
    CAST(S, SS, double, f64) CAST(S, SS, long long, i64) CAST(S, SS, int, i32) \
    CAST(S, SS, signed char, i8) CAST(S, SS, unsigned char, u8) CAST(S, SS, bool, b8)

CAST_FROM(float, f32)
CAST_FROM(__half, f16)
CAST_FROM(__nv_bfloat16, bf16)
CAST_FROM(double, f64)
CAST_FROM(long long, i64)
CAST_FROM(int, i32)
CAST_FROM(signed char, i8)
CAST_FROM(unsigned char, u8)
CAST_FROM(bool, b8)
