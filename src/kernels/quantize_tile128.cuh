// The 128-row tile kernel of 16-bit input (bf16, fp16): one CTA quantizes a 128x128 tile of x,
// which maps to one whole 512-byte scale atom per axis (quantize_tile.cuh has the contract and the
// phases). Instantiated per input type and routing by instantiations/quantize_tile128_*.cu.
//   ---- load ----     8 cp.async copies of 16 bytes per thread: 32 KiB in flight per CTA, 4 CTAs
//                      per SM (routed: from each row's source row, scaled in place after the
//                      wait). Grouped: warp 0 then plans the tile's scale places while its own
//                      loads are in flight and the other warps go on with their rows.
//   ---- rowwise ----  a thread converts two whole 1x32 blocks (rows 8 apart).
//   ---- colwise ----  two ldmatrix passes per warp, each one 8-column group x 4 bands.
//   ---- scales ----   both atoms staged, stored after a barrier: whole when the tile's rows or
//                      tokens map to one atom, else per 32-row band (grouped layouts whose
//                      32-aligned groups split the tile).
#pragma once

#include "quantize_tile.cuh"

namespace mxq::kernels {

// The kernel body, for TileParams or (routed variants) RoutedTileParams.
template <class Format, DType kIn, ScalingMode kMode, Variant kV, class Params>
__device__ __forceinline__ void tile128_body(const Params& p) {
  using Cfg = Config<kAtomRows, Format>;
  using V = VariantTraits<kV>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  if (!starts_tile<Format, kV>(p)) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const auto [m0, k0, rows, cols] = tile_span<V::kRowwise, Cfg::kRows>(p);

  // ---- load ---- then, grouped, warp 0 plans behind its loads; the barrier after the rowwise
  // pass publishes the places.
  __shared__ TilePlaces places;
  [[maybe_unused]] RouteEntry route{};
  if constexpr (V::kRouted) {
    route = route_entry<Cfg::kRowsPerWarp>(p, m0, rows, warp, lane);
    gather_tile<Cfg>(smem.tile, p, k0, cols, route, warp, lane);
  } else {
    load_tile<Cfg>(smem.tile, p, m0, k0, rows, cols, warp, lane);
  }
  if constexpr (is_blocked_v<Format>) {  // FP8 blockwise: grouped outputs are the dense ones
    if (V::kGrouped && warp == 0) {
      plan_tile_places<Cfg::kBands>(places, p.offs, p.num_groups, p.M, m0, k0, p.K, V::kRowwise,
                                    V::kCol == ColScales::kKGroups);
    }
  }
  ptx::cp_async_wait_all();
  if constexpr (V::kRouted) scale_gathered<Cfg, kIn>(smem.tile, p, cols, route, warp, lane);
  __syncwarp();
  if constexpr (is_blocked_v<Format>) {
    staged_phases<Cfg, kIn, kMode, kV>(smem, places, p, m0, k0, rows, cols, warp, lane);
  } else {
    factor_phases<Cfg, kIn, kMode, kV>(smem, p, m0, k0, rows, cols, warp, lane);
  }
}

template <class Format, DType kIn, ScalingMode kMode, Variant kV>
__global__ void __launch_bounds__(Config<>::kThreads, Config<>::kMinBlocksPerSm)
    quantize_tile128_kernel(const TileParamsOf<kV> p) {
  tile128_body<Format, kIn, kMode, kV>(p);
}

// The family's kernels for launch_tile (quantize_tile.cuh).
struct Tile128 {
  template <class Format, DType kIn, ScalingMode kMode, Variant kV>
  static auto kernel() {
    return quantize_tile128_kernel<Format, kIn, kMode, kV>;
  }
};

}  // namespace mxq::kernels
