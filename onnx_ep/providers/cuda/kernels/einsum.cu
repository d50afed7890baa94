// Einsum: one thread per output element sums the products of its operands over every
// contracted index, in float64, and rounds once to T.
//
// The host parses the equation with the real shapes into struct EinsumGeo: the letters'
// sizes (output letters first, then the contracted ones) and, per operand, the stride of
// each letter in elements (0 when the operand lacks the letter or broadcasts it; a letter
// repeated in one operand -- a diagonal -- gets the sum of its strides).
// Parity: the reference runs numpy's einsum in float32 (float16/bfloat16 widened) in its
// own order; float64 here lands within that float32 summation error of it: a tolerance.
#include "ep_float.cuh"

#define EP_EINSUM_LETTERS 16
#define EP_EINSUM_OPERANDS 4

struct EinsumGeo {
    long long size[EP_EINSUM_LETTERS];
    long long stride[EP_EINSUM_OPERANDS][EP_EINSUM_LETTERS];
    int n_out;
    int n_sum;
    int n_ops;
};

template <class T>
__device__ __forceinline__ void einsum(const T* __restrict__ a, const T* __restrict__ b,
                                       const T* __restrict__ c, const T* __restrict__ d,
                                       T* __restrict__ y, EinsumGeo g, long long n_out,
                                       long long n_sum) {
    const T* ops[EP_EINSUM_OPERANDS] = {a, b, c, d};
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n_out;
         i += (long long)gridDim.x * blockDim.x) {
        long long base[EP_EINSUM_OPERANDS] = {0, 0, 0, 0};
        long long rem = i;
        for (int l = g.n_out - 1; l >= 0; --l) {
            long long q = rem / g.size[l], v = rem - q * g.size[l];
            rem = q;
            for (int k = 0; k < g.n_ops; ++k) base[k] += v * g.stride[k][l];
        }
        double acc = 0.0;
        for (long long j = 0; j < n_sum; ++j) {
            long long off[EP_EINSUM_OPERANDS] = {base[0], base[1], base[2], base[3]};
            long long r = j;
            for (int l = g.n_out + g.n_sum - 1; l >= g.n_out; --l) {
                long long q = r / g.size[l], v = r - q * g.size[l];
                r = q;
                for (int k = 0; k < g.n_ops; ++k) off[k] += v * g.stride[k][l];
            }
            double p = ep::to_f64(ops[0][off[0]]);
            for (int k = 1; k < g.n_ops; ++k) p *= ep::to_f64(ops[k][off[k]]);
            acc += p;
        }
        y[i] = ep::round_from64<T>(acc);
    }
}

#define EP_EINSUM(SUFFIX, T)                                                                   \
    extern "C" __global__ void einsum_##SUFFIX(const T* a, const T* b, const T* c, const T* d, \
                                               T* y, EinsumGeo g, long long n_out,             \
                                               long long n_sum) {                              \
        einsum<T>(a, b, c, d, y, g, n_out, n_sum);                                             \
    }

EP_EINSUM(f32, float)
EP_EINSUM(f16, ep::f16)
EP_EINSUM(bf16, ep::bf16)
EP_EINSUM(f64, double)
