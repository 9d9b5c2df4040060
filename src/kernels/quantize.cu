// The activation quantize launchers behind mxq::quantize, mxq::quantize_composed and
// mxq::quantize_routed: each call's variant (quantize.h), tile height and input type choose one
// tile kernel family's launch_tile (quantize_tile.cuh), compiled in instantiations/.
#include <cuda_runtime.h>

#include "../common/validate.h"
#include "launch.h"
#include "quantize_tile.cuh"

namespace mxq::kernels {
namespace {

// The tile height of a launch: fp32 tiles hold 64 rows (ConfigF32). 16-bit tiles hold 128 rows,
// or 64 when the 64-row tiles all fit in one wave of resident CTAs (docs/performance.md, "64-row
// tiles under one wave"); `requested` (64 or 128: the tests' entry points, src/host/testing.h)
// overrides that choice.
// FP8 blockwise: 128 rows always (a 128x1 block is a whole tile column).
int tile_rows(const QuantizeParams& p, int requested) {
  if (p.format == Format::kFp8Blockwise) return Fp8Blockwise::kBlock;
  if (p.dtype == DType::kFloat32) return ConfigF32<>::kRows;
  if (requested != detail::kAutoTileRows) return requested;
  const int64_t half_tiles = ceil_div(p.M, kAtomRows / 2) * ceil_div(p.K, kTileCols);
  const int64_t resident = int64_t(Config<>::kMinBlocksPerSm) * detail::multiprocessor_count();
  return half_tiles <= resident ? kAtomRows / 2 : kAtomRows;
}

RoutedTileParams tile_params(const QuantizeParams& p, int requested_rows) {
  RoutedTileParams t{};
  t.x = static_cast<const uint16_t*>(p.x);
  t.M = p.M;
  t.K = p.K;
  t.q_row = p.q_row;
  t.s_row = p.s_row;
  t.q_col = p.q_col;
  t.s_col = p.s_col;
  t.offs = p.offs;
  t.num_groups = static_cast<int>(p.num_groups);
  t.status = p.status;
  t.rows = tile_rows(p, requested_rows);
  t.m_tiles = ceil_div(p.M, t.rows);
  t.k_tiles = ceil_div(p.K, kTileCols);
  t.tiles = t.m_tiles * t.k_tiles;
  return t;
}

// The launcher of the tile kernel family for the format, the input type and a tile height (fp32:
// any, its tiles hold 64 rows); routed: of the routed variants. Validation has refused every other
// input type.
using TileLauncher = void (*)(const RoutedTileParams&, Variant, ScalingMode, cudaStream_t);
template <class Family, DType kIn, class BlockFormat = Mxfp8>
TileLauncher launcher_of(bool routed) {
  return routed ? launch_tile<BlockFormat, Family, kIn, true>
                : launch_tile<BlockFormat, Family, kIn, false>;
}
TileLauncher tile_launcher(Format format, DType in, int rows, bool routed) {
  if (format == Format::kFp8Blockwise) {
    if (in == DType::kFloat32) return launcher_of<TileF32, DType::kFloat32, Fp8Blockwise>(routed);
    return in == DType::kFloat16 ? launcher_of<Tile128, DType::kFloat16, Fp8Blockwise>(routed)
                                 : launcher_of<Tile128, DType::kBFloat16, Fp8Blockwise>(routed);
  }
  if (in == DType::kFloat32) return launcher_of<TileF32, DType::kFloat32>(routed);
  const bool tall = rows == kAtomRows;
  if (in == DType::kFloat16) {
    return tall ? launcher_of<Tile128, DType::kFloat16>(routed)
                : launcher_of<Tile64, DType::kFloat16>(routed);
  }
  return tall ? launcher_of<Tile128, DType::kBFloat16>(routed)
              : launcher_of<Tile64, DType::kBFloat16>(routed);
}

}  // namespace
}  // namespace mxq::kernels

namespace mxq::detail {
using kernels::Variant;

void launch_quantize(const QuantizeParams& p, int tile_rows) {
  const bool grouped = p.offs != nullptr;
  const Variant variant = !p.colwise()   ? (grouped ? Variant::kGroupedRowwise : Variant::kRowwise)
                          : !p.rowwise() ? (grouped ? Variant::kGroupedColwise : Variant::kColwise)
                                         : (grouped ? Variant::kGroupedDual : Variant::kDual);
  const kernels::RoutedTileParams t = kernels::tile_params(p, tile_rows);
  kernels::tile_launcher(p.format, p.dtype, t.rows, false)(t, variant, p.scaling_mode, p.stream);
}

// Two launches, in stream order: the plan (route.cu) writes offs_p, dest and each padded row's
// RouteEntry into the workspace (and the status word, cleared first); the routed tile kernel, a
// programmatic dependent of it, waits for those writes (griddepcontrol.wait) and then quantizes the
// Mp padded rows as grouped mode with offs_p. offs_p is well formed by construction (the plan
// clamps bad counts), so the tile kernel gets no status word: the plan's is the report.
void launch_quantize_routed(const QuantizeRoutedParams& p, int tile_rows) {
  const bool blockwise = p.format == Format::kFp8Blockwise;
  const int64_t Mp = blockwise ? padded_rows<int64_t, Fp8Blockwise>(p.N, p.num_experts)
                               : padded_rows(p.N, p.num_experts);
  auto* route = static_cast<kernels::RouteEntry*>(p.workspace);
  if (p.status != nullptr) MXQ_CHECK_CUDA(cudaMemsetAsync(p.status, 0, sizeof(int32_t), p.stream));
  kernels::RoutePlanParams plan{};
  plan.index = p.index;
  plan.counts = p.counts;
  plan.scale = p.scale;
  plan.index64 = p.index_type == IndexType::kInt64;
  plan.counts64 = p.counts_type == IndexType::kInt64;
  plan.T = p.T;
  plan.N = p.N;
  plan.Mp = Mp;
  plan.E = static_cast<int>(p.num_experts);
  plan.offs_p = p.offs_p;
  plan.dest = p.dest;
  plan.route = route;
  plan.status = p.status;
  plan.align = blockwise ? Fp8Blockwise::kBlock : Mxfp8::kBlock;
  kernels::launch_route_plan(plan, p.stream);

  QuantizeParams q;
  q.x = p.x;
  q.dtype = p.dtype;
  q.M = Mp;
  q.K = p.K;
  q.format = p.format;
  q.scaling_mode = p.scaling_mode;
  q.offs = p.offs_p;
  q.num_groups = p.num_experts;
  q.q_row = p.q_row;
  q.s_row = p.s_row;
  q.q_col = p.q_col;
  q.s_col = p.s_col;
  if (nothing_to_write(q)) return;
  kernels::RoutedTileParams t = kernels::tile_params(q, tile_rows);
  t.route = route;
  t.scaled = p.scale != nullptr;
  const Variant variant = !q.colwise()   ? Variant::kRoutedRowwise
                          : !q.rowwise() ? Variant::kRoutedColwise
                                         : Variant::kRoutedDual;
  kernels::tile_launcher(p.format, p.dtype, t.rows, true)(t, variant, p.scaling_mode, p.stream);
}

// The baseline: the rowwise kernel (M-groups s_row itself when grouped: the layout is the same
// kernel's), the colwise kernel writing plain S_col, and to_blocked placing it. MXFP8 only
// (validation refuses FP8 blockwise: its factors need no placing, so it has no composed baseline).
void launch_quantize_composed(const QuantizeParams& p, uint8_t* workspace, int tile_rows) {
  kernels::RoutedTileParams row = kernels::tile_params(p, tile_rows);
  row.q_col = row.s_col = nullptr;
  row.status = nullptr;  // to_blocked reports on offs
  const Variant row_variant = p.offs == nullptr ? Variant::kRowwise : Variant::kGroupedRowwise;
  kernels::tile_launcher(p.format, p.dtype, row.rows, false)(row, row_variant, p.scaling_mode,
                                                             p.stream);
  kernels::RoutedTileParams col = kernels::tile_params(p, tile_rows);
  col.q_row = col.s_row = nullptr;
  col.s_col = workspace;  // plain S_col (K, M/32)
  col.offs = nullptr;
  col.num_groups = 0;
  col.status = nullptr;
  kernels::tile_launcher(p.format, p.dtype, col.rows, false)(col, Variant::kColwisePlain,
                                                             p.scaling_mode, p.stream);
  launch_to_blocked(workspace, p);
}

}  // namespace mxq::detail
