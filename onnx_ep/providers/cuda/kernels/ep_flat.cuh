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

// the packs of operands Ts... for the U packs of one grid step, held until the step's stores
template <int V, int U, class... Ts> struct FlatPacks;
template <int V, int U> struct FlatPacks<V, U> {
    __device__ __forceinline__ void load(i64, int) {}
    template <class F, class... Vs>
    __device__ __forceinline__ auto apply(F& f, int, int, const Vs&... vs) const {
        return f(vs...);
    }
};
template <int V, int U, class T, class... Ts> struct FlatPacks<V, U, T, Ts...> {
    Pack<T, V> p[U];
    FlatPacks<V, U, Ts...> rest;
    // operands in order: the first operand's pack is loaded first
    __device__ __forceinline__ void load(i64 j, int u, const FlatSrc<T, V>& x,
                                         const FlatSrc<Ts, V>&... xs) {
        p[u] = x.pack(j);
        rest.load(j, u, xs...);
    }
    // f(element k of pack u of every operand), in operand order
    template <class F, class... Vs>
    __device__ __forceinline__ auto apply(F& f, int u, int k, const Vs&... vs) const {
        return rest.apply(f, u, k, vs..., p[u].v[k]);
    }
};

// y[i] = f(operands at i...) over the n elements, V per pack; false (nothing written) when
// a pointer is not aligned to its pack
template <int V, class Out, class F, class... Ts>
__device__ __forceinline__ bool flat_n(Out* y, i64 n, F& f, const FlatSrc<Ts, V>&... xs) {
    constexpr int U = flat_unroll(V);
    if ((!xs.aligned() || ...) || !out_aligned<Out, V>(y)) return false;
    EP_FLAT_LOOP(U) {
        FlatPacks<V, U, Ts...> packs;
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (j0 + u * bs < nv) packs.load(j0 + u * bs, u, xs...);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (j0 + u * bs >= nv) break;
            Pack<Out, V> o;
#pragma unroll
            for (int k = 0; k < V; ++k) o.v[k] = packs.apply(f, u, k);
            reinterpret_cast<Pack<Out, V>*>(y)[j0 + u * bs] = o;
        }
    }
    const i64 i = EP_FLAT_TAIL_INDEX;
    if (i < n) y[i] = f(xs.at(i)...);
    return true;
}

template <class Out, class A, class F>
__device__ __forceinline__ bool flat1(const A* a, bool sa, Out* y, i64 n, F f) {
    constexpr int V = flat_elems<A, Out>();
    return flat_n<V>(y, n, f, FlatSrc<A, V>{a, sa});
}

template <class Out, class A, class B, class F>
__device__ __forceinline__ bool flat2(const A* a, bool sa, const B* b, bool sb, Out* y, i64 n,
                                      F f) {
    constexpr int V = flat_elems<A, B, Out>();
    return flat_n<V>(y, n, f, FlatSrc<A, V>{a, sa}, FlatSrc<B, V>{b, sb});
}

template <class Out, class A, class B, class C, class F>
__device__ __forceinline__ bool flat3(const A* a, bool sa, const B* b, bool sb, const C* c,
                                      bool sc, Out* y, i64 n, F f) {
    constexpr int V = flat_elems<A, B, C, Out>();
    return flat_n<V>(y, n, f, FlatSrc<A, V>{a, sa}, FlatSrc<B, V>{b, sb}, FlatSrc<C, V>{c, sc});
}

#undef EP_FLAT_LOOP
#undef EP_FLAT_TAIL_INDEX

}  // namespace ep
