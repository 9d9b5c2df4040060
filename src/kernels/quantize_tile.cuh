// MXFP8 quantization of activations, the parts its tile kernels share (quantize_tile128.cuh,
// quantize_tile64.cuh, quantize_f32.cuh) and their launcher (launch_tile): one CTA quantizes one
// tile of x, 128 columns by 128 or 64 rows, and writes the outputs of its variant (quantize.h
// Variant): rowwise 1x32 blocks, colwise 32x1 blocks (transposed output), or both from one read of
// x (docs/numerics.md §2-§10). FP8 blockwise (§13) is the same kernels' other instance: its 1x128
// and 128x1 blocks are four 32-element pieces in four lanes (blockwise.cuh), and each block's fp32
// factor is stored at factor_offset by one of them (factor_phases) instead of the staged atoms;
// grouped launches are dense ones plus a status CTA. The notes below describe MXFP8.
//
// x: bf16, fp16 or fp32 (M, K) row-major, M and K multiples of 32. Outputs, each optional per
// variant:
//   q_row (M, K) e4m3 and s_row in the blocked layout (M-groups layout with offs);
//   q_col (K, M) e4m3, row k = column k of x, and s_col blocked, in the K-groups layout, or plain
//   (K, M/32) (the composed path).
// Scale: RCEIL or FLOOR (ScalingMode, numerics.h); e4m3 by cvt.rn.satfinite; a block holding NaN
// or Inf becomes all 0x7F.
//
// The phases of a tile (each kernel file gives its own order):
//   ---- load ----     16-byte cp.async copies straight into shared memory, coalesced (a warp
//                      instruction reads whole tile rows), no registers holding data; chunks
//                      XOR-swizzled per row (tile_key.h) so that every access below is
//                      conflict-free; a partial tile at the edge of x stages zeros past it.
//   ---- rowwise ----  a thread converts whole 1x32 blocks of the rows its own warp loaded (so
//                      only __syncwarp comes before it), then swaps half a block with its
//                      neighbour lane so that every 16-byte store completes a 32-byte sector.
//   ---- colwise ----  ldmatrix.trans hands each thread one whole 32x1 block; it stores its 32
//                      bytes of q_col straight from registers with the same neighbour exchange.
//   ---- scales ----   staged as 512-byte atoms, stored after a barrier: whole (one 16-byte store
//                      per lane of one warp), or per 32-row band where the bands land apart.
// NOTES:
// - Padding is computed, not special-cased: the zeros staged past the edge of x quantize to scale
//   byte 0, exactly the padding value of the blocked layout; only data stores past it are skipped.
// - Tile order: K fastest, except the colwise-only variants, whose only output runs along M
//   (consecutive CTAs then continue the same rows of q_col).
// - Grouped variants: warp 0 of every CTA scans offs and plans the places of the tile's bands
//   (scales.cuh plan_tile_places, no second launch); the first CTA barrier after the plan
//   publishes it. The CTAs past the tiles zero the grouped layouts' slack and write the status
//   word.
// - Routed variants (quantize_routed): their own kernels (RoutedTileParams; each family's body is
//   one inline function of both kernels), grouped, with tile row m read from x's row route[m].row
//   (route.cu's plan; -1 stages zeros, as past the edge of x), and, with a scale, each thread
//   multiplies the chunks it staged itself by the row's factor and rounds them to the input type
//   in place after its cp.async wait, before the barrier the phases already have.
// - Shared memory stays under the 48 KB that need no opt-in attribute, so launches set no function
//   attribute (a driver call per launch).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "blockwise.cuh"
#include "common.cuh"
#include "dispatch.h"
#include "quantize.h"
#include "scales.cuh"
#include "tile_key.h"

namespace mxq::kernels {

// A tile's columns: one atom's 4 scale columns.
constexpr int kTileCols = kAtomCols * kBlock;

// A thread's unit of work along either axis: 32 elements (one MXFP8 block; a quarter of an FP8
// blockwise block, whose four pieces lie in four lanes that combine their amax, blockwise.cuh).
constexpr int kPiece = 32;

// The 16-bit tile kernels' geometry for tiles of kRows x 128 of block format Format (format.h): 128
// rows map to one whole scale atom per axis (quantize_tile128.cuh), 64 rows to half of each
// (quantize_tile64.cuh). The phases work in 32-element pieces: MXFP8's blocks, or the four pieces
// of an FP8 blockwise block (128-row tiles only: a 128x1 block is a whole tile column).
template <int kTileRows = kAtomRows, class Format = Mxfp8>
struct Config {
  static_assert((is_blocked_v<Format> && Format::kBlock == kPiece) ||
                    (Format::kBlock == 4 * kPiece && kTileRows == Format::kBlock),
                "the tile phases are written for 32-element blocks with 128x4 atoms of scale "
                "bytes, or 128-element blocks in 128-row tiles");
  using BlockFormat = Format;
  static constexpr int kRows = kTileRows;
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunk = 8;                                 // bf16 per 16-byte load
  static constexpr int kChunksPerRow = kTileCols / kChunk;         // 16
  static constexpr int kLoads = kRows * kChunksPerRow / kThreads;  // 8 (64 rows: 4) per thread
  static constexpr int kChunksPerBlock = kPiece / kChunk;          // 4
  static constexpr int kBlocksPerRow = kTileCols / kPiece;         // 4
  static constexpr int kRowBlocksPerThread = kRows * kBlocksPerRow / kThreads;  // 2 (1)
  static constexpr int kRowsPerWarp = kRows / kWarps;                           // 16 (8)
  static constexpr int kBands = kRows / kPiece;     // 32-row bands: 4 (2) of the atom's 4
  static constexpr int kColGroups = kTileCols / 8;  // 8-column groups, one ldmatrix column set each
  // An ldmatrix pass hands a warp 4 pieces (8-column group, band): 1 group x 4 bands, or 2 x 2.
  static constexpr int kGroupsPerPass = 4 / kBands;
  static constexpr int kColPasses = kColGroups / (kWarps * kGroupsPerPass);  // 2 (1)
  static constexpr int kMinBlocksPerSm = 4;
  static_assert(kRows == kAtomRows || kRows == kAtomRows / 2, "tiles of 128 or 64 rows");
  static_assert(kThreads % 32 == 0, "threads must be whole warps");
  static_assert(kTileCols % kBlock == 0, "tile must hold whole blocks");
  static_assert(kRowsPerWarp * kBlocksPerRow == 32 * kRowBlocksPerThread,
                "a warp owns kRowsPerWarp rows: lane l takes blocks l (and l+32) of them");
  static_assert(kBlocksPerRow % 2 == 0,
                "neighbour lanes pair up on adjacent blocks for full-sector stores");
  static_assert(kColPasses * kWarps * kGroupsPerPass == kColGroups && kGroupsPerPass * kBands == 4,
                "each warp's ldmatrix passes cover its groups' blocks, 4 pieces a pass");
  static_assert(kTileCols / kBlock == kAtomCols,
                "a tile's columns map to one atom's scale columns");
};

// fp32 input (quantize_f32.cuh): 64x128 tiles of 32 KiB, the 16-bit tile's shared memory.
template <class Format = Mxfp8>
struct ConfigF32 {
  using BlockFormat = Format;
  static constexpr int kThreads = Config<kAtomRows, Format>::kThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRows = 64;                                 // tile rows (M)
  static constexpr int kChunk = 4;                                 // fp32 per 16-byte load
  static constexpr int kChunksPerRow = kTileCols / kChunk;         // 32
  static constexpr int kChunksPerBlock = kPiece / kChunk;          // 8
  static constexpr int kLoads = kRows * kChunksPerRow / kThreads;  // 8: rows per warp
  static constexpr int kBands = kRows / kPiece;                    // 2 bands of 32 rows
  static_assert(kLoads * kWarps == kRows, "warp w loads rows 8w..8w+7, one per instruction");
  static_assert(kRows * (kTileCols / kPiece) == kThreads, "rowwise: one piece per thread");
  static_assert(kTileCols * kBands == kThreads, "colwise: one piece per thread");
  static_assert(sizeof(uint4[kRows][kChunksPerRow]) ==
                    sizeof(uint4[Config<>::kRows][Config<>::kChunksPerRow]),
                "the fp32 tile uses the 16-bit tile's shared memory");
};

struct alignas(16) SharedStorage {
  // The staged 16-bit tile, [row][16-byte chunk ^ tile_key()] (fp32: ConfigF32<>'s layout).
  alignas(16) uint4 tile[Config<>::kRows][Config<>::kChunksPerRow];
  alignas(16) uint8_t row_atom[kAtomBytes];  // s_row atom of this tile
  alignas(16) uint8_t col_atom[kAtomBytes];  // s_col atom (blocked layouts) or [k][band] (plain)
};
constexpr int kSmemLimit = 48 * 1024;  // what a launch may use without an opt-in attribute
static_assert(sizeof(SharedStorage) <= kSmemLimit, "the tile must fit 48 KB");
static_assert(sizeof(SharedStorage) * Config<>::kMinBlocksPerSm <= 227 * 1024,
              "4 CTAs must fit one SM");

// The outputs of a variant as the kernels test them.
template <Variant kV>
struct VariantTraits {
  static constexpr bool kRouted =
      kV == Variant::kRoutedRowwise || kV == Variant::kRoutedColwise || kV == Variant::kRoutedDual;
  static constexpr bool kGrouped = kV == Variant::kGroupedRowwise ||
                                   kV == Variant::kGroupedColwise || kV == Variant::kGroupedDual ||
                                   kRouted;
  static constexpr bool kRowwise = kV == Variant::kRowwise || kV == Variant::kDual ||
                                   kV == Variant::kGroupedRowwise || kV == Variant::kGroupedDual ||
                                   kV == Variant::kRoutedRowwise || kV == Variant::kRoutedDual;
  static constexpr ColScales kCol =
      kV == Variant::kColwisePlain                                    ? ColScales::kPlain
      : kV == Variant::kColwise || kV == Variant::kDual               ? ColScales::kBlocked
      : kV == Variant::kGroupedColwise || kV == Variant::kGroupedDual ? ColScales::kKGroups
      : kV == Variant::kRoutedColwise || kV == Variant::kRoutedDual   ? ColScales::kKGroups
                                                                      : ColScales::kNone;
  static constexpr bool kColwise = kCol != ColScales::kNone;
};

// What a tile kernel of variant kV takes: the routed kernels also read the route.
template <Variant kV>
using TileParamsOf = std::conditional_t<VariantTraits<kV>::kRouted, RoutedTileParams, TileParams>;

// A CTA appended to a grouped launch (past p.tiles): zero fill of the grouped scales' slack, and
// the status word (zero-fill CTA 0).
template <bool kRowwise, ColScales kCol>
__device__ __forceinline__ void appended_cta(const TileParams& p) {
  zero_fill_slack(p.offs, p.num_groups, p.M, kRowwise ? p.s_row : nullptr,
                  kCol == ColScales::kKGroups ? p.s_col : nullptr, p.K, blockIdx.x - p.tiles,
                  p.status);
}

// Every tile kernel starts here: nothing touches memory before the work before it is done; a CTA
// appended to a grouped launch fills the scales' slack and has no tile (false: the kernel ends).
// FP8 blockwise: groups of 128-multiples place nothing (the outputs are dense), so the one appended
// CTA writes the status word only.
template <class Format, Variant kV>
__device__ __forceinline__ bool starts_tile(const TileParams& p) {
  using V = VariantTraits<kV>;
  ptx::griddepcontrol_wait();
  if (V::kGrouped && blockIdx.x >= p.tiles) {
    if constexpr (is_blocked_v<Format>) {
      appended_cta<V::kRowwise, V::kCol>(p);
    } else if (p.status != nullptr && threadIdx.x < 32) {
      const int32_t bits = offs_status_warp<Format::kBlock>(p.offs, p.num_groups, p.M);
      if (threadIdx.x == 0) *p.status = bits;
    }
    return false;
  }
  return true;
}

// This CTA's tile: its first row and column, its rows (a multiple of 32, at most kRows) and
// columns. Tile order: K fastest, except for the colwise-only variants (kRowwise false), whose
// only output runs along M.
struct TileSpan {
  int64_t m0, k0;
  int rows, cols;
};
template <bool kRowwise, int kRows>
__device__ __forceinline__ TileSpan tile_span(const TileParams& p) {
  const auto [slow, fast] = p.fast.split(blockIdx.x);
  const int64_t m0 = int64_t(kRowwise ? slow : fast) * kRows;
  const int64_t k0 = int64_t(kRowwise ? fast : slow) * kTileCols;
  return {m0, k0, static_cast<int>(min(int64_t(kRows), p.M - m0)),
          static_cast<int>(min(int64_t(kTileCols), p.K - k0))};
}

// ---- the block math of 16-bit input ----
// One 32-element block into its 32 bytes q, returning its scale byte (amax, E8M0 scale, e4m3; NaN
// and Inf blocks as 0x7F). Row blocks come as the 4 chunks of a staged row, column blocks as the 16
// words ldmatrix.trans hands over (two elements each, element order).
template <DType kIn, ScalingMode kMode>
__device__ __forceinline__ uint8_t convert_row_block(const uint4 (&v)[Config<>::kChunksPerBlock],
                                                     uint4 (&q)[2]) {
  const BlockScale bs = block_scale<kIn, kMode>(row_piece_amax<kIn>(v));
  convert_row_piece<kIn>(v, bs, q);
  return bs.s;
}
template <DType kIn, ScalingMode kMode>
__device__ __forceinline__ uint8_t convert_col_block(const uint32_t (&w)[kBlock / 2],
                                                     uint4 (&q)[2]) {
  const BlockScale bs = block_scale<kIn, kMode>(col_piece_amax<kIn>(w));
  convert_col_piece<kIn>(w, bs, q);
  return bs.s;
}

// ---- load ----
// The cp.async copies of a thread: chunk `chunk` (lane % 16) of rows row0 + 2i, row0 =
// kRowsPerWarp * warp + lane / 16. Warp w loads exactly the rows its rowwise pass owns, so the
// rowwise pass needs only __syncwarp and runs while other warps still wait for their loads. Chunks
// past the edge of x (rows, chunk_in: how much of the tile lies inside it) are staged as zeros
// (cp.async, not register loads: docs/performance.md, "The design that was kept").
template <class Cfg>
__device__ __forceinline__ void issue_loads(uint4 (*tile)[Config<>::kChunksPerRow],
                                            const TileParams& p, int64_t m0, int64_t k0, int rows,
                                            int chunk, int row0, bool chunk_in) {
  constexpr int kLoadStep = 32 / Cfg::kChunksPerRow;  // 2 rows per warp instruction
  const uint16_t* x = p.x + (m0 + row0) * p.K + k0 + chunk * Cfg::kChunk;
  const int64_t load_step = kLoadStep * p.K;
  const int load_key = tile_key(row0, chunk / 8);  // rows row0 + 2i
#pragma unroll
  for (int i = 0; i < Cfg::kLoads; ++i) {
    const int row = row0 + i * kLoadStep;
    const bool in = chunk_in && row < rows;
    ptx::cp_async_cg_16(&tile[row][chunk ^ load_key], in ? x : p.x, in);
    x += load_step;
  }
}
// The same with the thread's coordinates worked out here (cols: the tile's columns inside x).
template <class Cfg>
__device__ __forceinline__ void load_tile(uint4 (*tile)[Config<>::kChunksPerRow],
                                          const TileParams& p, int64_t m0, int64_t k0, int rows,
                                          int cols, int warp, int lane) {
  const int chunk = lane % Cfg::kChunksPerRow;
  const int row0 = warp * Cfg::kRowsPerWarp + lane / Cfg::kChunksPerRow;
  issue_loads<Cfg>(tile, p, m0, k0, rows, chunk, row0, chunk * Cfg::kChunk < cols);
}

// ---- load, routed ----
// Each thread holds the RouteEntry of one row of its warp's rows (row kRowsPerWarp * warp + lane %
// kRowsPerWarp: one 8-byte load per thread, no barrier) and the copies of a row shuffle it from
// there. A row past the tile (`rows`) or without a source (-1) stages zeros.
template <int kRowsPerWarp>
__device__ __forceinline__ RouteEntry route_entry(const RoutedTileParams& p, int64_t m0, int rows,
                                                  int warp, int lane) {
  const int row = warp * kRowsPerWarp + lane % kRowsPerWarp;
  RouteEntry e{-1, 1.f};
  if (row < rows) {
    const int2 v = *reinterpret_cast<const int2*>(p.route + m0 + row);
    e = {v.x, __int_as_float(v.y)};
  }
  return e;
}

// The chunk of 16-bit or fp32 values times `f`, each product rounded once to the input type (RNE).
template <DType kIn>
__device__ __forceinline__ uint4 scale_chunk(uint4 c, float f) {
  uint32_t* w = reinterpret_cast<uint32_t*>(&c);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kIn == DType::kFloat32) {
      w[i] = __float_as_uint(mul_rn(__uint_as_float(w[i]), f));
    } else if constexpr (kIn == DType::kBFloat16) {
      w[i] =
          ptx::cvt_rn_bf16x2_f32(mul_rn(Widen<kIn>::hi(w[i]), f), mul_rn(Widen<kIn>::lo(w[i]), f));
    } else {
      w[i] =
          ptx::cvt_rn_f16x2_f32(mul_rn(Widen<kIn>::hi(w[i]), f), mul_rn(Widen<kIn>::lo(w[i]), f));
    }
  }
  return c;
}

// issue_loads of a routed launch: the same copies, each from its row's source row of x.
template <class Cfg>
__device__ __forceinline__ void gather_tile(uint4 (*tile)[Config<>::kChunksPerRow],
                                            const RoutedTileParams& p, int64_t k0, int cols,
                                            const RouteEntry& mine, int warp, int lane) {
  constexpr int kLoadStep = 32 / Cfg::kChunksPerRow;  // 2 rows per warp instruction
  const int chunk = lane % Cfg::kChunksPerRow;
  const int local0 = lane / Cfg::kChunksPerRow;  // the warp's row of copy 0
  const int row0 = warp * Cfg::kRowsPerWarp + local0;
  const bool chunk_in = chunk * Cfg::kChunk < cols;
  const uint16_t* x = p.x + k0 + chunk * Cfg::kChunk;
  const int load_key = tile_key(row0, chunk / 8);  // rows row0 + 2i
#pragma unroll
  for (int i = 0; i < Cfg::kLoads; ++i) {
    const int src = __shfl_sync(0xFFFFFFFFu, mine.row, local0 + i * kLoadStep);
    const bool in = chunk_in && src >= 0;
    ptx::cp_async_cg_16(&tile[row0 + i * kLoadStep][chunk ^ load_key],
                        in ? x + int64_t(src) * p.K : p.x, in);
  }
}

// With a scale: the thread's own copies of gather_tile, once complete (after cp.async.wait_all),
// times their rows' factors. Rows without a source stay zero.
template <class Cfg, DType kIn>
__device__ __forceinline__ void scale_gathered(uint4 (*tile)[Config<>::kChunksPerRow],
                                               const RoutedTileParams& p, int cols,
                                               const RouteEntry& mine, int warp, int lane) {
  if (!p.scaled) return;
  constexpr int kLoadStep = 32 / Cfg::kChunksPerRow;
  const int chunk = lane % Cfg::kChunksPerRow;
  const int local0 = lane / Cfg::kChunksPerRow;
  const int row0 = warp * Cfg::kRowsPerWarp + local0;
  const bool chunk_in = chunk * Cfg::kChunk < cols;
  const int load_key = tile_key(row0, chunk / 8);
#pragma unroll
  for (int i = 0; i < Cfg::kLoads; ++i) {
    const int src = __shfl_sync(0xFFFFFFFFu, mine.row, local0 + i * kLoadStep);
    const float f = __shfl_sync(0xFFFFFFFFu, mine.scale, local0 + i * kLoadStep);
    if (chunk_in && src >= 0) {
      uint4& c = tile[row0 + i * kLoadStep][chunk ^ load_key];
      c = scale_chunk<kIn>(c, f);
    }
  }
}

// ---- rowwise ----
// One whole 1x32 block v[0..3] per thread, converted and stored: lanes 2i and 2i+1 hold adjacent
// blocks of one row (the stores into each happen where `first` / `second` say, store_block_pair).
template <DType kIn, ScalingMode kMode>
__device__ __forceinline__ uint8_t rowwise_block(const uint4 (&v)[Config<>::kChunksPerBlock],
                                                 uint8_t* q_pair, bool first, bool second) {
  uint4 q[2];
  const uint8_t s = convert_row_block<kIn, kMode>(v, q);
  store_block_pair(q_pair, q, first, second);
  return s;
}

// Warp w owns rows kRowsPerWarp*w.. (16 or 8); lane l takes blocks l and l+32 of them (64 rows:
// block l): block b is row kRowsPerWarp*w + b/4, columns 32*(b%4)... Lanes 2i and 2i+1 hold
// adjacent blocks of one row and store them as one pair. Each block's scale byte is staged at its
// atom_offset in row_atom.
template <class Cfg, DType kIn, ScalingMode kMode>
__device__ __forceinline__ void rowwise_blocks(const uint4 (*tile)[Config<>::kChunksPerRow],
                                               const TileParams& p, int64_t m0, int64_t k0,
                                               int rows, int cols, int warp, int lane,
                                               uint8_t* row_atom) {
  const int blk = lane % Cfg::kBlocksPerRow;
  const int row = warp * Cfg::kRowsPerWarp + lane / Cfg::kBlocksPerRow;  // + 8 for the second
  constexpr int kRowStep = 32 / Cfg::kBlocksPerRow;                      // 8
  // The pair's two adjacent blocks start at the even lane's block; this lane stores 16 bytes into
  // each.
  const int pair = blk & ~1;
  uint8_t* q_pair = p.q_row + (m0 + row) * p.K + k0 + pair * kBlock + (lane & 1) * 16;
  // row % 32 < 24 and the second block is 8 rows on: its atom offset is the first one's + 8 * 16.
  const unsigned atom = atom_offset<unsigned>(row, blk);
#pragma unroll
  for (int j = 0; j < Cfg::kRowBlocksPerThread; ++j) {
    const int r = row + j * kRowStep;
    uint4 b[Cfg::kChunksPerBlock];
#pragma unroll
    for (int i = 0; i < Cfg::kChunksPerBlock; ++i) {
      b[i] = tile[r][(blk * Cfg::kChunksPerBlock + i) ^ tile_key(r, blk / 2)];
    }
    const bool row_in = r < rows;
    if constexpr (is_blocked_v<typename Cfg::BlockFormat>) {
      row_atom[atom + j * kRowStep * 16] =
          rowwise_block<kIn, kMode>(b, q_pair + j * kRowStep * p.K, row_in && pair * kBlock < cols,
                                    row_in && (pair + 1) * kBlock < cols);
    } else {
      // FP8 blockwise: the row's four lanes hold its block; the first stores the factor.
      uint4 q[2];
      const float d = blockwise_row_piece<kIn, kMode>(b, q);
      store_block_pair(q_pair + j * kRowStep * p.K, q, row_in && pair * kBlock < cols,
                       row_in && (pair + 1) * kBlock < cols);
      if (blk == 0 && row_in) {
        reinterpret_cast<float*>(
            p.s_row)[factor_offset(m0 + r, k0 / Cfg::BlockFormat::kBlock, p.M)] = d;
      }
    }
  }
}

// ---- colwise ----
// The 8-column group that piece set g (0 .. kGroupsPerPass-1) of a warp's colwise pass converts.
// 128 rows: groups w and w + 8, one a pass. 64 rows: groups w and w ^ 12 in one pass; their chunks
// differ in bit 2, so every 8-lane ldmatrix phase (rows R, R+1, R+32, R+33 of each group) still
// hits 8 bank groups (tile_key).
template <class Cfg>
__device__ __forceinline__ int col_group(int warp, int pass, int g) {
  return Cfg::kGroupsPerPass == 1 ? warp + pass * Cfg::kWarps : warp ^ (12 * g);
}

// A warp pass converts 4 pieces, each one 32-row band of an 8-column group (128 rows: one group,
// bands 0-3; 64 rows: two groups, bands 0-1). Lane 8i+j addresses row 32*band + 8n + 2i + j%2 of
// piece j/2 for ldmatrix n, so that (ptx.cuh) lane t receives column t/4 of piece t%4 at rows
// 2(4n+i), 2(4n+i)+1 of its band: word 4n+i of its whole 32x1 block, in the order quantize_words
// takes. Lanes 4j..4j+3 hold the pieces' blocks of q_col row 8*group + j, so neighbour lanes store
// whole sectors (store_block_pair) of 64 contiguous bytes of one row. Each block's scale goes to
// scale_sink(k, band, s). rows / cols: how much of the tile lies inside x. No transposed staging
// tile for q_col (docs/performance.md, "The design that was kept").
template <class Cfg, DType kIn, ScalingMode kMode, class ScaleSink>
__device__ __forceinline__ void colwise_blocks(const uint4 (*tile)[Config<>::kChunksPerRow],
                                               uint8_t* q_col_tile, int64_t M, int rows, int cols,
                                               const ScaleSink& scale_sink) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int addr_piece = (lane % 8) / 2;
  const int addr_row = kBlock * (addr_piece % Cfg::kBands) + 2 * (lane / 8) + lane % 2;  // + 8n
  const int piece = lane % 4;
  const int band = piece % Cfg::kBands;
#pragma unroll
  for (int u = 0; u < Cfg::kColPasses; ++u) {
    const int addr_group = col_group<Cfg>(warp, u, addr_piece / Cfg::kBands);
    const int chunk = addr_group ^ tile_key(addr_row, addr_group / 8);  // rows addr_row + 8n
    uint32_t w[kBlock / 2];
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const uint4 m = ptx::ldmatrix_x4_trans(&tile[addr_row + 8 * n][chunk]);
      w[4 * n] = m.x;
      w[4 * n + 1] = m.y;
      w[4 * n + 2] = m.z;
      w[4 * n + 3] = m.w;
    }
    const int k = 8 * col_group<Cfg>(warp, u, piece / Cfg::kBands) + lane / 4;
    uint4 q[2];
    // MXFP8: the block's scale byte. FP8 blockwise: the factor of the column's block, whose four
    // 32-row pieces lanes 4j..4j+3 hold (one band each).
    const auto s = [&] {
      if constexpr (is_blocked_v<typename Cfg::BlockFormat>) {
        return convert_col_block<kIn, kMode>(w, q);
      } else {
        return blockwise_col_piece<kIn, kMode>(w, q);
      }
    }();
    const bool row_in = k < cols;
    const int pair = band & ~1;
    store_block_pair(q_col_tile + int64_t(k) * M + pair * kBlock + (lane & 1) * 16, q,
                     row_in && pair * kBlock < rows, row_in && (pair + 1) * kBlock < rows);
    scale_sink(k, band, s);
  }
}

// ---- rowwise, colwise, scales with staged atoms ----
// The phases after the load of the tile kernels that stage their scale atoms: every 128-row tile,
// and the rowwise-only 64-row tiles. The loads must be complete for this thread (__syncwarp after
// cp.async.wait_all); the two atoms are stored after the CTA barrier that follows the colwise
// pass.
template <class Cfg, DType kIn, ScalingMode kMode, Variant kV>
__device__ __forceinline__ void staged_phases(SharedStorage& smem, const TilePlaces& places,
                                              const TileParams& p, int64_t m0, int64_t k0, int rows,
                                              int cols, int warp, int lane) {
  using V = VariantTraits<kV>;
  // ---- rowwise ----
  if constexpr (V::kRowwise) {
    rowwise_blocks<Cfg, kIn, kMode>(smem.tile, p, m0, k0, rows, cols, warp, lane, smem.row_atom);
  }
  __syncthreads();
  // ---- colwise ----
  if constexpr (V::kColwise) {
    uint8_t* const col_atom = smem.col_atom;
    colwise_blocks<Cfg, kIn, kMode>(smem.tile, p.q_col + k0 * p.M + m0, p.M, rows, cols,
                                    [&](int k, int b, uint8_t s) {
                                      if constexpr (V::kCol == ColScales::kPlain) {
                                        col_atom[k * kAtomCols + b] = s;
                                      } else {
                                        col_atom[atom_offset<unsigned>(k, b)] = s;
                                      }
                                    });
  }
  __syncthreads();
  // ---- scales ----
  const ScaleOut out{p.s_row, p.s_col, p.M, p.K};
  const bool last_m = m0 + Cfg::kRows >= p.M;
  if constexpr (V::kColwise)
    store_col_scales<V::kCol, Cfg::kBands>(out, m0, k0, smem.col_atom, places, last_m);
  if constexpr (V::kRowwise) {
    store_row_scales<V::kGrouped, Cfg::kBands>(out, m0, k0, smem.row_atom, places, last_m);
  }
}

// ---- rowwise, colwise, factors (FP8 blockwise) ----
// The phases after the load of a 128-row tile of FP8 blockwise (no atoms): each block's factor is
// stored by one of the four lanes that hold it, as fp32 at factor_offset (layout.h): along a warp's
// rows (rowwise) or columns (colwise) consecutive floats.
template <class Cfg, DType kIn, ScalingMode kMode, Variant kV>
__device__ __forceinline__ void factor_phases(SharedStorage& smem, const TileParams& p, int64_t m0,
                                              int64_t k0, int rows, int cols, int warp, int lane) {
  using V = VariantTraits<kV>;
  constexpr int kFormatBlock = Cfg::BlockFormat::kBlock;
  static_assert(Cfg::kRows == kFormatBlock && Cfg::kBands == 4,
                "a 128-row tile: a column's block is the four bands of one ldmatrix pass");
  // ---- rowwise ----
  if constexpr (V::kRowwise) {
    rowwise_blocks<Cfg, kIn, kMode>(smem.tile, p, m0, k0, rows, cols, warp, lane, nullptr);
  }
  __syncthreads();
  // ---- colwise ----
  if constexpr (V::kColwise) {
    float* const d_col = reinterpret_cast<float*>(p.s_col);
    colwise_blocks<Cfg, kIn, kMode>(smem.tile, p.q_col + k0 * p.M + m0, p.M, rows, cols,
                                    [&](int k, int band, float d) {
                                      if (band == 0 && k < cols)
                                        d_col[factor_offset(k0 + k, m0 / kFormatBlock, p.K)] = d;
                                    });
  }
}

// ---- host: the launch of one tile kernel ----

// CTAs after the tiles of a grouped launch: the zero fill of each grouped scale output (zero-fill
// CTA 0 also writes the status word), at least one when there is a status word to write. FP8
// blockwise: the status CTA alone (its grouped outputs are the dense ones).
template <class Format>
int64_t appended_ctas(const TileParams& p, bool rowwise, ColScales col) {
  if constexpr (!is_blocked_v<Format>) return p.status != nullptr ? 1 : 0;  // the status word
  int64_t n = 0;
  if (col == ColScales::kKGroups) n += zero_fill_col_ctas(p.M, p.K, p.num_groups);
  if (rowwise) n += zero_fill_row_ctas(p.K, p.num_groups);
  return p.status != nullptr && n == 0 ? 1 : n;
}

// One launch of a tile kernel of Family (Tile128, Tile64, TileF32: Family::kernel<Format, kIn,
// kMode, kV>()) for block format Format over the tiles of p and, grouped, the appended CTAs: the
// kernel of the runtime variant and scaling mode. kRouted: the 3 routed variants, else the 7
// others (FP8 blockwise: 6, no composed path), each in both scaling modes of the format (MXFP8:
// rceil, floor; FP8 blockwise: fp32, rceil). Instantiated once per format, family, input type and
// kRouted in instantiations/.
template <class Format, class Family, DType kIn, bool kRouted>
void launch_tile(const RoutedTileParams& p, Variant variant, ScalingMode mode,
                 cudaStream_t stream) {
  const auto launch = [&](auto v, auto m) {
    constexpr Variant kV = decltype(v)::value;
    using V = VariantTraits<kV>;
    const int64_t grid =
        p.tiles + (V::kGrouped ? appended_ctas<Format>(p, V::kRowwise, V::kCol) : 0);
    MXQ_CHECK(grid <= 0x7FFFFFFF, "too many tiles for one launch: ", grid);
    if (grid == 0) return;
    TileParamsOf<kV> params = p;  // TileParams: the routed fields dropped
    params.fast = Divider::of(static_cast<uint32_t>(V::kRowwise ? p.k_tiles : p.m_tiles));
    launch_dependent(Family::template kernel<Format, kIn, decltype(m)::value, kV>(),
                     static_cast<unsigned>(grid), Config<kAtomRows>::kThreads,
                     static_cast<int>(sizeof(SharedStorage)), stream, params);
  };
  const auto with_mode = [&](auto m) {
    const auto with_variant = [&](auto v) { launch(v, m); };
    if constexpr (kRouted) {
      dispatch<Variant::kRoutedRowwise, Variant::kRoutedColwise, Variant::kRoutedDual>(
          variant, with_variant);
    } else if constexpr (is_blocked_v<Format>) {
      dispatch<Variant::kRowwise, Variant::kColwise, Variant::kDual, Variant::kGroupedRowwise,
               Variant::kGroupedColwise, Variant::kGroupedDual, Variant::kColwisePlain>(
          variant, with_variant);
    } else {  // FP8 blockwise has no composed path (its factors need no placing)
      dispatch<Variant::kRowwise, Variant::kColwise, Variant::kDual, Variant::kGroupedRowwise,
               Variant::kGroupedColwise, Variant::kGroupedDual>(variant, with_variant);
    }
  };
  if constexpr (is_blocked_v<Format>) {
    dispatch<ScalingMode::kRceil, ScalingMode::kFloor>(mode, with_mode);
  } else {
    dispatch<ScalingMode::kFp32, ScalingMode::kRceil>(mode, with_mode);
  }
}

}  // namespace mxq::kernels
