// k11: depthwise 3x3 convolution on channels_last (NHWC) tensors with no index arithmetic on its
// critical path, for the maps where a launch's whole time is a few memory round trips (N = 1,
// small H x W) and beyond. Why, measured on an H200 against cuDNN's conv2d_c1_k1_nhwc kernel
// (record h200-2026-12-03-passes, device-logs/depthwise-small-maps/): cuDNN gives each thread
// one pixel's 4-channel vector; a kernel with the same decomposition that found its pixel and
// channels by dividing a flat thread index (runtime divisions before its first load) was slower
// than cuDNN's on every N = 1 map there, and k10's staging of the taps through shared memory
// behind a barrier also delays its first multiply. So here:
// - The grid is 3-D: x over channel vectors (threadIdx.x, neighbouring threads on neighbouring
//   16-, 8- or 4-byte vectors of one pixel: a warp reads contiguous bytes), y over groups of PIX
//   adjacent pixels of a row (threadIdx.y), z over image rows (n * H + h). A thread's indices are
//   block and thread coordinates; the one modulo (h = row % H) is the same for the whole block.
// - A thread's VEC channels' taps are VEC * 9 contiguous floats of a (C, 1, 3, 3) weight,
//   read as 9 vector loads (not 9 * VEC scattered scalars), issued beside the input loads: one
//   memory round trip before the first multiply, no barrier.
// - PIX > 1: a thread holds three input rows of PIX + 2 pixels and computes PIX outputs of its
//   row (each input pixel loaded once per thread rather than three times).
// - ROWS > 1 (for large maps, where the three loads of each input row may cost L2 bandwidth; not
//   measured yet): a thread
//   computes its PIX pixels on ROWS consecutive rows, sliding its three input rows down one row
//   at a time, the next row's loads issued before the current row's multiplies. An input row is
//   then loaded (ROWS + 2) / ROWS times per thread instead of three. The z index is a block of
//   ROWS rows of one image: one division per block, the same for all its threads.
// The tuning stage picks VEC, PIX, ROWS and the block size per shape.
// EPI (epilogue.cuh): every unflipped entry also comes with each fused epilogue
// (`<entry>_ep_<activation>`: y = act(conv + bias[c]) before the store; bias may be null).
// FLIP: every entry also comes turned 180 degrees (`<entry>_flip`: tap t read as tap 8 - t,
// w[c][2 - kh][2 - kw]). For a depthwise weight that turned weight is the input gradient's
// w' (dX = conv(dY, w'); its transposition between input and output channels is the identity
// with one channel per group), so the backward launches the _flip entry on the weight as it is:
// no gather kernel before it, which cost the input gradient 3 to 5.5 us on the small maps
// (record h200-2026-12-04-passes beside h200-2026-12-03's forward). FLIP is a compile-time
// index, so the unflipped entries' machine code is the kernel's before FLIP.
#include "channel_vec.cuh"
#include "common.cuh"
#include "epilogue.cuh"
// K11_TILES: the (VEC, PIX, ROWS) table, written in Python (nhwc_direct_kernels.K11_TABLE),
// generated.
#include "k11_depthwise_direct_nhwc_table.cuh"

// The 9 taps of channels c .. c + VEC - 1, tap-major per channel as the weight holds them:
// tw[j * 9 + t] is tap t (kh * 3 + kw) of channel c + j.
template <int VEC>
__device__ __forceinline__ void k11_load_taps(const float* __restrict__ wt, int c,
                                              float (&tw)[9 * VEC]) {
    const float* base = wt + (long long)c * 9;
#pragma unroll
    for (int i = 0; i < 9; ++i) {
        if (VEC == 4) {
            const float4 q = __ldg(reinterpret_cast<const float4*>(base) + i);
            tw[4 * i] = q.x;
            tw[4 * i + 1] = q.y;
            tw[4 * i + 2] = q.z;
            tw[4 * i + 3] = q.w;
        } else if (VEC == 2) {
            const float2 q = __ldg(reinterpret_cast<const float2*>(base) + i);
            tw[2 * i] = q.x;
            tw[2 * i + 1] = q.y;
        } else {
            tw[i] = __ldg(base + i);
        }
    }
}

// Tap t of the thread's VEC channels, as one channel vector.
template <int VEC>
__device__ __forceinline__ ChannelVec<VEC> k11_tap(const float (&tw)[9 * VEC], int t);
template <>
__device__ __forceinline__ ChannelVec<4> k11_tap<4>(const float (&tw)[36], int t) {
    return {make_float4(tw[t], tw[9 + t], tw[18 + t], tw[27 + t])};
}
template <>
__device__ __forceinline__ ChannelVec<2> k11_tap<2>(const float (&tw)[18], int t) {
    return {make_float2(tw[t], tw[9 + t])};
}
template <>
__device__ __forceinline__ ChannelVec<1> k11_tap<1>(const float (&tw)[9], int t) {
    return {tw[t]};
}

// Assumptions at the signature (the host's support predicate and launch refuse the rest):
// - FP32; 3x3, stride 1, padding 1, dilation 1; a bias only in the fused entries (bias: C
//   floats or null); depthwise with channel multiplier 1:
//   groups == C_in == C_out.
// - x: N x H x W x C, y: N x H x W x C, both contiguous channels_last; w: C x 3 x 3 (a (C, 1, 3,
//   3) depthwise weight has this memory in either layout).
// - VEC = 4: C % 4 == 0 and x, y and w 16-byte aligned; VEC = 2: C % 2 == 0 and 8-byte aligned
//   (the host checks the pointers); VEC = 1: any C.
// - grid = (ceil(C / VEC / blockDim.x), ceil(W / (PIX * blockDim.y)), N * ceil(H / ROWS)):
//   the z blocks and the pixel-group blocks each at most 65535 (gridDim.y and z), W * C < 2**31
//   (a row's offsets are 32-bit; a row's start is 64-bit).
template <int VEC, int PIX, int ROWS, bool FLIP, class EPI>
__device__ __forceinline__ void k11_depthwise_nhwc(const float* __restrict__ x,
                                                   const float* __restrict__ wt,
                                                   float* __restrict__ y,
                                                   const float* __restrict__ bias, int N,
                                                   int C_in, int C_out, int H, int W,
                                                   int groups) {
    if (C_in != groups || C_out != groups || C_in % VEC) return;  // the host refuses these first
    const int C = C_in;
    const int vector = blockIdx.x * blockDim.x + threadIdx.x;
    const int w0 = (blockIdx.y * blockDim.y + threadIdx.y) * PIX;
    // row: the image row (n * H + h) of the thread's first output row h.
    int row, h;
    if (ROWS == 1) {
        row = blockIdx.z;
        h = row % H;
    } else {
        const int row_blocks = (H + ROWS - 1) / ROWS;
        const int n = blockIdx.z / row_blocks;
        h = (blockIdx.z - n * row_blocks) * ROWS;
        row = n * H + h;
    }
    if (vector * VEC >= C || w0 >= W) return;
    const int c = vector * VEC;
    const long long row_floats = (long long)W * C;

    // One input row of PIX + 2 pixels at image row row + dh - 1, zero outside the map (the
    // padding): map row h + dh - 1. Written as the kernel before ROWS wrote it, so that its
    // one-row entries keep their machine code (signed (row + dh) - 1 is not row + (dh - 1)).
    auto load_row = [&](ChannelVec<VEC>(&dst)[PIX + 2], int dh) {
        const int hh = h + dh - 1;
        const float* line = x + (long long)(row + dh - 1) * row_floats + c;
#pragma unroll
        for (int j = 0; j < PIX + 2; ++j) {
            const int w = w0 + j - 1;
            dst[j] = (hh >= 0 && hh < H && w >= 0 && w < W) ? ChannelVec<VEC>::load(line + w * C)
                                                             : ChannelVec<VEC>::zero();
        }
    };
    // Three input rows, then the taps, all loads issued before the first multiply.
    ChannelVec<VEC> in[3][PIX + 2];
#pragma unroll
    for (int dh = 0; dh < 3; ++dh) load_row(in[dh], dh);
    float tw[9 * VEC];
    k11_load_taps<VEC>(wt, c, tw);
    float b[VEC];
    if constexpr (EPI::fused) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) b[j] = epilogue_bias(bias, c + j);
    }

#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        // The image's last block of rows may be short (never with one row: h < H there; the
        // test left out keeps the one-row entries' machine code that of the kernel before ROWS).
        if (ROWS > 1 && h + r >= H) break;
        ChannelVec<VEC> next[PIX + 2];
        if (r + 1 < ROWS) load_row(next, r + 3);  // the row below the window, loaded early
        float* out = y + (long long)(row + r) * row_floats + c;
#pragma unroll
        for (int q = 0; q < PIX; ++q) {
            ChannelVec<VEC> acc = ChannelVec<VEC>::zero();
#pragma unroll
            for (int kh = 0; kh < 3; ++kh) {
#pragma unroll
                for (int kw = 0; kw < 3; ++kw) {
                    const int t = kh * 3 + kw;
                    acc.fma(in[kh][q + kw], k11_tap<VEC>(tw, FLIP ? 8 - t : t));
                }
            }
            if constexpr (EPI::fused) apply_epilogue<EPI>(acc, b);
            if (w0 + q < W) acc.store(out + (w0 + q) * C);
        }
        if (r + 1 < ROWS) {
#pragma unroll
            for (int j = 0; j < PIX + 2; ++j) {
                in[0][j] = in[1][j];
                in[1][j] = in[2][j];
                in[2][j] = next[j];
            }
        }
    }
}

// Seven entries per (vector width, pixels per thread, rows per thread) of the table (K11_TILES):
// the convolution, the same turned 180 degrees (_flip), and the convolution with each fused
// epilogue (_ep_<activation>, a fourth pointer: the bias); each allows up to 256 threads per
// block. ROWS = 1 keeps the entry names of the kernel before ROWS. The fused entries ask for two
// blocks of 256 threads per SM (at most 128 registers): SiLU's and Hardswish's arithmetic took
// the widest tiles past 128 (v4_p2_r4: 124 registers plain, 142 fused), which halved their
// occupancy and doubled their time on the maps they were tuned for (an H100, 2026-12-06).
#define K11_NAME_1(VEC, PIX) k11_depthwise_direct_nhwc_v##VEC##_p##PIX
#define K11_NAME_2(VEC, PIX) k11_depthwise_direct_nhwc_v##VEC##_p##PIX##_r2
#define K11_NAME_4(VEC, PIX) k11_depthwise_direct_nhwc_v##VEC##_p##PIX##_r4
#define K11_FLIPPED(NAME) K11_PASTE(NAME, _flip)  // NAME expanded first, then _flip appended
#define K11_PASTE(NAME, SUFFIX) NAME##SUFFIX
#define K11_EPILOGUE(NAME, ACT) K11_PASTE3(NAME, _ep_, ACT)
#define K11_PASTE3(NAME, INFIX, ACT) NAME##INFIX##ACT
#define K11_KERNEL(NAME, VEC, PIX, ROWS, FLIP)                                                 \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                     \
        const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,       \
        int N, int C_in, int C_out, int H, int W, int groups) {                                 \
        k11_depthwise_nhwc<VEC, PIX, ROWS, FLIP, NoEpilogue>(x, wt, y, nullptr, N, C_in, C_out, \
                                                             H, W, groups);                     \
    }
#define K11_FUSED(VEC, PIX, ROWS, ACT, EPI)                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) K11_EPILOGUE(K11_NAME_##ROWS(VEC, PIX),\
                                                                      ACT)(                     \
        const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,       \
        const float* __restrict__ bias, int N, int C_in, int C_out, int H, int W, int groups) { \
        k11_depthwise_nhwc<VEC, PIX, ROWS, false, EPI>(x, wt, y, bias, N, C_in, C_out, H, W,    \
                                                       groups);                                 \
    }
#define K11_ENTRY(VEC, PIX, ROWS)                                                              \
    K11_KERNEL(K11_NAME_##ROWS(VEC, PIX), VEC, PIX, ROWS, false)                                \
    K11_KERNEL(K11_FLIPPED(K11_NAME_##ROWS(VEC, PIX)), VEC, PIX, ROWS, true)                    \
    EPILOGUE_ACTIVATIONS(K11_FUSED, VEC, PIX, ROWS)

K11_TILES(K11_ENTRY)
