// Experiment: a depthwise 3x3 NHWC kernel for small maps: one thread per (pixel, channel
// vector), taps read straight through the read-only cache, no shared memory, no barrier.
// griddepcontrol: a no-op unless launched with programmatic stream serialization (PDL).
#include "channel_vec.cuh"

template <int VEC>
__device__ __forceinline__ ChannelVec<VEC> taps_of(const float* __restrict__ w, int c, int t);
template <>
__device__ __forceinline__ ChannelVec<4> taps_of<4>(const float* __restrict__ w, int c, int t) {
    return {make_float4(__ldg(w + c * 9 + t), __ldg(w + c * 9 + 9 + t), __ldg(w + c * 9 + 18 + t),
                        __ldg(w + c * 9 + 27 + t))};
}
template <>
__device__ __forceinline__ ChannelVec<2> taps_of<2>(const float* __restrict__ w, int c, int t) {
    return {make_float2(__ldg(w + c * 9 + t), __ldg(w + c * 9 + 9 + t))};
}
template <>
__device__ __forceinline__ ChannelVec<1> taps_of<1>(const float* __restrict__ w, int c, int t) {
    return {__ldg(w + c * 9 + t)};
}

template <int VEC>
__device__ __forceinline__ void dw_direct(const float* __restrict__ x, const float* __restrict__ w,
                                          float* __restrict__ y, int N, int C, int H, int W) {
    asm volatile("griddepcontrol.launch_dependents;");
    const int vectors = C / VEC;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long total = (long long)N * H * W * vectors;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (i >= total) return;
    const int v = (int)(i % vectors);
    const long long p = i / vectors;
    const int wq = (int)(p % W);
    const long long t = p / W;
    const int h = (int)(t % H);
    const int n = (int)(t / H);
    const int c = v * VEC;
    ChannelVec<VEC> in[9], k[9];
#pragma unroll
    for (int dh = 0; dh < 3; ++dh) {
#pragma unroll
        for (int dw = 0; dw < 3; ++dw) {
            const int hh = h + dh - 1, ww = wq + dw - 1;
            in[dh * 3 + dw] = (hh >= 0 && hh < H && ww >= 0 && ww < W)
                ? ChannelVec<VEC>::load(x + (((long long)n * H + hh) * W + ww) * C + c)
                : ChannelVec<VEC>::zero();
        }
    }
#pragma unroll
    for (int tp = 0; tp < 9; ++tp) k[tp] = taps_of<VEC>(w, c, tp);
    ChannelVec<VEC> acc = ChannelVec<VEC>::zero();
#pragma unroll
    for (int tp = 0; tp < 9; ++tp) acc.fma(in[tp], k[tp]);
    acc.store(y + p * C + c);
}

#define ENTRY(VEC)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) dw_direct_v##VEC(                     \
        const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,   \
        int N, int C, int H, int W) {                                                       \
        dw_direct<VEC>(x, w, y, N, C, H, W);                                               \
    }
ENTRY(4)
ENTRY(2)
ENTRY(1)
