// Experiment 3: one thread per (PIX adjacent pixels of a row, channel vector); the taps of the
// thread's VEC channels are VEC*9 contiguous floats (a (C, 1, 3, 3) weight), read as 9 vector
// loads; 32-bit indices (the host keeps N*H*W*C below 2**31).
#include "channel_vec.cuh"

template <int VEC>
__device__ __forceinline__ void load_taps(const float* __restrict__ w, int c, float (&tw)[9 * VEC]) {
    const float* base = w + c * 9;
#pragma unroll
    for (int i = 0; i < 9; ++i) {
        if (VEC == 4) {
            const float4 q = __ldg(reinterpret_cast<const float4*>(base) + i);
            tw[4 * i] = q.x; tw[4 * i + 1] = q.y; tw[4 * i + 2] = q.z; tw[4 * i + 3] = q.w;
        } else if (VEC == 2) {
            const float2 q = __ldg(reinterpret_cast<const float2*>(base) + i);
            tw[2 * i] = q.x; tw[2 * i + 1] = q.y;
        } else {
            tw[i] = __ldg(base + i);
        }
    }
}

template <int VEC>
__device__ __forceinline__ ChannelVec<VEC> tap(const float (&tw)[9 * VEC], int t);
template <>
__device__ __forceinline__ ChannelVec<4> tap<4>(const float (&tw)[36], int t) {
    return {make_float4(tw[t], tw[9 + t], tw[18 + t], tw[27 + t])};
}
template <>
__device__ __forceinline__ ChannelVec<2> tap<2>(const float (&tw)[18], int t) {
    return {make_float2(tw[t], tw[9 + t])};
}
template <>
__device__ __forceinline__ ChannelVec<1> tap<1>(const float (&tw)[9], int t) { return {tw[t]}; }

// 3-D grid: x over channel vectors (threadIdx.x fastest), y over pixel groups of a row
// (threadIdx.y), z over image rows (n * H + h): no division but one block-uniform modulo.
template <int VEC, int PIX>
__device__ __forceinline__ void dw_direct3(const float* __restrict__ x, const float* __restrict__ w,
                                           float* __restrict__ y, int N, int C, int H, int W) {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    const int w0 = (blockIdx.y * blockDim.y + threadIdx.y) * PIX;
    const int row = blockIdx.z;  // n * H + h
    const int h = row % H;
    if (v * VEC >= C || w0 >= W) return;
    const int c = v * VEC;
    ChannelVec<VEC> in[3][PIX + 2];
#pragma unroll
    for (int dh = 0; dh < 3; ++dh) {
        const int hh = h + dh - 1;
        const float* line = x + (long long)(row + dh - 1) * W * C + c;
#pragma unroll
        for (int j = 0; j < PIX + 2; ++j) {
            const int ww = w0 + j - 1;
            in[dh][j] = (hh >= 0 && hh < H && ww >= 0 && ww < W)
                ? ChannelVec<VEC>::load(line + ww * C) : ChannelVec<VEC>::zero();
        }
    }
    float tw[9 * VEC];
    load_taps<VEC>(w, c, tw);
    float* out = y + (long long)row * W * C + c;
#pragma unroll
    for (int q = 0; q < PIX; ++q) {
        ChannelVec<VEC> acc = ChannelVec<VEC>::zero();
#pragma unroll
        for (int dh = 0; dh < 3; ++dh) {
#pragma unroll
            for (int dw = 0; dw < 3; ++dw) acc.fma(in[dh][q + dw], tap<VEC>(tw, dh * 3 + dw));
        }
        if (w0 + q < W) acc.store(out + (w0 + q) * C);
    }
}

#define ENTRY(VEC, PIX)                                                                     \
    extern "C" __global__ void __launch_bounds__(256) dw_direct3_v##VEC##_p##PIX(          \
        const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,   \
        int N, int C, int H, int W) {                                                       \
        dw_direct3<VEC, PIX>(x, w, y, N, C, H, W);                                         \
    }
ENTRY(4, 1) ENTRY(4, 2) ENTRY(4, 4)
ENTRY(2, 1) ENTRY(2, 2) ENTRY(2, 4)
ENTRY(1, 1) ENTRY(1, 2)
