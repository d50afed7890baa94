// im2col for Conv (2-D; 1-D runs as 2-D with height 1): one image's columns for a GEMM.
//
// cols is (C * KH * KW, OH * OW), row-major, rows ordered (c, kh, kw) like W's
// (M, C/group, KH, KW) so that group g's rows are one contiguous block. Taps that land
// in the padding read 0. Pure data movement on the elements' bits: one instantiation per
// element width serves every float type, exactly.
// Element counts are int64; grid-stride loop, 256 threads per block.

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
