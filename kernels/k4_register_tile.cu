// k4 register tile: each thread computes a ROWS x 4 patch of outputs for COB output channels of
// one group. The (ROWS+2) x 6 input window of each input channel is read once into registers and
// reused by all COB x ROWS x 4 outputs; 16-byte loads and stores where rows are aligned.
#include <stdint.h>

#include "common.cuh"

// Assumptions: FP32 contiguous NCHW; 3x3, stride 1, padding 1, dilation 1. COB divides
// C_out/groups, so the channel block never straddles two groups (the host's predicate picks it).
// The 1-D grid enumerates (n, channel block, row block, quad); any H and W: rows past H and
// columns past W are guarded, and the 16-byte path is taken only when W % 4 == 0 and the tensors
// are 16-byte aligned.
template <int ROWS, int COB>
__device__ void k4_register_tile(const float* __restrict__ x, const float* __restrict__ wt,
                                 float* __restrict__ y, int N, int C_in, int C_out, int H, int W,
                                 int groups) {
    const int quads = (W + 3) / 4;
    const int row_blocks = (H + ROWS - 1) / ROWS;
    const int channel_blocks = C_out / COB;
    const long long total = (long long)N * channel_blocks * row_blocks * quads;
    const int cin_per_group = C_in / groups;
    const int cout_per_group = C_out / groups;
    const bool aligned = (W % 4 == 0) && ((reinterpret_cast<uintptr_t>(x) & 15) == 0) &&
                         ((reinterpret_cast<uintptr_t>(y) & 15) == 0);

    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const int q = (int)(idx % quads);
        long long rest = idx / quads;
        const int row_block = (int)(rest % row_blocks);
        rest /= row_blocks;
        const int channel_block = (int)(rest % channel_blocks);
        const int n = (int)(rest / channel_blocks);
        const int c_o0 = channel_block * COB;
        const int g = c_o0 / cout_per_group;
        const int h_first = row_block * ROWS;
        const int w_first = 4 * q;

        float acc[COB][ROWS][4];
#pragma unroll
        for (int c = 0; c < COB; ++c)
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int o = 0; o < 4; ++o) acc[c][r][o] = 0.0f;

        for (int ci = 0; ci < cin_per_group; ++ci) {
            const float* x_c = x + nchw_offset(n, g * cin_per_group + ci, 0, 0, C_in, H, W);
            float win[ROWS + 2][6];  // input rows h_first-1 .. h_first+ROWS, columns w_first-1 .. +4
#pragma unroll
            for (int r = 0; r < ROWS + 2; ++r) {
                const int h_i = h_first - 1 + r;
                if (h_i < 0 || h_i >= H) {
#pragma unroll
                    for (int j = 0; j < 6; ++j) win[r][j] = 0.0f;
                    continue;
                }
                const float* row = x_c + (long long)h_i * W;
                if (aligned) {  // w_first .. w_first+3 are inside the row when W % 4 == 0
                    const float4 mid = __ldg(reinterpret_cast<const float4*>(row + w_first));
                    win[r][0] = w_first > 0 ? __ldg(row + w_first - 1) : 0.0f;
                    win[r][1] = mid.x;
                    win[r][2] = mid.y;
                    win[r][3] = mid.z;
                    win[r][4] = mid.w;
                    win[r][5] = w_first + 4 < W ? __ldg(row + w_first + 4) : 0.0f;
                } else {
#pragma unroll
                    for (int j = 0; j < 6; ++j) {
                        const int w_i = w_first - 1 + j;
                        win[r][j] = (w_i >= 0 && w_i < W) ? __ldg(row + w_i) : 0.0f;
                    }
                }
            }
#pragma unroll
            for (int c = 0; c < COB; ++c) {
                const float* w_k = wt + ((long long)(c_o0 + c) * cin_per_group + ci) * 9;
                float k[9];
#pragma unroll
                for (int t = 0; t < 9; ++t) k[t] = __ldg(w_k + t);
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
#pragma unroll
                    for (int o = 0; o < 4; ++o)
#pragma unroll
                        for (int kh = 0; kh < 3; ++kh)
#pragma unroll
                            for (int kw = 0; kw < 3; ++kw)
                                acc[c][r][o] = fmaf(win[r + kh][o + kw], k[kh * 3 + kw], acc[c][r][o]);
            }
        }

#pragma unroll
        for (int c = 0; c < COB; ++c) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const int h_o = h_first + r;
                if (h_o >= H) break;
                float* out = y + nchw_offset(n, c_o0 + c, h_o, 0, C_out, H, W);
                if (aligned) {
                    *reinterpret_cast<float4*>(out + w_first) =
                        make_float4(acc[c][r][0], acc[c][r][1], acc[c][r][2], acc[c][r][3]);
                } else {
#pragma unroll
                    for (int o = 0; o < 4; ++o)
                        if (w_first + o < W) out[w_first + o] = acc[c][r][o];
                }
            }
        }
    }
}

#define K4_ENTRY(ROWS, COB)                                                                     \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        k4_register_tile_r##ROWS##_c##COB(const float* __restrict__ x,                          \
                                          const float* __restrict__ wt, float* __restrict__ y,  \
                                          int N, int C_in, int C_out, int H, int W, int groups) { \
        k4_register_tile<ROWS, COB>(x, wt, y, N, C_in, C_out, H, W, groups);                    \
    }
K4_ENTRY(1, 1)
K4_ENTRY(1, 2)
K4_ENTRY(1, 4)
K4_ENTRY(1, 8)
K4_ENTRY(2, 1)
K4_ENTRY(2, 2)
K4_ENTRY(2, 4)
K4_ENTRY(2, 8)
K4_ENTRY(4, 1)
K4_ENTRY(4, 2)
