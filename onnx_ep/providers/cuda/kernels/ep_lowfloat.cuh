// Narrow float and sub-byte integer formats of cast.cu and quantize.cu, by bit manipulation,
// by the rules of cpu_reference/formats.py (the ONNX specification's). One element per
// byte, as ml_dtypes arrays hold them in memory (the low 4 / 2 bits; the rest zero).
//
// - decode: the exact value as a double; NaN becomes the quiet NaN 0x7ff8... with the
//   code's sign (0xfff8... for the fnuz formats' 0x80, 0x7ff8... for float8e8m0's 0xff).
// - encode: round the double once to nearest even. Overflow: e5m2 -> +-inf, e4m3fn ->
//   +-NaN (0x7f / 0xff), fnuz -> 0x80, float4e2m1 -> +-6 (no inf / NaN). ``clip`` (Cast's
//   saturate for float8) first clamps |x| > max to max (inf included, NaN stays).
//   NaN: e4m3fn 0x7f | sign, e5m2 0x7e | sign, fnuz 0x80, float4e2m1 +6 (0x7).
//   fnuz formats have no -0: zero results are 0x00.
// - float8e8m0: decode 2^(code - 127), 0xff NaN; encode formats.to_e8m0.
// - sub-byte integers: the low bits (a float is first rounded half to even).
//
// Compiles for NVRTC (device) and as plain C++ on the host (tests/providers/cuda check the
// host build against the reference, bit pattern by bit pattern).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define EP_HD __host__ __device__ __forceinline__
#else
#define EP_HD inline
#include <cmath>
#include <cstring>
using std::frexp;
using std::ldexp;
using std::rint;
using std::fabs;
using std::isnan;
using std::isinf;
using std::signbit;
#endif

namespace ep {
namespace lowfloat {

typedef unsigned char byte_t;
typedef unsigned long long bits_t;

EP_HD double double_from_bits(bits_t b) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)b);
#else
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
#endif
}

// kinds of overflow / NaN handling
enum { IEEE = 0, FN = 1, FNUZ = 2, NO_INF_NAN = 3 };

struct Format {
    int ebits, mbits, bias, kind;
    byte_t max_code;  // the largest finite magnitude code
};

// e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e2m1fn (float4)
#define EP_E4M3FN ep::lowfloat::Format{4, 3, 7, ep::lowfloat::FN, 0x7e}
#define EP_E4M3FNUZ ep::lowfloat::Format{4, 3, 8, ep::lowfloat::FNUZ, 0x7f}
#define EP_E5M2 ep::lowfloat::Format{5, 2, 15, ep::lowfloat::IEEE, 0x7b}
#define EP_E5M2FNUZ ep::lowfloat::Format{5, 2, 16, ep::lowfloat::FNUZ, 0x7f}
#define EP_E2M1FN ep::lowfloat::Format{2, 1, 1, ep::lowfloat::NO_INF_NAN, 0x7}

EP_HD int sign_shift(Format f) { return f.ebits + f.mbits; }

EP_HD bool is_nan_code(Format f, byte_t c) {
    byte_t mag = c & (byte_t)((1u << sign_shift(f)) - 1u);
    switch (f.kind) {
        case IEEE: return (mag >> f.mbits) == (1u << f.ebits) - 1u && (mag & ((1u << f.mbits) - 1u));
        case FN: return mag == (byte_t)((1u << sign_shift(f)) - 1u);
        case FNUZ: return c == (byte_t)(1u << sign_shift(f));
        default: return false;
    }
}

EP_HD double decode(Format f, byte_t c) {
    int s = sign_shift(f);
    bool neg = (c >> s) & 1u;
    if (is_nan_code(f, c))
        return double_from_bits(neg ? 0xfff8000000000000ull : 0x7ff8000000000000ull);
    unsigned mag = c & ((1u << s) - 1u);
    unsigned e = mag >> f.mbits, m = mag & ((1u << f.mbits) - 1u);
    double v;
    if (f.kind == IEEE && e == (1u << f.ebits) - 1u) v = double_from_bits(0x7ff0000000000000ull);
    else if (e == 0) v = ldexp((double)m, 1 - f.bias - f.mbits);
    else v = ldexp((double)(m | (1u << f.mbits)), (int)e - f.bias - f.mbits);
    return neg ? -v : v;
}

EP_HD double max_value(Format f) { return decode(f, f.max_code); }

// x rounded once to nearest even into format f; ``clip`` clamps |x| > max to max first
EP_HD byte_t encode(Format f, double x, bool clip) {
    int s = sign_shift(f);
    bool neg = signbit(x);
    byte_t sign = neg ? (byte_t)(1u << s) : (byte_t)0;
    if (isnan(x)) {
        switch (f.kind) {
            case IEEE: return sign | (byte_t)(((1u << f.ebits) - 1u) << f.mbits | 1u << (f.mbits - 1));
            case FN: return sign | (byte_t)((1u << s) - 1u);
            case FNUZ: return (byte_t)(1u << s);
            default: return f.max_code;  // ONNX technical/float4.md: NaN -> +max
        }
    }
    double a = fabs(x);
    double mx = max_value(f);
    if (clip && a > mx) a = mx;
    byte_t code;
    if (isinf(a)) {
        code = 0xff;  // overflow below
    } else if (a == 0.0) {
        code = 0;
    } else {
        int ex;
        frexp(a, &ex);           // a = m * 2^ex, m in [0.5, 1)
        int e = ex - 1;          // 2^e <= a < 2^(e+1)
        int emin = 1 - f.bias;
        int E = e < emin ? emin : e;
        double q = rint(ldexp(a, f.mbits - E));  // exact scaling by a power of two; RNE
        unsigned qi = (unsigned)q;
        if (qi == (2u << f.mbits)) {
            qi = 1u << f.mbits;
            E += 1;
        }
        if (qi >= (1u << f.mbits)) {
            int biased = E + f.bias;
            if (biased >= (1 << f.ebits)) code = 0xff;
            else code = (byte_t)((unsigned)biased << f.mbits | (qi - (1u << f.mbits)));
        } else {
            code = (byte_t)qi;  // subnormal or zero
        }
    }
    if (code != 0xff && code > f.max_code) code = 0xff;
    if (code == 0xff) {  // overflow
        switch (f.kind) {
            case IEEE: return sign | (byte_t)(((1u << f.ebits) - 1u) << f.mbits);
            case FN: return sign | (byte_t)((1u << s) - 1u);
            case FNUZ: return (byte_t)(1u << s);
            default: return sign | f.max_code;
        }
    }
    if (code == 0 && f.kind == FNUZ) return 0;
    return sign | code;
}

// float8e8m0: 2^(code - 127); 0xff is NaN
EP_HD double decode_e8m0(byte_t c) {
    if (c == 0xff) return double_from_bits(0x7ff8000000000000ull);
    return ldexp(1.0, (int)c - 127);
}

// formats.to_e8m0: mode 0 up (away from zero), 1 down, 2 nearest (ties up)
EP_HD byte_t encode_e8m0(double x, bool saturate, int mode) {
    if (isnan(x)) return 0xff;
    double a = fabs(x);
    int ex = 0;
    double m = isinf(a) ? a : frexp(a, &ex);
    long long k = (long long)ex - 1;
    if (mode == 0) k += (m != 0.5);
    else if (mode == 2) k += (m >= 0.75);
    long long biased = k + 127;
    bool over = biased > 254 || isinf(a);
    bool under = biased < 0 || a == 0.0;
    if (saturate) return under ? 0 : over ? 254 : (byte_t)biased;
    return (over || under) ? 0xff : (byte_t)biased;
}

// sub-byte integers: the value of the low ``bits`` bits of a byte
EP_HD int decode_int(byte_t c, int bits, bool is_signed) {
    int v = c & ((1 << bits) - 1);
    if (is_signed && (v >> (bits - 1))) v -= 1 << bits;
    return v;
}

EP_HD byte_t encode_int(long long v, int bits) { return (byte_t)(v & ((1 << bits) - 1)); }

}  // namespace lowfloat

// ---------------------------------------------------------------- element types

// one-byte formats, each a distinct type so that templates pick the conversion
struct e4m3fn_t { lowfloat::byte_t b; };
struct e4m3fnuz_t { lowfloat::byte_t b; };
struct e5m2_t { lowfloat::byte_t b; };
struct e5m2fnuz_t { lowfloat::byte_t b; };
struct f4e2m1_t { lowfloat::byte_t b; };
struct e8m0_t { lowfloat::byte_t b; };
struct i4_t { lowfloat::byte_t b; };
struct u4_t { lowfloat::byte_t b; };
struct i2_t { lowfloat::byte_t b; };
struct u2_t { lowfloat::byte_t b; };

template <class T> struct Low;  // narrow float formats (e8m0 apart) and their saturation
template <> struct Low<e4m3fn_t> { static constexpr bool float8 = true;
    static EP_HD lowfloat::Format f() { return EP_E4M3FN; } };
template <> struct Low<e4m3fnuz_t> { static constexpr bool float8 = true;
    static EP_HD lowfloat::Format f() { return EP_E4M3FNUZ; } };
template <> struct Low<e5m2_t> { static constexpr bool float8 = true;
    static EP_HD lowfloat::Format f() { return EP_E5M2; } };
template <> struct Low<e5m2fnuz_t> { static constexpr bool float8 = true;
    static EP_HD lowfloat::Format f() { return EP_E5M2FNUZ; } };
template <> struct Low<f4e2m1_t> { static constexpr bool float8 = false;
    static EP_HD lowfloat::Format f() { return EP_E2M1FN; } };

template <class T> struct SubInt;  // bits, signedness
template <> struct SubInt<i4_t> { static constexpr int bits = 4; static constexpr bool sign = true; };
template <> struct SubInt<u4_t> { static constexpr int bits = 4; static constexpr bool sign = false; };
template <> struct SubInt<i2_t> { static constexpr int bits = 2; static constexpr bool sign = true; };
template <> struct SubInt<u2_t> { static constexpr int bits = 2; static constexpr bool sign = false; };

}  // namespace ep
