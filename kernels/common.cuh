// Shared index helpers for the atlas kernels. Layout everywhere: FP32, contiguous NCHW input
// x[N][C_in][H][W], weights w[C_out][C_in/groups][3][3], output y[N][C_out][H_out][W_out].
#pragma once

// Offset of element (n, c, h, w) in a contiguous NCHW tensor with C channels and an H x W map.
__device__ __forceinline__ long long nchw_offset(int n, int c, int h, int w, int C, int H, int W) {
    return (((long long)n * C + c) * H + h) * (long long)W + w;
}
