// Selection: NonZero. The coordinates of the non-zero elements of x, as int64
// [rank, count] in row-major element order (ONNX's, numpy's).
//
// count is known only once x is: one launch counts per chunk of NZ_CHUNK elements, the
// host reads the counts back once and uploads their exclusive prefix (each chunk's first
// output column), then one launch per chunk ranks its non-zeros in element order (a scan
// in shared memory) and writes their coordinates. No atomics on the output: the bytes
// are the same every run. NaN is non-zero, -0.0 is zero (as numpy).
//
// Blocks are NZ_THREADS threads, each taking NZ_PER_THREAD consecutive elements.
#include "ep_float.cuh"
#include "ep_geo.cuh"

using namespace ep;

#define NZ_THREADS 256
#define NZ_PER_THREAD 4
#define NZ_CHUNK (NZ_THREADS * NZ_PER_THREAD)

template <class T> __device__ __forceinline__ bool is_nonzero(T v) { return v != (T)0; }
__device__ __forceinline__ bool is_nonzero(f16 v) { return to_f32(v) != 0.f; }
__device__ __forceinline__ bool is_nonzero(bf16 v) { return to_f32(v) != 0.f; }

// this thread's flags over its NZ_PER_THREAD elements; returns how many are non-zero
template <class T>
__device__ __forceinline__ int flags_of(const T* __restrict__ x, long long n, long long i0,
                                        bool* f) {
    int c = 0;
#pragma unroll
    for (int j = 0; j < NZ_PER_THREAD; ++j) {
        long long i = i0 + j;
        f[j] = i < n && is_nonzero(x[i]);
        c += f[j];
    }
    return c;
}

// counts[block] = non-zeros in the block's chunk
template <class T>
__device__ void nz_count(const T* __restrict__ x, long long n, int* __restrict__ counts) {
    __shared__ int warp_sum[NZ_THREADS / 32];
    bool f[NZ_PER_THREAD];
    long long i0 = (long long)blockIdx.x * NZ_CHUNK + (long long)threadIdx.x * NZ_PER_THREAD;
    int v = flags_of(x, n, i0, f);
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        int total = 0;
        for (int w = 0; w < NZ_THREADS / 32; ++w) total += warp_sum[w];
        counts[blockIdx.x] = total;
    }
}

// y[d * total + p] = coordinate d of the p-th non-zero; offsets[block] = the chunk's first p
template <class T>
__device__ void nz_write(const T* __restrict__ x, long long n, const long long* __restrict__ offsets,
                         long long* __restrict__ y, long long total, Geo shape) {
    __shared__ int warp_sum[NZ_THREADS / 32];
    bool f[NZ_PER_THREAD];
    long long i0 = (long long)blockIdx.x * NZ_CHUNK + (long long)threadIdx.x * NZ_PER_THREAD;
    int local = flags_of(x, n, i0, f);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int v = local;                                   // inclusive scan within the warp
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
    }
    if (lane == 31) warp_sum[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {                          // exclusive scan of the warp sums
        int acc = 0;
        for (int w = 0; w < NZ_THREADS / 32; ++w) {
            int s = warp_sum[w];
            warp_sum[w] = acc;
            acc += s;
        }
    }
    __syncthreads();
    long long p = offsets[blockIdx.x] + warp_sum[warp] + (v - local);
#pragma unroll
    for (int j = 0; j < NZ_PER_THREAD; ++j) {
        if (!f[j]) continue;
        long long r = i0 + j;
        for (int d = shape.ndim - 1; d >= 0; --d) {
            long long s = shape.size[d];
            long long q = r / s;
            y[(long long)d * total + p] = r - q * s;
            r = q;
        }
        ++p;
    }
}

#define EP_NONZERO(S, T)                                                                      \
extern "C" __global__ void nonzero_count_##S(const T* x, long long n, int* counts) {          \
    nz_count<T>(x, n, counts);                                                                \
}                                                                                             \
extern "C" __global__ void nonzero_write_##S(const T* x, long long n, const long long* offsets, \
                                             long long* y, long long total, Geo shape) {      \
    nz_write<T>(x, n, offsets, y, total, shape);                                              \
}

EP_NONZERO(f32, float)
EP_NONZERO(f64, double)
EP_NONZERO(f16, f16)
EP_NONZERO(bf16, bf16)
EP_NONZERO(i64, long long)
EP_NONZERO(i32, int)
EP_NONZERO(i16, short)
EP_NONZERO(i8, signed char)
EP_NONZERO(u64, unsigned long long)
EP_NONZERO(u32, unsigned int)
EP_NONZERO(u16, unsigned short)
EP_NONZERO(u8, unsigned char)
EP_NONZERO(b8, bool)
