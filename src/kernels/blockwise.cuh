// The block math of FP8 blockwise (docs/numerics.md §13) in the tile kernels: a 128-element block
// is four 32-element pieces held by four lanes of one warp (lanes 4j..4j+3: a tile row's four
// pieces in the rowwise pass, a tile column's four 32-row bands in the colwise pass of a 128-row
// tile). Each lane takes its piece's amax as the MXFP8 block math does (the sign-masked bit
// patterns' unsigned max: NaN above Inf above every finite value), the four combine it by two
// shuffles, and every lane derives the same multiplier m and factor d (numerics.h
// blockwise_multiplier / blockwise_factor, the CPU reference's scalar rules) and converts its own
// piece with the MXFP8 conversion (common.cuh quantize_words, multiplier m in place of the E8M0
// reciprocal). A block holding NaN or Inf gets d = NaN and all bytes 0x7F, through the same mask as
// MXFP8's NaN blocks.
#pragma once

#include <cfloat>

#include "common.cuh"

namespace mxq::kernels {

// A block's scale from its amax bits (amax_fold's: 16-bit in the low half, or fp32): r is the
// multiplier m, nan the NaN/Inf mask (BlockScale::select), s unused; `d` receives the factor.
template <DType kIn, ScalingMode kMode>
__device__ __forceinline__ BlockScale blockwise_scale_of(uint32_t amax_bits, float& d) {
  float amax;
  if constexpr (kIn == DType::kFloat32) {
    amax = __uint_as_float(amax_bits);
  } else {
    amax = Widen<kIn>::lo(amax_bits);
  }
  const bool finite = amax <= FLT_MAX;  // false for Inf and NaN
  const float m = blockwise_multiplier(finite ? amax : 0.0f, kMode);
  d = finite ? blockwise_factor(m) : __uint_as_float(kBlockwiseFactorNan);
  return {0, m, finite ? 0u : 0xFFFFFFFFu};
}

// The same from one piece's amax bits: the four lanes' combined amax. Every lane of the warp calls
// it.
template <DType kIn, ScalingMode kMode>
__device__ __forceinline__ BlockScale blockwise_scale(uint32_t amax_bits, float& d) {
  amax_bits = max(amax_bits, __shfl_xor_sync(0xFFFFFFFFu, amax_bits, 1));
  amax_bits = max(amax_bits, __shfl_xor_sync(0xFFFFFFFFu, amax_bits, 2));
  return blockwise_scale_of<kIn, kMode>(amax_bits, d);
}

// One 32-element piece of a row block (4 chunks of a staged 16-bit row) into its 32 bytes q;
// returns the block's factor.
template <DType kIn, ScalingMode kMode>
__device__ __forceinline__ float blockwise_row_piece(const uint4 (&v)[4], uint4 (&q)[2]) {
  float d;
  convert_row_piece<kIn>(v, blockwise_scale<kIn, kMode>(row_piece_amax<kIn>(v), d), q);
  return d;
}

// One 32-element piece of a column block (the 16 words ldmatrix.trans hands over, two elements
// each, element order) into its 32 bytes q; returns the block's factor.
template <DType kIn, ScalingMode kMode>
__device__ __forceinline__ float blockwise_col_piece(const uint32_t (&w)[16], uint4 (&q)[2]) {
  float d;
  convert_col_piece<kIn>(w, blockwise_scale<kIn, kMode>(col_piece_amax<kIn>(w), d), q);
  return d;
}

// One 32-element fp32 piece (v: 32 words) into its 32 bytes q; returns the block's factor.
template <ScalingMode kMode>
__device__ __forceinline__ float blockwise_piece_f32(const uint32_t (&v)[32], uint4 (&q)[2]) {
  float d;
  convert_f32_piece(v, blockwise_scale<DType::kFloat32, kMode>(f32_piece_amax(v), d), q);
  return d;
}
}  // namespace mxq::kernels
