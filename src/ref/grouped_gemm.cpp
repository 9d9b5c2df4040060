// The CPU reference of mxq::grouped_gemm (docs/numerics.md §13.6): the emulated GEMM, not a
// bit-exact model of the GPU's (an fp32-accumulating tensor-core GEMM has its own summation order).
// Each operand is dequantized with its factors exactly as §13 defines (value = fl32(e4m3 x d)),
// each output is one fp32 sum in increasing contraction order (no fused multiply-add), rounded once
// to bf16. Threads take disjoint ranges of output rows, so every element has one writer; every
// element of out is written (the M-grouped tail rows and the K-grouped empty groups as +0).
#include <vector>

#include "../common/check.h"
#include "../common/offs.h"
#include "../common/parallel.h"
#include "../common/validate.h"
#include "mxq/layout.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"

namespace mxq::ref {
namespace {

using detail::parallel_for;
constexpr int64_t kBlock = Fp8Blockwise::kBlock;

// The fp32 value of every element of an e4m3 (rows, cols) matrix with per-element factors.
template <typename Factor>
std::vector<float> dequantized(const uint8_t* q, int64_t rows, int64_t cols, const Factor& factor) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        v[r * cols + c] = mul_rn(e4m3_to_f32(q[r * cols + c]), factor(r, c));
      }
    }
  });
  return v;
}

// fp32 dot product of x[0, n) and y[0, n) (strides sx, sy), in increasing order.
float dot(const float* x, int64_t sx, const float* y, int64_t sy, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc = add_rn(acc, mul_rn(x[i * sx], y[i * sy]));
  return acc;
}

void m_grouped(const GroupedGemmParams& p, uint16_t* out) {
  const int64_t M = p.M, N = p.N, K = p.K;
  const auto a = dequantized(
      p.a, M, K, [&](int64_t m, int64_t k) { return p.a_scale[factor_offset(m, k / kBlock, M)]; });
  // b (G, N, K) as G*N rows: row g*N + n.
  const auto b = dequantized(p.b, p.num_groups * N, K, [&](int64_t gn, int64_t k) {
    return p.b_scale[weight_factor_offset(gn / N, gn % N / kBlock, k / kBlock, N, K)];
  });
  // The group of every row; rows past offs[G-1] have none (-1) and are written as zeros.
  std::vector<int64_t> group(static_cast<size_t>(M), -1);
  for (int64_t g = 0, m = 0; g < p.num_groups; ++g) {
    for (; m < p.offs[g]; ++m) group[m] = g;
  }
  parallel_for(M, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        const int64_t g = group[m];
        out[m * N + n] = g < 0 ? 0 : bf16_from_f32(dot(&a[m * K], 1, &b[(g * N + n) * K], 1, K));
      }
    }
  });
}

void k_grouped(const GroupedGemmParams& p, uint16_t* out) {
  const int64_t M = p.M, N = p.N, K = p.K;
  // a (N, M) with factor_shape(N, M), b (K, M) with factor_shape(K, M): 128x1 blocks along M.
  const auto a = dequantized(
      p.a, N, M, [&](int64_t n, int64_t m) { return p.a_scale[factor_offset(n, m / kBlock, N)]; });
  const auto b = dequantized(
      p.b, K, M, [&](int64_t k, int64_t m) { return p.b_scale[factor_offset(k, m / kBlock, K)]; });
  // Rows of out: (g, n), G*N of them.
  parallel_for(p.num_groups * N, [&](int64_t begin, int64_t end) {
    for (int64_t gn = begin; gn < end; ++gn) {
      const int64_t g = gn / N, n = gn % N;
      const int64_t start = g == 0 ? 0 : p.offs[g - 1];
      const int64_t len = p.offs[g] - start;  // 0: an empty group, all +0
      for (int64_t k = 0; k < K; ++k) {
        out[gn * K + k] = bf16_from_f32(dot(&a[n * M + start], 1, &b[k * M + start], 1, len));
      }
    }
  });
}

}  // namespace

void grouped_gemm(const GroupedGemmParams& p) {
  detail::with_op("mxq::ref::grouped_gemm", [&] {
    detail::validate(p);
    detail::check_host_offs(p.offs, p.num_groups, p.M, "M", kBlock);
    if (p.status != nullptr) *p.status = 0;
    auto* out = static_cast<uint16_t*>(p.out);
    if (p.grouping == Grouping::kMGrouped) {
      m_grouped(p, out);
    } else {
      k_grouped(p, out);
    }
  });
}

}  // namespace mxq::ref
