// k10: depthwise 3x3 convolution on channels_last (NHWC) tensors, built to stand near the floor
// (a same-bytes copy). What it changes against k8, each for a reason the Nsight captures of k8
// gave (few bytes in flight, low occupancy, weights read as 36 scattered scalars per thread):
// - A block is a 2-D set of threads: threadIdx.x walks CBV neighbouring channel vectors of one
//   pixel strip (16-byte loads, a warp reading contiguous bytes), threadIdx.y walks P pixel
//   strips that share those channels. The block stages its channels' 9 taps in shared memory
//   once, with coalesced loads, tap-major, so each thread reads its taps as 9 vector loads.
// - A thread walks a column strip of COLS outputs down ROWS rows, keeping three input rows in
//   registers: each input row is loaded once and feeds the three output rows it belongs to
//   (ROWS + 2 row loads for ROWS output rows, where a rows x cols tile loads them all at once).
//   The walk is unrolled, so the loads of later rows are issued ahead of the arithmetic.
// - Small tiles (1 x 1) with many blocks fill every SM at N = 1; tall strips reuse rows on
//   large maps. The tuning stage picks the tile, CBV and block size per shape.
#include "channel_vec.cuh"
#include "common.cuh"
// K10_TILES: the tile table, written in Python (nhwc_row_kernels.K10_TABLE) and generated.
#include "k10_depthwise_rows_nhwc_table.cuh"

// K10Vec<VEC>: VEC adjacent channels of one pixel (or their taps), kernels/channel_vec.cuh.
template <int VEC>
using K10Vec = ChannelVec<VEC>;

// The COLS + 2 input pixels of row h around a column strip starting at w0 (zero outside the map:
// the padding), for the thread's channel vector; x_n points at the image's first pixel, at the
// thread's channel.
template <int VEC, int COLS>
__device__ __forceinline__ void k10_load_row(const float* __restrict__ x_n, long long row_stride,
                                             int C, int h, int w0, int H, int W,
                                             K10Vec<VEC> (&in)[COLS + 2]) {
    const bool row_inside = h >= 0 && h < H;
    const float* x_row = x_n + (long long)h * row_stride;
#pragma unroll
    for (int j = 0; j < COLS + 2; ++j) {
        const int w = w0 - 1 + j;
        in[j] = (row_inside && w >= 0 && w < W) ? K10Vec<VEC>::load(x_row + (long long)w * C)
                                                : K10Vec<VEC>::zero();
    }
}

// Assumptions at the signature (the host's support predicate and launch refuse the rest):
// - FP32; 3x3, stride 1, padding 1, dilation 1, no bias; depthwise with channel multiplier 1:
//   groups == C_in == C_out.
// - x: N x H x W x C, y: N x H x W x C, both contiguous channels_last; w: C x 3 x 3 (a (C, 1, 3,
//   3) depthwise weight has this memory in either layout).
// - VEC = 4: C % 4 == 0 and x, y 16-byte aligned; VEC = 2: C % 2 == 0 and 8-byte aligned (the
//   host checks the pointers); VEC = 1: any C.
// - blockDim = (CBV, P, 1): CBV channel vectors by P pixel strips; the grid is 1-D, one block
//   per (block of CBV channel vectors, block of P strips), channel blocks varying fastest;
//   gridDim.x * ... covers every pair (the host sizes it; at most 2**31 - 1 blocks).
// - Element offsets are 64-bit; N * H * W * C may exceed 2**31.
template <int VEC, int ROWS, int COLS, int CBV>
__device__ __forceinline__ void k10_depthwise_nhwc(const float* __restrict__ x,
                                                   const float* __restrict__ wt,
                                                   float* __restrict__ y, int N, int C_in,
                                                   int C_out, int H, int W, int groups) {
    if (C_in != groups || C_out != groups || C_in % VEC) return;  // the host refuses these first
    constexpr int CBW = CBV * VEC;  // channels of a channel block
    __shared__ __align__(16) float taps[9][CBW];
    const int C = C_in;
    const int vectors = C / VEC;
    const int channel_blocks = (vectors + CBV - 1) / CBV;
    const int strips_w = (W + COLS - 1) / COLS;
    const int strips_h = (H + ROWS - 1) / ROWS;
    const long long strips = (long long)N * strips_h * strips_w;
    const int channel_block = (int)(blockIdx.x % channel_blocks);
    const long long strip = (long long)(blockIdx.x / channel_blocks) * blockDim.y + threadIdx.y;
    const int c_begin = channel_block * CBW;
    const int channels = min(CBW, C - c_begin);
    const int vector = channel_block * CBV + threadIdx.x;
    const bool active = vector < vectors && strip < strips;

    // strip -> (column strip, row strip, image), column strips fastest (neighbouring threads of
    // a block's y dimension take neighbouring pixels)
    int strip_w = 0, strip_h = 0, n = 0, unused;
    if (active) split_index(strip, strips_w, strips_h, N, strip_w, strip_h, n, unused);
    const int h0 = strip_h * ROWS, w0 = strip_w * COLS;
    const long long row_stride = (long long)W * C;  // floats between vertically adjacent pixels
    const float* x_n = x + (long long)n * H * row_stride + vector * VEC;
    float* y_n = y + (long long)n * H * row_stride + vector * VEC;

    // Three input rows in flight: above, at and below the output row. The first three are
    // loaded before the taps are staged, so their latency overlaps the staging's (a small map's
    // whole time is a few such round trips).
    K10Vec<VEC> above[COLS + 2], at[COLS + 2], below[COLS + 2];
    if (active) {
        k10_load_row<VEC, COLS>(x_n, row_stride, C, h0 - 1, w0, H, W, above);
        k10_load_row<VEC, COLS>(x_n, row_stride, C, h0, w0, H, W, at);
        k10_load_row<VEC, COLS>(x_n, row_stride, C, h0 + 1, w0, H, W, below);
    }

    // The block's taps, tap-major: taps[t][c] = w[(c_begin + c) * 9 + t], read as one
    // contiguous run of channels * 9 floats.
    const int thread = threadIdx.y * blockDim.x + threadIdx.x;
    for (int i = thread; i < channels * 9; i += blockDim.x * blockDim.y) {
        const int c = i / 9;
        taps[i - 9 * c][c] = __ldg(wt + (long long)c_begin * 9 + i);
    }
    __syncthreads();
    if (!active) return;  // after the barrier: every thread staged

    K10Vec<VEC> k[9];
#pragma unroll
    for (int t = 0; t < 9; ++t) k[t] = K10Vec<VEC>::shared(&taps[t][threadIdx.x * VEC]);

#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int h = h0 + r;
        if (r > 0) k10_load_row<VEC, COLS>(x_n, row_stride, C, h + 1, w0, H, W, below);
        if (h < H) {
#pragma unroll
            for (int c = 0; c < COLS; ++c) {
                K10Vec<VEC> acc = K10Vec<VEC>::zero();
#pragma unroll
                for (int kw = 0; kw < 3; ++kw) {
                    acc.fma(above[c + kw], k[kw]);
                    acc.fma(at[c + kw], k[3 + kw]);
                    acc.fma(below[c + kw], k[6 + kw]);
                }
                if (w0 + c < W) acc.store(y_n + (long long)h * row_stride + (long long)(w0 + c) * C);
            }
        }
#pragma unroll
        for (int j = 0; j < COLS + 2; ++j) {
            above[j] = at[j];
            at[j] = below[j];
        }
    }
}

// One entry per (vector width, rows, columns, channel vectors per block) of the tile table
// (K10_TILES). Each entry allows up to 256 threads per block.
#define K10_ENTRY(VEC, ROWS, COLS, CBV)                                                         \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        k10_depthwise_rows_nhwc_v##VEC##_r##ROWS##_c##COLS##_b##CBV(                            \
            const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,   \
            int N, int C_in, int C_out, int H, int W, int groups) {                             \
        k10_depthwise_nhwc<VEC, ROWS, COLS, CBV>(x, wt, y, N, C_in, C_out, H, W, groups);      \
    }

K10_TILES(K10_ENTRY)
