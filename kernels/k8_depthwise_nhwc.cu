// k8: depthwise 3x3 convolution on channels_last (NHWC) tensors: the layout in which cuDNN's
// depthwise kernels run. In NHWC a pixel's channels are contiguous, so neighbouring threads take
// neighbouring channel vectors of one pixel (VEC = 4: one 16-byte load per pixel and tap row,
// a warp reading 512 contiguous bytes once C >= 128), and each thread keeps a register tile of
// ROWS x COLS output pixels for its channels: the (ROWS + 2) x (COLS + 2) input pixels it loads
// serve up to 9 outputs each, and its 9 weights per channel are loaded once per tile.
#include "channel_vec.cuh"
#include "common.cuh"
// The tile table K8_TILES: the registry's (groupconv.nhwc_strip_kernels.K8_TABLE).
#include "k8_depthwise_nhwc_table.cuh"

// K8Vec<VEC>: VEC adjacent channels of one pixel (or their taps), kernels/channel_vec.cuh.
template <int VEC>
using K8Vec = ChannelVec<VEC>;

// The 9 taps of channels c0 .. c0 + VEC - 1 as vectors (w is C x 9: lane i of tap t is
// w[(c0 + i) * 9 + t]).
template <int VEC>
__device__ __forceinline__ void k8_weights(const float* __restrict__ wt, int c0,
                                           K8Vec<VEC> (&k)[9]) {
    float lanes[9][VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i)
#pragma unroll
        for (int t = 0; t < 9; ++t) lanes[t][i] = __ldg(wt + (long long)(c0 + i) * 9 + t);
#pragma unroll
    for (int t = 0; t < 9; ++t) {
        if constexpr (VEC == 4) {
            k[t].v = make_float4(lanes[t][0], lanes[t][1], lanes[t][2], lanes[t][3]);
        } else {
            k[t].v = lanes[t][0];
        }
    }
}

// Assumptions at the signature (the host's support predicate refuses the rest):
// - FP32; 3x3, stride 1, padding 1, dilation 1, no bias; depthwise with channel multiplier 1:
//   groups == C_in == C_out.
// - x: N x H x W x C, y: N x H x W x C, both contiguous channels_last (the channel stride is 1);
//   w: C x 3 x 3 (a (C, 1, 3, 3) depthwise weight has this memory in NCHW and channels_last).
// - VEC = 4: C % 4 == 0 and x, y 16-byte aligned (the host checks the pointers); VEC = 1: any C,
//   any 4-byte aligned pointers.
// - Index types: element offsets are 64-bit; N * H * W * C may exceed 2**31. The per-thread work
//   item is 64-bit and any grid size is correct (threads stride over the items).
template <int VEC, int ROWS, int COLS>
__device__ __forceinline__ void k8_depthwise_nhwc(const float* __restrict__ x,
                                                  const float* __restrict__ wt,
                                                  float* __restrict__ y, int N, int C_in,
                                                  int C_out, int H, int W, int groups) {
    if (C_in != groups || C_out != groups || C_in % VEC) return;  // the host refuses these first
    const int vectors = C_in / VEC;
    const int strips_w = (W + COLS - 1) / COLS;
    const int strips_h = (H + ROWS - 1) / ROWS;
    const long long items = (long long)N * strips_h * strips_w * vectors;
    const long long row_stride = (long long)W * C_in;  // floats between vertically adjacent pixels
    for (long long item = blockIdx.x * (long long)blockDim.x + threadIdx.x; item < items;
         item += (long long)gridDim.x * blockDim.x) {
        // Work item -> (channel vector, column strip, row strip, image): channel vectors vary
        // fastest (coalesced loads along C), then column strips, row strips and images.
        int vector, strip_w, strip_h, n;
        split_index(item, vectors, strips_w, strips_h, vector, strip_w, strip_h, n);
        const int c0 = vector * VEC, h0 = strip_h * ROWS, w0 = strip_w * COLS;
        K8Vec<VEC> k[9];
        k8_weights<VEC>(wt, c0, k);
        K8Vec<VEC> acc[ROWS][COLS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int c = 0; c < COLS; ++c) acc[r][c] = K8Vec<VEC>::zero();
        const float* x_n = x + (long long)n * H * row_stride + c0;
#pragma unroll
        for (int in_row = 0; in_row < ROWS + 2; ++in_row) {
            const int h = h0 - 1 + in_row;
            if (h < 0 || h >= H) continue;  // zero padding above and below
            const float* x_row = x_n + (long long)h * row_stride;
            K8Vec<VEC> in[COLS + 2];
#pragma unroll
            for (int j = 0; j < COLS + 2; ++j) {
                const int w = w0 - 1 + j;
                in[j] = (w >= 0 && w < W) ? K8Vec<VEC>::load(x_row + (long long)w * C_in)
                                          : K8Vec<VEC>::zero();
            }
            // Input row in_row feeds output row r through kernel row kh = in_row - r.
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const int kh = in_row - r;
                if (kh < 0 || kh > 2) continue;
#pragma unroll
                for (int c = 0; c < COLS; ++c)
#pragma unroll
                    for (int kw = 0; kw < 3; ++kw) acc[r][c].fma(in[c + kw], k[kh * 3 + kw]);
            }
        }
        store_nhwc_tile<ROWS, COLS>(y + (long long)n * H * row_stride + c0, row_stride, C_in, h0,
                                    w0, H, W,
                                    [&](int r, int c, float* p) { acc[r][c].store(p); });
    }
}

// One entry per (vector width, rows, columns): a row of the registry's tile table K8_TILES. Each
// entry allows up to 256 threads per block.
#define K8_ENTRY(VEC, ROWS, COLS)                                                               \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        k8_depthwise_nhwc_v##VEC##_r##ROWS##_c##COLS(                                           \
            const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,   \
            int N, int C_in, int C_out, int H, int W, int groups) {                             \
        k8_depthwise_nhwc<VEC, ROWS, COLS>(x, wt, y, N, C_in, C_out, H, W, groups);            \
    }
K8_TILES(K8_ENTRY)
