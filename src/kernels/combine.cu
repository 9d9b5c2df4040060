// combine and combine_score_grad (docs/numerics.md §14): the MoE layer's routed rows back to their
// tokens, one warp per token. The warp's first lanes read the token's top_k routed rows, check them
// and their padded rows (dest), and, for combine, sort them by routed row (a rank by counting: the
// order torch's index_put_ accumulates in); then each lane walks its 16-byte chunks of the D
// columns (chunk c on lane c % 32).
//
//   combine: per chunk, the rows' 8 bf16 values folded into 8 accumulators held as bf16 values,
//     each add rounded to bf16 (index_put_'s per-duplicate write-back), each row scaled first and
//     rounded to bf16 when scale is given; one 16-byte store per chunk.
//   combine_score_grad: per routed row, each lane's dot product over its chunks (products and sums
//     rounded separately, no FMA), then an xor butterfly; dout's row is read once per routed row
//     (from L1 after the first), y's rows once.
//
// src/ref/combine.cpp computes the same sums in the same order on the CPU.
#include <cuda_runtime.h>

#include "common.cuh"
#include "launch.h"

namespace mxq::kernels {

using detail::CombineOutput;
namespace {

constexpr int kWarps = 8;  // tokens per CTA
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 8;  // bf16 values per 16-byte load
constexpr uint32_t kFull = 0xFFFFFFFFu;

struct TokenRows {
  int32_t row[kMaxTopK];  // padded row of y, or -1: out of range, contributes nothing
  float factor[kMaxTopK];
};

// Token t's routed rows into `rows`, in increasing routed row when `sorted` (else in token_rows'
// order); returns the status bits of what was out of range. Lanes j < top_k each take one row.
__device__ __forceinline__ int32_t load_token_rows(const CombineParams& p, int64_t t, bool sorted,
                                                   TokenRows& rows) {
  const int lane = threadIdx.x % 32;
  const bool mine = lane < p.top_k;
  const int32_t r = mine ? p.token_rows[t * p.top_k + lane] : 0;
  int32_t row = -1;
  int32_t bad = 0;
  if (mine) {
    if (r >= 0 && r < p.N && p.dest[r] >= 0 && p.dest[r] < p.Mp) {
      row = p.dest[r];
    } else {
      bad = kIndexOutOfRange;
    }
  }
  int slot = lane;
  if (sorted) {  // rank: the rows before this one in (routed row, lane) order
    slot = 0;
    for (int i = 0; i < p.top_k; ++i) {
      const int32_t other = __shfl_sync(kFull, r, i);
      slot += (other < r || (other == r && i < lane)) ? 1 : 0;
    }
  }
  if (mine) {
    rows.row[slot] = row;
    rows.factor[slot] = p.scale != nullptr && row >= 0 ? p.scale[r] : 1.0f;
  }
  __syncwarp();
  return bad;
}

__device__ __forceinline__ float bf16_round(float v) { return bf16_to_f32(bf16_from_f32(v)); }

__device__ __forceinline__ void unpack(const uint4& v, float (&f)[kChunk]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

// combine: the token's rows folded into its output row, chunk by chunk.
__device__ __forceinline__ void sum_rows(const CombineParams& p, int64_t t, int lane,
                                         const TokenRows& rows) {
  const auto* y = static_cast<const uint16_t*>(p.y);
  auto* out = static_cast<uint16_t*>(p.out);
  const bool scaled = p.scale != nullptr;
  for (int64_t c = lane; c < p.D / kChunk; c += 32) {
    float acc[kChunk] = {};  // +0: index_put_ accumulates into zeros
    for (int j = 0; j < p.top_k; ++j) {
      const int32_t row = rows.row[j];
      if (row < 0) continue;
      float g[kChunk];
      unpack(ptx::ld_global_nc_v4_if(y + int64_t(row) * p.D + c * kChunk, true), g);
#pragma unroll
      for (int e = 0; e < kChunk; ++e) {
        const float v = scaled ? bf16_round(mul_rn(g[e], rows.factor[j])) : g[e];
        acc[e] = bf16_round(add_rn(acc[e], v));
      }
    }
    uint4 packed;
    uint32_t* w = &packed.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = uint32_t(bf16_from_f32(acc[2 * i])) | (uint32_t(bf16_from_f32(acc[2 * i + 1])) << 16);
    }
    ptx::st_global_v4(out + t * p.D + c * kChunk, packed);
  }
}

// combine_score_grad: one dot product of the token's dout row with each of its rows.
__device__ __forceinline__ void score_grads(const CombineParams& p, int64_t t, int lane,
                                            const TokenRows& rows) {
  const auto* y = static_cast<const uint16_t*>(p.y);
  const auto* dout = static_cast<const uint4*>(p.dout) + t * (p.D / kChunk);
  auto* out = static_cast<float*>(p.out);
  for (int j = 0; j < p.top_k; ++j) {
    const int32_t row = rows.row[j];
    float acc = 0.0f;
    if (row >= 0) {
      const uint16_t* y_row = y + int64_t(row) * p.D;
      for (int64_t c = lane; c < p.D / kChunk; c += 32) {
        float a[kChunk], b[kChunk];
        unpack(dout[c], a);
        unpack(ptx::ld_global_nc_v4_if(y_row + c * kChunk, true), b);
#pragma unroll
        for (int e = 0; e < kChunk; ++e) acc = add_rn(acc, mul_rn(a[e], b[e]));
      }
    }
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) acc = add_rn(acc, __shfl_xor_sync(kFull, acc, off));
    if (lane == 0) out[t * p.top_k + j] = canonical_nan(acc);
  }
}

// One warp per token: its rows (sorted for combine), then the output's pass.
template <CombineOutput kOutput>
__global__ void __launch_bounds__(kThreads) combine_kernel(const CombineParams p) {
  constexpr bool kTokens = kOutput == CombineOutput::kTokens;
  __shared__ TokenRows shared[kWarps];
  ptx::griddepcontrol_wait();
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarps + warp;
  if (t >= p.T) return;  // whole warps leave together
  TokenRows& rows = shared[warp];
  const int32_t bad = load_token_rows(p, t, /*sorted=*/kTokens, rows);
  if (p.status != nullptr && bad != 0) atomicOr(p.status, bad);
  if constexpr (kTokens) {
    sum_rows(p, t, lane, rows);
  } else {
    score_grads(p, t, lane, rows);
  }
}

}  // namespace

}  // namespace mxq::kernels

namespace mxq::detail {

void launch_combine(const CombineParams& p, CombineOutput output) {
  if (p.status != nullptr) MXQ_CHECK_CUDA(cudaMemsetAsync(p.status, 0, sizeof(int32_t), p.stream));
  if (p.T == 0) return;
  const int64_t ctas = ceil_div(p.T, kernels::kWarps);
  MXQ_CHECK(ctas <= 0x7FFFFFFF, "too many tokens for one launch: ", p.T);
  const auto kernel = output == CombineOutput::kTokens
                          ? kernels::combine_kernel<CombineOutput::kTokens>
                          : kernels::combine_kernel<CombineOutput::kScoreGrad>;
  kernels::launch_dependent(kernel, static_cast<unsigned>(ctas), kernels::kThreads, 0, p.stream, p);
}

}  // namespace mxq::detail
