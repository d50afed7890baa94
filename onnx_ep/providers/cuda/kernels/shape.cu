// Shape and constant ops: Shape / Size (values passed as arguments), ConstantOfShape
// (fill), EyeLike, Trilu and Range. Parity: exact.
//
// Nothing here is uploaded from the host: Shape's dims and ConstantOfShape's value travel
// as kernel arguments, and Range's start/delta and Trilu's k are read through device
// pointers, so every launch is capture-safe.
//
// fill / eye / trilu are instantiated by element SIZE (x1, x2, x4, x8; trilu also x16):
// they only place given bits or zeros. Range is instantiated by dtype (it computes).
// Element counts are int64; grid-stride loops; 256 threads per block.
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

// up to 8 int64 values by value (Shape, Size): y[j] = v[j] for j < n
struct I64x8 {
    long long v[8];
    int n;
};

extern "C" __global__ void write_i64(long long* __restrict__ y, I64x8 vals) {
    int j = threadIdx.x;
    if (j < vals.n && j < 8) y[j] = vals.v[j];
}

// y[i] = the low sizeof(T) bytes of bits (ConstantOfShape)
template <class T>
__device__ void fill(T* __restrict__ y, unsigned long long bits, long long n) {
    T v = (T)bits;
    for (long long i = global_tid(); i < n; i += grid_threads()) y[i] = v;
}

// y[r][c] = (c - r == k) ? one : 0 for a rows x cols matrix (EyeLike)
template <class T>
__device__ void eye(T* __restrict__ y, long long rows, long long cols, long long k,
                    unsigned long long one_bits) {
    T one = (T)one_bits;
    long long n = rows * cols;
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long r = i / cols, c = i - r * cols;
        y[i] = (c - r == k) ? one : (T)0;
    }
}

// Trilu over the last two dims (rows x cols) of n elements: keep x where c - r >= k
// (upper) or c - r <= k (lower), else zero bytes. k is the node's int64 0-d/1-element
// input read on the device (null: 0).
template <class T>
__device__ void trilu(const T* __restrict__ x, T* __restrict__ y, long long rows,
                      long long cols, long long n, const long long* __restrict__ kp, int upper) {
    long long k = kp ? *kp : 0;
    T zero;
    memset(&zero, 0, sizeof(T));
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long q = i / cols, c = i - q * cols;
        long long r = q % rows;
        long long d = c - r;
        bool keep = upper ? d >= k : d <= k;
        y[i] = keep ? x[i] : zero;
    }
}

#define EP_SHAPE_BYTES(S)                                                                   \
extern "C" __global__ void fill_##S(S##_t* y, unsigned long long bits, long long n) {       \
    fill<S##_t>(y, bits, n);                                                                \
}                                                                                           \
extern "C" __global__ void eye_##S(S##_t* y, long long rows, long long cols, long long k,   \
                                   unsigned long long one_bits) {                           \
    eye<S##_t>(y, rows, cols, k, one_bits);                                                 \
}

#define EP_TRILU(S)                                                                         \
extern "C" __global__ void trilu_##S(const S##_t* x, S##_t* y, long long rows,              \
                                     long long cols, long long n, const long long* k,       \
                                     int upper) {                                           \
    trilu<S##_t>(x, y, rows, cols, n, k, upper);                                            \
}

EP_SHAPE_BYTES(x1)
EP_SHAPE_BYTES(x2)
EP_SHAPE_BYTES(x4)
EP_SHAPE_BYTES(x8)
EP_TRILU(x1)
EP_TRILU(x2)
EP_TRILU(x4)
EP_TRILU(x8)
EP_TRILU(x16)

// ------------------------------------------------------------------ Range
// cpu_reference (providers/cpu_reference/shape.py), element i of n:
//   float32 / float64:  start + T(i) * delta in T (numpy arange * delta, + start)
//   float16 / bfloat16: in the stash type (float32, or float64 when stash64), rounded once
//   integers:           int64 start + i * delta with wraparound, truncated to T
// NaN results follow x86 (first NaN operand quieted, else the default NaN).
template <class C>
__device__ __forceinline__ C range_value(C s, C d, long long i) {
    C p = fix_nan2((C)i * d, (C)i, d);
    return fix_nan2(s + p, s, p);
}

template <class T>
__device__ void range_float(const T* __restrict__ start, const T* __restrict__ delta,
                            T* __restrict__ y, long long n) {
    T s = *start, d = *delta;
    for (long long i = global_tid(); i < n; i += grid_threads()) y[i] = range_value<T>(s, d, i);
}

// bfloat16 from float64 the way ml_dtypes' astype does it: through float32
__device__ __forceinline__ f16 narrow_from64(double d, f16*) { return round_from64<f16>(d); }
__device__ __forceinline__ bf16 narrow_from64(double d, bf16*) {
    return round_from32<bf16>(round_from64<float>(d));
}

template <class T>
__device__ void range_narrow(const T* __restrict__ start, const T* __restrict__ delta,
                             T* __restrict__ y, long long n, int stash64) {
    if (stash64) {
        double s = to_f64(*start), d = to_f64(*delta);
        for (long long i = global_tid(); i < n; i += grid_threads())
            y[i] = narrow_from64(range_value<double>(s, d, i), (T*)0);
    } else {
        float s = to_f32(*start), d = to_f32(*delta);
        for (long long i = global_tid(); i < n; i += grid_threads())
            y[i] = round_from32<T>(range_value<float>(s, d, i));
    }
}

template <class T>
__device__ void range_int(const T* __restrict__ start, const T* __restrict__ delta,
                          T* __restrict__ y, long long n) {
    u64 s = (u64)(long long)*start, d = (u64)(long long)*delta;
    for (long long i = global_tid(); i < n; i += grid_threads()) y[i] = (T)(s + (u64)i * d);
}

extern "C" __global__ void range_f32(const float* s, const float* d, float* y, long long n,
                                     int stash64) {
    range_float<float>(s, d, y, n);
}
extern "C" __global__ void range_f64(const double* s, const double* d, double* y, long long n,
                                     int stash64) {
    range_float<double>(s, d, y, n);
}
extern "C" __global__ void range_f16(const f16* s, const f16* d, f16* y, long long n,
                                     int stash64) {
    range_narrow<f16>(s, d, y, n, stash64);
}
extern "C" __global__ void range_bf16(const bf16* s, const bf16* d, bf16* y, long long n,
                                      int stash64) {
    range_narrow<bf16>(s, d, y, n, stash64);
}

#define EP_RANGE_INT(S, T)                                                                  \
extern "C" __global__ void range_##S(const T* s, const T* d, T* y, long long n, int stash64) { \
    range_int<T>(s, d, y, n);                                                               \
}

EP_RANGE_INT(i64, long long)
EP_RANGE_INT(i32, int)
EP_RANGE_INT(i16, short)
