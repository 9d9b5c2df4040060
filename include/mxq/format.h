// Block formats: what a quantizer and the GEMM that reads its output agree on — the elements one
// scale covers, the scale's type, and how the scales lie in memory (docs/numerics.md §1, §5). The
// layout helpers (layout.h), the CPU reference (src/ref) and the activation tile kernels take a
// format as a template parameter: MXFP8 and FP8 blockwise are its two instances. At run time the
// params structs name the format with the enum Format.
#pragma once

#include <cstdint>

namespace mxq {

// How a format's scales lie in memory.
enum class ScaleArrangement : int32_t {
  kBlocked128x4,  // atoms of 128 rows x 4 scale columns (layout.h): the block-scaled GEMMs' layout
  kOuterMajor,    // a (rows, cols/kBlock) matrix with rows fastest, strides (1, rows): the layout
                  // cuBLASLt's (torch.nn.functional.scaled_mm's) BlockWise1x128 scales take
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

// FP8 blockwise (DeepSeek-V3's recipe, native on Hopper's FP8 tensor cores): 128-element blocks
// along either axis (activations and gradients; weights in 128x128 tiles), one fp32 dequantization
// factor d per block (x ~ q * d), outer dimension fastest (docs/numerics.md §13).
struct Fp8Blockwise {
  static constexpr int kBlock = 128;  // elements per scale block, both axes
  using Scale = float;                // the factor d
  static constexpr ScaleArrangement kScales = ScaleArrangement::kOuterMajor;
};

// The run-time name of a format (the params structs' `format` field; "mxfp8", "fp8_blockwise").
enum class Format : int32_t { kMxfp8 = 0, kFp8Blockwise = 1 };

// The formats whose scales the blocked layout helpers place.
template <class Format>
constexpr bool is_blocked_v = Format::kScales == ScaleArrangement::kBlocked128x4 &&
                              sizeof(typename Format::Scale) == 1;

}  // namespace mxq
