// k7 grouped shared-memory tile: for grouped shapes with a few input channels per group. A block
// takes rows h0 .. h0+rows-1 (full width) of one image n and one group g, stages those rows plus
// a halo row above and below of every input channel of the group -- each channel's rows are one
// contiguous range of x, copied with aligned 16-byte asynchronous copies whatever W is, its
// unaligned head and tail 4 bytes at a time -- and the group's weights, transposed so that COB
// output channels of one (input channel, tap) are adjacent. Each thread then computes a vertical
// strip of OUTS outputs for COB output channels, reading each staged input once per strip for
// all COB channels. A tile of a whole small map holds several images, so the block has work for
// every thread. Each plane (image, channel) is staged apart with its halo rows, so rows outside
// the map are staged as zeros and only the columns need masking. Groups whose weights do not fit
// at once (24 or 32 channels) are staged a chunk of input channels at a time, the outputs
// accumulating in registers.
#include <stdint.h>

#include "common.cuh"
#include "stage.cuh"
#include "epilogue.cuh"
// The registry's table (groupconv.nchw_row_kernels.K7_TABLE), each explained there:
// K7_PAD (floats of padding before each channel's staged rows), K7_MAX_CPG and K7_MAX_COUT_PG (the
// largest group the kernel takes), K7_WEIGHT_FLOATS (floats of the weight array) and the tile
// table K7_TILES.
#include "k7_grouped_smem_table.cuh"

// Input channels staged at once: all of the group's when its weights fit the weight array,
// else as many as do (groups of 24 or 32 channels go in chunks of 10 or 8).
__device__ __forceinline__ int k7_chunk(int cin_per_group, int cout_per_group) {
    return min(cin_per_group, K7_WEIGHT_FLOATS / (9 * cout_per_group));
}

// Floats of the tile each staged plane (one input channel of one image) gets: a multiple of 4,
// so every region starts 16-byte aligned.
template <int TILE_FLOATS>
__device__ __forceinline__ int k7_region(int planes) {
    return (TILE_FLOATS / planes) & ~3;
}

// Output rows a tile holds: what fits in a plane's region with the two halo rows and both pads,
// at most H (a tile stays in one plane), else rounded down to a multiple of OUTS when at least
// OUTS fit. Below 1: W is too wide for the tile.
template <int OUTS>
__device__ __forceinline__ int k7_tile_rows(int region, int H, int W) {
    int rows = (region - 2 * K7_PAD) / W - 2;
    if (rows >= H) return H;
    if (rows >= OUTS) rows -= rows % OUTS;
    return rows;
}

// Images a tile holds. A tile of a whole map (rows == H) with fewer items (strips x columns x
// channel blocks) than the block has threads takes several images, as many as fill the block and
// as the tile holds, each plane in a region of at least (H + 2) * W + 2 * K7_PAD floats.
template <int TILE_FLOATS, int OUTS>
__device__ __forceinline__ int k7_images(int N, int H, int W, int rows, int chunk,
                                         int channel_blocks, int threads) {
    if (rows < H) return 1;
    const int per_image = channel_blocks * ((H + OUTS - 1) / OUTS) * W;
    const int need = ((H + 2) * W + 2 * K7_PAD + 3) & ~3;
    const int fit = TILE_FLOATS / (chunk * need);
    return max(1, min(N, min(threads / per_image, fit)));
}

// A block's current tile -- images n0 .. n0+images_here-1 of group g, output rows h0 ..
// h0+rows_here-1 at full width -- with the shape and launch values its staging, accumulating and
// storing read (k7_grouped derives them; the functions below take them from here). Plane (i, c)
// -- image n0+i, input channel c of the group -- sits in region p = i*count + (c - c0) of the
// tile: its row h0-1+j (j = 0 .. rows_here+1) at tile[p*region + K7_PAD + phase + j*W ...],
// phase = the 16-byte phase of that row in x (k7_phase). Its row h0-1 is element
// first_e0 + k7_plane_of(i, c)*plane of x.
struct K7Tile {
    int C_in, C_out, H, W;
    int cpg, cout_pg;       // input and output channels per group
    int region;             // floats of the tile per staged plane
    long long plane;        // H * W
    int plane_phase;        // how far one plane moves the 16-byte phase in x
    int g, n0, images_here, h0, rows_here;
    long long first_e0;
    int phase0;             // the 16-byte phase of first_e0 in x
    // Per plane, in floats from its row h0-1: zeros below zero_head (the row above row 0) and
    // from zero_tail_from (rows past H); n_elems copied from x between them; zeros in all.
    int zero_head, zero_tail_from, n_elems, zeros;
    int strips;             // strips of OUTS rows a column of the tile has
    int per_image;          // items of one image: channel blocks x strips
};

// Plane (i, c)'s distance in x from the tile's first plane, in planes.
__device__ __forceinline__ long long k7_plane_of(const K7Tile& t, int i, int c) {
    return (long long)i * t.C_in + c;
}

// The 16-byte phase in x of plane (i, c)'s row h0-1.
__device__ __forceinline__ int k7_phase(const K7Tile& t, int i, int c) {
    return (int)((t.phase0 + k7_plane_of(t, i, c) * t.plane_phase) & 3);
}

// Item q of the tile: image i, channel block cb (output channels cb*COB .. of the group) and the
// shared row j0 above its strip's first output row.
template <int OUTS>
__device__ __forceinline__ void k7_item(const K7Tile& t, int q, int& i, int& cb, int& j0) {
    i = q / t.per_image;
    const int rest = q - i * t.per_image;
    cb = rest / t.strips;
    j0 = (rest - cb * t.strips) * OUTS;
}

// Stage input channels c0 .. c0+count-1 of the group (of every image of the tile) and their
// weights; on return every copy has landed and every thread sees them. The loops run over all
// planes at once, so small maps keep every thread copying.
__device__ __forceinline__ void k7_stage(float* tile, float* wsh, const float* x, const float* wt,
                                         const K7Tile& t, int c0, int count, int tid,
                                         int threads) {
    __syncthreads();  // every thread is done reading what the tile held
    for (int i = tid; i < count * 9 * t.cout_pg; i += threads) {
        const int co = i % t.cout_pg, tap_ci = i / t.cout_pg;  // i = (ci*9 + tap)*cout_pg + co
        const int tap = tap_ci % 9, ci = tap_ci / 9;
        wsh[i] = __ldg(wt + ((long long)(t.g * t.cout_pg + co) * t.cpg + c0 + ci) * 9 + tap);
    }
    const int planes = t.images_here * count;
    for (int k = tid; k < planes * t.zeros; k += threads) {
        const int p = k / t.zeros, z = k - p * t.zeros;
        const int at = z < t.zero_head ? z : t.zero_tail_from + (z - t.zero_head);
        tile[p * t.region + K7_PAD + k7_phase(t, p / count, c0 + p % count) + at] = 0.0f;
    }
    // 16-byte copies: plane p's vector v, where v < its count (which depends on its phase)
    const int vmax = t.n_elems >> 2;
    for (int k = tid; k < planes * vmax; k += threads) {
        const int p = k / vmax, v = k - p * vmax;
        const int i = p / count, c = c0 + p % count;
        const int phase = k7_phase(t, i, c);
        const StageSplit split = stage_split(phase + t.zero_head, t.n_elems);
        if (v >= split.vectors) continue;
        const int e = t.zero_head + split.head + 4 * v;
        __pipeline_memcpy_async(tile + p * t.region + K7_PAD + phase + e,
                                x + (t.first_e0 + k7_plane_of(t, i, c) * t.plane + e), 16);
    }
    // 4-byte copies: up to 3 elements before a plane's first 16-byte boundary and up to 3
    // after its last
    for (int k = tid; k < planes * 6; k += threads) {
        const int p = k / 6, s = k - p * 6;
        const int i = p / count, c = c0 + p % count;
        const int phase = k7_phase(t, i, c);
        const StageSplit split = stage_split(phase + t.zero_head, t.n_elems);
        const int r = s < 3 ? s : split.tail_from + (s - 3);
        if (s < 3 ? r >= split.head : r >= t.n_elems) continue;
        const int e = t.zero_head + r;
        __pipeline_memcpy_async(tile + p * t.region + K7_PAD + phase + e,
                                x + (t.first_e0 + k7_plane_of(t, i, c) * t.plane + e), 4);
    }
    stage_complete();
}

// Add the products of staged input channels c0 .. c0+count-1 to item (q, col): a strip of OUTS
// rows at column col for COB output channels of one image.
template <int OUTS, int COB>
__device__ __forceinline__ void k7_accumulate(float (&acc)[OUTS][COB], const float* tile,
                                              const float* wsh, const K7Tile& t, int q, int col,
                                              int c0, int count) {
    int i, cb, j0;  // j0: the shared row above the strip's first output row
    k7_item<OUTS>(t, q, i, cb, j0);
    const int co0 = cb * COB;  // first output channel of the block, in the group
    for (int c = 0; c < count; ++c) {
        const int base = (i * count + c) * t.region + K7_PAD + k7_phase(t, i, c0 + c);
        // Window: rows j0 .. j0+OUTS+1 (clamped to staged rows: the clamped ones feed only
        // outputs past the tile's end, never written), columns col-1 .. col+1.
        float win[OUTS + 2][3];
#pragma unroll
        for (int r = 0; r < OUTS + 2; ++r) {
            const int at = base + min(j0 + r, t.rows_here + 1) * t.W + col;
            const float left = tile[at - 1], mid = tile[at], right = tile[at + 1];
            win[r][0] = col > 0 ? left : 0.0f;
            win[r][1] = mid;
            win[r][2] = col + 1 < t.W ? right : 0.0f;
        }
        const float4* w_c = reinterpret_cast<const float4*>(wsh + c * 9 * t.cout_pg + co0);
#pragma unroll
        for (int kh = 0; kh < 3; ++kh)
#pragma unroll
            for (int kw = 0; kw < 3; ++kw)
#pragma unroll
                for (int o4 = 0; o4 < COB / 4; ++o4) {
                    const float4 wv = w_c[((kh * 3 + kw) * t.cout_pg) / 4 + o4];
#pragma unroll
                    for (int r = 0; r < OUTS; ++r) {
                        const float v = win[r + kh][kw];
                        acc[r][4 * o4 + 0] = fmaf(v, wv.x, acc[r][4 * o4 + 0]);
                        acc[r][4 * o4 + 1] = fmaf(v, wv.y, acc[r][4 * o4 + 1]);
                        acc[r][4 * o4 + 2] = fmaf(v, wv.z, acc[r][4 * o4 + 2]);
                        acc[r][4 * o4 + 3] = fmaf(v, wv.w, acc[r][4 * o4 + 3]);
                    }
                }
    }
}

// Write item (q, col)'s outputs: the strip's rows inside the tile, COB channels each; with a
// fused epilogue (EPI), act(acc + bias) of each output's channel.
template <int OUTS, int COB, class EPI>
__device__ __forceinline__ void k7_store(float* y, const float* __restrict__ bias,
                                         const float (&acc)[OUTS][COB], const K7Tile& t, int q,
                                         int col) {
    int i, cb, j0;
    k7_item<OUTS>(t, q, i, cb, j0);
    if constexpr (EPI::fused) {
        const int co0 = t.g * t.cout_pg + cb * COB;
        float b[COB];
#pragma unroll
        for (int o = 0; o < COB; ++o) b[o] = epilogue_bias(bias, co0 + o);
#pragma unroll
        for (int r = 0; r < OUTS; ++r) {
            if (j0 + r >= t.rows_here) break;
            const int h = t.h0 + j0 + r;
#pragma unroll
            for (int o = 0; o < COB; ++o)
                y[nchw_offset(t.n0 + i, co0 + o, h, col, t.C_out, t.H, t.W)] =
                    EPI::apply(acc[r][o] + b[o]);
        }
    } else {  // the plain entries' store, as it was before the fused ones
#pragma unroll
        for (int r = 0; r < OUTS; ++r) {
            if (j0 + r >= t.rows_here) break;
            const int h = t.h0 + j0 + r;
#pragma unroll
            for (int o = 0; o < COB; ++o)
                y[nchw_offset(t.n0 + i, t.g * t.cout_pg + cb * COB + o, h, col, t.C_out, t.H,
                              t.W)] = acc[r][o];
        }
    }
}

// Assumptions: FP32 contiguous NCHW; 3x3, stride 1, padding 1, dilation 1; C_in/groups <= 32,
// C_out/groups <= 32 and a multiple of COB (COB a multiple of 4, for 16-byte weight reads); x at
// least 4-byte aligned (any float pointer); the row fit above at least 1. Other shapes return
// without writing (the host's support predicate refuses them first). Index types: element
// offsets and tiles are 64-bit (no 2**31-element limit); N*C_out < 2**31 (checked); offsets
// inside a tile are int. Any grid size is correct: blocks stride over the tiles.
// CHUNKED false: the group's weights fit at once (one chunk), the tile is staged once and each
// thread walks its items; other groups return without writing. CHUNKED true: any group, staged
// chunk by chunk once per round of one item per thread, the accumulators kept in registers
// across the chunks. Two entries, so each gets its own register allocation.
template <int TILE_FLOATS, int OUTS, int COB, bool CHUNKED, class EPI>
__device__ void k7_grouped(const float* __restrict__ x, const float* __restrict__ wt,
                           float* __restrict__ y, const float* __restrict__ bias, int N,
                           int C_in, int C_out, int H, int W, int groups) {
    __shared__ __align__(16) float tile[TILE_FLOATS];
    __shared__ __align__(16) float wsh[K7_WEIGHT_FLOATS];  // [ci - c0][tap][co]
    if (groups < 1 || C_in % groups != 0 || C_out % groups != 0 || N < 1 || H < 1 || W < 1)
        return;
    const int cpg = C_in / groups, cout_pg = C_out / groups;
    if (cpg > K7_MAX_CPG || cout_pg > K7_MAX_COUT_PG || cout_pg % COB != 0 ||
        (long long)N * C_out > 0x7fffffffLL)
        return;
    const int chunk = k7_chunk(cpg, cout_pg);
    if (!CHUNKED && chunk < cpg) return;
    const int rows = k7_tile_rows<OUTS>(k7_region<TILE_FLOATS>(chunk), H, W);
    if (rows < 1) return;
    const int tid = threadIdx.x, threads = blockDim.x;
    const int channel_blocks = cout_pg / COB;
    const int images = k7_images<TILE_FLOATS, OUTS>(N, H, W, rows, chunk, channel_blocks, threads);
    const int region = k7_region<TILE_FLOATS>(images * chunk);
    const int row_blocks = (H + rows - 1) / rows;
    const long long tiles = (long long)((N + images - 1) / images) * groups * row_blocks;
    const long long plane = (long long)H * W;
    // x's position within a 16-byte line, in floats; and how far each plane moves it
    const int x_word = (int)((reinterpret_cast<uintptr_t>(x) >> 2) & 3);
    const int plane_phase = (int)(plane & 3);
    // Items u = q * W + col (q: image, channel block and strip), walked as in k6: one division.
    const int col_first = tid % W, q_first = tid / W;
    const int col_step = threads % W, q_step = threads / W;

    for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int row_block = (int)(t % row_blocks);
        const long long ng = t / row_blocks;
        const int g = (int)(ng % groups);
        const int n0 = (int)(ng / groups) * images;
        const int images_here = min(images, N - n0);
        const int h0 = row_block * rows;
        const int rows_here = min(rows, H - h0);
        const long long first_e0 =
            ((long long)n0 * C_in + (long long)g * cpg) * plane + (long long)(h0 - 1) * W;
        const int phase0 = (int)((x_word + first_e0) & 3);  // & 3 of a negative is still mod 4
        const int zero_head = h0 == 0 ? W : 0;                         // the row above row 0
        const int zero_tail_from = (min(h0 + rows_here + 1, H) - (h0 - 1)) * W;  // rows past H
        const int staged = (rows_here + 2) * W;
        const int n_elems = zero_tail_from - zero_head;  // copied from x, per plane
        const int zeros = zero_head + staged - zero_tail_from;
        const int strips = (rows_here + OUTS - 1) / OUTS;
        const int per_image = channel_blocks * strips;
        const int q_end = images_here * per_image;
        const K7Tile tl{.C_in = C_in, .C_out = C_out, .H = H, .W = W, .cpg = cpg,
                        .cout_pg = cout_pg, .region = region, .plane = plane,
                        .plane_phase = plane_phase, .g = g, .n0 = n0, .images_here = images_here,
                        .h0 = h0, .rows_here = rows_here, .first_e0 = first_e0, .phase0 = phase0,
                        .zero_head = zero_head, .zero_tail_from = zero_tail_from,
                        .n_elems = n_elems, .zeros = zeros, .strips = strips,
                        .per_image = per_image};

        if (!CHUNKED) {
            k7_stage(tile, wsh, x, wt, tl, 0, cpg, tid, threads);
            int col = col_first;
            for (int q = q_first; q < q_end;) {
                float acc[OUTS][COB];
#pragma unroll
                for (int r = 0; r < OUTS; ++r)
#pragma unroll
                    for (int o = 0; o < COB; ++o) acc[r][o] = 0.0f;
                k7_accumulate<OUTS, COB>(acc, tile, wsh, tl, q, col, 0, cpg);
                k7_store<OUTS, COB, EPI>(y, bias, acc, tl, q, col);
                col += col_step;
                q += q_step;
                if (col >= W) {
                    col -= W;
                    ++q;
                }
            }
        } else {
            // Round r gives thread tid item u = r*threads + tid, the item the walk above would
            // give it r-th; every thread stages every chunk of every round (block-wide syncs).
            const int items = q_end * W;
            for (int u0 = 0; u0 < items; u0 += threads) {
                const int u = u0 + tid;
                const bool mine = u < items;
                const int q = u / W, col = u % W;
                float acc[OUTS][COB];
#pragma unroll
                for (int r = 0; r < OUTS; ++r)
#pragma unroll
                    for (int o = 0; o < COB; ++o) acc[r][o] = 0.0f;
                for (int c0 = 0; c0 < cpg; c0 += chunk) {
                    const int count = min(chunk, cpg - c0);
                    k7_stage(tile, wsh, x, wt, tl, c0, count, tid, threads);
                    if (mine) k7_accumulate<OUTS, COB>(acc, tile, wsh, tl, q, col, c0, count);
                }
                if (mine) k7_store<OUTS, COB, EPI>(y, bias, acc, tl, q, col);
            }
        }
    }
}

// Twelve entries per row of K7_TILES: K7_ENTRY(TILE_FLOATS, OUTS, COB, MIN_BLOCKS) defines
// k7_grouped_f<TILE>_o<OUTS>_c<COB> (groups staged at once) and the same name with _chunked, and
// each of the two with every fused epilogue (_ep_<activation>, a fourth pointer: the bias,
// C_out floats or null). Shared memory per block is 4 * (TILE_FLOATS + K7_WEIGHT_FLOATS) bytes;
// __launch_bounds__(256) lets the tuner launch 128 or 256 threads. MIN_BLOCKS 0 leaves ptxas its
// register heuristic; 1 lets a tile that would spill under it take up to 255 registers instead
// (every chunked entry: its accumulators live across the chunk loop, and the heuristic's 64
// registers spill).
#define K7_ENTRY_ONE(NAME, TILE_FLOATS, OUTS, COB, MIN_BLOCKS, CHUNKED)                        \
    extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS)                             \
        NAME(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y, \
             int N, int C_in, int C_out, int H, int W, int groups) {                          \
        k7_grouped<TILE_FLOATS, OUTS, COB, CHUNKED, NoEpilogue>(x, wt, y, nullptr, N, C_in,   \
                                                                C_out, H, W, groups);         \
    }                                                                                         \
    EPILOGUE_ACTIVATIONS(K7_FUSED, NAME, (TILE_FLOATS, OUTS, COB, MIN_BLOCKS, CHUNKED), 0)
// A fused twin: ENTRY the entry's (TILE_FLOATS, OUTS, COB, MIN_BLOCKS, CHUNKED), unpacked in
// its body.
#define K7_TEMPLATE_ARGS(TILE_FLOATS, OUTS, COB, MIN_BLOCKS, CHUNKED) TILE_FLOATS, OUTS, COB, CHUNKED
#define K7_MIN_BLOCKS(TILE_FLOATS, OUTS, COB, MIN_BLOCKS, CHUNKED) MIN_BLOCKS
#define K7_FUSED(NAME, ENTRY, UNUSED, ACT, EPI)                                                \
    extern "C" __global__ void __launch_bounds__(256, K7_MIN_BLOCKS ENTRY) NAME##_ep_##ACT(   \
        const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,     \
        const float* __restrict__ bias, int N, int C_in, int C_out, int H, int W,             \
        int groups) {                                                                         \
        k7_grouped<K7_TEMPLATE_ARGS ENTRY, EPI>(x, wt, y, bias, N, C_in, C_out, H, W, groups); \
    }
#define K7_ENTRY(TILE_FLOATS, OUTS, COB, MIN_BLOCKS)                                          \
    K7_ENTRY_ONE(k7_grouped_f##TILE_FLOATS##_o##OUTS##_c##COB, TILE_FLOATS, OUTS, COB,        \
                 MIN_BLOCKS, false)                                                           \
    K7_ENTRY_ONE(k7_grouped_f##TILE_FLOATS##_o##OUTS##_c##COB##_chunked, TILE_FLOATS, OUTS,   \
                 COB, 1, true)
K7_TILES(K7_ENTRY)
