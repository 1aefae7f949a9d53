// What the weight-gradient kernels (wgrad_nchw.cu, wgrad_nhwc.cu) share: runs of channels loaded
// whole or one float at a time, a lane of a channel vector, and stage 2 of the deterministic
// two-stage reduction. dW[co][ci][kh][kw] = sum over (n, h, w) of dY[n][co][h][w] *
// X[n][g * C_in/groups + ci][h + kh - 1][w + kw - 1] (zero outside the map).
// Stage 1 (the layout's kernel): the block of slice z sums a fixed set of (n, h, w) into its
// partial, ws[z][co][ci][9] (every element of every slice written, zeros included); stage 2
// (wg_reduce): dW[e] = ws[0][e] + ws[1][e] + ... in slice order. No atomics: every sum is taken in
// an order fixed by the launch, which depends on the geometry alone, so two runs agree bit for bit.
#pragma once
#include "channel_vec.cuh"

#define WG_FULL_MASK 0xffffffffu

// CNT consecutive floats from p (a run of channels of one pixel), or zeros where !ok. VEC: p is
// aligned to the widest access that divides CNT (16 or 8 bytes) and all CNT are there; else one
// float at a time, those at or past `avail` read as zero.
template <int CNT, int VEC>
__device__ __forceinline__ void wg_load_run(float (&v)[CNT], const float* p, int avail, bool ok) {
    if (VEC && CNT % 4 == 0) {
#pragma unroll
        for (int k = 0; k < CNT / 4; ++k) {
            const float4 q = ok ? __ldg(reinterpret_cast<const float4*>(p) + k)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
            v[4 * k] = q.x, v[4 * k + 1] = q.y, v[4 * k + 2] = q.z, v[4 * k + 3] = q.w;
        }
    } else if (VEC && CNT % 2 == 0) {
#pragma unroll
        for (int k = 0; k < CNT / 2; ++k) {
            const float2 q = ok ? __ldg(reinterpret_cast<const float2*>(p) + k)
                                : make_float2(0.f, 0.f);
            v[2 * k] = q.x, v[2 * k + 1] = q.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < CNT; ++i) v[i] = (ok && i < avail) ? __ldg(p + i) : 0.f;
    }
}

// split_index in 32-bit: the host keeps every strip and tile count below 2**31, and 64-bit
// division is a subroutine whose call costs registers and stack (spills) in the small entries.
__device__ __forceinline__ void wg_split(int index, int n0, int n1, int& c0, int& c1, int& c2) {
    c0 = index % n0;
    const int rest = index / n0;
    c1 = rest % n1;
    c2 = rest / n1;
}

// Lane j (a compile-time constant once unrolled) of a channel vector.
__device__ __forceinline__ float wg_lane(const ChannelVec<4>& a, int j) {
    return j == 0 ? a.v.x : j == 1 ? a.v.y : j == 2 ? a.v.z : a.v.w;
}
__device__ __forceinline__ float wg_lane(const ChannelVec<2>& a, int j) {
    return j == 0 ? a.v.x : a.v.y;
}
__device__ __forceinline__ float wg_lane(const ChannelVec<1>& a, int) { return a.v; }

// Stage 2: dW[e] = the sum over z of ws[z * elems + e], in an order fixed by the launch. A block
// of (WG_REDUCE_X, ry) threads takes WG_REDUCE_X neighbouring elements (each load coalesced);
// thread (x, y) sums slices y, y + ry, y + 2 ry, ... of its element in WG_REDUCE_CHAINS
// interleaved running sums (chain k takes every WG_REDUCE_CHAINS-th of them, so that many loads
// are in flight; added in k order), then thread (x, 0) adds the ry partials in y order. ry
// (blockDim.y, at most WG_REDUCE_MAX_Y) is the host's, from `slices` alone, so the order depends
// on the geometry only and two runs agree bit for bit. One thread per element summing every
// slice in turn (the first design) made a chain of `slices` dependent loads in a few hundred
// threads where C is small, and the slices are most (hundreds) on the large maps of small C.
// Assumes ws holds slices * elems floats, all written; grid.x = ceil(elems / WG_REDUCE_X).
#define WG_REDUCE_ENTRY                                                                        \
    extern "C" __global__ void __launch_bounds__(WG_REDUCE_X * WG_REDUCE_MAX_Y) wg_reduce(     \
        const float* __restrict__ ws, float* __restrict__ dw, long long elems, int slices) {   \
        __shared__ float part[WG_REDUCE_MAX_Y][WG_REDUCE_X];                                   \
        const long long e = (long long)blockIdx.x * WG_REDUCE_X + threadIdx.x;                 \
        const int ry = blockDim.y;                                                             \
        float chain[WG_REDUCE_CHAINS];                                                         \
        _Pragma("unroll") for (int k = 0; k < WG_REDUCE_CHAINS; ++k) chain[k] = 0.f;           \
        if (e < elems) {                                                                       \
            int z = threadIdx.y;                                                               \
            for (; z + (WG_REDUCE_CHAINS - 1) * ry < slices; z += WG_REDUCE_CHAINS * ry) {      \
                _Pragma("unroll") for (int k = 0; k < WG_REDUCE_CHAINS; ++k)                   \
                    chain[k] += __ldg(ws + (long long)(z + k * ry) * elems + e);               \
            }                                                                                  \
            _Pragma("unroll") for (int k = 0; k < WG_REDUCE_CHAINS - 1; ++k)                   \
                if (z + k * ry < slices) chain[k] += __ldg(ws + (long long)(z + k * ry) * elems + e); \
        }                                                                                      \
        float sum = chain[0];                                                                  \
        _Pragma("unroll") for (int k = 1; k < WG_REDUCE_CHAINS; ++k) sum += chain[k];          \
        part[threadIdx.y][threadIdx.x] = sum;                                                  \
        __syncthreads();                                                                       \
        if (threadIdx.y == 0 && e < elems) {                                                   \
            float total = part[0][threadIdx.x];                                                \
            for (int y = 1; y < ry; ++y) total += part[y][threadIdx.x];                        \
            dw[e] = total;                                                                     \
        }                                                                                      \
    }
