// k4 register tile (kernels/register_tile.cuh) with 16-byte or scalar accesses, its tile chosen by
// a rule of thumb (groupconv.nchw_tile_kernels.k4_tile). One entry per row of the
// registry's tile table K4_TILES (nchw_tile_kernels.K4_TABLE, in the rule's order of preference),
// which the generated header holds.
#include "register_tile.cuh"
#include "k4_register_tile_table.cuh"

// Assumptions: those of register_tile (FP32 contiguous NCHW; 3x3, stride 1, padding 1, dilation 1;
// COB divides C_out/groups).
#define K4_ENTRY(ROWS, COB, MIN_BLOCKS)                                                        \
    extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS)                              \
        k4_register_tile_r##ROWS##_c##COB(const float* __restrict__ x,                         \
                                          const float* __restrict__ wt, float* __restrict__ y, \
                                          int N, int C_in, int C_out, int H, int W,            \
                                          int groups) {                                        \
        register_tile<ROWS, COB, false>(x, wt, y, N, C_in, C_out, H, W, groups);               \
    }
K4_TILES(K4_ENTRY)
