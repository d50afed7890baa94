// Geometry shared by the reduce, softmax and movement families.
//
// struct Geo travels by value as a kernel argument (no device upload, so launches stay
// capture-safe): up to 8 sizes and strides, in elements, of an iteration space. Python
// builds it as onnx_ep.providers.cuda.kernels.base.Geo (same layout).
#pragma once

namespace ep {

#define EP_MAX_DIMS 8

struct Geo {
    long long size[EP_MAX_DIMS];
    long long stride[EP_MAX_DIMS];
    int ndim;
};

// offset of linear index i (row-major over g.size) under the strides g.stride
__device__ __forceinline__ long long geo_offset(long long i, const Geo& g) {
    if (g.ndim == 1) return i * g.stride[0];
    long long off = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
        long long n = g.size[d];
        long long q = i / n;
        off += (i - q * n) * g.stride[d];
        i = q;
    }
    return off;
}

// plain-old-data element types of 1, 2, 4, 8 and 16 bytes: data movement copies bytes
struct alignas(16) x16_t { unsigned long long lo, hi; };
typedef unsigned char x1_t;
typedef unsigned short x2_t;
typedef unsigned int x4_t;
typedef unsigned long long x8_t;

// V elements of T loaded or stored as one aligned access (16 bytes for float4-sized V)
template <class T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };

// infinities by bits: NVRTC has no <cmath>, so no INFINITY macro
__device__ __forceinline__ double inf64() { return __longlong_as_double(0x7ff0000000000000ll); }
__device__ __forceinline__ float inf32() { return __int_as_float(0x7f800000); }

__device__ __forceinline__ long long global_tid() {
    return blockIdx.x * (long long)blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long grid_threads() {
    return (long long)gridDim.x * blockDim.x;
}

}  // namespace ep
