// The index math of the expert-weight kernel (src/kernels/weight_tile.h), checked on the CPU: the
// kernel calls exactly these functions, so a placement bug shows up here without a GPU.
//   WeightTileGrid     CTAs -> tiles: every element of every expert in exactly one tile, partial
//                      tiles of whole 32x32 sub-tiles, the scale atoms tiling s_row and s_col; the
//                      kernel's 32-bit split (TileSplit) against 64-bit division
//   WeightTileThreads  inside a tile: loads, rowwise blocks, colwise blocks each covered once; a
//                      warp's rowwise rows are the rows it loaded (its __syncwarp suffices); the
//                      32x32 partial-amax shuffles stay within one column block
//   WeightTileSwizzle  the staged tile's swizzles: bijective per row, bank-conflict free for every
//                      shared access pattern; ldmatrix.trans (emulated from the PTX definition)
//                      hands each lane its colwise block in element order
//   WeightTileStores   every store of every lane emulated on partial and full tiles: each byte of
//                      q_row / q_col inside the matrix written exactly once with the right block's
//                      bytes, nothing outside; atom bytes at the blocked-layout offsets
//   TileDivider        the tile kernels' CTA index split (tile_key.h Divider) against
//                      plain division, for divisors 1..4096, powers of two and their neighbours
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "../../src/kernels/tile_key.h"
#include "../../src/kernels/weight_tile.h"
#include "mxq/layout.h"
#include "mxq/mxq.h"

namespace mxq::test {
namespace {

using namespace mxq::kernels::weight;

constexpr DType kDtypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};

struct Dims {
  int64_t G, N, K;
};
const std::vector<Dims>& grid_dims() {
  static const std::vector<Dims> dims = {{1, 32, 32},   {3, 96, 160},  {2, 160, 96},
                                         {1, 128, 128}, {2, 256, 384}, {1, 2880, 64},
                                         {3, 64, 2880}, {4, 32, 288},  {1, 416, 544}};
  return dims;
}

// ---- WeightTileGrid ----

TEST(WeightTileGrid, EveryElementInOneTile) {
  for (const Dims& d : grid_dims()) {
    for (const bool n_fastest : {false, true}) {
      SCOPED_TRACE("G=" + std::to_string(d.G) + " N=" + std::to_string(d.N) +
                   " K=" + std::to_string(d.K) + (n_fastest ? " n_fastest" : " k_fastest"));
      std::vector<int> hits(size_t(d.G * d.N * d.K), 0);
      const int64_t tiles = d.G * tiles_per_expert(d.N, d.K);
      for (int64_t i = 0; i < tiles; ++i) {
        const Tile t = tile_of(i, d.N, d.K, n_fastest);
        ASSERT_GE(t.g, 0);
        ASSERT_LT(t.g, d.G);
        ASSERT_EQ(t.n0 % kTileRows, 0);
        ASSERT_EQ(t.k0 % kTileCols, 0);
        ASSERT_TRUE(t.rows >= 32 && t.rows <= 128 && t.rows % 32 == 0) << t.rows;
        ASSERT_TRUE(t.cols >= 32 && t.cols <= 128 && t.cols % 32 == 0) << t.cols;
        ASSERT_EQ(t.rows, std::min<int64_t>(128, d.N - t.n0));
        ASSERT_EQ(t.cols, std::min<int64_t>(128, d.K - t.k0));
        for (int r = 0; r < t.rows; ++r) {
          for (int c = 0; c < t.cols; ++c) {
            ++hits[size_t(w_offset(t.g, t.n0 + r, t.k0 + c, d.N, d.K))];
          }
        }
      }
      for (size_t e = 0; e < hits.size(); ++e) ASSERT_EQ(hits[e], 1) << "element " << e;
    }
  }
}

// Consecutive CTAs: K fastest (the rowwise output's direction) or N fastest (colwise only).
TEST(WeightTileGrid, Order) {
  const Tile a = tile_of(1, 256, 384, false);
  EXPECT_EQ(a.n0, 0);
  EXPECT_EQ(a.k0, 128);
  const Tile b = tile_of(1, 256, 384, true);
  EXPECT_EQ(b.n0, 128);
  EXPECT_EQ(b.k0, 0);
  const Tile c = tile_of(6, 256, 384, false);  // first tile of expert 1
  EXPECT_EQ(c.g, 1);
  EXPECT_EQ(c.n0, 0);
  EXPECT_EQ(c.k0, 0);
}

// The kernel's split (TileSplit's two 32-bit dividers) gives the tiles that 64-bit division does,
// for every CTA of three experts, in both orders.
TEST(WeightTileGrid, SplitMatchesDivision) {
  const std::vector<Dims> dims = {{3, 32, 32},     {3, 7168, 2048}, {3, 4096, 7168},
                                  {3, 1536, 5120}, {3, 768, 2048},  {3, 160, 4096}};
  for (const Dims& d : dims) {
    for (const bool n_fastest : {false, true}) {
      const int64_t tn = ceil_div(d.N, kTileRows), tk = ceil_div(d.K, kTileCols), per = tn * tk;
      const TileSplit split = TileSplit::of(d.N, d.K, n_fastest);
      for (int64_t i = 0; i < d.G * per; ++i) {
        const Tile t = tile_of(uint32_t(i), d.N, d.K, n_fastest, split);
        const int64_t rem = i % per;
        ASSERT_EQ(t.g, i / per) << d.N << "x" << d.K << " CTA " << i;
        ASSERT_EQ(t.n0, (n_fastest ? rem % tn : rem / tk) * kTileRows)
            << d.N << "x" << d.K << " CTA " << i;
        ASSERT_EQ(t.k0, (n_fastest ? rem / tn : rem % tk) * kTileCols)
            << d.N << "x" << d.K << " CTA " << i;
      }
    }
  }
}

// Each tile's 512-byte atoms are the blocked-layout offsets of its 128 x 4 scales (padding
// included), and the atoms of all tiles tile s_row and s_col exactly.
TEST(WeightTileGrid, AtomsTileTheScaleBuffers) {
  for (const Dims& d : grid_dims()) {
    SCOPED_TRACE("G=" + std::to_string(d.G) + " N=" + std::to_string(d.N) +
                 " K=" + std::to_string(d.K));
    std::vector<int> row_hits(size_t(weight_s_row_shape(d.G, d.N, d.K).bytes()), 0);
    std::vector<int> col_hits(size_t(weight_s_col_shape(d.G, d.N, d.K).bytes()), 0);
    const int64_t tiles = d.G * tiles_per_expert(d.N, d.K);
    for (int64_t i = 0; i < tiles; ++i) {
      const Tile t = tile_of(i, d.N, d.K, false);
      const int64_t ra = s_row_atom(t, d.N, d.K), ca = s_col_atom(t, d.N, d.K);
      ASSERT_EQ(ra % kAtomBytes, 0);
      ASSERT_EQ(ca % kAtomBytes, 0);
      for (int r = 0; r < 128; ++r) {
        for (int b = 0; b < 4; ++b) {
          // The padded scale matrix extends the formula over rows >= N and columns >= K/32.
          ASSERT_EQ(ra + atom_offset<unsigned>(unsigned(r), unsigned(b)),
                    weight_s_row_offset(t.g, t.n0 + r, t.k0 / 32 + b, d.N, d.K));
          ASSERT_EQ(ca + atom_offset<unsigned>(unsigned(r), unsigned(b)),
                    weight_s_col_offset(t.g, t.k0 + r, t.n0 / 32 + b, d.N, d.K));
        }
      }
      for (int b = 0; b < kAtomBytes; ++b) {
        ASSERT_LT(size_t(ra + b), row_hits.size());
        ASSERT_LT(size_t(ca + b), col_hits.size());
        ++row_hits[size_t(ra + b)];
        ++col_hits[size_t(ca + b)];
      }
    }
    for (int h : row_hits) ASSERT_EQ(h, 1);
    for (int h : col_hits) ASSERT_EQ(h, 1);
  }
}

// 64-bit offsets: the last element of a (G, N, K) with G*N*K > 2^32.
TEST(WeightTileGrid, SixtyFourBitOffsets) {
  const int64_t G = 64, N = 4096, K = 7168;  // 1.9e9 elements, 3.8 GB of bf16
  const Tile t = tile_of(G * tiles_per_expert(N, K) - 1, N, K, false);
  EXPECT_EQ(t.g, G - 1);
  EXPECT_EQ(w_offset(t.g, t.n0 + 127, t.k0 + 127, N, K), G * N * K - 1);
  EXPECT_EQ(q_col_offset(t.g, t.n0 + 127, t.k0 + 127, N, K), G * N * K - 1);
  const int64_t big = int64_t(1) << 33;
  EXPECT_EQ(q_row_offset(2, 0, 0, big, 1), 2 * big);
}

// ---- WeightTileThreads ----

TEST(WeightTileThreads, LoadsCoverTheTileOnce) {
  for (DType d : kDtypes) {
    SCOPED_TRACE(to_string(d));
    const int cpr = chunks_per_row(d);
    std::vector<int> hits(size_t(kTileRows * cpr), 0);
    for (int warp = 0; warp < kWarps; ++warp) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int i = 0; i < loads_per_thread(d); ++i) {
          const int row = load_row(d, warp, lane, i), chunk = load_chunk(d, lane);
          ASSERT_GE(row, kRowsPerWarp * warp);  // warp w: rows 16w..16w+15 only
          ASSERT_LT(row, kRowsPerWarp * (warp + 1));
          ASSERT_EQ(load_row(d, warp, lane, i) - load_row(d, warp, lane, 0),
                    rows_per_load(d) * i);  // the kernel's pointer step
          ++hits[size_t(row * cpr + chunk)];
        }
        // A warp instruction reads whole rows: lanes of one row hold consecutive chunks.
        if (lane % cpr != 0) {
          ASSERT_EQ(load_row(d, warp, lane, 0), load_row(d, warp, lane - 1, 0));
          ASSERT_EQ(load_chunk(d, lane), load_chunk(d, lane - 1) + 1);
        }
      }
    }
    for (int h : hits) ASSERT_EQ(h, 1);
  }
}

TEST(WeightTileThreads, LoadPredicatesOnPartialTiles) {
  for (DType d : kDtypes) {
    for (int rows = 32; rows <= 128; rows += 32) {
      for (int cols = 32; cols <= 128; cols += 32) {
        const Tile t{0, 0, 0, rows, cols};
        int loaded = 0;
        for (int warp = 0; warp < kWarps; ++warp) {
          for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < loads_per_thread(d); ++i) {
              const bool inside = load_row(d, warp, lane, i) < rows &&
                                  (load_chunk(d, lane) + 1) * chunk_elems(d) <= cols;
              ASSERT_EQ(load_ok(t, d, warp, lane, i), inside);
              loaded += inside;
            }
          }
        }
        ASSERT_EQ(loaded * chunk_elems(d), rows * cols) << to_string(d);
      }
    }
  }
}

// Rowwise: every (row, block) once; warp w converts only rows it loaded; lane pairs hold adjacent
// blocks of one row; a thread's two blocks lie in one 32-row band.
TEST(WeightTileThreads, RowwiseBlocks) {
  std::vector<int> hits(kTileRows * kBands, 0);
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int lane = 0; lane < 32; ++lane) {
      ASSERT_EQ(rowwise_row(warp, lane, 0) / kBlock, rowwise_row(warp, lane, 1) / kBlock);
      for (int j = 0; j < 2; ++j) {
        const int row = rowwise_row(warp, lane, j), blk = rowwise_block(lane);
        ASSERT_GE(row, kRowsPerWarp * warp);
        ASSERT_LT(row, kRowsPerWarp * (warp + 1));
        ++hits[size_t(row * kBands + blk)];
        const int partner = lane ^ 1;
        ASSERT_EQ(rowwise_row(warp, partner, j), row);
        ASSERT_EQ(rowwise_block(partner), blk ^ 1);
      }
    }
  }
  for (int h : hits) ASSERT_EQ(h, 1);
}

// Colwise: every (column, band) once; lane pairs hold adjacent bands of one column.
TEST(WeightTileThreads, ColwiseBlocks) {
  std::vector<int> hits(kTileCols * kBands, 0);
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int u = 0; u < 2; ++u) {
        const int col = colwise_col(warp, lane, u), band = colwise_band(lane);
        ASSERT_LT(col, kTileCols);
        ++hits[size_t(col * kBands + band)];
        ASSERT_EQ(colwise_col(warp, lane ^ 1, u), col);
        ASSERT_EQ(colwise_band(lane ^ 1), band ^ 1);
      }
    }
  }
  for (int h : hits) ASSERT_EQ(h, 1);
}

// 32x32: warp w's loads lie in band w/2 (so tile (b, c) combines warps 2b, 2b+1); the three xor
// shuffles reach exactly the lanes whose loads lie in the same column block; one writer per block.
TEST(WeightTileThreads, PartialAmaxGroups) {
  for (DType d : kDtypes) {
    SCOPED_TRACE(to_string(d));
    for (int warp = 0; warp < kWarps; ++warp) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int i = 0; i < loads_per_thread(d); ++i) {
          ASSERT_EQ(load_row(d, warp, lane, i) / kBlock, warp / 2);
        }
        ASSERT_EQ(load_block(d, lane), load_chunk(d, lane) * chunk_elems(d) / kBlock);
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      std::set<int> reached = {lane};
      for (int s = 0; s < 3; ++s) {
        std::set<int> next = reached;
        for (int l : reached) next.insert(l ^ partial_xor(d, s));
        reached = next;
      }
      std::set<int> same_block;
      for (int l = 0; l < 32; ++l) {
        if (load_block(d, l) == load_block(d, lane)) same_block.insert(l);
      }
      ASSERT_EQ(reached, same_block) << "lane " << lane;
    }
    std::vector<int> writers(kBands, 0);
    for (int lane = 0; lane < 32; ++lane) {
      if (partial_writer(d, lane)) ++writers[size_t(load_block(d, lane))];
    }
    for (int w : writers) ASSERT_EQ(w, 1);
  }
}

// ---- WeightTileSwizzle ----

TEST(WeightTileSwizzle, BijectivePerRow) {
  for (DType d : kDtypes) {
    const int cpr = chunks_per_row(d);
    for (int row = 0; row < kTileRows; ++row) {
      std::set<int> seen;
      for (int c = 0; c < cpr; ++c) {
        const int p = swizzle(d, row, c);
        ASSERT_GE(p, 0);
        ASSERT_LT(p, cpr);
        seen.insert(p);
      }
      ASSERT_EQ(int(seen.size()), cpr) << to_string(d) << " row " << row;
    }
  }
}

// Shared memory has 32 banks of 4 bytes; a 16-byte access is served in phases of 8 lanes, which are
// conflict-free when their 8 chunks fall in distinct bank groups (physical chunk mod 8).
::testing::AssertionResult distinct_groups(const std::vector<int>& physical_chunks) {
  std::set<int> groups;
  for (int p : physical_chunks) groups.insert(p % 8);
  if (groups.size() == physical_chunks.size()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << groups.size() << " bank groups for " << physical_chunks.size() << " chunks";
}

TEST(WeightTileSwizzle, ConflictFreeStagingAndRowwise) {
  for (DType d : kDtypes) {
    SCOPED_TRACE(to_string(d));
    for (int warp = 0; warp < kWarps; ++warp) {
      for (int phase = 0; phase < 4; ++phase) {
        for (int i = 0; i < loads_per_thread(d); ++i) {  // staging stores
          std::vector<int> chunks;
          for (int lane = 8 * phase; lane < 8 * phase + 8; ++lane) {
            chunks.push_back(swizzle(d, load_row(d, warp, lane, i), load_chunk(d, lane)));
          }
          ASSERT_TRUE(distinct_groups(chunks)) << "staging warp " << warp << " load " << i;
        }
        for (int j = 0; j < 2; ++j) {  // rowwise block reads, chunk i of each block
          for (int i = 0; i < chunks_per_block(d); ++i) {
            std::vector<int> chunks;
            for (int lane = 8 * phase; lane < 8 * phase + 8; ++lane) {
              const int row = rowwise_row(warp, lane, j);
              chunks.push_back(swizzle(d, row, rowwise_block(lane) * chunks_per_block(d) + i));
            }
            ASSERT_TRUE(distinct_groups(chunks)) << "rowwise warp " << warp << " j " << j;
          }
        }
      }
    }
  }
}

// fp32 colwise: each lane reads word col%4 of chunk col/4 of rows 32*band + i; a warp access of 32
// words is conflict-free when the 32 banks are distinct.
TEST(WeightTileSwizzle, ConflictFreeFp32Colwise) {
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int u = 0; u < 2; ++u) {
      for (int i = 0; i < kBlock; ++i) {
        std::set<int> banks;
        for (int lane = 0; lane < 32; ++lane) {
          const int col = colwise_col(warp, lane, u), row = kBlock * colwise_band(lane) + i;
          banks.insert((swizzle32(row, col / 4) * 4 + col % 4) % 32);
        }
        ASSERT_EQ(banks.size(), 32u) << "warp " << warp << " u " << u << " i " << i;
      }
    }
  }
}

// ldmatrix.x4.trans (PTX ISA 9.7.14.5.15, as ptx.cuh states it): lane 8i+j supplies the address of
// row j of matrix i (8 consecutive 16-bit elements); register i of lane t then holds column t/4 of
// matrix i at rows 2(t%4) (low half) and 2(t%4)+1 (high half). With the staged tile's contents
// known (logical chunk c of row r holds elements (r, 8c..8c+7)), every lane must receive its
// colwise block (column colwise_col, rows 32*band + 2w, +1 in word w): the order convert_block
// takes. The 8 addresses of each matrix must also hit 8 distinct bank groups.
TEST(WeightTileSwizzle, LdmatrixHandsEachLaneItsColumn) {
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int u = 0; u < 2; ++u) {
      const int group = colwise_group(warp, u);
      for (int n = 0; n < 4; ++n) {
        // The address each lane supplies: (row, physical chunk); the kernel hoists the chunk.
        int addr_row[32], addr_chunk[32];
        for (int lane = 0; lane < 32; ++lane) {
          addr_row[lane] = ldmatrix_row(lane, n);
          addr_chunk[lane] = swizzle16(ldmatrix_row(lane, 0), group);
          ASSERT_EQ(addr_chunk[lane], swizzle16(addr_row[lane], group)) << "hoisted key";
        }
        for (int i = 0; i < 4; ++i) {
          std::vector<int> chunks(addr_chunk + 8 * i, addr_chunk + 8 * i + 8);
          ASSERT_TRUE(distinct_groups(chunks)) << "matrix " << i;
        }
        for (int t = 0; t < 32; ++t) {
          for (int i = 0; i < 4; ++i) {
            for (int half = 0; half < 2; ++half) {
              const int src_lane = 8 * i + 2 * (t % 4) + half;
              const int row = addr_row[src_lane];
              // Which logical chunk sits at that physical chunk: invert the row's swizzle.
              int logical = -1;
              for (int c = 0; c < 16; ++c) {
                if (swizzle16(row, c) == addr_chunk[src_lane]) logical = c;
              }
              const int col = 8 * logical + t / 4;
              const int word = 4 * n + i;
              ASSERT_EQ(col, colwise_col(warp, t, u)) << "lane " << t;
              ASSERT_EQ(row, kBlock * colwise_band(t) + 2 * word + half)
                  << "lane " << t << " word " << word << " half " << half;
            }
          }
        }
      }
    }
  }
}

// ---- WeightTileStores ----

// Identity of a data byte: (block row or column, block index, byte in block).
using ByteId = std::tuple<int, int, int>;

// Emulates store_pair for every lane of a CTA: lane parity p's store s writes half p of block s
// of the pair (taken from the owner lane) at pair + 32*s. Returns the written offsets -> byte ids
// and fails on a double write.
template <typename PairOffset, typename StoreOk, typename BlockOf>
::testing::AssertionResult emulate_pair_stores(int iterations, PairOffset pair_offset,
                                               StoreOk store_ok, BlockOf block_of,
                                               std::map<int64_t, ByteId>& written) {
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int it = 0; it < iterations; ++it) {
      for (int lane = 0; lane < 32; ++lane) {
        const int p = lane & 1;
        for (int s = 0; s < 2; ++s) {
          if (!store_ok(warp, lane, it, s)) continue;
          // Block s of the pair is owned by the lane of parity s; its half p goes out.
          const int owner = (lane & ~1) | s;
          const auto [line, blk] = block_of(warp, owner, it);
          const int64_t at = pair_offset(warp, lane, it) + kBlock * s;
          for (int b = 0; b < 16; ++b) {
            const auto [pos, fresh] = written.emplace(at + b, ByteId{line, blk, 16 * p + b});
            if (!fresh) {
              return ::testing::AssertionFailure() << "byte " << at + b << " written twice";
            }
          }
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

struct PartialCase {
  int64_t G, N, K;
};

TEST(WeightTileStores, RowwiseEveryByteOnce) {
  for (const PartialCase c : {PartialCase{2, 96, 160}, PartialCase{1, 32, 32},
                              PartialCase{1, 128, 128}, PartialCase{3, 160, 224}}) {
    const int64_t tiles = c.G * tiles_per_expert(c.N, c.K);
    std::map<int64_t, ByteId> written;
    for (int64_t i = 0; i < tiles; ++i) {
      const Tile t = tile_of(i, c.N, c.K, false);
      std::map<int64_t, ByteId> tile_written;
      ASSERT_TRUE(emulate_pair_stores(
          2, [&](int w, int l, int j) { return rowwise_pair(t, w, l, j, c.N, c.K); },
          [&](int w, int l, int j, int s) { return rowwise_store_ok(t, w, l, j, s); },
          [&](int w, int l, int j) {
            return std::pair<int, int>{rowwise_row(w, l, j), rowwise_block(l)};
          },
          tile_written));
      for (const auto& [at, id] : tile_written) {
        const auto [row, blk, byte] = id;
        // The byte at q_row[g, n0 + row, k0 + 32 blk + byte] must be exactly this one.
        ASSERT_EQ(at, q_row_offset(t.g, t.n0 + row, t.k0 + kBlock * blk + byte, c.N, c.K));
        ASSERT_LT(row, t.rows);
        ASSERT_LT(kBlock * blk + byte, t.cols);
        ASSERT_TRUE(written.emplace(at, id).second) << "written by two tiles";
      }
    }
    ASSERT_EQ(int64_t(written.size()), c.G * c.N * c.K);  // and all inside [0, G*N*K)
    ASSERT_EQ(written.begin()->first, 0);
    ASSERT_EQ(written.rbegin()->first, c.G * c.N * c.K - 1);
  }
}

TEST(WeightTileStores, ColwiseEveryByteOnce) {
  for (const PartialCase c : {PartialCase{2, 96, 160}, PartialCase{1, 32, 32},
                              PartialCase{1, 128, 128}, PartialCase{3, 224, 160}}) {
    for (const bool n_fastest : {false, true}) {
      const int64_t tiles = c.G * tiles_per_expert(c.N, c.K);
      std::map<int64_t, ByteId> written;
      for (int64_t i = 0; i < tiles; ++i) {
        const Tile t = tile_of(i, c.N, c.K, n_fastest);
        std::map<int64_t, ByteId> tile_written;
        ASSERT_TRUE(emulate_pair_stores(
            2, [&](int w, int l, int u) { return colwise_pair(t, w, l, u, c.N, c.K); },
            [&](int w, int l, int u, int s) { return colwise_store_ok(t, w, l, u, s); },
            [&](int w, int l, int u) {
              return std::pair<int, int>{colwise_col(w, l, u), colwise_band(l)};
            },
            tile_written));
        for (const auto& [at, id] : tile_written) {
          const auto [col, band, byte] = id;
          // q_col[g, k0 + col, n0 + 32 band + byte] holds element (n0 + 32 band + byte, k0 + col).
          ASSERT_EQ(at, q_col_offset(t.g, t.n0 + kBlock * band + byte, t.k0 + col, c.N, c.K));
          ASSERT_LT(col, t.cols);
          ASSERT_LT(kBlock * band + byte, t.rows);
          ASSERT_TRUE(written.emplace(at, id).second) << "written by two tiles";
        }
      }
      ASSERT_EQ(int64_t(written.size()), c.G * c.N * c.K);
      ASSERT_EQ(written.begin()->first, 0);
      ASSERT_EQ(written.rbegin()->first, c.G * c.N * c.K - 1);
    }
  }
}

// Each warp store instruction of the pair exchange completes whole 32-byte sectors: the two lanes
// of a pair write the two halves of one block with the same instruction.
TEST(WeightTileStores, PairsCompleteSectors) {
  const Tile t{1, 128, 256, 128, 128};
  const int64_t N = 512, K = 512;
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int lane = 0; lane < 32; lane += 2) {
      for (int it = 0; it < 2; ++it) {
        for (int s = 0; s < 2; ++s) {
          const int64_t even_r = rowwise_pair(t, warp, lane, it, N, K) + kBlock * s;
          const int64_t odd_r = rowwise_pair(t, warp, lane + 1, it, N, K) + kBlock * s;
          ASSERT_EQ(even_r % 32, 0);
          ASSERT_EQ(odd_r, even_r + 16);
          const int64_t even_c = colwise_pair(t, warp, lane, it, N, K) + kBlock * s;
          const int64_t odd_c = colwise_pair(t, warp, lane + 1, it, N, K) + kBlock * s;
          ASSERT_EQ(even_c % 32, 0);
          ASSERT_EQ(odd_c, even_c + 16);
        }
      }
    }
  }
}

// The staged atoms: each (row, block) of a tile has one byte, zero exactly where the blocked
// layout pads (rows >= N, scale columns >= K/32 for s_row; the same for s_col).
TEST(WeightTileStores, AtomPaddingMasks) {
  for (const PartialCase c : {PartialCase{2, 96, 160}, PartialCase{1, 32, 2880}}) {
    const int64_t tiles = c.G * tiles_per_expert(c.N, c.K);
    for (int64_t i = 0; i < tiles; ++i) {
      const Tile t = tile_of(i, c.N, c.K, false);
      for (int r = 0; r < 128; ++r) {
        for (int b = 0; b < 4; ++b) {
          ASSERT_EQ(row_scale_ok(t, r, b), t.n0 + r < c.N && t.k0 / 32 + b < c.K / 32);
          ASSERT_EQ(col_scale_ok(t, r, b), t.k0 + r < c.K && t.n0 / 32 + b < c.N / 32);
        }
      }
    }
  }
}

// Divider::div(n) == n / d for CTA indices n < 2^31: every n below 2^16 (d <= 64) or 2^11, random
// n, and both sides of multiples of d up to the largest; d = 0 divides by 1.
TEST(TileDivider, MatchesDivision) {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int b = 12; b < 31; ++b) {
    for (int64_t d : {(int64_t(1) << b) - 1, int64_t(1) << b, (int64_t(1) << b) + 1}) {
      divisors.push_back(uint32_t(d));
    }
  }
  divisors.push_back(0x7FFFFFFFu);
  std::mt19937_64 rng(7);
  int64_t checked = 0;
  for (const uint32_t d : divisors) {
    const mxq::kernels::Divider div = mxq::kernels::Divider::of(d);
    ASSERT_EQ(div.d, d);
    const auto check = [&](uint32_t n) {
      ASSERT_EQ(div.div(n), n / d) << "n " << n << " d " << d;
      ++checked;
    };
    for (uint32_t n = 0; n < (d <= 64 ? 65536u : 2048u); ++n) check(n);
    for (int i = 0; i < 2000; ++i) check(uint32_t(rng() % 0x80000000u));
    for (uint32_t q : {1u, 2u, 3u, 1000u, 0x7FFFFFFFu / d}) {  // both sides of multiples of d
      const uint64_t m = uint64_t(q) * d;
      for (int64_t n : {int64_t(m) - 1, int64_t(m), int64_t(m) + 1}) {
        if (n >= 0 && n < 0x80000000LL) check(uint32_t(n));
      }
    }
  }
  EXPECT_GT(checked, 10000000);
  const mxq::kernels::Divider none = mxq::kernels::Divider::of(0);  // a launch without tiles
  EXPECT_EQ(none.d, 1u);
  EXPECT_EQ(none.div(12345), 12345u);
}

}  // namespace
}  // namespace mxq::test
