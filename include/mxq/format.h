// Block formats: what a quantizer and the GEMM that reads its output agree on — the elements one
// scale covers, the scale's type, and how the scales lie in memory (docs/numerics.md §1, §5). The
// layout helpers (layout.h), the CPU reference (src/ref) and the activation tile kernels take a
// format as a template parameter. MXFP8 is the only instance yet; FP8 blockwise (1x128 blocks, an
// fp32 factor per block, outer dimension fastest) is to be the second, not a copy of the first.
#pragma once

#include <cstdint>

namespace mxq {

// How a format's scales lie in memory.
enum class ScaleArrangement : int32_t {
  kBlocked128x4,  // atoms of 128 rows x 4 scale columns (layout.h): the block-scaled GEMMs' layout
};

// MXFP8 (OCP MX v1.0): 32-element blocks along either axis, one E8M0 scale byte per block (a
// biased power-of-two exponent), the scales in 128x4 atoms.
struct Mxfp8 {
  static constexpr int kBlock = 32;  // elements per scale block, both axes
  using Scale = uint8_t;             // E8M0
  static constexpr ScaleArrangement kScales = ScaleArrangement::kBlocked128x4;
  static constexpr int kAtomRows = 128;  // rows of one scale atom
  static constexpr int kAtomCols = 4;    // scale columns of one atom
};

// The formats whose scales the blocked layout helpers place.
template <class Format>
constexpr bool is_blocked_v = Format::kScales == ScaleArrangement::kBlocked128x4 &&
                              sizeof(typename Format::Scale) == 1;

}  // namespace mxq
