// Reductions: Reduce{Sum,Mean,Prod,SumSquare,L1,L2,LogSum,LogSumExp,Max,Min}, ArgMax/ArgMin.
//
// Deterministic, no atomics: each output is reduced by one block (or, for the [outer,
// R, inner] layout, by one column of a 32x8 block) in a FIXED order: every thread folds
// a fixed strided subset sequentially, then a shared-memory tree halves the partials.
// The order depends only on the shape and the block size, which the host derives from
// the shape, so a run gives the same bytes as the previous one.
//
// Numerics (docs/PARITY.md): float sums accumulate in DOUBLE (for float16 / bfloat16 /
// float32 too) and round once to the output type, so the only difference to the
// reference is the reference's own float32 summation error. Max / Min / ArgMax / ArgMin
// select and are exact; NaN propagates (Max/Min) or wins (ArgMax/ArgMin, first NaN, or
// last with select_last_index). Integer Sum / Prod / SumSquare / L1 wrap in two's
// complement like the reference; integer Mean truncates toward zero.
#include "ep_block.cuh"
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

// ------------------------------------------------------------------ types
template <class T> struct Sel { typedef T type; };       // selections compare in ...
template <> struct Sel<f16> { typedef float type; };     // ... float for the narrow floats
template <> struct Sel<bf16> { typedef float type; };
template <class T> struct UInt { typedef T type; };      // integer sums wrap unsigned
template <> struct UInt<int> { typedef unsigned int type; };
template <> struct UInt<long long> { typedef unsigned long long type; };

__device__ __forceinline__ float sel_load(f16 x) { return to_f32(x); }
__device__ __forceinline__ float sel_load(bf16 x) { return to_f32(x); }
template <class T> __device__ __forceinline__ T sel_load(T x) { return x; }

template <class T> __device__ __forceinline__ T sel_store(typename Sel<T>::type v) { return v; }
template <> __device__ __forceinline__ f16 sel_store<f16>(float v) { return round_from32<f16>(v); }
template <> __device__ __forceinline__ bf16 sel_store<bf16>(float v) { return round_from32<bf16>(v); }

template <class A> __device__ __forceinline__ A lowest();
template <> __device__ __forceinline__ float lowest<float>() { return -inf32(); }
template <> __device__ __forceinline__ double lowest<double>() { return -inf64(); }
template <> __device__ __forceinline__ int lowest<int>() { return (int)0x80000000; }
template <> __device__ __forceinline__ long long lowest<long long>() { return (long long)0x8000000000000000ull; }
template <class A> __device__ __forceinline__ A highest();
template <> __device__ __forceinline__ float highest<float>() { return inf32(); }
template <> __device__ __forceinline__ double highest<double>() { return inf64(); }
template <> __device__ __forceinline__ int highest<int>() { return 0x7fffffff; }
template <> __device__ __forceinline__ long long highest<long long>() { return 0x7fffffffffffffffll; }

// the "work" type of the reference for LogSumExp's shift and final add: float32 for
// float32 and narrower, float64 for float64
template <class T> struct Work { typedef float type; };
template <> struct Work<double> { typedef double type; };

// ------------------------------------------------------------------ ops
// Op::Acc, init(), load(x, shift), comb(a, b), fin(acc, count, shift) -> T.
// SHIFT ops (LogSumExp) get the max of the set as ``shift`` (0 when it is not finite).

template <class T> struct FSum {
    typedef double Acc;
    static constexpr bool SHIFT = false;
    static __device__ Acc init() { return 0.0; }
    static __device__ Acc load(T x, double) { return to_f64(x); }
    static __device__ Acc comb(Acc a, Acc b) { return a + b; }
    static __device__ T fin(Acc s, long long, double) { return round_from64<T>(s); }
};
template <class T> struct FMean : FSum<T> {
    static __device__ T fin(double s, long long n, double) { return round_from64<T>(s / (double)n); }
};
template <class T> struct FSumSquare : FSum<T> {
    static __device__ double load(T x, double) { double v = to_f64(x); return v * v; }
};
template <class T> struct FL1 : FSum<T> {
    static __device__ double load(T x, double) { return fabs(to_f64(x)); }
};
template <class T> struct FL2 : FSumSquare<T> {
    static __device__ T fin(double s, long long, double) { return round_from64<T>(sqrt(s)); }
};
template <class T> struct FLogSum : FSum<T> {
    static __device__ T fin(double s, long long, double) { return round_from64<T>(log(s)); }
};
template <class T> struct FProd : FSum<T> {
    static __device__ double init() { return 1.0; }
    static __device__ double comb(double a, double b) { return a * b; }
};
// log(sum(exp(x - shift))) + shift with the subtraction and the final add in the
// reference's work type (float32 below float64), the exp and the sum in double
template <class T> struct FLogSumExp : FSum<T> {
    typedef typename Work<T>::type W;
    static constexpr bool SHIFT = true;
    static __device__ double load(T x, double shift) {
        W d = (W)to_f64(x) - (W)shift;
        return exp((double)d);
    }
    static __device__ T fin(double s, long long, double shift) {
        W l = round_from64<W>(log(s));
        W r = l + (W)shift;
        return round_from64<T>(to_f64(r));
    }
};

template <class T, bool MAX> struct SelExt {
    typedef typename Sel<T>::type Acc;
    static constexpr bool SHIFT = false;
    static __device__ Acc init() { return MAX ? lowest<Acc>() : highest<Acc>(); }
    static __device__ Acc load(T x, double) { return sel_load(x); }
    // NaN propagates (ep_block.cuh)
    static __device__ Acc comb(Acc a, Acc b) { return nan_extreme<MAX>(a, b); }
    static __device__ T fin(Acc a, long long, double) { return sel_store<T>(a); }
};
template <class T> struct FMax : SelExt<T, true> {};
template <class T> struct FMin : SelExt<T, false> {};

template <class T> struct ISum {
    typedef typename UInt<T>::type Acc;
    static constexpr bool SHIFT = false;
    static __device__ Acc init() { return 0; }
    static __device__ Acc load(T x, double) { return (Acc)x; }
    static __device__ Acc comb(Acc a, Acc b) { return a + b; }
    static __device__ T fin(Acc s, long long, double) { return (T)s; }
};
template <class T> struct IProd : ISum<T> {
    typedef typename UInt<T>::type Acc;
    static __device__ Acc init() { return 1; }
    static __device__ Acc comb(Acc a, Acc b) { return a * b; }
};
template <class T> struct ISumSquare : ISum<T> {
    typedef typename UInt<T>::type Acc;
    static __device__ Acc load(T x, double) { return (Acc)x * (Acc)x; }
};
template <class T> struct IL1 : ISum<T> {
    typedef typename UInt<T>::type Acc;
    static __device__ Acc load(T x, double) { return x < 0 ? (Acc)0 - (Acc)x : (Acc)x; }
};
template <class T> struct IMean : ISum<T> {
    typedef typename UInt<T>::type Acc;
    static __device__ T fin(Acc s, long long n, double) {
        return n == 0 ? (T)s : (T)((T)s / (T)n);   // C division truncates toward zero
    }
};

// max used for the shift of SHIFT ops
template <class T> struct ShiftMax : SelExt<T, true> {};

// ------------------------------------------------------------------ block tree
// One block per output element o (blockDim a power of two <= 256). ``kept`` maps o to the
// offset of its first input element, ``red`` maps r in [0, nred) to the offset within.
template <class T, class Op>
__device__ void reduce_rows(const T* __restrict__ x, T* __restrict__ y, Geo kept, Geo red,
                            long long nred, long long n_out) {
    typedef typename Op::Acc A;
    typedef typename Sel<T>::type S;
    __shared__ A sh[EP_BLOCK];
    __shared__ S shs[EP_BLOCK];
    for (long long o = blockIdx.x; o < n_out; o += gridDim.x) {
        const T* xo = x + geo_offset(o, kept);
        double shift = 0.0;
        if (Op::SHIFT) {
            S m = ShiftMax<T>::init();
            for (long long r = threadIdx.x; r < nred; r += blockDim.x)
                m = ShiftMax<T>::comb(m, ShiftMax<T>::load(xo[geo_offset(r, red)], 0.0));
            m = block_reduce<ShiftMax<T>>(m, shs);
            shift = isfinite((double)m) ? (double)m : 0.0;
        }
        A a = Op::init();
        for (long long r = threadIdx.x; r < nred; r += blockDim.x)
            a = Op::comb(a, Op::load(xo[geo_offset(r, red)], shift));
        a = block_reduce<Op>(a, sh);
        if (threadIdx.x == 0) y[o] = Op::fin(a, nred, shift);
    }
}

// [outer, R, inner] with inner > 1: block (32, 8); threadIdx.x walks inner (coalesced),
// threadIdx.y folds r = ty, ty + 8, ...; then a tree over the 8 partials of each column.
// grid (ceil(inner / 32), min(outer, 65535)).
template <class T, class Op>
__device__ void reduce_cols(const T* __restrict__ x, T* __restrict__ y, long long outer,
                            long long R, long long inner) {
    typedef typename Op::Acc A;
    typedef typename Sel<T>::type S;
    __shared__ A sh[8][33];
    __shared__ S shs[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long i = blockIdx.x * 32LL + tx;
    for (long long o = blockIdx.y; o < outer; o += gridDim.y) {
        const T* xo = x + o * R * inner + i;
        double shift = 0.0;
        if (Op::SHIFT) {
            S m = ShiftMax<T>::init();
            if (i < inner)
                for (long long r = ty; r < R; r += 8)
                    m = ShiftMax<T>::comb(m, ShiftMax<T>::load(xo[r * inner], 0.0));
            shs[ty][tx] = m;
            __syncthreads();
            for (int s = 4; s > 0; s >>= 1) {
                if (ty < s) shs[ty][tx] = ShiftMax<T>::comb(shs[ty][tx], shs[ty + s][tx]);
                __syncthreads();
            }
            m = shs[0][tx];
            shift = isfinite((double)m) ? (double)m : 0.0;
            __syncthreads();
        }
        A a = Op::init();
        if (i < inner)
            for (long long r = ty; r < R; r += 8) a = Op::comb(a, Op::load(xo[r * inner], shift));
        sh[ty][tx] = a;
        __syncthreads();
        for (int s = 4; s > 0; s >>= 1) {
            if (ty < s) sh[ty][tx] = Op::comb(sh[ty][tx], sh[ty + s][tx]);
            __syncthreads();
        }
        if (ty == 0 && i < inner) y[o * inner + i] = Op::fin(sh[0][tx], R, shift);
        __syncthreads();
    }
}

// ------------------------------------------------------------------ ArgMax / ArgMin
// Is (vb, ib) a better pick than (va, ia)? NaN beats numbers; equal values: lower index
// (higher with select_last_index). ia < 0 means "nothing yet". A total order on
// (value, index), so the tree's shape cannot change the answer.
template <bool MAX, class A>
__device__ __forceinline__ bool arg_better(A va, long long ia, A vb, long long ib, int last) {
    if (ib < 0) return false;
    if (ia < 0) return true;
    bool na = is_nan(va), nb = is_nan(vb);
    if (na || nb) {
        if (na && nb) return last ? ib > ia : ib < ia;
        return nb;
    }
    if (MAX ? vb > va : vb < va) return true;
    if (vb == va) return last ? ib > ia : ib < ia;
    return false;
}

// the better of two picks in a block's shared arrays, as a tree over blockDim (a power of
// two); the winner ends in slot 0
template <bool MAX, class S>
__device__ __forceinline__ void arg_tree(S* shv, long long* shi, int last) {
    const int t = threadIdx.x;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (t < s && arg_better<MAX>(shv[t], shi[t], shv[t + s], shi[t + s], last)) {
            shv[t] = shv[t + s];
            shi[t] = shi[t + s];
        }
        __syncthreads();
    }
}

// Few long rows (a vocabulary's logits): block (part, row) picks the best of elements
// [part * chunk, (part + 1) * chunk) of its row into pv / pi [row, part]; arg_join then
// picks each row's best part. The order on (value, index) is total, so the split cannot
// change the answer. ARG_U loads of a thread are in flight before any is compared.
#define ARG_U 4
template <class T, bool MAX>
__device__ void arg_part(const T* __restrict__ x, typename Sel<T>::type* __restrict__ pv,
                         long long* __restrict__ pi, long long axis_dim, long long chunk,
                         int last) {
    typedef typename Sel<T>::type S;
    __shared__ S shv[EP_BLOCK];
    __shared__ long long shi[EP_BLOCK];
    const int t = threadIdx.x;
    const long long row = blockIdx.y, part = blockIdx.x, parts = gridDim.x;
    const T* xo = x + row * axis_dim;
    const long long lo = part * chunk, hi = lo + chunk < axis_dim ? lo + chunk : axis_dim;
    S bv = (S)0;
    long long bi = -1;
    for (long long r0 = lo + t; r0 < hi; r0 += (long long)ARG_U * blockDim.x) {
        S v[ARG_U];
#pragma unroll
        for (int u = 0; u < ARG_U; ++u) {
            const long long r = r0 + (long long)u * blockDim.x;
            v[u] = r < hi ? sel_load(xo[r]) : (S)0;
        }
#pragma unroll
        for (int u = 0; u < ARG_U; ++u) {
            const long long r = r0 + (long long)u * blockDim.x;
            if (r < hi && arg_better<MAX>(bv, bi, v[u], r, last)) { bv = v[u]; bi = r; }
        }
    }
    shv[t] = bv;
    shi[t] = bi;
    arg_tree<MAX>(shv, shi, last);
    if (t == 0) {
        pv[row * parts + part] = shv[0];
        pi[row * parts + part] = shi[0];
    }
}

template <class T, bool MAX>
__device__ void arg_join(const typename Sel<T>::type* __restrict__ pv,
                         const long long* __restrict__ pi, long long* __restrict__ y,
                         long long parts, int last) {
    typedef typename Sel<T>::type S;
    __shared__ S shv[EP_BLOCK];
    __shared__ long long shi[EP_BLOCK];
    const int t = threadIdx.x;
    const long long row = blockIdx.x;
    S bv = (S)0;
    long long bi = -1;
    for (long long k = t; k < parts; k += blockDim.x) {
        const S v = pv[row * parts + k];
        const long long i = pi[row * parts + k];
        if (arg_better<MAX>(bv, bi, v, i, last)) { bv = v; bi = i; }
    }
    shv[t] = bv;
    shi[t] = bi;
    arg_tree<MAX>(shv, shi, last);
    if (t == 0) y[row] = shi[0];
}

// inner == 1: one block per output row of ``axis_dim`` elements (blockDim power of two)
template <class T, bool MAX>
__device__ void arg_rows(const T* __restrict__ x, long long* __restrict__ y, long long outer,
                         long long axis_dim, int last) {
    typedef typename Sel<T>::type S;
    __shared__ S shv[EP_BLOCK];
    __shared__ long long shi[EP_BLOCK];
    const int t = threadIdx.x;
    for (long long o = blockIdx.x; o < outer; o += gridDim.x) {
        const T* xo = x + o * axis_dim;
        S bv = (S)0;
        long long bi = -1;
        for (long long r = t; r < axis_dim; r += blockDim.x) {
            S v = sel_load(xo[r]);
            if (arg_better<MAX>(bv, bi, v, r, last)) { bv = v; bi = r; }
        }
        shv[t] = bv;
        shi[t] = bi;
        arg_tree<MAX>(shv, shi, last);
        if (t == 0) y[o] = shi[0];
        __syncthreads();
    }
}

// inner > 1: one thread per output (o, i), sequential over the axis (coalesced over i)
template <class T, bool MAX>
__device__ void arg_cols(const T* __restrict__ x, long long* __restrict__ y, long long outer,
                         long long axis_dim, long long inner, int last) {
    typedef typename Sel<T>::type S;
    long long n = outer * inner;
    for (long long k = global_tid(); k < n; k += grid_threads()) {
        long long o = k / inner, i = k - o * inner;
        const T* xo = x + o * axis_dim * inner + i;
        S bv = (S)0;
        long long bi = -1;
        for (long long r = 0; r < axis_dim; ++r) {
            S v = sel_load(xo[r * inner]);
            if (arg_better<MAX>(bv, bi, v, r, last)) { bv = v; bi = r; }
        }
        y[k] = bi;
    }
}

// ------------------------------------------------------------------ instantiation
#define EP_REDUCE(NAME, OP, T, S)                                                           \
extern "C" __global__ void reduce_##NAME##_##S(const T* x, T* y, Geo kept, Geo red,         \
                                               long long nred, long long n_out) {           \
    reduce_rows<T, OP<T>>(x, y, kept, red, nred, n_out);                                    \
}                                                                                           \
extern "C" __global__ void reduce_cols_##NAME##_##S(const T* x, T* y, long long outer,      \
                                                    long long R, long long inner) {         \
    reduce_cols<T, OP<T>>(x, y, outer, R, inner);                                           \
}

#define EP_ARG(T, S)                                                                        \
extern "C" __global__ void argmax_rows_##S(const T* x, long long* y, long long outer,        \
                                           long long a, int last) {                         \
    arg_rows<T, true>(x, y, outer, a, last);                                                \
}                                                                                           \
extern "C" __global__ void argmin_rows_##S(const T* x, long long* y, long long outer,        \
                                           long long a, int last) {                         \
    arg_rows<T, false>(x, y, outer, a, last);                                               \
}                                                                                           \
extern "C" __global__ void argmax_part_##S(const T* x, Sel<T>::type* pv, long long* pi,      \
                                           long long a, long long chunk, int last) {        \
    arg_part<T, true>(x, pv, pi, a, chunk, last);                                           \
}                                                                                           \
extern "C" __global__ void argmin_part_##S(const T* x, Sel<T>::type* pv, long long* pi,      \
                                           long long a, long long chunk, int last) {        \
    arg_part<T, false>(x, pv, pi, a, chunk, last);                                          \
}                                                                                           \
extern "C" __global__ void argmax_join_##S(const Sel<T>::type* pv, const long long* pi,      \
                                           long long* y, long long parts, int last) {       \
    arg_join<T, true>(pv, pi, y, parts, last);                                              \
}                                                                                           \
extern "C" __global__ void argmin_join_##S(const Sel<T>::type* pv, const long long* pi,      \
                                           long long* y, long long parts, int last) {       \
    arg_join<T, false>(pv, pi, y, parts, last);                                             \
}                                                                                           \
extern "C" __global__ void argmax_cols_##S(const T* x, long long* y, long long outer,        \
                                           long long a, long long inner, int last) {        \
    arg_cols<T, true>(x, y, outer, a, inner, last);                                         \
}                                                                                           \
extern "C" __global__ void argmin_cols_##S(const T* x, long long* y, long long outer,        \
                                           long long a, long long inner, int last) {        \
    arg_cols<T, false>(x, y, outer, a, inner, last);                                        \
}

#define EP_FLOAT_REDUCES(T, S)                  \
    EP_REDUCE(sum, FSum, T, S)                  \
    EP_REDUCE(mean, FMean, T, S)                \
    EP_REDUCE(prod, FProd, T, S)                \
    EP_REDUCE(sum_square, FSumSquare, T, S)     \
    EP_REDUCE(l1, FL1, T, S)                    \
    EP_REDUCE(l2, FL2, T, S)                    \
    EP_REDUCE(log_sum, FLogSum, T, S)           \
    EP_REDUCE(log_sum_exp, FLogSumExp, T, S)    \
    EP_REDUCE(max, FMax, T, S)                  \
    EP_REDUCE(min, FMin, T, S)                  \
    EP_ARG(T, S)

#define EP_INT_REDUCES(T, S)                    \
    EP_REDUCE(sum, ISum, T, S)                  \
    EP_REDUCE(mean, IMean, T, S)                \
    EP_REDUCE(prod, IProd, T, S)                \
    EP_REDUCE(sum_square, ISumSquare, T, S)     \
    EP_REDUCE(l1, IL1, T, S)                    \
    EP_REDUCE(max, FMax, T, S)                  \
    EP_REDUCE(min, FMin, T, S)                  \
    EP_ARG(T, S)

EP_FLOAT_REDUCES(float, f32)
EP_FLOAT_REDUCES(f16, f16)
EP_FLOAT_REDUCES(bf16, bf16)
EP_FLOAT_REDUCES(double, f64)
EP_INT_REDUCES(int, i32)
EP_INT_REDUCES(long long, i64)
