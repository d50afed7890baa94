// Softmax, LogSoftmax, LayerNormalization and RMSNormalization, one block per row.
//
// Softmax / LogSoftmax follow docs/PARITY.md's recipe: widen to float64, subtract the
// row max (0 where it is not finite), exp, sum and divide in float64, round ONCE to the
// output type. Only the order of the float64 sum differs from the reference, so the
// rounded result agrees with it except in vanishingly rare near-tie cases.
// Softmax caches exp(x - max) in shared memory (the first ``cache_n`` of the row), so exp
// runs once per element for rows up to ``cache_n``.
//
// LayerNormalization / RMSNormalization replay the reference's operation order in its
// stash type W (float32 for float32 and narrower, float64 for float64): every step is an
// IEEE operation in W, except that the two statistics (mean, mean of squares) are
// accumulated in double before rounding to W; only their summation order differs.
//
// Row loads are vectorized (V elements = 16 bytes) when the host finds the row length and
// the pointers aligned; V = 1 otherwise. Block sizes are powers of two (<= 256).
//
// Fast rows (``*_fast_*`` and ``*_pipe_*``, float32 / float16 / bfloat16, rows of up to 32
// values per thread): the row is read from DRAM once into registers and written once; see
// below.
#include "ep_async.cuh"
#include "ep_block.cuh"
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

// ------------------------------------------------------------------ softmax (rows)
template <class T, int V, bool LOG>
__device__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long rows,
                             long long cols, int cache_n) {
    extern __shared__ double cache[];
    __shared__ double red[EP_BLOCK];
    typedef Vec<T, V> VT;
    const long long nv = cols / V;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const VT* xv = reinterpret_cast<const VT*>(x + row * cols);
        VT* yv = reinterpret_cast<VT*>(y + row * cols);
        double m = -inf64();
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT p = xv[j];
#pragma unroll
            for (int k = 0; k < V; ++k) m = MaxOp::comb(m, to_f64(p.v[k]));
        }
        m = block_reduce<MaxOp>(m, red);
        const double shift = (isfinite(m) || m > 0.0) ? m : 0.0;   // +inf: NaN row
        double s = 0.0;
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT p = xv[j];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                double e = exp(to_f64(p.v[k]) - shift);
                long long idx = j * V + k;
                if (!LOG && idx < cache_n) cache[idx] = e;
                s += e;
            }
        }
        s = block_reduce<SumOp>(s, red);
        const double ls = LOG ? log(s) : 0.0;
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT out;
            if (LOG) {
                VT p = xv[j];
#pragma unroll
                for (int k = 0; k < V; ++k) out.v[k] = round_from64<T>((to_f64(p.v[k]) - shift) - ls);
            } else if ((j + 1) * V <= cache_n) {
#pragma unroll
                for (int k = 0; k < V; ++k) out.v[k] = round_from64<T>(cache[j * V + k] / s);
            } else {
                VT p = xv[j];
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    long long idx = j * V + k;
                    double e = idx < cache_n ? cache[idx] : exp(to_f64(p.v[k]) - shift);
                    out.v[k] = round_from64<T>(e / s);
                }
            }
            yv[j] = out;
        }
        __syncthreads();   // the cache is reused by the next row
    }
}

// ------------------------------------------------------------------ softmax (axis with inner > 1)
// one thread per (outer, inner) position walking the axis with stride ``inner``
template <class T, bool LOG>
__device__ void softmax_cols(const T* __restrict__ x, T* __restrict__ y, long long outer,
                             long long axis_dim, long long inner) {
    long long n = outer * inner;
    for (long long k = global_tid(); k < n; k += grid_threads()) {
        long long o = k / inner, i = k - o * inner;
        const T* xo = x + o * axis_dim * inner + i;
        T* yo = y + o * axis_dim * inner + i;
        double m = -inf64();
        for (long long r = 0; r < axis_dim; ++r) m = MaxOp::comb(m, to_f64(xo[r * inner]));
        const double shift = (isfinite(m) || m > 0.0) ? m : 0.0;   // +inf: NaN row
        double s = 0.0;
        for (long long r = 0; r < axis_dim; ++r) s += exp(to_f64(xo[r * inner]) - shift);
        const double ls = log(s);
        for (long long r = 0; r < axis_dim; ++r) {
            double d = to_f64(xo[r * inner]) - shift;
            yo[r * inner] = round_from64<T>(LOG ? d - ls : exp(d) / s);
        }
    }
}

// ------------------------------------------------------------------ layer / RMS norm
template <class T> struct Stash { typedef float type; };
template <> struct Stash<double> { typedef double type; };

template <class W> __device__ __forceinline__ W w_load(float v) { return (W)v; }

template <class T, int V, bool RMS>
__device__ void norm_rows(const T* __restrict__ x, const T* __restrict__ scale,
                          const T* __restrict__ bias, T* __restrict__ y,
                          typename Stash<T>::type* __restrict__ mean_out,
                          typename Stash<T>::type* __restrict__ inv_out, long long rows,
                          long long cols, double eps) {
    typedef typename Stash<T>::type W;
    __shared__ double red[EP_BLOCK];
    typedef Vec<T, V> VT;
    const long long nv = cols / V;
    const W eps_w = (W)eps;
    const double n = (double)cols;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const VT* xv = reinterpret_cast<const VT*>(x + row * cols);
        VT* yv = reinterpret_cast<VT*>(y + row * cols);
        W mean = (W)0;
        double acc = 0.0;
        if (!RMS) {
            for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
                VT p = xv[j];
#pragma unroll
                for (int k = 0; k < V; ++k) acc += to_f64(p.v[k]);
            }
            mean = round_from64<W>(block_reduce<SumOp>(acc, red) / n);
            acc = 0.0;
        }
        // sum of squared deviations (LayerNorm) or of squares (RMSNorm), each squared in W
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT p = xv[j];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                W d = (W)to_f64(p.v[k]) - mean;
                W dd = d * d;
                acc += (double)dd;
            }
        }
        const W var = round_from64<W>(block_reduce<SumOp>(acc, red) / n);
        const W inv = (W)1 / sqrt(var + eps_w);
        const VT* sv = reinterpret_cast<const VT*>(scale);
        const VT* bv = reinterpret_cast<const VT*>(bias);
        for (long long j = threadIdx.x; j < nv; j += blockDim.x) {
            VT p = xv[j], sc = sv[j], out;
            VT b;
            if (bias) b = bv[j];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                W d = (W)to_f64(p.v[k]) - mean;
                W v = d * inv * (W)to_f64(sc.v[k]);
                if (bias) v = v + (W)to_f64(b.v[k]);
                out.v[k] = round_from64<T>(to_f64(v));
            }
            yv[j] = out;
        }
        if (threadIdx.x == 0) {
            if (mean_out) mean_out[row] = mean;
            if (inv_out) inv_out[row] = inv;
        }
    }
}

// ------------------------------------------------------------------ fast rows
// One row per ``blockDim.x`` threads (a warp up to 1024 threads; ``blockDim.y`` rows per
// block): each thread holds its P packs of V elements of the row in registers as float, so
// every element is read from DRAM once and written once. Reductions are warp butterflies
// (xor shuffles: every lane ends with the same value, as a + b == b + a) followed by the
// row's warp partials combined in warp order: a fixed order, bit-identical run to run.
//
// Two ways to get a row into registers (the arithmetic after that is one function each):
// * direct (``*_fast_v<V>_p<P>``): one row per thread group, loaded from DRAM by the
//   threads themselves (any V; the only choice for rows not 16-byte aligned);
// * pipelined (``*_pipe_p<P>``, 16-byte packs only): persistent blocks walk rows
//   ``gridDim.x * blockDim.y`` apart and keep the next ``stages - 1`` rows in flight with
//   cp.async into shared memory while the current one is reduced, so a block's DRAM reads
//   never wait on its reductions. Each thread copies exactly the packs it later reads, so
//   a cp.async.wait_group (no barrier) makes them visible.
//
// Softmax: the max in float (exact); exp(x - max) in float32 (expf, <= 2 ulp; __expf for
// float16 / bfloat16, whose outputs keep 11 / 8 bits), summed per thread with float
// two-sums (a plain float sum for the 2-byte types) and across the row in float64;
// y = e * float(1 / sum), rounded once to T: within 5 float32 ulps of the reference's
// float64 recipe (the declared rtol is 1e-6, ~8 ulps; one output ulp more for the 2-byte
// types). A row whose max is not finite (+inf, or every value -inf / NaN) takes the
// reference's float64 path (shift 0). A NaN elsewhere makes the sum NaN and every output
// NaN, as in the reference.
// LogSoftmax: the sum as above, then (x - shift) - log(sum) in float64, rounded once.
// LayerNorm / RMSNorm: the arithmetic of norm_rows above, operation for operation, except
// that each thread sums its values with float two-sums (no float64 per element) before the
// row's float64 combination.
// Conversions are the hardware's, in pairs for the 2-byte types (Pack below): a NaN input
// gives a NaN output, not necessarily with the input's payload (the promises are
// tolerances, under which NaN matches NaN).

struct SumF64 { static __device__ __forceinline__ double comb(double a, double b) { return a + b; } };
struct MaxF32 {  // NaN-blind (fmaxf): a NaN shows up in the sum instead
    static __device__ __forceinline__ float comb(float a, float b) { return fmaxf(a, b); }
};

// Per-thread sums of the fast kernels: float two-sums (Knuth; exact with --fmad=false), so a
// thread's partial is its values' sum to about float^2 relative error with no float64
// conversion per element (F2F.F64 conversions were the fast kernels' bottleneck on H200:
// about 16 per clock per SM); the partials then combine in float64 across the row.
__device__ __forceinline__ void two_sum_add(float& s, float& c, float x) {
    const float t = s + x;
    const float bp = t - s;
    c += (s - (t - bp)) + (x - bp);
    s = t;
}
// the partial as float64; an infinite sum stays infinite (its compensation is NaN)
__device__ __forceinline__ double two_sum_value(float s, float c) {
    return isfinite(s) ? (double)s + (double)c : (double)s;
}
// float16 / bfloat16 rows: a plain float sum per thread is ~2^-18 relative over 32 values,
// far inside their promises (2^-10, 2^-7), and halves the per-element instruction count
template <class T>
__device__ __forceinline__ void part_add(float& s, float& c, float x) {
    if (sizeof(T) < 4) s += x;
    else two_sum_add(s, c, x);
}
template <class T>
__device__ __forceinline__ double part_value(float s, float c) {
    return sizeof(T) < 4 ? (double)s : two_sum_value(s, c);
}

// exp of the float64 path for rows whose max is not finite: called, not inlined P * V
// times (those rows are rare; the inlined copies dominated the compile time)
__device__ __noinline__ double exp_slow(double v) { return exp(v); }

// exp(v), v <= 0, of the fast Softmax rows (see above)
template <class T>
__device__ __forceinline__ float row_exp(float v) {
    return sizeof(T) < 4 ? __expf(v) : expf(v);
}

// One 32-bit word of a pack <-> its float values: one float, or two float16 / bfloat16
// (the lower address in the low half). float16 converts in hardware (a NaN stays a NaN,
// payload not kept); bfloat16 widens by a shift (exact) and rounds to nearest even in pairs.
template <class T> struct Word;
template <> struct Word<float> {
    static constexpr int N = 1;
    static __device__ __forceinline__ void get(unsigned w, float* f) { f[0] = __uint_as_float(w); }
    static __device__ __forceinline__ unsigned put(const float* f) { return __float_as_uint(f[0]); }
};
template <> struct Word<f16> {
    static constexpr int N = 2;
    static __device__ __forceinline__ void get(unsigned w, float* f) {
        asm("{.reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.f32.f16 %0, lo;\n"
            " cvt.f32.f16 %1, hi;}\n" : "=f"(f[0]), "=f"(f[1]) : "r"(w));
    }
    static __device__ __forceinline__ unsigned put(const float* f) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
        unsigned w;
        asm("cvt.rn.f16x2.f32 %0, %2, %1;\n" : "=r"(w) : "f"(f[0]), "f"(f[1]));
        return w;
#else
        return (unsigned)bits16(__float2half_rn(f[0])) |
               (unsigned)bits16(__float2half_rn(f[1])) << 16;
#endif
    }
};
template <> struct Word<bf16> {
    static constexpr int N = 2;
    static __device__ __forceinline__ void get(unsigned w, float* f) {
        f[0] = __uint_as_float(w << 16);
        f[1] = __uint_as_float(w & 0xffff0000u);
    }
    static __device__ __forceinline__ unsigned put(const float* f) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
        unsigned w;
        asm("cvt.rn.bf16x2.f32 %0, %2, %1;\n" : "=r"(w) : "f"(f[0]), "f"(f[1]));
        return w;
#else
        return (unsigned)bits16(round_from32<bf16>(f[0])) |
               (unsigned)bits16(round_from32<bf16>(f[1])) << 16;
#endif
    }
};

// V values of T <-> float, a pack at a time. A 16-byte pack moves as one uint4 (one
// LDG / LDS / STG.128: a Vec of 2-byte values read element by element compiled to 2-byte
// loads) and converts word by word; V = 1 is one element (rows not 16-byte aligned).
template <class T, int V> struct Pack {
    static_assert(sizeof(T) * V == 16, "packs are 16 bytes or one element");
    static constexpr int N = Word<T>::N;
    static __device__ __forceinline__ void unpack(const uint4& r, float (&f)[V]) {
        Word<T>::get(r.x, &f[0]);
        Word<T>::get(r.y, &f[N]);
        Word<T>::get(r.z, &f[2 * N]);
        Word<T>::get(r.w, &f[3 * N]);
    }
    // read-only data (rows of X, Scale, B): one ld.global.nc.v4 (a plain dereference let
    // the compiler split float16 packs into 4-byte loads)
    static __device__ __forceinline__ void load(const Vec<T, V>* p, float (&f)[V]) {
        unpack(__ldg(reinterpret_cast<const uint4*>(p)), f);
    }
    static __device__ __forceinline__ void store(Vec<T, V>* p, const float (&f)[V]) {
        uint4 r;
        r.x = Word<T>::put(&f[0]);
        r.y = Word<T>::put(&f[N]);
        r.z = Word<T>::put(&f[2 * N]);
        r.w = Word<T>::put(&f[3 * N]);
        *reinterpret_cast<uint4*>(p) = r;
    }
};
template <class T> struct Pack<T, 1> {
    static __device__ __forceinline__ void load(const Vec<T, 1>* p, float (&f)[1]) {
        f[0] = to_f32(p->v[0]);
    }
    static __device__ __forceinline__ void store(Vec<T, 1>* p, const float (&f)[1]) {
        p->v[0] = round_from32<T>(f[0]);
    }
};

// the combination of ``v`` over the row's blockDim.x threads, the same in every thread;
// ``sh`` holds 32 partials (every thread of the block must call it: it synchronizes)
template <class Op, class A>
__device__ __forceinline__ A row_reduce(A v, A* sh) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = Op::comb(v, __shfl_xor_sync(0xffffffffu, v, m));
    const int warps = blockDim.x >> 5;
    if (warps == 1) return v;
    A* s = sh + threadIdx.y * warps;
    __syncthreads();  // the previous reduction's readers are done with sh
    if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
    __syncthreads();
    A r = s[0];
    for (int w = 1; w < warps; ++w) r = Op::comb(r, s[w]);
    return r;
}

// this thread's P packs of the row: pack p is j = threadIdx.x + p * blockDim.x (< nv)
#define EP_FAST_PACKS(P)                                                                  \
    _Pragma("unroll") for (int p = 0; p < (P); ++p)                                      \
        if (active && threadIdx.x + (long long)p * blockDim.x < nv)
#define EP_FAST_J(p) (threadIdx.x + (long long)(p) * blockDim.x)

// ---- getting rows into registers: each calls body(v, active, row) once per row it holds

template <class T, int V, int P, class Body>
__device__ __forceinline__ void rows_direct(const T* __restrict__ x, long long rows,
                                            long long cols, Body body) {
    typedef Vec<T, V> VT;
    const long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
    const bool active = row < rows;
    const long long nv = cols / V;
    const VT* xv = reinterpret_cast<const VT*>(x + (active ? row : 0) * cols);
    float v[P][V];
    EP_FAST_PACKS(P) Pack<T, V>::load(xv + EP_FAST_J(p), v[p]);
    body(v, active, row);
}

// every group but the newest ``stages - 1`` (the rows after the current one, issued ahead)
// has landed (stages: 2, 3 or 4)
__device__ __forceinline__ void cp_async_wait_stages(int stages) {
    if (stages == 2) cp_async_wait<1>();
    else if (stages == 3) cp_async_wait<2>();
    else cp_async_wait<3>();
}

// start copying this thread's packs of row ``r`` (if it exists) into ``dst``; one group
template <int P>
__device__ __forceinline__ void pipe_issue(const uint4* __restrict__ x, long long r,
                                           long long rows, long long nv, uint4* dst) {
    if (r < rows) {
        const uint4* src = x + r * nv;
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const long long j = EP_FAST_J(p);
            if (j < nv) cp_async16(dst + p * blockDim.x, src + j);
        }
    }
    cp_async_commit();
}

// ``stages`` row buffers of blockDim.x * blockDim.y * P packs in dynamic shared memory
template <class T, int V, int P, class Body>
__device__ __forceinline__ void rows_pipelined(const T* __restrict__ x, long long rows,
                                               long long cols, int stages, Body body) {
    extern __shared__ uint4 ep_stage[];
    typedef Vec<T, V> VT;
    static_assert(sizeof(VT) == 16, "pipelined rows move 16-byte packs");
    const uint4* xp = reinterpret_cast<const uint4*>(x);
    const long long nv = cols / V;
    const long long step = (long long)gridDim.x * blockDim.y;
    const int stage_packs = blockDim.x * blockDim.y * P;
    uint4* mine = ep_stage + threadIdx.y * blockDim.x * P + threadIdx.x;
    long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
    for (int s = 0; s < stages - 1; ++s)
        pipe_issue<P>(xp, row + s * step, rows, nv, mine + s * stage_packs);
    int cur = 0;
    for (long long first = (long long)blockIdx.x * blockDim.y; first < rows;
         first += step, row += step) {
        const int next = cur == 0 ? stages - 1 : cur - 1;     // read at the last iteration
        pipe_issue<P>(xp, row + (stages - 1) * step, rows, nv, mine + next * stage_packs);
        cp_async_wait_stages(stages);
        const bool active = row < rows;
        const uint4* src = mine + cur * stage_packs;
        float v[P][V];
        EP_FAST_PACKS(P) Pack<T, V>::unpack(src[p * blockDim.x], v[p]);
        body(v, active, row);
        cur = cur + 1 == stages ? 0 : cur + 1;
    }
    cp_async_wait<0>();
}

// ---- the arithmetic of one row held in registers

template <class T, int V, int P, bool LOG>
__device__ __forceinline__ void softmax_row(float (&v)[P][V], bool active, long long nv,
                                            T* __restrict__ yrow, float* shf, double* shd) {
    typedef Vec<T, V> VT;
    VT* yv = reinterpret_cast<VT*>(yrow);
    float m = -inf32();
    EP_FAST_PACKS(P) {
#pragma unroll
        for (int k = 0; k < V; ++k) m = fmaxf(m, v[p][k]);
    }
    m = row_reduce<MaxF32>(m, shf);
    // the row's branch (fin) is taken by all of its threads; the reductions stay outside it,
    // as other rows of the block may take the other one
    const bool fin = isfinite(m);
    const float shift = fin ? m : 0.0f;
    double part;
    if (fin) {
        float es = 0.0f, ec = 0.0f;
        EP_FAST_PACKS(P) {
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const float e = row_exp<T>(v[p][k] - shift);
                if (!LOG) v[p][k] = e;
                part_add<T>(es, ec, e);
            }
        }
        part = part_value<T>(es, ec);
    } else {
        part = 0.0;
        EP_FAST_PACKS(P) {
#pragma unroll
            for (int k = 0; k < V; ++k) part += exp_slow((double)v[p][k]);
        }
    }
    const double total = row_reduce<SumF64>(part, shd);
    // a row holding +inf is NaN throughout (the spec's exp(x - max)); -inf rows shift by 0
    const double s = (!fin && m > 0.0f) ? default_nan64() : total;
    if (!LOG && fin) {
        const float inv = (float)(1.0 / s);
        EP_FAST_PACKS(P) {
            float o[V];
#pragma unroll
            for (int k = 0; k < V; ++k) o[k] = v[p][k] * inv;
            Pack<T, V>::store(yv + EP_FAST_J(p), o);
        }
    } else {
        const double ls = LOG ? log(s) : 0.0;
        EP_FAST_PACKS(P) {
            VT out;
#pragma unroll
            for (int k = 0; k < V; ++k) {
                if (LOG) out.v[k] = round_from64<T>(((double)v[p][k] - (double)shift) - ls);
                else out.v[k] = round_from64<T>(exp_slow((double)v[p][k]) / s);
            }
            yv[EP_FAST_J(p)] = out;
        }
    }
}

template <class T, int V, int P, bool RMS>
__device__ __forceinline__ void norm_row(float (&v)[P][V], bool active, long long nv,
                                         long long row, const T* __restrict__ scale,
                                         const T* __restrict__ bias, T* __restrict__ yrow,
                                         float* __restrict__ mean_out,
                                         float* __restrict__ inv_out, long long cols,
                                         double eps, double* shd) {
    typedef float W;
    typedef Vec<T, V> VT;
    VT* yv = reinterpret_cast<VT*>(yrow);
    const W eps_w = (W)eps;
    const double n = (double)cols;
    W mean = (W)0;
    if (!RMS) {
        float ms = 0.0f, mc = 0.0f;
        EP_FAST_PACKS(P) {
#pragma unroll
            for (int k = 0; k < V; ++k) part_add<T>(ms, mc, v[p][k]);
        }
        mean = round_from64<W>(row_reduce<SumF64>(part_value<T>(ms, mc), shd) / n);
    }
    // sum of squared deviations (LayerNorm) or of squares (RMSNorm), each squared in W
    float vs = 0.0f, vc = 0.0f;
    EP_FAST_PACKS(P) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            W d = v[p][k] - mean;
            part_add<T>(vs, vc, d * d);
        }
    }
    const W var = round_from64<W>(row_reduce<SumF64>(part_value<T>(vs, vc), shd) / n);
    const W inv = (W)1 / sqrt(var + eps_w);
    const VT* sv = reinterpret_cast<const VT*>(scale);
    const VT* bv = reinterpret_cast<const VT*>(bias);
    EP_FAST_PACKS(P) {
        const long long j = EP_FAST_J(p);
        float sc[V], b[V], o[V];
        Pack<T, V>::load(sv + j, sc);
        if (bias) Pack<T, V>::load(bv + j, b);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            W d = v[p][k] - mean;
            o[k] = d * inv * sc[k];
            if (bias) o[k] = o[k] + b[k];
        }
        Pack<T, V>::store(yv + j, o);     // o is a float: the same single rounding
    }
    if (active && threadIdx.x == 0) {
        if (mean_out) mean_out[row] = mean;
        if (inv_out) inv_out[row] = inv;
    }
}

// ---- kernels: the two ways in, the two arithmetics

template <class T, int V, int P, bool LOG, bool PIPE>
__device__ __forceinline__ void softmax_fast(const T* __restrict__ x, T* __restrict__ y,
                                             long long rows, long long cols, int stages) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    const long long nv = cols / V;
    auto body = [&](float (&v)[P][V], bool active, long long row) {
        softmax_row<T, V, P, LOG>(v, active, nv, y + (active ? row : 0) * cols, shf, shd);
    };
    if constexpr (PIPE) rows_pipelined<T, V, P>(x, rows, cols, stages, body);
    else rows_direct<T, V, P>(x, rows, cols, body);
}

template <class T, int V, int P, bool RMS, bool PIPE>
__device__ __forceinline__ void norm_fast(const T* __restrict__ x, const T* __restrict__ scale,
                                          const T* __restrict__ bias, T* __restrict__ y,
                                          float* __restrict__ mean_out,
                                          float* __restrict__ inv_out, long long rows,
                                          long long cols, double eps, int stages) {
    __shared__ double shd[32];
    const long long nv = cols / V;
    auto body = [&](float (&v)[P][V], bool active, long long row) {
        norm_row<T, V, P, RMS>(v, active, nv, row, scale, bias, y + (active ? row : 0) * cols,
                               mean_out, inv_out, cols, eps, shd);
    };
    if constexpr (PIPE) rows_pipelined<T, V, P>(x, rows, cols, stages, body);
    else rows_direct<T, V, P>(x, rows, cols, body);
}

#undef EP_FAST_PACKS
#undef EP_FAST_J

// ------------------------------------------------------------------ instantiation
#define EP_SOFTMAX_V(T, S, V)                                                               \
extern "C" __global__ void softmax_rows_v##V##_##S(const T* x, T* y, long long rows,        \
                                                   long long cols, int cache_n) {           \
    softmax_rows<T, V, false>(x, y, rows, cols, cache_n);                                   \
}                                                                                           \
extern "C" __global__ void log_softmax_rows_v##V##_##S(const T* x, T* y, long long rows,    \
                                                       long long cols, int cache_n) {       \
    softmax_rows<T, V, true>(x, y, rows, cols, cache_n);                                    \
}                                                                                           \
extern "C" __global__ void layer_norm_v##V##_##S(const T* x, const T* scale, const T* bias, \
        T* y, Stash<T>::type* mean, Stash<T>::type* inv, long long rows, long long cols,    \
        double eps) {                                                                       \
    norm_rows<T, V, false>(x, scale, bias, y, mean, inv, rows, cols, eps);                  \
}                                                                                           \
extern "C" __global__ void rms_norm_v##V##_##S(const T* x, const T* scale, const T* bias,   \
        T* y, Stash<T>::type* mean, Stash<T>::type* inv, long long rows, long long cols,    \
        double eps) {                                                                       \
    norm_rows<T, V, true>(x, scale, bias, y, mean, inv, rows, cols, eps);                   \
}

#define EP_SOFTMAX(T, S, VW)                                                                \
EP_SOFTMAX_V(T, S, 1)                                                                       \
EP_SOFTMAX_V(T, S, VW)                                                                      \
extern "C" __global__ void softmax_cols_##S(const T* x, T* y, long long outer, long long a, \
                                            long long inner) {                              \
    softmax_cols<T, false>(x, y, outer, a, inner);                                          \
}                                                                                           \
extern "C" __global__ void log_softmax_cols_##S(const T* x, T* y, long long outer,          \
                                                long long a, long long inner) {             \
    softmax_cols<T, true>(x, y, outer, a, inner);                                           \
}

#define EP_FAST_KERNELS(T, S, V, P, NAME, PIPE, STAGES_ARG, STAGES)                          \
extern "C" __global__ void __launch_bounds__(1024) softmax_##NAME##_##S(                    \
        const T* x, T* y, long long rows, long long cols STAGES_ARG) {                      \
    softmax_fast<T, V, P, false, PIPE>(x, y, rows, cols, STAGES);                           \
}                                                                                           \
extern "C" __global__ void __launch_bounds__(1024) log_softmax_##NAME##_##S(                \
        const T* x, T* y, long long rows, long long cols STAGES_ARG) {                      \
    softmax_fast<T, V, P, true, PIPE>(x, y, rows, cols, STAGES);                            \
}                                                                                           \
extern "C" __global__ void __launch_bounds__(1024) layer_norm_##NAME##_##S(                 \
        const T* x, const T* scale, const T* bias, T* y, float* mean, float* inv,          \
        long long rows, long long cols, double eps STAGES_ARG) {                            \
    norm_fast<T, V, P, false, PIPE>(x, scale, bias, y, mean, inv, rows, cols, eps, STAGES); \
}                                                                                           \
extern "C" __global__ void __launch_bounds__(1024) rms_norm_##NAME##_##S(                   \
        const T* x, const T* scale, const T* bias, T* y, float* mean, float* inv,          \
        long long rows, long long cols, double eps STAGES_ARG) {                            \
    norm_fast<T, V, P, true, PIPE>(x, scale, bias, y, mean, inv, rows, cols, eps, STAGES);  \
}
#define EP_COMMA ,
// direct rows: *_fast_v<V>_p<P>_<S>(..., rows, cols)
#define EP_FAST_VP(T, S, V, P) EP_FAST_KERNELS(T, S, V, P, fast_v##V##_p##P, false, , 0)
// pipelined rows (16-byte packs): *_pipe_p<P>_<S>(..., rows, cols, int stages)
#define EP_PIPE_P(T, S, V, P) \
    EP_FAST_KERNELS(T, S, V, P, pipe_p##P, true, EP_COMMA int stages, stages)
// P packs of V per thread, at most 32 values (softmax.py fast_geometry): V = 1 or 16 bytes
#define EP_FAST_P124(T, S, V) EP_FAST_VP(T, S, V, 1) EP_FAST_VP(T, S, V, 2) EP_FAST_VP(T, S, V, 4)
#define EP_PIPE_P124(T, S, V) EP_PIPE_P(T, S, V, 1) EP_PIPE_P(T, S, V, 2) EP_PIPE_P(T, S, V, 4)
EP_FAST_P124(float, f32, 1) EP_FAST_VP(float, f32, 1, 8)
EP_FAST_P124(float, f32, 4) EP_FAST_VP(float, f32, 4, 8)
EP_FAST_P124(f16, f16, 1) EP_FAST_VP(f16, f16, 1, 8)
EP_FAST_P124(f16, f16, 8)
EP_FAST_P124(bf16, bf16, 1) EP_FAST_VP(bf16, bf16, 1, 8)
EP_FAST_P124(bf16, bf16, 8)
EP_PIPE_P124(float, f32, 4) EP_PIPE_P(float, f32, 4, 8)
EP_PIPE_P124(f16, f16, 8)
EP_PIPE_P124(bf16, bf16, 8)

// VW: elements per 16-byte vector
EP_SOFTMAX(float, f32, 4)
EP_SOFTMAX(f16, f16, 8)
EP_SOFTMAX(bf16, bf16, 8)
EP_SOFTMAX(double, f64, 2)
