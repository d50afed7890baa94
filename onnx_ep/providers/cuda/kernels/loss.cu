// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//
// Mirrors onnx_ep/providers/cpu_reference/loss.py operation by operation, in float64:
//   safe   = valid ? t : 0                       (valid: t != ignore_index)
//   w      = (valid ? 1.0 : 0.0) [* weight[safe]]
//   loss   = (-logp[n, safe, d]) * w
//   none:  round(loss) per (n, d);  sum: round(sum(loss));  mean: round(sum(loss) / sum(w))
// The two sums replay numpy's pairwise summation (loops_utils.h: 8 accumulators over
// blocks of <= 128, halves rounded down to a multiple of 8) over the flat (N, d...) order,
// in ONE thread over float64 terms the parallel pass stored in the workspace: no atomics,
// the same bits on every run. NLL is therefore exact.
//
// SCE's log-softmax over the class axis (float64): m = max (NaN propagates, no isfinite
// guard, like the reference), s = sum(exp(x - m)) in numpy's order (pairwise when the class
// axis is the contiguous one, i.e. prod(d...) == 1; sequential otherwise), logp =
// (x - m) - log(s). exp/log differ from the host's libm by an ulp of float64 at most, so
// SCE is promised to a tolerance.
//
// Labels are read on the device. A label that is neither ignore_index nor in [0, C) cannot
// raise here (the reference raises): its loss term and its weight are NaN, so the
// "none" output holds NaN there and "sum"/"mean" are NaN.
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

#define EP_PW_BLOCK 128

// numpy's pairwise sum of f(0..n-1), iteratively (an explicit stack instead of recursion).
template <class F>
__device__ double leaf_sum(const F& f, long long lo, long long n) {
    if (n < 8) {
        double res = 0.0;
        for (long long i = 0; i < n; ++i) res += f(lo + i);
        return res;
    }
    double r[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) r[j] = f(lo + j);
    long long i = 8;
    for (; i < n - (n % 8); i += 8) {
#pragma unroll
        for (int j = 0; j < 8; ++j) r[j] += f(lo + i + j);
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += f(lo + i);
    return res;
}

template <class F>
__device__ double pairwise_sum(const F& f, long long n) {
    long long lo[64], len[64];
    double left[64];
    int stage[64];
    int sp = 0;
    lo[0] = 0;
    len[0] = n;
    stage[0] = 0;
    double ret = 0.0;
    for (;;) {
        if (stage[sp] == 0 && len[sp] > EP_PW_BLOCK) {          // descend into the left half
            long long n2 = len[sp] / 2;
            n2 -= n2 % 8;
            stage[sp] = 1;
            lo[sp + 1] = lo[sp];
            len[sp + 1] = n2;
            stage[sp + 1] = 0;
            ++sp;
            continue;
        }
        if (stage[sp] == 0) {
            ret = leaf_sum(f, lo[sp], len[sp]);
        } else if (stage[sp] == 1) {                            // left done: the right half
            long long n2 = len[sp] / 2;
            n2 -= n2 % 8;
            left[sp] = ret;
            stage[sp] = 2;
            lo[sp + 1] = lo[sp] + n2;
            len[sp + 1] = len[sp] - n2;
            stage[sp + 1] = 0;
            ++sp;
            continue;
        } else {
            ret = left[sp] + ret;
        }
        if (sp == 0) return ret;
        --sp;
    }
}

struct ArrayF {
    const double* a;
    __device__ double operator()(long long i) const { return a[i]; }
};

template <class T>
struct ExpF {
    const T* x;          // x + (n * C) * D + d
    long long stride;    // D
    double m;
    __device__ double operator()(long long c) const { return exp(to_f64(x[c * stride]) - m); }
};

__device__ __forceinline__ double nan64() { return __longlong_as_double(0x7ff8000000000000ll); }

// The weight and the loss term of item i = (n, d); logp(c) gives the float64 log-prob.
template <class T, class L, class LogP>
__device__ __forceinline__ void nll_term(const L* target, const T* weight, long long i,
                                         long long C, long long ignore, int has_ignore,
                                         const LogP& logp, double* loss, double* w) {
    long long t = (long long)target[i];
    bool valid = !(has_ignore && t == ignore);
    if (valid && (t < 0 || t >= C)) {      // the reference raises; see the header
        *loss = nan64();
        *w = nan64();
        return;
    }
    long long safe = valid ? t : 0;
    double picked = logp(safe);
    double wt = valid ? 1.0 : 0.0;
    if (weight) wt = wt * to_f64(weight[safe]);
    *w = wt;
    *loss = (-picked) * wt;
}

// nll_term for item i, stored: reduction "none" writes y[i]; otherwise the terms go to
// ws_loss / ws_w for loss_finish.
template <class T, class L, class LogP>
__device__ __forceinline__ void nll_store(const L* target, const T* weight, long long i,
                                          long long C, long long ignore, int has_ignore,
                                          const LogP& logp, T* y, double* ws_loss,
                                          double* ws_w) {
    double loss, w;
    nll_term(target, weight, i, C, ignore, has_ignore, logp, &loss, &w);
    if (y) {
        y[i] = round_from64<T>(loss);
    } else {
        ws_loss[i] = loss;
        ws_w[i] = w;
    }
}

template <class T>
struct PickX {
    const T* x;          // x + (n * C) * D + d
    long long D;
    __device__ double operator()(long long c) const { return to_f64(x[c * D]); }
};

template <class T>
struct PickLogp {
    const T* x;
    long long D;
    double m, ls;
    __device__ double operator()(long long c) const { return (to_f64(x[c * D]) - m) - ls; }
};

// One thread per (n, d), stored by nll_store.
template <class T, class L>
__device__ void nll_terms(const T* __restrict__ x, const L* __restrict__ target,
                          const T* __restrict__ weight, T* __restrict__ y,
                          double* __restrict__ ws_loss, double* __restrict__ ws_w,
                          long long N, long long C, long long D, long long ignore,
                          int has_ignore) {
    const long long M = N * D;
    for (long long i = global_tid(); i < M; i += grid_threads()) {
        long long n = i / D, d = i - n * D;
        PickX<T> logp{x + n * C * D + d, D};
        nll_store(target, weight, i, C, ignore, has_ignore, logp, y, ws_loss, ws_w);
    }
}

// SCE: the same per (n, d), after the column's log-softmax; log_prob (if not null) gets
// every class of the column.
template <class T, class L>
__device__ void sce_terms(const T* __restrict__ x, const L* __restrict__ target,
                          const T* __restrict__ weight, T* __restrict__ y,
                          T* __restrict__ log_prob, double* __restrict__ ws_loss,
                          double* __restrict__ ws_w, long long N, long long C, long long D,
                          long long ignore, int has_ignore) {
    const long long M = N * D;
    for (long long i = global_tid(); i < M; i += grid_threads()) {
        long long n = i / D, d = i - n * D;
        const T* col = x + n * C * D + d;
        double m = -inf64();
        for (long long c = 0; c < C; ++c) {
            double v = to_f64(col[c * D]);
            if (isnan(v) || isnan(m)) m = isnan(m) ? m : v;
            else if (v > m) m = v;
        }
        double s;
        if (D == 1) {
            s = pairwise_sum(ExpF<T>{col, D, m}, C);
        } else {
            s = 0.0;
            for (long long c = 0; c < C; ++c) s += exp(to_f64(col[c * D]) - m);
        }
        PickLogp<T> logp{col, D, m, log(s)};
        if (log_prob) {
            T* lp = log_prob + n * C * D + d;
            for (long long c = 0; c < C; ++c) lp[c * D] = round_from64<T>(logp(c));
        }
        nll_store(target, weight, i, C, ignore, has_ignore, logp, y, ws_loss, ws_w);
    }
}

// One thread: y[0] = round(sum(loss)) or round(sum(loss) / sum(w)) over M terms.
template <class T>
__device__ void loss_finish(const double* __restrict__ ws_loss, const double* __restrict__ ws_w,
                            T* __restrict__ y, long long M, int mean) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double s = pairwise_sum(ArrayF{ws_loss}, M);
    if (mean) s = s / pairwise_sum(ArrayF{ws_w}, M);
    y[0] = round_from64<T>(s);
}

// ------------------------------------------------------------------ instantiation
#define EP_LOSS_L(T, S, L, LS)                                                              \
extern "C" __global__ void nll_terms_##S##_##LS(const T* x, const L* target,               \
        const T* weight, T* y, double* ws_loss, double* ws_w, long long N, long long C,     \
        long long D, long long ignore, int has_ignore) {                                    \
    nll_terms<T, L>(x, target, weight, y, ws_loss, ws_w, N, C, D, ignore, has_ignore);      \
}                                                                                           \
extern "C" __global__ void sce_terms_##S##_##LS(const T* x, const L* target,               \
        const T* weight, T* y, T* log_prob, double* ws_loss, double* ws_w, long long N,     \
        long long C, long long D, long long ignore, int has_ignore) {                       \
    sce_terms<T, L>(x, target, weight, y, log_prob, ws_loss, ws_w, N, C, D, ignore,         \
                    has_ignore);                                                            \
}

#define EP_LOSS(T, S)                                                                       \
EP_LOSS_L(T, S, long long, i64)                                                             \
EP_LOSS_L(T, S, int, i32)                                                                   \
extern "C" __global__ void loss_finish_##S(const double* ws_loss, const double* ws_w, T* y, \
                                           long long M, int mean) {                         \
    loss_finish<T>(ws_loss, ws_w, y, M, mean);                                              \
}

EP_LOSS(float, f32)
EP_LOSS(f16, f16)
EP_LOSS(bf16, bf16)
EP_LOSS(double, f64)
