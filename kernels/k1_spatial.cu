// k1 spatial mapping: a 2-D block of threads covers a 2-D tile of one output channel's map.
#include "common.cuh"

// Assumptions: FP32 contiguous NCHW; geometry specialised to 3x3, stride 1, padding 1, dilation 1
// (so H_out = H, W_out = W). One output per thread; blockDim.x along W, blockDim.y along H.
// The 1-D grid enumerates (n, c_out, tile row, tile column) so N*C_out may exceed 65535.
// Supports every shape with C_in and C_out divisible by groups.
extern "C" __global__ void k1_spatial(const float* __restrict__ x, const float* __restrict__ wt,
                                      float* __restrict__ y, int N, int C_in, int C_out, int H,
                                      int W, int groups) {
    const int tiles_w = (W + blockDim.x - 1) / blockDim.x;
    const int tiles_h = (H + blockDim.y - 1) / blockDim.y;
    int tile_w, tile_h, c_o, n;
    split_index(blockIdx.x, tiles_w, tiles_h, C_out, tile_w, tile_h, c_o, n);
    if (n >= N) return;

    const int w_o = tile_w * blockDim.x + threadIdx.x;
    const int h_o = tile_h * blockDim.y + threadIdx.y;
    if (w_o >= W || h_o >= H) return;

    const int cin_per_group = C_in / groups;
    const int g = c_o / (C_out / groups);
    float acc = 0.0f;
    for (int ci = 0; ci < cin_per_group; ++ci) {
        const int c_i = g * cin_per_group + ci;
        const float* x_c = x + nchw_offset(n, c_i, 0, 0, C_in, H, W);
        const float* w_k = wt + ((long long)c_o * cin_per_group + ci) * 9;
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
            const int h_i = h_o - 1 + kh;
            if (h_i < 0 || h_i >= H) continue;
#pragma unroll
            for (int kw = 0; kw < 3; ++kw) {
                const int w_i = w_o - 1 + kw;
                if (w_i < 0 || w_i >= W) continue;
                acc = fmaf(x_c[h_i * W + w_i], w_k[kh * 3 + kw], acc);
            }
        }
    }
    y[nchw_offset(n, c_o, h_o, w_o, C_out, H, W)] = acc;
}
