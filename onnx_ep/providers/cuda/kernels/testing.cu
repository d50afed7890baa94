// Tiny kernels that prove compile + load + launch + copy round trips (tests only).
// Element counts are int64 (long long: NVRTC has no <cstdint> without extra headers);
// grid-stride loops, 256 threads per block.

extern "C" __global__ void fill_f32(float* y, float value, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] = value;
    }
}

// y = a * x + y, with --fmad=false the multiply and add round separately (bit-exact vs numpy)
extern "C" __global__ void axpy_f32(float a, const float* x, float* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
