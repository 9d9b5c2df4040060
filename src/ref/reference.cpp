// The bit-exact CPU reference (docs/numerics.md §2-§8): the oracle every GPU path is compared with.
//
// Written for reading, not speed: each op validates, then walks the contract literally, using only
// the scalar functions of numerics.h and the placement functions of layout.h. Threads take disjoint
// ranges of rows (or of 32-row blocks), so every byte has one writer and results are deterministic.
// Every byte of every output is written on every call: scale buffers are zero-filled first (their
// padding and slack are defined as 0), then every defined scale is placed. The walks over blocks and
// the scale placements take the block format (include/mxq/format.h) as a template parameter; the
// ops instantiate them for the params struct's format: MXFP8 (E8M0 bytes in the blocked, M-groups
// and K-groups layouts) or FP8 blockwise (fp32 factors outer-fastest, §13, one layout grouped or
// not).
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "../common/check.h"
#include "../common/offs.h"
#include "../common/parallel.h"
#include "../common/validate.h"
#include "element.h"
#include "mxq/layout.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"

namespace mxq::ref {
namespace {

using detail::parallel_for;

void zero_fill(uint8_t* p, int64_t bytes) {
  if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
}

// A format's block math on one block of fp32 values: the e4m3 bytes into q, the scale returned;
// and the dequantization of one element with its block's scale.
template <class Format>
struct BlockMath;
template <>
struct BlockMath<Mxfp8> {
  static Mxfp8::Scale quantize(const float* v, ScalingMode mode, uint8_t* q) {
    return quantize_block_f32(v, mode, q);  // numerics.h: E8M0 scale, 32 e4m3 bytes
  }
  static uint16_t dequantize(uint8_t q, Mxfp8::Scale s) { return dequantize_element(q, s); }
};
template <>
struct BlockMath<Fp8Blockwise> {
  static Fp8Blockwise::Scale quantize(const float* v, ScalingMode mode, uint8_t* q) {
    // numerics.h: fp32 factor d, 128 e4m3 bytes
    return quantize_blockwise_block_f32(v, Fp8Blockwise::kBlock, mode, q);
  }
  static uint16_t dequantize(uint8_t q, Fp8Blockwise::Scale d) {
    return dequantize_blockwise_element(q, d);
  }
};

// Scale number `at` of a scale buffer (E8M0 bytes or fp32 factors) held as raw bytes.
template <class Scale>
void store_scale(uint8_t* scales, int64_t at, Scale s) {
  std::memcpy(scales + at * int64_t(sizeof(Scale)), &s, sizeof(Scale));
}
template <class Scale>
Scale load_scale(const uint8_t* scales, int64_t at) {
  Scale s;
  std::memcpy(&s, scales + at * int64_t(sizeof(Scale)), sizeof(Scale));
  return s;
}

// Where the colwise scale S_col[k, i] lives in s_col (§5-§6): the dense blocked layout of
// (K, M/32), or, with offs, the region of the K-group owning token block i. Tokens past offs[G-1]
// (the uncovered tail) have no place: offset() returns -1 and their bytes stay 0. `offs` must
// already be checked.
template <class Format>
class ColScalePlacement {
  static_assert(is_blocked_v<Format>, "the blocked, M-groups and K-groups layouts of layout.h");

 public:
  ColScalePlacement(int64_t M, int64_t K, const int32_t* offs, int64_t num_groups)
      : scale_cols_(M / Format::kBlock),
        bytes_(s_col_shape<int64_t, Format>(M, K, num_groups, offs != nullptr).bytes()),
        grouped_(offs != nullptr) {
    if (!grouped_) return;
    group_of_col_.assign(static_cast<size_t>(scale_cols_), -1);
    KGroup group;
    for (int64_t g = 0; g < num_groups; ++g) {
      group = next_kgroup(group, offs[g], K);
      groups_.push_back(group);
      for (int64_t c = group.col_begin; c < group.col_begin + group.cols; ++c) {
        group_of_col_[static_cast<size_t>(c)] = g;
      }
    }
  }

  int64_t bytes() const { return bytes_; }

  int64_t offset(int64_t k, int64_t i) const {
    if (!grouped_) return blocked_offset(k, i, scale_cols_);
    const int64_t g = group_of_col_[static_cast<size_t>(i)];
    return g < 0 ? -1 : groups_[static_cast<size_t>(g)].offset(k, i);
  }

 private:
  int64_t scale_cols_;
  int64_t bytes_;
  bool grouped_;
  std::vector<KGroup> groups_;         // K-groups mode only
  std::vector<int64_t> group_of_col_;  // owning group of each scale column, -1 in the tail
};

// Where the rowwise scale S_row[m, j] lives in s_row (§5-§6): the dense blocked layout of
// (M, K/32), or, with offs, the M-groups layout: segment h (group h, then the uncovered tail) is
// blocked on its own from its first blocked row. `offs` must already be checked.
template <class Format>
class RowScalePlacement {
  static_assert(is_blocked_v<Format>, "the blocked, M-groups and K-groups layouts of layout.h");
  static constexpr int kBlock = Format::kBlock;

 public:
  RowScalePlacement(int64_t M, int64_t K, const int32_t* offs, int64_t num_groups)
      : scale_cols_(K / kBlock),
        bytes_(s_row_shape<int64_t, Format>(M, K, num_groups, offs != nullptr).bytes()) {
    if (offs == nullptr) return;
    segment_of_block_.assign(static_cast<size_t>(M / kBlock), 0);
    MSegment segment;
    for (int64_t h = 0; h <= num_groups; ++h) {
      segment = next_msegment(segment, h < num_groups ? offs[h] : M);
      for (int64_t b = segment.row_begin / kBlock; b < (segment.row_begin + segment.rows) / kBlock;
           ++b) {
        segment_of_block_[static_cast<size_t>(b)] = static_cast<int64_t>(segments_.size());
      }
      segments_.push_back(segment);
    }
  }

  int64_t bytes() const { return bytes_; }

  int64_t offset(int64_t m, int64_t j) const {
    if (segments_.empty()) return blocked_offset(m, j, scale_cols_);
    const auto h = static_cast<size_t>(segment_of_block_[static_cast<size_t>(m / kBlock)]);
    return segments_[h].offset(m, j, scale_cols_);
  }

 private:
  int64_t scale_cols_;
  int64_t bytes_;
  std::vector<MSegment> segments_;         // M-groups mode only: G groups, then the tail
  std::vector<int64_t> segment_of_block_;  // owning segment of each block of rows
};

// FP8 blockwise (§13): one layout with or without groups (a group's factors are a slice of the
// dense ones, the tail's too), the factors of an (outer, inner) matrix at factor_offset: rowwise
// d_row = factor_shape(M, K), colwise d_col = factor_shape(K, M). Offsets count factors.
class FactorPlacement {
 public:
  FactorPlacement(int64_t outer, int64_t inner)
      : outer_(outer), bytes_(factor_shape(outer, inner).bytes() * int64_t(sizeof(float))) {}
  int64_t bytes() const { return bytes_; }
  int64_t offset(int64_t o, int64_t j) const { return factor_offset(o, j, outer_); }

 private:
  int64_t outer_;
  int64_t bytes_;
};
template <>
class RowScalePlacement<Fp8Blockwise> : public FactorPlacement {
 public:
  RowScalePlacement(int64_t M, int64_t K, const int32_t* /*offs*/, int64_t /*num_groups*/)
      : FactorPlacement(M, K) {}
};
template <>
class ColScalePlacement<Fp8Blockwise> : public FactorPlacement {
 public:
  ColScalePlacement(int64_t M, int64_t K, const int32_t* /*offs*/, int64_t /*num_groups*/)
      : FactorPlacement(K, M) {}
};

// Rowwise 1x32 or 1x128 (§2, §5, §13): q_row (M, K) and the scales placed by `place`, padding and
// slack 0.
template <class Format>
void rowwise(const QuantizeParams& p, const RowScalePlacement<Format>& place) {
  constexpr int kBlock = Format::kBlock;
  const int64_t scale_cols = p.K / kBlock;
  zero_fill(p.s_row, place.bytes());
  parallel_for(p.M, [&](int64_t m_begin, int64_t m_end) {
    float v[kBlock];
    for (int64_t m = m_begin; m < m_end; ++m) {
      for (int64_t j = 0; j < scale_cols; ++j) {
        const int64_t at = m * p.K + j * kBlock;
        for (int i = 0; i < kBlock; ++i) v[i] = element(p.x, p.dtype, at + i);
        store_scale(p.s_row, place.offset(m, j),
                    BlockMath<Format>::quantize(v, p.scaling_mode, p.q_row + at));
      }
    }
  });
}

// Colwise 32x1 or 128x1 (§2, §5, §13): q_col (K, M), row k = column k of x quantized in blocks of
// kBlock rows; the scales placed by `place` (MXFP8's K-groups tail scales are not placed), padding
// and slack 0. Threads own disjoint ranges of blocks i.
template <class Format>
void colwise(const QuantizeParams& p, const ColScalePlacement<Format>& place) {
  constexpr int kBlock = Format::kBlock;
  zero_fill(p.s_col, place.bytes());
  parallel_for(p.M / kBlock, [&](int64_t i_begin, int64_t i_end) {
    float v[kBlock];
    for (int64_t i = i_begin; i < i_end; ++i) {
      for (int64_t k = 0; k < p.K; ++k) {
        for (int j = 0; j < kBlock; ++j) v[j] = element(p.x, p.dtype, (i * kBlock + j) * p.K + k);
        const auto s =
            BlockMath<Format>::quantize(v, p.scaling_mode, p.q_col + k * p.M + i * kBlock);
        const int64_t at = place.offset(k, i);
        if (at >= 0) store_scale(p.s_col, at, s);
      }
    }
  });
}

template <class Format>
void quantize_as(const QuantizeParams& p) {
  if (p.rowwise()) rowwise(p, RowScalePlacement<Format>(p.M, p.K, p.offs, p.num_groups));
  if (p.colwise()) colwise(p, ColScalePlacement<Format>(p.M, p.K, p.offs, p.num_groups));
}

// §8, §13: out[r, c] = bf16(e4m3(q[r, c]) * scale of its block), the scale S[r, c/kBlock] of the
// (rows, cols/kBlock) scale matrix placed by the format's layouts: MXFP8 blocked, M-groups (rows
// are tokens) or K-groups (cols are tokens; K-groups tail tokens have no scale: they give +0);
// FP8 blockwise factor_shape(rows, cols). `offs` must already be checked.
template <class Format>
void dequantize_as(const DequantizeParams& p) {
  constexpr int kBlock = Format::kBlock;
  const bool m_groups = p.layout == ScaleLayout::kMGroups;
  const bool k_groups = p.layout == ScaleLayout::kKGroups;
  const RowScalePlacement<Format> rows(p.rows, p.cols, m_groups ? p.offs : nullptr, p.num_groups);
  const ColScalePlacement<Format> cols(p.cols, p.rows, k_groups ? p.offs : nullptr, p.num_groups);
  auto* out = static_cast<uint16_t*>(p.out);
  parallel_for(p.rows, [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      for (int64_t c = 0; c < p.cols; ++c) {
        const int64_t at = k_groups ? cols.offset(r, c / kBlock) : rows.offset(r, c / kBlock);
        out[r * p.cols + c] =
            at < 0 ? 0
                   : BlockMath<Format>::dequantize(
                         p.q[r * p.cols + c], load_scale<typename Format::Scale>(p.scales, at));
      }
    }
  });
}

// The optional status word of grouped ops: offs were checked on the host, so it is always 0.
void write_status(int32_t* status) {
  if (status != nullptr) *status = 0;
}

}  // namespace

// The requested axes of one call. The colwise scales are placed straight into s_col by
// ColScalePlacement; the GPU's composed path places them with its to_blocked kernel instead, so
// composed == reference is a cross-check of two placements.
void quantize(const QuantizeParams& p) {
  detail::with_op("mxq::ref::quantize", [&] {
    detail::validate(p);
    if (p.offs != nullptr) {
      detail::check_host_offs(p.offs, p.num_groups, p.M, "M", detail::format_block(p.format));
    }
  });
  if (p.format == Format::kFp8Blockwise) {
    quantize_as<Fp8Blockwise>(p);
  } else {
    quantize_as<Mxfp8>(p);
  }
  write_status(p.status);
}

// §8, §13 (dequantize_as above).
void dequantize(const DequantizeParams& p) {
  const bool m_groups = p.layout == ScaleLayout::kMGroups;
  detail::with_op("mxq::ref::dequantize", [&] {
    detail::validate(p);
    if (p.offs != nullptr) {
      detail::check_host_offs(p.offs, p.num_groups, m_groups ? p.rows : p.cols,
                              m_groups ? "rows" : "cols");
    }
  });
  if (p.format == Format::kFp8Blockwise) {
    dequantize_as<Fp8Blockwise>(p);
  } else {
    dequantize_as<Mxfp8>(p);
  }
  write_status(p.status);
}

}  // namespace mxq::ref
