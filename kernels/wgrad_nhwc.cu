// Weight gradient of the 3x3 / stride 1 / padding 1 grouped convolution on channels_last (NHWC)
// tensors, stage 1 of the deterministic two-stage reduction (kernels/wgrad_common.cuh), and the
// stage-2 entry wg_reduce. kernels/NOTES-wgrad.md describes the design.
// - Lanes run along channels: threadIdx.x takes a channel vector (depthwise: VEC channels, each
//   its own group) or a channel tile (COB output by CIB input channels of one group; the tiles of
//   a group are neighbouring lanes, input blocks fastest, so their X loads are contiguous and their
//   dY loads the same address: coalesced or broadcast). threadIdx.y takes pixel strips: ROWS
//   output rows by SEG columns of one image, walked along w with a (ROWS + 2) x 3 window of X in
//   registers (one new X column and ROWS dY pixels per step).
// - blockIdx.x: a block of channel vectors or tiles; blockIdx.y: the slice of strips. The
//   block's sums: over threadIdx.y in order, through shared memory, one tap set at a time.
#include "wgrad_common.cuh"
// WG_NHWC_DW, WG_NHWC_TILES, WG_NHWC_SMEM, WG_THREADS, WG_MIN_BLOCKS, WG_SMEM_SEG,
// WG_SMEM_WARPS: written in Python (backward_kernels.WG_NHWC_TABLE).
#include "wgrad_nhwc_table.cuh"

// The strips of the launch and this block's slice of them; a strip is (column segment, row
// block, image), column segments fastest.
struct WgStrips {
    int row_blocks, col_segs, iters, begin, end;
};

__device__ __forceinline__ WgStrips wg_strips(int N, int H, int W, int rows, int seg, int sps) {
    WgStrips s;
    s.row_blocks = (H + rows - 1) / rows;
    s.col_segs = (W + seg - 1) / seg;
    s.begin = blockIdx.y * sps;
    s.end = min(N * s.row_blocks * s.col_segs, s.begin + sps);
    s.iters = (sps + blockDim.y - 1) / blockDim.y;
    return s;
}

// Assumptions at the signatures (the host's plan refuses the rest):
// - FP32; dy: N x H x W x C_out, x: N x H x W x C_in, contiguous channels_last.
// - blockDim = (lanes, WG_THREADS / lanes, 1); grid = (ceil(vectors or tiles / lanes), slices);
//   sps strips per slice (the last slice may hold fewer, or none: its partial is then zero).
// - ws: slices x C_out x C_in/groups x 9 floats, every one written (slices == 1: it is dW).
// - Element offsets are 64-bit; strip and tile counts are below 2**31 (the host checks).
// Depthwise (groups == C_in == C_out): VEC = 4 or 2 needs C % VEC == 0 and x, dy aligned to
// 4 * VEC bytes.
template <int VEC, int ROWS>
__device__ __forceinline__ void wg_nhwc_dw(const float* __restrict__ dy,
                                           const float* __restrict__ x, float* __restrict__ ws,
                                           int N, int C, int H, int W, int seg, int sps) {
    using Vec = ChannelVec<VEC>;
    __shared__ float red[WG_THREADS][9];
    const int vectors = C / VEC;
    const int vector = blockIdx.x * blockDim.x + threadIdx.x;
    const bool channel_ok = vector < vectors;
    const WgStrips s = wg_strips(N, H, W, ROWS, seg, sps);
    const long long row = (long long)W * C;  // floats between vertically adjacent pixels

    Vec acc[9];
#pragma unroll
    for (int t = 0; t < 9; ++t) acc[t] = Vec::zero();

    for (int it = 0; it < s.iters; ++it) {
        const int strip = s.begin + threadIdx.y + it * blockDim.y;
        if (!channel_ok || strip >= s.end) break;
        int cs, rb, n;
        wg_split(strip, s.col_segs, s.row_blocks, cs, rb, n);
        const int h0 = rb * ROWS, w0 = cs * seg, w_end = min(W, w0 + seg);
        const float* x_n = x + (long long)n * H * row + vector * VEC;
        const float* dy_n = dy + (long long)n * H * row + vector * VEC;
        // win[r][c]: X at row h0 - 1 + r, column w - 1 + c.
        Vec win[ROWS + 2][3];
        auto load_col = [&](int c, int wc) {
#pragma unroll
            for (int r = 0; r < ROWS + 2; ++r) {
                const int h = h0 - 1 + r;
                win[r][c] = (h >= 0 && h < H && wc >= 0 && wc < W)
                                ? Vec::load(x_n + (long long)h * row + (long long)wc * C)
                                : Vec::zero();
            }
        };
        load_col(0, w0 - 1);
        load_col(1, w0);
        for (int w = w0; w < w_end; ++w) {
            load_col(2, w + 1);
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const Vec d = h0 + r < H
                                  ? Vec::load(dy_n + (long long)(h0 + r) * row + (long long)w * C)
                                  : Vec::zero();
#pragma unroll
                for (int kh = 0; kh < 3; ++kh)
#pragma unroll
                    for (int kw = 0; kw < 3; ++kw) acc[kh * 3 + kw].fma(d, win[r + kh][kw]);
            }
#pragma unroll
            for (int r = 0; r < ROWS + 2; ++r) win[r][0] = win[r][1], win[r][1] = win[r][2];
        }
    }

    // The block's sums over threadIdx.y, in order, one channel of the vector at a time.
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
#pragma unroll
        for (int t = 0; t < 9; ++t) red[tid][t] = wg_lane(acc[t], j);
        __syncthreads();
        for (int e = tid; e < (int)blockDim.x * 9; e += blockDim.x * blockDim.y) {
            const int lane = e / 9, t = e % 9;
            const int v = blockIdx.x * blockDim.x + lane;
            if (v >= vectors) continue;
            float sum = red[lane][t];
            for (int p = 1; p < (int)blockDim.y; ++p) sum += red[p * blockDim.x + lane][t];
            ws[((long long)blockIdx.y * C + v * VEC + j) * 9 + t] = sum;
        }
        __syncthreads();
    }
}

// Grouped and depth multiplier: a lane's tile is COB output by CIB input channels of group g.
// V = 1: C_in/groups % CIB == 0, C_out/groups % COB == 0 and x, dy 16-byte aligned (runs loaded
// 16 or 8 bytes at a time); V = 0: any group sizes, one float at a time.
template <int COB, int CIB, int ROWS, int V>
__device__ __forceinline__ void wg_nhwc_tile(const float* __restrict__ dy,
                                             const float* __restrict__ x, float* __restrict__ ws,
                                             int N, int C_in, int C_out, int H, int W, int groups,
                                             int seg, int sps) {
    __shared__ float red[WG_THREADS][9];
    const int cig = C_in / groups, cog = C_out / groups;
    const int ciblk = (cig + CIB - 1) / CIB, coblk = (cog + COB - 1) / COB;
    const int tiles = groups * ciblk * coblk;
    const int tile = blockIdx.x * blockDim.x + threadIdx.x;
    const bool tile_ok = tile < tiles;
    int cib = 0, cob = 0, g = 0;
    if (tile_ok) wg_split(tile, ciblk, coblk, cib, cob, g);
    const int ci0 = cib * CIB, co0 = cob * COB;
    const WgStrips s = wg_strips(N, H, W, ROWS, seg, sps);

    float acc[COB][CIB][9];
#pragma unroll
    for (int o = 0; o < COB; ++o)
#pragma unroll
        for (int i = 0; i < CIB; ++i)
#pragma unroll
            for (int t = 0; t < 9; ++t) acc[o][i][t] = 0.f;

    for (int it = 0; it < s.iters; ++it) {
        const int strip = s.begin + threadIdx.y + it * blockDim.y;
        if (!tile_ok || strip >= s.end) break;
        int cs, rb, n;
        wg_split(strip, s.col_segs, s.row_blocks, cs, rb, n);
        const int h0 = rb * ROWS, w0 = cs * seg, w_end = min(W, w0 + seg);
        const float* x_n = x + (long long)n * H * W * C_in + g * cig + ci0;
        const float* dy_n = dy + (long long)n * H * W * C_out + g * cog + co0;
        float win[ROWS + 2][3][CIB];  // X at row h0 - 1 + r, column w - 1 + c, channel ci0 + i
        auto load_col = [&](int c, int wc) {
#pragma unroll
            for (int r = 0; r < ROWS + 2; ++r) {
                const int h = h0 - 1 + r;
                const bool ok = h >= 0 && h < H && wc >= 0 && wc < W;
                wg_load_run<CIB, V>(win[r][c],
                                    x_n + (ok ? ((long long)h * W + wc) * C_in : 0LL),
                                    cig - ci0, ok);
            }
        };
        load_col(0, w0 - 1);
        load_col(1, w0);
        for (int w = w0; w < w_end; ++w) {
            load_col(2, w + 1);
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                float d[COB];
                const bool ok = h0 + r < H;
                wg_load_run<COB, V>(d, dy_n + (ok ? ((long long)(h0 + r) * W + w) * C_out : 0LL),
                                    cog - co0, ok);
#pragma unroll
                for (int o = 0; o < COB; ++o)
#pragma unroll
                    for (int i = 0; i < CIB; ++i)
#pragma unroll
                        for (int kh = 0; kh < 3; ++kh)
#pragma unroll
                            for (int kw = 0; kw < 3; ++kw)
                                acc[o][i][kh * 3 + kw] = fmaf(d[o], win[r + kh][kw][i],
                                                              acc[o][i][kh * 3 + kw]);
            }
#pragma unroll
            for (int r = 0; r < ROWS + 2; ++r)
#pragma unroll
                for (int i = 0; i < CIB; ++i)
                    win[r][0][i] = win[r][1][i], win[r][1][i] = win[r][2][i];
        }
    }

    // The block's sums over threadIdx.y, in order, one (output, input) channel pair at a time.
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int o = 0; o < COB; ++o)
#pragma unroll
        for (int i = 0; i < CIB; ++i) {
#pragma unroll
            for (int t = 0; t < 9; ++t) red[tid][t] = acc[o][i][t];
            __syncthreads();
            for (int e = tid; e < (int)blockDim.x * 9; e += blockDim.x * blockDim.y) {
                const int lane = e / 9, t = e % 9;
                const int tl = blockIdx.x * blockDim.x + lane;
                if (tl >= tiles) continue;
                int lcib, lcob, lg;
                wg_split(tl, ciblk, coblk, lcib, lcob, lg);
                const int co = lcob * COB + o, ci = lcib * CIB + i;
                if (co >= cog || ci >= cig) continue;
                float sum = red[lane][t];
                for (int p = 1; p < (int)blockDim.y; ++p) sum += red[p * blockDim.x + lane][t];
                ws[(((long long)blockIdx.y * C_out + lg * cog + co) * cig + ci) * 9 + t] = sum;
            }
            __syncthreads();
        }
}

// The staged entries' input row: row hh of image n, columns w0 - 1 .. w0 + seg, into ring slot
// (hh + 3) % 3 of xs, 32 channels from `base` (channel c at base[pixel * stride + c], those at or
// past `channels` read as zero), zero outside the map; THREADS threads, each loading every
// THREADS-th word (a warp: 32 consecutive channels of a pixel).
template <int THREADS>
__device__ __forceinline__ void wg_stage_row(float (*xs)[WG_SMEM_SEG + 2][32],
                                             const float* __restrict__ base, int n, int hh,
                                             int w0, int seg, int H, int W, int stride,
                                             int channels, int tid) {
    const int slot = (hh + 3) % 3;
    const bool row_ok = hh >= 0 && hh < H;
    for (int e = tid; e < (seg + 2) * 32; e += THREADS) {
        const int col = e >> 5, c = e & 31, ww = w0 - 1 + col;
        xs[slot][col][c] = (row_ok && ww >= 0 && ww < W && c < channels)
                               ? __ldg(base + (((long long)n * H + hh) * W + ww) * stride + c)
                               : 0.f;
    }
}

// The staged entries' walk: strip s of a slice (rows fastest, then images, then column
// segments) as its image n, row h, first column w0 and columns; after a barrier (every thread is
// done reading the ring and the dY rows the caller restages), it stages the strip's input rows
// through stage(n, row, w0): rows h - 1, h and h + 1, or only h + 1 where the walk slides down from
// the strip before it (prev: that strip's n, column segment and h; updated here).
struct WgStrip {
    int n, h, w0, cols;
};

template <typename Stage>
__device__ __forceinline__ WgStrip wg_next_strip(int s, int N, int H, int W, int seg,
                                                 int (&prev)[3], Stage stage) {
    WgStrip strip;
    int cs;
    wg_split(s, H, N, strip.h, strip.n, cs);
    strip.w0 = cs * seg;
    strip.cols = min(seg, W - strip.w0);
    const bool slide = strip.n == prev[0] && cs == prev[1] && strip.h == prev[2] + 1;
    __syncthreads();
    if (!slide) {
        stage(strip.n, strip.h - 1, strip.w0);
        stage(strip.n, strip.h, strip.w0);
    }
    stage(strip.n, strip.h + 1, strip.w0);
    prev[0] = strip.n, prev[1] = cs, prev[2] = strip.h;
    return strip;
}

// Grouped with many channels per group (an FMA-bound reduction): the staged entries. A block
// owns one 32-input-channel chunk of a group (threadIdx.x: the input channel) and one chunk of
// WG_SMEM_WARPS * COW output channels (threadIdx.y: a warp's COW of them), and walks its slice of
// strips one at a time, all threads together: a strip is one output row (image n, row h) of a
// column segment of at most WG_SMEM_SEG columns, rows fastest, so consecutive strips of a slice
// slide down the map and keep two of their three staged input rows.
// - Staged in shared memory: input rows h - 1, h, h + 1 of the segment and its halo columns (a
//   ring of three row buffers, zero outside the map and past the group's channels), and dY of row
//   h for the block's output channels; each is loaded by the whole block, 32 consecutive channels
//   of a pixel per warp load.
// - Each thread slides a 3 x 3 window of its input channel along the row (one new column of three
//   rows per output pixel, from shared memory without bank conflicts) and reads its COW dY values
//   of the pixel (the same address across the warp: a broadcast), 9 * COW FMAs per pixel.
// - A thread alone holds its COW x 9 sums of one input channel over the whole slice, so there is
//   no block reduction: it writes them to the slice's partial once, at the end.
// Assumptions at the signature (the host's plan refuses the rest): as the entries above (dy, x,
// ws, the 64-bit offsets, the counts below 2**31); blockDim = (32, WG_SMEM_WARPS, 1); grid =
// (groups * ceil(C_in/groups / 32) * ceil(C_out/groups / (WG_SMEM_WARPS * COW)), slices);
// 1 <= seg <= WG_SMEM_SEG, the columns of a strip; sps strips per slice. Loads are of single
// floats: any group size and alignment.
template <int COW>
__device__ __forceinline__ void wg_nhwc_smem(const float* __restrict__ dy,
                                             const float* __restrict__ x, float* __restrict__ ws,
                                             int N, int C_in, int C_out, int H, int W, int groups,
                                             int seg, int sps) {
    constexpr int CO_CHUNK = WG_SMEM_WARPS * COW;
    constexpr int THREADS = 32 * WG_SMEM_WARPS;
    constexpr int COLS = WG_SMEM_SEG + 2;  // a staged input row: the segment and its halo
    __shared__ float xs[3][COLS][32];      // input rows by ring slot ((row + 3) % 3)
    __shared__ float dys[WG_SMEM_SEG][CO_CHUNK];
    const int cig = C_in / groups, cog = C_out / groups;
    int cic, coc, g;
    wg_split(blockIdx.x, (cig + 31) / 32, (cog + CO_CHUNK - 1) / CO_CHUNK, cic, coc, g);
    const int ci0 = cic * 32, co0 = coc * CO_CHUNK;
    const int lane = threadIdx.x, warp = threadIdx.y, tid = warp * 32 + lane;
    const int col_segs = (W + seg - 1) / seg;
    const int s_begin = blockIdx.y * sps;
    const int s_end = min(N * H * col_segs, s_begin + sps);
    const float* x_g = x + g * cig + ci0;
    const float* dy_g = dy + g * cog + co0;

    auto stage_x = [&](int n, int hh, int w0) {
        wg_stage_row<THREADS>(xs, x_g, n, hh, w0, seg, H, W, C_in, cig - ci0, tid);
    };

    float acc[COW][9];
#pragma unroll
    for (int o = 0; o < COW; ++o)
#pragma unroll
        for (int t = 0; t < 9; ++t) acc[o][t] = 0.f;

    int prev[3] = {-1, -1, -2};  // the strip before: none
    for (int s = s_begin; s < s_end; ++s) {
        const WgStrip strip = wg_next_strip(s, N, H, W, seg, prev, stage_x);
        const int n = strip.n, h = strip.h, w0 = strip.w0, cols = strip.cols;
        for (int e = tid; e < cols * CO_CHUNK; e += THREADS) {
            const int col = e / CO_CHUNK, o = e % CO_CHUNK;
            dys[col][o] = co0 + o < cog
                              ? __ldg(dy_g + (((long long)n * H + h) * W + w0 + col) * C_out + o)
                              : 0.f;
        }
        __syncthreads();
        const int top = (h + 2) % 3, mid = h % 3, bottom = (h + 1) % 3;  // rows h - 1, h, h + 1
        // win[kh][kw]: X of this thread's channel at row h - 1 + kh, column w - 1 + kw.
        float win[3][3];
        win[0][0] = xs[top][0][lane], win[0][1] = xs[top][1][lane];
        win[1][0] = xs[mid][0][lane], win[1][1] = xs[mid][1][lane];
        win[2][0] = xs[bottom][0][lane], win[2][1] = xs[bottom][1][lane];
        for (int w = 0; w < cols; ++w) {
            win[0][2] = xs[top][w + 2][lane];
            win[1][2] = xs[mid][w + 2][lane];
            win[2][2] = xs[bottom][w + 2][lane];
#pragma unroll
            for (int o = 0; o < COW; ++o) {
                const float d = dys[w][warp * COW + o];
#pragma unroll
                for (int kh = 0; kh < 3; ++kh)
#pragma unroll
                    for (int kw = 0; kw < 3; ++kw)
                        acc[o][kh * 3 + kw] = fmaf(d, win[kh][kw], acc[o][kh * 3 + kw]);
            }
#pragma unroll
            for (int kh = 0; kh < 3; ++kh) win[kh][0] = win[kh][1], win[kh][1] = win[kh][2];
        }
    }

    const int ci = ci0 + lane;
    if (ci >= cig) return;
#pragma unroll
    for (int o = 0; o < COW; ++o) {
        const int co = co0 + warp * COW + o;
        if (co >= cog) continue;
#pragma unroll
        for (int t = 0; t < 9; ++t)
            ws[(((long long)blockIdx.y * C_out + g * cog + co) * cig + ci) * 9 + t] = acc[o][t];
    }
}

#define WG_NHWC_DW_ENTRY(VEC, ROWS)                                                             \
    extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_MIN_BLOCKS) wg_nhwc_dw_v##VEC##_r##ROWS(      \
        const float* __restrict__ dy, const float* __restrict__ x, float* __restrict__ ws,     \
        int N, int C_in, int C_out, int H, int W, int groups, int unused, int seg, int sps) {   \
        wg_nhwc_dw<VEC, ROWS>(dy, x, ws, N, C_in, H, W, seg, sps);                             \
    }

#define WG_NHWC_TILE_ENTRY(COB, CIB, ROWS, V)                                                   \
    extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_MIN_BLOCKS)                                    \
        wg_nhwc_o##COB##_i##CIB##_r##ROWS##_v##V(                                               \
            const float* __restrict__ dy, const float* __restrict__ x, float* __restrict__ ws, \
            int N, int C_in, int C_out, int H, int W, int groups, int unused, int seg,         \
            int sps) {                                                                          \
        wg_nhwc_tile<COB, CIB, ROWS, V>(dy, x, ws, N, C_in, C_out, H, W, groups, seg, sps);    \
    }

#define WG_NHWC_SMEM_ENTRY(COW)                                                                \
    extern "C" __global__ void __launch_bounds__(32 * WG_SMEM_WARPS) wg_nhwc_smem_o##COW(        \
        const float* __restrict__ dy, const float* __restrict__ x, float* __restrict__ ws,     \
        int N, int C_in, int C_out, int H, int W, int groups, int unused, int seg, int sps) {   \
        wg_nhwc_smem<COW>(dy, x, ws, N, C_in, C_out, H, W, groups, seg, sps);                  \
    }

WG_NHWC_DW(WG_NHWC_DW_ENTRY)
WG_NHWC_TILES(WG_NHWC_TILE_ENTRY)
WG_NHWC_SMEM(WG_NHWC_SMEM_ENTRY)
WG_REDUCE_ENTRY
