// k5 tuned register tile (kernels/register_tile.cuh) with 16-, 8-byte or scalar accesses, over a
// wider family of tiles than k4, the tile and block size of every shape chosen by the tuning stage
// (groupconv.tuning). One entry per row of the registry's tile table K5_TILES
// (groupconv.nchw_tile_kernels.K5_TABLE), which the generated header holds.
#include "register_tile.cuh"
#include "k5_tuned_tile_table.cuh"

// Assumptions: those of register_tile (FP32 contiguous NCHW; 3x3, stride 1, padding 1, dilation 1;
// COB divides C_out/groups).
// Six entries per tile: the convolution, and the convolution with each fused epilogue
// (_ep_<activation>, a fourth pointer: the bias, C_out floats or null). Launch bounds of 256
// threads let the tuner launch 128 or 256 per block. MIN_BLOCKS 0 leaves ptxas its register
// heuristic; 1 lets a tile that would spill under that heuristic (rows 8 x 1 channel, rows 1 x 4
// channels) take up to 255 registers instead.
#define K5_FUSED(ROWS, COB, MIN_BLOCKS, ACT, EPI)                                              \
    extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS)                             \
        k5_tuned_tile_r##ROWS##_c##COB##_ep_##ACT(                                            \
            const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y, \
            const float* __restrict__ bias, int N, int C_in, int C_out, int H, int W,         \
            int groups) {                                                                     \
        register_tile<ROWS, COB, true, EPI>(x, wt, y, N, C_in, C_out, H, W, groups, bias);   \
    }
#define K5_ENTRY(ROWS, COB, MIN_BLOCKS)                                                       \
    extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS)                             \
        k5_tuned_tile_r##ROWS##_c##COB(const float* __restrict__ x,                           \
                                       const float* __restrict__ wt, float* __restrict__ y,   \
                                       int N, int C_in, int C_out, int H, int W, int groups) { \
        register_tile<ROWS, COB, true>(x, wt, y, N, C_in, C_out, H, W, groups);              \
    }                                                                                         \
    EPILOGUE_ACTIVATIONS(K5_FUSED, ROWS, COB, MIN_BLOCKS)
K5_TILES(K5_ENTRY)
