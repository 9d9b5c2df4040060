// The bit-exact CPU reference of mxq::quantize_weight (docs/numerics.md §11): the oracle of the
// expert-weight kernel.
//
// Written for reading: each expert's (N, K) matrix is walked block by block (1x32 policy) or tile
// by tile (32x32 policy; FP8 blockwise's 128x128 tiles, §13) with the scalar rules of numerics.h
// and the placements of layout.h. Every
// value is widened to fp32 first (§2 step 1, element.h), so one code path serves bf16, fp16 and
// fp32. Threads take disjoint ranges of 32-row (128-row) bands, so every byte has one writer. Scale buffers
// are zero-filled first (their padding is defined as 0), then every scale is placed.
#include <cstring>
#include <vector>

#include "../common/check.h"
#include "../common/parallel.h"
#include "../common/validate.h"
#include "element.h"
#include "mxq/layout.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"

namespace mxq::ref {
namespace {

using detail::parallel_for;

class Weight {
 public:
  explicit Weight(const QuantizeWeightParams& p) : p_(p) {}

  float at(int64_t g, int64_t n, int64_t k) const {  // W[g, n, k] as fp32
    return element(p_.w, p_.dtype, (g * p_.N + n) * p_.K + k);
  }
  uint8_t* q_row(int64_t g, int64_t n, int64_t k) const {  // (G, N, K)
    return p_.q_row + (g * p_.N + n) * p_.K + k;
  }
  uint8_t* q_col(int64_t g, int64_t n, int64_t k) const {  // (G, K, N): element (n, k) at [g][k][n]
    return p_.q_col + (g * p_.K + k) * p_.N + n;
  }
  uint8_t& s_row(int64_t g, int64_t n, int64_t j) const {  // S_row[n, j] of expert g
    return p_.s_row[weight_s_row_offset(g, n, j, p_.N, p_.K)];
  }
  uint8_t& s_col(int64_t g, int64_t k, int64_t i) const {  // S_col[k, i] of expert g
    return p_.s_col[weight_s_col_offset(g, k, i, p_.N, p_.K)];
  }
  bool rowwise() const { return p_.rowwise(); }
  bool colwise() const { return p_.colwise(); }

 private:
  const QuantizeWeightParams& p_;
};

// 1x32 (§2 per block): S_row[n, j] covers W[g, n, 32j:32j+32]; S_col[k, i] covers
// W[g, 32i:32i+32, k]. Expert g, rows [32b, 32b + 32) of W: band b. Both byte runs are contiguous
// (q_col row k holds column k of the expert).
void quantize_band_1x32(const Weight& w, int64_t g, int64_t b, int64_t K, ScalingMode mode) {
  float v[kBlock];
  if (w.rowwise()) {
    for (int64_t n = b * kBlock; n < (b + 1) * kBlock; ++n) {
      for (int64_t j = 0; j < K / kBlock; ++j) {
        for (int e = 0; e < kBlock; ++e) v[e] = w.at(g, n, j * kBlock + e);
        w.s_row(g, n, j) = quantize_block_f32(v, mode, w.q_row(g, n, j * kBlock));
      }
    }
  }
  if (w.colwise()) {
    for (int64_t k = 0; k < K; ++k) {
      for (int e = 0; e < kBlock; ++e) v[e] = w.at(g, b * kBlock + e, k);
      w.s_col(g, k, b) = quantize_block_f32(v, mode, w.q_col(g, b * kBlock, k));
    }
  }
}

// 32x32: tile (b, c) of expert g is W[g, 32b:32b+32, 32c:32c+32]; one scale s for its 1024 values
// (§2 steps 2-3 over the tile), one byte per value (§2 steps 4-6 with the tile's r), placed on both
// axes: q_row[g, n, k] = q_col[g, k, n], S_row[n, c] = s for the tile's 32 rows n, S_col[k, b] = s
// for its 32 columns k.
void quantize_band_32x32(const Weight& w, int64_t g, int64_t b, int64_t K, ScalingMode mode) {
  std::vector<float> tile(kBlock * kBlock);
  for (int64_t c = 0; c < K / kBlock; ++c) {
    for (int i = 0; i < kBlock; ++i) {
      for (int e = 0; e < kBlock; ++e)
        tile[i * kBlock + e] = w.at(g, b * kBlock + i, c * kBlock + e);
    }
    const uint8_t s = e8m0_from_amax(amax_f32(tile.data(), kBlock * kBlock), mode);
    const float r = e8m0_reciprocal(s);
    for (int i = 0; i < kBlock; ++i) {
      for (int e = 0; e < kBlock; ++e) {
        const int64_t n = b * kBlock + i;
        const int64_t k = c * kBlock + e;
        const uint8_t q = e4m3_from_f32(mul_rn(tile[i * kBlock + e], r));
        if (w.rowwise()) *w.q_row(g, n, k) = q;
        if (w.colwise()) *w.q_col(g, n, k) = q;
      }
    }
    for (int e = 0; e < kBlock; ++e) {  // the tile's 32 rows and 32 columns
      if (w.rowwise()) w.s_row(g, b * kBlock + e, c) = s;
      if (w.colwise()) w.s_col(g, c * kBlock + e, b) = s;
    }
  }
}

// 128x128 (FP8 blockwise, §13): tile (b, c) of expert g is W[g, 128b:128b+128, 128c:128c+128];
// one factor d for its 16384 values (the block rule over the whole tile), one byte per value,
// placed on both axes: q_row[g, n, k] = q_col[g, k, n], d at weight_factor_offset(g, b, c, N, K)
// in s_row (the forward's layout) and at weight_factor_offset(g, c, b, K, N) in s_col (the
// dgrad's).
void quantize_band_128x128(const QuantizeWeightParams& p, const Weight& w, int64_t g, int64_t b) {
  constexpr int kTile = Fp8Blockwise::kBlock;
  std::vector<float> tile(kTile * kTile);
  std::vector<uint8_t> q(kTile * kTile);
  for (int64_t c = 0; c < p.K / kTile; ++c) {
    for (int i = 0; i < kTile; ++i) {
      for (int e = 0; e < kTile; ++e) tile[i * kTile + e] = w.at(g, b * kTile + i, c * kTile + e);
    }
    const float d =
        quantize_blockwise_block_f32(tile.data(), kTile * kTile, p.scaling_mode, q.data());
    for (int i = 0; i < kTile; ++i) {
      for (int e = 0; e < kTile; ++e) {
        const int64_t n = b * kTile + i;
        const int64_t k = c * kTile + e;
        if (w.rowwise()) *w.q_row(g, n, k) = q[i * kTile + e];
        if (w.colwise()) *w.q_col(g, n, k) = q[i * kTile + e];
      }
    }
    if (w.rowwise()) {
      std::memcpy(p.s_row + weight_factor_offset(g, b, c, p.N, p.K) * 4, &d, sizeof d);
    }
    if (w.colwise()) {
      std::memcpy(p.s_col + weight_factor_offset(g, c, b, p.K, p.N) * 4, &d, sizeof d);
    }
  }
}

}  // namespace

void quantize_weight(const QuantizeWeightParams& p) {
  detail::with_op("mxq::ref::quantize_weight", [&] { detail::validate(p); });
  if (detail::nothing_to_write(p)) return;
  if (p.rowwise()) {
    std::memset(p.s_row, 0,
                static_cast<size_t>(detail::weight_s_row_bytes(p.G, p.N, p.K, p.format)));
  }
  if (p.colwise()) {
    std::memset(p.s_col, 0,
                static_cast<size_t>(detail::weight_s_col_bytes(p.G, p.N, p.K, p.format)));
  }
  const Weight w(p);
  const int64_t bands = p.N / detail::format_block(p.format);
  parallel_for(p.G * bands, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      if (p.scaling == WeightScaling::k128x128) {
        quantize_band_128x128(p, w, u / bands, u % bands);
      } else if (p.scaling == WeightScaling::k32x32) {
        quantize_band_32x32(w, u / bands, u % bands, p.K, p.scaling_mode);
      } else {
        quantize_band_1x32(w, u / bands, u % bands, p.K, p.scaling_mode);
      }
    }
  });
}

}  // namespace mxq::ref
