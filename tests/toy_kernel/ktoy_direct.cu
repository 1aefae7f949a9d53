// ktoy: a toy kernel family for tests/test_planted_kernel.py, planted into a copy of kernels/ and
// never part of the registry. One output per thread over a grid-stride loop, one entry per block
// size of its table (KTOY_BLOCKS, the generated header), so the tuning stage has variants.
#include "common.cuh"
#include "ktoy_direct_table.cuh"

template <int THREADS>
__device__ __forceinline__ void ktoy_body(const float* __restrict__ x,
                                          const float* __restrict__ wt, float* __restrict__ y,
                                          int N, int C_in, int C_out, int H, int W, int groups) {
    const int cin_per_group = C_in / groups;
    const int cout_per_group = C_out / groups;
    const long long total = (long long)N * C_out * H * W;
    for (long long idx = (long long)blockIdx.x * THREADS + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * THREADS) {
        int w_o, h_o, c_o, n;
        split_index(idx, W, H, C_out, w_o, h_o, c_o, n);
        const int g = c_o / cout_per_group;
        float acc = 0.0f;
        for (int ci = 0; ci < cin_per_group; ++ci) {
            const int c_i = g * cin_per_group + ci;
            const float* w_k = wt + ((long long)c_o * cin_per_group + ci) * 9;
            for (int kh = 0; kh < 3; ++kh) {
                const int h_i = h_o - 1 + kh;
                if (h_i < 0 || h_i >= H) continue;
                for (int kw = 0; kw < 3; ++kw) {
                    const int w_i = w_o - 1 + kw;
                    if (w_i < 0 || w_i >= W) continue;
                    acc = fmaf(x[nchw_offset(n, c_i, h_i, w_i, C_in, H, W)], w_k[kh * 3 + kw], acc);
                }
            }
        }
        y[idx] = acc;
    }
}

#define KTOY_ENTRY(THREADS)                                                                      \
    extern "C" __global__ void __launch_bounds__(THREADS) ktoy_direct_b##THREADS(                \
        const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y, int N, \
        int C_in, int C_out, int H, int W, int groups) {                                         \
        ktoy_body<THREADS>(x, wt, y, N, C_in, C_out, H, W, groups);                              \
    }
KTOY_BLOCKS(KTOY_ENTRY)
