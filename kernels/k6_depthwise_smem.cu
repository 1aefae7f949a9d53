// k6 depthwise shared-memory tile: the input seen as one tall image of N*C_in*H rows of width W
// (plane p = n*C_in + c holds tall rows p*H .. p*H+H-1, contiguous in memory). A block stages a
// tile of whole tall rows plus one halo row above and below -- a single contiguous range of x,
// so it is copied with aligned 16-byte asynchronous copies whatever W is, the range's unaligned
// head and tail copied 4 bytes at a time -- and each thread then computes a vertical strip of
// OUTS outputs from shared memory. A tile spans as many planes as fit, so maps of a few rows
// still give every block a full tile, and rows of a neighbouring plane are never used: each
// output row masks the row above (h = 0) and below (h = H-1) itself.
#include <stdint.h>

#include "common.cuh"
#include "stage.cuh"
// K6_PAD (floats of padding before the staged rows) and the tile tables K6_TILES and
// K6_TILES_COLS: the registry's table (groupconv.nchw_row_kernels.K6_TABLE).
#include "k6_depthwise_smem_table.cuh"

// Output rows a tile holds: what fits in TILE_FLOATS floats with the two halo rows, both pads and
// COLS - 1 floats of slack (a thread with COLS columns reads up to COLS floats past its row's
// last one), rounded down to a multiple of OUTS when at least OUTS fit. Below 1: W is too wide.
template <int TILE_FLOATS, int OUTS, int COLS>
__device__ __forceinline__ int k6_tile_rows(int W) {
    int rows = (TILE_FLOATS - 2 * K6_PAD - (COLS - 1)) / W - 2;
    if (rows >= OUTS) rows -= rows % OUTS;
    return rows;
}

// The in-plane row h and plane p of tall row r0 + j0, from those of r0 (h_r0 < H, p_r0).
__device__ __forceinline__ void k6_row_plane(int h_r0, int p_r0, int j0, int H, int& h, int& p) {
    h = h_r0 + j0;
    p = p_r0;
    if (h >= H) {
        const int planes_on = h / H;
        p += planes_on;
        h -= planes_on * H;
    }
}

// The 3x3 weights of output plane out_plane (= n*C_out + c_out) into k, unless k holds them.
__device__ __forceinline__ void k6_weights(const float* __restrict__ wt, int out_plane, int C_out,
                                           int& k_plane, float (&k)[9]) {
    if (out_plane == k_plane) return;
    const float* w_c = wt + (long long)(out_plane % C_out) * 9;
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) k[tap] = __ldg(w_c + tap);
    k_plane = out_plane;
}

// Each thread computes blocks of OUTS rows x COLS adjacent columns (COLS = 1: a vertical strip).
// With COLS > 1 each shared-memory word a thread loads serves up to 3 of its outputs across and
// the row bookkeeping is paid once per COLS outputs (fewer instructions per output: the
// single-column form is issue-bound on large maps).
// Assumptions: FP32 contiguous NCHW; 3x3, stride 1, padding 1, dilation 1; depthwise only:
// groups == C_in (one input channel per group), any channel multiplier C_out/groups; x at least
// 4-byte aligned (any float pointer); W <= (TILE_FLOATS - 8 - (COLS - 1)) / 3. Other shapes
// return without writing (the host's support predicate refuses them first). Index types: element
// offsets, tall rows and tiles are 64-bit (no 2**31-element limit); planes are int
// (N*C_out < 2**31, checked: beyond it the kernel writes nothing); offsets inside a tile are int.
// Any grid size is correct: blocks stride over the tiles.
template <int TILE_FLOATS, int OUTS, int COLS>
__device__ void k6_depthwise(const float* __restrict__ x, const float* __restrict__ wt,
                             float* __restrict__ y, int N, int C_in, int C_out, int H, int W,
                             int groups) {
    __shared__ __align__(16) float tile[TILE_FLOATS];
    const int rows = k6_tile_rows<TILE_FLOATS, OUTS, COLS>(W);
    if (C_in != groups || C_out % groups != 0 || N < 1 || H < 1 || W < 1 || rows < 1 ||
        (long long)N * C_out > 0x7fffffffLL)
        return;
    const int mult = C_out / groups;  // output channels per input channel
    const long long tall_rows = (long long)N * C_in * H;
    const long long tiles = (tall_rows + rows - 1) / rows;
    // x's position within a 16-byte line, in floats: where its 16-byte boundaries fall
    const int x_word = (int)((reinterpret_cast<uintptr_t>(x) >> 2) & 3);
    const int tid = threadIdx.x, threads = blockDim.x;
    // A thread walks items u = tid, tid + threads, ... with u = q * span + col (q: multiple and
    // strip; col: a column, or with COLS > 1 a group of COLS columns, span groups per row); the
    // division is done once and each step adds the quotient and remainder.
    const int span = (W + COLS - 1) / COLS;
    const int col_first = tid % span, q_first = tid / span;
    const int col_step = threads % span, q_step = threads / span;

    int k_plane = -1;  // output plane whose 3x3 weights k holds
    float k[9];

    for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const long long r0 = t * rows;  // first tall output row of this tile
        const int rows_here = (int)min((long long)rows, tall_rows - r0);
        // Shared row j (0 .. rows_here+1) holds tall row r0-1+j; element e = tall_row*W + w of x
        // sits at tile[base + e - first_e]. base matches x's 16-byte phase, so an element on a
        // 16-byte boundary of x lands on one of tile (& 3 of a negative first_e is still mod 4).
        const long long first_e = (r0 - 1) * W;
        const int base = K6_PAD + (int)((x_word + first_e) & 3);
        const long long lo = max(r0 - 1, 0LL) * W;                         // first element of x staged
        const long long hi = min(r0 + rows_here + 1, tall_rows) * W;       // one past the last
        const int zero_head = (int)(lo - first_e);                         // W above tall row 0, else 0
        const int zero_tail_from = (int)(hi - first_e);
        const int staged = (rows_here + 2) * W;

        __syncthreads();  // every thread is done reading the previous tile
        // Halo rows outside the tensor read as zero (they are masked anyway: never garbage).
        for (int i = tid; i < zero_head; i += threads) tile[base + i] = 0.0f;
        for (int i = zero_tail_from + tid; i < staged; i += threads) tile[base + i] = 0.0f;
        const float* src = x + lo;
        float* dst = tile + base + zero_head;
        const int n_elems = (int)(hi - lo);
        const StageSplit split = stage_split(x_word + lo, n_elems);
        for (int v = tid; v < split.vectors; v += threads)
            __pipeline_memcpy_async(dst + split.head + 4 * v, src + split.head + 4 * v, 16);
        for (int i = tid; i < split.head; i += threads)
            __pipeline_memcpy_async(dst + i, src + i, 4);
        for (int i = split.tail_from + tid; i < n_elems; i += threads)
            __pipeline_memcpy_async(dst + i, src + i, 4);
        stage_complete();

        const int p_r0 = (int)(r0 / H);  // plane and in-plane row of tall row r0
        const int h_r0 = (int)(r0 - (long long)p_r0 * H);
        const int strips = (rows_here + OUTS - 1) / OUTS;
        const int q_end = mult * strips;
        int cg = col_first;  // column group: columns cg * COLS .. cg * COLS + COLS - 1
        for (int q = q_first; q < q_end;) {
            const int m = mult == 1 ? 0 : q / strips;
            const int strip = q - m * strips;
            const int j0 = strip * OUTS;
            const int col0 = cg * COLS;

            // Window: shared rows j0 .. j0+OUTS+1, columns col0-1 .. col0+COLS, zero outside
            // the map (the words past a row's end are the next row's, or past the staged
            // rows; the tile's slack keeps every read inside it, and they are masked here).
            // Rows past the staged ones (a block cut by the tile's end) are clamped to a staged
            // row; they feed only outputs the loop below does not write.
            float win[OUTS + 2][COLS + 2];
#pragma unroll
            for (int r = 0; r < OUTS + 2; ++r) {
                const int at = base + min(j0 + r, rows_here + 1) * W + col0;
#pragma unroll
                for (int d = 0; d < COLS + 2; ++d) {
                    const float v = tile[at + d - 1];
                    const bool inside = d == 0 ? col0 > 0 : (d == 1 || col0 + d - 1 < W);
                    win[r][d] = inside ? v : 0.0f;
                }
            }

            int h, p;
            k6_row_plane(h_r0, p_r0, j0, H, h, p);
#pragma unroll
            for (int i = 0; i < OUTS; ++i) {
                if (i > 0 && ++h == H) {
                    h = 0;
                    ++p;
                }
                if (j0 + i >= rows_here) break;
                const int out_plane = p * mult + m;
                k6_weights(wt, out_plane, C_out, k_plane, k);
                // The rows above and below belong to this plane only inside it (padding 1):
                // masked once per row of COLS outputs.
                const bool has_above = h > 0, has_below = h + 1 < H;
                float above[COLS + 2], below[COLS + 2];
#pragma unroll
                for (int d = 0; d < COLS + 2; ++d) {
                    above[d] = has_above ? win[i][d] : 0.0f;
                    below[d] = has_below ? win[i + 2][d] : 0.0f;
                }
                float acc[COLS];
#pragma unroll
                for (int c = 0; c < COLS; ++c) {
                    acc[c] = 0.0f;
#pragma unroll
                    for (int kw = 0; kw < 3; ++kw) {
                        acc[c] = fmaf(above[c + kw], k[kw], acc[c]);
                        acc[c] = fmaf(win[i + 1][c + kw], k[3 + kw], acc[c]);
                        acc[c] = fmaf(below[c + kw], k[6 + kw], acc[c]);
                    }
                }
                float* y_row = y + ((long long)out_plane * H + h) * W + col0;
#pragma unroll
                for (int c = 0; c < COLS; ++c)
                    if (col0 + c < W) y_row[c] = acc[c];
            }

            cg += col_step;
            q += q_step;
            if (cg >= span) {
                cg -= span;
                ++q;
            }
        }
    }
}

// One entry per tile: K6_ENTRY(TILE_FLOATS, OUTS) for single-column strips (a row of K6_TILES),
// K6_ENTRY_COLS(TILE_FLOATS, OUTS, COLS) for OUTS x COLS blocks (a row of K6_TILES_COLS). Shared
// memory per block is 4 * TILE_FLOATS bytes; __launch_bounds__(256) lets the tuner launch 128 or
// 256 threads per block.
#define K6_ENTRY(TILE_FLOATS, OUTS)                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        k6_depthwise_f##TILE_FLOATS##_o##OUTS(const float* __restrict__ x,                     \
                                              const float* __restrict__ wt,                    \
                                              float* __restrict__ y, int N, int C_in,          \
                                              int C_out, int H, int W, int groups) {           \
        k6_depthwise<TILE_FLOATS, OUTS, 1>(x, wt, y, N, C_in, C_out, H, W, groups);            \
    }
#define K6_ENTRY_COLS(TILE_FLOATS, OUTS, COLS)                                                 \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        k6_depthwise_f##TILE_FLOATS##_o##OUTS##_c##COLS(                                       \
            const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,  \
            int N, int C_in, int C_out, int H, int W, int groups) {                            \
        k6_depthwise<TILE_FLOATS, OUTS, COLS>(x, wt, y, N, C_in, C_out, H, W, groups);         \
    }
K6_TILES(K6_ENTRY)
K6_TILES_COLS(K6_ENTRY_COLS)
