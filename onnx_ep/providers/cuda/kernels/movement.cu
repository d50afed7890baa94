// Data movement: Transpose / Expand (strided gather), the tiled last-two-axes transpose,
// Concat (up to EP_CAT_MAX inputs per launch), Split (2-D block copies), Slice
// (starts/axes/steps read on the device), Gather and Tile. Values are copied, never
// computed: parity is exact.
//
// Kernels are instantiated by element SIZE, not dtype (suffixes x1, x2, x4, x8, x16),
// because copies only move bytes; the Python side widens the element (e.g. 4 float16
// as one x8) where the innermost contiguous run and the alignment allow.
// Element counts are int64; grid-stride loops; 256 threads per block unless noted.
#include "ep_geo.cuh"

using namespace ep;

// y[i] = x[offset(i)] for the output's row-major index i; the offset uses the INPUT
// strides permuted (Transpose) or zero on broadcast axes (Expand).
template <class T>
__device__ void strided_copy(const T* __restrict__ x, T* __restrict__ y, Geo g, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) y[i] = x[geo_offset(i, g)];
}

// out[b][c][r] = in[b][r][c]: 32x32 tiles through shared memory (+1 column against bank
// conflicts); block 32x8, grid (ceil(C/32), ceil(R/32), B) with B folded into z and y
template <class T>
__device__ void transpose_tile(const T* __restrict__ x, T* __restrict__ y, long long rows,
                               long long cols, long long batch) {
    __shared__ T tile[32][33];
    long long tiles_r = (rows + 31) / 32;
    for (long long bz = blockIdx.z * (long long)gridDim.y + blockIdx.y; bz < batch * tiles_r;
         bz += (long long)gridDim.y * gridDim.z) {
        long long b = bz / tiles_r, r0 = (bz - b * tiles_r) * 32;
        long long c0 = blockIdx.x * 32LL;
        const T* xb = x + b * rows * cols;
        T* yb = y + b * rows * cols;
        for (int k = threadIdx.y; k < 32; k += blockDim.y) {
            long long r = r0 + k, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[k][threadIdx.x] = xb[r * cols + c];
        }
        __syncthreads();
        for (int k = threadIdx.y; k < 32; k += blockDim.y) {
            long long c = c0 + k, r = r0 + threadIdx.x;
            if (r < rows && c < cols) yb[c * rows + r] = tile[threadIdx.x][k];
        }
        __syncthreads();
    }
}

// y[r * y_pitch + j] = x[r * x_pitch + j] for r < rows, j < cols (Concat, Split)
template <class T>
__device__ void copy2d(const T* __restrict__ x, long long x_pitch, T* __restrict__ y,
                       long long y_pitch, long long rows, long long cols) {
    long long n = rows * cols;
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long r = i / cols, j = i - r * cols;
        y[r * y_pitch + j] = x[r * x_pitch + j];
    }
}

// Concat of up to EP_CAT_MAX inputs in one launch (Python: movement.CatInputs, same layout).
// The output is viewed as [rows, y_pitch]; this launch fills columns [0, off[n]) of every
// row from y on. Input k is [rows, off[k+1] - off[k]] at src[k], contiguous. All counts
// are in elements of the instantiated width; empty inputs are left out by the host.
#define EP_CAT_MAX 16

struct CatInputs {
    const void* src[EP_CAT_MAX];
    long long off[EP_CAT_MAX + 1];  // off[0] = 0; off[n] = the columns this launch fills
    int n;
};

// One thread per output element, consecutive threads on consecutive columns, so reads
// and writes coalesce as copy2d's do. The input is found by a linear scan: the table is
// short and a warp straddles at most a few inputs (the scan diverges only there).
template <class T>
__device__ void concat(const CatInputs& c, T* __restrict__ y, long long y_pitch,
                       long long rows) {
    long long cols = c.off[c.n], n = rows * cols;
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long r = i / cols, j = i - r * cols;
        int k = 0;
        while (k + 1 < c.n && j >= c.off[k + 1]) ++k;
        long long begin = c.off[k], width = c.off[k + 1] - begin;
        y[r * y_pitch + j] = ((const T*)c.src[k])[r * width + (j - begin)];
    }
}

__device__ __forceinline__ long long read_index(const void* p, long long i, int is64) {
    return is64 ? ((const long long*)p)[i] : (long long)((const int*)p)[i];
}

// Slice: out has shape out.size (C-contiguous); in_dims are the input dims, in.stride the
// input strides. starts/axes/steps are the node's device tensors (axes, steps may be
// null), k entries each; ends are not needed: the pre-bound output shape holds the count.
// Each block resolves the per-axis start and step once (ONNX clamping) into shared memory.
template <class T>
__device__ void slice(const T* __restrict__ x, T* __restrict__ y, Geo out, Geo in,
                      const void* starts, const void* axes, const void* steps, int k,
                      int idx64, long long n) {
    __shared__ long long base_s;
    __shared__ long long step_s[EP_MAX_DIMS];
    if (threadIdx.x == 0) {
        long long start[EP_MAX_DIMS], step[EP_MAX_DIMS];
        for (int d = 0; d < in.ndim; ++d) { start[d] = 0; step[d] = 1; }
        for (int j = 0; j < k; ++j) {
            long long a = axes ? read_index(axes, j, idx64) : j;
            if (a < 0) a += in.ndim;
            if (a < 0 || a >= in.ndim) continue;   // invalid model; the reference raises
            long long dim = in.size[a];
            long long s = read_index(starts, j, idx64);
            long long st = steps ? read_index(steps, j, idx64) : 1;
            if (s < 0) s += dim;
            if (st > 0) s = s < 0 ? 0 : (s > dim ? dim : s);
            else s = s < 0 ? 0 : (s > dim - 1 ? dim - 1 : s);
            start[a] = s;
            step[a] = st;
        }
        long long base = 0;
        for (int d = 0; d < in.ndim; ++d) {
            base += start[d] * in.stride[d];
            step_s[d] = step[d] * in.stride[d];
        }
        base_s = base;
    }
    __syncthreads();
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long rem = i, off = base_s;
        for (int d = out.ndim - 1; d >= 0; --d) {
            long long q = rem / out.size[d];
            off += (rem - q * out.size[d]) * step_s[d];
            rem = q;
        }
        y[i] = x[off];
    }
}

// Gather along an axis: data viewed as [outer, axis_dim, inner], indices flat (count ni),
// out [outer, ni, inner]. Negative indices wrap per ONNX. Indices outside
// [-axis_dim, axis_dim) are NOT checked (the reference raises; a kernel cannot): their
// output elements are unspecified -- this kernel writes zeros and never reads out of bounds.
template <class T>
__device__ void gather(const T* __restrict__ x, const void* __restrict__ idx, int idx64,
                       T* __restrict__ y, long long outer, long long axis_dim, long long ni,
                       long long inner) {
    long long n = outer * ni * inner;
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long q = i / inner, c = i - q * inner;
        long long o = q / ni, j = q - o * ni;
        long long a = read_index(idx, j, idx64);
        if (a < 0) a += axis_dim;
        T v;
        if (a >= 0 && a < axis_dim) v = x[(o * axis_dim + a) * inner + c];
        else memset(&v, 0, sizeof(T));
        y[i] = v;
    }
}

// TransposedGather (the fusion pass's Gather of a transposed matrix): y[j][r] = x[r][idx[j]]
// for x [rows, cols]; an index out of range gives zeros, as gather above
template <class T>
__device__ void gather_cols(const T* __restrict__ x, const void* __restrict__ idx, int idx64,
                            T* __restrict__ y, long long rows, long long cols, long long ni) {
    long long n = ni * rows;
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long j = i / rows, r = i - j * rows;
        long long a = read_index(idx, j, idx64);
        if (a < 0) a += cols;
        T v;
        if (a >= 0 && a < cols) v = x[r * cols + a];
        else memset(&v, 0, sizeof(T));
        y[i] = v;
    }
}

// Tile: out index decomposed over out.size; input coordinate = out coordinate mod in dim
template <class T>
__device__ void tile(const T* __restrict__ x, T* __restrict__ y, Geo out, Geo in, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long rem = i, off = 0;
        for (int d = out.ndim - 1; d >= 0; --d) {
            long long q = rem / out.size[d];
            off += ((rem - q * out.size[d]) % in.size[d]) * in.stride[d];
            rem = q;
        }
        y[i] = x[off];
    }
}

#define EP_MOVEMENT(S)                                                                      \
extern "C" __global__ void strided_copy_##S(const S##_t* x, S##_t* y, Geo g, long long n) { \
    strided_copy<S##_t>(x, y, g, n);                                                        \
}                                                                                           \
extern "C" __global__ void transpose_tile_##S(const S##_t* x, S##_t* y, long long rows,     \
                                              long long cols, long long batch) {            \
    transpose_tile<S##_t>(x, y, rows, cols, batch);                                         \
}                                                                                           \
extern "C" __global__ void copy2d_##S(const S##_t* x, long long xp, S##_t* y, long long yp, \
                                      long long rows, long long cols) {                     \
    copy2d<S##_t>(x, xp, y, yp, rows, cols);                                                \
}                                                                                           \
extern "C" __global__ void concat_##S(CatInputs c, S##_t* y, long long yp,                  \
                                      long long rows) {                                     \
    concat<S##_t>(c, y, yp, rows);                                                          \
}                                                                                           \
extern "C" __global__ void slice_##S(const S##_t* x, S##_t* y, Geo out, Geo in,             \
                                     const void* starts, const void* axes,                  \
                                     const void* steps, int k, int idx64, long long n) {    \
    slice<S##_t>(x, y, out, in, starts, axes, steps, k, idx64, n);                          \
}                                                                                           \
extern "C" __global__ void gather_##S(const S##_t* x, const void* idx, int idx64, S##_t* y, \
                                      long long outer, long long axis_dim, long long ni,    \
                                      long long inner) {                                    \
    gather<S##_t>(x, idx, idx64, y, outer, axis_dim, ni, inner);                            \
}                                                                                           \
extern "C" __global__ void gather_cols_##S(const S##_t* x, const void* idx, int idx64,      \
                                           S##_t* y, long long rows, long long cols,          \
                                           long long ni) {                                    \
    gather_cols<S##_t>(x, idx, idx64, y, rows, cols, ni);                                     \
}                                                                                           \
extern "C" __global__ void tile_##S(const S##_t* x, S##_t* y, Geo out, Geo in, long long n) { \
    tile<S##_t>(x, y, out, in, n);                                                          \
}

EP_MOVEMENT(x1)
EP_MOVEMENT(x2)
EP_MOVEMENT(x4)
EP_MOVEMENT(x8)
EP_MOVEMENT(x16)
