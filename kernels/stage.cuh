// Staging a run of x in shared memory with asynchronous copies, shared by k6 and k7. A run of
// whole rows is one contiguous range of x; it is written to shared memory at the position within
// a 16-byte line that it has in x (its 16-byte phase), so the range's middle goes in 16-byte
// copies aligned on both sides whatever W is, and only its unaligned head and tail go 4 bytes at
// a time.
#pragma once
#include <cuda_pipeline.h>
#include <stdint.h>

// How a run of n floats is copied: floats 0 .. head-1 (up to x's first 16-byte boundary in the
// run; head <= 3) 4 bytes at a time, then `vectors` 16-byte copies, then floats tail_from .. n-1
// (fewer than 4) 4 bytes at a time.
struct StageSplit {
    int head;
    int vectors;
    int tail_from;
};

// `first`: the run's first float counted from any 16-byte boundary of x (only its low two bits
// matter; & 3 of a negative value is still mod 4). Int or 64-bit, the arithmetic stays in that
// type until the head is known.
template <typename Index>
__device__ __forceinline__ StageSplit stage_split(Index first, int n) {
    StageSplit s;
    s.head = min((int)((4 - (first & 3)) & 3), n);
    s.vectors = (n - s.head) >> 2;
    s.tail_from = s.head + 4 * s.vectors;
    return s;
}

// The end of a stage: this thread's copies are committed and waited for, then the barrier makes
// every thread's copies visible to the whole block.
__device__ __forceinline__ void stage_complete() {
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
}
