// mxq layouts: where every scale byte lives (docs/numerics.md, SPEC §5-§6), for host, device and
// reference.
//
// Blocked layout of a scale matrix S (R, C), the one block-scaled GEMMs read: pad to
// (roundup(R,128), roundup(C,4)), cut into 128x4 atoms of 512 bytes stored atom-row-major; inside
// an atom, row r sits at (r%32)*16 + ((r%128)/32)*4 and column c adds c%4. Padding bytes are 0.
//
// Grouped (MoE) mode, offs = G cumulative end offsets along M (group g = rows [offs[g-1],
// offs[g])):
//   s_row  M-groups layout: with 128-multiple groups byte-identical to the dense blocked layout.
//   s_col  K-groups layout: group g owns scale columns [offs[g-1]/32, offs[g]/32), padded to Q_g =
//          a multiple of 4; its region is the blocked layout of its (K, c_g) sub-matrix,
//          contiguous, starting at byte (sum_{h<g} Q_h) * roundup(K,128). Allocation
//          (roundup(K,128), M/32 + 4G); every byte after the last group's region is 0 (the
//          uncovered tail's colwise scales are zeroed, not placed).
#pragma once

#include <cstdint>

#include "mxq/numerics.h"

namespace mxq {

constexpr int kAtomRows = 128;    // rows of one blocked scale atom
constexpr int kAtomCols = 4;      // scale columns of one atom
constexpr int kAtomBytes = 512;   // kAtomRows * kAtomCols
constexpr int kMaxGroups = 1024;  // largest G accepted in grouped mode

MXQ_HD constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
MXQ_HD constexpr int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Byte offset of S[r, c] inside an atom (0..511). Kernels call it with unsigned in-tile indices.
template <typename Int>
MXQ_HD constexpr Int atom_offset(Int r, Int c) {
  return (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

// Byte offset of S[r, c] in the blocked layout of a matrix with `cols` scale columns (unpadded
// count).
MXQ_HD constexpr int64_t blocked_offset(int64_t r, int64_t c, int64_t cols) {
  return ((r / kAtomRows) * (round_up(cols, kAtomCols) / kAtomCols) + c / kAtomCols) * kAtomBytes +
         atom_offset(r, c);
}

// A 2-D byte shape: the torch layer allocates exactly this, the C++ API sizes buffers with bytes().
struct Shape2d {
  int64_t rows = 0;
  int64_t cols = 0;
  MXQ_HD constexpr int64_t bytes() const { return rows * cols; }
};

MXQ_HD constexpr Shape2d blocked_shape(int64_t rows, int64_t cols) {
  return {round_up(rows, kAtomRows), round_up(cols, kAtomCols)};
}

// ---- shapes of every output, x of logical shape (M, K) ----
MXQ_HD constexpr Shape2d q_row_shape(int64_t M, int64_t K) { return {M, K}; }
MXQ_HD constexpr Shape2d q_col_shape(int64_t M, int64_t K) { return {K, M}; }  // physical (K, M)
MXQ_HD constexpr Shape2d s_row_plain_shape(int64_t M, int64_t K) { return {M, K / kBlock}; }
MXQ_HD constexpr Shape2d s_col_plain_shape(int64_t M, int64_t K) { return {K, M / kBlock}; }
// Rowwise scales, blocked (dense, and M-groups with 128-multiple groups).
MXQ_HD constexpr Shape2d s_row_shape(int64_t M, int64_t K) { return blocked_shape(M, K / kBlock); }
// Colwise scales: dense blocked when num_groups == 0, else the K-groups allocation.
MXQ_HD constexpr Shape2d s_col_shape(int64_t M, int64_t K, int64_t num_groups = 0) {
  return num_groups == 0 ? blocked_shape(K, M / kBlock)
                         : Shape2d{round_up(K, kAtomRows), M / kBlock + kAtomCols * num_groups};
}

// ---- K-groups placement ----
// One group's slice of the colwise scales: scale columns [col_begin, col_begin + cols), placed as
// the blocked layout of a (K, cols) matrix starting at byte `base`.
struct KGroup {
  int64_t col_begin = 0;  // first scale column (token offset / 32)
  int64_t cols = 0;       // c_g
  int64_t base = 0;       // byte offset of the group's region
  MXQ_HD constexpr int64_t padded_cols() const { return round_up(cols, kAtomCols); }  // Q_g
  MXQ_HD constexpr int64_t offset(int64_t k, int64_t col) const {  // S_col[k, col], col global
    return base + blocked_offset(k, col - col_begin, cols);
  }
};

// Group g given the previous group's KGroup (or KGroup{} for g = 0), the group's end offset in
// tokens and K.
MXQ_HD constexpr KGroup next_kgroup(const KGroup& prev, int64_t end_token, int64_t K) {
  const int64_t begin = prev.col_begin + prev.cols;
  return {begin, end_token / kBlock - begin,
          prev.base + prev.padded_cols() * round_up(K, kAtomRows)};
}

}  // namespace mxq
