// im2col for Conv (2-D; 1-D runs as 2-D with height 1): one image's columns for a GEMM.
//
// cols is (C * KH * KW, OH * OW), row-major, rows ordered (c, kh, kw) like W's
// (M, C/group, KH, KW) so that group g's rows are one contiguous block. Taps that land
// in the padding read 0. Pure data movement on the elements' bits: one instantiation per
// element width serves every float type, exactly.
// Element counts are int64; grid-stride loop, 256 threads per block.
#include "ep_float.cuh"

template <class Bits>
__device__ __forceinline__ void im2col(const Bits* __restrict__ x, Bits* __restrict__ cols,
                                       long long channels, long long height, long long width,
                                       long long kh, long long kw, long long oh, long long ow,
                                       long long stride_h, long long stride_w,
                                       long long pad_h, long long pad_w,
                                       long long dil_h, long long dil_w) {
    const long long positions = oh * ow;
    const long long total = channels * kh * kw * positions;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long p = i % positions;
        long long row = i / positions;
        long long tw = row % kw;
        long long th = (row / kw) % kh;
        long long c = row / (kw * kh);
        long long ih = (p / ow) * stride_h - pad_h + th * dil_h;
        long long iw = (p % ow) * stride_w - pad_w + tw * dil_w;
        Bits v = 0;
        if (ih >= 0 && ih < height && iw >= 0 && iw < width) {
            v = x[(c * height + ih) * width + iw];
        }
        cols[i] = v;
    }
}

#define EP_IM2COL(SUFFIX, BITS)                                                                \
    extern "C" __global__ void im2col_##SUFFIX(                                                \
        const BITS* __restrict__ x, BITS* __restrict__ cols, long long channels,              \
        long long height, long long width, long long kh, long long kw, long long oh,           \
        long long ow, long long stride_h, long long stride_w, long long pad_h,                 \
        long long pad_w, long long dil_h, long long dil_w) {                                   \
        im2col<BITS>(x, cols, channels, height, width, kh, kw, oh, ow, stride_h, stride_w,     \
                     pad_h, pad_w, dil_h, dil_w);                                              \
    }

EP_IM2COL(f32, unsigned int)
EP_IM2COL(f16, unsigned short)
EP_IM2COL(bf16, unsigned short)

// ------------------------------------------------------------------ ConvTranspose
// Direct loop, one thread per output element (n, m, o0, o1, o2) of 1-3 spatial dims run as
// 3-D with leading 1s: y = B[m] + sum over the group's input channels c and kernel taps k
// of X[n, c, i] * W[c, m % (M/group), k] for every input position i with
// i * stride + k * dilation == o + begin (begin: the crop of the full result, from pads /
// auto_pad / output_shape). Products and sums in float64, as the reference (float64
// matmul, float64 col2im canvas, bias added in float64), rounded once to T; only the
// order of the float64 additions differs.

template <class T>
__device__ __forceinline__ void conv_transpose(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
    T* __restrict__ y, long long batch, long long channels, long long maps, long long groups,
    const long long* in, const long long* out, const long long* k, const long long* s,
    const long long* d, const long long* begin) {
    const long long cg = channels / groups, mg = maps / groups;
    const long long out_plane = out[0] * out[1] * out[2];
    const long long in_plane = in[0] * in[1] * in[2];
    const long long taps = k[0] * k[1] * k[2];
    const long long total = batch * maps * out_plane;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long pos = i % out_plane, nm = i / out_plane;
        long long m = nm % maps, n = nm / maps;
        long long q[3] = {pos / (out[1] * out[2]), (pos / out[2]) % out[1], pos % out[2]};
        long long g = m / mg, mm = m - g * mg;
        double acc = 0.0;
        for (long long c = g * cg; c < (g + 1) * cg; ++c) {
            const T* xc = x + (n * channels + c) * in_plane;
            const T* wc = w + (c * mg + mm) * taps;
            for (long long a = 0; a < k[0]; ++a) {
                long long t0 = q[0] + begin[0] - a * d[0];
                if (t0 < 0 || t0 % s[0]) continue;
                long long i0 = t0 / s[0];
                if (i0 >= in[0]) continue;
                for (long long bb = 0; bb < k[1]; ++bb) {
                    long long t1 = q[1] + begin[1] - bb * d[1];
                    if (t1 < 0 || t1 % s[1]) continue;
                    long long i1 = t1 / s[1];
                    if (i1 >= in[1]) continue;
                    for (long long cc = 0; cc < k[2]; ++cc) {
                        long long t2 = q[2] + begin[2] - cc * d[2];
                        if (t2 < 0 || t2 % s[2]) continue;
                        long long i2 = t2 / s[2];
                        if (i2 >= in[2]) continue;
                        acc += ep::to_f64(xc[(i0 * in[1] + i1) * in[2] + i2]) *
                               ep::to_f64(wc[(a * k[1] + bb) * k[2] + cc]);
                    }
                }
            }
        }
        if (b) acc += ep::to_f64(b[m]);
        y[i] = ep::round_from64<T>(acc);
    }
}

// per spatial axis (outermost first): in, out, kernel, stride, dilation, begin
#define EP_CT_PARAMS(A)                                                                        \
    long long in##A, long long out##A, long long k##A, long long s##A, long long d##A,         \
        long long b##A
#define EP_CONV_TRANSPOSE(SUFFIX, T)                                                           \
    extern "C" __global__ void conv_transpose_##SUFFIX(                                        \
        const T* x, const T* w, const T* b, T* y, long long batch, long long channels,         \
        long long maps, long long groups, EP_CT_PARAMS(0), EP_CT_PARAMS(1), EP_CT_PARAMS(2)) { \
        const long long in[3] = {in0, in1, in2}, out[3] = {out0, out1, out2};                  \
        const long long k[3] = {k0, k1, k2}, s[3] = {s0, s1, s2}, d[3] = {d0, d1, d2};         \
        const long long begin[3] = {b0, b1, b2};                                               \
        conv_transpose<T>(x, w, b, y, batch, channels, maps, groups, in, out, k, s, d, begin); \
    }

EP_CONV_TRANSPOSE(f32, float)
EP_CONV_TRANSPOSE(f16, ep::f16)
EP_CONV_TRANSPOSE(bf16, ep::bf16)
