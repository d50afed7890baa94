// Elementwise family: unary math and activations, broadcasting binary ops, Where.
//
// Symbols: <op>_<suffix> (suffix f32 f16 bf16 f64 i64 i32 i16 i8 u64 u32 u16 u8 b8), one
// template per op, instantiated by the macros at the end of this file.
//   unary:  (const T* x, Out* y, long long n, double p0, double p1)   p0/p1: attributes
//   binary: (const T* a, const T* b, Out* y, long long n, Bcast bc)
//   where:  (const bool* c, const T* x, const T* y, T* out, long long n, Bcast bc)
//   clip:   (const T* x, const T* lo, const T* hi, T* y, long long n, double lo, double hi)
//
// Numerics follow cpu_reference (docs/PARITY.md): float16/bfloat16/float32 transcendental
// functions and activations evaluate in float64 and round once; + - * / of float16 and
// bfloat16 compute in float32 and round once (exact: float32 holds > 2p+2 bits); float64
// in float64. NaN results follow x86/glibc (see ep_float.cuh), but a NaN's sign and
// payload are not part of the promise: the reference's depend on the host CPU's numpy SIMD
// paths (AVX-512 hosts give -NaN for log(-1), glibc +NaN). Compile with --fmad=false.
#include "ep_float.cuh"
#include "ep_flat.cuh"

#pragma nv_diag_suppress 186  // unsigned instantiations of the integer templates compare with 0

namespace ep {

struct Bcast {
    i64 ndim;           // 0: every input has the output's shape (flat index)
    i64 dims[6];        // output dims after collapsing
    i64 strides[3][6];  // element strides of each input (0 on broadcast dims)
};

__device__ __forceinline__ i64 grid_start() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 grid_step() { return (i64)blockDim.x * gridDim.x; }

template <int NIN>
__device__ __forceinline__ void offsets(const Bcast& bc, i64 i, i64 (&off)[NIN]) {
    if (bc.ndim == 0) {
#pragma unroll
        for (int k = 0; k < NIN; ++k) off[k] = i;
        return;
    }
#pragma unroll
    for (int k = 0; k < NIN; ++k) off[k] = 0;
    u64 rem = (u64)i;
#pragma unroll
    for (int d = 5; d >= 0; --d) {
        if (d < bc.ndim) {
            u64 dim = (u64)bc.dims[d];
            u64 q = rem / dim;
            i64 idx = (i64)(rem - q * dim);
#pragma unroll
            for (int k = 0; k < NIN; ++k) off[k] += idx * bc.strides[k][d];
            rem = q;
        }
    }
}

// The flat fast path (ep_flat.cuh) of a broadcasting launch: it applies when every operand
// is read at the output's flat index (ndim 0, or one collapsed dim of stride 1) or is one
// broadcast scalar (stride 0). ``scalar`` says which.
__device__ __forceinline__ bool flat_operand(const Bcast& bc, int k, bool& scalar) {
    scalar = bc.ndim == 1 && bc.strides[k][0] == 0;
    return bc.ndim == 0 || (bc.ndim == 1 && bc.strides[k][0] <= 1);
}
template <class Out, class A, class B, class F>
__device__ __forceinline__ bool flat_binary(const A* a, const B* b, Out* y, i64 n,
                                            const Bcast& bc, F f) {
    bool sa, sb;
    if (!flat_operand(bc, 0, sa) || !flat_operand(bc, 1, sb)) return false;
    return flat2(a, sa, b, sb, y, n, f);
}

// ================================================================== unary, float formats
// Each op is f(x, p0, p1) on float64, returning the NaN the reference returns:
// a NaN input propagates (quieted, sign kept) unless the op says otherwise; an invalid
// operation gives x86's default NaN (negative) except where glibc returns +NaN.
#define NAN_IN(x) if (isnan(x)) return quiet64(x)

__device__ __forceinline__ double nan_or(double r, double x) {
    if (!isnan(r)) return r;
    return isnan(x) ? quiet64(x) : default_nan64();
}
// numpy clip / maximum / minimum of float64: NaN propagates, ties give the bound
__device__ __forceinline__ double clip01(double v) {
    if (isnan(v)) return v;
    v = v > 0.0 ? v : 0.0;
    return v < 1.0 ? v : 1.0;
}

// ---- fdlibm erf / erfc, ported operation by operation from cpu_reference/numerics.py
__device__ __forceinline__ double horner(double t, const double* c, int n) {
    double acc = t * c[n - 1];
    acc += c[n - 2];
    for (int k = n - 3; k >= 0; --k) {
        acc *= t;
        acc += c[k];
    }
    return acc;
}

// coefficients as numerics.py gives them (bit patterns there, exact hex floats here)
__constant__ double PP[5] = {0x1.06eba8214db68p-3, -0x1.4cd7d691cb913p-2, -0x1.d2a51dbd7194fp-6, -0x1.7a291236668e4p-8, -0x1.8ead6120016acp-16};
__constant__ double QQ[6] = {0x1.0000000000000p+0, 0x1.97779cddadc09p-2, 0x1.0a54c5536cebap-4, 0x1.4d022c4d36b0fp-8, 0x1.15dc9221c1a10p-13, -0x1.09c4342a26120p-18};
__constant__ double PA[7] = {-0x1.359b8bef77538p-9, 0x1.a8d00ad92b34dp-2, -0x1.7d240fbb8c3f1p-2, 0x1.45fca805120e4p-2, -0x1.c63983d3e28ecp-4, 0x1.22a36599795ebp-5, -0x1.1bf380a96073fp-9};
__constant__ double QA[7] = {0x1.0000000000000p+0, 0x1.b3e6618eee323p-4, 0x1.14af092eb6f33p-1, 0x1.2635cd99fe9a7p-4, 0x1.02660e763351fp-3, 0x1.bedc26b51dd1cp-7, 0x1.88b545735151dp-7};
__constant__ double RA[8] = {-0x1.43412600d6435p-7, -0x1.63416e4ba7360p-1, -0x1.51e0441b0e726p+3, -0x1.f300ae4cba38dp+5, -0x1.44cb184282266p+7, -0x1.7135cebccabb2p+7, -0x1.4526557e4d2f2p+6, -0x1.3a0efc69ac25cp+3};
__constant__ double SA[9] = {0x1.0000000000000p+0, 0x1.3a6b9bd707687p+4, 0x1.1350c526ae721p+7, 0x1.b290dd58a1a71p+8, 0x1.42b1921ec2868p+9, 0x1.ad02157700314p+8, 0x1.b28a3ee48ae2cp+6, 0x1.a47ef8e484a93p+2, -0x1.eeff2ee749a62p-5};
__constant__ double RB[7] = {-0x1.4341239e86f4ap-7, -0x1.993ba70c285dep-1, -0x1.1c209555f995ap+4, -0x1.4145d43c5ed98p+7, -0x1.3ec881375f228p+9, -0x1.004616a2e5992p+10, -0x1.e384e9bdc383fp+8};
__constant__ double SB[8] = {0x1.0000000000000p+0, 0x1.e568b261d5190p+4, 0x1.45cae221b9f0ap+8, 0x1.802eb189d5118p+10, 0x1.8ffb7688c246ap+11, 0x1.3f219cedf3be6p+11, 0x1.da874e79fe763p+8, -0x1.670e242712d62p+4};
#define ERX 0x1.b0ac160000000p-1
#define EFX 0x1.06eba8214db69p-3
#define EFX8 0x1.06eba8214db69p+0
#define ERF_RB 0x1.6db6e00000000p+1   // ~2.857143
#define ERFC_RB 0x1.6db6d00000000p+1  // 1/0.35

__device__ __forceinline__ double erf_small_y(double x) {
    double z = x * x;
    return horner(z, PP, 5) / horner(z, QQ, 6);
}
__device__ __forceinline__ double erf_mid_ratio(double a) {
    double s = a - 1.0;
    return horner(s, PA, 7) / horner(s, QA, 7);
}
// a * erfc(a) for 1.25 <= a < 28
__device__ __forceinline__ double erf_tail_r(double a, double bound) {
    double s = 1.0 / (a * a);
    double ratio = a < bound ? horner(s, RA, 8) / horner(s, SA, 9)
                             : horner(s, RB, 7) / horner(s, SB, 8);
    double z = __longlong_as_double(__double_as_longlong(a) & (long long)0xFFFFFFFF00000000ull);
    return exp(-(z * z) - 0.5625) * exp((z - a) * (z + a) + ratio);
}
__device__ double erf64(double v) {
    double a = fabs(v);
    double out;
    if (isnan(v)) return quiet64(v);
    if (a < 0.84375) {
        if (a < 0x1p-28) {
            out = a < 0x1p-1022 ? 0.125 * (8.0 * a + EFX8 * a) : a + EFX * a;
        } else {
            out = a + a * erf_small_y(a);
        }
    } else if (a < 1.25) {
        out = ERX + erf_mid_ratio(a);
    } else if (a < 6.0) {
        out = 1.0 - erf_tail_r(a, ERF_RB) / a;
    } else {
        out = 1.0;
    }
    return copysign(out, v);
}
__device__ double erfc64(double x) {
    double a = fabs(x);
    if (isnan(x)) return quiet64(x);
    if (a < 0.84375) {
        double y = erf_small_y(x);
        return x < 0.25 ? 1.0 - (x + x * y) : 0.5 - (x * y + (x - 0.5));
    }
    if (a < 1.25) {
        double ratio = erf_mid_ratio(a);
        return x >= 0 ? (1.0 - ERX) - ratio : 1.0 + (ERX + ratio);
    }
    if (x >= 28.0) return 0.0;
    if (x <= -6.0) return 2.0;
    double q = erf_tail_r(a, ERFC_RB) / a;
    return x > 0 ? q : 2.0 - q;
}

// ---- the unary table (float64 bodies)
#define DEF_F64(NAME, BODY) \
    struct NAME { static __device__ __forceinline__ double f(double x, double p0, double p1) { BODY } };

DEF_F64(FAbs, return from_bits64(bits64(x) & 0x7fffffffffffffffull);)
DEF_F64(FNeg, return from_bits64(bits64(x) ^ 0x8000000000000000ull);)
DEF_F64(FFloor, NAN_IN(x); return floor(x);)
DEF_F64(FCeil, NAN_IN(x); return ceil(x);)
DEF_F64(FRound, NAN_IN(x); return rint(x);)  // halves to even
DEF_F64(FSqrt, NAN_IN(x); return nan_or(sqrt(x), x);)
DEF_F64(FReciprocal, NAN_IN(x); return 1.0 / x;)
DEF_F64(FSign, NAN_IN(x); return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0);)
DEF_F64(FExp, NAN_IN(x); return exp(x);)
DEF_F64(FLog, NAN_IN(x); return x < 0.0 ? pos_nan64() : log(x);)  // glibc: +NaN
DEF_F64(FSin, NAN_IN(x); return nan_or(sin(x), x);)
DEF_F64(FCos, NAN_IN(x); return nan_or(cos(x), x);)
DEF_F64(FTan, NAN_IN(x); return nan_or(tan(x), x);)
DEF_F64(FAsin, NAN_IN(x); return fabs(x) > 1.0 ? pos_nan64() : asin(x);)
DEF_F64(FAcos, NAN_IN(x); return fabs(x) > 1.0 ? pos_nan64() : acos(x);)
DEF_F64(FAtan, NAN_IN(x); return atan(x);)
DEF_F64(FSinh, NAN_IN(x); return sinh(x);)
DEF_F64(FCosh, NAN_IN(x); return cosh(x);)
// numpy's float64 tanh drops the sign of a NaN
DEF_F64(FTanh, if (isnan(x)) return from_bits64(bits64(quiet64(x)) & 0x7fffffffffffffffull);
        return tanh(x);)
DEF_F64(FErf, return erf64(x);)
// activation.py: e = exp(-|x|); x >= 0 ? 1/(1+e) : e/(1+e)  (a NaN comes out negative)
DEF_F64(FSigmoid, if (isnan(x)) return from_bits64(bits64(quiet64(x)) | 0x8000000000000000ull);
        double e = exp(-fabs(x));
        return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);)
DEF_F64(FRelu, NAN_IN(x); return x > 0.0 ? x : 0.0;)
// float16: the reference's np.maximum(x, 0) runs numpy's half loop
// (x >= 0 || isnan(x)) ? x : 0, so Relu(-0.0) is -0.0 (float32/bfloat16/float64 give +0.0)
DEF_F64(FReluHalf, NAN_IN(x); return x >= 0.0 ? x : 0.0;)
DEF_F64(FLeakyRelu, NAN_IN(x); return x < 0.0 ? x * p0 : x;)
DEF_F64(FElu, NAN_IN(x); return x < 0.0 ? p0 * expm1(x) : x;)
DEF_F64(FSelu, NAN_IN(x); return p1 * (x <= 0.0 ? p0 * expm1(x) : x);)  // p0 alpha, p1 gamma
// np.logaddexp(0.0, x)
DEF_F64(FSoftplus, NAN_IN(x);
        if (x == 0.0) return 0.0 + 0.693147180559945309417232121458176568;
        double tmp = 0.0 - x;
        return tmp > 0.0 ? 0.0 + log1p(exp(-tmp)) : x + log1p(exp(tmp));)
DEF_F64(FHardSigmoid, NAN_IN(x); return clip01(p0 * x + p1);)  // p0 alpha, p1 beta
DEF_F64(FHardSwish, NAN_IN(x); return nan_or(x * clip01(x / 6.0 + 0.5), x);)
// 0.5 * x * erfc(-x / sqrt(2))
DEF_F64(FGelu, NAN_IN(x); return nan_or(0.5 * x * erfc64(-x / 1.4142135623730951), x);)
// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))); x*x*x is x**3 correctly
// rounded for inputs narrower than float64 (x*x is exact); numpy's x**3 (glibc pow) is
// off by one float64 ulp in ~0.2% of cases, which did not change a float32 result in 2e5
// samples (the "float64, rounded once" recipe of docs/PARITY.md, not a bit-exact libm)
DEF_F64(FGeluTanh, NAN_IN(x);
        double inner = sqrt(2.0 / 3.141592653589793) * (x + 0.044715 * (x * x * x));
        return nan_or(0.5 * x * (1.0 + tanh(inner)), x);)

DEF_F64(FAsinh, NAN_IN(x); return asinh(x);)
DEF_F64(FAcosh, NAN_IN(x); return nan_or(acosh(x), x);)
DEF_F64(FAtanh, NAN_IN(x); return nan_or(atanh(x), x);)
// activation.py, each in float64 as written there; np.maximum / np.minimum of float64
// propagate NaN and give the second operand on ties
DEF_F64(FSoftsign, NAN_IN(x); return nan_or(x / (1.0 + fabs(x)), x);)
DEF_F64(FThresholdedRelu, return x > p0 ? x : 0.0;)  // np.where(x > alpha, x, 0): NaN -> 0
// np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)): NaN -> 0
DEF_F64(FShrink, return x < -p0 ? x + p1 : (x > p0 ? x - p1 : 0.0);)  // p0 lambd, p1 bias
// np.maximum(x, 0) + np.minimum(0, alpha * expm1(x / alpha))
DEF_F64(FCelu, NAN_IN(x);
        double m = p0 * expm1(x / p0);
        double hi = x > 0.0 ? x : 0.0;
        double lo = isnan(m) ? m : (0.0 < m ? 0.0 : m);
        return nan_or(hi + lo, x);)
DEF_F64(FMish, NAN_IN(x); return nan_or(x * tanh(FSoftplus::f(x, 0.0, 0.0)), x);)
DEF_F64(FSwish, NAN_IN(x); return nan_or(x * FSigmoid::f(p0 * x, 0.0, 0.0), x);)  // p0 alpha
// Mean's last step: the sum divided by the input count p0 (already rounded to T), rounded
// once: the correctly rounded division in T that the reference's np.divide is
DEF_F64(FDivBy, NAN_IN(x); return x / p0;)

// not inlined: the flat path calls it V * U times per step, and libm bodies are large
template <class T, class Op>
__device__ __noinline__ T unary_elem(T x, double p0, double p1) {
    return round_from64<T>(Op::f(to_f64(x), p0, p1));
}
template <class T, class Op>
__device__ __forceinline__ void unary_float(const T* x, T* y, i64 n, double p0, double p1) {
    auto f = [p0, p1](T v) { return unary_elem<T, Op>(v, p0, p1); };
    if (flat1(x, false, y, n, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) y[i] = f(x[i]);
}

template <class T>
__device__ __forceinline__ void isnan_kernel(const T* x, bool* y, i64 n) {
    auto f = [](T v) { return (bool)isnan(to_f64(v)); };
    if (flat1(x, false, y, n, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) y[i] = f(x[i]);
}

// np.isinf(x) & ((x > 0) & detect_positive | (x < 0) & detect_negative)
template <class T>
__device__ __forceinline__ void isinf_kernel(const T* x, bool* y, i64 n, double pos, double neg) {
    for (i64 i = grid_start(); i < n; i += grid_step()) {
        double v = to_f64(x[i]);
        y[i] = isinf(v) && (v > 0.0 ? pos != 0.0 : neg != 0.0);
    }
}

// ================================================================== unary, integers
// the unsigned type wrapping arithmetic on T runs in: 16-bit operands get u32, because
// u16 * u16 promotes to (signed) int and can overflow it; truncating back to T keeps the
// low bits, which is two's complement wrapping
template <class T> struct Unsigned;
template <> struct Unsigned<i64> { typedef u64 type; };
template <> struct Unsigned<u64> { typedef u64 type; };
template <> struct Unsigned<i32> { typedef u32 type; };
template <> struct Unsigned<u32> { typedef u32 type; };
template <> struct Unsigned<i16> { typedef u32 type; };
template <> struct Unsigned<u16> { typedef u32 type; };
template <> struct Unsigned<i8> { typedef u8 type; };
template <> struct Unsigned<u8> { typedef u8 type; };

struct IAbs { template <class T> static __device__ T f(T x) {
    typedef typename Unsigned<T>::type U;
    return x < 0 ? (T)(U)((U)0 - (U)x) : x; } };  // abs(min) wraps to min, as numpy
struct INeg { template <class T> static __device__ T f(T x) {
    typedef typename Unsigned<T>::type U;
    return (T)(U)((U)0 - (U)x); } };
struct ISign { template <class T> static __device__ T f(T x) { return (T)((x > 0) - (x < 0)); } };
struct IRelu { template <class T> static __device__ T f(T x) { return x > 0 ? x : (T)0; } };

template <class T, class Op>
__device__ __forceinline__ void unary_int(const T* x, T* y, i64 n) {
    auto f = [](T v) { return Op::template f<T>(v); };
    if (flat1(x, false, y, n, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) y[i] = f(x[i]);
}

// ================================================================== binary
// float formats: Cmp is the compute type (float for f16/bf16/f32, double for f64)
struct BAdd { template <class C> static __device__ C f(C a, C b) { return fix_nan2(a + b, a, b); } };
struct BSub { template <class C> static __device__ C f(C a, C b) { return fix_nan2(a - b, a, b); } };
struct BMul { template <class C> static __device__ C f(C a, C b) { return fix_nan2(a * b, a, b); } };
struct BDiv { template <class C> static __device__ C f(C a, C b) { return fix_nan2(a / b, a, b); } };
// numpy's npy_remainder (Python %): fmod, then moved to the divisor's sign
struct BMod { template <class C> static __device__ C f(C a, C b) {
    C mod = fmod(a, b);
    if (b != (C)0) {
        if (mod != (C)0) {
            if ((b < (C)0) != (mod < (C)0)) mod += b;
        } else {
            mod = copysign((C)0, b);
        }
    }
    return fix_nan2(mod, a, b); } };
struct BFmod { template <class C> static __device__ C f(C a, C b) { return fix_nan2((C)fmod(a, b), a, b); } };
// np.maximum / np.minimum of float32 and float64: NaN propagates (first operand first), ties give b
struct BMax { template <class C> static __device__ C f(C a, C b) {
    if (isnan(a)) return fix_nan2(a, a, b);
    if (isnan(b)) return fix_nan2(b, a, b);
    return a > b ? a : b; } };
struct BMin { template <class C> static __device__ C f(C a, C b) {
    if (isnan(a)) return fix_nan2(a, a, b);
    if (isnan(b)) return fix_nan2(b, a, b);
    return a < b ? a : b; } };

// exact widening to the compute type C (NaN payloads kept) and rounding once back
template <class C> struct Widen;
template <> struct Widen<float> {
    template <class T> static __device__ __forceinline__ float f(T x) { return to_f32(x); } };
template <> struct Widen<double> {
    template <class T> static __device__ __forceinline__ double f(T x) { return to_f64(x); } };
template <class C, class T> __device__ __forceinline__ C widen_to(T x) { return Widen<C>::f(x); }
template <class T> __device__ __forceinline__ T round_from(float r) { return round_from32<T>(r); }
template <class T> __device__ __forceinline__ T round_from(double r) { return round_from64<T>(r); }

// ops with a loop or a libm call inside: called, not inlined V * U times by the flat path
template <class Op> struct Heavy { static constexpr bool v = false; };
template <> struct Heavy<BMod> { static constexpr bool v = true; };
template <> struct Heavy<BFmod> { static constexpr bool v = true; };

template <class T, class Op, class C>
__device__ __forceinline__ T binary_elem(T a, T b) {
    return round_from<T>(Op::template f<C>(widen_to<C>(a), widen_to<C>(b)));
}
template <class T, class Op, class C>
__device__ __noinline__ T binary_elem_call(T a, T b) { return binary_elem<T, Op, C>(a, b); }

template <class T, class Op, class C>
__device__ __forceinline__ void binary_float(const T* a, const T* b, T* y, i64 n, const Bcast& bc) {
    auto f = [](T u, T v) {
        if constexpr (Heavy<Op>::v) return binary_elem_call<T, Op, C>(u, v);
        else return binary_elem<T, Op, C>(u, v);
    };
    if (flat_binary(a, b, y, n, bc, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) {
        i64 off[2];
        offsets<2>(bc, i, off);
        y[i] = f(a[off[0]], b[off[1]]);
    }
}

// numpy float16 maximum / minimum: (a >= b || isnan(a)) ? a : b  (ties give a)
template <bool MAX>
__device__ __forceinline__ void minmax_f16(const f16* a, const f16* b, f16* y, i64 n, const Bcast& bc) {
    auto f = [](f16 x, f16 z) {
        float fx = to_f32(x), fz = to_f32(z);
        bool take_a = isnan(fx) || (MAX ? fx >= fz : fx <= fz);
        return take_a ? x : z;
    };
    if (flat_binary(a, b, y, n, bc, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) {
        i64 off[2];
        offsets<2>(bc, i, off);
        y[i] = f(a[off[0]], b[off[1]]);
    }
}

// Pow of floats: float64 pow rounded once; x**2 as x*x (exact for narrow inputs)
__device__ __forceinline__ double pow64(double a, double b) {
    double r = b == 2.0 ? a * a : pow(a, b);
    if (!isnan(r)) return r;
    return isnan(a) ? quiet64(a) : (isnan(b) ? quiet64(b) : default_nan64());
}
template <class T>
__device__ __noinline__ T pow_elem(T a, T b) { return round_from64<T>(pow64(to_f64(a), to_f64(b))); }
template <class T>
__device__ __forceinline__ void pow_float(const T* a, const T* b, T* y, i64 n, const Bcast& bc) {
    auto f = [](T u, T v) { return pow_elem<T>(u, v); };
    if (flat_binary(a, b, y, n, bc, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) {
        i64 off[2];
        offsets<2>(bc, i, off);
        y[i] = f(a[off[0]], b[off[1]]);
    }
}

// integers: wrap as two's complement; a zero divisor gives 0 (the reference raises)
struct IAdd { template <class T> static __device__ T f(T a, T b) {
    typedef typename Unsigned<T>::type U; return (T)(U)((U)a + (U)b); } };
struct ISub { template <class T> static __device__ T f(T a, T b) {
    typedef typename Unsigned<T>::type U; return (T)(U)((U)a - (U)b); } };
struct IMul { template <class T> static __device__ T f(T a, T b) {
    typedef typename Unsigned<T>::type U; return (T)(U)((U)a * (U)b); } };
struct IDiv { template <class T> static __device__ T f(T a, T b) {  // truncates toward zero
    typedef typename Unsigned<T>::type U;
    if (b == 0) return 0;
    if ((T)-1 < 0 && b == (T)-1) return (T)(U)((U)0 - (U)a);
    return a / b; } };
struct IFmod { template <class T> static __device__ T f(T a, T b) {  // sign of the dividend
    if (b == 0 || ((T)-1 < 0 && b == (T)-1)) return 0;
    return a % b; } };
struct IMod { template <class T> static __device__ T f(T a, T b) {  // sign of the divisor
    if (b == 0 || ((T)-1 < 0 && b == (T)-1)) return 0;
    T r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r; } };
struct IMax { template <class T> static __device__ T f(T a, T b) { return a > b ? a : b; } };
struct IMin { template <class T> static __device__ T f(T a, T b) { return a < b ? a : b; } };
// cpu_reference Pow of integers: int64 power by squaring for b >= 0 (wrapping); for b < 0
// trunc(float64 pow) through nan_to_num and astype(int64): 0 -> INT64_MIN, +-1 -> +-1, else 0
struct IPow { template <class T> static __device__ T f(T a, T b) {
    i64 x = (i64)a, e = (i64)b;
    if (e < 0) {
        if (x == 0) return (T)(u64)0x8000000000000000ull;
        if (x == 1) return (T)1;
        // the reference's float64 exponent: odd only while exact (|e| <= 2^53)
        if (x == -1) return (T)((e & 1) && e >= -(1ll << 53) ? -1 : 1);
        return (T)0;
    }
    u64 base = (u64)x, acc = 1;
    while (e) {
        if (e & 1) acc *= base;
        base *= base;
        e >>= 1;
    }
    return (T)acc; } };

template <> struct Heavy<IPow> { static constexpr bool v = true; };
template <class T, class Op>
__device__ __noinline__ T binary_int_call(T a, T b) { return Op::template f<T>(a, b); }
template <class T, class Op>
__device__ __forceinline__ void binary_int(const T* a, const T* b, T* y, i64 n, const Bcast& bc) {
    auto f = [](T u, T v) {
        if constexpr (Heavy<Op>::v) return binary_int_call<T, Op>(u, v);
        else return Op::template f<T>(u, v);
    };
    if (flat_binary(a, b, y, n, bc, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) {
        i64 off[2];
        offsets<2>(bc, i, off);
        y[i] = f(a[off[0]], b[off[1]]);
    }
}

// numpy's bitwise_and / or / xor / invert and npy_lshift / npy_rshift: a shift count that
// is negative or >= the width gives 0, or -1 for a right shift of a negative value
struct IBitAnd { template <class T> static __device__ T f(T a, T b) { return (T)(a & b); } };
struct IBitOr { template <class T> static __device__ T f(T a, T b) { return (T)(a | b); } };
struct IBitXor { template <class T> static __device__ T f(T a, T b) { return (T)(a ^ b); } };
struct IInvert { template <class T> static __device__ T f(T x) { return (T)~x; } };
struct IShl { template <class T> static __device__ T f(T a, T b) {
    typedef typename Unsigned<T>::type U;
    if ((u64)(i64)b >= 8 * sizeof(T)) return (T)0;
    return (T)(U)((U)a << (int)b); } };
struct IShr { template <class T> static __device__ T f(T a, T b) {
    if ((u64)(i64)b >= 8 * sizeof(T)) return a < 0 ? (T)-1 : (T)0;
    return (T)(a >> (int)b); } };  // arithmetic for signed T
// PRelu: x < 0 ? x * slope : x; floats in float64, rounded once (the product of two
// narrower floats is exact there); integers wrap
struct BPRelu { template <class C> static __device__ C f(C a, C b) {
    return a < (C)0 ? fix_nan2(a * b, a, b) : a; } };
struct IPRelu { template <class T> static __device__ T f(T a, T b) {
    return a < 0 ? IMul::f<T>(a, b) : a; } };

// Pow with an exponent of another dtype: cpu_reference widens both to float64 (an int64
// exponent rounds to nearest there, as (double) does) and rounds the result once
template <class E> __device__ __forceinline__ double as_f64(E v) { return (double)v; }
__device__ __forceinline__ double as_f64(float v) { return to_f64(v); }
__device__ __forceinline__ double as_f64(f16 v) { return to_f64(v); }
__device__ __forceinline__ double as_f64(bf16 v) { return to_f64(v); }
template <class T, class E>
__device__ __forceinline__ void pow_mixed(const T* a, const E* b, T* y, i64 n, const Bcast& bc) {
    for (i64 i = grid_start(); i < n; i += grid_step()) {
        i64 off[2];
        offsets<2>(bc, i, off);
        y[i] = round_from64<T>(pow64(to_f64(a[off[0]]), as_f64(b[off[1]])));
    }
}

// comparisons and logic: bool output; floats compared exactly in their compute type
struct CEq { template <class C> static __device__ bool f(C a, C b) { return a == b; } };
struct CLt { template <class C> static __device__ bool f(C a, C b) { return a < b; } };
struct CLe { template <class C> static __device__ bool f(C a, C b) { return a <= b; } };
struct CGt { template <class C> static __device__ bool f(C a, C b) { return a > b; } };
struct CGe { template <class C> static __device__ bool f(C a, C b) { return a >= b; } };
struct LAnd { template <class C> static __device__ bool f(C a, C b) { return a && b; } };
struct LOr { template <class C> static __device__ bool f(C a, C b) { return a || b; } };
struct LXor { template <class C> static __device__ bool f(C a, C b) { return a != b; } };

__device__ __forceinline__ float cmp_value(f16 x) { return to_f32(x); }
__device__ __forceinline__ float cmp_value(bf16 x) { return to_f32(x); }
template <class T> __device__ __forceinline__ T cmp_value(T x) { return x; }

template <class T, class Op>
__device__ __forceinline__ void compare(const T* a, const T* b, bool* y, i64 n, const Bcast& bc) {
    auto f = [](T u, T v) { return (bool)Op::f(cmp_value(u), cmp_value(v)); };
    if (flat_binary(a, b, y, n, bc, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) {
        i64 off[2];
        offsets<2>(bc, i, off);
        y[i] = f(a[off[0]], b[off[1]]);
    }
}

// ================================================================== Clip
// cpu_reference: floats widened to float64, np.maximum(y, lo) then np.minimum(y, hi),
// rounded once (exact: the result is x or a bound, both representable). np.maximum /
// np.minimum propagate a NaN from either side (a NaN bound makes every output NaN) and give
// the bound on ties. Bounds: device scalars of x's dtype (opset >= 11; null = no bound), or
// lo/hi (attributes before opset 11, already rounded to x's dtype on the host; +-inf when
// absent, which leaves every value, NaN included, unchanged).
template <class T>
__device__ __forceinline__ void clip_float(const T* x, const T* lo_p, const T* hi_p, T* y, i64 n,
                                           double lo, double hi) {
    if (lo_p) lo = to_f64(*lo_p);
    if (hi_p) hi = to_f64(*hi_p);
    auto f = [lo, hi](T u) {
        double v = to_f64(u);
        if (!isnan(v)) v = isnan(lo) ? lo : (v > lo ? v : lo);
        if (!isnan(v)) v = isnan(hi) ? hi : (v < hi ? v : hi);
        return round_from64<T>(v);
    };
    if (flat1(x, false, y, n, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) y[i] = f(x[i]);
}
// integers: bounds are device scalars of x's dtype (Clip accepts integers from opset 12)
template <class T>
__device__ __forceinline__ void clip_int(const T* x, const T* lo_p, const T* hi_p, T* y, i64 n) {
    const bool has_lo = lo_p != nullptr, has_hi = hi_p != nullptr;
    const T lo = has_lo ? *lo_p : (T)0, hi = has_hi ? *hi_p : (T)0;
    auto f = [=](T v) {
        if (has_lo && v < lo) v = lo;
        if (has_hi && v > hi) v = hi;
        return v;
    };
    if (flat1(x, false, y, n, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) y[i] = f(x[i]);
}

// ================================================================== Where (data movement)
template <class S>
__device__ __forceinline__ void where_kernel(const bool* c, const S* x, const S* z, S* y, i64 n,
                                             const Bcast& bc) {
    auto f = [](bool cv, S u, S v) { return cv ? u : v; };
    bool sc, sx, sz;
    if (flat_operand(bc, 0, sc) && flat_operand(bc, 1, sx) && flat_operand(bc, 2, sz) &&
        flat3(c, sc, x, sx, z, sz, y, n, f))
        return;
    for (i64 i = grid_start(); i < n; i += grid_step()) {
        i64 off[3];
        offsets<3>(bc, i, off);
        y[i] = f(c[off[0]], x[off[1]], z[off[2]]);
    }
}

}  // namespace ep

using namespace ep;

// ================================================================== instantiation
#define UNARY_F(NAME, OP, T, SFX) \
    extern "C" __global__ void NAME##_##SFX(const T* x, T* y, long long n, double p0, double p1) { \
        unary_float<T, OP>(x, y, n, p0, p1); }
#define UNARY_F4(NAME, OP) \
    UNARY_F(NAME, OP, float, f32) UNARY_F(NAME, OP, __half, f16) \
    UNARY_F(NAME, OP, __nv_bfloat16, bf16) UNARY_F(NAME, OP, double, f64)

UNARY_F4(abs, FAbs)
UNARY_F4(neg, FNeg)
UNARY_F4(floor, FFloor)
UNARY_F4(ceil, FCeil)
UNARY_F4(round, FRound)
UNARY_F4(sqrt, FSqrt)
UNARY_F4(reciprocal, FReciprocal)
UNARY_F4(sign, FSign)
UNARY_F4(exp, FExp)
UNARY_F4(log, FLog)
UNARY_F4(sin, FSin)
UNARY_F4(cos, FCos)
UNARY_F4(tan, FTan)
UNARY_F4(asin, FAsin)
UNARY_F4(acos, FAcos)
UNARY_F4(atan, FAtan)
UNARY_F4(sinh, FSinh)
UNARY_F4(cosh, FCosh)
UNARY_F4(tanh, FTanh)
UNARY_F4(erf, FErf)
UNARY_F4(sigmoid, FSigmoid)
UNARY_F(relu, FRelu, float, f32) UNARY_F(relu, FReluHalf, __half, f16)
UNARY_F(relu, FRelu, __nv_bfloat16, bf16) UNARY_F(relu, FRelu, double, f64)
UNARY_F4(leakyrelu, FLeakyRelu)
UNARY_F4(elu, FElu)
UNARY_F4(selu, FSelu)
UNARY_F4(softplus, FSoftplus)
UNARY_F4(hardsigmoid, FHardSigmoid)
UNARY_F4(hardswish, FHardSwish)
UNARY_F4(gelu, FGelu)
UNARY_F4(gelu_tanh, FGeluTanh)

#define ISNAN(T, SFX) \
    extern "C" __global__ void isnan_##SFX(const T* x, bool* y, long long n, double, double) { \
        isnan_kernel<T>(x, y, n); }
ISNAN(float, f32) ISNAN(__half, f16) ISNAN(__nv_bfloat16, bf16) ISNAN(double, f64)

extern "C" __global__ void not_b8(const bool* x, bool* y, long long n, double, double) {
    auto f = [](bool v) { return !v; };
    if (flat1(x, false, y, n, f)) return;
    for (i64 i = grid_start(); i < n; i += grid_step()) y[i] = f(x[i]);
}

#define UNARY_I(NAME, OP, T, SFX) \
    extern "C" __global__ void NAME##_##SFX(const T* x, T* y, long long n, double, double) { \
        unary_int<T, OP>(x, y, n); }
#define UNARY_SI(NAME, OP) \
    UNARY_I(NAME, OP, long long, i64) UNARY_I(NAME, OP, int, i32) \
    UNARY_I(NAME, OP, short, i16) UNARY_I(NAME, OP, signed char, i8)
#define UNARY_UI(NAME, OP) \
    UNARY_I(NAME, OP, unsigned long long, u64) UNARY_I(NAME, OP, unsigned int, u32) \
    UNARY_I(NAME, OP, unsigned short, u16) UNARY_I(NAME, OP, unsigned char, u8)
UNARY_SI(abs, IAbs) UNARY_UI(abs, IAbs)
UNARY_SI(neg, INeg)
UNARY_SI(sign, ISign) UNARY_UI(sign, ISign)
UNARY_SI(relu, IRelu)

// binary arithmetic
#define BIN_F(NAME, OP, T, SFX, C) \
    extern "C" __global__ void NAME##_##SFX(const T* a, const T* b, T* y, long long n, Bcast bc) { \
        binary_float<T, OP, C>(a, b, y, n, bc); }
#define BIN_I(NAME, OP, T, SFX) \
    extern "C" __global__ void NAME##_##SFX(const T* a, const T* b, T* y, long long n, Bcast bc) { \
        binary_int<T, OP>(a, b, y, n, bc); }
#define BIN_INTS(NAME, OP) \
    BIN_I(NAME, OP, long long, i64) BIN_I(NAME, OP, int, i32) \
    BIN_I(NAME, OP, short, i16) BIN_I(NAME, OP, signed char, i8) \
    BIN_I(NAME, OP, unsigned long long, u64) BIN_I(NAME, OP, unsigned int, u32) \
    BIN_I(NAME, OP, unsigned short, u16) BIN_I(NAME, OP, unsigned char, u8)
// float16 / float32 in float32 (numpy's loops), bfloat16 / float64 in float64 (the
// reference widens bfloat16 to float64); for + - * / both round to the same value
#define BIN_FLOATS(NAME, OP) \
    BIN_F(NAME, OP, float, f32, float) BIN_F(NAME, OP, __half, f16, float) \
    BIN_F(NAME, OP, __nv_bfloat16, bf16, double) BIN_F(NAME, OP, double, f64, double)
// + - * / of bfloat16 in float32 too: the float32 result, rounded to bfloat16, is the
// reference's float64 result rounded once (float32 has 24 >= 2 * 8 + 2 bits, and the same
// exponent range; checked against cpu_reference on 4.3e8 operand pairs per op, every
// bfloat16 against ~3,300 others both ways, subnormals, infinities and NaNs included)
#define BIN_ARITH(NAME, OP) \
    BIN_F(NAME, OP, float, f32, float) BIN_F(NAME, OP, __half, f16, float) \
    BIN_F(NAME, OP, __nv_bfloat16, bf16, float) BIN_F(NAME, OP, double, f64, double)

BIN_ARITH(add, BAdd) BIN_INTS(add, IAdd)
BIN_ARITH(sub, BSub) BIN_INTS(sub, ISub)
BIN_ARITH(mul, BMul) BIN_INTS(mul, IMul)
BIN_ARITH(div, BDiv) BIN_INTS(div, IDiv)
BIN_FLOATS(mod, BMod) BIN_INTS(mod, IMod)
BIN_FLOATS(fmod, BFmod) BIN_INTS(fmod, IFmod)
BIN_INTS(pow, IPow)
BIN_F(max, BMax, float, f32, float) BIN_F(max, BMax, __nv_bfloat16, bf16, double)
BIN_F(max, BMax, double, f64, double) BIN_INTS(max, IMax)
BIN_F(min, BMin, float, f32, float) BIN_F(min, BMin, __nv_bfloat16, bf16, double)
BIN_F(min, BMin, double, f64, double) BIN_INTS(min, IMin)

extern "C" __global__ void max_f16(const __half* a, const __half* b, __half* y, long long n, Bcast bc) {
    minmax_f16<true>(a, b, y, n, bc);
}
extern "C" __global__ void min_f16(const __half* a, const __half* b, __half* y, long long n, Bcast bc) {
    minmax_f16<false>(a, b, y, n, bc);
}

#define POW_F(T, SFX) \
    extern "C" __global__ void pow_##SFX(const T* a, const T* b, T* y, long long n, Bcast bc) { \
        pow_float<T>(a, b, y, n, bc); }
POW_F(float, f32) POW_F(__half, f16) POW_F(__nv_bfloat16, bf16) POW_F(double, f64)

// comparisons and logic
#define CMP(NAME, OP, T, SFX) \
    extern "C" __global__ void NAME##_##SFX(const T* a, const T* b, bool* y, long long n, Bcast bc) { \
        compare<T, OP>(a, b, y, n, bc); }
#define CMP_NUM(NAME, OP) \
    CMP(NAME, OP, float, f32) CMP(NAME, OP, __half, f16) CMP(NAME, OP, __nv_bfloat16, bf16) \
    CMP(NAME, OP, double, f64) CMP(NAME, OP, long long, i64) CMP(NAME, OP, int, i32) \
    CMP(NAME, OP, short, i16) CMP(NAME, OP, signed char, i8) \
    CMP(NAME, OP, unsigned long long, u64) CMP(NAME, OP, unsigned int, u32) \
    CMP(NAME, OP, unsigned short, u16) CMP(NAME, OP, unsigned char, u8)
CMP_NUM(equal, CEq) CMP(equal, CEq, bool, b8)
CMP_NUM(less, CLt)
CMP_NUM(less_equal, CLe)
CMP_NUM(greater, CGt)
CMP_NUM(greater_equal, CGe)
CMP(and, LAnd, bool, b8)
CMP(or, LOr, bool, b8)
CMP(xor, LXor, bool, b8)

// Clip: (x, lo or null, hi or null, y, n, lo attribute, hi attribute)
#define CLIP_F(T, SFX) \
    extern "C" __global__ void clip_##SFX(const T* x, const T* lo_p, const T* hi_p, T* y, \
                                          long long n, double lo, double hi) { \
        clip_float<T>(x, lo_p, hi_p, y, n, lo, hi); }
#define CLIP_I(T, SFX) \
    extern "C" __global__ void clip_##SFX(const T* x, const T* lo_p, const T* hi_p, T* y, \
                                          long long n, double, double) { \
        clip_int<T>(x, lo_p, hi_p, y, n); }
CLIP_F(float, f32) CLIP_F(__half, f16) CLIP_F(__nv_bfloat16, bf16) CLIP_F(double, f64)
CLIP_I(long long, i64) CLIP_I(int, i32) CLIP_I(short, i16) CLIP_I(signed char, i8)
CLIP_I(unsigned long long, u64) CLIP_I(unsigned int, u32) CLIP_I(unsigned short, u16)
CLIP_I(unsigned char, u8)

// Where moves bytes: instantiated per dtype on an unsigned type of the same width
#define WHERE(SFX, S) \
    extern "C" __global__ void where_##SFX(const bool* c, const S* x, const S* z, S* y, \
                                           long long n, Bcast bc) { \
        where_kernel<S>(c, x, z, y, n, bc); }
WHERE(f32, unsigned int) WHERE(f16, unsigned short) WHERE(bf16, unsigned short)
WHERE(f64, unsigned long long) WHERE(i64, unsigned long long) WHERE(i32, unsigned int)
WHERE(i8, unsigned char) WHERE(u8, unsigned char) WHERE(b8, unsigned char)
WHERE(i16, unsigned short) WHERE(u16, unsigned short) WHERE(u32, unsigned int)
WHERE(u64, unsigned long long)

// ================================================================== more rows
UNARY_F4(asinh, FAsinh)
UNARY_F4(acosh, FAcosh)
UNARY_F4(atanh, FAtanh)
UNARY_F4(softsign, FSoftsign)
UNARY_F4(thresholdedrelu, FThresholdedRelu)
UNARY_F4(shrink, FShrink)
UNARY_F4(celu, FCelu)
UNARY_F4(mish, FMish)
UNARY_F4(swish, FSwish)
UNARY_F4(div_by, FDivBy)

#define ISINF(T, SFX) \
    extern "C" __global__ void isinf_##SFX(const T* x, bool* y, long long n, double pos, \
                                           double neg) { \
        isinf_kernel<T>(x, y, n, pos, neg); }
ISINF(float, f32) ISINF(__half, f16) ISINF(__nv_bfloat16, bf16) ISINF(double, f64)

UNARY_SI(bitwise_not, IInvert) UNARY_UI(bitwise_not, IInvert)
BIN_INTS(bitwise_and, IBitAnd)
BIN_INTS(bitwise_or, IBitOr)
BIN_INTS(bitwise_xor, IBitXor)
BIN_INTS(shl, IShl)
BIN_INTS(shr, IShr)
BIN_F(prelu, BPRelu, float, f32, double) BIN_F(prelu, BPRelu, __half, f16, double)
BIN_F(prelu, BPRelu, __nv_bfloat16, bf16, double) BIN_F(prelu, BPRelu, double, f64, double)
BIN_INTS(prelu, IPRelu)

// Pow of a float base with an exponent of another dtype: pow_<base>_<exponent>
#define POW_M(T, TS, E, ES) \
    extern "C" __global__ void pow_##TS##_##ES(const T* a, const E* b, T* y, long long n, \
                                               Bcast bc) { \
        pow_mixed<T, E>(a, b, y, n, bc); }
#define POW_FROM(T, TS) \
    POW_M(T, TS, long long, i64) POW_M(T, TS, int, i32) POW_M(T, TS, short, i16) \
    POW_M(T, TS, signed char, i8) POW_M(T, TS, unsigned long long, u64) \
    POW_M(T, TS, unsigned int, u32) POW_M(T, TS, unsigned short, u16) \
    POW_M(T, TS, unsigned char, u8) POW_M(T, TS, float, f32) POW_M(T, TS, __half, f16) \
    POW_M(T, TS, __nv_bfloat16, bf16) POW_M(T, TS, double, f64)
POW_FROM(float, f32) POW_FROM(__half, f16) POW_FROM(__nv_bfloat16, bf16)
