// Proves the NVRTC include path finds cuda_fp16.h / cuda_bf16.h (tests only).
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// float -> half and float -> bfloat16, round-to-nearest-even (as numpy / ml_dtypes do)
extern "C" __global__ void cast_f32_f16(const float* x, __half* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] = __float2half_rn(x[i]);
    }
}

extern "C" __global__ void cast_f32_bf16(const float* x, __nv_bfloat16* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] = __float2bfloat16_rn(x[i]);
    }
}
