// Weight gradient of the 3x3 / stride 1 / padding 1 grouped convolution on contiguous NCHW
// tensors, stage 1 of the deterministic two-stage reduction (kernels/wgrad_common.cuh), and the
// stage-2 entry wg_reduce. kernels/NOTES-wgrad.md describes the design.
// - A block owns one channel tile: COB output by CIB input channels of one group (blockIdx.x),
//   and one slice of the tile's strips (blockIdx.y). A thread holds COB * CIB * 9 sums.
// - Lanes run along w: a lane group of WT lanes (32 where W > 16; else the power of two >= W, so
//   a warp holds 32 / WT row segments of a narrow map) covers WT consecutive columns. A strip is
//   (image, column block, segment of SEG rows); each lane slides a 3x3 window of X down its
//   column, loading one new X row (coalesced) and one dY value per output row and channel; the
//   columns either side come from the neighbouring lanes by shuffle, the block's edge lanes
//   loading theirs.
// - The block's sums: a butterfly over the warp's lanes, then the warps' sums in warp order.
#include "wgrad_common.cuh"
// WG_NCHW_TILES, WG_THREADS, WG_MIN_BLOCKS (blocks per SM __launch_bounds__ asks for: without it
// ptxas spilled a few small entries): written in Python (backward_kernels.WG_NCHW_TABLE) and generated.
#include "wgrad_nchw_table.cuh"

// One X row (h) into win[.][r] for a lane at column w: the centre column loaded (zero outside the
// map and past the group's channels), its neighbours shuffled from the lanes beside, a lane group's
// edge lanes loading their own. Every lane of the warp runs it: the shuffles need all 32.
template <int CIB>
__device__ __forceinline__ void wg_nchw_row(float (&win)[CIB][3][3], int r,
                                            const float* __restrict__ x, bool strip_ok, int h,
                                            int n, int g, int ci0, int cig, int C_in, int H,
                                            int W, int w, int w_local, int wt) {
    const bool row_ok = strip_ok && h >= 0 && h < H;
#pragma unroll
    for (int i = 0; i < CIB; ++i) {
        const bool ok = row_ok && ci0 + i < cig;
        const float* xr = x + (((long long)n * C_in + g * cig + (ok ? ci0 + i : 0)) * H
                               + (ok ? h : 0)) * (long long)W;
        const float c = (ok && w < W) ? __ldg(xr + w) : 0.f;
        float l = __shfl_up_sync(WG_FULL_MASK, c, 1);
        float rt = __shfl_down_sync(WG_FULL_MASK, c, 1);
        if (w_local == 0) l = (ok && w > 0 && w - 1 < W) ? __ldg(xr + w - 1) : 0.f;
        if (w_local == wt - 1) rt = (ok && w + 1 < W) ? __ldg(xr + w + 1) : 0.f;
        win[i][r][0] = l, win[i][r][1] = c, win[i][r][2] = rt;
    }
}

// Assumptions at the signature (the host's plan refuses the rest):
// - FP32; dy: N x C_out x H x W, x: N x C_in x H x W, contiguous NCHW; groups divides both.
// - blockDim = (WG_THREADS, 1, 1); wt a power of two <= 32 with wt >= W when wt < 32; grid =
//   (groups * ceil(C_out/groups / COB) * ceil(C_in/groups / CIB), slices); sps strips per slice
//   (the last slice may hold fewer, or none: its partial is then zero).
// - ws: slices x C_out x C_in/groups x 9 floats, every one written (slices == 1: it is dW).
// - Element offsets are 64-bit; strip and tile counts are below 2**31 (the host checks).
template <int COB, int CIB>
__device__ __forceinline__ void wg_nchw(const float* __restrict__ dy, const float* __restrict__ x,
                                        float* __restrict__ ws, int N, int C_in, int C_out, int H,
                                        int W, int groups, int wt, int seg, int sps) {
    constexpr int ACC = COB * CIB * 9;
    constexpr int WARPS = WG_THREADS / 32;
    __shared__ float red[WARPS][ACC];
    const int cig = C_in / groups, cog = C_out / groups;
    const int ciblk = (cig + CIB - 1) / CIB, coblk = (cog + COB - 1) / COB;
    int cib, cob, g;
    wg_split(blockIdx.x, ciblk, coblk, cib, cob, g);
    const int ci0 = cib * CIB, co0 = cob * COB;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int w_local = lane & (wt - 1);
    const int group = threadIdx.x / wt, groups_per_block = WG_THREADS / wt;
    const int col_blocks = (W + wt - 1) / wt, row_segs = (H + seg - 1) / seg;
    const int strips = N * col_blocks * row_segs;
    const int s_begin = blockIdx.y * sps;
    const int s_end = min(strips, s_begin + sps);
    const int iters = (sps + groups_per_block - 1) / groups_per_block;  // the same for every lane
    const long long plane = (long long)H * W;

    float acc[COB][CIB][9];
#pragma unroll
    for (int o = 0; o < COB; ++o)
#pragma unroll
        for (int i = 0; i < CIB; ++i)
#pragma unroll
            for (int t = 0; t < 9; ++t) acc[o][i][t] = 0.f;

    for (int it = 0; it < iters; ++it) {
        const int strip = s_begin + group + it * groups_per_block;
        const bool strip_ok = strip < s_end;
        int cb = 0, rs = 0, n = 0;
        if (strip_ok) wg_split(strip, col_blocks, row_segs, cb, rs, n);
        const int w = cb * wt + w_local;
        const int h0 = rs * seg;
        // win[i][r][c]: X of input channel ci0 + i at row h - 1 + r, column w - 1 + c.
        float win[CIB][3][3];
        wg_nchw_row<CIB>(win, 0, x, strip_ok, h0 - 1, n, g, ci0, cig, C_in, H, W, w, w_local, wt);
        wg_nchw_row<CIB>(win, 1, x, strip_ok, h0, n, g, ci0, cig, C_in, H, W, w, w_local, wt);
        for (int r = 0; r < seg; ++r) {  // seg is the same for every lane
            const int h = h0 + r;
            wg_nchw_row<CIB>(win, 2, x, strip_ok, h + 1, n, g, ci0, cig, C_in, H, W, w, w_local, wt);
            const bool out_ok = strip_ok && w < W && h < H;
            float d[COB];
#pragma unroll
            for (int o = 0; o < COB; ++o)
                d[o] = (out_ok && co0 + o < cog)
                           ? __ldg(dy + ((long long)n * C_out + g * cog + co0 + o) * plane
                                   + (long long)h * W + w)
                           : 0.f;
#pragma unroll
            for (int o = 0; o < COB; ++o)
#pragma unroll
                for (int i = 0; i < CIB; ++i)
#pragma unroll
                    for (int kh = 0; kh < 3; ++kh)
#pragma unroll
                        for (int kw = 0; kw < 3; ++kw)
                            acc[o][i][kh * 3 + kw] = fmaf(d[o], win[i][kh][kw],
                                                          acc[o][i][kh * 3 + kw]);
#pragma unroll
            for (int i = 0; i < CIB; ++i)
#pragma unroll
                for (int c = 0; c < 3; ++c) win[i][0][c] = win[i][1][c], win[i][1][c] = win[i][2][c];
        }
    }

    // The block's sum, in a fixed order: butterfly within each warp (lane 0's order is fixed),
    // then warp 0, 1, ... in order.
#pragma unroll
    for (int o = 0; o < COB; ++o)
#pragma unroll
        for (int i = 0; i < CIB; ++i)
#pragma unroll
            for (int t = 0; t < 9; ++t) {
                float v = acc[o][i][t];
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(WG_FULL_MASK, v, off);
                if (lane == 0) red[warp][(o * CIB + i) * 9 + t] = v;
            }
    __syncthreads();
    for (int e = threadIdx.x; e < ACC; e += WG_THREADS) {
        const int o = e / (CIB * 9), i = e / 9 % CIB, t = e % 9;
        if (co0 + o >= cog || ci0 + i >= cig) continue;
        float sum = red[0][e];
#pragma unroll
        for (int k = 1; k < WARPS; ++k) sum += red[k][e];
        ws[(((long long)blockIdx.y * C_out + g * cog + co0 + o) * cig + ci0 + i) * 9 + t] = sum;
    }
}

#define WG_NCHW_ENTRY(COB, CIB)                                                                 \
    extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_MIN_BLOCKS) wg_nchw_o##COB##_i##CIB(          \
        const float* __restrict__ dy, const float* __restrict__ x, float* __restrict__ ws,     \
        int N, int C_in, int C_out, int H, int W, int groups, int wt, int seg, int sps) {      \
        wg_nchw<COB, CIB>(dy, x, ws, N, C_in, C_out, H, W, groups, wt, seg, sps);              \
    }

WG_NCHW_TILES(WG_NCHW_ENTRY)
WG_REDUCE_ENTRY
