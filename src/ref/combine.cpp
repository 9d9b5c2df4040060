// The CPU reference of mxq::combine and mxq::combine_score_grad (docs/numerics.md §14): the GPU's
// sums in the GPU's order, so bit for bit its results. Threads take disjoint ranges of tokens, so
// every output element has one writer.
#include <algorithm>
#include <array>
#include <vector>

#include "../common/check.h"
#include "../common/parallel.h"
#include "../common/validate.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"

namespace mxq::ref {
namespace {

using detail::parallel_for;
constexpr int kLanes = 32;  // the GPU's warp: lane l owns the 8-element chunks c with c % 32 == l
constexpr int kChunk = 8;   // bf16 elements in one 16-byte load

// The arguments, then every routed row and its padded row (the GPU reports a bad one and skips
// it; the reference throws, before anything is written), then the status word.
void check(const CombineParams& p, detail::CombineOutput output) {
  detail::validate(p, output);
  for (int64_t i = 0; i < p.T * p.top_k; ++i) {
    const int32_t r = p.token_rows[i];
    MXQ_CHECK(r >= 0 && r < p.N, "token_rows[", i / p.top_k, ", ", i % p.top_k, "] = ", r,
              " is outside [0, N=", p.N, ")");
    MXQ_CHECK(p.dest[r] >= 0 && p.dest[r] < p.Mp, "dest[", r, "] = ", p.dest[r],
              " is outside [0, Mp=", p.Mp, ")");
  }
  if (p.status != nullptr) *p.status = 0;
}

// Σ_d a[d]·b[d] over D elements in the warp's order: per lane its chunks in order, each element's
// product rounded then added (no FMA), then the xor butterfly over 16, 8, 4, 2, 1 lanes.
float warp_dot(const uint16_t* a, const uint16_t* b, int64_t D) {
  std::array<float, kLanes> lane{};
  for (int64_t c = 0; c < D / kChunk; ++c) {
    float& acc = lane[c % kLanes];
    for (int e = 0; e < kChunk; ++e) {
      const int64_t d = c * kChunk + e;
      acc = add_rn(acc, mul_rn(bf16_to_f32(a[d]), bf16_to_f32(b[d])));
    }
  }
  for (int off = kLanes / 2; off >= 1; off /= 2) {
    std::array<float, kLanes> next{};
    for (int l = 0; l < kLanes; ++l) next[l] = add_rn(lane[l], lane[l ^ off]);
    lane = next;
  }
  return lane[0];
}

}  // namespace

void combine(const CombineParams& p) {
  detail::with_op("mxq::ref::combine", [&] {
    check(p, detail::CombineOutput::kTokens);
    const auto* y = static_cast<const uint16_t*>(p.y);
    auto* out = static_cast<uint16_t*>(p.out);
    parallel_for(p.T, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        std::vector<int32_t> rows(p.token_rows + t * p.top_k, p.token_rows + (t + 1) * p.top_k);
        std::sort(rows.begin(), rows.end());  // index_put_'s order: increasing routed row
        for (int64_t d = 0; d < p.D; ++d) {
          uint16_t acc = 0;  // +0
          for (const int32_t r : rows) {
            uint16_t g = y[int64_t(p.dest[r]) * p.D + d];
            if (p.scale != nullptr) g = bf16_from_f32(mul_rn(bf16_to_f32(g), p.scale[r]));
            acc = bf16_from_f32(add_rn(bf16_to_f32(acc), bf16_to_f32(g)));
          }
          out[t * p.D + d] = acc;
        }
      }
    });
  });
}

void combine_score_grad(const CombineParams& p) {
  detail::with_op("mxq::ref::combine_score_grad", [&] {
    check(p, detail::CombineOutput::kScoreGrad);
    const auto* y = static_cast<const uint16_t*>(p.y);
    const auto* dout = static_cast<const uint16_t*>(p.dout);
    auto* out = static_cast<float*>(p.out);
    parallel_for(p.T, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t i = t * p.top_k; i < (t + 1) * p.top_k; ++i) {
          const int64_t row = p.dest[p.token_rows[i]];
          out[i] = canonical_nan(warp_dot(dout + t * p.D, y + row * p.D, p.D));
        }
      }
    });
  });
}

}  // namespace mxq::ref
