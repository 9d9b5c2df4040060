// The tile kernel of fp32 input: one CTA quantizes a 64x128 tile of x (32 KiB, the 16-bit tile's
// shared memory; quantize_tile.cuh has the contract and the phases). 64 rows are two 32-row bands
// per column, so the tile's scales fill half of each atom and go out per band (scales.cuh).
//   ---- load ----     cp.async, as in the 16-bit kernels: a warp instruction copies one whole
//                      512-byte tile row; warp w copies rows 8w..8w+7, exactly the rows its
//                      rowwise pass owns (cp.async.wait_all and __syncwarp, no CTA barrier).
//                      Grouped: warp 0 plans the tile's scale places behind its loads. Routed: each
//                      row from its source row, scaled in place after the wait.
//   ---- rowwise ----  lane l of warp w quantizes block l%4 of row 8w + l/4 (8 chunks).
//   ---- colwise ----  lanes 2j and 2j+1 of warp w take the two 32-row bands of column 16w + j,
//                      read with 32 4-byte shared loads, and store them as one q_col row pair.
//   ---- scales ----   both atoms staged, stored per band after a barrier.
// Chunk c (0..31) of a staged row lies at 8*(c/8) + ((c%8) ^ tile_key_f32(row, c/8)): in each
// 8-lane phase of the load (8 chunks of one block) and rowwise passes (chunk i of blocks 0..3 of
// rows r, r+1) the keys take 8 values; in the colwise pass a warp reads 16 columns of rows j and
// j + 32, which the row-bit-5 term sends to complementary bank halves.
// Instantiated by instantiations/quantize_f32.cu and, for the routed variants,
// instantiations/quantize_f32_routed.cu.
#pragma once

#include "quantize_tile.cuh"

namespace mxq::kernels {

__device__ __forceinline__ int tile_key_f32(int row, int blk) {
  return ((row & 1) * 4 + blk) ^ (((row >> 5) & 1) * 4);
}
__device__ __forceinline__ int f32_chunk(int row, int c) {
  return (c & ~7) | ((c & 7) ^ tile_key_f32(row, c / 8));
}

// One block of 32 fp32 values (v, as 8 16-byte chunks): scale, 32 e4m3 bytes (q), NaN blocks as
// 0x7F. amax: an unsigned max of sign-masked fp32 patterns (NaN above Inf, as for 16-bit input).
template <ScalingMode kMode>
__device__ __forceinline__ uint8_t quantize_block_f32(const uint32_t (&v)[kBlock], uint4 (&q)[2]) {
  const BlockScale bs = block_scale<DType::kFloat32, kMode>(f32_piece_amax(v));
  convert_f32_piece(v, bs, q);
  return bs.s;
}

// The rowwise pass's read: piece `blk` (32 values, C::kChunksPerBlock swizzled chunks) of staged row
// `row`, as 32 fp32 bit patterns.
template <class C>
__device__ __forceinline__ void load_f32_piece(const uint4 (&tile)[C::kRows][C::kChunksPerRow],
                                               int row, int blk, uint32_t (&b)[kPiece]) {
#pragma unroll
  for (int i = 0; i < C::kChunksPerBlock; ++i) {
    const uint4 c = tile[row][f32_chunk(row, blk * C::kChunksPerBlock + i)];
    b[4 * i] = c.x;
    b[4 * i + 1] = c.y;
    b[4 * i + 2] = c.z;
    b[4 * i + 3] = c.w;
  }
}

// ---- load ---- of C::kRows tile rows from row mh of x (h_rows of them inside x; rows past them
// stage zeros): warp w issues the cp.async copies of rows 8w..8w+7, one whole tile row per
// instruction. Routed: each row from its source row; lane l holds the entry of the warp's row l % 8
// (copy i shuffles row i's), returned for scale_f32_rows after the wait.
template <class C, class V, class Params>
__device__ __forceinline__ RouteEntry stage_f32_rows(uint4 (&tile)[C::kRows][C::kChunksPerRow],
                                                     const Params& p, const float* x, int64_t mh,
                                                     int h_rows, int64_t k0, bool chunk_in,
                                                     int warp, int lane) {
  [[maybe_unused]] RouteEntry route{};
  if constexpr (V::kRouted) {
    route = route_entry<C::kLoads>(p, mh, h_rows, warp, lane);
#pragma unroll
    for (int i = 0; i < C::kLoads; ++i) {
      const int row = warp * C::kLoads + i;
      const int src = __shfl_sync(0xFFFFFFFFu, route.row, i);
      const bool in = chunk_in && src >= 0;
      ptx::cp_async_cg_16(&tile[row][f32_chunk(row, lane)],
                          in ? x + int64_t(src) * p.K + k0 + lane * C::kChunk : x, in);
    }
  } else {
#pragma unroll
    for (int i = 0; i < C::kLoads; ++i) {
      const int row = warp * C::kLoads + i;
      const bool in = chunk_in && row < h_rows;
      ptx::cp_async_cg_16(&tile[row][f32_chunk(row, lane)],
                          in ? x + (mh + row) * p.K + k0 + lane * C::kChunk : x, in);
    }
  }
  return route;
}

// Routed with a scale, after this thread's cp.async wait: it multiplies the chunks it staged by
// their rows' factors in place.
template <class C, class V, class Params>
__device__ __forceinline__ void scale_f32_rows(uint4 (&tile)[C::kRows][C::kChunksPerRow],
                                               const Params& p, const RouteEntry& route,
                                               bool chunk_in, int warp, int lane) {
  if constexpr (V::kRouted) {
    if (p.scaled) {
#pragma unroll
      for (int i = 0; i < C::kLoads; ++i) {
        const int row = warp * C::kLoads + i;
        const int src = __shfl_sync(0xFFFFFFFFu, route.row, i);
        const float f = __shfl_sync(0xFFFFFFFFu, route.scale, i);
        if (chunk_in && src >= 0) {
          uint4& c = tile[row][f32_chunk(row, lane)];
          c = scale_chunk<DType::kFloat32>(c, f);
        }
      }
    }
  }
}

// The kernel body, for TileParams or (routed variants) RoutedTileParams.
template <class Format, ScalingMode kMode, Variant kV, class Params>
__device__ __forceinline__ void tile_f32_body(const Params& p) {
  using C = ConfigF32<Format>;
  using V = VariantTraits<kV>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  auto& tile = *reinterpret_cast<uint4(*)[C::kRows][C::kChunksPerRow]>(smem.tile);
  if (!starts_tile<Format, kV>(p)) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const auto [m0, k0, rows, cols] = tile_span<V::kRowwise, C::kRows>(p);
  const auto* x = static_cast<const float*>(static_cast<const void*>(p.x));

  // ---- load ----
  const bool chunk_in = lane * C::kChunk < cols;
  const RouteEntry route = stage_f32_rows<C, V>(tile, p, x, m0, rows, k0, chunk_in, warp, lane);
  __shared__ TilePlaces places;
  if (V::kGrouped && warp == 0) {
    plan_tile_places<C::kBands>(places, p.offs, p.num_groups, p.M, m0, k0, p.K, V::kRowwise,
                                V::kCol == ColScales::kKGroups);
  }
  ptx::cp_async_wait_all();
  scale_f32_rows<C, V>(tile, p, route, chunk_in, warp, lane);
  __syncwarp();
  // ---- rowwise ----
  if constexpr (V::kRowwise) {
    const int row = warp * C::kLoads + lane / 4;
    const int blk = lane % 4;
    uint32_t b[kBlock];
    load_f32_piece<C>(tile, row, blk, b);
    uint4 q[2];
    const uint8_t s = quantize_block_f32<kMode>(b, q);
    const int pair = blk & ~1;
    const bool row_in = row < rows;
    store_block_pair(p.q_row + (m0 + row) * p.K + k0 + pair * kBlock + (lane & 1) * 16, q,
                     row_in && pair * kBlock < cols, row_in && (pair + 1) * kBlock < cols);
    smem.row_atom[atom_offset<unsigned>(row, blk)] = s;
  }
  __syncthreads();
  // ---- colwise ----
  if constexpr (V::kColwise) {
    const int k = 16 * warp + lane / 2;
    const int band = lane & 1;
    uint32_t b[kBlock];
#pragma unroll
    for (int j = 0; j < kBlock; ++j) {
      const int row = kBlock * band + j;
      b[j] = reinterpret_cast<const uint32_t*>(
          &tile[row][f32_chunk(row, k / C::kChunk)])[k % C::kChunk];
    }
    uint4 q[2];
    const uint8_t s = quantize_block_f32<kMode>(b, q);
    const bool k_in = k < cols;
    store_block_pair(p.q_col + (k0 + k) * p.M + m0 + band * 16, q, k_in, k_in && kBlock < rows);
    if constexpr (V::kCol == ColScales::kPlain) {
      smem.col_atom[k * kAtomCols + band] = s;
    } else {
      smem.col_atom[atom_offset<unsigned>(k, band)] = s;
    }
  }
  __syncthreads();
  // ---- scales ----
  const ScaleOut out{p.s_row, p.s_col, p.M, p.K};
  const bool last_m = m0 + C::kRows >= p.M;
  if constexpr (V::kColwise)
    store_col_scales<V::kCol, C::kBands>(out, m0, k0, smem.col_atom, places, last_m);
  if constexpr (V::kRowwise) {
    store_row_scales<V::kGrouped, C::kBands>(out, m0, k0, smem.row_atom, places, last_m);
  }
}

// FP8 blockwise: a CTA takes a 128x128 tile (a 128x1 block is a whole tile column) as two 64-row
// halves through the same 32 KiB of shared memory, each staged and converted rowwise as above
// (the row's four lanes combine their pieces' amax, blockwise.cuh). Colwise, lanes 2j and 2j+1
// hold the column's bands 0-1 of half 0 (amax only) and then, in registers, bands 0-1 of half 1:
// their amaxes combine, half 1 is converted from registers, and half 0 is staged a second time
// (its reads hit L2) and converted. The fp32 tiles' speed is secondary; this keeps the registers
// of one 32x1 piece per thread.
template <ScalingMode kMode, Variant kV, class Params>
__device__ __forceinline__ void tile_f32_blockwise_body(const Params& p) {
  using C = ConfigF32<Fp8Blockwise>;
  using V = VariantTraits<kV>;
  constexpr int kRows = Fp8Blockwise::kBlock;  // the CTA's rows: two halves of C::kRows
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  auto& tile = *reinterpret_cast<uint4(*)[C::kRows][C::kChunksPerRow]>(smem.tile);
  if (!starts_tile<Fp8Blockwise, kV>(p)) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // Named copies, not structured bindings: the lambdas below capture them (C++17).
  const TileSpan span = tile_span<V::kRowwise, kRows>(p);
  const int64_t m0 = span.m0, k0 = span.k0;
  const int rows = span.rows, cols = span.cols;
  const auto* x = static_cast<const float*>(static_cast<const void*>(p.x));
  const bool chunk_in = lane * C::kChunk < cols;

  // Stages rows [mh, mh + 64) of the tile (mh = m0 or m0 + 64; h_rows of them inside x) and waits
  // for this thread's copies (routed: scaled in place).
  const auto stage = [&](int64_t mh, int h_rows) {
    const RouteEntry route = stage_f32_rows<C, V>(tile, p, x, mh, h_rows, k0, chunk_in, warp, lane);
    ptx::cp_async_wait_all();
    scale_f32_rows<C, V>(tile, p, route, chunk_in, warp, lane);
  };
  // Rowwise: lane l of warp w converts piece l%4 of the half's row 8w + l/4.
  const auto rowwise = [&](int64_t mh, int h_rows) {
    const int row = warp * C::kLoads + lane / 4;
    const int blk = lane % 4;
    uint32_t b[kPiece];
    load_f32_piece<C>(tile, row, blk, b);
    uint4 q[2];
    const float d = blockwise_piece_f32<kMode>(b, q);
    const int pair = blk & ~1;
    const bool row_in = row < h_rows;
    store_block_pair(p.q_row + (mh + row) * p.K + k0 + pair * kPiece + (lane & 1) * 16, q,
                     row_in && pair * kPiece < cols, row_in && (pair + 1) * kPiece < cols);
    if (blk == 0 && row_in) {
      reinterpret_cast<float*>(p.s_row)[factor_offset(mh + row, k0 / Fp8Blockwise::kBlock, p.M)] =
          d;
    }
  };
  // Colwise: lanes 2j and 2j+1 of warp w read bands 0 and 1 of column 16w + j of the staged half.
  const int k = 16 * warp + lane / 2;
  const int band = lane & 1;
  const auto read_column = [&](uint32_t(&b)[kPiece]) {
#pragma unroll
    for (int j = 0; j < kPiece; ++j) {
      const int row = kPiece * band + j;
      b[j] = reinterpret_cast<const uint32_t*>(
          &tile[row][f32_chunk(row, k / C::kChunk)])[k % C::kChunk];
    }
  };
  const auto convert_column = [&](const uint32_t(&b)[kPiece], const BlockScale& bs, int half) {
    uint4 q[2];
    convert_f32_piece(b, bs, q);
    const bool k_in = k < cols;
    const int hr = half * C::kRows;  // the half's first row in the tile
    store_block_pair(p.q_col + (k0 + k) * p.M + m0 + hr + band * 16, q, k_in && hr < rows,
                     k_in && hr + kPiece < rows);
  };

  // ---- half 0 ----
  stage(m0, min(rows, C::kRows));
  __syncwarp();
  if constexpr (V::kRowwise) rowwise(m0, min(rows, C::kRows));
  __syncthreads();
  [[maybe_unused]] uint32_t amax0 = 0;
  if constexpr (V::kColwise) {
    uint32_t b[kPiece];
    read_column(b);
    amax0 = f32_piece_amax(b);
  }
  __syncthreads();  // half 0 is read: half 1 may overwrite it
  // ---- half 1 ----
  stage(m0 + C::kRows, max(rows - C::kRows, 0));
  __syncwarp();
  if constexpr (V::kRowwise) rowwise(m0 + C::kRows, max(rows - C::kRows, 0));
  if constexpr (V::kColwise) {
    __syncthreads();
    uint32_t b[kPiece];
    read_column(b);
    // The block's amax: this thread's two pieces, then its neighbour's (the other band).
    uint32_t amax = max(amax0, f32_piece_amax(b));
    amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    float d;
    const BlockScale bs = blockwise_scale_of<DType::kFloat32, kMode>(amax, d);
    convert_column(b, bs, 1);
    if (band == 0 && k < cols) {
      reinterpret_cast<float*>(p.s_col)[factor_offset(k0 + k, m0 / Fp8Blockwise::kBlock, p.K)] = d;
    }
    // ---- half 0 again ----
    __syncthreads();  // half 1 is read
    stage(m0, min(rows, C::kRows));
    __syncthreads();
    read_column(b);
    convert_column(b, bs, 0);
  }
}

template <class Format, ScalingMode kMode, Variant kV>
__global__ void __launch_bounds__(ConfigF32<>::kThreads, Config<>::kMinBlocksPerSm)
    quantize_tile_f32_kernel(const TileParamsOf<kV> p) {
  if constexpr (is_blocked_v<Format>) {
    tile_f32_body<Format, kMode, kV>(p);
  } else {
    tile_f32_blockwise_body<kMode, kV>(p);
  }
}

// The family's kernels for launch_tile (quantize_tile.cuh).
struct TileF32 {
  template <class Format, DType kIn, ScalingMode kMode, Variant kV>
  static auto kernel() {
    static_assert(kIn == DType::kFloat32, "the fp32 tile kernel");
    return quantize_tile_f32_kernel<Format, kMode, kV>;
  }
};

}  // namespace mxq::kernels
