// Asynchronous copies from global into shared memory (cp.async, sm_80 on), for kernels that
// keep several loads of a row in flight while they compute on an earlier one (softmax.cu's
// rows). Before sm_80 the copy goes through registers at once, so there is nothing to wait
// for.
#pragma once

namespace ep {

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// 16 bytes, not kept in L1 (read once)
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
// 4 bytes of which the first `valid` (0..4) are read and the rest are zeroed: a word whose
// tail lies past the end of a buffer is copied without reading past it
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 ::"r"(s), "l"(src), "r"(valid) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// every group but the newest N has landed (for this thread's copies)
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#else
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int valid) {
    unsigned char* d = reinterpret_cast<unsigned char*>(dst);
    const unsigned char* s = reinterpret_cast<const unsigned char*>(src);
    for (int i = 0; i < 4; ++i) d[i] = i < valid ? s[i] : 0;
}
__device__ __forceinline__ void cp_async_commit() {}
template <int N> __device__ __forceinline__ void cp_async_wait() {}
#endif

}  // namespace ep
