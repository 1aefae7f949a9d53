// k3 four adjacent horizontal outputs per thread: the thread reads a 3 x 6 input window per
// input channel once and reuses it for all four outputs (18 loads instead of 36).
#include "common.cuh"

// Assumptions: FP32 contiguous NCHW; 3x3, stride 1, padding 1, dilation 1. Thread t covers
// outputs w = 4q .. 4q+3 of one row; the 1-D grid enumerates (n, c_out, h, q) with
// q < ceil(W / 4). Correct for any W: loads and stores past W are guarded (W % 4 != 0 tail).
// Supports every shape with C_in and C_out divisible by groups.
extern "C" __global__ void k3_four_wide(const float* __restrict__ x, const float* __restrict__ wt,
                                        float* __restrict__ y, int N, int C_in, int C_out, int H,
                                        int W, int groups) {
    const int quads = (W + 3) / 4;
    const long long total = (long long)N * C_out * H * quads;
    const int cin_per_group = C_in / groups;
    const int cout_per_group = C_out / groups;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        int q, h_o, c_o, n;
        split_index(idx, quads, H, C_out, q, h_o, c_o, n);
        const int g = c_o / cout_per_group;
        const int w_first = 4 * q;

        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int ci = 0; ci < cin_per_group; ++ci) {
            const int c_i = g * cin_per_group + ci;
            const float* w_k = wt + ((long long)c_o * cin_per_group + ci) * 9;
#pragma unroll
            for (int kh = 0; kh < 3; ++kh) {
                const int h_i = h_o - 1 + kh;
                if (h_i < 0 || h_i >= H) continue;
                const float* row = x + nchw_offset(n, c_i, h_i, 0, C_in, H, W);
                float win[6];  // input columns w_first-1 .. w_first+4
#pragma unroll
                for (int j = 0; j < 6; ++j) {
                    const int w_i = w_first - 1 + j;
                    win[j] = (w_i >= 0 && w_i < W) ? row[w_i] : 0.0f;
                }
#pragma unroll
                for (int o = 0; o < 4; ++o)
#pragma unroll
                    for (int kw = 0; kw < 3; ++kw)
                        acc[o] = fmaf(win[o + kw], w_k[kh * 3 + kw], acc[o]);
            }
        }
        float* out = y + nchw_offset(n, c_o, h_o, 0, C_out, H, W);
#pragma unroll
        for (int o = 0; o < 4; ++o)
            if (w_first + o < W) out[w_first + o] = acc[o];
    }
}
