// Index math of the expert-weight kernel (quantize_weight.cu): which 128x128 tile a CTA owns, where
// its bytes go, and which elements each thread loads, stages, converts and stores. Plain host +
// device functions without CUDA types, so that the CPU suite (tests/cpp/test_weight_tile.cpp)
// checks the very functions the kernel calls: every element loaded once, every output byte
// written once, the shared-memory swizzles bijective and bank-conflict free, the ldmatrix.trans
// addressing handing each lane the column block it converts.
#pragma once

#include <cstdint>

#include "mxq/layout.h"
#include "mxq/numerics.h"
#include "tile_key.h"

namespace mxq::kernels::weight {

// A CTA's tile: 128 rows (n) x 128 columns (k) of one expert, one scale atom per axis.
constexpr int kTileRows = kAtomRows;
constexpr int kTileCols = kAtomCols * kBlock;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = kTileRows / kWarps;  // 16: warp w loads and converts rows 16w..
constexpr int kBands = kTileRows / kBlock;        // 4 bands of 32 rows, 4 column blocks of 32
static_assert(kTileCols == kTileRows, "square tiles: kBands counts row bands and column blocks");

// Staged tile geometry per input dtype: a row of 128 elements is 16 (16-bit types) or 32 (fp32)
// chunks of 16 bytes.
MXQ_HD constexpr int chunk_elems(DType t) { return 16 / dtype_bytes(t); }
MXQ_HD constexpr int chunks_per_row(DType t) { return kTileCols / chunk_elems(t); }
MXQ_HD constexpr int chunks_per_block(DType t) { return kBlock / chunk_elems(t); }
MXQ_HD constexpr int loads_per_thread(DType t) { return kTileRows * chunks_per_row(t) / kThreads; }
MXQ_HD constexpr int rows_per_load(DType t) { return 32 / chunks_per_row(t); }  // per warp instr.

// ---- tiles ----

// Tile of one expert: rows [n0, n0 + rows), columns [k0, k0 + cols). N and K are multiples of 32,
// so rows and cols are multiples of 32 (32..128): a partial tile holds whole 32x32 sub-tiles.
struct Tile {
  int64_t g;
  int64_t n0;
  int64_t k0;
  int rows;
  int cols;
};

MXQ_HD int64_t tiles_per_expert(int64_t N, int64_t K) {
  return ceil_div(N, kTileRows) * ceil_div(K, kTileCols);
}

// The split of a CTA index into tiles, worked out once per launch on the host: dividers by the
// tiles of one expert and by the tiles along the fastest axis (tile_key.h Divider; 64-bit `/` and
// `%` put ~70 instructions before a CTA's first load). The launcher caps grids below 2^31.
struct TileSplit {
  Divider per_expert, fast;
  static TileSplit of(int64_t N, int64_t K, bool n_fastest) {
    return {Divider::of(static_cast<uint32_t>(tiles_per_expert(N, K))),
            Divider::of(static_cast<uint32_t>(n_fastest ? ceil_div(N, kTileRows)
                                                        : ceil_div(K, kTileCols)))};
  }
};

// CTA `index` of the launch: experts one after another; inside an expert K fastest (the rowwise
// output runs along K), or N fastest when only the colwise output (running along N) is written.
MXQ_HD Tile tile_of(uint32_t index, int64_t N, int64_t K, bool n_fastest, const TileSplit& split) {
  const auto [g, rem] = split.per_expert.split(index);
  const auto [slow, fast] = split.fast.split(rem);
  const int64_t n0 = int64_t(n_fastest ? fast : slow) * kTileRows;
  const int64_t k0 = int64_t(n_fastest ? slow : fast) * kTileCols;
  const int64_t rows = N - n0 < kTileRows ? N - n0 : kTileRows;
  const int64_t cols = K - k0 < kTileCols ? K - k0 : kTileCols;
  return {int64_t(g), n0, k0, int(rows), int(cols)};
}
// The same with the split worked out here (the CPU tests).
inline Tile tile_of(int64_t index, int64_t N, int64_t K, bool n_fastest) {
  return tile_of(static_cast<uint32_t>(index), N, K, n_fastest, TileSplit::of(N, K, n_fastest));
}

// ---- global offsets (64-bit: G*N*K may exceed 2^31) ----

MXQ_HD int64_t w_offset(int64_t g, int64_t n, int64_t k, int64_t N, int64_t K) {  // elements
  return (g * N + n) * K + k;
}
MXQ_HD int64_t q_row_offset(int64_t g, int64_t n, int64_t k, int64_t N, int64_t K) {
  return (g * N + n) * K + k;
}
MXQ_HD int64_t q_col_offset(int64_t g, int64_t n, int64_t k, int64_t N, int64_t K) {
  return (g * K + k) * N + n;
}
// The tile's 512-byte scale atoms: S_row rows [n0, n0+128) x scale columns [k0/32, k0/32+4), and
// S_col rows [k0, k0+128) x scale columns [n0/32, n0/32+4).
MXQ_HD int64_t s_row_atom(const Tile& t, int64_t N, int64_t K) {
  return weight_s_row_offset(t.g, t.n0, t.k0 / kBlock, N, K);
}
MXQ_HD int64_t s_col_atom(const Tile& t, int64_t N, int64_t K) {
  return weight_s_col_offset(t.g, t.k0, t.n0 / kBlock, N, K);
}

// ---- shared-memory swizzles of the staged tile: [row][physical chunk] ----

// 16-bit dtypes (16 chunks per row): logical chunk c of row `row` sits at c ^ tile_key(row, c/8),
// the fused kernel's swizzle (tile_key.h): bit 0 = c/8 ^ row bit 5, bit 1 = row bit 0, bit 2 = row
// bit 6. Conflict-free for the row-wise loads, the rowwise block reads (chunks {i, 4+i, 8+i, 12+i}
// of rows r, r+1) and the ldmatrix row addresses (rows {R, R+1, R+32, R+33, ...}).
MXQ_HD int swizzle16(int row, int chunk) { return chunk ^ tile_key(row, chunk >> 3); }

// fp32 (32 chunks per row, 8 per 32-element block): the key stays inside the block's 8 chunks:
// bits 1-2 = (block ^ row bits 5-6) & 3, bit 0 = row bit 0. Conflict-free for the row loads (8
// chunks of one block per phase), the rowwise block reads (blocks 0..3 of rows r, r+1 per phase)
// and the colwise word reads (8 columns of rows {i, 32+i, 64+i, 96+i} per warp access).
MXQ_HD int swizzle32(int row, int chunk) {
  const int key = ((((chunk >> 3) ^ (row >> 5)) & 3) << 1) | (row & 1);
  return chunk ^ key;
}

MXQ_HD int swizzle(DType t, int row, int chunk) {
  return t == DType::kFloat32 ? swizzle32(row, chunk) : swizzle16(row, chunk);
}

// ---- thread mappings ----

// Load i of a thread: coalesced, a warp instruction reads whole tile rows (two rows of 256 bytes,
// or one of 512). Warp w loads exactly rows 16w..16w+15, the rows its rowwise pass converts.
MXQ_HD int load_chunk(DType t, int lane) { return lane % chunks_per_row(t); }
MXQ_HD int load_row(DType t, int warp, int lane, int i) {
  return kRowsPerWarp * warp + lane / chunks_per_row(t) + rows_per_load(t) * i;
}

// Whether load i of a thread lies inside the matrix (else it stages +0 and reads nothing).
MXQ_HD bool load_ok(const Tile& t, DType d, int warp, int lane, int i) {
  return load_chunk(d, lane) * chunk_elems(d) < t.cols && load_row(d, warp, lane, i) < t.rows;
}

// 32x32 policy: the warp reduces the amax of its 16 loaded rows per column block over the lanes
// whose chunks lie in one block (xor over the lane bits that do not select the block), and one
// lane per block writes it. Column block of a lane's chunks: load_chunk / chunks_per_block.
MXQ_HD int load_block(DType t, int lane) { return load_chunk(t, lane) / chunks_per_block(t); }
// Shuffle masks of that reduction (3 steps for both geometries).
MXQ_HD int partial_xor(DType t, int step) {
  // 16-bit: lane = 16*(row parity) + 4*block + chunk-in-block -> xor 1, 2, 16.
  // fp32:   lane = 8*block + chunk-in-block                   -> xor 1, 2, 4.
  return t == DType::kFloat32 ? (1 << step) : (step < 2 ? (1 << step) : 16);
}
MXQ_HD bool partial_writer(DType t, int lane) {
  return t == DType::kFloat32 ? (lane & 7) == 0 : (lane & 0x13) == 0;
}

// Rowwise: thread (warp, lane) converts blocks j = 0, 1 at row 16w + lane/4 + 8j, column block
// lane%4. Lanes 2i and 2i+1 hold adjacent blocks of one row (the pair store below).
MXQ_HD int rowwise_row(int warp, int lane, int j) {
  return kRowsPerWarp * warp + lane / kBands + 8 * j;
}
MXQ_HD int rowwise_block(int lane) { return lane % kBands; }

// Colwise: thread (warp, lane) converts blocks u = 0, 1: tile column 8*(warp + 8u) + lane/4, band
// (32-row block) lane%4. Lanes 2i and 2i+1 hold adjacent bands of one column, i.e. adjacent 32-byte
// blocks of one q_col row.
MXQ_HD int colwise_group(int warp, int u) { return warp + kWarps * u; }  // 8-column group
MXQ_HD int colwise_col(int warp, int lane, int u) { return 8 * colwise_group(warp, u) + lane / 4; }
MXQ_HD int colwise_band(int lane) { return lane % kBands; }

// 16-bit colwise through ldmatrix.x4.trans (ptx.cuh): for load n (0..3) lane 8i+j addresses row
// 32*(j/2) + 8n + 2i + j%2 of the tile at the group's chunk. Lane t then receives, in register i,
// column t/4 of the group at rows 2(4n+i), 2(4n+i)+1 of band t%4: word 4n+i of its whole 32x1
// block (two consecutive rows per word, the element order of the rowwise words).
MXQ_HD int ldmatrix_row(int lane, int n) {
  return kBlock * ((lane % 8) / 2) + 2 * (lane / 8) + lane % 2 + 8 * n;
}

// The pair store (common.cuh, store_block_pair): lanes 2i and 2i+1 hold the 32 bytes of two
// adjacent output blocks. Store s (0, 1) of a lane of parity p writes half p (16 bytes) of block s
// of the pair at even_block + 32*s + 16*p, so each warp store instruction completes 32-byte
// sectors. The data comes from block s's owner: the lane itself when s == p, else its neighbour.
MXQ_HD int64_t pair_store_offset(int64_t even_block, int s, int p) {
  return even_block + kBlock * s + 16 * p;
}

// Where a lane's pair stores go: q_row / q_col offset of its first store (the pair's even block +
// 16 * lane parity; the second goes 32 bytes on), and whether store s lands inside the matrix.
MXQ_HD int64_t rowwise_pair(const Tile& t, int warp, int lane, int j, int64_t N, int64_t K) {
  const int64_t n = t.n0 + rowwise_row(warp, lane, j);
  const int64_t k = t.k0 + (rowwise_block(lane) & ~1) * kBlock;
  return pair_store_offset(q_row_offset(t.g, n, k, N, K), 0, lane & 1);
}
MXQ_HD bool rowwise_store_ok(const Tile& t, int warp, int lane, int j, int s) {
  return rowwise_row(warp, lane, j) < t.rows && ((rowwise_block(lane) & ~1) + s) * kBlock < t.cols;
}
MXQ_HD int64_t colwise_pair(const Tile& t, int warp, int lane, int u, int64_t N, int64_t K) {
  const int64_t n = t.n0 + (colwise_band(lane) & ~1) * kBlock;
  const int64_t k = t.k0 + colwise_col(warp, lane, u);
  return pair_store_offset(q_col_offset(t.g, n, k, N, K), 0, lane & 1);
}
MXQ_HD bool colwise_store_ok(const Tile& t, int warp, int lane, int u, int s) {
  return colwise_col(warp, lane, u) < t.cols && ((colwise_band(lane) & ~1) + s) * kBlock < t.rows;
}

// Staged scale atoms: S_row[n0 + row, k0/32 + blk] at row_atom[atom_offset(row, blk)], S_col[k0 +
// col, n0/32 + band] at col_atom[atom_offset(col, band)]; 0 where the block lies outside the
// matrix (the padding of the blocked layout).
MXQ_HD bool row_scale_ok(const Tile& t, int row, int blk) {
  return row < t.rows && blk * kBlock < t.cols;
}
MXQ_HD bool col_scale_ok(const Tile& t, int col, int band) {
  return col < t.cols && band * kBlock < t.rows;
}

}  // namespace mxq::kernels::weight
