// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, in cpu_reference/quantize.py's
// arithmetic, element for element:
// - quantize: q = x / scale as one IEEE division in float32 (float64 for float64 x), NaN as
//   x86 gives it (ep_float.cuh's fix_nan2); integer outputs: rint (half to even), + zero
//   point in float64, clamp to the type's range, NaN -> 0; float8 outputs: clamp to +-max
//   when saturating, then round once (ep_lowfloat.cuh); float4e2m1: q + zero point in the
//   compute type, then round once;
// - dequantize: (x - zero point) * scale in float64, rounded once to the output type;
// - dynamic quantize: uint8 range from min(0, x) .. max(0, x) in float32, the spec's formula.
// Scale and zero point are per tensor (mode 0), per axis (1) or blocked (2): element i of x,
// i = (o * D + a) * inner + k, reads parameter 0, a, or (o * nb + a / block) * inner + k.
// The scale's dtype is a run-time code (0 float32, 1 float16, 2 bfloat16, 3 float64).
// Symbols: quantize_<x>_<y>, dequantize_<x>_<y>, dql_range, dql_apply.
#include "ep_float.cuh"
#include "ep_lowfloat.cuh"

namespace ep {

template <class A, class B> struct Same { static constexpr bool v = false; };
template <class A> struct Same<A, A> { static constexpr bool v = true; };

// the compute type of quantization: float64 for float64 x, float32 otherwise
template <class X> struct QC { typedef float t; };
template <> struct QC<double> { typedef double t; };

// narrow float element types (by byte)
template <class T> struct IsLow { static constexpr bool v = false; };
template <> struct IsLow<e4m3fn_t> { static constexpr bool v = true; };
template <> struct IsLow<e4m3fnuz_t> { static constexpr bool v = true; };
template <> struct IsLow<e5m2_t> { static constexpr bool v = true; };
template <> struct IsLow<e5m2fnuz_t> { static constexpr bool v = true; };
template <> struct IsLow<f4e2m1_t> { static constexpr bool v = true; };

struct QGeo {
    long long n, D, inner, block, nb;
    int mode;
};

__device__ __forceinline__ i64 param_index(i64 i, const QGeo& g) {
    if (g.mode == 0) return 0;
    i64 k = i % g.inner;
    i64 oa = i / g.inner;
    i64 a = oa % g.D;
    if (g.mode == 1) return a;
    i64 o = oa / g.D;
    return (o * g.nb + a / g.block) * g.inner + k;
}

// the scale as float64, exactly (NaN bits as x86 widens them)
__device__ __forceinline__ double scale64(const void* s, int code, i64 j) {
    switch (code) {
        case 0: return to_f64(((const float*)s)[j]);
        case 1: return to_f64(((const f16*)s)[j]);
        case 2: return to_f64(((const bf16*)s)[j]);
        default: return ((const double*)s)[j];
    }
}
// the scale as float32: numpy's astype(float32) (float64 scales round once)
__device__ __forceinline__ float scale32(const void* s, int code, i64 j) {
    switch (code) {
        case 0: return ((const float*)s)[j];
        case 1: return to_f32(((const f16*)s)[j]);
        case 2: return to_f32(((const bf16*)s)[j]);
        default: return round_from64<float>(((const double*)s)[j]);
    }
}

// x in the compute type: float32 (int32 rounds once) or float64
template <class C, class X> __device__ __forceinline__ C load_x(X x) {
    if constexpr (Traits<X>::is_float) {
        if constexpr (sizeof(C) == 8) return to_f64(x);
        else return to_f32(x);
    } else {
        return (C)x;  // int32 -> float32, to nearest even
    }
}

template <class T> struct QInt { static constexpr int kind = 0; };  // 0 none
template <> struct QInt<i8> { static constexpr int kind = 1; static constexpr int lo = -128, hi = 127; };
template <> struct QInt<u8> { static constexpr int kind = 1; static constexpr int lo = 0, hi = 255; };
template <> struct QInt<i16> { static constexpr int kind = 1; static constexpr int lo = -32768, hi = 32767; };
template <> struct QInt<u16> { static constexpr int kind = 1; static constexpr int lo = 0, hi = 65535; };
template <> struct QInt<i4_t> { static constexpr int kind = 2; static constexpr int lo = -8, hi = 7; };
template <> struct QInt<u4_t> { static constexpr int kind = 2; static constexpr int lo = 0, hi = 15; };
template <> struct QInt<i2_t> { static constexpr int kind = 2; static constexpr int lo = -2, hi = 1; };
template <> struct QInt<u2_t> { static constexpr int kind = 2; static constexpr int lo = 0, hi = 3; };

template <class T> __device__ __forceinline__ double int_value(T z) {
    if constexpr (QInt<T>::kind == 2) return (double)lowfloat::decode_int(z.b, SubInt<T>::bits, SubInt<T>::sign);
    else return (double)z;
}

template <class Y> __device__ __forceinline__ Y store_int(double r) {
    long long v = isnan(r) ? 0 : (long long)r;  // r is an integer in range here
    if constexpr (QInt<Y>::kind == 2) { Y y; y.b = lowfloat::encode_int(v, SubInt<Y>::bits); return y; }
    else return (Y)v;
}


template <class X, class Y>
__device__ __forceinline__ void quantize_kernel(const X* x, const void* s, int scode, const Y* zp,
                                                Y* y, QGeo g, int saturate) {
    typedef typename QC<X>::t C;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += (i64)blockDim.x * gridDim.x) {
        i64 j = param_index(i, g);
        C xv = load_x<C>(x[i]);
        C sv;
        if constexpr (sizeof(C) == 8) sv = scale64(s, scode, j);
        else sv = scale32(s, scode, j);
        C q = fix_nan2(xv / sv, xv, sv);
        if constexpr (QInt<Y>::kind != 0) {
            double r;
            if constexpr (sizeof(C) == 8) r = rint(q);
            else r = (double)rintf(q);
            if (zp != nullptr) r = r + int_value(zp[j]);
            r = r < QInt<Y>::lo ? (double)QInt<Y>::lo : r > QInt<Y>::hi ? (double)QInt<Y>::hi : r;
            y[i] = store_int<Y>(r);
        } else if constexpr (Low<Y>::float8) {
            if (saturate) {
                C mx = (C)lowfloat::max_value(Low<Y>::f());
                q = q < -mx ? -mx : q > mx ? mx : q;  // NaN stays
            }
            Y out;
            out.b = lowfloat::encode(Low<Y>::f(), to_f64(q), false);
            y[i] = out;
        } else {  // float4e2m1: the zero point is added in the compute type
            if (zp != nullptr) {
                C z = (C)lowfloat::decode(Low<Y>::f(), zp[j].b);
                q = fix_nan2(q + z, q, z);
            }
            Y out;
            out.b = lowfloat::encode(Low<Y>::f(), to_f64(q), false);
            y[i] = out;
        }
    }
}

// x as float64, exactly
template <class X> __device__ __forceinline__ double dq_value(X x) {
    if constexpr (QInt<X>::kind == 2) return int_value(x);
    else if constexpr (IsLow<X>::v) return lowfloat::decode(Low<X>::f(), x.b);
    else return (double)x;
}


template <class X, class Y>
__device__ __forceinline__ void dequantize_kernel(const X* x, const void* s, int scode, const X* zp,
                                                  Y* y, QGeo g) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += (i64)blockDim.x * gridDim.x) {
        i64 j = param_index(i, g);
        double d = dq_value(x[i]);
        if (zp != nullptr) {
            double z = dq_value(zp[j]);
            d = fix_nan2(d - z, d, z);
        }
        double sv = scale64(s, scode, j);
        y[i] = round_from64<Y>(fix_nan2(d * sv, d, sv));
    }
}

}  // namespace ep

using namespace ep;

#define QUANT(X, XS, Y, YS) \
    extern "C" __global__ void quantize_##XS##_##YS(const X* x, const void* s, int scode, \
                                                    const Y* zp, Y* y, QGeo g, int saturate) { \
        quantize_kernel<X, Y>(x, s, scode, zp, y, g, saturate); }
#define QUANT_FROM(X, XS) \
    QUANT(X, XS, signed char, i8) QUANT(X, XS, unsigned char, u8) QUANT(X, XS, short, i16) \
    QUANT(X, XS, unsigned short, u16) QUANT(X, XS, i4_t, i4) QUANT(X, XS, u4_t, u4) \
    QUANT(X, XS, i2_t, i2) QUANT(X, XS, u2_t, u2) QUANT(X, XS, e4m3fn_t, e4m3fn) \
    QUANT(X, XS, e4m3fnuz_t, e4m3fnuz) QUANT(X, XS, e5m2_t, e5m2) \
    QUANT(X, XS, e5m2fnuz_t, e5m2fnuz) QUANT(X, XS, f4e2m1_t, f4e2m1)

QUANT_FROM(float, f32)
QUANT_FROM(__half, f16)
QUANT_FROM(__nv_bfloat16, bf16)
QUANT_FROM(double, f64)
QUANT_FROM(int, i32)

#define DEQUANT(X, XS, Y, YS) \
    extern "C" __global__ void dequantize_##XS##_##YS(const X* x, const void* s, int scode, \
                                                      const X* zp, Y* y, QGeo g) { \
        dequantize_kernel<X, Y>(x, s, scode, zp, y, g); }
#define DEQUANT_TO(X, XS) \
    DEQUANT(X, XS, float, f32) DEQUANT(X, XS, __half, f16) DEQUANT(X, XS, __nv_bfloat16, bf16) \
    DEQUANT(X, XS, double, f64)

DEQUANT_TO(signed char, i8)
DEQUANT_TO(unsigned char, u8)
DEQUANT_TO(short, i16)
DEQUANT_TO(unsigned short, u16)
DEQUANT_TO(int, i32)
DEQUANT_TO(i4_t, i4)
DEQUANT_TO(u4_t, u4)
DEQUANT_TO(i2_t, i2)
DEQUANT_TO(u2_t, u2)
DEQUANT_TO(e4m3fn_t, e4m3fn)
DEQUANT_TO(e4m3fnuz_t, e4m3fnuz)
DEQUANT_TO(e5m2_t, e5m2)
DEQUANT_TO(e5m2fnuz_t, e5m2fnuz)
DEQUANT_TO(f4e2m1_t, f4e2m1)

// ---------------------------------------------------------------- DynamicQuantizeLinear
// One block of 256 threads folds min / max (exact in any order) and a NaN flag, then
// thread 0 applies the reference's float32 formula:
//   hi = max(0, max(x)), lo = min(0, min(x)) as Python's max / min (NaN anywhere: both 0);
//   scale = (hi == lo ? 1 : hi - lo) / 255; zp = rint(clip(0 - lo / scale, 0, 255)).
// ``zp_f`` keeps the float zero point (NaN included) for dql_apply.
extern "C" __global__ void dql_range(const float* x, long long n, float* scale_out,
                                     unsigned char* zp_out, float* zp_f) {
    __shared__ float smin[256], smax[256];
    __shared__ int snan[256];
    float mn = 0.0f, mx = 0.0f;
    int nan = 0, any = 0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        float v = x[i];
        if (isnan(v)) { nan = 1; continue; }
        if (!any) { mn = v; mx = v; any = 1; }
        else { mn = v < mn ? v : mn; mx = v > mx ? v : mx; }
    }
    // threads without a value take 0: min(0, .) / max(0, .) below make it harmless
    smin[threadIdx.x] = any ? mn : 0.0f;
    smax[threadIdx.x] = any ? mx : 0.0f;
    snan[threadIdx.x] = nan;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            float a = smin[threadIdx.x + w], b = smax[threadIdx.x + w];
            smin[threadIdx.x] = a < smin[threadIdx.x] ? a : smin[threadIdx.x];
            smax[threadIdx.x] = b > smax[threadIdx.x] ? b : smax[threadIdx.x];
            snan[threadIdx.x] |= snan[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float hi = 0.0f, lo = 0.0f;
        if (!snan[0]) {
            hi = smax[0] > 0.0f ? smax[0] : 0.0f;
            lo = smin[0] < 0.0f ? smin[0] : 0.0f;
        }
        float range = hi == lo ? 1.0f : fix_nan2(hi - lo, hi, lo);
        float scale = fix_nan2(range / 255.0f, range, 255.0f);
        float t = fix_nan2(lo / scale, lo, scale);
        float z = fix_nan2(0.0f - t, 0.0f, t);
        z = z < 0.0f ? 0.0f : z > 255.0f ? 255.0f : z;  // NaN stays
        z = rintf(z);
        scale_out[0] = scale;
        zp_out[0] = isnan(z) ? 0 : (unsigned char)z;
        zp_f[0] = z;
    }
}

// y = clip(rint(x / scale) + zp, 0, 255) in float32; NaN -> 0
extern "C" __global__ void dql_apply(const float* x, const float* scale, const float* zp_f,
                                     unsigned char* y, long long n) {
    float s = scale[0], z = zp_f[0];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        float r = rintf(x[i] / s) + z;
        r = r < 0.0f ? 0.0f : r > 255.0f ? 255.0f : r;
        y[i] = isnan(r) ? 0 : (unsigned char)r;
    }
}
