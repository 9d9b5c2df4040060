// MXFP8 quantization kernels: rowwise 1x32, colwise 32x1 (transposed output) and the fused
// dual-axis kernel, all one templated tile kernel (docs/numerics.md §2-§8).
//
// x: bf16 (M, K) row-major. Outputs, each optional per variant:
//   q_row (M, K) e4m3 and s_row in the blocked layout;
//   q_col (K, M) e4m3, row k = column k of x, with S_col plain (K, M/32), blocked, or in the
//   K-groups layout.
// Rounding: RCEIL or FLOOR scale (numerics.h), e4m3 by cvt.rn.satfinite; blocks with NaN/Inf become
// all 0x7F.
//
// One CTA quantizes one 128x128 tile, which maps to exactly one 512-byte scale atom per axis.
//   ---- load ----     coalesced 16-byte loads (a warp instruction reads two whole tile rows), 8
//                      per thread: 32 KiB in flight per CTA, 4 CTAs per SM; staged in shared memory
//                      (16-byte chunks XOR-swizzled per row so that every access pattern below is
//                      conflict-free).
//   ---- rowwise ----  a thread quantizes two whole 1x32 blocks (amax, scale, convert; no
//                      shuffles), then swaps half a block with its neighbour lane so that every
//                      16-byte store completes a 32-byte sector.
//   ---- colwise ----  ldmatrix.trans hands each thread one whole 32x1 block (a column of one
//                      32-row block, as 16 words of two consecutive rows: the rowwise word order);
//                      it converts and stores the 32 bytes of its q_col row segment straight from
//                      registers, with the same neighbour exchange as the rowwise stores.
//   Only the two 512-byte scale atoms are staged for a final barrier and one 16-byte store per
//   lane of one warp.
// NOTES:
// - Every variant (rowwise only, colwise only, fused, the composed path's colwise step) is this
//   one kernel; the template picks the outputs. Tile order: K fastest, except colwise only, whose
//   only output runs along M (consecutive CTAs then continue the same 128 rows of q_col).
// - q_col is stored straight from registers as whole 32-byte sectors (neighbour lanes exchange
//   half a block): no transposed staging tile, no extra barrier. This is what took fused from
//   76-82% to 85-89% of the copy roof on the H200.
// - 33.8 KB of shared memory per CTA, under the 48 KB that needs no opt-in attribute, so launches
//   set no function attribute (that costs a driver call per launch).
// - The variants tried and rejected, with their measurements, are in docs/performance.md.
#include <cuda_runtime.h>

#include "common.cuh"
#include "launch.h"

namespace mxq::kernels {

// How the colwise scales leave the kernel.
enum class ColScales { kNone, kPlain, kBlocked, kKGroups };

struct Config {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunk = 8;                                 // bf16 per 16-byte load
  static constexpr int kChunksPerRow = kTile / kChunk;             // 16
  static constexpr int kLoads = kTile * kChunksPerRow / kThreads;  // 8 loads per thread
  static constexpr int kChunksPerBlock = kBlock / kChunk;          // 4
  static constexpr int kBlocksPerRow = kTile / kBlock;             // 4
  static constexpr int kRowBlocksPerThread = kTile * kBlocksPerRow / kThreads;  // 2
  static constexpr int kRowsPerWarp = kTile / kWarps;                           // 16
  static constexpr int kColBlocks = kTile / kBlock;                             // 4 per column
  static constexpr int kColGroups = kTile / 8;  // 8-column groups, one ldmatrix column set each
  static constexpr int kColGroupsPerWarp = kColGroups / kWarps;  // 2
  static constexpr int kMinBlocksPerSm = 4;
  static_assert(kThreads % 32 == 0, "threads must be whole warps");
  static_assert(kTile % kBlock == 0, "tile must hold whole blocks");
  static_assert(kRowsPerWarp * kBlocksPerRow == 32 * kRowBlocksPerThread,
                "a warp owns 16 rows: lane l takes blocks l and l+32 of them");
  static_assert(kBlocksPerRow % 2 == 0,
                "neighbour lanes pair up on adjacent blocks for full-sector stores");
  static_assert(kColGroups % kWarps == 0 && kColBlocks == 4,
                "a warp's ldmatrix covers one 8-column group x 4 blocks; lane t takes block t%4");
  static_assert(kTile / kBlock == kAtomCols && kTile == kAtomRows,
                "a tile maps to one 128x4 scale atom");
};

struct alignas(16) SharedStorage {
  alignas(
      16) uint4 tile[kTile][kTile / 8];  // bf16 tile, [row][16-byte chunk ^ tile_key()] (32 KiB)
  alignas(16) uint8_t row_atom[kAtomBytes];  // s_row atom of this tile
  alignas(16) uint8_t col_atom[kAtomBytes];  // s_col atom (blocked layouts) or [k][block] (plain)
  GroupSpan span;                            // K-groups: the tile's group, tokens
};
static_assert(sizeof(SharedStorage) * Config::kMinBlocksPerSm <= 227 * 1024,
              "4 CTAs must fit one SM");
static_assert(sizeof(SharedStorage) <= 48 * 1024,
              "above 48 KB every launch would need cudaFuncAttributeMaxDynamicSharedMemorySize");

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
  int64_t tiles;  // CTAs past this zero-fill the K-groups slack, or write the status word
};

// Logical chunk c (0..15) of row `row` of the staged bf16 tile is stored at physical chunk
// c ^ tile_key(row, c / 8), a 3-bit key (bit 0: c/8 ^ row bit 5, bit 1: row bit 0, bit 2: row
// bit 6). The bank group of a chunk is its low 3 bits, and every 8-lane phase of shared access hits
// 8 different groups:
//   - load: 8 consecutive chunks of one row (any XOR within the row keeps them distinct);
//   - rowwise: chunks {i, 4+i, 8+i, 12+i} of rows r, r+1 (r even): c/8 and row bit 0 separate them;
//   - colwise ldmatrix: one chunk of rows {R, R+1, R+32, R+33, R+64, R+65, R+96, R+97}: row bits
//     0, 5 and 6 take all 8 values.
// In the load and colwise phases a thread's rows differ only in bits 1-4 and its chunks share c/8,
// so it computes its key once. (Hoisting the rowwise key too costs the rowwise-only kernel spills.)
__device__ __forceinline__ int tile_key(int row, int half) {
  return ((half ^ (row >> 5)) & 1) | ((row & 1) << 1) | ((row >> 4) & 4);
}

// ---- the three phases of a tile ----

// Lanes 2i and 2i+1 each hold the 32 e4m3 bytes of one block, q[0] and q[1], and their blocks are
// adjacent in one output row. The lanes exchange half a block so that each 16-byte store of the
// pair completes one 32-byte sector: the even lane stores its first half and, one block on, its
// neighbour's first half; the odd lane its neighbour's second half, then its own second half.
// q_pair = the even lane's block + 16 * (lane is odd).
__device__ __forceinline__ void store_block_pair(uint8_t* q_pair, const uint4 (&q)[2]) {
  const bool odd = threadIdx.x & 1;
  const uint4 send = odd ? q[0] : q[1];
  uint4 recv;
  recv.x = __shfl_xor_sync(0xFFFFFFFFu, send.x, 1);
  recv.y = __shfl_xor_sync(0xFFFFFFFFu, send.y, 1);
  recv.z = __shfl_xor_sync(0xFFFFFFFFu, send.z, 1);
  recv.w = __shfl_xor_sync(0xFFFFFFFFu, send.w, 1);
  ptx::st_global_v4(q_pair, odd ? recv : q[0]);
  ptx::st_global_v4(q_pair + kBlock, odd ? q[1] : recv);
}

// Rowwise: one whole 1x32 block v[0..3] per thread; lanes 2i and 2i+1 hold adjacent blocks of one
// row.
template <ScaleRounding kRule>
__device__ __forceinline__ uint8_t rowwise_block(const uint4 (&v)[Config::kChunksPerBlock],
                                                 uint8_t* q_pair) {
  uint32_t m2 = 0;
#pragma unroll
  for (int i = 0; i < Config::kChunksPerBlock; ++i) {
    m2 = ptx::max_u16x2(m2, ptx::max_u16x2(ptx::max_u16x2(v[i].x & kAbsMask2, v[i].y & kAbsMask2),
                                           ptx::max_u16x2(v[i].z & kAbsMask2, v[i].w & kAbsMask2)));
  }
  const BlockScale bs = block_scale<kRule>(max(m2 & 0xFFFFu, m2 >> 16));
  uint4 q[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    q[h] = make_uint4(bs.select(quantize_words(v[2 * h].x, v[2 * h].y, bs.r)),
                      bs.select(quantize_words(v[2 * h].z, v[2 * h].w, bs.r)),
                      bs.select(quantize_words(v[2 * h + 1].x, v[2 * h + 1].y, bs.r)),
                      bs.select(quantize_words(v[2 * h + 1].z, v[2 * h + 1].w, bs.r)));
  }
  store_block_pair(q_pair, q);
  return bs.s;
}

// Colwise: warp w converts 8-column groups w and w + 8, each of all four 32-row blocks. Lane 8i+j
// addresses row 32*(j/2) + 8n + 2i + j%2 for ldmatrix n, so that (ptx.cuh) lane t receives column
// t/4 of the group at rows 2(4n+i), 2(4n+i)+1 of block t%4: word 4n+i of its whole 32x1 block, in
// the order quantize_words takes. Lanes 4j..4j+3 hold the four blocks of q_col row 8*group + j, so
// neighbour lanes store whole sectors (store_block_pair) and a warp instruction writes 64 bytes
// into each of 8 rows. The scale goes to the colwise scale staging (atom layout, or [k][block] for
// plain scales).
template <ColScales kCol, ScaleRounding kRule>
__device__ __forceinline__ void colwise_blocks(const uint4 (*tile)[kTile / 8], uint8_t* q_col_tile,
                                               int64_t M, uint8_t* col_atom) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int addr_row = kBlock * ((lane % 8) / 2) + 2 * (lane / 8) + lane % 2;  // + 8n
  const int blk = lane % 4;
#pragma unroll
  for (int u = 0; u < Config::kColGroupsPerWarp; ++u) {
    const int group = warp + u * Config::kWarps;
    const int chunk = group ^ tile_key(addr_row, group / 8);  // rows addr_row + 8n
    uint32_t w[kBlock / 2];
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const uint4 m = ptx::ldmatrix_x4_trans(&tile[addr_row + 8 * n][chunk]);
      w[4 * n] = m.x;
      w[4 * n + 1] = m.y;
      w[4 * n + 2] = m.z;
      w[4 * n + 3] = m.w;
    }
    uint32_t m2 = 0;
#pragma unroll
    for (int i = 0; i < kBlock / 2; ++i) m2 = ptx::max_u16x2(m2, w[i] & kAbsMask2);
    const BlockScale bs = block_scale<kRule>(max(m2 & 0xFFFFu, m2 >> 16));
    const int k = 8 * group + lane / 4;
    uint4 q[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t* v = w + 8 * h;
      q[h] = make_uint4(
          bs.select(quantize_words(v[0], v[1], bs.r)), bs.select(quantize_words(v[2], v[3], bs.r)),
          bs.select(quantize_words(v[4], v[5], bs.r)), bs.select(quantize_words(v[6], v[7], bs.r)));
    }
    store_block_pair(q_col_tile + k * M + (blk & ~1) * kBlock + (lane & 1) * 16, q);
    if constexpr (kCol == ColScales::kPlain) {
      col_atom[k * Config::kColBlocks + blk] = bs.s;
    } else {
      col_atom[atom_offset<unsigned>(k, blk)] = bs.s;
    }
  }
}

// Stores of both staged scale atoms (after a barrier over the staging).
template <bool kRowwise, ColScales kCol>
__device__ __forceinline__ void store_atoms(const TileParams& p, int64_t m0, int64_t k0,
                                            const SharedStorage& smem) {
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  if constexpr (kCol != ColScales::kNone) {
    if constexpr (kCol == ColScales::kPlain) {
      if (tid < kTile) {  // row k of S_col (K, M/32): this tile's 4 bytes, one aligned word
        *reinterpret_cast<uint32_t*>(p.s_col + (k0 + tid) * (p.M / kBlock) + m0 / kBlock) =
            reinterpret_cast<const uint32_t*>(smem.col_atom)[tid];
      }
    } else if (warp == 0) {
      int64_t atom = -1;
      if constexpr (kCol == ColScales::kBlocked) {
        atom = blocked_offset(k0, m0 / kBlock, p.M / kBlock);
      } else if (smem.span.end > smem.span.begin) {  // the uncovered tail places no scales
        atom = kgroups_atom_offset(smem.span, p.K, k0, m0);
      }
      if (atom >= 0) {
        ptx::st_global_v4(p.s_col + atom + lane * 16,
                          reinterpret_cast<const uint4*>(smem.col_atom)[lane]);
      }
    }
  }
  if constexpr (kRowwise) {
    if (warp == Config::kWarps - 1) {
      const int64_t atom = blocked_offset(m0, k0 / kBlock, p.K / kBlock);
      ptx::st_global_v4(p.s_row + atom + lane * 16,
                        reinterpret_cast<const uint4*>(smem.row_atom)[lane]);
    }
  }
}

template <bool kRowwise, ColScales kCol, ScaleRounding kRule>
__global__ void __launch_bounds__(Config::kThreads, Config::kMinBlocksPerSm)
    quantize_tile_kernel(const TileParams p) {
  constexpr bool kColwise = kCol != ColScales::kNone;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);

  if (blockIdx.x >= p.tiles) {  // the CTAs appended by grouped launches
    if constexpr (kCol == ColScales::kKGroups) {
      zero_fill_slack(p.s_col, p.offs, p.num_groups, p.M, p.K, blockIdx.x - p.tiles, p.status);
    } else if (threadIdx.x < 32) {  // rowwise only: s_row needs no offs, only the report does
      const int32_t bits = offs_status_warp(p.offs, p.num_groups, p.M);
      if (threadIdx.x == 0) *p.status = bits;
    }
    return;
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // Tile order: K fastest, except for the colwise-only kernel, whose only output runs along M.
  const int64_t fast_tiles = (kRowwise ? p.K : p.M) / kTile;
  const int64_t fast0 = blockIdx.x % fast_tiles * kTile;
  const int64_t slow0 = blockIdx.x / fast_tiles * kTile;
  const int64_t m0 = kRowwise ? slow0 : fast0;
  const int64_t k0 = kRowwise ? fast0 : slow0;

  // ---- load ---- coalesced: a warp instruction reads two whole 256-byte tile rows. Warp w loads
  // exactly the 16 rows its rowwise pass owns (row 16w + 2i + lane/16, chunk lane%16), so the
  // rowwise pass needs only __syncwarp and runs while other warps still wait for their loads.
  // Every chunk also goes to the staged tile.
  const int chunk = lane % Config::kChunksPerRow;
  const int row0 = warp * Config::kRowsPerWarp + lane / Config::kChunksPerRow;
  constexpr int kLoadStep = 32 / Config::kChunksPerRow;  // 2 rows per warp instruction
  const uint16_t* x = p.x + (m0 + row0) * p.K + k0 + chunk * Config::kChunk;
  uint4 v[Config::kLoads];
#pragma unroll
  for (int i = 0; i < Config::kLoads; ++i) v[i] = ptx::ld_global_nc_v4(x + i * kLoadStep * p.K);
  if constexpr (kCol == ColScales::kKGroups) {
    if (warp == 0) {
      const GroupSpan span = find_group_warp(p.offs, p.num_groups, p.M, m0);
      if (lane == 0) smem.span = span;
    }
  }
  const int load_key = tile_key(row0, chunk / 8);  // rows row0 + 2i
#pragma unroll
  for (int i = 0; i < Config::kLoads; ++i) {
    const int row = row0 + i * kLoadStep;
    smem.tile[row][chunk ^ load_key] = v[i];
  }
  __syncwarp();
  // ---- rowwise ---- warp w owns rows 16w..16w+15; lane l takes blocks l and l+32 of them: block
  // b is row 16w + b/4, columns 32*(b%4)..
  if constexpr (kRowwise) {
    const int blk = lane % Config::kBlocksPerRow;
    const int row =
        warp * Config::kRowsPerWarp + lane / Config::kBlocksPerRow;  // + 8 for the second block
    constexpr int kRowStep = 32 / Config::kBlocksPerRow;             // 8
    // The pair's two adjacent blocks start at the even lane's block; this lane stores 16 bytes into
    // each.
    uint8_t* q_pair = p.q_row + (m0 + row) * p.K + k0 + (blk & ~1) * kBlock + (lane & 1) * 16;
    // row % 32 < 24 and the second block is 8 rows on: its atom offset is the first one's + 8 * 16.
    const unsigned atom = atom_offset<unsigned>(row, blk);
#pragma unroll
    for (int j = 0; j < Config::kRowBlocksPerThread; ++j) {
      const int r = row + j * kRowStep;
      uint4 b[Config::kChunksPerBlock];
#pragma unroll
      for (int i = 0; i < Config::kChunksPerBlock; ++i) {
        b[i] = smem.tile[r][(blk * Config::kChunksPerBlock + i) ^ tile_key(r, blk / 2)];
      }
      smem.row_atom[atom + j * kRowStep * 16] =
          rowwise_block<kRule>(b, q_pair + j * kRowStep * p.K);
    }
  }
  __syncthreads();
  // ---- colwise ----
  if constexpr (kColwise) {
    colwise_blocks<kCol, kRule>(smem.tile, p.q_col + k0 * p.M + m0, p.M, smem.col_atom);
  }
  __syncthreads();
  // ---- scales ----
  store_atoms<kRowwise, kCol>(p, m0, k0, smem);
}

// ---- host launchers ----

// CTAs after the tiles: the K-groups zero fill (which also writes the status word), or one CTA for
// the status word of a grouped rowwise-only call.
int64_t appended_ctas(const TileParams& p, ColScales col) {
  if (col == ColScales::kKGroups) return zero_fill_ctas(p.M, p.K, p.num_groups);
  return p.status != nullptr ? 1 : 0;
}

template <bool kRowwise, ColScales kCol, ScaleRounding kRule>
void launch_rule(const TileParams& params, cudaStream_t stream) {
  constexpr int smem_bytes = sizeof(SharedStorage);
  const int64_t grid = params.tiles + appended_ctas(params, kCol);
  MXQ_CHECK(grid <= 0x7FFFFFFF, "too many tiles for one launch: ", grid);
  if (grid == 0) return;
  quantize_tile_kernel<kRowwise, kCol, kRule>
      <<<static_cast<unsigned>(grid), Config::kThreads, smem_bytes, stream>>>(params);
  MXQ_CHECK_CUDA(cudaGetLastError());
}

template <bool kRowwise, ColScales kCol>
void launch_tile_kernel(const TileParams& params, ScaleRounding rule, cudaStream_t stream) {
  if (rule == ScaleRounding::kRceil) {
    launch_rule<kRowwise, kCol, ScaleRounding::kRceil>(params, stream);
  } else {
    launch_rule<kRowwise, kCol, ScaleRounding::kFloor>(params, stream);
  }
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
  t.tiles = (p.M / kTile) * (p.K / kTile);
  return t;
}

}  // namespace mxq::kernels

namespace mxq::detail {
using kernels::ColScales;

void launch_quantize(const QuantizeParams& p) {
  const kernels::TileParams t = kernels::tile_params(p);
  const bool grouped = p.offs != nullptr;
  if (!p.colwise()) {
    kernels::launch_tile_kernel<true, ColScales::kNone>(t, p.rounding, p.stream);
  } else if (!p.rowwise()) {
    if (grouped) {
      kernels::launch_tile_kernel<false, ColScales::kKGroups>(t, p.rounding, p.stream);
    } else {
      kernels::launch_tile_kernel<false, ColScales::kBlocked>(t, p.rounding, p.stream);
    }
  } else if (grouped) {
    kernels::launch_tile_kernel<true, ColScales::kKGroups>(t, p.rounding, p.stream);
  } else {
    kernels::launch_tile_kernel<true, ColScales::kBlocked>(t, p.rounding, p.stream);
  }
}

void launch_quantize_composed(const QuantizeParams& p, uint8_t* workspace) {
  kernels::TileParams row = kernels::tile_params(p);
  row.q_col = row.s_col = nullptr;
  row.status = nullptr;  // the swizzle reports on offs
  kernels::launch_tile_kernel<true, ColScales::kNone>(row, p.rounding, p.stream);
  kernels::TileParams col = kernels::tile_params(p);
  col.q_row = col.s_row = nullptr;
  col.s_col = workspace;  // plain S_col (K, M/32)
  col.status = nullptr;
  kernels::launch_tile_kernel<false, ColScales::kPlain>(col, p.rounding, p.stream);
  launch_swizzle_col_scales(workspace, p);
}

}  // namespace mxq::detail
