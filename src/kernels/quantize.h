// The activation quantize kernels' launch interface, plain C++ (no CUDA types): what quantize.cu's
// host code passes to the tile kernels, and the one launcher of every tile kernel family.
//   quantize_tile128.cuh  Tile128: 16-bit input, 128x128 tiles (one scale atom per axis)
//   quantize_tile64.cuh   Tile64: 16-bit input, 64x128 tiles (launches under one wave of resident
//                         CTAs)
//   quantize_f32.cuh      TileF32: fp32 input, 64x128 tiles (FP8 blockwise: 128 rows as two halves)
// launch_tile (quantize_tile.cuh) is compiled once per block format, family, input type and routing
// in instantiations/, so the kernels build in parallel. FP8 blockwise (blockwise.cuh) has Tile128
// and TileF32 only: a 128x1 block is a whole 128-row tile column.
#pragma once

#include <cstdint>

#include "mxq/mxq.h"
#include "tile_key.h"

namespace mxq::kernels {

// What one launch writes. These ten are every combination something runs (launch_quantize, the
// composed path and quantize_routed); each is one kernel per input type, scaling mode and tile
// height.
enum class Variant {
  kRowwise,         // q_row, s_row blocked
  kColwise,         // q_col, s_col blocked
  kDual,            // all four, blocked
  kGroupedRowwise,  // q_row, s_row in the M-groups layout
  kGroupedColwise,  // q_col, s_col in the K-groups layout
  kGroupedDual,     // all four, grouped layouts
  kColwisePlain,    // q_col, plain S_col (K, M/32): the composed path's colwise step
  // quantize_routed: the grouped variants with each tile row gathered through TileParams::route.
  kRoutedRowwise,
  kRoutedColwise,
  kRoutedDual,
};

// The source of one row of a routed launch (route.cu writes one per padded row): the row of x, or
// -1 for a row of zeros (padding, the tail, a bad index), and its scale factor (1 without scale).
struct RouteEntry {
  int32_t row;
  float scale;
};
static_assert(sizeof(RouteEntry) == 8, "one 8-byte load per row (quantize_routed_workspace_bytes)");

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
  Divider fast;              // by the tiles along the axis a CTA index walks fastest (launch_tile)
  int rows;                  // tile height: 128 or 64 (16-bit input), 64 (fp32); for the launcher
};

// A routed launch's parameters: row m of the M rows is x's row route[m].row (K elements each),
// times route[m].scale when `scaled`. The routed kernels take this, the others TileParams itself,
// so their code is what it was before routed kernels existed.
struct RoutedTileParams : TileParams {
  const RouteEntry* route;
  bool scaled;
};

// The tile kernel families (quantize_tile128.cuh, quantize_tile64.cuh, quantize_f32.cuh).
struct Tile128;
struct Tile64;
struct TileF32;

// One launch of Family's tile kernel of block format Format (include/mxq/format.h) for `variant`
// and `mode` (quantize_tile.cuh); kRouted: the routed variants (p.route set), else the others
// (p.route unused).
template <class Format, class Family, DType kIn, bool kRouted>
void launch_tile(const RoutedTileParams& p, Variant variant, ScalingMode mode, cudaStream_t stream);
// Each compiled in its own translation unit (instantiations/), never where it is called.
#define MXQ_TILE_INSTANCE(Format, Family, kIn, kRouted)                                            \
  extern template void launch_tile<Format, Family, kIn, kRouted>(const RoutedTileParams&, Variant, \
                                                                 ScalingMode, cudaStream_t);
MXQ_TILE_INSTANCE(Mxfp8, Tile128, DType::kBFloat16, false)
MXQ_TILE_INSTANCE(Mxfp8, Tile128, DType::kBFloat16, true)
MXQ_TILE_INSTANCE(Mxfp8, Tile128, DType::kFloat16, false)
MXQ_TILE_INSTANCE(Mxfp8, Tile128, DType::kFloat16, true)
MXQ_TILE_INSTANCE(Mxfp8, Tile64, DType::kBFloat16, false)
MXQ_TILE_INSTANCE(Mxfp8, Tile64, DType::kBFloat16, true)
MXQ_TILE_INSTANCE(Mxfp8, Tile64, DType::kFloat16, false)
MXQ_TILE_INSTANCE(Mxfp8, Tile64, DType::kFloat16, true)
MXQ_TILE_INSTANCE(Mxfp8, TileF32, DType::kFloat32, false)
MXQ_TILE_INSTANCE(Mxfp8, TileF32, DType::kFloat32, true)
// FP8 blockwise: 128-row tiles only (a 128x1 block is a whole tile column).
MXQ_TILE_INSTANCE(Fp8Blockwise, Tile128, DType::kBFloat16, false)
MXQ_TILE_INSTANCE(Fp8Blockwise, Tile128, DType::kBFloat16, true)
MXQ_TILE_INSTANCE(Fp8Blockwise, Tile128, DType::kFloat16, false)
MXQ_TILE_INSTANCE(Fp8Blockwise, Tile128, DType::kFloat16, true)
MXQ_TILE_INSTANCE(Fp8Blockwise, TileF32, DType::kFloat32, false)
MXQ_TILE_INSTANCE(Fp8Blockwise, TileF32, DType::kFloat32, true)
#undef MXQ_TILE_INSTANCE

// The routing plan of a quantize_routed call (route.cu): offs_p, dest, the RouteEntry of each of
// the Mp padded rows, the status word.
struct RoutePlanParams {
  const void* index;
  const void* counts;
  const float* scale;  // null: factor 1
  bool index64, counts64;
  int64_t T, N, Mp;
  int E;
  int32_t* offs_p;
  int32_t* dest;
  RouteEntry* route;
  int32_t* status;  // null, or cleared before the launch and OR-ed into
  int align;        // the format's block, to which each group is padded: 32 or 128
};
void launch_route_plan(const RoutePlanParams& p, cudaStream_t stream);

}  // namespace mxq::kernels
