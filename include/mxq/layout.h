// mxq layouts: where every scale byte lives (docs/numerics.md §5-§6), for host, device and
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
#include <type_traits>

#include "mxq/numerics.h"

namespace mxq {

constexpr int kAtomRows = Mxfp8::kAtomRows;        // rows of one blocked scale atom
constexpr int kAtomCols = Mxfp8::kAtomCols;        // scale columns of one atom
constexpr int kAtomBytes = kAtomRows * kAtomCols;  // 512
constexpr int kMaxGroups = 1024;                   // largest G accepted in grouped mode
// M, K and every group boundary (offs entry) are multiples of one scale block on every path.
constexpr int kDimAlign = kBlock;
constexpr int kGroupAlign = kBlock;
static_assert(kAtomRows % kBlock == 0, "an atom holds whole 32-row blocks");
static_assert(kAtomCols * kBlock == kAtomRows, "a 128x128 tile has one 128x4 scale atom per axis");

// Integer helpers, also for symbolic sizes (the torch layer's Meta impl calls the shape formulas
// below with c10::SymInt).
template <typename Int>
MXQ_HD constexpr Int ceil_div(const Int& a, int64_t b) {
  return (a + (b - 1)) / b;
}
template <typename Int>
MXQ_HD constexpr Int round_up(const Int& a, int64_t b) {
  return ceil_div(a, b) * b;
}

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

// The size types the shape helpers below take: int64_t, or a symbolic size (c10::SymInt). An
// integer narrower than 64 bits would compute every size in its own width and overflow silently
// (q_row_shape(262144, 8192).bytes() is -2^31 in int), so it is refused at compile time.
template <typename Int>
constexpr bool is_shape_int_v = !std::is_integral_v<Int> || sizeof(Int) >= sizeof(int64_t);

// A 2-D byte shape: the torch layer allocates exactly this, the C++ API sizes buffers with bytes().
template <typename Int>
struct Extent2d {
  static_assert(is_shape_int_v<Int>,
                "mxq shape helpers: pass int64_t sizes (an int computes them in 32 bits)");
  Int rows;
  Int cols;
  MXQ_HD constexpr Int bytes() const { return rows * cols; }
};
using Shape2d = Extent2d<int64_t>;

// The blocked layout of a (rows, cols) scale matrix: whole atoms.
template <typename Int, class Format = Mxfp8>
MXQ_HD constexpr Extent2d<Int> blocked_shape(const Int& rows, const Int& cols) {
  static_assert(is_blocked_v<Format>, "a format whose scale bytes lie in 128x4 atoms");
  return {round_up(rows, Format::kAtomRows), round_up(cols, Format::kAtomCols)};
}

// ---- shapes of every output, x of logical shape (M, K): the one place they are written ----
// (Int = int64_t for the core, the reference and the tools; c10::SymInt for the torch layer.
// Format: the block format, MXFP8 unless named.)
template <typename Int>
MXQ_HD constexpr Extent2d<Int> q_row_shape(const Int& M, const Int& K) {
  return {M, K};
}
template <typename Int>
MXQ_HD constexpr Extent2d<Int> q_col_shape(const Int& M, const Int& K) {  // physical (K, M)
  return {K, M};
}
template <typename Int, class Format = Mxfp8>
MXQ_HD constexpr Extent2d<Int> s_row_plain_shape(const Int& M, const Int& K) {
  return {M, K / Format::kBlock};
}
template <typename Int, class Format = Mxfp8>
MXQ_HD constexpr Extent2d<Int> s_col_plain_shape(const Int& M, const Int& K) {
  return {K, M / Format::kBlock};
}
// Rowwise scales: dense blocked without groups, else the M-groups allocation
// (roundup(M,128) + 128G, roundup(K/32,4)), which holds any offs without a host sync.
template <typename Int, class Format = Mxfp8>
MXQ_HD constexpr Extent2d<Int> s_row_shape(const Int& M, const Int& K) {
  return blocked_shape<Int, Format>(M, K / Format::kBlock);
}
template <typename Int, class Format = Mxfp8>
MXQ_HD constexpr Extent2d<Int> s_row_shape(const Int& M, const Int& K, const Int& num_groups,
                                           bool grouped) {
  if (!grouped) return blocked_shape<Int, Format>(M, K / Format::kBlock);
  return {round_up(M, Format::kAtomRows) + Format::kAtomRows * num_groups,
          round_up(K / Format::kBlock, Format::kAtomCols)};
}
// The int64 form: num_groups == 0 means dense.
MXQ_HD constexpr Shape2d s_row_shape(int64_t M, int64_t K, int64_t num_groups) {
  return s_row_shape<int64_t>(M, K, num_groups, num_groups != 0);
}
// Colwise scales: dense blocked without groups (grouped = false), else the K-groups allocation
// (roundup(K,128), M/32 + 4G), which holds any offs without a host sync.
template <typename Int, class Format = Mxfp8>
MXQ_HD constexpr Extent2d<Int> s_col_shape(const Int& M, const Int& K, const Int& num_groups,
                                           bool grouped) {
  if (!grouped) return blocked_shape<Int, Format>(K, M / Format::kBlock);
  return {round_up(K, Format::kAtomRows), M / Format::kBlock + Format::kAtomCols * num_groups};
}
// The int64 form: num_groups == 0 means dense.
MXQ_HD constexpr Shape2d s_col_shape(int64_t M, int64_t K, int64_t num_groups = 0) {
  return s_col_shape<int64_t>(M, K, num_groups, num_groups != 0);
}

// ---- the padded row space of routed rows (docs/numerics.md §12, §12.1) ----
// Its row count Mp: N routed rows in E groups of any size, each group padded to a multiple of the
// block (32), enough rows for any counts, known without reading them.
template <typename Int, class Format = Mxfp8>
MXQ_HD constexpr Int padded_rows(const Int& N, const Int& num_groups) {
  return round_up(N + num_groups * int64_t(Format::kBlock - 1), Format::kBlock);
}

// ---- expert weights W (G, N, K): each expert's (N, K) matrix quantized on its own ----
// Rowwise along K: data (G, N, K), scales the blocked layout of each expert's (N, K/32) matrix,
// experts one after another. Colwise along N: data (G, K, N) (each expert transposed), scales the
// blocked layout of each expert's (K, N/32) matrix. The 2-D shapes are those
// torch._scaled_grouped_mm checks for a 3-D operand.
template <typename Int>
MXQ_HD constexpr Extent2d<Int> weight_s_row_shape(const Int& G, const Int& N, const Int& K) {
  return {G, s_row_shape(N, K).bytes()};
}
template <typename Int>
MXQ_HD constexpr Extent2d<Int> weight_s_col_shape(const Int& G, const Int& N, const Int& K) {
  return {G, blocked_shape(K, N / kBlock).bytes()};
}

// Byte offsets of expert g's rowwise scale S_row[n, j] in s_row and colwise scale S_col[k, i] in
// s_col (each expert's region is the blocked layout of its own scale matrix).
MXQ_HD constexpr int64_t weight_s_row_offset(int64_t g, int64_t n, int64_t j, int64_t N,
                                             int64_t K) {
  return g * weight_s_row_shape<int64_t>(1, N, K).cols + blocked_offset(n, j, K / kBlock);
}
MXQ_HD constexpr int64_t weight_s_col_offset(int64_t g, int64_t k, int64_t i, int64_t N,
                                             int64_t K) {
  return g * weight_s_col_shape<int64_t>(1, N, K).cols + blocked_offset(k, i, N / kBlock);
}

// ---- M-groups placement (rowwise scales of grouped mode) ----
// Segment h — group h, or the uncovered tail for h = G — holds rows [row_begin, row_begin + rows);
// its (rows, K/32) scales are blocked on their own from blocked row `blocked_row` (a multiple of
// 128). Rows of its last atom past `rows` are padding.
struct MSegment {
  int64_t row_begin = 0;
  int64_t rows = 0;
  int64_t blocked_row = 0;
  MXQ_HD constexpr int64_t offset(int64_t m, int64_t j, int64_t scale_cols) const {
    return blocked_offset(blocked_row + (m - row_begin), j, scale_cols);  // S_row[m, j], m global
  }
};

// Segment h given segment h-1 (or MSegment{} for h = 0) and the segment's end row.
MXQ_HD constexpr MSegment next_msegment(const MSegment& prev, int64_t end_row) {
  const int64_t begin = prev.row_begin + prev.rows;
  return {begin, end_row - begin, prev.blocked_row + round_up(prev.rows, kAtomRows)};
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

// ---- FP8 blockwise (docs/numerics.md §13): fp32 factors, outer dimension fastest ----
// The factors of a (outer, inner) e4m3 matrix quantized in 1x128 blocks along `inner`: an
// (outer, inner/128) fp32 matrix stored with outer fastest (strides (1, outer)), so factor
// [o, j] is element j * outer + o. Activations x (M, K): d_row = factor_shape(M, K) for q_row (M,
// K); d_col = factor_shape(K, M) for q_col (K, M). Grouped (every group end a multiple of 128) and
// routed outputs use the same layout: a group's factors are a slice of it. Sizes are in floats.
template <typename Int>
MXQ_HD constexpr Extent2d<Int> factor_shape(const Int& outer, const Int& inner) {
  return {outer, inner / Fp8Blockwise::kBlock};
}
MXQ_HD constexpr int64_t factor_offset(int64_t o, int64_t j, int64_t outer) {
  return j * outer + o;
}

// Expert weights W (G, N, K) in 128x128 tiles: one factor per tile, in the two layouts the GEMMs
// take (cuBLASLt's 128x128 scales: the contraction's blocks fastest, their count padded to a
// multiple of 4 so each column starts 16-byte aligned; padding factors are 0).
//   s_row (forward, contraction K): per expert an (N/128, roundup(K/128, 4)) row-major matrix;
//         tile (tn, tk) at tn * roundup(K/128, 4) + tk.
//   s_col (dgrad, contraction N, data q_col (G, K, N)): per expert (K/128, roundup(N/128, 4));
//         tile (tn, tk) at tk * roundup(N/128, 4) + tn.
// Sizes are in floats; shape (G, per-expert count).
template <typename Int>
MXQ_HD constexpr Extent2d<Int> weight_factor_shape(const Int& G, const Int& outer,
                                                   const Int& inner) {
  return {G, (outer / Fp8Blockwise::kBlock) * round_up(inner / Fp8Blockwise::kBlock, 4)};
}
MXQ_HD constexpr int64_t weight_factor_offset(int64_t g, int64_t t_outer, int64_t t_inner,
                                              int64_t outer, int64_t inner) {
  return g * weight_factor_shape<int64_t>(1, outer, inner).cols +
         t_outer * round_up(inner / Fp8Blockwise::kBlock, 4) + t_inner;
}

}  // namespace mxq
