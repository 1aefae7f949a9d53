// k2 cooperative shared halo: a block stages its input tile plus a one-pixel halo for every input
// channel of the group in shared memory, then each thread computes one output from there.
#include "common.cuh"
// K2_TILE_W, K2_TILE_H and the channel counts K2_CHANNELS_PER_GROUP: the registry's table
// (groupconv.nchw_tile_kernels.K2_TABLE).
#include "k2_shared_halo_table.cuh"

// Assumptions: FP32 contiguous NCHW; 3x3, stride 1, padding 1, dilation 1; blockDim = (32, 8);
// CIN_PER_GROUP (C_in / groups) is 1, 2 or 4: the staged tile is CIN_PER_GROUP * 10 * 34 floats.
// Other channel counts per group are unsupported (the host's support predicate says so).
// The 1-D grid enumerates (n, c_out, tile row, tile column).
template <int CIN_PER_GROUP>
__device__ void k2_shared_halo(const float* __restrict__ x, const float* __restrict__ wt,
                               float* __restrict__ y, int N, int C_in, int C_out, int H, int W,
                               int groups) {
    __shared__ float tile[CIN_PER_GROUP][K2_TILE_H + 2][K2_TILE_W + 2];
    const int tiles_w = (W + K2_TILE_W - 1) / K2_TILE_W;
    const int tiles_h = (H + K2_TILE_H - 1) / K2_TILE_H;
    int tile_w, tile_h, c_o, n;
    split_index(blockIdx.x, tiles_w, tiles_h, C_out, tile_w, tile_h, c_o, n);
    if (n >= N) return;  // uniform across the block, so no thread skips the barrier alone

    const int g = c_o / (C_out / groups);
    const int h0 = tile_h * K2_TILE_H - 1;  // input row of tile[.][0][.]
    const int w0 = tile_w * K2_TILE_W - 1;  // input column of tile[.][.][0]
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    constexpr int kTileElems = CIN_PER_GROUP * (K2_TILE_H + 2) * (K2_TILE_W + 2);
    for (int i = tid; i < kTileElems; i += blockDim.x * blockDim.y) {
        const int ci = i / ((K2_TILE_H + 2) * (K2_TILE_W + 2));
        const int r = (i / (K2_TILE_W + 2)) % (K2_TILE_H + 2);
        const int c = i % (K2_TILE_W + 2);
        const int h_i = h0 + r;
        const int w_i = w0 + c;
        float v = 0.0f;  // zero padding outside the map
        if (h_i >= 0 && h_i < H && w_i >= 0 && w_i < W)
            v = x[nchw_offset(n, g * CIN_PER_GROUP + ci, h_i, w_i, C_in, H, W)];
        tile[ci][r][c] = v;
    }
    __syncthreads();

    const int w_o = tile_w * K2_TILE_W + threadIdx.x;
    const int h_o = tile_h * K2_TILE_H + threadIdx.y;
    if (w_o >= W || h_o >= H) return;
    float acc = 0.0f;
#pragma unroll
    for (int ci = 0; ci < CIN_PER_GROUP; ++ci) {
        const float* w_k = wt + ((long long)c_o * CIN_PER_GROUP + ci) * 9;
#pragma unroll
        for (int kh = 0; kh < 3; ++kh)
#pragma unroll
            for (int kw = 0; kw < 3; ++kw)
                acc = fmaf(tile[ci][threadIdx.y + kh][threadIdx.x + kw], w_k[kh * 3 + kw], acc);
    }
    y[nchw_offset(n, c_o, h_o, w_o, C_out, H, W)] = acc;
}

#define K2_ENTRY(CPG)                                                                          \
    extern "C" __global__ void __launch_bounds__(K2_TILE_W * K2_TILE_H)                        \
        k2_shared_halo_cpg##CPG(const float* __restrict__ x, const float* __restrict__ wt,     \
                                float* __restrict__ y, int N, int C_in, int C_out, int H,      \
                                int W, int groups) {                                           \
        k2_shared_halo<CPG>(x, wt, y, N, C_in, C_out, H, W, groups);                           \
    }
K2_CHANNELS_PER_GROUP(K2_ENTRY)
