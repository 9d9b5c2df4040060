// MXFP8 quantization kernels: rowwise 1x32, colwise 32x1 (transposed output) and the fused
// dual-axis kernel, all one templated tile kernel (docs/numerics.md §2-§10).
//
// x: bf16 or fp16 (M, K) row-major, M and K multiples of 32. Outputs, each optional per variant:
//   q_row (M, K) e4m3 and s_row in the blocked layout (M-groups layout with offs);
//   q_col (K, M) e4m3, row k = column k of x, with S_col plain (K, M/32) (the composed path),
//   blocked, or in the K-groups layout.
// Rounding: RCEIL or FLOOR scale (numerics.h), e4m3 by cvt.rn.satfinite; blocks with NaN/Inf become
// all 0x7F.
//
// One CTA quantizes one 128x128 tile, which maps to one 512-byte scale atom per axis; a launch whose
// 64-row tiles all fit in one wave of resident CTAs takes 64x128 tiles instead, half an atom each
// (tile_rows; measured in docs/performance.md). Per thread, a 64-row tile has half the work below.
//   ---- load ----     coalesced 16-byte cp.async copies straight into shared memory (a warp
//                      instruction reads two whole tile rows), 8 per thread: 32 KiB in flight per
//                      CTA, 4 CTAs per SM, no registers holding data; 16-byte chunks XOR-swizzled
//                      per row so that every access pattern below is conflict-free. A partial tile
//                      at the edge of x (M or K not a multiple of 128) stages zeros past the edge.
//   ---- rowwise ----  a thread quantizes two whole 1x32 blocks (amax, scale, convert; no
//                      shuffles), then swaps half a block with its neighbour lane so that every
//                      16-byte store completes a 32-byte sector.
//   ---- colwise ----  ldmatrix.trans hands each thread one whole 32x1 block (a column of one
//                      32-row block, as 16 words of two consecutive rows: the rowwise word order);
//                      it converts and stores the 32 bytes of its q_col row segment straight from
//                      registers, with the same neighbour exchange as the rowwise stores.
//   ---- scales ----   the two 512-byte atoms are staged, then stored after a barrier: whole (one
//                      16-byte store per lane of one warp) when the tile's rows or tokens map to
//                      one atom, else per 32-row block (grouped mode with 32-aligned groups).
//                      A 64-row tile of a kernel with colwise outputs stages no atom: each thread
//                      stores its own two scale bytes (scales.cuh store_scale_byte), so no barrier
//                      comes after the colwise pass (docs/performance.md, variants).
// NOTES:
// - Every variant (rowwise only, colwise only, fused, the composed path's colwise step) is this
//   one kernel; the template picks the outputs, and its Math policy the per-block conversion
//   (Mxfp8Math; ProbeMath for `mxq bench`'s data-movement probe: the same bytes, no math). Tile
//   order: K fastest, except colwise only, whose only output runs along M (consecutive CTAs then
//   continue the same 128 rows of q_col).
// - Padding is computed, not special-cased: the zeros staged past the edge of x quantize to scale
//   byte 0, which is exactly the padding value of the blocked layout; only data stores past the
//   edge are skipped.
// - Grouped launches: the two layouts need prefix sums over the groups. In every CTA, warp 0 scans
//   offs (common.cuh scan_groups: warp scans, no table, no CTA barrier; cheaper than a second
//   launch) and plans the places of the tile's scale chunks (scales.cuh plan_tile_places) while
//   its own tile loads are in flight and the other warps go on with their rows; the barrier after
//   the rowwise phase publishes them. Launches under one wave (64-row tiles) plan before their
//   loads instead: there every CTA issues its loads at once, and a plan behind them cost the
//   grouped launch 10% (docs/performance.md, "Grouped launches under one wave").
//   docs/performance.md has what the earlier forms cost (every storing thread searching a shared
//   table; a table built by the whole CTA with 7 barriers).
// - The loads are cp.async, not ld.global into registers and st.shared: the same bytes in flight,
//   but no registers wait for them and no store pass follows, and grouped warp 0's planning hides
//   behind its loads (in launches of more than one wave) instead of following them. On the H200
//   that took fused from 85-88% to 88-92% of the copy roof, rowwise and colwise alone to ~100%
//   (docs/performance.md).
// - Plain stores: with the cp.async loads, .cs stores no longer paid here (common.cuh store16).
// - q_col is stored straight from registers as whole 32-byte sectors (neighbour lanes exchange
//   half a block): no transposed staging tile, no extra barrier. This is what took fused from
//   76-82% to 85-89% of the copy roof on the H200.
// - Shared memory stays under the 48 KB that needs no opt-in attribute (33.8 KB), so launches set
//   no function attribute (a driver call per launch).
// - The variants tried and rejected, with their measurements, are in docs/performance.md.
#include <cuda_runtime.h>

#include "common.cuh"
#include "launch.h"
#include "scales.cuh"
#include "tile_key.h"

namespace mxq::kernels {

// The 16-bit tile kernel's geometry for tiles of kRows x 128: 128 rows map to one whole scale atom
// per axis; 64 rows (launches under one wave of SMs, tile_rows) to half of each.
template <int kRows = kTile>
struct Config {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunk = 8;                                 // bf16 per 16-byte load
  static constexpr int kChunksPerRow = kTile / kChunk;             // 16
  static constexpr int kLoads = kRows * kChunksPerRow / kThreads;  // 8 (64 rows: 4) per thread
  static constexpr int kChunksPerBlock = kBlock / kChunk;          // 4
  static constexpr int kBlocksPerRow = kTile / kBlock;             // 4
  static constexpr int kRowBlocksPerThread = kRows * kBlocksPerRow / kThreads;  // 2 (1)
  static constexpr int kRowsPerWarp = kRows / kWarps;                           // 16 (8)
  static constexpr int kChunks = kRows / kBlock;  // 32-row blocks per column: 4 (2) atom slots
  static constexpr int kColGroups = kTile / 8;    // 8-column groups, one ldmatrix column set each
  // An ldmatrix pass hands a warp 4 (group, block) slots: 1 group x 4 blocks, or 2 x 2.
  static constexpr int kGroupsPerPass = 4 / kChunks;
  static constexpr int kColPasses = kColGroups / (kWarps * kGroupsPerPass);  // 2 (1)
  static constexpr int kMinBlocksPerSm = 4;
  static_assert(kRows == kTile || kRows == kTile / 2, "tiles of 128 or 64 rows");
  static_assert(kThreads % 32 == 0, "threads must be whole warps");
  static_assert(kTile % kBlock == 0, "tile must hold whole blocks");
  static_assert(kRowsPerWarp * kBlocksPerRow == 32 * kRowBlocksPerThread,
                "a warp owns kRowsPerWarp rows: lane l takes blocks l (and l+32) of them");
  static_assert(kBlocksPerRow % 2 == 0,
                "neighbour lanes pair up on adjacent blocks for full-sector stores");
  static_assert(kColPasses * kWarps * kGroupsPerPass == kColGroups && kGroupsPerPass * kChunks == 4,
                "each warp's ldmatrix passes cover its groups' blocks, 4 slots a pass");
  static_assert(kTile / kBlock == kAtomCols && kTile == kAtomRows,
                "a 128-row tile maps to one 128x4 scale atom");
};

struct alignas(16) SharedStorage {
  alignas(16) uint4 tile[kTile][kTile / 8];  // 16-bit tile, [row][16-byte chunk ^ tile_key()]
  alignas(16) uint8_t row_atom[kAtomBytes];  // s_row atom of this tile
  alignas(16) uint8_t col_atom[kAtomBytes];  // s_col atom (blocked layouts) or [k][block] (plain)
};
constexpr int kSmemLimit = 48 * 1024;  // what a launch may use without an opt-in attribute
static_assert(sizeof(SharedStorage) <= kSmemLimit, "the tile must fit 48 KB");
static_assert(sizeof(SharedStorage) * Config<>::kMinBlocksPerSm <= 227 * 1024,
              "4 CTAs must fit one SM");

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
  Divider fast;  // by the tiles along the axis a CTA index walks fastest (launch_variant)
  int rows;      // tile height: 128 or 64 (16-bit input), 64 (fp32); for the launcher
};

// The first row and column of this CTA's tile. Tile order: K fastest, except for the colwise-only
// kernel (kRowwise false), whose only output runs along M.
struct TileOrigin {
  int64_t m0, k0;
};
template <bool kRowwise, int kRows>
__device__ __forceinline__ TileOrigin tile_origin(const TileParams& p) {
  const auto [slow, fast] = p.fast.split(blockIdx.x);
  return {int64_t(kRowwise ? slow : fast) * kRows, int64_t(kRowwise ? fast : slow) * kTile};
}

// ---- the block math: the 16-bit tile kernel's policy ----
//
// Math::row / Math::col turn one 32-element block into its 32 bytes q and return its scale byte;
// row takes the block as the 4 chunks of a staged row, col as the 16 words ldmatrix.trans hands
// over (two elements each, element order). The kernel consults its Math there and nowhere else.
// Mxfp8Math: the library's (amax, E8M0 scale, e4m3; NaN/Inf blocks as 0x7F).
template <DType kIn, ScaleRounding kRule>
struct Mxfp8Math {
  static __device__ __forceinline__ uint8_t row(const uint4 (&v)[Config<>::kChunksPerBlock],
                                                uint4 (&q)[2]) {
    uint32_t m2 = 0;
#pragma unroll
    for (int i = 0; i < Config<>::kChunksPerBlock; ++i) {
      m2 = ptx::max_u16x2(m2,
                          ptx::max_u16x2(ptx::max_u16x2(v[i].x & kAbsMask2, v[i].y & kAbsMask2),
                                         ptx::max_u16x2(v[i].z & kAbsMask2, v[i].w & kAbsMask2)));
    }
    const BlockScale bs = block_scale<kIn, kRule>(amax_fold<kIn>(m2));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      q[h] = make_uint4(bs.select(quantize_words<kIn>(v[2 * h].x, v[2 * h].y, bs.r)),
                        bs.select(quantize_words<kIn>(v[2 * h].z, v[2 * h].w, bs.r)),
                        bs.select(quantize_words<kIn>(v[2 * h + 1].x, v[2 * h + 1].y, bs.r)),
                        bs.select(quantize_words<kIn>(v[2 * h + 1].z, v[2 * h + 1].w, bs.r)));
    }
    return bs.s;
  }
  static __device__ __forceinline__ uint8_t col(const uint32_t (&w)[kBlock / 2], uint4 (&q)[2]) {
    uint32_t m2 = 0;
#pragma unroll
    for (int i = 0; i < kBlock / 2; ++i) m2 = amax_step<kIn>(m2, w[i]);
    const BlockScale bs = block_scale<kIn, kRule>(amax_fold<kIn>(m2));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t* v = w + 8 * h;
      q[h] = make_uint4(bs.select(quantize_words<kIn>(v[0], v[1], bs.r)),
                        bs.select(quantize_words<kIn>(v[2], v[3], bs.r)),
                        bs.select(quantize_words<kIn>(v[4], v[5], bs.r)),
                        bs.select(quantize_words<kIn>(v[6], v[7], bs.r)));
    }
    return bs.s;
  }
};

// ProbeMath: `mxq bench`'s data-movement probe (op "probe", launch_quantize_probe), a stand-in with
// no math: each byte of q is the high byte of its 16-bit element, every scale byte 127. The kernel
// around it loads, stages, reads and stores exactly what it does with Mxfp8Math, so the probe times
// the design's data movement alone: its ceiling. Its outputs are not MXFP8.
struct ProbeMath {
  static constexpr uint8_t kScale = 127;
  // Bytes 1 and 3 of w0, then of w1: the high bytes of four elements, element order kept.
  static __device__ __forceinline__ uint32_t high_bytes(uint32_t w0, uint32_t w1) {
    return __byte_perm(w0, w1, 0x7531);
  }
  static __device__ __forceinline__ uint8_t row(const uint4 (&v)[Config<>::kChunksPerBlock],
                                                uint4 (&q)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      q[h] = make_uint4(high_bytes(v[2 * h].x, v[2 * h].y), high_bytes(v[2 * h].z, v[2 * h].w),
                        high_bytes(v[2 * h + 1].x, v[2 * h + 1].y),
                        high_bytes(v[2 * h + 1].z, v[2 * h + 1].w));
    }
    return kScale;
  }
  static __device__ __forceinline__ uint8_t col(const uint32_t (&w)[kBlock / 2], uint4 (&q)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t* v = w + 8 * h;
      q[h] = make_uint4(high_bytes(v[0], v[1]), high_bytes(v[2], v[3]), high_bytes(v[4], v[5]),
                        high_bytes(v[6], v[7]));
    }
    return kScale;
  }
};

// ---- the three phases of a tile ----

// Rowwise: one whole 1x32 block v[0..3] per thread; lanes 2i and 2i+1 hold adjacent blocks of one
// row (the stores into each happen where `first` / `second` say, see store_block_pair).
template <class Math>
__device__ __forceinline__ uint8_t rowwise_block(const uint4 (&v)[Config<>::kChunksPerBlock],
                                                 uint8_t* q_pair, bool first, bool second) {
  uint4 q[2];
  const uint8_t s = Math::row(v, q);
  store_block_pair(q_pair, q, first, second);
  return s;
}

// The 8-column group that slot set g (0 .. kGroupsPerPass-1) of a warp's colwise pass converts.
// 128 rows: groups w and w + 8, one a pass. 64 rows: groups w and w ^ 12 in one pass; their chunks
// differ in bit 2, so every 8-lane ldmatrix phase (rows R, R+1, R+32, R+33 of each group) still
// hits 8 bank groups (tile_key).
template <class Cfg>
__device__ __forceinline__ int col_group(int warp, int pass, int g) {
  return Cfg::kGroupsPerPass == 1 ? warp + pass * Cfg::kWarps : warp ^ (12 * g);
}

// Colwise: a warp pass converts 4 slots, each one 32-row block of an 8-column group (128 rows: one
// group, blocks 0-3; 64 rows: two groups, blocks 0-1). Lane 8i+j addresses row 32*blk + 8n + 2i +
// j%2 of slot j/2 for ldmatrix n, so that (ptx.cuh) lane t receives column t/4 of slot t%4 at rows
// 2(4n+i), 2(4n+i)+1 of its block: word 4n+i of its whole 32x1 block, in the order quantize_words
// takes. Lanes 4j..4j+3 hold the slots' blocks of q_col row 8*group + j, so neighbour lanes store
// whole sectors (store_block_pair) of 64 contiguous bytes of one row. Each block's scale goes to
// scale_sink(k, blk, s). rows / cols: how much of the tile lies inside x.
template <class Cfg, class Math, class ScaleSink>
__device__ __forceinline__ void colwise_blocks(const uint4 (*tile)[kTile / 8], uint8_t* q_col_tile,
                                               int64_t M, int rows, int cols,
                                               const ScaleSink& scale_sink) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int addr_slot = (lane % 8) / 2;
  const int addr_row = kBlock * (addr_slot % Cfg::kChunks) + 2 * (lane / 8) + lane % 2;  // + 8n
  const int slot = lane % 4;
  const int blk = slot % Cfg::kChunks;
#pragma unroll
  for (int u = 0; u < Cfg::kColPasses; ++u) {
    const int addr_group = col_group<Cfg>(warp, u, addr_slot / Cfg::kChunks);
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
    const int k = 8 * col_group<Cfg>(warp, u, slot / Cfg::kChunks) + lane / 4;
    uint4 q[2];
    const uint8_t s = Math::col(w, q);
    const bool row_in = k < cols;
    const int pair = blk & ~1;
    store_block_pair(q_col_tile + int64_t(k) * M + pair * kBlock + (lane & 1) * 16, q,
                     row_in && pair * kBlock < rows, row_in && (pair + 1) * kBlock < rows);
    scale_sink(k, blk, s);
  }
}

// A CTA appended to a grouped launch (past p.tiles): zero fill of the grouped scales' slack, and the
// status word (zero-fill CTA 0). Shared by the 16-bit and the fp32 tile kernels.
template <bool kRowwise, ColScales kCol>
__device__ __forceinline__ void appended_cta(const TileParams& p) {
  zero_fill_slack(p.offs, p.num_groups, p.M, kRowwise ? p.s_row : nullptr,
                  kCol == ColScales::kKGroups ? p.s_col : nullptr, p.K, blockIdx.x - p.tiles,
                  p.status);
}

// Math: the block math (Mxfp8Math<kIn, kRule>, or ProbeMath). kGrouped: offs given (s_row in the
// M-groups layout, s_col in the K-groups layout when kCol says so; the CTAs past p.tiles zero the
// slack and write the status word). kRows: the tile height, 128 or 64 (Config).
template <class Math, bool kRowwise, ColScales kCol, bool kGrouped, int kRows>
__global__ void __launch_bounds__(Config<>::kThreads, Config<>::kMinBlocksPerSm)
    quantize_tile_kernel(const TileParams p) {
  using Cfg = Config<kRows>;
  constexpr bool kColwise = kCol != ColScales::kNone;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  ptx::griddepcontrol_wait();  // nothing touches memory before the work before it is done

  if (kGrouped && blockIdx.x >= p.tiles) {  // the CTAs appended by grouped launches
    appended_cta<kRowwise, kCol>(p);
    return;
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const auto [m0, k0] = tile_origin<kRowwise, kRows>(p);
  const int rows = static_cast<int>(min(int64_t(kRows), p.M - m0));  // multiples of 32
  const int cols = static_cast<int>(min(int64_t(kTile), p.K - k0));

  // ---- load ---- coalesced: a warp instruction reads two whole 256-byte tile rows. Warp w loads
  // exactly the 16 (8) rows its rowwise pass owns (row 16w + 2i + lane/16, chunk lane%16), so the
  // rowwise pass needs only __syncwarp and runs while other warps still wait for their loads.
  // Every chunk also goes to the staged tile; chunks past the edge of x are staged as zeros.
  const int chunk = lane % Cfg::kChunksPerRow;
  const int row0 = warp * Cfg::kRowsPerWarp + lane / Cfg::kChunksPerRow;
  constexpr int kLoadStep = 32 / Cfg::kChunksPerRow;  // 2 rows per warp instruction
  const bool chunk_in = chunk * Cfg::kChunk < cols;
  // Grouped: warp 0 plans the tile's scale places, before its loads in a launch under one wave
  // (kRows 64), else while they are in flight; the other warps go on, the barrier after rowwise
  // publishes the places.
  __shared__ TilePlaces places;
  constexpr bool kPlanFirst = kRows < kTile;
  const auto plan = [&, m0 = m0, k0 = k0] {
    plan_tile_places<Cfg::kChunks>(places, p.offs, p.num_groups, p.M, m0, k0, p.K, kRowwise,
                                   kCol == ColScales::kKGroups);
  };
  if (kGrouped && kPlanFirst && warp == 0) plan();
  const uint16_t* x = p.x + (m0 + row0) * p.K + k0 + chunk * Cfg::kChunk;
  const int64_t load_step = kLoadStep * p.K;
  const int load_key = tile_key(row0, chunk / 8);  // rows row0 + 2i
#pragma unroll
  for (int i = 0; i < Cfg::kLoads; ++i) {
    const int row = row0 + i * kLoadStep;
    const bool in = chunk_in && row < rows;
    ptx::cp_async_cg_16(&smem.tile[row][chunk ^ load_key], in ? x : p.x, in);
    x += load_step;
  }
  if (kGrouped && !kPlanFirst && warp == 0) plan();
  // 64-row tiles with colwise outputs: each thread stores its own scale bytes (its row block's and
  // its column block's), so no atom is staged and no barrier follows the colwise pass (0.97x the
  // fused time at 512x4096; the rowwise-only kernel lost 2-3% and keeps its atom). The dense places
  // are worked out here, while the loads are in flight.
  constexpr bool kOwnScales = kRows < kTile && kColwise;
  static_assert(!kOwnScales || (Cfg::kRowBlocksPerThread == 1 && Cfg::kColPasses == 1),
                "a thread of a 64-row tile converts one row block and one column block");
  const int row_chunk = warp * Cfg::kRowsPerWarp / kBlock;  // the 32-row chunk of the warp's rows
  ChunkPlace row_place = kNotPlaced, col_place = kNotPlaced;
  if constexpr (kOwnScales && !kGrouped) {
    const bool last = m0 + kRows >= p.M;
    const int col_chunk = lane % 4 % Cfg::kChunks;  // the 32-row block of its colwise block
    row_place =
        blocked_row_place(m0, row_chunk, k0, p.K / kBlock, last && row_chunk == Cfg::kChunks - 1);
    col_place = blocked_col_place(m0, col_chunk, k0, p.M, last && col_chunk == Cfg::kChunks - 1);
  }
  ptx::cp_async_wait_all();
  __syncwarp();
  // ---- rowwise ---- warp w owns rows 16w..16w+15 (64 rows: 8w..8w+7); lane l takes blocks l and
  // l+32 of them (64 rows: block l): block b is row 16w + b/4 (8w + b/4), columns 32*(b%4)..
  uint8_t row_scale = 0;  // 64 rows: this thread's scale byte, at byte row_at of its chunk's slot
  unsigned row_at = 0;
  if constexpr (kRowwise) {
    const int blk = lane % Cfg::kBlocksPerRow;
    const int row =
        warp * Cfg::kRowsPerWarp + lane / Cfg::kBlocksPerRow;  // + 8 for the second block
    constexpr int kRowStep = 32 / Cfg::kBlocksPerRow;          // 8
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
        b[i] = smem.tile[r][(blk * Cfg::kChunksPerBlock + i) ^ tile_key(r, blk / 2)];
      }
      const bool row_in = r < rows;
      const uint8_t s =
          rowwise_block<Math>(b, q_pair + j * kRowStep * p.K, row_in && pair * kBlock < cols,
                              row_in && (pair + 1) * kBlock < cols);
      if constexpr (kOwnScales) {
        row_scale = s;
      } else {
        smem.row_atom[atom + j * kRowStep * 16] = s;
      }
    }
    row_at = 16 * (row % kBlock) + blk;
    if constexpr (kOwnScales && !kGrouped)
      store_scale_byte(p.s_row, row_place, row_at, 4, row_scale);
  }
  __syncthreads();
  if constexpr (kOwnScales && kGrouped && kRowwise) {  // the places are published now
    store_scale_byte(p.s_row, places.row[row_chunk], row_at, 4, row_scale);
  }
  // ---- colwise ----
  if constexpr (kColwise) {
    // (m0 and k0 by init-capture: C++17 lambdas cannot capture structured bindings.)
    uint8_t* const col_atom = smem.col_atom;
    const auto scale_sink = [&, m0 = m0, k0 = k0](int k, int b, uint8_t s) {
      if constexpr (kCol == ColScales::kPlain) {
        if constexpr (!kOwnScales) {
          col_atom[k * kAtomCols + b] = s;
        } else if (k < cols && b * kBlock < rows) {
          p.s_col[(k0 + k) * (p.M / kBlock) + m0 / kBlock + b] = s;
        }
      } else if constexpr (!kOwnScales) {
        col_atom[atom_offset<unsigned>(k, b)] = s;
      } else {
        store_scale_byte(p.s_col, kGrouped ? places.col[b] : col_place, atom_offset<unsigned>(k, 0),
                         1, s);
      }
    };
    colwise_blocks<Cfg, Math>(smem.tile, p.q_col + k0 * p.M + m0, p.M, rows, cols, scale_sink);
  }
  if constexpr (kOwnScales) return;
  __syncthreads();
  // ---- scales ----
  const ScaleOut out{p.s_row, p.s_col, p.M, p.K};
  const bool last_m = m0 + kRows >= p.M;
  if constexpr (kColwise)
    store_col_scales<kCol, Cfg::kChunks>(out, m0, k0, smem.col_atom, places, last_m);
  if constexpr (kRowwise) {
    store_row_scales<kGrouped, Cfg::kChunks>(out, m0, k0, smem.row_atom, places, last_m);
  }
}

// ---- fp32 input ----
//
// The same phases on a 64x128 tile (32 KiB, as the 16-bit tile): 64 rows are two 32-row blocks per
// column, so the tile's scales fill half of each atom and go out per chunk (scales.cuh).
//   ---- load ----     cp.async, as in the 16-bit kernel: a warp instruction copies one whole
//                      512-byte tile row; warp w copies rows 8w..8w+7, exactly the rows its
//                      rowwise pass owns (cp.async.wait_all and __syncwarp, no CTA barrier).
//   ---- rowwise ----  lane l of warp w quantizes block l%4 of row 8w + l/4 (8 chunks).
//   ---- colwise ----  lanes 2j and 2j+1 of warp w take the two 32-row blocks of column 16w + j,
//                      read with 32 4-byte shared loads, and store them as one q_col row pair.
// Chunk c (0..31) of a staged row lies at 8*(c/8) + ((c%8) ^ tile_key_f32(row, c/8)): in each
// 8-lane phase of the load (8 chunks of one block) and rowwise passes (chunk i of blocks 0..3 of
// rows r, r+1) the keys take 8 values; in the colwise pass a warp reads 16 columns of rows j and
// j + 32, which the row-bit-5 term sends to complementary bank halves.
struct ConfigF32 {
  static constexpr int kThreads = Config<>::kThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRows = 64;                                 // tile rows (M)
  static constexpr int kChunk = 4;                                 // fp32 per 16-byte load
  static constexpr int kChunksPerRow = kTile / kChunk;             // 32
  static constexpr int kChunksPerBlock = kBlock / kChunk;          // 8
  static constexpr int kLoads = kRows * kChunksPerRow / kThreads;  // 8: rows per warp
  static constexpr int kChunks = kRows / kBlock;                   // 2 chunks of 32 rows
  static_assert(kLoads * kWarps == kRows, "warp w loads rows 8w..8w+7, one per instruction");
  static_assert(kRows * (kTile / kBlock) == kThreads, "rowwise: one block per thread");
  static_assert(kTile * kChunks == kThreads, "colwise: one block per thread");
  static_assert(sizeof(uint4[kRows][kChunksPerRow]) == sizeof(uint4[kTile][kTile / 8]),
                "the fp32 tile uses the 16-bit tile's shared memory");
};

__device__ __forceinline__ int tile_key_f32(int row, int blk) {
  return ((row & 1) * 4 + blk) ^ (((row >> 5) & 1) * 4);
}
__device__ __forceinline__ int f32_chunk(int row, int c) {
  return (c & ~7) | ((c & 7) ^ tile_key_f32(row, c / 8));
}

// One block of 32 fp32 values (v, as 8 16-byte chunks): scale, 32 e4m3 bytes (q), NaN blocks as
// 0x7F. amax: an unsigned max of sign-masked fp32 patterns (NaN above Inf, as for 16-bit input).
template <ScaleRounding kRule>
__device__ __forceinline__ uint8_t quantize_block_f32(const uint32_t (&v)[kBlock], uint4 (&q)[2]) {
  // amax_step<kFloat32>'s body, written out: the call gives the same instructions, but in another
  // order on sm_90a (ptxas schedules the commuted max operands differently).
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < kBlock; ++i) m = max(m, v[i] & 0x7FFFFFFFu);
  const BlockScale bs = block_scale<DType::kFloat32, kRule>(m);
  uint32_t* words = reinterpret_cast<uint32_t*>(q);
#pragma unroll
  for (int w = 0; w < kBlock / 4; ++w) {
    words[w] = bs.select(quantize_words_f32(v + 4 * w, bs.r));
  }
  return bs.s;
}

template <bool kRowwise, ColScales kCol, bool kGrouped, ScaleRounding kRule>
__global__ void __launch_bounds__(ConfigF32::kThreads, Config<>::kMinBlocksPerSm)
    quantize_tile_f32_kernel(const TileParams p) {
  using C = ConfigF32;
  constexpr bool kColwise = kCol != ColScales::kNone;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  auto& tile = *reinterpret_cast<uint4(*)[C::kRows][C::kChunksPerRow]>(smem.tile);
  ptx::griddepcontrol_wait();  // as in the 16-bit kernel

  if (kGrouped && blockIdx.x >= p.tiles) {  // the CTAs appended by grouped launches
    appended_cta<kRowwise, kCol>(p);
    return;
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const auto [m0, k0] = tile_origin<kRowwise, C::kRows>(p);
  const int rows = static_cast<int>(min(int64_t(C::kRows), p.M - m0));  // 32 or 64
  const int cols = static_cast<int>(min(int64_t(kTile), p.K - k0));
  const auto* x = static_cast<const float*>(static_cast<const void*>(p.x));

  // ---- load ----
  const bool chunk_in = lane * C::kChunk < cols;
#pragma unroll
  for (int i = 0; i < C::kLoads; ++i) {
    const int row = warp * C::kLoads + i;
    const bool in = chunk_in && row < rows;
    ptx::cp_async_cg_16(&tile[row][f32_chunk(row, lane)],
                        in ? x + (m0 + row) * p.K + k0 + lane * C::kChunk : x, in);
  }
  __shared__ TilePlaces places;
  if (kGrouped && warp == 0) {  // as in the 16-bit kernel
    plan_tile_places<C::kChunks>(places, p.offs, p.num_groups, p.M, m0, k0, p.K, kRowwise,
                                 kCol == ColScales::kKGroups);
  }
  ptx::cp_async_wait_all();
  __syncwarp();
  // ---- rowwise ----
  if constexpr (kRowwise) {
    const int row = warp * C::kLoads + lane / 4;
    const int blk = lane % 4;
    uint32_t b[kBlock];
#pragma unroll
    for (int i = 0; i < C::kChunksPerBlock; ++i) {
      const uint4 c = tile[row][f32_chunk(row, blk * C::kChunksPerBlock + i)];
      b[4 * i] = c.x;
      b[4 * i + 1] = c.y;
      b[4 * i + 2] = c.z;
      b[4 * i + 3] = c.w;
    }
    uint4 q[2];
    const uint8_t s = quantize_block_f32<kRule>(b, q);
    const int pair = blk & ~1;
    const bool row_in = row < rows;
    store_block_pair(p.q_row + (m0 + row) * p.K + k0 + pair * kBlock + (lane & 1) * 16, q,
                     row_in && pair * kBlock < cols, row_in && (pair + 1) * kBlock < cols);
    smem.row_atom[atom_offset<unsigned>(row, blk)] = s;
  }
  __syncthreads();
  // ---- colwise ----
  if constexpr (kColwise) {
    const int k = 16 * warp + lane / 2;
    const int half = lane & 1;  // the 32-row block
    uint32_t b[kBlock];
#pragma unroll
    for (int j = 0; j < kBlock; ++j) {
      const int row = kBlock * half + j;
      b[j] = reinterpret_cast<const uint32_t*>(
          &tile[row][f32_chunk(row, k / C::kChunk)])[k % C::kChunk];
    }
    uint4 q[2];
    const uint8_t s = quantize_block_f32<kRule>(b, q);
    const bool k_in = k < cols;
    store_block_pair(p.q_col + (k0 + k) * p.M + m0 + half * 16, q, k_in, k_in && kBlock < rows);
    if constexpr (kCol == ColScales::kPlain) {
      smem.col_atom[k * kAtomCols + half] = s;
    } else {
      smem.col_atom[atom_offset<unsigned>(k, half)] = s;
    }
  }
  __syncthreads();
  // ---- scales ----
  const ScaleOut out{p.s_row, p.s_col, p.M, p.K};
  const bool last_m = m0 + C::kRows >= p.M;
  if constexpr (kColwise)
    store_col_scales<kCol, C::kChunks>(out, m0, k0, smem.col_atom, places, last_m);
  if constexpr (kRowwise) {
    store_row_scales<kGrouped, C::kChunks>(out, m0, k0, smem.row_atom, places, last_m);
  }
}

// ---- host launchers ----

// CTAs after the tiles of a grouped launch: the zero fill of each grouped scale output (zero-fill
// CTA 0 also writes the status word), at least one when there is a status word to write.
int64_t appended_ctas(const TileParams& p, bool rowwise, ColScales col) {
  int64_t n = 0;
  if (col == ColScales::kKGroups) n += zero_fill_col_ctas(p.M, p.K, p.num_groups);
  if (rowwise) n += zero_fill_row_ctas(p.K, p.num_groups);
  return p.status != nullptr && n == 0 ? 1 : n;
}

// Math: the 16-bit kernel's block math (ProbeMath for the probe; the fp32 kernel has only its own).
template <DType kIn, bool kRowwise, ColScales kCol, bool kGrouped, ScaleRounding kRule,
          class Math = Mxfp8Math<kIn, kRule>>
void launch_variant(const TileParams& params, cudaStream_t stream) {
  constexpr int smem_bytes = static_cast<int>(sizeof(SharedStorage));
  const int64_t grid = params.tiles + (kGrouped ? appended_ctas(params, kRowwise, kCol) : 0);
  MXQ_CHECK(grid <= 0x7FFFFFFF, "too many tiles for one launch: ", grid);
  if (grid == 0) return;
  const unsigned ctas = static_cast<unsigned>(grid);
  TileParams p = params;
  p.fast = Divider::of(static_cast<uint32_t>(kRowwise ? p.k_tiles : p.m_tiles));
  if constexpr (kIn == DType::kFloat32) {
    launch_dependent(quantize_tile_f32_kernel<kRowwise, kCol, kGrouped, kRule>, ctas,
                     ConfigF32::kThreads, smem_bytes, stream, p);
  } else if (p.rows == kTile) {
    launch_dependent(quantize_tile_kernel<Math, kRowwise, kCol, kGrouped, kTile>, ctas,
                     Config<>::kThreads, smem_bytes, stream, p);
  } else {
    launch_dependent(quantize_tile_kernel<Math, kRowwise, kCol, kGrouped, kTile / 2>, ctas,
                     Config<>::kThreads, smem_bytes, stream, p);
  }
}

// The runtime choices (input type, rounding rule) as template arguments.
template <bool kRowwise, ColScales kCol, bool kGrouped>
void launch_tile_kernel(const TileParams& params, DType in, ScaleRounding rule,
                        cudaStream_t stream) {
  const bool rceil = rule == ScaleRounding::kRceil;
  constexpr ScaleRounding kRceil = ScaleRounding::kRceil, kFloor = ScaleRounding::kFloor;
  switch (in) {
    case DType::kBFloat16:
      return rceil ? launch_variant<DType::kBFloat16, kRowwise, kCol, kGrouped, kRceil>(params,
                                                                                        stream)
                   : launch_variant<DType::kBFloat16, kRowwise, kCol, kGrouped, kFloor>(params,
                                                                                        stream);
    case DType::kFloat16:
      return rceil
                 ? launch_variant<DType::kFloat16, kRowwise, kCol, kGrouped, kRceil>(params, stream)
                 : launch_variant<DType::kFloat16, kRowwise, kCol, kGrouped, kFloor>(params,
                                                                                     stream);
    case DType::kFloat32:
      return rceil
                 ? launch_variant<DType::kFloat32, kRowwise, kCol, kGrouped, kRceil>(params, stream)
                 : launch_variant<DType::kFloat32, kRowwise, kCol, kGrouped, kFloor>(params,
                                                                                     stream);
  }
}

// The tile height of a launch: fp32 tiles hold 64 rows (ConfigF32). 16-bit tiles hold 128 rows,
// or 64 when the 64-row tiles all fit in one wave of resident CTAs: more, shorter CTAs per SM
// overlap one's loads with another's math and stores (at 512x4096 and 1024x4096 on the H200 fused
// takes 0.97 and 0.92 of the 128-row time; with a second wave, 2048x4096, 1.09; docs/performance.md).
int tile_rows(const QuantizeParams& p) {
  if (p.dtype == DType::kFloat32) return ConfigF32::kRows;
  const int forced = detail::forced_tile_rows();
  if (forced != 0) return forced;
  const int64_t half_tiles = ceil_div(p.M, kTile / 2) * ceil_div(p.K, kTile);
  const int64_t resident = int64_t(Config<>::kMinBlocksPerSm) * detail::multiprocessor_count();
  return half_tiles <= resident ? kTile / 2 : kTile;
}

TileParams tile_params(const QuantizeParams& p) {
  TileParams t{};
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
  t.rows = tile_rows(p);
  t.m_tiles = ceil_div(p.M, t.rows);
  t.k_tiles = ceil_div(p.K, kTile);
  t.tiles = t.m_tiles * t.k_tiles;
  return t;
}

}  // namespace mxq::kernels

namespace mxq::detail {
using kernels::ColScales;
using kernels::launch_tile_kernel;

void launch_quantize(const QuantizeParams& p) {
  const kernels::TileParams t = kernels::tile_params(p);
  const DType in = p.dtype;
  const ScaleRounding rule = p.rounding;
  if (p.offs == nullptr) {
    if (!p.colwise()) {
      launch_tile_kernel<true, ColScales::kNone, false>(t, in, rule, p.stream);
    } else if (!p.rowwise()) {
      launch_tile_kernel<false, ColScales::kBlocked, false>(t, in, rule, p.stream);
    } else {
      launch_tile_kernel<true, ColScales::kBlocked, false>(t, in, rule, p.stream);
    }
  } else if (!p.colwise()) {
    launch_tile_kernel<true, ColScales::kNone, true>(t, in, rule, p.stream);
  } else if (!p.rowwise()) {
    launch_tile_kernel<false, ColScales::kKGroups, true>(t, in, rule, p.stream);
  } else {
    launch_tile_kernel<true, ColScales::kKGroups, true>(t, in, rule, p.stream);
  }
}

// The baseline: the rowwise kernel (M-groups s_row itself when grouped: the layout is the same
// kernel's), the colwise kernel writing plain S_col, and the swizzle kernel placing it.
void launch_quantize_composed(const QuantizeParams& p, uint8_t* workspace) {
  kernels::TileParams row = kernels::tile_params(p);
  row.q_col = row.s_col = nullptr;
  row.status = nullptr;  // the swizzle reports on offs
  if (p.offs == nullptr) {
    launch_tile_kernel<true, ColScales::kNone, false>(row, p.dtype, p.rounding, p.stream);
  } else {
    launch_tile_kernel<true, ColScales::kNone, true>(row, p.dtype, p.rounding, p.stream);
  }
  kernels::TileParams col = kernels::tile_params(p);
  col.q_row = col.s_row = nullptr;
  col.s_col = workspace;  // plain S_col (K, M/32)
  col.offs = nullptr;
  col.num_groups = 0;
  col.status = nullptr;
  launch_tile_kernel<false, ColScales::kPlain, false>(col, p.dtype, p.rounding, p.stream);
  launch_swizzle_col_scales(workspace, p);
}

// The fused dense bf16 kernel with ProbeMath (the rounding rule is unused), at the tile height the
// fused kernel would take.
void launch_quantize_probe(const QuantizeParams& p) {
  kernels::launch_variant<DType::kBFloat16, true, ColScales::kBlocked, false, ScaleRounding::kRceil,
                          kernels::ProbeMath>(kernels::tile_params(p), p.stream);
}

}  // namespace mxq::detail
