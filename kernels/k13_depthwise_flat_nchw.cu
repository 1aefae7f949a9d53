// k13: depthwise 3x3 convolution on contiguous NCHW tensors, reading the tensor as one flat run of
// N * C * H * W floats, for the maps whose rows k12 cannot read as vectors. Why, from record
// h200-2026-12-03: where W % 4 != 0, k12 reads a row a float (or two) at a time, and the NCHW
// dispatcher lost to cuDNN's channels_last path on four such maps (0.81x to 0.92x: 57x13, 33x33,
// 64x255, 150x150), whose measured floor is 0.55x to 0.76x cuDNN's time. A plane's rows are
// contiguous, and so are the planes, so:
// - A thread computes VEC consecutive outputs of the flat run (f0 .. f0 + VEC - 1, f0 a multiple
//   of VEC), whatever rows or planes they fall in, and stores them as 16-byte vectors.
// - The inputs those outputs read are three flat spans of VEC + 2 floats, f0 + dh * W - 1 on,
//   for dh = -1, 0, 1 (the row above, the row, the row below). Each span is read as aligned
//   16-byte loads from the multiple of 4 at or below its start; its start's offset in those
//   loads, (dh * W - 1) mod 4, is the same for every thread of the launch (f0 is a multiple of
//   4), so picking a span out of the loads is a uniform branch on four constant-index copies,
//   with no divergence and nothing in local memory.
// - A tap that reads past a row's end (the next row's first float) or before its start (the row
//   above's last), or a row above the map or below it, is masked to the zero padding: each output
//   knows its own row and column, stepped along the run from the first output's.
// - The taps of the first output's plane are loaded once; an output of the next plane (a run
//   crossing a plane's end) reads its own.
// The tuning stage picks VEC (4 or 8) and the block size per shape.
// FLIP: every entry also comes turned 180 degrees (`<entry>_flip`: tap t read as tap 8 - t), the
// depthwise input gradient's weight w' read from the weight as it is, as in k11 and k12.
#include <stdint.h>

#include "common.cuh"
// K13_VECS: the outputs per thread, written in Python (nchw_plane_kernels.K13_TABLE), generated.
#include "k13_depthwise_flat_nchw_table.cuh"

// v[j] = x[s + j] for j = 0 .. VEC + 1, zero where s + j is outside the tensor (0 .. total - 1).
// vec4: x is 16-byte aligned; then the span is read as the aligned 16-byte loads that cover it,
// from a = s - off (off = s mod 4, the same for every thread), each load wholly inside the tensor
// or, at its two ends, read a float at a time.
template <int VEC>
__device__ __forceinline__ void k13_load_span(const float* __restrict__ x, long long s,
                                              long long total, bool vec4, float (&v)[VEC + 2]) {
    if (!vec4) {
#pragma unroll
        for (int j = 0; j < VEC + 2; ++j)
            v[j] = (s + j >= 0 && s + j < total) ? __ldg(x + s + j) : 0.0f;
        return;
    }
    const int off = (int)(s & 3);  // two's complement: s - off is a multiple of 4 for s < 0 too
    const long long a = s - off;
    constexpr int LOADS = (VEC + 2 + 3 + 3) / 4;  // the most 16-byte loads a span can need
    float q[4 * LOADS];
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
        const long long at = a + 4 * j;
        if (4 * j >= off + VEC + 2) {  // past the span (uniform): not loaded
            q[4 * j] = q[4 * j + 1] = q[4 * j + 2] = q[4 * j + 3] = 0.0f;
        } else if (at >= 0 && at + 4 <= total) {
            const float4 t = __ldg(reinterpret_cast<const float4*>(x + at));
            q[4 * j] = t.x;
            q[4 * j + 1] = t.y;
            q[4 * j + 2] = t.z;
            q[4 * j + 3] = t.w;
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                q[4 * j + e] = (at + e >= 0 && at + e < total) ? __ldg(x + at + e) : 0.0f;
        }
    }
    // off is uniform over the launch: one of four copies, each with constant indices.
    switch (off) {
        case 0:
#pragma unroll
            for (int j = 0; j < VEC + 2; ++j) v[j] = q[j];
            break;
        case 1:
#pragma unroll
            for (int j = 0; j < VEC + 2; ++j) v[j] = q[j + 1];
            break;
        case 2:
#pragma unroll
            for (int j = 0; j < VEC + 2; ++j) v[j] = q[j + 2];
            break;
        default:
#pragma unroll
            for (int j = 0; j < VEC + 2; ++j) v[j] = q[j + 3];
            break;
    }
}

// Assumptions at the signature (the host's support predicate and launch refuse the rest):
// - FP32; 3x3, stride 1, padding 1, dilation 1, no bias; depthwise with channel multiplier 1:
//   groups == C_in == C_out.
// - x: N x C x H x W, y: N x C x H x W, both contiguous NCHW; w: C x 3 x 3. Any float pointer:
//   16-byte loads and stores only where both tensors are 16-byte aligned (checked here,
//   uniformly for the launch); VEC is a multiple of 4, so every run starts on a 16-byte boundary.
// - N * C < 2**31 planes and H * W < 2**31 (a plane's index and a position in it are 32-bit);
//   flat offsets are 64-bit. Any grid: threads stride over the runs.
template <int VEC, bool FLIP>
__device__ __forceinline__ void k13_depthwise_flat(const float* __restrict__ x,
                                                   const float* __restrict__ wt,
                                                   float* __restrict__ y, int N, int C_in,
                                                   int C_out, int H, int W, int groups) {
    static_assert(VEC % 4 == 0, "runs of whole 16-byte vectors");
    if (C_in != groups || C_out != groups) return;  // the host refuses these first
    const long long plane_floats = (long long)H * W;
    const long long total = (long long)N * C_in * plane_floats;
    const long long runs = (total + VEC - 1) / VEC;
    const bool vec4 =
        ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
    for (long long run = blockIdx.x * (long long)blockDim.x + threadIdx.x; run < runs;
         run += (long long)gridDim.x * blockDim.x) {
        const long long f0 = run * VEC;
        // Each output's plane, row and column: the first's by division, the others stepped.
        int plane[VEC], row[VEC], col[VEC];
        {
            int p = (int)(f0 / plane_floats);
            const int in_plane = (int)(f0 - (long long)p * plane_floats);
            int h = in_plane / W, w = in_plane - (in_plane / W) * W;
#pragma unroll
            for (int o = 0; o < VEC; ++o) {
                plane[o] = p;
                row[o] = h;
                col[o] = w;
                if (++w == W) {
                    w = 0;
                    if (++h == H) {
                        h = 0;
                        ++p;
                    }
                }
            }
        }
        float k[9];
        const float* taps = wt + (long long)(plane[0] % C_in) * 9;
#pragma unroll
        for (int t = 0; t < 9; ++t) k[t] = __ldg(taps + (FLIP ? 8 - t : t));

        float acc[VEC];
#pragma unroll
        for (int o = 0; o < VEC; ++o) acc[o] = 0.0f;
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
            float v[VEC + 2];  // v[o + kw] is output o's input at column col[o] + kw - 1
            k13_load_span<VEC>(x, f0 + (long long)(kh - 1) * W - 1, total, vec4, v);
#pragma unroll
            for (int o = 0; o < VEC; ++o) {
                const int hh = row[o] + kh - 1;
                if (hh < 0 || hh >= H) continue;  // zero padding above and below
#pragma unroll
                for (int kw = 0; kw < 3; ++kw) {
                    const int ww = col[o] + kw - 1;
                    const int t = kh * 3 + kw;
                    // an output of the next plane (a run crossing a plane's end) reads its taps
                    const float tap = plane[o] == plane[0]
                                          ? k[t]
                                          : __ldg(wt + (long long)(plane[o] % C_in) * 9 +
                                                  (FLIP ? 8 - t : t));
                    if (ww >= 0 && ww < W) acc[o] = fmaf(v[o + kw], tap, acc[o]);
                }
            }
        }
        if (vec4 && f0 + VEC <= total) {
#pragma unroll
            for (int o = 0; o < VEC; o += 4)
                *reinterpret_cast<float4*>(y + f0 + o) =
                    make_float4(acc[o], acc[o + 1], acc[o + 2], acc[o + 3]);
        } else {
#pragma unroll
            for (int o = 0; o < VEC; ++o)
                if (f0 + o < total) y[f0 + o] = acc[o];
        }
    }
}

// Two entries per outputs-per-thread of the table (K13_VECS): the convolution and, after it, the
// same turned 180 degrees (_flip); each allows up to 256 threads per block.
#define K13_KERNEL(NAME, VEC, FLIP)                                                            \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                     \
        const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,       \
        int N, int C_in, int C_out, int H, int W, int groups) {                                 \
        k13_depthwise_flat<VEC, FLIP>(x, wt, y, N, C_in, C_out, H, W, groups);                  \
    }
#define K13_ENTRY(VEC)                                                                         \
    K13_KERNEL(k13_depthwise_flat_nchw_v##VEC, VEC, false)                                     \
    K13_KERNEL(k13_depthwise_flat_nchw_v##VEC##_flip, VEC, true)
K13_VECS(K13_ENTRY)
