// Device helpers shared by the kernel families: launch checks, packed block math, and the
// resolution of device-side group offsets (grouped / MoE mode) that every grouped kernel performs
// the same way.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../host/check.h"
#include "mxq/layout.h"
#include "mxq/numerics.h"
#include "ptx.cuh"

namespace mxq::kernels {

// Every quantize / swizzle / dequantize CTA owns a 128x128 element tile: one 128x4 scale atom per
// axis (layout.h ties kAtomRows and kAtomCols * kBlock to 128).
constexpr int kTile = kAtomRows;
static_assert(kTile == kAtomCols * kBlock, "a tile's 128 columns are one atom's 4 scale columns");
constexpr uint32_t kAbsMask2 = 0x7FFF7FFFu;
constexpr uint32_t kNanWord = 0x7F7F7F7Fu;  // four e4m3 NaN bytes

// ---- packed block math ----

// Scale byte, multiplier and NaN mask of one block from its amax (bf16 bits). NOTES: a NaN/Inf
// block (s = 255) is written as 0x7F bytes through `nan` (all ones) with plain bit operations:
// a conditional here becomes a branch around the conversion, and the compiler then recomputes r
// inside every branch (measured: +160 instructions per thread in the colwise pass).
struct BlockScale {
  uint8_t s;
  float r;
  uint32_t nan;
  __device__ __forceinline__ uint32_t select(uint32_t q) const {
    return (q & ~nan) | (kNanWord & nan);
  }
};
template <ScaleRounding kRule>
__device__ __forceinline__ BlockScale block_scale(uint32_t amax_bits) {
  const uint8_t s = e8m0_from_amax_bf16(static_cast<uint16_t>(amax_bits), kRule);
  return {s, e8m0_reciprocal(s), s == kE8m0Nan ? 0xFFFFFFFFu : 0u};
}

// Four e4m3 bytes from two words of two bf16 each (element order kept: w0.lo, w0.hi, w1.lo, w1.hi).
__device__ __forceinline__ uint32_t quantize_words(uint32_t w0, uint32_t w1, float r) {
  const uint32_t lo = ptx::cvt_e4m3x2(mul_rn(__uint_as_float(w0 & 0xFFFF0000u), r),
                                      mul_rn(__uint_as_float(w0 << 16), r));
  const uint32_t hi = ptx::cvt_e4m3x2(mul_rn(__uint_as_float(w1 & 0xFFFF0000u), r),
                                      mul_rn(__uint_as_float(w1 << 16), r));
  return lo | (hi << 16);
}

// ---- grouped mode: device offsets ----
//
// NOTES: offs lives on the device, so it is checked there. Every kernel reads it through
// sanitized_offset(): clamped to [0, M] and rounded down to a multiple of kGroupAlign, and groups
// are taken as the running maximum of those ends. A malformed offs therefore still describes in-bounds, 128-aligned,
// ordered groups — nothing can be written outside the outputs — and the status word reports what
// was wrong.

__device__ __forceinline__ int64_t sanitized_offset(int32_t v, int64_t M) {
  const int64_t clamped = v < 0 ? 0 : (v > M ? M : v);
  return clamped - clamped % kGroupAlign;
}

// The token range [begin, end) of the group holding rows [m0, m0 + kGroupAlign), found by one warp
// (all lanes get the answer). end <= begin means the rows are the uncovered tail.
struct GroupSpan {
  int64_t begin;
  int64_t end;
};
__device__ __forceinline__ GroupSpan find_group_warp(const int32_t* offs, int num_groups, int64_t M,
                                                     int64_t m0) {
  const int lane = threadIdx.x & 31;
  // Group index: the first g whose end lies past m0. Its begin: the largest end before it.
  int first = num_groups;
  for (int g = lane; g < num_groups; g += 32) {
    if (sanitized_offset(offs[g], M) > m0) {
      first = g;
      break;
    }
  }
  for (int d = 16; d > 0; d >>= 1) first = min(first, __shfl_xor_sync(0xFFFFFFFFu, first, d));
  int64_t begin = 0;
  for (int g = lane; g < first; g += 32) begin = max(begin, sanitized_offset(offs[g], M));
  for (int d = 16; d > 0; d >>= 1) begin = max(begin, __shfl_xor_sync(0xFFFFFFFFu, begin, d));
  const int64_t end = first < num_groups ? sanitized_offset(offs[first], M) : begin;
  return {begin, end};
}

// The end of the last group (tokens covered by some group), by one warp.
__device__ __forceinline__ int64_t covered_end_warp(const int32_t* offs, int num_groups,
                                                    int64_t M) {
  int64_t end = 0;
  for (int g = threadIdx.x & 31; g < num_groups; g += 32)
    end = max(end, sanitized_offset(offs[g], M));
  for (int d = 16; d > 0; d >>= 1) end = max(end, __shfl_xor_sync(0xFFFFFFFFu, end, d));
  return end;
}

// StatusBits describing offs, by one warp.
__device__ __forceinline__ int32_t offs_status_warp(const int32_t* offs, int num_groups,
                                                    int64_t M) {
  int32_t status = 0;
  for (int g = threadIdx.x & 31; g < num_groups; g += 32) {
    const int32_t v = offs[g];
    const int32_t prev = g > 0 ? offs[g - 1] : 0;
    if (v < prev) status |= kOffsDecreasing;
    if (v > M) status |= kOffsBeyondM;
    if (v % kGroupAlign != 0) status |= kOffsMisaligned;
  }
  return __reduce_or_sync(0xFFFFFFFFu, status);
}

// The K-groups placement of the 128x4 scale atom for scale rows [k0, k0+128) and tokens [m0,
// m0+128) of the group `span`: the byte offset of that atom in s_col.
__device__ __forceinline__ int64_t kgroups_atom_offset(GroupSpan span, int64_t K, int64_t k0,
                                                       int64_t m0) {
  const KGroup group{span.begin / kBlock, (span.end - span.begin) / kBlock,
                     span.begin / kBlock * round_up(K, kAtomRows)};
  return group.offset(k0, m0 / kBlock);
}

// Grouped kernels append zero-fill CTAs after their tile CTAs: CTA z of them zeroes the part of
// [covered_end/32 * roundup(K,128), s_col bytes) inside its chunk, and zero-fill CTA 0 writes the
// status word.
constexpr int64_t kZeroChunk = 64 * 1024;
__host__ __device__ constexpr int64_t zero_fill_ctas(int64_t M, int64_t K, int64_t num_groups) {
  return ceil_div(s_col_shape(M, K, num_groups).bytes(), kZeroChunk);
}

__device__ __forceinline__ void zero_fill_slack(uint8_t* s_col, const int32_t* offs, int num_groups,
                                                int64_t M, int64_t K, int64_t z, int32_t* status) {
  __shared__ int64_t slack_begin;
  if (threadIdx.x < 32) {
    const int64_t covered = covered_end_warp(offs, num_groups, M);
    const int32_t bits = offs_status_warp(offs, num_groups, M);
    if (threadIdx.x == 0) {
      slack_begin = covered / kBlock * round_up(K, kAtomRows);
      if (z == 0 && status != nullptr) *status = bits;
    }
  }
  __syncthreads();
  const int64_t total = s_col_shape(M, K, num_groups).bytes();
  const int64_t begin = max(slack_begin, z * kZeroChunk);
  const int64_t end = min(total, (z + 1) * kZeroChunk);
  // begin and end are multiples of 512 (atoms) or of the chunk, so 16-byte stores tile the range.
  for (int64_t i = begin + threadIdx.x * 16; i < end; i += blockDim.x * 16) {
    ptx::st_global_v4(s_col + i, make_uint4(0, 0, 0, 0));
  }
}

}  // namespace mxq::kernels
