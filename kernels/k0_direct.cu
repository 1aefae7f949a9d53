// k0 direct: one output element per thread, general geometry.
#include "common.cuh"

// Assumptions: FP32 contiguous NCHW; kernel 3x3; stride, padding and dilation are run-time
// parameters (the atlas fixes them to 1, 1, 1); H_out/W_out computed by the host from them.
// Supports every shape with C_in and C_out divisible by groups. Grid-stride over N*C_out*H_out*W_out.
extern "C" __global__ void k0_direct(const float* __restrict__ x, const float* __restrict__ wt,
                                     float* __restrict__ y, int N, int C_in, int C_out, int H, int W,
                                     int groups, int H_out, int W_out, int stride, int pad, int dil) {
    const int cin_per_group = C_in / groups;
    const int cout_per_group = C_out / groups;
    const long long total = (long long)N * C_out * H_out * W_out;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        int w_o, h_o, c_o, n;
        split_index(idx, W_out, H_out, C_out, w_o, h_o, c_o, n);
        const int g = c_o / cout_per_group;

        float acc = 0.0f;
        for (int ci = 0; ci < cin_per_group; ++ci) {
            const int c_i = g * cin_per_group + ci;
            const float* w_k = wt + ((long long)c_o * cin_per_group + ci) * 9;
#pragma unroll
            for (int kh = 0; kh < 3; ++kh) {
                const int h_i = h_o * stride - pad + kh * dil;
                if (h_i < 0 || h_i >= H) continue;
#pragma unroll
                for (int kw = 0; kw < 3; ++kw) {
                    const int w_i = w_o * stride - pad + kw * dil;
                    if (w_i < 0 || w_i >= W) continue;
                    acc = fmaf(x[nchw_offset(n, c_i, h_i, w_i, C_in, H, W)], w_k[kh * 3 + kw], acc);
                }
            }
        }
        y[idx] = acc;
    }
}
