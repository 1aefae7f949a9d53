// The fused epilogue of a convolution kernel: y = act(conv + bias[c]), applied in registers
// before the kernel's one store, where a library convolution has to write its output and let a
// second kernel read it back for the bias (a BatchNorm folded into the weight) and the
// activation. In the networks the atlas's shapes come from, every grouped and depthwise 3x3
// convolution is followed by BatchNorm and one of these activations; for a depthwise layer that
// second pass moves as many bytes as the convolution itself.
//
// The activation is a compile-time type (one entry per activation, `<entry>_ep_<name>`, as
// groupconv/epilogues.py names them), so no entry branches on it per element. `NoEpilogue` is the
// plain convolution: `if constexpr` on its `fused` leaves the plain entries' machine code as it
// was before epilogues. Each formula is PyTorch's own in FP32 (its CUDA kernels for ReLU6,
// SiLU = x / (1 + exp(-x)), Hardswish = x * min(max(x + 3, 0), 6) / 6), but Hardswish multiplies
// by 1/6 where PyTorch divides by 6: the IEEE division's instruction sequence per element made the
// fused entries up to 2.8 times the plain entry's time on maps that stay in L2, and the product
// differs from the quotient by at most two roundings, inside the bound's own roundings for it.
#pragma once

#include "channel_vec.cuh"

struct NoEpilogue {
    static constexpr bool fused = false;
    __device__ __forceinline__ static float apply(float v) { return v; }
};
struct EpilogueIdentity {
    static constexpr bool fused = true;
    __device__ __forceinline__ static float apply(float v) { return v; }
};
struct EpilogueRelu {
    static constexpr bool fused = true;
    __device__ __forceinline__ static float apply(float v) { return fmaxf(v, 0.0f); }
};
struct EpilogueRelu6 {
    static constexpr bool fused = true;
    __device__ __forceinline__ static float apply(float v) { return fminf(fmaxf(v, 0.0f), 6.0f); }
};
struct EpilogueSilu {
    static constexpr bool fused = true;
    __device__ __forceinline__ static float apply(float v) { return v / (1.0f + expf(-v)); }
};
struct EpilogueHardswish {
    static constexpr bool fused = true;
    __device__ __forceinline__ static float apply(float v) {
        return v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
    }
};

// EPILOGUE_ACTIVATIONS(F, ...): F(..., name, type) once per activation, in the order
// groupconv/epilogues.ACTIVATIONS lists them (a CPU test compares the two).
#define EPILOGUE_ACTIVATIONS(F, A, B, C)   \
    F(A, B, C, identity, EpilogueIdentity) \
    F(A, B, C, relu, EpilogueRelu)         \
    F(A, B, C, relu6, EpilogueRelu6)       \
    F(A, B, C, silu, EpilogueSilu)         \
    F(A, B, C, hardswish, EpilogueHardswish)

// The bias of channel c, zero where the call passes none (a null pointer: the activation alone).
__device__ __forceinline__ float epilogue_bias(const float* __restrict__ bias, int c) {
    return bias != nullptr ? __ldg(bias + c) : 0.0f;
}

// A channel vector's epilogue: lane j gets bias b[j], then the activation.
template <class EPI>
__device__ __forceinline__ void apply_epilogue(ChannelVec<4>& acc, const float (&b)[4]) {
    acc.v.x = EPI::apply(acc.v.x + b[0]);
    acc.v.y = EPI::apply(acc.v.y + b[1]);
    acc.v.z = EPI::apply(acc.v.z + b[2]);
    acc.v.w = EPI::apply(acc.v.w + b[3]);
}
template <class EPI>
__device__ __forceinline__ void apply_epilogue(ChannelVec<2>& acc, const float (&b)[2]) {
    acc.v.x = EPI::apply(acc.v.x + b[0]);
    acc.v.y = EPI::apply(acc.v.y + b[1]);
}
template <class EPI>
__device__ __forceinline__ void apply_epilogue(ChannelVec<1>& acc, const float (&b)[1]) {
    acc.v = EPI::apply(acc.v + b[0]);
}
