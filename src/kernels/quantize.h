// The activation quantize kernels' launch interface, plain C++ (no CUDA types): what quantize.cu's
// host code passes to the tile kernels, and the launchers each kernel family defines.
//   quantize_tile128.cuh  16-bit input, 128x128 tiles (one scale atom per axis)
//   quantize_tile64.cuh   16-bit input, 64x128 tiles (launches under one wave of resident CTAs)
//   quantize_f32.cuh      fp32 input, 64x128 tiles
// Each family is compiled once per input type (quantize_tile{128,64}_{bf16,fp16}.cu,
// quantize_f32.cu) and once more for the routed variants (..._routed.cu), so the kernels build in
// parallel.
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
  Divider fast;              // by the tiles along the axis a CTA index walks fastest (launch_tiles)
  int rows;                  // tile height: 128 or 64 (16-bit input), 64 (fp32); for the launcher
};

// A routed launch's parameters: row m of the M rows is x's row route[m].row (K elements each),
// times route[m].scale when `scaled`. The routed kernels take this, the others TileParams itself,
// so their code is what it was before routed kernels existed.
struct RoutedTileParams : TileParams {
  const RouteEntry* route;
  bool scaled;
};

// One launch of the tile kernel of each family for `variant` and `mode`; kRouted: the routed
// variants (instantiated in their own translation units; p.route set), else the others (p.route
// unused).
template <DType kIn, bool kRouted>
void launch_tile128(const RoutedTileParams& p, Variant variant, ScalingMode mode,
                    cudaStream_t stream);
template <DType kIn, bool kRouted>
void launch_tile64(const RoutedTileParams& p, Variant variant, ScalingMode mode,
                   cudaStream_t stream);
template <bool kRouted>
void launch_tile_f32(const RoutedTileParams& p, Variant variant, ScalingMode mode,
                     cudaStream_t stream);

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
};
void launch_route_plan(const RoutePlanParams& p, cudaStream_t stream);

}  // namespace mxq::kernels
