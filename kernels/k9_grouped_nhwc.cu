// k9: grouped 3x3 convolution on channels_last (NHWC) tensors, for groups of 2 to 32 input
// channels and for depth multipliers (one input channel, several outputs per group): the grouped
// counterpart of k8. In NHWC a pixel's channels are contiguous, so a work
// item is one strip of ROWS x COLS output pixels and one vector of OVEC adjacent output channels
// inside one group, and neighbouring threads take neighbouring output-channel vectors of the same
// pixel strip: their stores are contiguous along C, and threads of one group read the same input
// vectors (the L1 broadcasts them), threads of neighbouring groups neighbouring ones.
//
// Per kernel row kh and per vector of IVEC input channels of the group, a thread loads the 3 x
// OVEC weight vectors of that row (OHWI: the IVEC input channels of one (co, kh, kw) are
// contiguous) once, then for each of its ROWS output rows the COLS + 2 input pixel vectors of
// input row h + kh - 1 (zero outside the map), and accumulates ROWS x COLS x OVEC outputs in
// registers. Each weight vector serves ROWS x COLS pixels, each input vector 3 x OVEC products
// per lane; all register arrays are indexed by compile-time constants (fully unrolled loops), so
// nothing goes to local memory.
//
// Why weights are loaded per kernel row and not held for all 9 taps: 9 x OVEC x IVEC floats (144
// at OVEC = IVEC = 4) beside the accumulators would cost the occupancy the L1 needs to hide its
// latency; with one kernel row's 3 x OVEC vectors (48 floats) the 4 x 4 entries take 80 to 176
// registers, without spills.
//
// Where the cost is: a warp's weight loads are not coalesced (its threads read different output
// channels, at least 9 x C_in/groups floats apart), so the tiles that give each weight vector
// more pixels (COLS = 8, ROWS = 2) are in the table for the tuning stage to weigh against
// parallelism.
#include "common.cuh"
#include "epilogue.cuh"

// The groups the kernel takes (the host's support predicate uses them too): input channels per
// group from 2 (depthwise, 1, is k8's) to K9_MAX_CPG, output channels per group up to
// K9_MAX_COUT_PG; and the tile table K9_TILES: the registry's table
// (groupconv.nhwc_strip_kernels.K9_TABLE).
#include "k9_grouped_nhwc_table.cuh"

// IVEC (or OVEC) consecutive floats: one 16-, 8- or 4-byte access.
template <int V>
__device__ __forceinline__ void k9_load(const float* __restrict__ p, float (&v)[V]) {
    if constexpr (V == 4) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(p));
        v[0] = t.x;
        v[1] = t.y;
        v[2] = t.z;
        v[3] = t.w;
    } else if constexpr (V == 2) {
        const float2 t = __ldg(reinterpret_cast<const float2*>(p));
        v[0] = t.x;
        v[1] = t.y;
    } else {
        static_assert(V == 1, "vectors of 1, 2 or 4 floats");
        v[0] = __ldg(p);
    }
}

template <int V>
__device__ __forceinline__ void k9_store(float* __restrict__ p, const float (&v)[V]) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (V == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        static_assert(V == 1, "vectors of 1, 2 or 4 floats");
        *p = v[0];
    }
}

// Assumptions at the signature (the host's support predicate and conv2d's plan refuse the rest):
// - FP32; 3x3, stride 1, padding 1, dilation 1; a bias only in the fused entries; grouped with 2 <= C_in/groups <=
//   K9_MAX_CPG and 1 <= C_out/groups <= K9_MAX_COUT_PG, or a depth multiplier (C_in/groups = 1,
//   C_out/groups a multiple of OVEC > 1) in the IVEC = 1 entries.
// - x: N x H x W x C_in, y: N x H x W x C_out, both contiguous channels_last (the channel stride
//   is 1); wt: C_out x 3 x 3 x C_in/groups, the memory of a channels_last (C_out, C_in/groups,
//   3, 3) weight (OHWI): wt[co][kh][kw][ci] is input channel g * C_in/groups + ci of output
//   channel co's group g = co / (C_out/groups).
// - OVEC divides C_out/groups, IVEC divides C_in/groups (the entry the host picks; the kernel
//   returns without writing otherwise). Vector accesses: x and wt are read IVEC floats at a
//   time, y written OVEC floats at a time, so x and wt must be 4 * IVEC-byte aligned and y
//   4 * OVEC-byte aligned (the host checks x's and the weight's pointers; y is its own fresh
//   allocation). Every vector's element offset is then a multiple of its width: offsets are
//   pixel * C + (a multiple of the group size) + (a multiple of the vector).
// - Index types: element offsets are 64-bit; N * H * W * C may exceed 2**31. The work item is
//   64-bit and any grid size is correct (threads stride over the items).
template <int OVEC, int IVEC, int ROWS, int COLS, class EPI>
__device__ __forceinline__ void k9_grouped_nhwc(const float* __restrict__ x,
                                                const float* __restrict__ wt,
                                                float* __restrict__ y,
                                                const float* __restrict__ bias, int N, int C_in,
                                                int C_out, int H, int W, int groups) {
    // the host refuses these first
    if (groups < 1 || C_in % groups || C_out % groups) return;
    const int cin_pg = C_in / groups, cout_pg = C_out / groups;
    // One input channel per group: a depth multiplier runs the entries whose thread reads that
    // channel once for OVEC > 1 outputs (IVEC = 1); depthwise (one output per group too) is the
    // depthwise kernels'. The bound is a constant of the entry, so the other entries' code is
    // as it was.
    constexpr int min_cin_pg = (IVEC == 1 && OVEC > 1) ? 1 : 2;
    if (cin_pg < min_cin_pg || cin_pg > K9_MAX_CPG || cout_pg > K9_MAX_COUT_PG ||
        cin_pg % IVEC || cout_pg % OVEC)
        return;
    const int vectors = C_out / OVEC;         // output-channel vectors of a pixel
    const int group_vectors = cout_pg / OVEC;  // of them in one group
    const int strips_w = (W + COLS - 1) / COLS;
    const int strips_h = (H + ROWS - 1) / ROWS;
    const long long items = (long long)N * strips_h * strips_w * vectors;
    const long long x_row = (long long)W * C_in;   // floats between vertically adjacent pixels
    const long long y_row = (long long)W * C_out;
    const long long w_out = 9LL * cin_pg;          // floats between output channels of wt
    for (long long item = blockIdx.x * (long long)blockDim.x + threadIdx.x; item < items;
         item += (long long)gridDim.x * blockDim.x) {
        // Work item -> (output vector, column strip, row strip, image): output vectors vary
        // fastest (coalesced stores along C), then column strips, row strips and images.
        int vector, strip_w, strip_h, n;
        split_index(item, vectors, strips_w, strips_h, vector, strip_w, strip_h, n);
        const int g = vector / group_vectors;
        const int ci_base = g * cin_pg;   // the group's first input channel
        const int co0 = vector * OVEC;    // the vector's first output channel
        const int h0 = strip_h * ROWS, w0 = strip_w * COLS;

        float acc[ROWS][COLS][OVEC];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int c = 0; c < COLS; ++c)
#pragma unroll
                for (int o = 0; o < OVEC; ++o) acc[r][c][o] = 0.f;

        const float* x_n = x + (long long)n * H * x_row + ci_base;
        const float* w_co = wt + (long long)co0 * w_out;
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
            for (int ci = 0; ci < cin_pg; ci += IVEC) {
                // The 3 taps of kernel row kh for the vector's OVEC output channels.
                float k[OVEC][3][IVEC];
#pragma unroll
                for (int o = 0; o < OVEC; ++o)
#pragma unroll
                    for (int kw = 0; kw < 3; ++kw)
                        k9_load<IVEC>(w_co + o * w_out + (kh * 3 + kw) * cin_pg + ci, k[o][kw]);
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    const int h = h0 + r + kh - 1;  // input row of output row h0 + r
                    if (h < 0 || h >= H) continue;  // zero padding above and below
                    const float* x_h = x_n + (long long)h * x_row + ci;
                    float in[COLS + 2][IVEC];
#pragma unroll
                    for (int j = 0; j < COLS + 2; ++j) {
                        const int w = w0 - 1 + j;
                        if (w >= 0 && w < W) {
                            k9_load<IVEC>(x_h + (long long)w * C_in, in[j]);
                        } else {
#pragma unroll
                            for (int i = 0; i < IVEC; ++i) in[j][i] = 0.f;
                        }
                    }
#pragma unroll
                    for (int c = 0; c < COLS; ++c)
#pragma unroll
                        for (int kw = 0; kw < 3; ++kw)
#pragma unroll
                            for (int o = 0; o < OVEC; ++o)
#pragma unroll
                                for (int i = 0; i < IVEC; ++i)
                                    acc[r][c][o] = fmaf(in[c + kw][i], k[o][kw][i], acc[r][c][o]);
                }
            }
        }
        if constexpr (EPI::fused) {  // the vector's biases, then act(acc + bias) per output
            float b[OVEC];
#pragma unroll
            for (int o = 0; o < OVEC; ++o) b[o] = epilogue_bias(bias, co0 + o);
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int c = 0; c < COLS; ++c)
#pragma unroll
                    for (int o = 0; o < OVEC; ++o) acc[r][c][o] = EPI::apply(acc[r][c][o] + b[o]);
        }
        store_nhwc_tile<ROWS, COLS>(y + (long long)n * H * y_row + co0, y_row, C_out, h0, w0, H, W,
                                    [&](int r, int c, float* p) { k9_store<OVEC>(p, acc[r][c]); });
    }
}

// Six entries per (output vector, input vector, rows, columns), a row of the registry's tile
// table K9_TILES: the convolution, and the convolution with each fused epilogue
// (_ep_<activation>, a fourth pointer: the bias, C_out floats or null). A shape runs the entries
// of the widest (OVEC, IVEC) pair here that divides its (C_out/groups, C_in/groups): 4 x 4 for
// the atlas's groups of 4 to 32 channels, 2 x 2 for its groups of 2, 1 x 1 for a group with an
// odd number of input or output channels, 4 x 1 or 2 x 1 for a depth multiplier (its one input
// channel read once for 4 or 2 outputs). Each entry allows up to 256 threads per block.
#define K9_TEMPLATE_ARGS(OVEC, IVEC, ROWS, COLS) OVEC, IVEC, ROWS, COLS
#define K9_FUSED(NAME, TILE, UNUSED, ACT, EPI)                                                  \
    extern "C" __global__ void __launch_bounds__(256) NAME##_ep_##ACT(                          \
        const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,       \
        const float* __restrict__ bias, int N, int C_in, int C_out, int H, int W, int groups) { \
        k9_grouped_nhwc<K9_TEMPLATE_ARGS TILE, EPI>(x, wt, y, bias, N, C_in, C_out, H, W,      \
                                                    groups);                                    \
    }
#define K9_ENTRY(OVEC, IVEC, ROWS, COLS)                                                        \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        k9_grouped_nhwc_o##OVEC##_i##IVEC##_r##ROWS##_c##COLS(                                  \
            const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,   \
            int N, int C_in, int C_out, int H, int W, int groups) {                             \
        k9_grouped_nhwc<OVEC, IVEC, ROWS, COLS, NoEpilogue>(x, wt, y, nullptr, N, C_in, C_out, \
                                                            H, W, groups);                      \
    }                                                                                           \
    EPILOGUE_ACTIVATIONS(K9_FUSED, k9_grouped_nhwc_o##OVEC##_i##IVEC##_r##ROWS##_c##COLS,       \
                         (OVEC, IVEC, ROWS, COLS), 0)
K9_TILES(K9_ENTRY)
