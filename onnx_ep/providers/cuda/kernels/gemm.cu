// Broadcast copies around cuBLASLt GEMMs: Gemm's C into Y before Y = alpha*A'B' + beta*Y,
// and Conv's bias into Y before Y += W @ cols. Pure data movement on the elements' bits,
// so one instantiation per element width serves every float type and is exact.
//
// y is viewed as (outer, rows, cols), contiguous; element (o, r, c) takes
// src[r * row_stride + c * col_stride] (strides in elements, 0 to broadcast).
// Element counts are int64; grid-stride loop, 256 threads per block.

template <class Bits>
__device__ __forceinline__ void broadcast_rows(Bits* __restrict__ y, const Bits* __restrict__ src,
                                               long long total, long long rows, long long cols,
                                               long long row_stride, long long col_stride) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long c = i % cols;
        long long r = (i / cols) % rows;
        y[i] = src[r * row_stride + c * col_stride];
    }
}

#define EP_BROADCAST_ROWS(SUFFIX, BITS)                                                        \
    extern "C" __global__ void broadcast_rows_##SUFFIX(                                        \
        BITS* __restrict__ y, const BITS* __restrict__ src, long long total, long long rows,   \
        long long cols, long long row_stride, long long col_stride) {                          \
        broadcast_rows<BITS>(y, src, total, rows, cols, row_stride, col_stride);               \
    }

EP_BROADCAST_ROWS(f32, unsigned int)
EP_BROADCAST_ROWS(f16, unsigned short)
EP_BROADCAST_ROWS(bf16, unsigned short)
