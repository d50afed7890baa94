// Float conversions and NaN rules shared by elementwise.cu and cast.cu.
//
// Parity with cpu_reference (docs/PARITY.md) is byte for byte, NaNs included, so every
// conversion here handles NaN by bits: the GPU's cvt/arith instructions return the
// canonical NaN 0x7fffffff, while the reference runs on x86, whose conversions keep the
// sign and the top payload bits (and set the quiet bit), and whose arithmetic returns
// the *negative* "default NaN" (0xffc00000 / 0xfff8000000000000) when no operand is NaN.
// Rounding: float64 -> float32 / float16 directly to nearest even (numpy astype);
// float64 -> bfloat16 through float32 rounded to odd (numerics.to_float32_odd), then to
// nearest even, so the result is rounded once.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace ep {

typedef long long i64;
typedef unsigned long long u64;
typedef int i32;
typedef unsigned int u32;
typedef short i16;
typedef unsigned short u16;
typedef signed char i8;
typedef unsigned char u8;
typedef __half f16;
typedef __nv_bfloat16 bf16;

// ------------------------------------------------------------------ bits
__device__ __forceinline__ u64 bits64(double d) { return (u64)__double_as_longlong(d); }
__device__ __forceinline__ double from_bits64(u64 b) { return __longlong_as_double((i64)b); }
__device__ __forceinline__ u32 bits32(float f) { return __float_as_uint(f); }
__device__ __forceinline__ float from_bits32(u32 b) { return __uint_as_float(b); }
__device__ __forceinline__ u16 bits16(f16 h) { return __half_as_ushort(h); }
__device__ __forceinline__ u16 bits16(bf16 h) { return __bfloat16_as_ushort(h); }
__device__ __forceinline__ f16 f16_from_bits(u16 b) { return __ushort_as_half(b); }
__device__ __forceinline__ bf16 bf16_from_bits(u16 b) { return __ushort_as_bfloat16(b); }

__device__ __forceinline__ bool isnan16(f16 h) { return (bits16(h) & 0x7fffu) > 0x7c00u; }
__device__ __forceinline__ bool isnan16(bf16 h) { return (bits16(h) & 0x7fffu) > 0x7f80u; }

// the x86 default NaN: what an invalid operation on non-NaN operands returns
__device__ __forceinline__ double default_nan64() { return from_bits64(0xfff8000000000000ull); }
__device__ __forceinline__ float default_nan32() { return from_bits32(0xffc00000u); }
__device__ __forceinline__ double pos_nan64() { return from_bits64(0x7ff8000000000000ull); }
__device__ __forceinline__ double quiet64(double d) { return from_bits64(bits64(d) | 0x0008000000000000ull); }
__device__ __forceinline__ float quiet32(float f) { return from_bits32(bits32(f) | 0x00400000u); }

// ------------------------------------------------------------------ NaN conversions
// x86 cvtsd2ss / cvtss2sd / F16C keep the sign and the top payload bits and quiet the NaN
__device__ __forceinline__ float nan64_to_32(double d) {
    u64 b = bits64(d);
    return from_bits32((u32)(b >> 32 & 0x80000000u) | 0x7fc00000u | (u32)(b >> 29 & 0x3fffffu));
}
__device__ __forceinline__ double nan32_to_64(float f) {
    u32 b = bits32(f);
    return from_bits64((u64)(b & 0x80000000u) << 32 | 0x7ff8000000000000ull |
                       (u64)(b & 0x3fffffu) << 29);
}
__device__ __forceinline__ u16 nan32_to_16(float f) {
    u32 b = bits32(f);
    return (u16)((b >> 16 & 0x8000u) | 0x7e00u | (b >> 13 & 0x1ffu));
}
__device__ __forceinline__ u16 nan32_to_bf16(float f) {
    u32 b = bits32(f);
    return (u16)((b >> 16) | 0x0040u);
}
__device__ __forceinline__ float nan16_to_32(u16 h) {
    return from_bits32((u32)(h & 0x8000u) << 16 | 0x7fc00000u | (u32)(h & 0x1ffu) << 13);
}

// ------------------------------------------------------------------ widening (exact)
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(f16 x) {
    return isnan16(x) ? nan16_to_32(bits16(x)) : __half2float(x);
}
__device__ __forceinline__ float to_f32(bf16 x) { return from_bits32((u32)bits16(x) << 16); }

__device__ __forceinline__ double to_f64(double x) { return x; }
__device__ __forceinline__ double to_f64(float x) {
    return isnan(x) ? nan32_to_64(x) : (double)x;
}
__device__ __forceinline__ double to_f64(f16 x) { return to_f64(to_f32(x)); }
__device__ __forceinline__ double to_f64(bf16 x) { return to_f64(to_f32(x)); }

// ------------------------------------------------------------------ rounding once
// numerics.to_float32_odd: truncate toward zero, set the last bit when inexact
__device__ __forceinline__ float f32_odd(double d) {
    float f = __double2float_rz(d);
    if (isfinite(d) && (double)f != d) f = from_bits32(bits32(f) | 1u);
    return f;
}

template <class T> struct Round;
template <> struct Round<double> {
    static __device__ __forceinline__ double from64(double d) { return d; }
    static __device__ __forceinline__ double from32(float f) { return to_f64(f); }
};
template <> struct Round<float> {
    static __device__ __forceinline__ float from64(double d) {
        return isnan(d) ? nan64_to_32(d) : __double2float_rn(d);
    }
    static __device__ __forceinline__ float from32(float f) { return f; }
};
template <> struct Round<f16> {
    static __device__ __forceinline__ f16 from64(double d) {
        return isnan(d) ? f16_from_bits(nan32_to_16(nan64_to_32(d))) : __double2half(d);
    }
    static __device__ __forceinline__ f16 from32(float f) {
        return isnan(f) ? f16_from_bits(nan32_to_16(f)) : __float2half_rn(f);
    }
};
template <> struct Round<bf16> {
    static __device__ __forceinline__ bf16 from64(double d) {
        return isnan(d) ? bf16_from_bits(nan32_to_bf16(nan64_to_32(d)))
                        : __float2bfloat16_rn(f32_odd(d));
    }
    static __device__ __forceinline__ bf16 from32(float f) {
        return isnan(f) ? bf16_from_bits(nan32_to_bf16(f)) : __float2bfloat16_rn(f);
    }
};

template <class T> __device__ __forceinline__ T round_from64(double d) { return Round<T>::from64(d); }
template <class T> __device__ __forceinline__ T round_from32(float f) { return Round<T>::from32(f); }

// x86 NaN result of a binary operation: the first NaN operand (quieted), else default NaN
__device__ __forceinline__ double fix_nan2(double r, double a, double b) {
    if (!isnan(r)) return r;
    if (isnan(a)) return quiet64(a);
    if (isnan(b)) return quiet64(b);
    return default_nan64();
}
__device__ __forceinline__ float fix_nan2(float r, float a, float b) {
    if (!isnan(r)) return r;
    if (isnan(a)) return quiet32(a);
    if (isnan(b)) return quiet32(b);
    return default_nan32();
}

// float traits: is T a float format, and in which type the reference computes + - * /
template <class T> struct Traits { static constexpr bool is_float = false; typedef T compute; };
template <> struct Traits<double> { static constexpr bool is_float = true; typedef double compute; };
template <> struct Traits<float> { static constexpr bool is_float = true; typedef float compute; };
template <> struct Traits<f16> { static constexpr bool is_float = true; typedef float compute; };
template <> struct Traits<bf16> { static constexpr bool is_float = true; typedef float compute; };

__device__ __forceinline__ double widen(double x) { return x; }
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(f16 x) { return to_f32(x); }
__device__ __forceinline__ float widen(bf16 x) { return to_f32(x); }

}  // namespace ep
