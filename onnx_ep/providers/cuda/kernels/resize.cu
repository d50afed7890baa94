// Image geometry: Resize / Upsample (nearest, linear, cubic; antialias; every coordinate
// transformation mode), GridSample, CenterCropPad (a gather with zero fill, exact),
// AffineGrid and Col2Im. One thread per output element, int64 indexing,
// grid-stride loops, 256 threads per block.
//
// Parity with cpu_reference (its resize.py): the same float64 operations in the same
// order (this file is compiled with --fmad=false), so the bytes match:
// - Resize interpolates axis by axis in ascending axis order in float64, so an output is
//   sum_k w_k(a_last) * (... sum_j w_j(a_first) * x ...): the innermost sum runs over the
//   first resized axis. Each level sums tap products w * v from 0.0 as numpy's add.reduce
//   does: in tap order, except that numpy sums a row of >= 8 taps pairwise (8
//   accumulators) when the reduced axis is innermost in memory (no trailing elements);
//   the host passes that flag per axis. Antialias / exclude_outside coefficient
//   normalizers are such innermost row sums too.
// - Coordinates, coefficients and the nearest rounding follow resize.py line by line.
// - Scales, sizes and roi are read on the device (never copied to the host): the output
//   shape comes from the plan, the coordinates need the actual scale values.
// - GridSample: coordinates, weights (products in dim order) and the tap accumulation
//   (out += w * v in itertools.product order, from 0.0) as cpu_reference does, rounded once.
#include "ep_float.cuh"

using namespace ep;

#define RS_MAX 8

// Resize geometry by value (Python: kernels/resize.py ResizeGeo, same layout)
struct ResizeGeo {
    long long in[RS_MAX];
    long long out[RS_MAX];
    long long stride[RS_MAX];  // input strides in elements
    int pos[RS_MAX];           // position of dim d in scales / sizes / roi, -1: not resized
    int pairwise[RS_MAX];      // numpy sums this axis' taps pairwise (nothing after it)
    int ndim, naxes;
    int mode;                  // 0 nearest, 1 linear, 2 cubic
    int coord;                 // see COORD_* below
    int nearest;               // 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil, 4 simple
    int exclude_outside, antialias;
    int policy;                // keep_aspect_ratio_policy: 0 stretch, 1 not_larger, 2 not_smaller
    int roi_kind;              // 0 float32, 1 float16, 2 float64
    double cubic_a, extrapolation;
};

enum { COORD_HALF_PIXEL = 0, COORD_HALF_PIXEL_SYMMETRIC = 1, COORD_PYTORCH_HALF_PIXEL = 2,
       COORD_ALIGN_CORNERS = 3, COORD_ASYMMETRIC = 4, COORD_TF_CROP_AND_RESIZE = 5,
       COORD_TF_HALF_PIXEL_FOR_NN = 6 };

// the device-side inputs that steer the coordinates (null when absent)
struct ResizeParams {
    const float* scales;
    const long long* sizes;
    const void* roi;
};

// ------------------------------------------------------------------ store a float64 result
template <class T> struct Store {
    // integers: round half to even, then saturate (resize.py _to_dtype)
    static __device__ __forceinline__ T from64(double v, double lo, double hi) {
        double r = rint(v);
        r = r < lo ? lo : (r > hi ? hi : r);
        return (T)(long long)r;
    }
};
template <> struct Store<float> {
    static __device__ __forceinline__ float from64(double v, double, double) { return round_from64<float>(v); }
};
template <> struct Store<f16> {
    static __device__ __forceinline__ f16 from64(double v, double, double) { return round_from64<f16>(v); }
};
template <> struct Store<bf16> {
    static __device__ __forceinline__ bf16 from64(double v, double, double) { return round_from64<bf16>(v); }
};

template <class T> __device__ __forceinline__ double load64(T v) { return (double)v; }
template <> __device__ __forceinline__ double load64<float>(float v) { return to_f64(v); }
template <> __device__ __forceinline__ double load64<f16>(f16 v) { return to_f64(v); }
template <> __device__ __forceinline__ double load64<bf16>(bf16 v) { return to_f64(v); }

// ------------------------------------------------------------------ numpy's summation orders
// add.reduce of n values pushed in index order, from the identity 0.0: in order, except
// that a row of 8..128 values along an innermost axis is summed pairwise as numpy's
// pairwise_sum does (8 accumulators, combined as a tree, then the rest in order). Values
// arrive one at a time, so sums nest without recursion (no device function calls itself:
// ptxas knows the whole stack). numpy splits rows over 128 values in halves first: the
// host refuses those (resize.py MAX_TAPS).
struct NpSum {
    double r[8];
    double res;
    long long i, n, body;
    bool pw;
    __device__ __forceinline__ void init(long long count, bool pairwise) {
        n = count;
        i = 0;
        pw = pairwise && n >= 8;
        body = n - n % 8;
        res = 0.0;
    }
    __device__ __forceinline__ double tree() const {
        return ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    }
    __device__ __forceinline__ void push(double v) {
        if (!pw) res += v;
        else if (i < 8) r[i] = v;
        else if (i < body) r[i % 8] += v;
        else {
            if (i == body) res = tree();
            res += v;
        }
        ++i;
    }
    __device__ __forceinline__ double result() const {
        if (!pw) return res;
        return 0.0 + (body == n ? tree() : res);
    }
};

// ------------------------------------------------------------------ per-axis plan
struct AxisPlan {
    double coord, scale, ratio, total1, total2;
    long long base;     // nearest: the clipped index; linear/cubic: floor(coord), adjusted
    long long start, n; // tap offsets start .. start + n - 1 from base
    bool skip, outside, aa;
};

__device__ __forceinline__ double roi_value(const ResizeGeo& g, const void* roi, int i) {
    if (g.roi_kind == 1) return to_f64(((const f16*)roi)[i]);
    if (g.roi_kind == 2) return ((const double*)roi)[i];
    return to_f64(((const float*)roi)[i]);
}

// the scale of dim d (1.0 for a dim that is not resized), as resize.py derives it
__device__ double axis_scale(const ResizeGeo& g, const ResizeParams& p, int d) {
    int i = g.pos[d];
    if (i < 0) return 1.0;
    if (p.scales) return (double)p.scales[i];
    if (g.policy == 0) return (double)p.sizes[i] / (double)g.in[d];
    double common = 0.0;
    bool first = true;
    for (int e = 0; e < g.ndim; ++e) {
        int j = g.pos[e];
        if (j < 0) continue;
        double s = (double)p.sizes[j] / (double)g.in[e];
        // python min()/max(): keep the first unless a later one is strictly better
        if (first || (g.policy == 1 ? s < common : s > common)) common = s;
        first = false;
    }
    return common;
}

__device__ double source_coord(int mode, double y, long long out_len, long long in_len,
                               double scale, double lo, double hi) {
    double width = scale * (double)in_len;
    switch (mode) {
    case COORD_HALF_PIXEL:
        return (y + 0.5) / scale - 0.5;
    case COORD_HALF_PIXEL_SYMMETRIC: {
        double offset = (double)in_len / 2.0 * (1.0 - (double)out_len / width);
        return offset + (y + 0.5) / scale - 0.5;
    }
    case COORD_PYTORCH_HALF_PIXEL:
        return width != 1.0 ? (y + 0.5) / scale - 0.5 : -0.5;
    case COORD_ALIGN_CORNERS:
        return width != 1.0 ? y * (double)(in_len - 1) / (width - 1.0) : 0.0;
    case COORD_ASYMMETRIC:
        return y / scale;
    case COORD_TF_HALF_PIXEL_FOR_NN:
        return (y + 0.5) / scale;
    default:  // tf_crop_and_resize
        if (width == 1.0)
            return (hi - lo) * (double)(in_len - 1) / 2.0 + lo * (double)(in_len - 1);
        return y * (hi - lo) * (double)(in_len - 1) / (width - 1.0) + lo * (double)(in_len - 1);
    }
}

__device__ __forceinline__ long long nearest_index(double x, int mode, double scale) {
    double fl = floor(x);
    double frac = x - fl;
    double idx;
    if (mode == 0) idx = frac <= 0.5 ? fl : fl + 1.0;
    else if (mode == 1) idx = frac < 0.5 ? fl : fl + 1.0;
    else if (mode == 2) idx = fl;
    else if (mode == 3) idx = ceil(x);
    else idx = scale < 1.0 ? ceil(x) : fl;  // "simple": Resize-10 / Upsample
    return (long long)idx;
}

__device__ __forceinline__ double cubic(double s, double a) {
    s = fabs(s);
    double near = ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
    double far = ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a;
    return s <= 1.0 ? near : (s < 2.0 ? far : 0.0);
}

// the coefficient of tap k before normalization (resize.py _kernel)
__device__ __forceinline__ double raw_coeff(const ResizeGeo& g, const AxisPlan& a, long long k) {
    double off = (double)(a.start + k);
    if (a.aa) {
        double dist = (off - a.ratio) * a.scale;
        if (g.mode == 1) {
            double c = 1.0 - fabs(dist);
            return c < 0.0 ? 0.0 : (c > 1.0 ? 1.0 : c);
        }
        return cubic(dist, g.cubic_a);
    }
    if (g.mode == 1) return k == 0 ? 1.0 - a.ratio : a.ratio;
    return cubic(off - a.ratio, g.cubic_a);
}

__device__ __forceinline__ double coeff1(const ResizeGeo& g, const AxisPlan& a, long long k) {
    double c = raw_coeff(g, a, k);
    return a.aa ? c / a.total1 : c;
}

__device__ __forceinline__ bool tap_outside(const AxisPlan& a, long long k, long long in_len) {
    long long idx = a.base + a.start + k;
    return idx < 0 || idx >= in_len;
}

__device__ __forceinline__ double coeff(const ResizeGeo& g, const AxisPlan& a, long long k,
                                        long long in_len) {
    double c = coeff1(g, a, k);
    if (!g.exclude_outside) return c;
    c = tap_outside(a, k, in_len) ? 0.0 : c;
    return c / a.total2;
}

__device__ void plan_axis(const ResizeGeo& g, const ResizeParams& p, int d, long long o,
                          AxisPlan& a) {
    a.scale = axis_scale(g, p, d);
    double lo = 0.0, hi = 1.0;
    if (g.coord == COORD_TF_CROP_AND_RESIZE && g.pos[d] >= 0) {
        lo = roi_value(g, p.roi, g.pos[d]);
        hi = roi_value(g, p.roi, g.naxes + g.pos[d]);
    }
    a.skip = g.out[d] == g.in[d] && a.scale == 1.0 && lo == 0.0 && hi == 1.0;
    a.outside = false;
    a.aa = false;
    if (a.skip) {
        a.base = o;
        return;
    }
    long long in_len = g.in[d];
    a.coord = source_coord(g.coord, (double)o, g.out[d], in_len, a.scale, lo, hi);
    if (g.coord == COORD_TF_CROP_AND_RESIZE)
        a.outside = a.coord < 0.0 || a.coord > (double)(in_len - 1);
    if (g.mode == 0) {
        long long idx = nearest_index(a.coord, g.nearest, a.scale);
        a.base = idx < 0 ? 0 : (idx > in_len - 1 ? in_len - 1 : idx);
        return;
    }
    double base = floor(a.coord);
    a.ratio = a.coord - base;
    // at integer coordinates the reference takes the left neighbour with ratio 1
    if (a.ratio == 0.0) {
        base -= 1.0;
        a.ratio = 1.0;
    }
    a.base = (long long)base;
    a.aa = g.antialias && a.scale < 1.0;
    if (a.aa) {
        double support = g.mode == 1 ? 1.0 : 2.0;
        a.start = (long long)floor(-support / a.scale) + 1;
        a.n = 2 - 2 * a.start;
        NpSum t;
        t.init(a.n, true);
        for (long long k = 0; k < a.n; ++k) t.push(raw_coeff(g, a, k));
        a.total1 = t.result();
    } else {
        a.start = g.mode == 1 ? 0 : -1;
        a.n = g.mode == 1 ? 2 : 4;
    }
    if (g.exclude_outside) {
        NpSum t;
        t.init(a.n, true);
        for (long long k = 0; k < a.n; ++k)
            t.push(tap_outside(a, k, in_len) ? 0.0 : coeff1(g, a, k));
        double total = t.result();
        a.total2 = total == 0.0 ? 1.0 : total;
    }
}

// The nested sums sum_k w_k(level m-1) * (... sum_j w_j(level 0) * x ...) over the
// interpolated dims (level l is dims[l], ascending), walked as an odometer with one NpSum
// per level: a level whose coordinate is outside the crop is the extrapolation value.
template <class T>
__device__ double interp(const T* __restrict__ x, const ResizeGeo& g, const AxisPlan* plans,
                         const int* dims, int m, long long base_off) {
    NpSum acc[RS_MAX];
    long long k[RS_MAX];
    long long off[RS_MAX + 1];
    off[m] = base_off;
    int l = m - 1;
    bool entering = true;
    double v = 0.0;
    while (true) {
        if (entering) {
            if (l < 0) {                       // a leaf: one input element
                v = load64(x[off[0]]);
                l = 0;
                entering = false;
                continue;
            }
            const AxisPlan& a = plans[dims[l]];
            if (a.outside) {
                v = g.extrapolation;
                l += 1;
                entering = false;
                continue;
            }
            acc[l].init(a.n, g.pairwise[dims[l]] != 0);
            k[l] = 0;
        } else {
            if (l >= m) return v;              // the value of the outermost level
            const AxisPlan& a = plans[dims[l]];
            acc[l].push(v * coeff(g, a, k[l], g.in[dims[l]]));
            k[l] += 1;
            if (k[l] >= a.n) {
                v = acc[l].result();
                l += 1;
                continue;
            }
        }
        // descend into tap k[l] of level l
        int d = dims[l];
        const AxisPlan& a = plans[d];
        long long idx = a.base + a.start + k[l];
        idx = idx < 0 ? 0 : (idx > g.in[d] - 1 ? g.in[d] - 1 : idx);
        off[l] = off[l + 1] + idx * g.stride[d];
        l -= 1;
        entering = true;
    }
}

template <class T>
__device__ void resize(const T* __restrict__ x, T* __restrict__ y, const ResizeGeo& g,
                       const ResizeParams& p, long long n, double lo, double hi) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        AxisPlan plans[RS_MAX];
        int dims[RS_MAX];
        int levels = 0;
        long long off = 0;
        bool outside = false;
        long long q = i;
        for (int d = g.ndim - 1; d >= 0; --d) {
            long long o = q % g.out[d];
            q /= g.out[d];
            plan_axis(g, p, d, o, plans[d]);
            const AxisPlan& a = plans[d];
            if (a.skip || g.mode == 0) {
                off += a.base * g.stride[d];
                outside = outside || a.outside;
            }
        }
        if (g.mode == 0) {
            // a pure gather; an axis outside the crop replaces the value by extrapolation
            y[i] = outside ? Store<T>::from64(g.extrapolation, lo, hi) : x[off];
            continue;
        }
        for (int d = 0; d < g.ndim; ++d)
            if (!plans[d].skip) dims[levels++] = d;
        y[i] = Store<T>::from64(interp(x, g, plans, dims, levels, off), lo, hi);
    }
}

// ------------------------------------------------------------------ GridSample
// Geometry of GridSample (Python: kernels/resize.py GridGeo): X is (N, C, *dims), grid
// (N, *out, nd) with components innermost dim first, Y (N, C, *out).
struct GridGeo {
    long long dims[3];
    long long out[3];
    long long n, c, out_size;
    int nd;
    int mode;      // 0 nearest, 1 linear, 2 cubic
    int padding;   // 0 zeros, 1 border, 2 reflection
    int align;
};

__device__ double reflect(double x, double lo, double hi) {
    double span = hi - lo;
    if (span <= 0.0) return lo;
    bool below = x < lo, above = x > hi;
    double dx = below ? lo - x : x - hi;
    double n = floor(dx / span);
    double r = dx - n * span;
    // n % 2 == 0 in numpy float64 (fmod keeps the sign; n >= 0 here unless NaN)
    bool even = fmod(n, 2.0) == 0.0;
    double back_below = even ? lo + r : hi - r;
    double back_above = even ? hi - r : lo + r;
    return below ? back_below : (above ? back_above : x);
}

__device__ __forceinline__ void grid_bounds(const GridGeo& g, long long d, double& lo, double& hi) {
    if (g.align) { lo = 0.0; hi = (double)d - 1.0; }
    else { lo = -0.5; hi = (double)d - 0.5; }
}

// the value of X at integer position idx (dim order) for one (n, c) plane, padding applied
template <class T>
__device__ double grid_pixel(const T* __restrict__ plane, const GridGeo& g, const long long* idx) {
    long long off = 0;
    bool valid = true;
    for (int i = 0; i < g.nd; ++i) {
        long long d = g.dims[i];
        long long j = idx[i];
        if (g.padding == 2) {
            double lo, hi;
            grid_bounds(g, d, lo, hi);
            j = (long long)trunc(reflect((double)j, lo, hi));
        }
        valid = valid && j >= 0 && j < d;
        j = j < 0 ? 0 : (j > d - 1 ? d - 1 : j);
        off = off * d + j;
    }
    double v = load64(plane[off]);
    return (g.padding == 0 && !valid) ? 0.0 : v;
}

__device__ __forceinline__ void grid_cubic_weights(double t, double* w) {
    const double a = -0.75;
    double s;
    s = t + 1.0;  w[0] = ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a;
    s = t;        w[1] = ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
    s = 1.0 - t;  w[2] = ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
    s = 2.0 - t;  w[3] = ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a;
}

template <class T>
__device__ void grid_sample(const T* __restrict__ x, const T* __restrict__ grid,
                            T* __restrict__ y, const GridGeo g, long long total) {
    long long plane_in = 1;
    for (int i = 0; i < g.nd; ++i) plane_in *= g.dims[i];
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        long long p = e % g.out_size;            // position in the output grid
        long long nc = e / g.out_size;           // n * C + c
        long long n = nc / g.c;
        const T* gp = grid + (n * g.out_size + p) * g.nd;
        const T* plane = x + nc * plane_in;
        double coords[3];
        for (int i = 0; i < g.nd; ++i) {
            // grid components are (x, y[, z]) = innermost dim first
            double gv = load64(gp[g.nd - 1 - i]);
            double d = (double)g.dims[i];
            double c = g.align ? (gv + 1.0) / 2.0 * (d - 1.0) : ((gv + 1.0) * d - 1.0) / 2.0;
            if (g.mode == 0) c = rint(c);
            double lo, hi;
            grid_bounds(g, g.dims[i], lo, hi);
            if (g.padding == 1 && g.mode != 2) c = c < 0.0 ? 0.0 : (c > d - 1.0 ? d - 1.0 : c);
            else if (g.padding == 2) c = reflect(c, lo, hi);
            coords[i] = c;
        }
        double out;
        if (g.mode == 0) {
            long long idx[3];
            for (int i = 0; i < g.nd; ++i) idx[i] = (long long)coords[i];
            out = grid_pixel(plane, g, idx);
        } else {
            int taps = g.mode == 1 ? 2 : 4;
            long long first = g.mode == 1 ? 0 : -1;
            double w[3][4];
            long long base[3];
            for (int i = 0; i < g.nd; ++i) {
                double b = floor(coords[i]);
                double f = coords[i] - b;
                base[i] = (long long)b;
                if (g.mode == 1) { w[i][0] = 1.0 - f; w[i][1] = f; }
                else grid_cubic_weights(f, w[i]);
            }
            out = 0.0;
            int combos = 1;
            for (int i = 0; i < g.nd; ++i) combos *= taps;
            // itertools.product order: the last dim's tap varies fastest
            for (int cmb = 0; cmb < combos; ++cmb) {
                long long idx[3];
                int k[3];
                int r = cmb;
                for (int i = g.nd - 1; i >= 0; --i) { k[i] = r % taps; r /= taps; }
                // np.prod over the stacked weights: from 1.0, in dim order
                double wt = 1.0;
                for (int i = 0; i < g.nd; ++i) {
                    wt = wt * w[i][k[i]];
                    idx[i] = base[i] + first + k[i];
                }
                out = out + wt * grid_pixel(plane, g, idx);
            }
        }
        y[e] = round_from64<T>(out);
    }
}

// ------------------------------------------------------------------ CenterCropPad
// y[o] = x[o + shift] per dim where that is inside X, else zero bytes; shift is
// (in - out) // 2 when cropping and -((out - in) // 2) when padding (host: CropGeo).
struct CropGeo {
    long long in[RS_MAX];
    long long out[RS_MAX];
    long long stride[RS_MAX];
    long long shift[RS_MAX];
    int ndim;
};

template <class T>
__device__ void center_crop_pad(const T* __restrict__ x, T* __restrict__ y, const CropGeo& g,
                                long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long q = i, off = 0;
        bool inside = true;
        for (int d = g.ndim - 1; d >= 0; --d) {
            long long o = q % g.out[d];
            q /= g.out[d];
            long long src = o + g.shift[d];
            inside = inside && src >= 0 && src < g.in[d];
            off += src * g.stride[d];
        }
        T zero;
        memset(&zero, 0, sizeof(T));
        y[i] = inside ? x[off] : zero;
    }
}

#define EP_CROP(W, T)                                                                          \
    extern "C" __global__ void center_crop_pad_x##W(const T* __restrict__ x,                   \
                                                    T* __restrict__ y, const CropGeo g,        \
                                                    long long n) {                             \
        center_crop_pad<T>(x, y, g, n);                                                        \
    }

EP_CROP(1, unsigned char)
EP_CROP(2, unsigned short)
EP_CROP(4, unsigned int)
EP_CROP(8, unsigned long long)

// ------------------------------------------------------------------ AffineGrid
// Y (N, *spatial, nd): y[n, p, i] = sum_j theta[n, i, j] * base[p, j] in float64 with the
// base grid of cpu_reference's AffineGrid (align_corners: numpy.linspace(-1, 1, d) = k * (2 / (d - 1)) - 1 with
// the last point exactly 1; else (2k + 1) / d - 1), base = (x, y[, z], 1) with x over the
// innermost dim. The sum runs in j order; the reference's einsum may sum in another: a
// tolerance (resize.py).
struct AffineGeo {
    long long spatial[3];   // D, H, W (outermost first); nd of them
    long long n, points;
    int nd, align;
};

__device__ __forceinline__ double affine_base(long long k, long long d, int align) {
    if (align) {
        if (d <= 1) return -1.0;
        if (k == d - 1) return 1.0;
        return (double)k * (2.0 / (double)(d - 1)) + -1.0;
    }
    return (2.0 * (double)k + 1.0) / (double)d - 1.0;
}

template <class T>
__device__ void affine_grid(const T* __restrict__ theta, T* __restrict__ y, const AffineGeo g,
                            long long total) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        int i = (int)(e % g.nd);
        long long p = (e / g.nd) % g.points;
        long long n = e / (g.nd * g.points);
        double base[4];
        long long q = p;
        // spatial index of point p, innermost dim first = base component 0 (x)
        for (int j = 0; j < g.nd; ++j) {
            long long d = g.spatial[g.nd - 1 - j];
            base[j] = affine_base(q % d, d, g.align);
            q /= d;
        }
        base[g.nd] = 1.0;
        const T* row = theta + (n * g.nd + i) * (g.nd + 1);
        double acc = 0.0;
        for (int j = 0; j <= g.nd; ++j) acc += load64(row[j]) * base[j];
        y[e] = round_from64<T>(acc);
    }
}

// ------------------------------------------------------------------ Col2Im
// Y (N, C, *image) sums the columns X (N, C * prod(block), L) that land on each pixel, in
// the reference's np.add.at order (kernel offsets in C order; each offset hits at most one
// block) in float32 (float16 / bfloat16 widened) from +0.0, then rounds once: exact.
// block_shape is read on the device; image dims come from Y's shape.
struct Col2ImGeo {
    long long image[RS_MAX];
    long long pad_begin[RS_MAX], pad_end[RS_MAX], stride[RS_MAX], dilation[RS_MAX];
    long long channels, l;   // C and L
    int nd;
};

template <class T>
__device__ void col2im(const T* __restrict__ x, const long long* __restrict__ block,
                       T* __restrict__ y, const Col2ImGeo g, long long total) {
    long long img_size = 1, n_k = 1;
    long long blocks[RS_MAX];
    for (int d = 0; d < g.nd; ++d) {
        img_size *= g.image[d];
        n_k *= block[d];
        blocks[d] = (g.image[d] + g.pad_begin[d] + g.pad_end[d] - g.dilation[d] * (block[d] - 1)
                     - 1) / g.stride[d] + 1;
    }
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        long long pix = e % img_size;
        long long nc = e / img_size;          // n * C + c
        long long pos[RS_MAX];
        long long q = pix;
        for (int d = g.nd - 1; d >= 0; --d) {
            pos[d] = q % g.image[d] + g.pad_begin[d];
            q /= g.image[d];
        }
        const T* cols = x + nc * n_k * g.l;   // (n, c*n_k + kidx, :) rows of this channel
        float acc = 0.0f;
        for (long long kidx = 0; kidx < n_k; ++kidx) {
            long long r = kidx, bidx = 0, bstride = 1;
            bool hit = true;
            for (int d = g.nd - 1; d >= 0; --d) {
                long long kd = r % block[d];
                r /= block[d];
                long long t = pos[d] - kd * g.dilation[d];
                long long b = t >= 0 && t % g.stride[d] == 0 ? t / g.stride[d] : -1;
                hit = hit && b >= 0 && b < blocks[d];
                bidx += (b < 0 ? 0 : b) * bstride;
                bstride *= blocks[d];
            }
            if (hit) acc += ep::widen(cols[kidx * g.l + bidx]);
        }
        y[e] = round_from32<T>(acc);
    }
}

#define EP_GEOM(SUFFIX, T)                                                                     \
    extern "C" __global__ void affine_grid_##SUFFIX(const T* __restrict__ theta,               \
                                                    T* __restrict__ y, const AffineGeo g,      \
                                                    long long total) {                         \
        affine_grid<T>(theta, y, g, total);                                                    \
    }                                                                                          \
    extern "C" __global__ void col2im_##SUFFIX(const T* __restrict__ x,                        \
                                               const long long* __restrict__ block,            \
                                               T* __restrict__ y, const Col2ImGeo g,           \
                                               long long total) {                              \
        col2im<T>(x, block, y, g, total);                                                      \
    }

EP_GEOM(f32, float)
EP_GEOM(f16, __half)
EP_GEOM(bf16, __nv_bfloat16)

// ------------------------------------------------------------------ entry points
#define EP_RESIZE(SUFFIX, T)                                                                   \
    extern "C" __global__ void resize_##SUFFIX(const T* __restrict__ x, T* __restrict__ y,     \
                                               const ResizeGeo g, const float* scales,          \
                                               const long long* sizes, const void* roi,         \
                                               long long n, double lo, double hi) {             \
        ResizeParams p{scales, sizes, roi};                                                     \
        resize<T>(x, y, g, p, n, lo, hi);                                                       \
    }

EP_RESIZE(f32, float)
EP_RESIZE(f16, __half)
EP_RESIZE(bf16, __nv_bfloat16)
EP_RESIZE(u8, unsigned char)
EP_RESIZE(i8, signed char)
EP_RESIZE(i32, int)
EP_RESIZE(i64, long long)

#define EP_GRID(SUFFIX, T)                                                                     \
    extern "C" __global__ void grid_sample_##SUFFIX(const T* __restrict__ x,                   \
                                                    const T* __restrict__ grid,                \
                                                    T* __restrict__ y, const GridGeo g,        \
                                                    long long total) {                         \
        grid_sample<T>(x, grid, y, g, total);                                                  \
    }

EP_GRID(f32, float)
EP_GRID(f16, __half)
EP_GRID(bf16, __nv_bfloat16)
