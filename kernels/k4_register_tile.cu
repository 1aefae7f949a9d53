// k4 register tile (kernels/register_tile.cuh) with 16-byte or scalar accesses, its tile chosen by
// a rule of thumb (groupconv_atlas.kernels.k4_tile). This list is the one tile table of k4: the
// Python registry reads it from here, in this order, which is the rule's preference (most outputs
// per thread first).
#include "register_tile.cuh"

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
K4_ENTRY(2, 8, 0)
K4_ENTRY(2, 4, 0)
K4_ENTRY(4, 2, 0)
K4_ENTRY(1, 8, 0)
K4_ENTRY(4, 1, 0)
K4_ENTRY(2, 2, 0)
K4_ENTRY(1, 4, 0)
K4_ENTRY(2, 1, 0)
K4_ENTRY(1, 2, 0)
K4_ENTRY(1, 1, 0)
