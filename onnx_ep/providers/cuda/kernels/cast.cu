// Cast between every numeric type of cpu_reference/cast.py but string: float32 float16
// bfloat16 float64, int64 int32 int16 int8 uint64 uint32 uint16 uint8, bool, the float8s
// (e4m3fn e4m3fnuz e5m2 e5m2fnuz e8m0), float4e2m1 and int4 uint4 int2 uint2 (one element
// per byte, as ml_dtypes stores them; see ep_lowfloat.cuh), by the reference's rules
// (cpu_reference/formats.py):
// - float targets are rounded once, to nearest even, from the exact source value
//   (bfloat16 through float64 and float32-rounded-to-odd, as numerics.round_from_float64;
//   int64 / uint64 sources beyond 2^53 through float64 rounded to odd); int64 -> float32
//   rounds directly; narrow float targets round from the source's float64 value
//   (ep_lowfloat.cuh), ``saturate`` clamping |x| > max of the four float8s first;
//   float8e8m0 follows ``round_mode``;
// - float -> int4 / uint4 / int2 / uint2 rounds half to even and keeps the low bits (NaN,
//   inf and |x| >= 2^62 give 0);
// - float -> other ints truncates toward zero with x86 cvtt semantics for the values ONNX
//   leaves undefined: NaN or out of range gives INT64_MIN (int64) / INT32_MIN (int32);
//   int16, uint16, int8 and uint8 take the low bits of the int32 conversion, uint32 the
//   low 32 bits of the int64 conversion; uint64 is `x >= 2^63 ? cvtt(x - 2^63) ^ 2^63 :
//   cvtt(x)`;
// - int -> narrower int wraps; anything -> bool is x != 0 (NaN is true).
// Symbols: cast_<src>_<dst>(const S* x, D* y, long long n, int saturate, int round_mode),
// round_mode 0 up, 1 down, 2 nearest (float8e8m0 targets only).
#include "ep_float.cuh"
#include "ep_lowfloat.cuh"
#include "ep_flat.cuh"

namespace ep {

// 0 int, 1 float, 2 bool, 3 narrow float (byte), 4 sub-byte int
template <class T> struct Kind { static constexpr int v = 0; };
template <> struct Kind<float> { static constexpr int v = 1; };
template <> struct Kind<double> { static constexpr int v = 1; };
template <> struct Kind<f16> { static constexpr int v = 1; };
template <> struct Kind<bf16> { static constexpr int v = 1; };
template <> struct Kind<bool> { static constexpr int v = 2; };
template <> struct Kind<e4m3fn_t> { static constexpr int v = 3; };
template <> struct Kind<e4m3fnuz_t> { static constexpr int v = 3; };
template <> struct Kind<e5m2_t> { static constexpr int v = 3; };
template <> struct Kind<e5m2fnuz_t> { static constexpr int v = 3; };
template <> struct Kind<f4e2m1_t> { static constexpr int v = 3; };
template <> struct Kind<e8m0_t> { static constexpr int v = 3; };
template <> struct Kind<i4_t> { static constexpr int v = 4; };
template <> struct Kind<u4_t> { static constexpr int v = 4; };
template <> struct Kind<i2_t> { static constexpr int v = 4; };
template <> struct Kind<u2_t> { static constexpr int v = 4; };

template <class A, class B> struct Same { static constexpr bool v = false; };
template <class A> struct Same<A, A> { static constexpr bool v = true; };

__device__ __forceinline__ i32 x86_to_i32(double d) {
    return (d > -2147483649.0 && d < 2147483648.0) ? (i32)d : (i32)0x80000000u;
}
__device__ __forceinline__ i64 x86_to_i64(double d) {
    return (d >= -0x1p63 && d < 0x1p63) ? (i64)d : (i64)0x8000000000000000ull;
}

// float (as its exact double) to an integer type
template <class D> __device__ __forceinline__ D float_to_int(double d) {
    if constexpr (Same<D, i64>::v) return x86_to_i64(d);
    else if constexpr (Same<D, u64>::v)
        return d >= 0x1p63 ? (u64)x86_to_i64(d - 0x1p63) ^ 0x8000000000000000ull : (u64)x86_to_i64(d);
    else if constexpr (Same<D, u32>::v) return (u32)x86_to_i64(d);  // its low 32 bits
    else return (D)x86_to_i32(d);  // int32 itself, or its low bits
}

// a float rounded half to even, as a sub-byte int's source (formats.float_to_sub_byte_int)
__device__ __forceinline__ i64 rounded_int(double d) {
    double r = rint(d);
    return (isfinite(r) && fabs(r) < 0x1p62) ? (i64)r : 0;
}

// a 64-bit integer as float64 rounded to odd (formats.int_to_float64_odd): truncated, the
// last bit set when inexact, so a narrower rounding of it rounds the integer once
__device__ __forceinline__ double odd64(i64 x) {
    double d = __ll2double_rz(x);
    return (i64)d == x ? d : from_bits64(bits64(d) | 1ull);
}
__device__ __forceinline__ double odd64(u64 x) {
    double d = __ull2double_rz(x);
    return (u64)d == x ? d : from_bits64(bits64(d) | 1ull);
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

// the value the reference converts from (formats.source_value): float64 for floats
// (narrow ones decoded), 0 / 1 for bool, the integer itself (64-bit ones rounded to odd)
template <class S> __device__ __forceinline__ double as_double(S x) {
    if constexpr (Kind<S>::v == 1) return to_f64(x);
    else if constexpr (Kind<S>::v == 2) return x ? 1.0 : 0.0;
    else if constexpr (Same<S, i64>::v || Same<S, u64>::v) return odd64(x);
    else return (double)x;  // exact
}

// integer source to float target
template <class D, class S> __device__ __forceinline__ D int_to_float(S x) {
    if constexpr (Same<D, double>::v) return (double)x;
    else if constexpr (Same<D, float>::v) return (float)x;  // one rounding, as cvtsi2ss
    else return round_from64<D>(as_double(x));
}


template <class D, class S> __device__ __forceinline__ D convert(S x, int sat, int mode);

// narrow or sub-byte source: widen exactly, then convert as the reference does
template <class D, class S> __device__ __forceinline__ D from_byte_format(S x, int sat, int mode) {
    if constexpr (Kind<S>::v == 4) {
        int v = lowfloat::decode_int(x.b, SubInt<S>::bits, SubInt<S>::sign);
        if constexpr (SubInt<S>::sign) return convert<D, i8>((i8)v, sat, mode);
        else return convert<D, u8>((u8)v, sat, mode);
    } else if constexpr (Same<S, e8m0_t>::v) {
        return convert<D, double>(lowfloat::decode_e8m0(x.b), sat, mode);
    } else {
        return convert<D, double>(lowfloat::decode(Low<S>::f(), x.b), sat, mode);
    }
}

// any source to a narrow or sub-byte target
template <class D, class S> __device__ __forceinline__ D to_byte_format(S x, int sat, int mode) {
    D out;
    if constexpr (Kind<D>::v == 4) {
        i64 v;
        if constexpr (Kind<S>::v == 1) v = rounded_int(to_f64(x));
        else if constexpr (Kind<S>::v == 2) v = x ? 1 : 0;
        else v = (i64)x;
        out.b = lowfloat::encode_int(v, SubInt<D>::bits);
    } else if constexpr (Same<D, e8m0_t>::v) {
        out.b = lowfloat::encode_e8m0(as_double(x), sat != 0, mode);
    } else {
        out.b = lowfloat::encode(Low<D>::f(), as_double(x), Low<D>::float8 && sat != 0);
    }
    return out;
}

template <class D, class S> __device__ __forceinline__ D convert(S x, int sat, int mode) {
    if constexpr (Same<D, S>::v) return x;
    else if constexpr (Kind<S>::v >= 3) return from_byte_format<D>(x, sat, mode);
    else if constexpr (Kind<D>::v >= 3) return to_byte_format<D>(x, sat, mode);
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
__device__ __forceinline__ void cast_kernel(const S* x, D* y, i64 n, int sat, int mode) {
    // 16-byte vector loads and stores (ep_flat.cuh) for the standard types; the byte
    // formats keep the plain loop (their encoders would be inlined V * U times)
    if constexpr (Kind<S>::v < 3 && Kind<D>::v < 3) {
        auto f = [sat, mode](S v) { return convert<D, S>(v, sat, mode); };
        if (flat1(x, false, y, n, f)) return;
    }
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)blockDim.x * gridDim.x)
        y[i] = convert<D, S>(x[i], sat, mode);
}

}  // namespace ep

using namespace ep;

#define CAST(S, SS, D, DS) \
    extern "C" __global__ void cast_##SS##_##DS(const S* x, D* y, long long n, int sat, int mode) { \
        cast_kernel<S, D>(x, y, n, sat, mode); }
#define CAST_FROM(S, SS) \
    CAST(S, SS, float, f32) CAST(S, SS, __half, f16) CAST(S, SS, __nv_bfloat16, bf16) \
    CAST(S, SS, double, f64) CAST(S, SS, long long, i64) CAST(S, SS, int, i32) \
    CAST(S, SS, short, i16) CAST(S, SS, signed char, i8) \
    CAST(S, SS, unsigned long long, u64) CAST(S, SS, unsigned int, u32) \
    CAST(S, SS, unsigned short, u16) CAST(S, SS, unsigned char, u8) CAST(S, SS, bool, b8) \
    CAST(S, SS, e4m3fn_t, e4m3fn) CAST(S, SS, e4m3fnuz_t, e4m3fnuz) CAST(S, SS, e5m2_t, e5m2) \
    CAST(S, SS, e5m2fnuz_t, e5m2fnuz) CAST(S, SS, f4e2m1_t, f4e2m1) CAST(S, SS, e8m0_t, e8m0) \
    CAST(S, SS, i4_t, i4) CAST(S, SS, u4_t, u4) CAST(S, SS, i2_t, i2) CAST(S, SS, u2_t, u2)

CAST_FROM(float, f32)
CAST_FROM(__half, f16)
CAST_FROM(__nv_bfloat16, bf16)
CAST_FROM(double, f64)
CAST_FROM(long long, i64)
CAST_FROM(int, i32)
CAST_FROM(short, i16)
CAST_FROM(signed char, i8)
CAST_FROM(unsigned long long, u64)
CAST_FROM(unsigned int, u32)
CAST_FROM(unsigned short, u16)
CAST_FROM(unsigned char, u8)
CAST_FROM(bool, b8)
CAST_FROM(e4m3fn_t, e4m3fn)
CAST_FROM(e4m3fnuz_t, e4m3fnuz)
CAST_FROM(e5m2_t, e5m2)
CAST_FROM(e5m2fnuz_t, e5m2fnuz)
CAST_FROM(f4e2m1_t, f4e2m1)
CAST_FROM(e8m0_t, e8m0)
CAST_FROM(i4_t, i4)
CAST_FROM(u4_t, u4)
CAST_FROM(i2_t, i2)
CAST_FROM(u2_t, u2)
