// Block-wide reductions shared by the row kernels of softmax.cu, reduce.cu and attention.cu:
// a shared-memory tree over one block, folded in a fixed order (bit-identical run to run),
// and the max / min where a NaN operand wins, as numpy's max and min propagate NaN.
#pragma once

namespace ep {

// the most threads of a block-reduced row: block_reduce's scratch holds one value per
// thread (Python: onnx_ep.providers.cuda.kernels.base.block_for picks a power of two up to it)
#define EP_BLOCK 256

// isnan of the float types; the integer types hold no NaN
template <class A> __device__ __forceinline__ bool is_nan(A) { return false; }
__device__ __forceinline__ bool is_nan(float v) { return isnan(v); }
__device__ __forceinline__ bool is_nan(double v) { return isnan(v); }

// the larger (MAX) or smaller of a and b; a NaN operand wins (a first), so a NaN anywhere in a
// set makes its max or min NaN (which of several NaNs survives is unspecified: payloads
// differ only for sets holding NaNs of different payloads)
template <bool MAX, class A> __device__ __forceinline__ A nan_extreme(A a, A b) {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return (MAX ? b > a : b < a) ? b : a;
}

// combining operations of block_reduce
struct SumOp {
    template <class A> static __device__ __forceinline__ A comb(A a, A b) { return a + b; }
};
struct MaxOp {
    template <class A> static __device__ __forceinline__ A comb(A a, A b) {
        return nan_extreme<true>(a, b);
    }
};

// Op::comb of every thread's v over the block (blockDim.x a power of two <= EP_BLOCK): a tree
// in sh[0, blockDim.x), the upper half folded onto the lower until one value is left. Every
// thread gets the result; sh may be reused once this returns.
template <class Op, class A>
__device__ __forceinline__ A block_reduce(A v, A* sh) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (t < s) sh[t] = Op::comb(sh[t], sh[t + s]);
        __syncthreads();
    }
    A r = sh[0];
    __syncthreads();
    return r;
}

}  // namespace ep
