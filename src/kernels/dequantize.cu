// Dequantization: e4m3 data (rows, cols) with blocked scales of (rows, cols/32), or the K-groups
// layout when offs is given (cols are tokens) -> bf16 (rows, cols): out = bf16(e4m3(q) * 2^(s-127))
// (numerics.h, dequantize_element; docs/numerics.md). Tokens past the last group have no scales and
// dequantize to +0. Used by the emulated MXFP8 GEMM below SM100 and by round-trip tests; not on the
// quantization hot path.
//
// One CTA per 128x128 tile: each thread converts four 16-byte chunks (16 elements, half a block)
// into 32 bytes.
#include <cuda_runtime.h>

#include "common.cuh"
#include "launch.h"

namespace mxq::kernels {

struct DequantConfig {
  static constexpr int kThreads = 256;
  static constexpr int kChunk = 16;                                // e4m3 per 16-byte load
  static constexpr int kChunksPerRow = kTile / kChunk;             // 8
  static constexpr int kLoads = kTile * kChunksPerRow / kThreads;  // 4
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

template <bool kGrouped>
__global__ void __launch_bounds__(DequantConfig::kThreads)
    dequantize_kernel(const DequantKernelParams p) {
  const int64_t col_tiles = p.cols / kTile;
  const int64_t r0 = blockIdx.x / col_tiles * kTile;
  const int64_t c0 = blockIdx.x % col_tiles * kTile;
  __shared__ GroupSpan span;
  if constexpr (kGrouped) {
    if (threadIdx.x < 32) {
      const GroupSpan s = find_group_warp(p.offs, p.num_groups, p.cols, c0);
      const int32_t bits = offs_status_warp(p.offs, p.num_groups, p.cols);
      if (threadIdx.x == 0) {
        span = s;
        if (blockIdx.x == 0 && p.status != nullptr) *p.status = bits;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < DequantConfig::kLoads; ++i) {
    const int idx = i * DequantConfig::kThreads + threadIdx.x;
    const int64_t r = r0 + idx / DequantConfig::kChunksPerRow;
    const int64_t c = c0 + idx % DequantConfig::kChunksPerRow * DequantConfig::kChunk;
    const uint4 q = ptx::ld_global_nc_v4(p.q + r * p.cols + c);
    uint8_t s = 0;
    bool placed = true;
    if constexpr (kGrouped) {
      placed = span.end > span.begin;
      if (placed) {
        s = p.scales[kgroups_atom_offset(span, p.rows, r - r % kAtomRows, c0) +
                     atom_offset(r, (c - c0) / kBlock)];
      }
    } else {
      s = p.scales[blocked_offset(r, c / kBlock, p.cols / kBlock)];
    }
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&q);
    uint4 out[2];
    uint32_t* words = reinterpret_cast<uint32_t*>(out);
#pragma unroll
    for (int e = 0; e < DequantConfig::kChunk; e += 2) {
      const uint32_t lo = placed ? dequantize_element(bytes[e], s) : 0u;
      const uint32_t hi = placed ? dequantize_element(bytes[e + 1], s) : 0u;
      words[e / 2] = lo | (hi << 16);
    }
    ptx::st_global_v4(p.out + r * p.cols + c, out[0]);
    ptx::st_global_v4(p.out + r * p.cols + c + 8, out[1]);
  }
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
  const int64_t grid = (p.rows / kTile) * (p.cols / kTile);
  MXQ_CHECK(grid <= 0x7FFFFFFF, "too many tiles for one launch: ", grid);
  auto kernel = p.offs != nullptr ? dequantize_kernel<true> : dequantize_kernel<false>;
  kernel<<<static_cast<unsigned>(grid), DequantConfig::kThreads, 0, p.stream>>>(k);
  MXQ_CHECK_CUDA(cudaGetLastError());
}

}  // namespace mxq::detail
