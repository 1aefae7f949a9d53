// k12: depthwise 3x3 convolution on contiguous NCHW tensors, for the maps where k5's register
// tile and k6's staged rows leave threads idle or wait on a barrier: the 7x7 to 19x19 maps of
// the networks' later stages at N = 16 to 64, and the small maps at N = 1. Why, from record
// h200-2026-12-02-c: there the fastest NCHW kernel took 1.3x to 1.5x cuDNN's channels_last time
// on those maps, while on maps of 56x56 and more it matched or beat it. An NCHW plane of a small
// map is a few hundred contiguous floats, so:
// - A block holds whole tiles of one or more planes: the grid is 3-D, x over groups of planes
//   (threadIdx.z: one plane each), y over groups of ROWS output rows (threadIdx.y), z over groups
//   of PIX output columns (threadIdx.x, neighbouring threads on neighbouring columns). A thread's
//   plane, rows and columns are block and thread coordinates: no division before its first load;
//   the one modulo (the plane's channel, c = plane % C) feeds only the tap loads.
// - A thread holds the (ROWS + 2) x (PIX + 2) input window of its ROWS x PIX outputs in
//   registers, so each input it loads serves up to 9 of its outputs; every load (the window and
//   the 9 taps) is issued before the first multiply, with no shared memory and no barrier.
// - A window row's PIX middle floats are loaded as 16- or 8-byte vectors when W and the tensors'
//   addresses allow it (checked here, uniformly for the launch), and the outputs stored likewise.
// The tuning stage picks ROWS, PIX and the block size per shape.
// EPI (epilogue.cuh): every unflipped entry also comes with each fused epilogue
// (`<entry>_ep_<activation>`: y = act(conv + bias[c]) before the store; bias may be null).
// FLIP: every entry also comes turned 180 degrees (`<entry>_flip`: tap t read as tap 8 - t), the
// depthwise input gradient's weight w' read from the weight as it is, as in k11 (see there).
#include <stdint.h>

#include "common.cuh"
#include "epilogue.cuh"
// K12_TILES: the (ROWS, PIX) table, written in Python (nchw_plane_kernels.K12_TABLE), generated.
#include "k12_depthwise_planes_nchw_table.cuh"

// v[j] = row[w0 + j - 1] for j = 0 .. PIX + 1, zero outside the row (w < 0 or w >= W: the
// padding) or where the row itself is outside the map (inside false). vec (4, 2 or 1): the
// widest vector the launch may load (W and the addresses allow it); w0 is a multiple of PIX, so
// with vec dividing PIX and W a vector is wholly inside the row or wholly outside it.
template <int PIX>
__device__ __forceinline__ void k12_load_row(const float* __restrict__ row, int w0, int W,
                                             int vec, bool inside, float (&v)[PIX + 2]) {
    if (!inside) {
#pragma unroll
        for (int j = 0; j < PIX + 2; ++j) v[j] = 0.0f;
        return;
    }
    v[0] = w0 > 0 ? __ldg(row + w0 - 1) : 0.0f;
    v[PIX + 1] = w0 + PIX < W ? __ldg(row + w0 + PIX) : 0.0f;
    if (PIX % 4 == 0 && vec == 4) {
#pragma unroll
        for (int j = 0; j < PIX; j += 4) {
            const float4 q = w0 + j < W ? __ldg(reinterpret_cast<const float4*>(row + w0 + j))
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            v[1 + j] = q.x;
            v[2 + j] = q.y;
            v[3 + j] = q.z;
            v[4 + j] = q.w;
        }
    } else if (PIX % 2 == 0 && vec >= 2) {
#pragma unroll
        for (int j = 0; j < PIX; j += 2) {
            const float2 q = w0 + j < W ? __ldg(reinterpret_cast<const float2*>(row + w0 + j))
                                        : make_float2(0.0f, 0.0f);
            v[1 + j] = q.x;
            v[2 + j] = q.y;
        }
    } else {
#pragma unroll
        for (int j = 0; j < PIX; ++j) v[1 + j] = w0 + j < W ? __ldg(row + w0 + j) : 0.0f;
    }
}

// row[w0 + j] = out[j] for the columns inside the map, as vectors where the load took them.
template <int PIX>
__device__ __forceinline__ void k12_store_row(float* __restrict__ row, int w0, int W, int vec,
                                              const float (&out)[PIX]) {
    if (PIX % 4 == 0 && vec == 4) {
#pragma unroll
        for (int j = 0; j < PIX; j += 4)
            if (w0 + j < W)
                *reinterpret_cast<float4*>(row + w0 + j) =
                    make_float4(out[j], out[j + 1], out[j + 2], out[j + 3]);
    } else if (PIX % 2 == 0 && vec >= 2) {
#pragma unroll
        for (int j = 0; j < PIX; j += 2)
            if (w0 + j < W)
                *reinterpret_cast<float2*>(row + w0 + j) = make_float2(out[j], out[j + 1]);
    } else {
#pragma unroll
        for (int j = 0; j < PIX; ++j)
            if (w0 + j < W) row[w0 + j] = out[j];
    }
}

// Assumptions at the signature (the host's support predicate and launch refuse the rest):
// - FP32; 3x3, stride 1, padding 1, dilation 1; a bias only in the fused entries (bias: C
//   floats or null); depthwise with channel multiplier 1:
//   groups == C_in == C_out.
// - x: N x C x H x W, y: N x C x H x W, both contiguous NCHW; w: C x 3 x 3. Any float pointer:
//   16- and 8-byte vectors are used only where W and both tensors' addresses allow them.
// - grid = (ceil(N * C / blockDim.z), ceil(H / (ROWS * blockDim.y)), ceil(W / (PIX *
//   blockDim.x))): N * C < 2**31 planes (a plane's index and channel are 32-bit; its offset is
//   64-bit), the row and column groups at most 65535 blocks each (gridDim.y and z).
template <int ROWS, int PIX, bool FLIP, class EPI>
__device__ __forceinline__ void k12_depthwise_nchw(const float* __restrict__ x,
                                                   const float* __restrict__ wt,
                                                   float* __restrict__ y,
                                                   const float* __restrict__ bias, int N,
                                                   int C_in, int C_out, int H, int W,
                                                   int groups) {
    if (C_in != groups || C_out != groups) return;  // the host refuses these first
    const int plane = blockIdx.x * blockDim.z + threadIdx.z;  // n * C + c
    const int h0 = (blockIdx.y * blockDim.y + threadIdx.y) * ROWS;
    const int w0 = (blockIdx.z * blockDim.x + threadIdx.x) * PIX;
    if (plane >= N * C_in || h0 >= H || w0 >= W) return;
    // The widest vector every row of both tensors allows: rows start W floats apart.
    const uintptr_t addresses = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
    const int vec = (W % 4 == 0 && addresses % 16 == 0) ? 4
                    : (W % 2 == 0 && addresses % 8 == 0) ? 2 : 1;
    const long long plane_floats = (long long)H * W;
    const float* xp = x + plane * plane_floats;

    // The window: input rows h0 - 1 .. h0 + ROWS, columns w0 - 1 .. w0 + PIX (zero outside the
    // map), then the plane's taps; every load is issued before the first multiply.
    float in[ROWS + 2][PIX + 2];
#pragma unroll
    for (int r = 0; r < ROWS + 2; ++r) {
        const int hh = h0 + r - 1;
        k12_load_row<PIX>(xp + (long long)hh * W, w0, W, vec, hh >= 0 && hh < H, in[r]);
    }
    const float* taps = wt + (long long)(plane % C_in) * 9;
    float k[9];
#pragma unroll
    for (int t = 0; t < 9; ++t) k[t] = __ldg(taps + (FLIP ? 8 - t : t));
    float b = 0.0f;
    if constexpr (EPI::fused) b = epilogue_bias(bias, plane % C_in);

    float* yp = y + plane * plane_floats;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        if (h0 + r >= H) break;
        float out[PIX];
#pragma unroll
        for (int q = 0; q < PIX; ++q) {
            float acc = 0.0f;
#pragma unroll
            for (int kh = 0; kh < 3; ++kh) {
#pragma unroll
                for (int kw = 0; kw < 3; ++kw) acc = fmaf(in[r + kh][q + kw], k[kh * 3 + kw], acc);
            }
            if constexpr (EPI::fused) acc = EPI::apply(acc + b);
            out[q] = acc;
        }
        k12_store_row<PIX>(yp + (long long)(h0 + r) * W, w0, W, vec, out);
    }
}

// Seven entries per (output rows, output columns) per thread of the table (K12_TILES): the
// convolution, the same turned 180 degrees (_flip), and the convolution with each fused
// epilogue (_ep_<activation>, a fourth pointer: the bias); each allows up to 256 threads per
// block.
#define K12_KERNEL(NAME, ROWS, PIX, FLIP)                                                      \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                     \
        const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,       \
        int N, int C_in, int C_out, int H, int W, int groups) {                                 \
        k12_depthwise_nchw<ROWS, PIX, FLIP, NoEpilogue>(x, wt, y, nullptr, N, C_in, C_out, H,   \
                                                        W, groups);                             \
    }
#define K12_FUSED(ROWS, PIX, UNUSED, ACT, EPI)                                                 \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        k12_depthwise_planes_nchw_r##ROWS##_p##PIX##_ep_##ACT(                                  \
            const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,   \
            const float* __restrict__ bias, int N, int C_in, int C_out, int H, int W,           \
            int groups) {                                                                       \
        k12_depthwise_nchw<ROWS, PIX, false, EPI>(x, wt, y, bias, N, C_in, C_out, H, W, groups); \
    }
#define K12_ENTRY(ROWS, PIX)                                                                   \
    K12_KERNEL(k12_depthwise_planes_nchw_r##ROWS##_p##PIX, ROWS, PIX, false)                    \
    K12_KERNEL(k12_depthwise_planes_nchw_r##ROWS##_p##PIX##_flip, ROWS, PIX, true)              \
    EPILOGUE_ACTIVATIONS(K12_FUSED, ROWS, PIX, 0)

K12_TILES(K12_ENTRY)
