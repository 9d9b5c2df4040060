// MXFP8 quantization kernels: rowwise 1x32, colwise 32x1 (transposed output) and the fused dual-axis kernel,
// all one templated tile kernel (docs/numerics.md; SPEC §2-§8).
//
// x: bf16 (M, K) row-major. Outputs, each optional per variant:
//   q_row (M, K) e4m3 and s_row in the blocked layout;
//   q_col (K, M) e4m3, row k = column k of x, with S_col plain (K, M/32), blocked, or in the K-groups layout.
// Rounding: RCEIL or FLOOR scale (numerics.h), e4m3 by cvt.rn.satfinite; blocks with NaN/Inf become all 0x7F.
//
// One CTA quantizes one 128x128 tile, which maps to exactly one 512-byte scale atom per axis.
//   ---- load ----     256 threads issue 8 16-byte loads each (32 KiB in flight per CTA) into registers.
//   ---- rowwise ----  4 adjacent lanes hold one 1x32 block: amax by packed max + 2 shuffles, convert in
//                      registers, 8-byte stores (a warp writes two whole 128-byte lines).
//   ---- colwise ----  the tile is staged in shared memory; each thread reads one column pair of one 32-row
//                      block as packed words (conflict-free), converts, and writes its 2x32 bytes into a
//                      transposed shared tile, which the CTA then stores as whole 128-byte rows of q_col.
// NOTES:
// - Rejected: storing q_col straight from registers (each lane its own output row): uncoalesced, measured at
//   52-69% of the copy roof by the access-pattern probe (shared/anchors); staging makes every store a full line.
// - Rejected: a TMA load of the tile: the rowwise half wants the data in registers anyway, and plain 16-byte
//   loads from 4 resident CTAs keep 128 KiB per SM in flight, enough for the H200's bandwidth-latency product.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common.cuh"
#include "launch.h"

namespace mxq::kernels {

// How the colwise scales leave the kernel.
enum class ColScales { kNone, kPlain, kBlocked, kKGroups };

struct Config {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunk = 8;                        // bf16 per 16-byte load
  static constexpr int kChunksPerRow = kTile / kChunk;    // 16
  static constexpr int kRowsPerLoad = kThreads / kChunksPerRow;  // 16 rows per CTA-wide load
  static constexpr int kLoads = kTile / kRowsPerLoad;     // 8 loads per thread
  static constexpr int kColPairs = kTile / 2;             // 64 packed column pairs
  static constexpr int kColBlocks = kTile / kBlock;       // 4 32-row blocks per tile
  static constexpr int kMinBlocksPerSm = 4;
  static_assert(kThreads % 32 == 0, "threads must be whole warps");
  static_assert(kTile % kBlock == 0, "tile must hold whole blocks");
  static_assert(kChunk * 4 == kBlock, "4 lanes hold one 1x32 block");
  static_assert(kThreads == kColPairs * kColBlocks, "one colwise work item (column pair x block) per thread");
  static_assert(kTile / kBlock == kAtomCols && kTile == kAtomRows, "a tile maps to one 128x4 scale atom");
};

struct alignas(16) SharedStorage {
  alignas(16) uint32_t tile[kTile][kTile / 2];        // bf16 tile as packed pairs, [row][pair]  (32 KiB)
  alignas(16) uint4 q_col[kTile][kTile / 16];         // transposed e4m3, [k][16-byte chunk, swizzled] (16 KiB)
  alignas(16) uint8_t row_atom[kAtomBytes];           // s_row atom of this tile
  alignas(16) uint8_t col_atom[kAtomBytes];           // s_col atom (blocked layouts) or [k][block] (plain)
  GroupSpan span;                                     // K-groups: the tile's group, tokens
};
static_assert(sizeof(SharedStorage) * Config::kMinBlocksPerSm <= 227 * 1024, "4 CTAs must fit one SM");

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
  int64_t tiles;
  int64_t tile_ctas;  // CTAs that quantize tiles; those past it zero-fill the K-groups slack
};

// Chunk index j of transposed row k, swizzled so that the 8 lanes of a 16-byte store phase, which write rows
// k = 2*lane (+1), hit 8 different bank groups.
__device__ __forceinline__ int swizzle_chunk(int k, int j) { return j ^ ((k >> 1) & 7); }

// ---- the three phases of a tile, shared by both kernels ----

// Rowwise: one 16-byte chunk (8 values) of tile row `row`; 4 adjacent lanes hold one 1x32 block.
template <ScaleRounding kRule>
__device__ __forceinline__ void rowwise_chunk(uint4 v, int row, int chunk, uint8_t* q_row_dst,
                                              uint8_t* row_atom) {
  const int lane = threadIdx.x % 32;
  uint32_t amax = ptx::max_u16x2(ptx::max_u16x2(v.x & kAbsMask2, v.y & kAbsMask2),
                                 ptx::max_u16x2(v.z & kAbsMask2, v.w & kAbsMask2));
  amax = max(amax & 0xFFFFu, amax >> 16);
  amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
  amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
  const BlockScale bs = block_scale<kRule>(amax);
  uint2 q = make_uint2(quantize_words(v.x, v.y, bs.r), quantize_words(v.z, v.w, bs.r));
  if (bs.s == kE8m0Nan) q = make_uint2(kNanWord, kNanWord);
  ptx::st_global_v2(q_row_dst, q);
  if (lane % 4 == 0) row_atom[atom_offset<unsigned>(row, chunk / 4)] = bs.s;
}

// Colwise: this thread's column pair of one 32-row block, read from the staged bf16 tile, converted into the
// transposed q_col tile and the colwise scale staging (atom layout, or [k][block] for plain scales).
template <ColScales kCol, ScaleRounding kRule>
__device__ __forceinline__ void colwise_pair(const uint32_t (*tile)[kTile / 2], uint4 (*q_col)[kTile / 16],
                                             uint8_t* col_atom) {
  const int pair = threadIdx.x % Config::kColPairs;
  const int blk = threadIdx.x / Config::kColPairs;
  uint32_t w[kBlock];
  uint32_t amax = 0;
#pragma unroll
  for (int j = 0; j < kBlock; ++j) {
    w[j] = tile[blk * kBlock + j][pair];
    amax = ptx::max_u16x2(amax, w[j] & kAbsMask2);
  }
  const BlockScale lo = block_scale<kRule>(amax & 0xFFFFu);
  const BlockScale hi = block_scale<kRule>(amax >> 16);
  // 32 bytes per column: output rows k = 2*pair (low halves) and 2*pair+1 (high halves).
  uint32_t q_lo[8], q_hi[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    q_lo[j] = lo.s == kE8m0Nan ? kNanWord : quantize_column4<false>(w + 4 * j, lo.r);
    q_hi[j] = hi.s == kE8m0Nan ? kNanWord : quantize_column4<true>(w + 4 * j, hi.r);
  }
  const int k = 2 * pair;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    q_col[k][swizzle_chunk(k, 2 * blk + h)] =
        make_uint4(q_lo[4 * h], q_lo[4 * h + 1], q_lo[4 * h + 2], q_lo[4 * h + 3]);
    q_col[k + 1][swizzle_chunk(k + 1, 2 * blk + h)] =
        make_uint4(q_hi[4 * h], q_hi[4 * h + 1], q_hi[4 * h + 2], q_hi[4 * h + 3]);
  }
  if constexpr (kCol == ColScales::kPlain) {
    col_atom[k * Config::kColBlocks + blk] = lo.s;
    col_atom[(k + 1) * Config::kColBlocks + blk] = hi.s;
  } else {
    col_atom[atom_offset<unsigned>(k, blk)] = lo.s;
    col_atom[atom_offset<unsigned>(k + 1, blk)] = hi.s;
  }
}

// Stores of the staged colwise tile and both scale atoms (after a barrier over the staging).
template <bool kRowwise, ColScales kCol>
__device__ __forceinline__ void store_staged(const TileParams& p, int64_t m0, int64_t k0,
                                             const uint4 (*q_col)[kTile / 16], const uint8_t* row_atom,
                                             const uint8_t* col_atom, GroupSpan span) {
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  if constexpr (kCol != ColScales::kNone) {
    // q_col: each warp instruction writes 4 whole 128-byte rows.
#pragma unroll
    for (int i = 0; i < kTile * (kTile / 16) / Config::kThreads; ++i) {
      const int idx = i * Config::kThreads + tid;
      const int kr = idx / (kTile / 16);
      const int j = idx % (kTile / 16);
      ptx::st_global_v4(p.q_col + (k0 + kr) * p.M + m0 + j * 16, q_col[kr][swizzle_chunk(kr, j)]);
    }
    if constexpr (kCol == ColScales::kPlain) {
      if (tid < kTile) {  // row k of S_col (K, M/32): this tile's 4 bytes, one aligned word
        *reinterpret_cast<uint32_t*>(p.s_col + (k0 + tid) * (p.M / kBlock) + m0 / kBlock) =
            reinterpret_cast<const uint32_t*>(col_atom)[tid];
      }
    } else if (warp == 0) {
      int64_t atom = -1;
      if constexpr (kCol == ColScales::kBlocked) {
        atom = blocked_offset(k0, m0 / kBlock, p.M / kBlock);
      } else if (span.end > span.begin) {  // the uncovered tail places no scales
        atom = kgroups_atom_offset(span, p.K, k0, m0);
      }
      if (atom >= 0) {
        ptx::st_global_v4(p.s_col + atom + lane * 16, reinterpret_cast<const uint4*>(col_atom)[lane]);
      }
    }
  }
  if constexpr (kRowwise) {
    if (warp == Config::kWarps - 1) {
      const int64_t atom = blocked_offset(m0, k0 / kBlock, p.K / kBlock);
      ptx::st_global_v4(p.s_row + atom + lane * 16, reinterpret_cast<const uint4*>(row_atom)[lane]);
    }
  }
}

template <bool kRowwise, ColScales kCol, ScaleRounding kRule>
__global__ void __launch_bounds__(Config::kThreads, Config::kMinBlocksPerSm)
    quantize_tile_kernel(const TileParams p) {
  constexpr bool kColwise = kCol != ColScales::kNone;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);

  if constexpr (kCol == ColScales::kKGroups) {
    if (blockIdx.x >= p.tile_ctas) {
      zero_fill_slack(p.s_col, p.offs, p.num_groups, p.M, p.K, blockIdx.x - p.tile_ctas, p.status);
      return;
    }
  }
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int64_t k_tiles = p.K / kTile;
  const int64_t m0 = blockIdx.x / k_tiles * kTile;
  const int64_t k0 = blockIdx.x % k_tiles * kTile;

  // ---- load ---- thread (warp, lane), load i: row row0 + i*16, chunk lane%16.
  const int chunk = lane % Config::kChunksPerRow;
  const int row0 = warp * 2 + lane / Config::kChunksPerRow;
  const int64_t row_stride = Config::kRowsPerLoad * p.K;
  const uint16_t* x = p.x + (m0 + row0) * p.K + k0 + chunk * Config::kChunk;
  uint4 v[Config::kLoads];
#pragma unroll
  for (int i = 0; i < Config::kLoads; ++i) v[i] = ptx::ld_global_nc_v4(x + i * row_stride);
  if constexpr (kCol == ColScales::kKGroups) {
    if (warp == 0) {
      const GroupSpan span = find_group_warp(p.offs, p.num_groups, p.M, m0);
      if (lane == 0) smem.span = span;
    }
  }
  if constexpr (kColwise) {
#pragma unroll
    for (int i = 0; i < Config::kLoads; ++i) {
      reinterpret_cast<uint4*>(smem.tile[row0 + i * Config::kRowsPerLoad])[chunk] = v[i];
    }
  }
  // ---- rowwise ----
  if constexpr (kRowwise) {
    uint8_t* q_row = p.q_row + (m0 + row0) * p.K + k0 + chunk * Config::kChunk;
#pragma unroll
    for (int i = 0; i < Config::kLoads; ++i) {
      rowwise_chunk<kRule>(v[i], row0 + i * Config::kRowsPerLoad, chunk, q_row + i * row_stride,
                           smem.row_atom);
    }
  }
  __syncthreads();
  // ---- colwise ----
  if constexpr (kColwise) {
    colwise_pair<kCol, kRule>(smem.tile, smem.q_col, smem.col_atom);
    __syncthreads();
  }
  // ---- store ----
  store_staged<kRowwise, kCol>(p, m0, k0, smem.q_col, smem.row_atom, smem.col_atom, smem.span);
}

// The persistent, pipelined variant: CTAs loop over tiles; warp 0 streams each tile into one of kStages
// shared-memory stages with 128 bulk copies (one per 256-byte tile row) completing on the stage's mbarrier,
// so up to kStages tiles per CTA are in flight while the CTA converts the current one.
template <int kStages>
struct PipelinedStorage {
  alignas(128) uint32_t tile[kStages][kTile][kTile / 2];  // bf16 tiles as packed pairs (32 KiB each)
  alignas(16) uint4 q_col[kTile][kTile / 16];
  alignas(16) uint8_t row_atom[kAtomBytes];
  alignas(16) uint8_t col_atom[kAtomBytes];
  alignas(8) uint64_t full[kStages];
  GroupSpan span;
};

template <bool kRowwise, ColScales kCol, ScaleRounding kRule, int kStages>
__global__ void __launch_bounds__(Config::kThreads)
    quantize_pipelined_kernel(const TileParams p) {
  constexpr bool kColwise = kCol != ColScales::kNone;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<PipelinedStorage<kStages>*>(smem_raw);
  const int64_t tile_ctas = p.tile_ctas;
  if constexpr (kCol == ColScales::kKGroups) {
    if (blockIdx.x >= tile_ctas) {
      zero_fill_slack(p.s_col, p.offs, p.num_groups, p.M, p.K, blockIdx.x - tile_ctas, p.status);
      return;
    }
  }
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int64_t k_tiles = p.K / kTile;

  // Warp 0: one tile = 128 rows of 256 bytes; lane l copies rows 4l..4l+3.
  auto issue = [&](int64_t tile, int stage) {
    const int64_t m0 = tile / k_tiles * kTile;
    const int64_t k0 = tile % k_tiles * kTile;
    if (lane == 0) ptx::mbarrier_arrive_expect_tx(&smem.full[stage], kTile * kTile * 2);
    __syncwarp();
#pragma unroll
    for (int r = 0; r < kTile / 32; ++r) {
      const int row = lane * (kTile / 32) + r;
      ptx::bulk_copy_g2s(smem.tile[stage][row], p.x + (m0 + row) * p.K + k0, kTile * 2, &smem.full[stage]);
    }
  };
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) ptx::mbarrier_init(&smem.full[s], 1);
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (warp == 0) {
    for (int s = 0; s < kStages; ++s) {
      if (blockIdx.x + s * tile_ctas < p.tiles) issue(blockIdx.x + s * tile_ctas, s);
    }
  }

  const int chunk = lane % Config::kChunksPerRow;
  const int row0 = warp * 2 + lane / Config::kChunksPerRow;
  int stage = 0;
  uint32_t parity = 0;
  for (int64_t tile = blockIdx.x; tile < p.tiles; tile += tile_ctas) {
    const int64_t m0 = tile / k_tiles * kTile;
    const int64_t k0 = tile % k_tiles * kTile;
    if constexpr (kCol == ColScales::kKGroups) {
      if (warp == Config::kWarps - 1) {
        const GroupSpan span = find_group_warp(p.offs, p.num_groups, p.M, m0);
        if (lane == 0) smem.span = span;
      }
    }
    ptx::mbarrier_wait_parity(&smem.full[stage], parity);
    // ---- rowwise ----
    if constexpr (kRowwise) {
      uint8_t* q_row = p.q_row + (m0 + row0) * p.K + k0 + chunk * Config::kChunk;
#pragma unroll
      for (int i = 0; i < Config::kLoads; ++i) {
        const int row = row0 + i * Config::kRowsPerLoad;
        const uint4 v = reinterpret_cast<const uint4*>(smem.tile[stage][row])[chunk];
        rowwise_chunk<kRule>(v, row, chunk, q_row + i * Config::kRowsPerLoad * p.K, smem.row_atom);
      }
    }
    // ---- colwise ----
    if constexpr (kColwise) colwise_pair<kCol, kRule>(smem.tile[stage], smem.q_col, smem.col_atom);
    __syncthreads();  // the stage is consumed; staging and atoms are complete
    // ---- refill ---- the stage just freed takes the tile kStages iterations ahead.
    if (warp == 0 && tile + kStages * tile_ctas < p.tiles) issue(tile + kStages * tile_ctas, stage);
    // ---- store ----
    store_staged<kRowwise, kCol>(p, m0, k0, smem.q_col, smem.row_atom, smem.col_atom, smem.span);
    __syncthreads();  // staging and atoms free for the next tile
    if (++stage == kStages) {
      stage = 0;
      parity ^= 1;
    }
  }
}

// ---- host launchers ----

// EXPERIMENT (temporary): MXQ_QUANTIZE_VARIANT = tile | pipe2 | pipe3 selects the kernel for A/B timing.
inline int variant_from_env() {
  const char* v = std::getenv("MXQ_QUANTIZE_VARIANT");
  if (v == nullptr || std::string(v) == "pipe2") return 2;
  if (std::string(v) == "pipe3") return 3;
  return 0;
}

template <typename Kernel>
void launch_kernel(Kernel kernel, int smem_bytes, int64_t grid, const TileParams& params, cudaStream_t stream) {
  MXQ_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  MXQ_CHECK(grid <= 0x7FFFFFFF, "mxq: too many tiles for one launch: ", grid);
  if (grid == 0) return;
  kernel<<<static_cast<unsigned>(grid), Config::kThreads, smem_bytes, stream>>>(params);
  MXQ_CHECK_CUDA(cudaGetLastError());
}

template <bool kRowwise, ColScales kCol, ScaleRounding kRule, int kStages>
void launch_pipelined(TileParams params, cudaStream_t stream) {
  auto kernel = quantize_pipelined_kernel<kRowwise, kCol, kRule, kStages>;
  constexpr int smem_bytes = sizeof(PipelinedStorage<kStages>);
  MXQ_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  int device = 0, sms = 0, per_sm = 0;
  MXQ_CHECK_CUDA(cudaGetDevice(&device));
  MXQ_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MXQ_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Config::kThreads, smem_bytes));
  params.tile_ctas = std::min<int64_t>(params.tiles, int64_t(sms) * std::max(per_sm, 1));
  int64_t grid = params.tile_ctas;
  if (kCol == ColScales::kKGroups) grid += zero_fill_ctas(params.M, params.K, params.num_groups);
  launch_kernel(kernel, smem_bytes, grid, params, stream);
}

template <bool kRowwise, ColScales kCol, ScaleRounding kRule>
void launch_rule(TileParams params, cudaStream_t stream) {
  const int variant = variant_from_env();
  if (variant == 2) return launch_pipelined<kRowwise, kCol, kRule, 2>(params, stream);
  if (variant == 3) return launch_pipelined<kRowwise, kCol, kRule, 3>(params, stream);
  params.tile_ctas = params.tiles;
  int64_t grid = params.tiles;
  if (kCol == ColScales::kKGroups) grid += zero_fill_ctas(params.M, params.K, params.num_groups);
  launch_kernel(quantize_tile_kernel<kRowwise, kCol, kRule>, sizeof(SharedStorage), grid, params, stream);
}

template <bool kRowwise, ColScales kCol>
void launch_tile_kernel(const TileParams& params, ScaleRounding rule, cudaStream_t stream) {
  if (rule == ScaleRounding::kRceil) {
    launch_rule<kRowwise, kCol, ScaleRounding::kRceil>(params, stream);
  } else {
    launch_rule<kRowwise, kCol, ScaleRounding::kFloor>(params, stream);
  }
}

TileParams tile_params(const void* x, int64_t M, int64_t K) {
  TileParams t{};
  t.x = static_cast<const uint16_t*>(x);
  t.M = M;
  t.K = K;
  t.tiles = (M / kTile) * (K / kTile);
  return t;
}

}  // namespace mxq::kernels

namespace mxq::detail {
using kernels::ColScales;

void launch_quantize_rowwise(const RowwiseParams& p) {
  kernels::TileParams t = kernels::tile_params(p.x, p.M, p.K);
  t.q_row = p.q_row;
  t.s_row = p.s_row;
  kernels::launch_tile_kernel<true, ColScales::kNone>(t, p.rounding, p.stream);
}

void launch_quantize_colwise(const ColwiseParams& p) {
  kernels::TileParams t = kernels::tile_params(p.x, p.M, p.K);
  t.q_col = p.q_col;
  t.s_col = p.s_col_plain;
  kernels::launch_tile_kernel<false, ColScales::kPlain>(t, p.rounding, p.stream);
}

void launch_quantize_dual(const DualParams& p) {
  kernels::TileParams t = kernels::tile_params(p.x, p.M, p.K);
  t.q_row = p.q_row;
  t.s_row = p.s_row;
  t.q_col = p.q_col;
  t.s_col = p.s_col;
  t.offs = p.offs;
  t.num_groups = static_cast<int>(p.num_groups);
  t.status = p.status;
  if (p.offs == nullptr) {
    kernels::launch_tile_kernel<true, ColScales::kBlocked>(t, p.rounding, p.stream);
  } else {
    kernels::launch_tile_kernel<true, ColScales::kKGroups>(t, p.rounding, p.stream);
  }
}

}  // namespace mxq::detail
