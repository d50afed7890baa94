// Indexing: Pad, GatherElements, GatherND, ScatterElements / Scatter, ScatterND, CumSum,
// CumProd, TopK, ReverseSequence, and the fill behind Dropout's mask.
//
// Every kernel is one thread per output element (or per line for the scans), plain
// loops, int64 indexing, no shared memory beyond Pad's per-block table, no atomics:
// the result is the same bytes every run.
//
// Indices are read on the device (no host sync). The reference raises on an index
// outside [-dim, dim); a kernel cannot, so each kernel documents what it does instead
// and none ever reads or writes out of bounds.
//
// Movement kernels (Pad, GatherElements, ReverseSequence, fill) are instantiated by
// element SIZE (x1 .. x8; GatherND also x16, for slices the host widens); the arithmetic
// ones (scatter reductions, scans, TopK) by dtype.
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

__device__ __forceinline__ long long read_index(const void* p, long long i, int is64) {
    return is64 ? ((const long long*)p)[i] : (long long)((const int*)p)[i];
}

// ------------------------------------------------------------------ fill (Dropout mask)
// y[i] = the low sizeof(T) bytes of ``bits`` (little endian)
template <class T>
__device__ void fill(T* __restrict__ y, unsigned long long bits, long long n) {
    T v;
    memcpy(&v, &bits, sizeof(T));
    for (long long i = global_tid(); i < n; i += grid_threads()) y[i] = v;
}

// ------------------------------------------------------------------ Pad
// out.size: output dims; in.size / in.stride: input dims and strides (elements).
// pads: the node's int64 device tensor (2 * k entries: k begins, then k ends) or null,
// then attr_pads carries them (size = begins, stride = ends, one per axis, opset < 11).
// axes: optional device tensor of k axes (int32/int64); without it entry j is axis j.
// cval: optional device scalar of T; without it the constant is ``cbits``' low bytes.
// mode: 0 constant, 1 reflect, 2 edge, 3 wrap. Negative pads crop first (as the
// reference). Invalid pads (the reference raises) leave the output unspecified but
// every read is clamped into the input.
template <class T>
__device__ void pad(const T* __restrict__ x, T* __restrict__ y, Geo out, Geo in,
                    const long long* pads, Geo attr_pads, const void* axes, int axes64,
                    int k, const T* cval, unsigned long long cbits, int mode, long long n) {
    __shared__ long long lo_s[EP_MAX_DIMS];   // crop start in the input
    __shared__ long long pb_s[EP_MAX_DIMS];   // non-negative begin pad
    __shared__ long long len_s[EP_MAX_DIMS];  // length of the cropped input axis
    __shared__ T cv_s;
    if (threadIdx.x == 0) {
        long long b[EP_MAX_DIMS], e[EP_MAX_DIMS];
        for (int d = 0; d < in.ndim; ++d) { b[d] = 0; e[d] = 0; }
        if (pads) {
            for (int j = 0; j < k; ++j) {
                long long a = axes ? read_index(axes, j, axes64) : j;
                if (a < 0) a += in.ndim;
                if (a < 0 || a >= in.ndim) continue;   // invalid model; the reference raises
                b[a] = pads[j];
                e[a] = pads[k + j];
            }
        } else {
            for (int d = 0; d < in.ndim && d < attr_pads.ndim; ++d) {
                b[d] = attr_pads.size[d];
                e[d] = attr_pads.stride[d];
            }
        }
        for (int d = 0; d < in.ndim; ++d) {
            long long lo = b[d] < 0 ? -b[d] : 0, cut_hi = e[d] < 0 ? -e[d] : 0;
            long long len = in.size[d] - lo - cut_hi;
            lo_s[d] = lo;
            pb_s[d] = b[d] > 0 ? b[d] : 0;
            len_s[d] = len > 0 ? len : 0;
        }
        if (cval) cv_s = *cval;
        else memcpy(&cv_s, &cbits, sizeof(T));
    }
    __syncthreads();
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long rem = i, off = 0;
        bool outside = false;
        for (int d = out.ndim - 1; d >= 0; --d) {
            long long q = rem / out.size[d];
            long long c = rem - q * out.size[d] - pb_s[d];   // coordinate in the cropped axis
            rem = q;
            long long len = len_s[d];
            if (c < 0 || c >= len) {
                if (mode == 0 || len == 0) { outside = true; continue; }
                if (mode == 2) {                 // edge
                    c = c < 0 ? 0 : len - 1;
                } else if (mode == 1) {          // reflect (no edge repeat), numpy's rule
                    if (len == 1) c = 0;
                    else {
                        long long p = 2 * (len - 1);
                        c %= p;
                        if (c < 0) c += p;
                        if (c >= len) c = p - c;
                    }
                } else {                         // wrap
                    c %= len;
                    if (c < 0) c += len;
                }
            }
            off += (lo_s[d] + c) * in.stride[d];
        }
        y[i] = outside ? cv_s : x[off];
    }
}

// ------------------------------------------------------------------ GatherElements
// y has the indices' shape ig.size; ig.stride are the DATA strides. The index along
// ``axis`` comes from idx (negative wraps). An index outside [-axis_dim, axis_dim)
// (the reference raises) writes zeros; nothing is read out of bounds.
template <class T>
__device__ void gather_elements(const T* __restrict__ x, const void* __restrict__ idx,
                                int idx64, T* __restrict__ y, Geo ig, int axis,
                                long long axis_dim, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long a = read_index(idx, i, idx64);
        if (a < 0) a += axis_dim;
        T v;
        if (a >= 0 && a < axis_dim) {
            long long rem = i, off = 0;
            for (int d = ig.ndim - 1; d >= 0; --d) {
                long long q = rem / ig.size[d];
                long long c = rem - q * ig.size[d];
                rem = q;
                off += (d == axis ? a : c) * ig.stride[d];
            }
            v = x[off];
        } else {
            memset(&v, 0, sizeof(T));
        }
        y[i] = v;
    }
}

// ------------------------------------------------------------------ GatherND
// y viewed as [npos, inner] (npos = batch * positions, one index tuple of m entries per
// row, read from idx at row * m); data as [batch, g.size[0] .. g.size[m-1], inner] with
// batch_stride elements per batch entry and g.stride the element strides of the m indexed
// dims. Row q reads batch entry q / per_batch. Negative entries wrap; a tuple with an
// entry outside [-dim, dim) (the reference raises) writes a row of zeros; nothing is read
// out of bounds. Counts are in elements of the instantiated width.
template <class T>
__device__ void gather_nd(const T* __restrict__ x, const void* __restrict__ idx, int idx64,
                          T* __restrict__ y, Geo g, long long per_batch,
                          long long batch_stride, long long inner, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long q = i / inner, c = i - q * inner;
        long long off = (q / per_batch) * batch_stride + c;
        bool inside = true;
        for (int d = 0; d < g.ndim; ++d) {
            long long a = read_index(idx, q * g.ndim + d, idx64);
            if (a < 0) a += g.size[d];
            if (a < 0 || a >= g.size[d]) { inside = false; break; }
            off += a * g.stride[d];
        }
        T v;
        if (inside) v = x[off];
        else memset(&v, 0, sizeof(T));
        y[i] = v;
    }
}

// ------------------------------------------------------------------ scatter arithmetic
// Reductions mirror numpy's ufunc.at in the reference, step by step:
// float32 / float64 in their type; float16 per step in float32 rounded back to float16
// (numpy's half loops); bfloat16 folds every update in float32 and rounds ONCE at the end
// (the reference's ml_dtypes path); integers wrap; bool: add = or, mul = and,
// max = or, min = and. max/min keep NaN like numpy: (a >= b || isnan(a)) ? a : b.
enum { R_NONE = 0, R_ADD = 1, R_MUL = 2, R_MAX = 3, R_MIN = 4 };

template <class A> __device__ __forceinline__ bool nan_of(A) { return false; }
__device__ __forceinline__ bool nan_of(float v) { return isnan(v); }
__device__ __forceinline__ bool nan_of(double v) { return isnan(v); }

template <class A> __device__ __forceinline__ A fold_float(int r, A a, A b) {
    switch (r) {
    case R_ADD: return a + b;
    case R_MUL: return a * b;
    case R_MAX: return (a >= b || nan_of(a)) ? a : b;
    case R_MIN: return (a <= b || nan_of(a)) ? a : b;
    default: return b;
    }
}
template <class A> __device__ __forceinline__ A fold_int(int r, A a, A b) {
    typedef unsigned long long U;
    switch (r) {
    case R_ADD: return (A)((U)(long long)a + (U)(long long)b);
    case R_MUL: return (A)((U)(long long)a * (U)(long long)b);
    case R_MAX: return a >= b ? a : b;
    case R_MIN: return a <= b ? a : b;
    default: return b;
    }
}

template <class T> struct Fold {             // integers
    typedef T Acc;
    static __device__ Acc load(T v) { return v; }
    static __device__ T store(Acc a) { return a; }
    static __device__ Acc step(int r, Acc a, T u) { return fold_int<T>(r, a, u); }
};
template <> struct Fold<float> {
    typedef float Acc;
    static __device__ Acc load(float v) { return v; }
    static __device__ float store(Acc a) { return a; }
    static __device__ Acc step(int r, Acc a, float u) { return fold_float<float>(r, a, u); }
};
template <> struct Fold<double> {
    typedef double Acc;
    static __device__ Acc load(double v) { return v; }
    static __device__ double store(Acc a) { return a; }
    static __device__ Acc step(int r, Acc a, double u) { return fold_float<double>(r, a, u); }
};
template <> struct Fold<f16> {               // per step in float32, rounded each step
    typedef f16 Acc;
    static __device__ Acc load(f16 v) { return v; }
    static __device__ f16 store(Acc a) { return a; }
    static __device__ Acc step(int r, Acc a, f16 u) {
        if (r == R_NONE) return u;
        return round_from32<f16>(fold_float<float>(r, to_f32(a), to_f32(u)));
    }
};
template <> struct Fold<bf16> {              // whole fold in float32, rounded once
    typedef float Acc;
    static __device__ Acc load(bf16 v) { return to_f32(v); }
    static __device__ bf16 store(Acc a) { return round_from32<bf16>(a); }
    static __device__ Acc step(int r, Acc a, bf16 u) {
        return fold_float<float>(r, a, to_f32(u));
    }
};
template <> struct Fold<bool> {
    typedef bool Acc;
    static __device__ Acc load(bool v) { return v; }
    static __device__ bool store(Acc a) { return a; }
    static __device__ Acc step(int r, Acc a, bool u) {
        return (r == R_ADD || r == R_MAX) ? (a || u) : (r == R_MUL || r == R_MIN) ? (a && u) : u;
    }
};

// ------------------------------------------------------------------ ScatterElements
// One thread per OUTPUT element: start from data, then walk the updates of its line
// (same non-axis coordinates, the indices' axis in increasing order = the reference's
// index order) and fold those whose index hits this element. Duplicates are therefore
// applied in index order, deterministically. ds: data dims; is: indices dims with
// contiguous indices strides. Out-of-range indices (the reference raises) hit nothing.
template <class T>
__device__ void scatter_elements(const T* __restrict__ x, const void* __restrict__ idx,
                                 int idx64, const T* __restrict__ upd, T* __restrict__ y,
                                 Geo ds, Geo is, int axis, int reduction, long long n) {
    typedef Fold<T> F;
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long rem = i, base = 0, target = 0;
        bool inside = true;
        for (int d = ds.ndim - 1; d >= 0; --d) {
            long long q = rem / ds.size[d];
            long long c = rem - q * ds.size[d];
            rem = q;
            if (d == axis) target = c;
            else if (c >= is.size[d]) inside = false;
            else base += c * is.stride[d];
        }
        typename F::Acc acc = F::load(x[i]);
        if (inside) {
            long long dim = ds.size[axis];
            for (long long j = 0; j < is.size[axis]; ++j) {
                long long p = base + j * is.stride[axis];
                long long a = read_index(idx, p, idx64);
                if (a < 0) a += dim;
                if (a == target) acc = F::step(reduction, acc, upd[p]);
            }
        }
        y[i] = F::store(acc);
    }
}

// ------------------------------------------------------------------ ScatterND
// One thread per OUTPUT element: data viewed as [prefix (m dims ds.size[0..m)), inner];
// walk the npos index tuples in order and fold updates[pos, s] for every tuple naming
// this element's prefix (negative entries wrap; out-of-range tuples hit nothing).
template <class T>
__device__ void scatter_nd(const T* __restrict__ x, const void* __restrict__ idx, int idx64,
                           const T* __restrict__ upd, T* __restrict__ y, Geo ds, int m,
                           long long npos, long long inner, int reduction, long long n) {
    typedef Fold<T> F;
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long q = i / inner, s = i - q * inner;
        long long coord[EP_MAX_DIMS];
        for (int d = m - 1; d >= 0; --d) {
            long long qq = q / ds.size[d];
            coord[d] = q - qq * ds.size[d];
            q = qq;
        }
        typename F::Acc acc = F::load(x[i]);
        for (long long p = 0; p < npos; ++p) {
            bool hit = true;
            for (int d = 0; d < m && hit; ++d) {
                long long a = read_index(idx, p * m + d, idx64);
                if (a < 0) a += ds.size[d];
                hit = a == coord[d];
            }
            if (hit) acc = F::step(reduction, acc, upd[p * inner + s]);
        }
        y[i] = F::store(acc);
    }
}

// ------------------------------------------------------------------ CumSum / CumProd
// One thread per line, sequential along the axis in the reference's order and type:
// float16/bfloat16 accumulate in float32 and round each output once; float32/float64
// in their type (numpy's accumulate is sequential); integers wrap. The first element
// starts the fold (no 0 + x, which would turn -0.0 into +0.0); ``exclusive`` writes the
// identity (0 or 1) first. The axis is the node's device scalar (normalized here; an
// invalid axis, which the reference rejects, writes nothing).
template <class T> struct Scan { typedef T Acc; };
template <> struct Scan<f16> { typedef float Acc; };
template <> struct Scan<bf16> { typedef float Acc; };
__device__ __forceinline__ float scan_load(f16 v) { return to_f32(v); }
__device__ __forceinline__ float scan_load(bf16 v) { return to_f32(v); }
template <class T> __device__ __forceinline__ T scan_load(T v) { return v; }
template <class T, class A> __device__ __forceinline__ T scan_store(A a) { return (T)a; }
template <> __device__ __forceinline__ f16 scan_store<f16, float>(float a) { return round_from32<f16>(a); }
template <> __device__ __forceinline__ bf16 scan_store<bf16, float>(float a) { return round_from32<bf16>(a); }

template <class A> __device__ __forceinline__ A scan_op(int prod, A a, A b) {
    if constexpr (Traits<A>::is_float) return prod ? a * b : a + b;
    else return fold_int<A>(prod ? R_MUL : R_ADD, a, b);
}

template <class T>
__device__ void cumulative(const T* __restrict__ x, T* __restrict__ y, Geo g,
                           const void* axis_p, int axis64, int prod, int exclusive,
                           int reverse, long long n) {
    typedef typename Scan<T>::Acc A;
    long long a = read_index(axis_p, 0, axis64);
    if (a < 0) a += g.ndim;
    if (a < 0 || a >= g.ndim) return;
    long long dim = g.size[a], inner = 1;
    for (int d = (int)a + 1; d < g.ndim; ++d) inner *= g.size[d];
    if (dim == 0) return;
    long long lines = n / dim;
    for (long long t = global_tid(); t < lines; t += grid_threads()) {
        long long o = t / inner, c = t - o * inner;
        long long base = o * dim * inner + c;
        A acc = (A)(prod ? 1 : 0);
        for (long long s = 0; s < dim; ++s) {
            long long p = base + (reverse ? dim - 1 - s : s) * inner;
            A v = scan_load(x[p]);
            if (exclusive) y[p] = s ? scan_store<T, A>(acc) : scan_store<T, A>((A)(prod ? 1 : 0));
            acc = s ? scan_op<A>(prod, acc, v) : v;
            if (!exclusive) y[p] = scan_store<T, A>(acc);
        }
    }
}

// ------------------------------------------------------------------ TopK
// One thread per INPUT element: its rank in the reference's stable order (largest:
// descending, smallest: ascending; equal values keep the lower index first; NaN counts as
// the largest value, NaNs among themselves by index) is the count of elements that
// precede it; ranks < k write values[rank] and indices[rank]. O(dim) per element.
// x viewed as [outer, dim, inner]; outputs [outer, k, inner]. ``sorted`` is ignored
// (the reference always sorts).
template <class T> struct Key { typedef T type; };
template <> struct Key<f16> { typedef float type; };
template <> struct Key<bf16> { typedef float type; };
__device__ __forceinline__ float key_of(f16 v) { return to_f32(v); }
__device__ __forceinline__ float key_of(bf16 v) { return to_f32(v); }
template <class T> __device__ __forceinline__ T key_of(T v) { return v; }

template <class T>
__device__ void top_k(const T* __restrict__ x, T* __restrict__ vals, long long* __restrict__ ind,
                      long long outer, long long dim, long long inner, long long k,
                      int largest) {
    typedef typename Key<T>::type K;
    long long n = outer * dim * inner;
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long q = i / inner, c = i - q * inner;
        long long o = q / dim, j = q - o * dim;
        const T* line = x + o * dim * inner + c;
        K v = key_of(line[j * inner]);
        bool vn = nan_of(v);
        long long rank = 0;
        for (long long jj = 0; jj < dim && rank < k; ++jj) {
            if (jj == j) continue;
            K w = key_of(line[jj * inner]);
            bool wn = nan_of(w), before;
            if (vn) before = wn ? jj < j : !largest;
            else if (wn) before = largest;
            else if (w == v) before = jj < j;
            else before = largest ? w > v : w < v;
            rank += before;
        }
        if (rank < k) {
            long long out = (o * k + rank) * inner + c;
            vals[out] = line[j * inner];
            ind[out] = j;
        }
    }
}

// ------------------------------------------------------------------ ReverseSequence
// g.size: data dims (time and batch axes are 0 and 1 in some order); lens: int64 per
// batch entry read on the device, clamped to [0, n_time] (the reference raises outside).
template <class T>
__device__ void reverse_sequence(const T* __restrict__ x, T* __restrict__ y,
                                 const long long* __restrict__ lens, int time_axis, Geo g,
                                 long long n) {
    long long inner = 1;
    for (int d = 2; d < g.ndim; ++d) inner *= g.size[d];
    long long n1 = g.size[1];
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long q = i / inner, r = i - q * inner;
        long long c0 = q / n1, c1 = q - c0 * n1;
        long long t = time_axis == 0 ? c0 : c1, b = time_axis == 0 ? c1 : c0;
        long long nt = g.size[time_axis];
        long long L = lens[b];
        L = L < 0 ? 0 : (L > nt ? nt : L);
        long long src = t < L ? L - 1 - t : t;
        long long s0 = time_axis == 0 ? src : c0, s1 = time_axis == 0 ? c1 : src;
        y[i] = x[(s0 * n1 + s1) * inner + r];
    }
}

// ------------------------------------------------------------------ instantiations
#define EP_INDEX_MOVE(S)                                                                    \
extern "C" __global__ void fill_##S(S##_t* y, unsigned long long bits, long long n) {        \
    fill<S##_t>(y, bits, n);                                                                \
}                                                                                           \
extern "C" __global__ void pad_##S(const S##_t* x, S##_t* y, Geo out, Geo in,                \
                                   const long long* pads, Geo attr_pads, const void* axes,   \
                                   int axes64, int k, const S##_t* cval,                     \
                                   unsigned long long cbits, int mode, long long n) {        \
    pad<S##_t>(x, y, out, in, pads, attr_pads, axes, axes64, k, cval, cbits, mode, n);       \
}                                                                                           \
extern "C" __global__ void gather_elements_##S(const S##_t* x, const void* idx, int idx64,   \
                                               S##_t* y, Geo ig, int axis,                   \
                                               long long axis_dim, long long n) {            \
    gather_elements<S##_t>(x, idx, idx64, y, ig, axis, axis_dim, n);                         \
}                                                                                           \
extern "C" __global__ void reverse_sequence_##S(const S##_t* x, S##_t* y,                    \
                                                const long long* lens, int time_axis, Geo g, \
                                                long long n) {                              \
    reverse_sequence<S##_t>(x, y, lens, time_axis, g, n);                                    \
}

EP_INDEX_MOVE(x1)
EP_INDEX_MOVE(x2)
EP_INDEX_MOVE(x4)
EP_INDEX_MOVE(x8)

#define EP_INDEX_GATHER_ND(S)                                                               \
extern "C" __global__ void gather_nd_##S(const S##_t* x, const void* idx, int idx64,         \
                                         S##_t* y, Geo g, long long per_batch,               \
                                         long long batch_stride, long long inner,            \
                                         long long n) {                                     \
    gather_nd<S##_t>(x, idx, idx64, y, g, per_batch, batch_stride, inner, n);                \
}

EP_INDEX_GATHER_ND(x1)
EP_INDEX_GATHER_ND(x2)
EP_INDEX_GATHER_ND(x4)
EP_INDEX_GATHER_ND(x8)
EP_INDEX_GATHER_ND(x16)

#define EP_INDEX_SCATTER(S, T)                                                              \
extern "C" __global__ void scatter_elements_##S(const T* x, const void* idx, int idx64,      \
                                                const T* upd, T* y, Geo ds, Geo is,          \
                                                int axis, int reduction, long long n) {      \
    scatter_elements<T>(x, idx, idx64, upd, y, ds, is, axis, reduction, n);                  \
}                                                                                           \
extern "C" __global__ void scatter_nd_##S(const T* x, const void* idx, int idx64,            \
                                          const T* upd, T* y, Geo ds, int m, long long npos, \
                                          long long inner, int reduction, long long n) {     \
    scatter_nd<T>(x, idx, idx64, upd, y, ds, m, npos, inner, reduction, n);                  \
}

#define EP_INDEX_TOPK(S, T)                                                                 \
extern "C" __global__ void top_k_##S(const T* x, T* vals, long long* ind, long long outer,   \
                                     long long dim, long long inner, long long k,            \
                                     int largest) {                                         \
    top_k<T>(x, vals, ind, outer, dim, inner, k, largest);                                   \
}

#define EP_INDEX_SCAN(S, T)                                                                 \
extern "C" __global__ void cumulative_##S(const T* x, T* y, Geo g, const void* axis_p,       \
                                          int axis64, int prod, int exclusive, int reverse,  \
                                          long long n) {                                    \
    cumulative<T>(x, y, g, axis_p, axis64, prod, exclusive, reverse, n);                     \
}

EP_INDEX_SCATTER(f32, float)
EP_INDEX_SCATTER(f16, f16)
EP_INDEX_SCATTER(bf16, bf16)
EP_INDEX_SCATTER(f64, double)
EP_INDEX_SCATTER(i64, long long)
EP_INDEX_SCATTER(i32, int)
EP_INDEX_SCATTER(i16, short)
EP_INDEX_SCATTER(i8, signed char)
EP_INDEX_SCATTER(u8, unsigned char)
EP_INDEX_SCATTER(b8, bool)

EP_INDEX_TOPK(f32, float)
EP_INDEX_TOPK(f16, f16)
EP_INDEX_TOPK(bf16, bf16)
EP_INDEX_TOPK(f64, double)
EP_INDEX_TOPK(i64, long long)
EP_INDEX_TOPK(i32, int)
EP_INDEX_TOPK(i16, short)
EP_INDEX_TOPK(i8, signed char)
EP_INDEX_TOPK(u8, unsigned char)
EP_INDEX_TOPK(u16, unsigned short)
EP_INDEX_TOPK(u32, unsigned int)
EP_INDEX_TOPK(u64, unsigned long long)

EP_INDEX_SCAN(f32, float)
EP_INDEX_SCAN(f16, f16)
EP_INDEX_SCAN(bf16, bf16)
EP_INDEX_SCAN(f64, double)
EP_INDEX_SCAN(i64, long long)
EP_INDEX_SCAN(i32, int)
EP_INDEX_SCAN(u32, unsigned int)
EP_INDEX_SCAN(u64, unsigned long long)
