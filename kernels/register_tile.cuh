// The register tile shared by k4 and k5: each thread computes a ROWS x 4 patch of outputs for COB
// output channels of one group, reading each input channel's (ROWS+2) x 6 window once into
// registers and reusing it for all COB x ROWS x 4 outputs. k4 launches it by a rule of thumb with
// 16-byte or scalar accesses; k5 adds 8-byte accesses (PAIRS) and a per-shape tuned launch.
#pragma once
#include <stdint.h>

#include "common.cuh"
#include "epilogue.cuh"

// Assumptions: FP32 contiguous NCHW; 3x3, stride 1, padding 1, dilation 1; a bias (C_out floats
// or null) only in the fused entries. COB divides
// C_out/groups (the host checks it), so a channel block stays in one group.
// The 1-D grid enumerates (n, channel block, row block, quad); rows past H and columns past W are
// guarded. Loads and stores: 16-byte when W % 4 == 0, else (PAIRS only) 8-byte when W % 2 == 0,
// else scalar; the pointers' alignment is checked here, not assumed. Offsets are 64-bit: any
// tensor size the grid can enumerate.
// EPI (epilogue.cuh): k5's fused entries apply act(acc + bias[c]) before the store; the plain
// entries (NoEpilogue, no bias) are the code they were.
template <int ROWS, int COB, bool PAIRS, class EPI = NoEpilogue>
__device__ __forceinline__ void register_tile(const float* __restrict__ x,
                                              const float* __restrict__ wt,
                                              float* __restrict__ y, int N, int C_in, int C_out,
                                              int H, int W, int groups,
                                              const float* __restrict__ bias = nullptr) {
    const int quads = (W + 3) / 4;
    const int row_blocks = (H + ROWS - 1) / ROWS;
    const int channel_blocks = C_out / COB;
    const long long total = (long long)N * channel_blocks * row_blocks * quads;
    const int cin_per_group = C_in / groups;
    const int cout_per_group = C_out / groups;
    const uintptr_t both = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
    const int vec = (W % 4 == 0 && (both & 15) == 0)            ? 4
                    : (PAIRS && W % 2 == 0 && (both & 7) == 0) ? 2
                                                                : 1;

    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        int q, row_block, channel_block, n;
        split_index(idx, quads, row_blocks, channel_blocks, q, row_block, channel_block, n);
        const int c_o0 = channel_block * COB;
        const int g = c_o0 / cout_per_group;
        const int h_first = row_block * ROWS;
        const int w_first = 4 * q;
        // With W even, a quad's second pair starts inside the row exactly when its first does.
        const bool full_quad = w_first + 4 <= W;

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
                win[r][0] = w_first > 0 ? __ldg(row + w_first - 1) : 0.0f;
                win[r][5] = w_first + 4 < W ? __ldg(row + w_first + 4) : 0.0f;
                if (vec == 4) {  // W % 4 == 0: the whole quad is inside the row
                    const float4 mid = __ldg(reinterpret_cast<const float4*>(row + w_first));
                    win[r][1] = mid.x;
                    win[r][2] = mid.y;
                    win[r][3] = mid.z;
                    win[r][4] = mid.w;
                } else if (vec == 2) {  // W % 2 == 0: both pairs inside, or only the first
                    const float2 lo = __ldg(reinterpret_cast<const float2*>(row + w_first));
                    win[r][1] = lo.x;
                    win[r][2] = lo.y;
                    if (full_quad) {
                        const float2 hi = __ldg(reinterpret_cast<const float2*>(row + w_first + 2));
                        win[r][3] = hi.x;
                        win[r][4] = hi.y;
                    } else {
                        win[r][3] = 0.0f;
                        win[r][4] = 0.0f;
                    }
                } else {
#pragma unroll
                    for (int j = 1; j < 5; ++j) {
                        const int w_i = w_first - 1 + j;
                        win[r][j] = w_i < W ? __ldg(row + w_i) : 0.0f;
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

        if constexpr (EPI::fused) {
#pragma unroll
            for (int c = 0; c < COB; ++c) {
                const float b = epilogue_bias(bias, c_o0 + c);
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
#pragma unroll
                    for (int o = 0; o < 4; ++o) acc[c][r][o] = EPI::apply(acc[c][r][o] + b);
            }
        }
#pragma unroll
        for (int c = 0; c < COB; ++c) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const int h_o = h_first + r;
                if (h_o >= H) break;
                float* out = y + nchw_offset(n, c_o0 + c, h_o, 0, C_out, H, W);
                if (vec == 4) {
                    *reinterpret_cast<float4*>(out + w_first) =
                        make_float4(acc[c][r][0], acc[c][r][1], acc[c][r][2], acc[c][r][3]);
                } else if (vec == 2) {
                    *reinterpret_cast<float2*>(out + w_first) = make_float2(acc[c][r][0], acc[c][r][1]);
                    if (full_quad)
                        *reinterpret_cast<float2*>(out + w_first + 2) =
                            make_float2(acc[c][r][2], acc[c][r][3]);
                } else {
#pragma unroll
                    for (int o = 0; o < 4; ++o)
                        if (w_first + o < W) out[w_first + o] = acc[c][r][o];
                }
            }
        }
    }
}
