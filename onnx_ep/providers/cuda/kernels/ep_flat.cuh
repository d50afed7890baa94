// The flat fast path of the elementwise and cast families: 16-byte vector loads and stores.
//
// It applies when every operand is either the output's flat index (same shape) or one
// broadcast scalar, and every non-scalar pointer is aligned to its pack: V elements per
// pack, V = 16 bytes / the widest operand (float4, 8 x half, 16 x bool ...), U packs per
// thread per grid step (all loads issued before any store; U = 1, see flat_unroll),
// grid-stride over the packs, then the fewer than V tail elements one per thread. The
// per-element function ``f`` is the one the general loop applies, so results are the same
// bit for bit; only the memory access differs. A caller whose pointers are misaligned (a
// view at an odd offset) gets ``false`` and runs its general loop.
//
// The host sizes the grid for V * U elements per thread (elementwise.py flat_geometry).
#pragma once
#include "ep_float.cuh"

namespace ep {

template <class T, int V> struct alignas(sizeof(T) * V) Pack { T v[V]; };

// elements per pack: 16 bytes of the widest operand type
template <class... Ts> __host__ __device__ constexpr int flat_elems() {
    int w = 1;
    ((w = (int)sizeof(Ts) > w ? (int)sizeof(Ts) : w), ...);
    return 16 / w;
}
// packs per thread per grid step. 1: Add float32 then takes ~30 registers, full occupancy
// (2048 threads per SM, 64 KiB of loads in flight per SM); 2 took 56 registers (half the
// occupancy, the same bytes in flight) and twice the code
__host__ __device__ constexpr int flat_unroll(int) { return 1; }

// one operand: a contiguous array read as packs, or one scalar read for every element
template <class T, int V> struct FlatSrc {
    const T* p;
    bool scalar;
    __device__ __forceinline__ bool aligned() const {
        return scalar || ((u64)p & (sizeof(Pack<T, V>) - 1)) == 0;
    }
    __device__ __forceinline__ Pack<T, V> pack(i64 j) const {
        if (!scalar) return reinterpret_cast<const Pack<T, V>*>(p)[j];
        Pack<T, V> r;
        const T s = *p;
#pragma unroll
        for (int k = 0; k < V; ++k) r.v[k] = s;
        return r;
    }
    __device__ __forceinline__ T at(i64 i) const { return p[scalar ? 0 : i]; }
};

template <class Out, int V>
__device__ __forceinline__ bool out_aligned(const Out* y) {
    return ((u64)y & (sizeof(Pack<Out, V>) - 1)) == 0;
}

// first pack of this thread, the stride between a thread's packs within a step, and the step
#define EP_FLAT_LOOP(U)                                                                  \
    const i64 nv = n / V, bs = blockDim.x, step = (i64)gridDim.x * bs * (U);            \
    for (i64 j0 = (i64)blockIdx.x * bs * (U) + threadIdx.x; j0 < nv; j0 += step)
#define EP_FLAT_TAIL_INDEX (nv * V + (i64)blockIdx.x * blockDim.x + threadIdx.x)

template <class Out, class A, class F>
__device__ __forceinline__ bool flat1(const A* a, bool sa, Out* y, i64 n, F f) {
    constexpr int V = flat_elems<A, Out>(), U = flat_unroll(V);
    const FlatSrc<A, V> xa{a, sa};
    if (!xa.aligned() || !out_aligned<Out, V>(y)) return false;
    EP_FLAT_LOOP(U) {
        Pack<A, V> pa[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (j0 + u * bs < nv) pa[u] = xa.pack(j0 + u * bs);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (j0 + u * bs >= nv) break;
            Pack<Out, V> o;
#pragma unroll
            for (int k = 0; k < V; ++k) o.v[k] = f(pa[u].v[k]);
            reinterpret_cast<Pack<Out, V>*>(y)[j0 + u * bs] = o;
        }
    }
    const i64 i = EP_FLAT_TAIL_INDEX;
    if (i < n) y[i] = f(xa.at(i));
    return true;
}

template <class Out, class A, class B, class F>
__device__ __forceinline__ bool flat2(const A* a, bool sa, const B* b, bool sb, Out* y, i64 n,
                                      F f) {
    constexpr int V = flat_elems<A, B, Out>(), U = flat_unroll(V);
    const FlatSrc<A, V> xa{a, sa};
    const FlatSrc<B, V> xb{b, sb};
    if (!xa.aligned() || !xb.aligned() || !out_aligned<Out, V>(y)) return false;
    EP_FLAT_LOOP(U) {
        Pack<A, V> pa[U];
        Pack<B, V> pb[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (j0 + u * bs < nv) {
                pa[u] = xa.pack(j0 + u * bs);
                pb[u] = xb.pack(j0 + u * bs);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (j0 + u * bs >= nv) break;
            Pack<Out, V> o;
#pragma unroll
            for (int k = 0; k < V; ++k) o.v[k] = f(pa[u].v[k], pb[u].v[k]);
            reinterpret_cast<Pack<Out, V>*>(y)[j0 + u * bs] = o;
        }
    }
    const i64 i = EP_FLAT_TAIL_INDEX;
    if (i < n) y[i] = f(xa.at(i), xb.at(i));
    return true;
}

template <class Out, class A, class B, class C, class F>
__device__ __forceinline__ bool flat3(const A* a, bool sa, const B* b, bool sb, const C* c,
                                      bool sc, Out* y, i64 n, F f) {
    constexpr int V = flat_elems<A, B, C, Out>(), U = flat_unroll(V);
    const FlatSrc<A, V> xa{a, sa};
    const FlatSrc<B, V> xb{b, sb};
    const FlatSrc<C, V> xc{c, sc};
    if (!xa.aligned() || !xb.aligned() || !xc.aligned() || !out_aligned<Out, V>(y)) return false;
    EP_FLAT_LOOP(U) {
        Pack<A, V> pa[U];
        Pack<B, V> pb[U];
        Pack<C, V> pc[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (j0 + u * bs < nv) {
                pa[u] = xa.pack(j0 + u * bs);
                pb[u] = xb.pack(j0 + u * bs);
                pc[u] = xc.pack(j0 + u * bs);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (j0 + u * bs >= nv) break;
            Pack<Out, V> o;
#pragma unroll
            for (int k = 0; k < V; ++k) o.v[k] = f(pa[u].v[k], pb[u].v[k], pc[u].v[k]);
            reinterpret_cast<Pack<Out, V>*>(y)[j0 + u * bs] = o;
        }
    }
    const i64 i = EP_FLAT_TAIL_INDEX;
    if (i < n) y[i] = f(xa.at(i), xb.at(i), xc.at(i));
    return true;
}

#undef EP_FLAT_LOOP
#undef EP_FLAT_TAIL_INDEX

}  // namespace ep
