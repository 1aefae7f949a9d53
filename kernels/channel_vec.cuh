// ChannelVec<VEC>: VEC adjacent channels of one channels_last (NHWC) pixel, or their taps, as one
// 16-, 8- or 4-byte access and a lane-by-lane FMA: the unit the NHWC depthwise kernels (k8, k10)
// load, multiply and store. `load` reads global memory through the read-only cache, `shared`
// reads shared memory; VEC = 4 and 2 need addresses aligned to 16 and 8 bytes.
#pragma once

template <int VEC>
struct ChannelVec;

template <>
struct ChannelVec<4> {
    float4 v;
    __device__ __forceinline__ static ChannelVec zero() {
        return {make_float4(0.f, 0.f, 0.f, 0.f)};
    }
    __device__ __forceinline__ static ChannelVec load(const float* p) {
        return {__ldg(reinterpret_cast<const float4*>(p))};
    }
    __device__ __forceinline__ static ChannelVec shared(const float* p) {
        return {*reinterpret_cast<const float4*>(p)};
    }
    __device__ __forceinline__ void store(float* p) const { *reinterpret_cast<float4*>(p) = v; }
    // this += a * b, lane by lane
    __device__ __forceinline__ void fma(const ChannelVec& a, const ChannelVec& b) {
        v.x = fmaf(a.v.x, b.v.x, v.x);
        v.y = fmaf(a.v.y, b.v.y, v.y);
        v.z = fmaf(a.v.z, b.v.z, v.z);
        v.w = fmaf(a.v.w, b.v.w, v.w);
    }
};

template <>
struct ChannelVec<2> {
    float2 v;
    __device__ __forceinline__ static ChannelVec zero() { return {make_float2(0.f, 0.f)}; }
    __device__ __forceinline__ static ChannelVec load(const float* p) {
        return {__ldg(reinterpret_cast<const float2*>(p))};
    }
    __device__ __forceinline__ static ChannelVec shared(const float* p) {
        return {*reinterpret_cast<const float2*>(p)};
    }
    __device__ __forceinline__ void store(float* p) const { *reinterpret_cast<float2*>(p) = v; }
    __device__ __forceinline__ void fma(const ChannelVec& a, const ChannelVec& b) {
        v.x = fmaf(a.v.x, b.v.x, v.x);
        v.y = fmaf(a.v.y, b.v.y, v.y);
    }
};

template <>
struct ChannelVec<1> {
    float v;
    __device__ __forceinline__ static ChannelVec zero() { return {0.f}; }
    __device__ __forceinline__ static ChannelVec load(const float* p) { return {__ldg(p)}; }
    __device__ __forceinline__ static ChannelVec shared(const float* p) { return {*p}; }
    __device__ __forceinline__ void store(float* p) const { *p = v; }
    __device__ __forceinline__ void fma(const ChannelVec& a, const ChannelVec& b) {
        v = fmaf(a.v, b.v, v);
    }
};
