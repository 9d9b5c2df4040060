// MXFP8 quantization of MoE expert weights W (G, N, K): every expert's (N, K) matrix rowwise along
// K and colwise along N, both from one read of W (docs/numerics.md §11).
//
// W: bf16, fp16 or fp32, (G, N, K) row-major; N and K multiples of 32 (not necessarily of 128).
// Outputs, each axis optional (a null data + scale pair skips it):
//   q_row (G, N, K) e4m3 and s_row: per expert the blocked layout of its (N, K/32) scales;
//   q_col (G, K, N) e4m3 (each expert transposed) and s_col: per expert the blocked layout of its
//   (K, N/32) scales.
// Policies: 1x32 (a scale per 1x32 block along K and per 32x1 block along N, as the fused 2-D
// kernel) and 32x32 (one scale per 32x32 tile of an expert, from the NaN-propagating amax of its
// 1024 values; both axes use it, so q_col is exactly the per-expert transpose of q_row).
// Scaling mode: RCEIL or FLOOR (numerics.h), e4m3 by cvt.rn.satfinite; NaN/Inf blocks (tiles)
// become all 0x7F.
//
// Design (the activation tile kernels', quantize_tile.cuh, generalised): one CTA of 256 threads per
// 128x128 tile of one expert, which maps to exactly one 512-byte scale atom per axis.
//   ---- load ----     coalesced 16-byte loads, a warp instruction reads whole tile rows (2 x 256
//                      bytes, fp32 1 x 512); warp w loads rows 16w..16w+15: 8 loads per thread (16
//                      for fp32), staged in XOR-swizzled shared memory (weight_tile.h). A partial
//                      tile (N or K not a multiple of 128) loads zeros outside the matrix.
//   ---- 32x32 amax -- each warp reduces its 16 rows per 32-column block from its load registers
//                      (3 shuffles) into shared memory; after a barrier of the warp pair that
//                      shares the 32-row band (named barrier 1 + band, 64 threads) a tile's amax
//                      is the max of the two warps' words.
//   ---- rowwise ----  a thread converts two whole 1x32 blocks of rows its warp loaded (so only
//                      __syncwarp, or the pair barrier, before it: the pass overlaps other warps'
//                      loads), with the block's own scale (1x32) or its tile's (32x32), then swaps
//                      half a block with its neighbour lane so that every 16-byte store completes
//                      a 32-byte sector.
//   ---- colwise ----  after __syncthreads, each thread converts two whole 32x1 blocks:
//                      ldmatrix.trans hands it the column (16-bit types), or it reads the 32
//                      words (fp32); q_col is stored from registers with the same neighbour
//                      exchange.
//   ---- scales ----   the two atoms are staged in shared memory (0 for padding rows / columns of
//                      partial tiles) and written by one warp each, one 16-byte store per lane.
// fp32 stages 64 KiB per CTA (3 CTAs per SM, 16 loads of 16 bytes in flight per thread); bf16 and
// fp16 32 KiB (4 CTAs per SM).
// NOTES:
// - The 32x32 policy converts each tile twice, once per axis, from the same staged values with the
//   same multiplier, so the two byte sets are equal by construction (no transpose of the bytes
//   through shared memory, the staging the activation kernels do without for q_col).
// - The 32x32 rowwise pass waits on a barrier of its warp pair (named barriers 1-4, immediate ids
//   so ptxas reserves 5 barriers) rather than __syncthreads.
// - Partial tiles predicate the loads (zeros staged) and the stores; full tiles pay only the
//   predicate arithmetic.
#include <cuda_runtime.h>

#include "blockwise.cuh"
#include "common.cuh"
#include "dispatch.h"
#include "launch.h"
#include "scales.cuh"
#include "weight_tile.h"

namespace mxq::kernels::weight {

template <DType kT>
struct Config {
  static constexpr bool kWide = kT == DType::kFloat32;
  static constexpr int kChunkElems = chunk_elems(kT);                  // 8 (16-bit) or 4 (fp32)
  static constexpr int kChunksPerRow = chunks_per_row(kT);             // 16 or 32
  static constexpr int kChunksPerBlock = chunks_per_block(kT);         // 4 or 8
  static constexpr int kLoads = loads_per_thread(kT);                  // 8 or 16
  static constexpr int kRowsPerLoad = rows_per_load(kT);               // 2 or 1
  static constexpr int kWordsPerBlock = kBlock * dtype_bytes(kT) / 4;  // 16 or 32
  static constexpr int kMinBlocksPerSm = kWide ? 3 : 4;
  static_assert(kThreads == 256 && kWarps == 8, "8 warps: 16 rows each, two 8-column groups each");
  static_assert(kTileRows == kAtomRows && kTileCols / kBlock == kAtomCols,
                "a tile maps to one 128x4 scale atom per axis");
  static_assert(kLoads * kRowsPerLoad == kRowsPerWarp,
                "warp w loads exactly the 16 rows its rowwise pass converts");
  static_assert(kChunksPerRow * kRowsPerLoad == 32, "a warp load instruction reads whole rows");
  static_assert(kChunksPerBlock * kChunkElems == kBlock, "a block is whole chunks");
};

template <DType kT>
struct alignas(16) SharedStorage {
  alignas(16) uint4 tile[kTileRows][Config<kT>::kChunksPerRow];  // [row][swizzle(row, chunk)]
  alignas(16) uint8_t row_atom[kAtomBytes];                      // s_row atom of this tile
  alignas(16) uint8_t col_atom[kAtomBytes];                      // s_col atom of this tile
  uint32_t partial[kWarps][kBands];  // 32x32: amax bits of warp w's 16 rows per column block
};
static_assert(sizeof(SharedStorage<DType::kBFloat16>) * Config<DType::kBFloat16>::kMinBlocksPerSm <=
                  227 * 1024,
              "4 CTAs must fit one SM");
static_assert(sizeof(SharedStorage<DType::kFloat32>) * Config<DType::kFloat32>::kMinBlocksPerSm <=
                  227 * 1024,
              "3 CTAs must fit one SM (fp32)");

struct Params {
  const uint8_t* w;
  int64_t N, K;
  uint8_t* q_row;
  uint8_t* s_row;
  uint8_t* q_col;
  uint8_t* s_col;
  TileSplit split;  // of the CTA index: N fastest when only the colwise output is written
};

// ---- helpers ----

// Barrier of the two warps (2b, 2b+1) that load 32-row band b: named barrier 1 + b, 64 threads.
__device__ __forceinline__ void sync_band_warps(int band) {
  switch (band) {
    case 0:
      ptx::bar_sync<1>(64);
      break;
    case 1:
      ptx::bar_sync<2>(64);
      break;
    case 2:
      ptx::bar_sync<3>(64);
      break;
    default:
      ptx::bar_sync<4>(64);
      break;
  }
}

// The 32 bytes of one block from its words w[0..kWordsPerBlock) in element order (16-bit: two
// elements per word; fp32: one), with the block math of common.cuh.
template <DType kT>
__device__ __forceinline__ void convert_block(const uint32_t* w, const BlockScale& bs,
                                              uint4 (&q)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t b[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      if constexpr (kT == DType::kFloat32) {
        const uint32_t* v = w + 16 * h + 4 * m;
        b[m] = bs.select(quantize_words_f32(v, bs.r));
      } else {
        const uint32_t* v = w + 8 * h + 2 * m;
        b[m] = bs.select(quantize_words<kT>(v[0], v[1], bs.r));
      }
    }
    q[h] = make_uint4(b[0], b[1], b[2], b[3]);
  }
}

// Scale of a block: its own (1x32), or its 32x32 tile's from the two warps' partial amaxes (the
// partial words are running amax words: amax_step merges them as it merges input words).
template <DType kT, bool kTiles, ScalingMode kMode>
__device__ __forceinline__ BlockScale scale_of(const uint32_t* w, const SharedStorage<kT>& smem,
                                               int band, int block) {
  uint32_t m = 0;
  if constexpr (kTiles) {
    m = amax_step<kT>(smem.partial[2 * band][block], smem.partial[2 * band + 1][block]);
  } else {
#pragma unroll
    for (int i = 0; i < Config<kT>::kWordsPerBlock; ++i) m = amax_step<kT>(m, w[i]);
  }
  return block_scale<kT, kMode>(amax_fold<kT>(m));
}

// The words of colwise block u of this thread (column colwise_col, band colwise_band), in element
// order down the column.
template <DType kT>
__device__ __forceinline__ void load_column(const SharedStorage<kT>& smem, int warp, int lane,
                                            int u, uint32_t (&w)[Config<kT>::kWordsPerBlock]) {
  if constexpr (kT == DType::kFloat32) {
    const int col = colwise_col(warp, lane, u);
    const int band = colwise_band(lane);
#pragma unroll
    for (int i = 0; i < kBlock; ++i) {
      const int row = kBlock * band + i;
      const uint32_t* chunk =
          reinterpret_cast<const uint32_t*>(&smem.tile[row][swizzle32(row, col / 4)]);
      w[i] = chunk[col % 4];
    }
  } else {
    const int group = colwise_group(warp, u);
    const int addr_row = ldmatrix_row(lane, 0);
    const int chunk = swizzle16(addr_row, group);  // rows addr_row + 8n share the key
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const uint4 m = ptx::ldmatrix_x4_trans(&smem.tile[addr_row + 8 * n][chunk]);
      w[4 * n] = m.x;
      w[4 * n + 1] = m.y;
      w[4 * n + 2] = m.z;
      w[4 * n + 3] = m.w;
    }
  }
}

// ---- the kernel ----

// kScaling: k1x32, k32x32 (MXFP8) or k128x128 (FP8 blockwise: the whole tile's amax from all eight
// warps' partial words after a CTA barrier, one fp32 factor stored at weight_factor_offset in both
// layouts; the CTA of a row's (column's) last tile also writes the padding factors after it, 0).
template <DType kT, WeightScaling kScaling, ScalingMode kMode, bool kRowwise, bool kColwise>
__global__ void __launch_bounds__(kThreads, Config<kT>::kMinBlocksPerSm)
    quantize_weight_kernel(const Params p) {
  using Cfg = Config<kT>;
  constexpr bool kTiles = kScaling == WeightScaling::k32x32;
  constexpr bool kWhole = kScaling == WeightScaling::k128x128;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SharedStorage<kT>& smem = *reinterpret_cast<SharedStorage<kT>*>(smem_raw);
  ptx::griddepcontrol_wait();  // nothing touches memory before the work before it is done
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const Tile t = tile_of(blockIdx.x, p.N, p.K, !kRowwise, p.split);

  // ---- load ---- warp w reads rows 16w..16w+15 (whole rows per instruction) and stages them;
  // elements outside the matrix (partial tiles) are staged as +0.
  {
    const int chunk = load_chunk(kT, lane);
    const int row0 = load_row(kT, warp, lane, 0);
    const uint8_t* src =
        p.w +
        w_offset(t.g, t.n0 + row0, t.k0 + chunk * Cfg::kChunkElems, p.N, p.K) * dtype_bytes(kT);
    const int64_t step =
        Cfg::kRowsPerLoad * p.K * dtype_bytes(kT);  // load_row(i + 1) - load_row(i)
    uint4 v[Cfg::kLoads];
#pragma unroll
    for (int i = 0; i < Cfg::kLoads; ++i) {
      v[i] = ptx::ld_global_nc_v4_if(src + i * step, load_ok(t, kT, warp, lane, i));
    }
#pragma unroll
    for (int i = 0; i < Cfg::kLoads; ++i) {
      const int row = load_row(kT, warp, lane, i);
      smem.tile[row][swizzle(kT, row, chunk)] = v[i];
    }
    // ---- 32x32 amax ---- this warp's 16 rows of each column block, from the load registers.
    if constexpr (kTiles || kWhole) {
      uint32_t m = 0;
#pragma unroll
      for (int i = 0; i < Cfg::kLoads; ++i) {
        m = amax_step<kT>(amax_step<kT>(m, v[i].x), v[i].y);
        m = amax_step<kT>(amax_step<kT>(m, v[i].z), v[i].w);
      }
#pragma unroll
      for (int s = 0; s < 3; ++s) {
        m = amax_step<kT>(m, __shfl_xor_sync(0xFFFFFFFFu, m, partial_xor(kT, s)));
      }
      if (partial_writer(kT, lane)) smem.partial[warp][load_block(kT, lane)] = m;
    }
  }
  [[maybe_unused]] BlockScale whole{};
  [[maybe_unused]] float whole_d = 0.0f;
  if constexpr (kWhole) {
    __syncthreads();  // the tile's amax needs every warp's partial words
    uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
#pragma unroll
      for (int b = 0; b < kBands; ++b) m = amax_step<kT>(m, smem.partial[w][b]);
    }
    whole = blockwise_scale_of<kT, kMode>(amax_fold<kT>(m), whole_d);
  } else if constexpr (kTiles && kRowwise) {
    // The band's tile amaxes need the partial words of both of its warps (2b, 2b+1): a barrier of
    // the pair only, so that the rowwise pass runs while other warps still wait for their loads.
    sync_band_warps(warp / 2);
  } else if constexpr (!kTiles) {
    __syncwarp();  // the rowwise pass reads only the rows this warp staged
  }

  // ---- rowwise ---- blocks (row, blk) and (row + 8, blk): one 32-row band, one tile.
  if constexpr (kRowwise) {
    const int blk = rowwise_block(lane);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = rowwise_row(warp, lane, j);
      uint32_t w[Cfg::kWordsPerBlock];
#pragma unroll
      for (int i = 0; i < Cfg::kChunksPerBlock; ++i) {
        const uint4 c = smem.tile[row][swizzle(kT, row, blk * Cfg::kChunksPerBlock + i)];
        w[4 * i] = c.x;
        w[4 * i + 1] = c.y;
        w[4 * i + 2] = c.z;
        w[4 * i + 3] = c.w;
      }
      BlockScale bs;
      if constexpr (kWhole) {
        bs = whole;
      } else {
        bs = scale_of<kT, kTiles, kMode>(w, smem, row / kBlock, blk);
      }
      uint4 q[2];
      convert_block<kT>(w, bs, q);
      store_block_pair</*kStreaming=*/true>(p.q_row + rowwise_pair(t, warp, lane, j, p.N, p.K), q,
                                            rowwise_store_ok(t, warp, lane, j, 0),
                                            rowwise_store_ok(t, warp, lane, j, 1));
      if constexpr (!kWhole) {
        smem.row_atom[atom_offset<unsigned>(row, blk)] = row_scale_ok(t, row, blk) ? bs.s : 0;
      }
    }
  }
  if constexpr (kColwise) {
    __syncthreads();  // the colwise pass reads rows (and 32x32 partial words) of every warp
  }

  // ---- colwise ---- blocks (column 8*group + lane/4, band lane%4) of groups warp and warp + 8.
  if constexpr (kColwise) {
    const int band = colwise_band(lane);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int col = colwise_col(warp, lane, u);
      uint32_t w[Cfg::kWordsPerBlock];
      load_column<kT>(smem, warp, lane, u, w);
      BlockScale bs;
      if constexpr (kWhole) {
        bs = whole;
      } else {
        bs = scale_of<kT, kTiles, kMode>(w, smem, band, col / kBlock);
      }
      uint4 q[2];
      convert_block<kT>(w, bs, q);
      store_block_pair</*kStreaming=*/true>(p.q_col + colwise_pair(t, warp, lane, u, p.N, p.K), q,
                                            colwise_store_ok(t, warp, lane, u, 0),
                                            colwise_store_ok(t, warp, lane, u, 1));
      if constexpr (!kWhole) {
        smem.col_atom[atom_offset<unsigned>(col, band)] = col_scale_ok(t, col, band) ? bs.s : 0;
      }
    }
  }
  if constexpr (kWhole) {
    // ---- factors ---- lane j of warp 0 (s_row) and warp 1 (s_col): the tile's factor, and in the
    // CTA of the last tile along the contraction the padding factors after it.
    const int64_t tn = t.n0 / kTileRows, tk = t.k0 / kTileCols;
    const int64_t n_tiles = p.N / kTileRows, k_tiles = p.K / kTileCols;
    if (kRowwise && warp == 0) {
      float* const s_row = reinterpret_cast<float*>(p.s_row);
      const int64_t last = tk + 1 == k_tiles ? round_up(k_tiles, 4) - 1 : tk;
      if (tk + lane <= last) {
        s_row[weight_factor_offset(t.g, tn, tk + lane, p.N, p.K)] = lane == 0 ? whole_d : 0.0f;
      }
    }
    if (kColwise && warp == 1) {
      float* const s_col = reinterpret_cast<float*>(p.s_col);
      const int64_t last = tn + 1 == n_tiles ? round_up(n_tiles, 4) - 1 : tn;
      if (tn + lane <= last) {
        s_col[weight_factor_offset(t.g, tk, tn + lane, p.K, p.N)] = lane == 0 ? whole_d : 0.0f;
      }
    }
    return;
  }
  __syncthreads();  // the atoms are complete

  // ---- scales ----
  if constexpr (kColwise) {
    if (warp == 0) {
      store_atom</*kStreaming=*/true>(p.s_col + s_col_atom(t, p.N, p.K), smem.col_atom, lane);
    }
  }
  if constexpr (kRowwise) {
    if (warp == kWarps - 1) {
      store_atom</*kStreaming=*/true>(p.s_row + s_row_atom(t, p.N, p.K), smem.row_atom, lane);
    }
  }
}

// ---- host launchers ----

// Launches set the shared-memory opt-in attribute only where the tile needs more than 48 KB (fp32:
// 64 KiB); bf16 and fp16 launches make no driver call besides the launch.
constexpr int kSmemWithoutOptIn = 48 * 1024;
static_assert(sizeof(SharedStorage<DType::kBFloat16>) <= kSmemWithoutOptIn,
              "16-bit tiles need no opt-in attribute");

template <DType kT, WeightScaling kScaling, ScalingMode kMode, bool kRowwise, bool kColwise>
void launch_kernel(const Params& params, int64_t grid, cudaStream_t stream) {
  auto kernel = quantize_weight_kernel<kT, kScaling, kMode, kRowwise, kColwise>;
  constexpr int smem_bytes = sizeof(SharedStorage<kT>);
  if constexpr (smem_bytes > kSmemWithoutOptIn) {
    MXQ_CHECK_CUDA(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  }
  launch_dependent(kernel, static_cast<unsigned>(grid), kThreads, smem_bytes, stream, params);
}

// The outputs of a launch: at least one axis.
enum class Axes { kRowwise, kColwise, kBoth };

}  // namespace mxq::kernels::weight

namespace mxq::detail {

void launch_quantize_weight(const QuantizeWeightParams& p) {
  namespace w = kernels::weight;
  const int64_t grid = p.G * w::tiles_per_expert(p.N, p.K);
  MXQ_CHECK(grid <= 0x7FFFFFFF, "too many 128x128 tiles for one launch: ", grid);
  if (grid == 0 || (p.q_row == nullptr && p.q_col == nullptr)) return;
  w::Params params{
      static_cast<const uint8_t*>(p.w), p.N, p.K, p.q_row, p.s_row, p.q_col, p.s_col, {}};
  params.split = w::TileSplit::of(p.N, p.K, /*n_fastest=*/p.q_row == nullptr);
  const w::Axes axes = p.q_col == nullptr   ? w::Axes::kRowwise
                       : p.q_row == nullptr ? w::Axes::kColwise
                                            : w::Axes::kBoth;
  using kernels::dispatch;
  const auto launch = [&](auto t, auto scaling, auto m) {
    dispatch<w::Axes::kRowwise, w::Axes::kColwise, w::Axes::kBoth>(axes, [&](auto a) {
      constexpr w::Axes kAxes = decltype(a)::value;
      w::launch_kernel<decltype(t)::value, decltype(scaling)::value, decltype(m)::value,
                       kAxes != w::Axes::kColwise, kAxes != w::Axes::kRowwise>(params, grid,
                                                                               p.stream);
    });
  };
  dispatch<DType::kBFloat16, DType::kFloat16, DType::kFloat32>(p.dtype, [&](auto t) {
    if (p.format == Format::kFp8Blockwise) {  // scaling k128x128 (validation)
      dispatch<WeightScaling::k128x128>(p.scaling, [&](auto scaling) {
        dispatch<ScalingMode::kFp32, ScalingMode::kRceil>(p.scaling_mode,
                                                          [&](auto m) { launch(t, scaling, m); });
      });
      return;
    }
    dispatch<WeightScaling::k1x32, WeightScaling::k32x32>(p.scaling, [&](auto scaling) {
      dispatch<ScalingMode::kRceil, ScalingMode::kFloor>(p.scaling_mode,
                                                         [&](auto m) { launch(t, scaling, m); });
    });
  });
}

}  // namespace mxq::detail
