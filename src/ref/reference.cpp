// The bit-exact CPU reference (docs/numerics.md §2-§8): the oracle every GPU path is compared with.
//
// Written for reading, not speed: each op validates, then walks the contract literally, using only
// the scalar functions of numerics.h and the placement functions of layout.h. Threads take disjoint
// ranges of rows (or of 32-row blocks), so every byte has one writer and results are deterministic.
// Every byte of every output is written on every call: scale buffers are zero-filled first (their
// padding and slack are defined as 0), then every defined scale is placed.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "../host/check.h"
#include "../host/offs.h"
#include "../host/parallel.h"
#include "../host/validate.h"
#include "mxq/layout.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"

namespace mxq::ref {
namespace {

using detail::parallel_for;

void zero_fill(uint8_t* p, int64_t bytes) {
  if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
}

// Where the colwise scale S_col[k, i] lives in s_col (§5-§6): the dense blocked layout of
// (K, M/32), or, with offs, the region of the K-group owning token block i. Tokens past offs[G-1]
// (the uncovered tail) have no place: offset() returns -1 and their bytes stay 0. `offs` must
// already be checked.
class ColScalePlacement {
 public:
  ColScalePlacement(int64_t M, int64_t K, const int32_t* offs, int64_t num_groups)
      : scale_cols_(M / kBlock),
        bytes_(s_col_shape(M, K, offs ? num_groups : 0).bytes()),
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

const uint16_t* bf16_ptr(const void* x) { return static_cast<const uint16_t*>(x); }

// Rowwise 1x32 (§2, §5): q_row (M, K) and blocked S_row with zero padding. With 128-multiple
// groups the M-groups layout of s_row is the dense one (§6): grouped mode needs nothing else here.
void rowwise(const uint16_t* x, int64_t M, int64_t K, ScaleRounding rule, uint8_t* q_row,
             uint8_t* s_row) {
  const int64_t scale_cols = K / kBlock;
  zero_fill(s_row, s_row_shape(M, K).bytes());
  parallel_for(M, [&](int64_t m_begin, int64_t m_end) {
    for (int64_t m = m_begin; m < m_end; ++m) {
      for (int64_t j = 0; j < scale_cols; ++j) {
        const int64_t at = m * K + j * kBlock;
        s_row[blocked_offset(m, j, scale_cols)] = quantize_block(x + at, 1, rule, q_row + at);
      }
    }
  });
}

// Colwise 32x1 (§2, §5): q_col (K, M), row k = column k of x quantized in blocks of 32 rows. The
// scale of block (k, i) goes to store_scale(k, i, s). Threads own disjoint ranges of blocks i.
template <typename StoreScale>
void colwise(const uint16_t* x, int64_t M, int64_t K, ScaleRounding rule, uint8_t* q_col,
             const StoreScale& store_scale) {
  parallel_for(M / kBlock, [&](int64_t i_begin, int64_t i_end) {
    uint16_t v[kBlock];
    for (int64_t i = i_begin; i < i_end; ++i) {
      for (int64_t k = 0; k < K; ++k) {
        for (int j = 0; j < kBlock; ++j) v[j] = x[(i * kBlock + j) * K + k];  // x[32i + j, k]
        store_scale(k, i, quantize_block(v, 1, rule, q_col + k * M + i * kBlock));
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
// ColScalePlacement; the GPU's composed path places them with its swizzle kernel instead, so
// composed == reference is a cross-check of two placements.
void quantize(const QuantizeParams& p) {
  detail::with_op("mxq::ref::quantize", [&] {
    detail::validate(p, detail::kCpu);
    if (p.offs != nullptr) detail::check_host_offs(p.offs, p.num_groups, p.M, "M");
  });
  if (p.rowwise()) rowwise(bf16_ptr(p.x), p.M, p.K, p.rounding, p.q_row, p.s_row);
  if (p.colwise()) {
    const ColScalePlacement place(p.M, p.K, p.offs, p.num_groups);
    zero_fill(p.s_col, place.bytes());
    uint8_t* s_col = p.s_col;
    colwise(bf16_ptr(p.x), p.M, p.K, p.rounding, p.q_col, [&](int64_t k, int64_t i, uint8_t s) {
      const int64_t at = place.offset(k, i);
      if (at >= 0) s_col[at] = s;
    });
  }
  write_status(p.status);
}

// §8: out[r, c] = bf16(e4m3(q[r, c]) * 2^(S[r, c/32] - 127)), S blocked (rows, cols/32) or, with
// offs, in the K-groups layout (cols are tokens). Tail tokens have no scale: they give +0.
void dequantize(const DequantizeParams& p) {
  detail::with_op("mxq::ref::dequantize", [&] {
    detail::validate(p, detail::kCpu);
    if (p.offs != nullptr) detail::check_host_offs(p.offs, p.num_groups, p.cols, "cols");
  });
  const ColScalePlacement place(p.cols, p.rows, p.offs, p.num_groups);
  auto* out = static_cast<uint16_t*>(p.out);
  parallel_for(p.rows, [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      for (int64_t c = 0; c < p.cols; ++c) {
        const int64_t at = place.offset(r, c / kBlock);
        out[r * p.cols + c] = at < 0 ? 0 : dequantize_element(p.q[r * p.cols + c], p.scales[at]);
      }
    }
  });
  write_status(p.status);
}

}  // namespace mxq::ref
