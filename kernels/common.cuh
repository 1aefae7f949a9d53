// Shared index helpers for the atlas kernels. Layout everywhere: FP32, contiguous NCHW input
// x[N][C_in][H][W], weights w[C_out][C_in/groups][3][3], output y[N][C_out][H_out][W_out]
// (k8 and k9: the same tensors channels_last, NHWC).
#pragma once

// Offset of element (n, c, h, w) in a contiguous NCHW tensor with C channels and an H x W map.
__device__ __forceinline__ long long nchw_offset(int n, int c, int h, int w, int C, int H, int W) {
    return (((long long)n * C + c) * H + h) * (long long)W + w;
}

// A linear work index (a thread's element, a block's tile) split into its coordinates, the first
// varying fastest: index = ((outer * n2 + c2) * n1 + c1) * n0 + c0 with c0 < n0, c1 < n1,
// c2 < n2. The divisions are 64-bit, so grids and grid-stride loops may enumerate 2**31 items or
// more; each coordinate is below an int count, so fits int. Each call names the coordinates in
// that order, fastest first, so a kernel's work order reads at its call.
__device__ __forceinline__ void split_index(long long index, int n0, int n1, int n2, int& c0,
                                            int& c1, int& c2, int& outer) {
    c0 = (int)(index % n0);
    long long rest = index / n0;
    c1 = (int)(rest % n1);
    rest /= n1;
    c2 = (int)(rest % n2);
    outer = (int)(rest / n2);
}

// The stores of a ROWS x COLS tile of output pixels whose first is (h0, w0) in an H x W map of a
// channels_last (NHWC) image: pixel (r, c) is at y_n + (h0 + r) * row + (w0 + c) * C (row: floats
// between vertically adjacent pixels; C: between horizontally adjacent ones), and
// store(r, c, address) writes it. Pixels past the map's bottom or right edge are not stored.
template <int ROWS, int COLS, typename Store>
__device__ __forceinline__ void store_nhwc_tile(float* y_n, long long row, int C, int h0, int w0,
                                                int H, int W, Store store) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        if (h0 + r >= H) break;
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
            if (w0 + c >= W) break;
            store(r, c, y_n + (long long)(h0 + r) * row + (long long)(w0 + c) * C);
        }
    }
}
