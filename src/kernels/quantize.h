// The activation quantize kernels' launch interface, plain C++ (no CUDA types): what quantize.cu's
// host code passes to the tile kernels, and the launchers each kernel family defines.
//   quantize_tile128.cuh  16-bit input, 128x128 tiles (one scale atom per axis)
//   quantize_tile64.cuh   16-bit input, 64x128 tiles (launches under one wave of resident CTAs)
//   quantize_f32.cu       fp32 input, 64x128 tiles
// Each 16-bit family is compiled once per input type (quantize_tile{128,64}_{bf16,fp16}.cu), so
// the kernels build in parallel.
#pragma once

#include <cstdint>

#include "mxq/mxq.h"
#include "tile_key.h"

namespace mxq::kernels {

// What one launch writes. These seven are every combination something runs (launch_quantize and
// the composed path); each is one kernel per input type, scaling mode and tile height.
enum class Variant {
  kRowwise,         // q_row, s_row blocked
  kColwise,         // q_col, s_col blocked
  kDual,            // all four, blocked
  kGroupedRowwise,  // q_row, s_row in the M-groups layout
  kGroupedColwise,  // q_col, s_col in the K-groups layout
  kGroupedDual,     // all four, grouped layouts
  kColwisePlain,    // q_col, plain S_col (K, M/32): the composed path's colwise step
};

struct TileParams {
  const uint16_t* x;
  int64_t M, K;
  uint8_t* q_row;
  uint8_t* s_row;
  uint8_t* q_col;
  uint8_t* s_col;
  const int32_t* offs;
  int num_groups;
  int32_t* status;
  int64_t m_tiles, k_tiles;  // ceil(M/rows), ceil(K/128)
  int64_t tiles;             // CTAs past this zero-fill grouped slack and write the status word
  Divider fast;              // by the tiles along the axis a CTA index walks fastest (launch_tiles)
  int rows;                  // tile height: 128 or 64 (16-bit input), 64 (fp32); for the launcher
};

// One launch of the tile kernel of each family for `variant` and `mode`.
template <DType kIn>
void launch_tile128(const TileParams& p, Variant variant, ScalingMode mode, cudaStream_t stream);
template <DType kIn>
void launch_tile64(const TileParams& p, Variant variant, ScalingMode mode, cudaStream_t stream);
void launch_tile_f32(const TileParams& p, Variant variant, ScalingMode mode, cudaStream_t stream);

}  // namespace mxq::kernels
