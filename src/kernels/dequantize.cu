// Dequantization: e4m3 data (rows, cols) with the scales of its (rows, cols/32) blocks in the
// blocked, M-groups (rows are tokens) or K-groups (cols are tokens) layout -> bf16 (rows, cols):
// out = bf16(e4m3(q) * 2^(s-127)) (numerics.h, dequantize_element; docs/numerics.md). Tokens past
// the last group have no scales and dequantize to +0. Used by the emulated MXFP8 GEMM below SM100
// and by round-trip tests; not on the quantization hot path.
//
// Work comes in 16-byte chunks (16 codes, half a block). The blocked (dense) layout takes the codes
// as one flat run of chunks, two per thread, so no CTA is a partial tile (docs/performance.md,
// "Dequantize"). The grouped layouts take one CTA per 128x128 tile (partial at
// the edges: rows and cols are multiples of 32), four chunks per thread, since a tile's 32-token
// bands share their scale places; each band's atom and band there come once from one warp's scan
// of offs (scales.cuh plan_tile_places).
//
// Each thread loads its chunks and their scales, then converts each into 32 bytes — two codes per
// step through fp16 where that is exact (numerics.h, dequantize_pair_exact), which keeps the kernel
// at the memory roof instead of the ALU's — and stores them with its neighbour lane (common.cuh
// store_block_pair), so that every 16-byte store completes a 32-byte sector.
#include <cuda_runtime.h>

#include <type_traits>

#include "common.cuh"
#include "dispatch.h"
#include "launch.h"
#include "scales.cuh"

namespace mxq::kernels {

struct DequantConfig {
  static constexpr int kThreads = 256;
  static constexpr int kChunk = 16;  // e4m3 per 16-byte load
  // Grouped tiles: 128 rows x 128 columns, one scale atom (128 rows x 4 scale columns).
  static constexpr int kTileRows = kAtomRows;
  static constexpr int kTileCols = kAtomCols * kBlock;
  static constexpr int kChunksPerRow = kTileCols / kChunk;             // 8
  static constexpr int kLoads = kTileRows * kChunksPerRow / kThreads;  // 4
  static constexpr int kFlatLoads = 2;  // blocked (docs/performance.md, "Dequantize")
  static_assert(kBlock % kChunk == 0, "a chunk lies in one block");
};

struct DequantKernelParams {
  const uint8_t* q;
  const uint8_t* scales;
  int64_t rows, cols;
  const int32_t* offs;
  int num_groups;
  uint16_t* out;
  int32_t* status;
};

// 16 codes sharing scale s -> 16 bf16 (numerics.h dequantize_element): two codes per step through
// the exact fp16 route for the usual scales, element by element for NaN codes and extreme scales.
__device__ __forceinline__ void dequantize_chunk(const uint4 q, const uint8_t s, uint4 (&out)[2]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  uint32_t* words = reinterpret_cast<uint32_t*>(out);
  const bool nan = has_e4m3_nan(q.x) || has_e4m3_nan(q.y) || has_e4m3_nan(q.z) || has_e4m3_nan(q.w);
  if (dequantize_is_exact(s) && !nan) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      words[2 * j] = dequantize_pair_exact(ptx::cvt_f16x2_e4m3x2(uint16_t(w[j])), s);
      words[2 * j + 1] = dequantize_pair_exact(ptx::cvt_f16x2_e4m3x2(uint16_t(w[j] >> 16)), s);
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < DequantConfig::kChunk; e += 2) {
    const uint32_t lo = dequantize_element(uint8_t(w[e / 4] >> (8 * (e % 4))), s);
    const uint32_t hi = dequantize_element(uint8_t(w[e / 4] >> (8 * (e % 4 + 1))), s);
    words[e / 2] = lo | (hi << 16);
  }
}

// Blocked layout: chunk i of the flat run is row i / (cols / 16); `Index` is uint32_t up to 2^32
// chunks (every shape of a 141 GB GPU, whose output alone would be 128 GiB at 2^32; the grid's last
// index, a multiple of 512 less one, stays below 2^32) and int64_t past.
template <typename Index>
__global__ void __launch_bounds__(DequantConfig::kThreads)
    dequantize_blocked_kernel(const DequantKernelParams p) {
  ptx::griddepcontrol_wait();  // nothing touches memory before the work before it is done
  constexpr int kLoads = DequantConfig::kFlatLoads;
  const auto chunks_per_row = Index(p.cols / DequantConfig::kChunk);
  const Index chunks = Index(p.rows) * chunks_per_row;
  const Index first = Index(blockIdx.x) * DequantConfig::kThreads * kLoads + threadIdx.x;
  uint4 q[kLoads];
  uint8_t s[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const Index chunk = first + i * DequantConfig::kThreads;
    const bool in = chunk < chunks;
    const Index r = chunk / chunks_per_row;
    const Index c = (chunk - r * chunks_per_row) * DequantConfig::kChunk;
    q[i] = ptx::ld_global_nc_v4_if(p.q + (in ? int64_t(chunk) * DequantConfig::kChunk : 0), in);
    s[i] = in ? p.scales[blocked_offset(int64_t(r), int64_t(c) / kBlock, p.cols / kBlock)] : 0;
  }
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const Index chunk = first + i * DequantConfig::kThreads;
    const bool in = chunk < chunks;  // the same for both lanes of a pair (chunks is even)
    uint4 out[2] = {};
    if (in) dequantize_chunk(q[i], s[i], out);
    // Lanes 2j and 2j+1 hold chunks 2j and 2j+1 of one row (cols / 16 is even): whole sectors.
    const unsigned odd = threadIdx.x & 1;
    auto* pair = reinterpret_cast<uint8_t*>(p.out + int64_t(chunk - odd) * DequantConfig::kChunk);
    store_block_pair(pair + 16 * odd, out, in, in);
  }
}

// FP8 blockwise: the same flat run of chunks, each chunk's fp32 factor d of its 1x128 block at
// factor_offset(r, c / 128, rows) (layout.h), out = bf16(fl32(e4m3(q) * d)) element by element
// through the CPU reference's scalar (numerics.h dequantize_blockwise_element; not on the hot
// path). Grouped factors are a dense slice.
template <typename Index>
__global__ void __launch_bounds__(DequantConfig::kThreads)
    dequantize_factor_kernel(const DequantKernelParams p) {
  ptx::griddepcontrol_wait();
  constexpr int kLoads = DequantConfig::kFlatLoads;
  const auto chunks_per_row = Index(p.cols / DequantConfig::kChunk);
  const Index chunks = Index(p.rows) * chunks_per_row;
  const Index first = Index(blockIdx.x) * DequantConfig::kThreads * kLoads + threadIdx.x;
  const auto* factors = reinterpret_cast<const float*>(p.scales);
  uint4 q[kLoads];
  float d[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const Index chunk = first + i * DequantConfig::kThreads;
    const bool in = chunk < chunks;
    const Index r = chunk / chunks_per_row;
    const Index c = (chunk - r * chunks_per_row) * DequantConfig::kChunk;
    q[i] = ptx::ld_global_nc_v4_if(p.q + (in ? int64_t(chunk) * DequantConfig::kChunk : 0), in);
    d[i] =
        in ? factors[factor_offset(int64_t(r), int64_t(c) / Fp8Blockwise::kBlock, p.rows)] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const Index chunk = first + i * DequantConfig::kThreads;
    const bool in = chunk < chunks;
    uint4 out[2] = {};
    const uint32_t w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
    uint32_t* words = reinterpret_cast<uint32_t*>(out);
#pragma unroll
    for (int e = 0; e < DequantConfig::kChunk; e += 2) {
      const uint16_t lo = dequantize_blockwise_element(uint8_t(w[e / 4] >> (8 * (e % 4))), d[i]);
      const uint16_t hi =
          dequantize_blockwise_element(uint8_t(w[e / 4] >> (8 * (e % 4 + 1))), d[i]);
      words[e / 2] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
    const unsigned odd = threadIdx.x & 1;
    auto* pair = reinterpret_cast<uint8_t*>(p.out + int64_t(chunk - odd) * DequantConfig::kChunk);
    store_block_pair(pair + 16 * odd, out, in, in);
  }
}

// The grouped layouts, one 128x128 tile per CTA.
template <ScaleLayout kLayout>
__global__ void __launch_bounds__(DequantConfig::kThreads)
    dequantize_grouped_kernel(const DequantKernelParams p) {
  static_assert(kLayout != ScaleLayout::kBlocked, "the blocked layout has its own kernel");
  ptx::griddepcontrol_wait();
  const int64_t col_tiles = ceil_div(p.cols, DequantConfig::kTileCols);
  const int64_t r0 = blockIdx.x / col_tiles * DequantConfig::kTileRows;
  const int64_t c0 = blockIdx.x % col_tiles * DequantConfig::kTileCols;
  // Grouped layouts: each 32-token band of the tile (along cols for K-groups, along rows for
  // M-groups) has its scales in one band of one atom, planned by warp 0 as the quantize kernels
  // plan theirs (scales.cuh plan_tile_places, tokens as M).
  constexpr bool kRowsAreTokens = kLayout == ScaleLayout::kMGroups;
  __shared__ TilePlaces places;
  const BandPlace* band_place = kRowsAreTokens ? places.row : places.col;
  const int64_t tokens = kRowsAreTokens ? p.rows : p.cols;
  const int warp = threadIdx.x / 32;
  if (warp == 0) {
    plan_tile_places<kAtomBands>(places, p.offs, p.num_groups, tokens, kRowsAreTokens ? r0 : c0,
                                 kRowsAreTokens ? c0 : r0, kRowsAreTokens ? p.cols : p.rows,
                                 kRowsAreTokens, !kRowsAreTokens);
  } else if (warp == 1 && blockIdx.x == 0 && p.status != nullptr) {
    const int32_t bits = offs_status_warp(p.offs, p.num_groups, tokens);
    if (threadIdx.x == 32) *p.status = bits;
  }
  __syncthreads();
  // All of the thread's loads first (data and scales in flight together), then convert and store.
  uint4 q[DequantConfig::kLoads];
  uint8_t s[DequantConfig::kLoads];
  bool placed[DequantConfig::kLoads];
#pragma unroll
  for (int i = 0; i < DequantConfig::kLoads; ++i) {
    const int idx = i * DequantConfig::kThreads + threadIdx.x;
    const int64_t r = r0 + idx / DequantConfig::kChunksPerRow;
    const int64_t c = c0 + idx % DequantConfig::kChunksPerRow * DequantConfig::kChunk;
    const bool in = r < p.rows && c < p.cols;  // a partial tile at the edge (32-multiples)
    q[i] = ptx::ld_global_nc_v4_if(p.q + (in ? r * p.cols + c : 0), in);
    s[i] = 0;
    placed[i] = in;
    if (!in) continue;
    if constexpr (kLayout == ScaleLayout::kKGroups) {
      const BandPlace place = band_place[(c - c0) / kBlock];
      placed[i] = place.band >= 0;
      if (placed[i]) s[i] = p.scales[place.atom + atom_offset<int64_t>(r, 0) + place.band];
    } else {
      const BandPlace place = band_place[(r - r0) / kBlock];  // every row has a segment
      s[i] = p.scales[place.atom + (r % kBlock) * 16 + place.band * 4 + (c / kBlock) % kAtomCols];
    }
  }
#pragma unroll
  for (int i = 0; i < DequantConfig::kLoads; ++i) {
    const int idx = i * DequantConfig::kThreads + threadIdx.x;
    const int64_t r = r0 + idx / DequantConfig::kChunksPerRow;
    const int64_t c = c0 + idx % DequantConfig::kChunksPerRow * DequantConfig::kChunk;
    const bool in = r < p.rows && c < p.cols;  // the same for both lanes of a pair (32-multiples)
    uint4 out[2] = {};                         // a token past the last group: +0
    // NOTES: placed[i] implies in; the redundant test keeps the grouped kernels' register count,
    // and so their CTAs per SM (docs/performance.md, "Dequantize").
    if (in && placed[i]) dequantize_chunk(q[i], s[i], out);
    // Lanes 2j and 2j+1 hold the two 32-byte halves of one 64-byte row piece: whole sectors.
    const unsigned odd = threadIdx.x & 1;
    const int64_t c_pair = c - odd * DequantConfig::kChunk;
    auto* pair = reinterpret_cast<uint8_t*>(p.out + r * p.cols + c_pair);
    store_block_pair(pair + 16 * odd, out, in, in);
  }
}

// An empty grouped call (rows or cols 0): no tile, only the status word, written as the grouped
// kernel's CTA 0 writes it.
__global__ void __launch_bounds__(32)
    dequantize_status_kernel(const int32_t* offs, int num_groups, int64_t tokens, int32_t* status) {
  ptx::griddepcontrol_wait();
  const int32_t bits = offs_status_warp(offs, num_groups, tokens);
  if (threadIdx.x == 0) *status = bits;
}

}  // namespace mxq::kernels

namespace mxq::detail {

void launch_dequantize(const DequantizeParams& p) {
  using namespace kernels;
  const DequantKernelParams k{p.q,
                              p.scales,
                              p.rows,
                              p.cols,
                              p.offs,
                              static_cast<int>(p.num_groups),
                              static_cast<uint16_t*>(p.out),
                              p.status};
  if (p.rows == 0 || p.cols == 0) {  // only a status word to write (api.cpp)
    const int64_t tokens = p.layout == ScaleLayout::kMGroups ? p.rows : p.cols;
    launch_dependent(dequantize_status_kernel, 1, 32, 0, p.stream, p.offs,
                     static_cast<int>(p.num_groups), tokens, p.status);
    return;
  }
  const int64_t chunks = p.rows * (p.cols / DequantConfig::kChunk);
  const int64_t grid =
      p.layout == ScaleLayout::kBlocked
          ? ceil_div(chunks, int64_t(DequantConfig::kThreads) * DequantConfig::kFlatLoads)
          : ceil_div(p.rows, DequantConfig::kTileRows) * ceil_div(p.cols, DequantConfig::kTileCols);
  MXQ_CHECK(grid <= 0x7FFFFFFF, "too many CTAs for one launch: ", grid);
  const auto ctas = static_cast<unsigned>(grid);
  constexpr int kThreads = DequantConfig::kThreads;
  if (p.format == Format::kFp8Blockwise) {  // layout kBlocked, no offs (validation)
    dispatch_bool(chunks <= int64_t(UINT32_MAX), [&](auto fits) {
      using Index = std::conditional_t<decltype(fits)::value, uint32_t, int64_t>;
      launch_dependent(dequantize_factor_kernel<Index>, ctas, kThreads, 0, p.stream, k);
    });
    return;
  }
  if (p.layout == ScaleLayout::kBlocked) {
    // 32-bit chunk indices while they fit.
    dispatch_bool(chunks <= int64_t(UINT32_MAX), [&](auto fits) {
      using Index = std::conditional_t<decltype(fits)::value, uint32_t, int64_t>;
      launch_dependent(dequantize_blocked_kernel<Index>, ctas, kThreads, 0, p.stream, k);
    });
    return;
  }
  dispatch<ScaleLayout::kMGroups, ScaleLayout::kKGroups>(p.layout, [&](auto layout) {
    launch_dependent(dequantize_grouped_kernel<decltype(layout)::value>, ctas, kThreads, 0,
                     p.stream, k);
  });
}

}  // namespace mxq::detail
