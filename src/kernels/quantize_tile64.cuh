// The 64-row tile kernel of 16-bit input (bf16, fp16): one CTA quantizes a 64x128 tile of x, half a
// scale atom per axis (quantize_tile.cuh has the contract and the phases). A launch takes these
// tiles when all of them fit in one wave of resident CTAs (quantize.cu tile_rows): more, shorter
// CTAs per SM then overlap one's loads with another's math and stores. Instantiated per input type
// and routing by instantiations/quantize_tile64_*.cu.
//   ---- load ----     4 cp.async copies of 16 bytes per thread (routed: from each row's source
//                      row, scaled in place after the wait). Grouped: warp 0 plans the tile's
//                      scale places before its loads, not behind them as the 128-row tile does:
//                      here every CTA issues its loads at once (docs/performance.md, "Grouped
//                      (MoE)").
//   ---- rowwise ----  a thread converts one whole 1x32 block.
//   ---- colwise ----  one ldmatrix pass per warp: two 8-column groups x 2 bands.
//   ---- scales ----   with colwise outputs, no atom is staged: each thread stores its own two
//                      scale bytes (its row block's and its column block's, scales.cuh
//                      store_scale_byte) where the places of its bands say, so no barrier follows
//                      the colwise pass. The rowwise-only kernel stages its atom and stores it per
//                      band, as the 128-row tile does (docs/performance.md, "Scale atoms").
#pragma once

#include "quantize_tile.cuh"

namespace mxq::kernels {

// The kernel body, for TileParams or (routed variants) RoutedTileParams.
template <class Format, DType kIn, ScalingMode kMode, Variant kV, class Params>
__device__ __forceinline__ void tile64_body(const Params& p) {
  using Cfg = Config<kAtomRows / 2, Format>;
  using V = VariantTraits<kV>;
  static_assert(Cfg::kRowBlocksPerThread == 1 && Cfg::kColPasses == 1,
                "a thread of a 64-row tile converts one row block and one column block");
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  if (!starts_tile<Format, kV>(p)) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const auto [m0, k0, rows, cols] = tile_span<V::kRowwise, Cfg::kRows>(p);

  // ---- load ---- grouped: warp 0 plans first.
  const int chunk = lane % Cfg::kChunksPerRow;
  const int row0 = warp * Cfg::kRowsPerWarp + lane / Cfg::kChunksPerRow;
  const bool chunk_in = chunk * Cfg::kChunk < cols;
  __shared__ TilePlaces places;
  [[maybe_unused]] RouteEntry route{};
  if constexpr (V::kRouted) route = route_entry<Cfg::kRowsPerWarp>(p, m0, rows, warp, lane);
  if (V::kGrouped && warp == 0) {
    plan_tile_places<Cfg::kBands>(places, p.offs, p.num_groups, p.M, m0, k0, p.K, V::kRowwise,
                                  V::kCol == ColScales::kKGroups);
  }
  if constexpr (V::kRouted) {
    gather_tile<Cfg>(smem.tile, p, k0, cols, route, warp, lane);
  } else {
    issue_loads<Cfg>(smem.tile, p, m0, k0, rows, chunk, row0, chunk_in);
  }
  if constexpr (!V::kColwise) {
    ptx::cp_async_wait_all();
    if constexpr (V::kRouted) scale_gathered<Cfg, kIn>(smem.tile, p, cols, route, warp, lane);
    __syncwarp();
    staged_phases<Cfg, kIn, kMode, kV>(smem, places, p, m0, k0, rows, cols, warp, lane);
  } else {
    // Each thread stores its own scale bytes. The dense places of its bands are worked out while
    // the loads are in flight (grouped: planned by warp 0, published by the barrier after the
    // rowwise pass).
    const int row_band = warp * Cfg::kRowsPerWarp / kBlock;  // the band of the warp's rows
    BandPlace row_place = kNotPlaced, col_place = kNotPlaced;
    if constexpr (!V::kGrouped) {
      const bool last = m0 + Cfg::kRows >= p.M;
      const int col_band = lane % 4 % Cfg::kBands;  // the band of its colwise block
      row_place =
          blocked_row_place(m0, row_band, k0, p.K / kBlock, last && row_band == Cfg::kBands - 1);
      col_place = blocked_col_place(m0, col_band, k0, p.M, last && col_band == Cfg::kBands - 1);
    }
    ptx::cp_async_wait_all();
    if constexpr (V::kRouted) scale_gathered<Cfg, kIn>(smem.tile, p, cols, route, warp, lane);
    __syncwarp();
    // ---- rowwise ---- warp w owns rows 8w..8w+7; lane l converts block l%4 of row 8w + l/4 (the
    // loop runs once) and stores its scale byte at byte row_at of its band in the atom.
    uint8_t row_scale = 0;
    unsigned row_at = 0;
    if constexpr (V::kRowwise) {
      const int blk = lane % Cfg::kBlocksPerRow;
      const int row = warp * Cfg::kRowsPerWarp + lane / Cfg::kBlocksPerRow;
      constexpr int kRowStep = 32 / Cfg::kBlocksPerRow;
      const int pair = blk & ~1;
      uint8_t* q_pair = p.q_row + (m0 + row) * p.K + k0 + pair * kBlock + (lane & 1) * 16;
#pragma unroll
      for (int j = 0; j < Cfg::kRowBlocksPerThread; ++j) {
        const int r = row + j * kRowStep;
        uint4 b[Cfg::kChunksPerBlock];
#pragma unroll
        for (int i = 0; i < Cfg::kChunksPerBlock; ++i) {
          b[i] = smem.tile[r][(blk * Cfg::kChunksPerBlock + i) ^ tile_key(r, blk / 2)];
        }
        const bool row_in = r < rows;
        row_scale = rowwise_block<kIn, kMode>(b, q_pair + j * kRowStep * p.K,
                                              row_in && pair * kBlock < cols,
                                              row_in && (pair + 1) * kBlock < cols);
      }
      row_at = 16 * (row % kBlock) + blk;
      if constexpr (!V::kGrouped) store_scale_byte(p.s_row, row_place, row_at, 4, row_scale);
    }
    __syncthreads();
    if constexpr (V::kGrouped && V::kRowwise) {  // the places are published now
      store_scale_byte(p.s_row, places.row[row_band], row_at, 4, row_scale);
    }
    // ---- colwise ---- (m0 and k0 by init-capture: C++17 lambdas cannot capture structured
    // bindings.)
    colwise_blocks<Cfg, kIn, kMode>(smem.tile, p.q_col + k0 * p.M + m0, p.M, rows, cols,
                                    [&, m0 = m0, k0 = k0](int k, int b, uint8_t s) {
                                      if constexpr (V::kCol == ColScales::kPlain) {
                                        if (k < cols && b * kBlock < rows)
                                          p.s_col[(k0 + k) * (p.M / kBlock) + m0 / kBlock + b] = s;
                                      } else {
                                        store_scale_byte(p.s_col,
                                                         V::kGrouped ? places.col[b] : col_place,
                                                         atom_offset<unsigned>(k, 0), 1, s);
                                      }
                                    });
  }
}

template <class Format, DType kIn, ScalingMode kMode, Variant kV>
__global__ void __launch_bounds__(Config<>::kThreads, Config<>::kMinBlocksPerSm)
    quantize_tile64_kernel(const TileParamsOf<kV> p) {
  tile64_body<Format, kIn, kMode, kV>(p);
}

// The family's kernels for launch_tile (quantize_tile.cuh).
struct Tile64 {
  template <class Format, DType kIn, ScalingMode kMode, Variant kV>
  static auto kernel() {
    return quantize_tile64_kernel<Format, kIn, kMode, kV>;
  }
};

}  // namespace mxq::kernels
