// Many device-to-device copies in one launch.
//
// A decode step with a KV cache copies tens of small buffers at its edges: each bound feed
// into its planned input buffer, each output out of the arena. One cuMemcpyDtoDAsync each
// costs ~1-2 µs of GPU time (two internal kernels) and ~6 µs of host time; here one launch
// moves up to EP_COPY_MANY buffers, blockIdx.y picking the buffer.

#define EP_COPY_MANY 48

struct CopyTable {
    unsigned long long src[EP_COPY_MANY];
    unsigned long long dst[EP_COPY_MANY];
    unsigned long long bytes[EP_COPY_MANY];
};

extern "C" __global__ void copy_many(CopyTable t) {
    const unsigned k = blockIdx.y;
    const unsigned long long n = t.bytes[k];
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    const char* s = reinterpret_cast<const char*>(t.src[k]);
    char* d = reinterpret_cast<char*>(t.dst[k]);
    unsigned long long tail = 0;
    if (((t.src[k] | t.dst[k]) & 15ull) == 0) {   // 16-byte vectors, then the last bytes
        const unsigned long long nv = n / 16;
        const uint4* s4 = reinterpret_cast<const uint4*>(s);
        uint4* d4 = reinterpret_cast<uint4*>(d);
        for (unsigned long long i = first; i < nv; i += step) d4[i] = s4[i];
        tail = nv * 16;
    }
    for (unsigned long long i = tail + first; i < n; i += step) d[i] = s[i];
}
