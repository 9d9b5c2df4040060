// The one place that says how many bytes each op moves (SPEC §10). TB/s and % of the copy roof in
// `mxq bench`, the JSON results and benchmarks/plot.py all come from these numbers: change a
// formula here, nowhere else.
//
// x is bf16 (M, K); G = 0 is dense, G > 0 grouped (the K-groups s_col allocation is larger).
//   op          read                       written                              B/elem
//   rowwise     x (2)                      q_row (1), s_row                      ~3.03
//   colwise     x (2)                      q_col (1), s_col (blocked/K-groups)   ~3.03
//   fused       x (2)                      q_row + q_col (1 + 1), s_row, s_col   ~4.06
//   composed    three kernels: rowwise; colwise writing plain S_col into the
//               workspace; swizzle reading it back and writing s_col. x is read
//               twice, plain scales written and read once more              ~6.1
//   dequantize  dense: q_row (1), s_row    bf16 (2)                              ~3.03
//               grouped: q_col (1), K-groups s_col
// "Effective" bytes of a two-axis op are the fused count: the useful work, whatever path does it.
// Peers in shared/anchors are quoted that way, so fused and composed compare on effective TB/s.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mxq/layout.h"

namespace mxq::tools {

enum class Op { kRowwise, kColwise, kFused, kComposed, kDequantize };
constexpr Op kAllOps[] = {Op::kRowwise, Op::kColwise, Op::kFused, Op::kComposed, Op::kDequantize};

inline const char* op_name(Op op) {
  switch (op) {
    case Op::kRowwise:
      return "rowwise";
    case Op::kColwise:
      return "colwise";
    case Op::kComposed:
      return "composed";
    case Op::kFused:
      return "fused";
    case Op::kDequantize:
      return "dequantize";
  }
  return "?";
}

inline std::optional<Op> parse_op(const std::string& name) {
  for (Op op : kAllOps) {
    if (name == op_name(op)) return op;
  }
  return std::nullopt;
}

// Rowwise scales in the M-groups layout are byte-identical to the dense ones (128-multiple groups),
// so a grouped rowwise run would repeat the dense row: rowwise runs dense only. Every other op's
// grouped output differs (K-groups s_col).
inline bool op_supports_groups(Op op) { return op != Op::kRowwise; }
// Ops producing all four outputs; their effective bytes are the fused count.
inline bool op_is_dual(Op op) { return op == Op::kFused || op == Op::kComposed; }

struct Traffic {
  int64_t read = 0;
  int64_t written = 0;
  int64_t total() const { return read + written; }
};

inline Traffic op_traffic(Op op, int64_t M, int64_t K, int64_t groups) {
  const int64_t elems = M * K;
  const int64_t x_bytes = 2 * elems;  // bf16
  const int64_t s_row = s_row_shape(M, K).bytes();
  const int64_t s_col = s_col_shape(M, K, groups).bytes();
  const int64_t s_col_plain = s_col_plain_shape(M, K).bytes();
  switch (op) {
    case Op::kRowwise:
      return {x_bytes, elems + s_row};
    case Op::kColwise:
      return {x_bytes, elems + s_col};
    case Op::kFused:
      return {x_bytes, 2 * elems + s_row + s_col};
    case Op::kComposed:
      // rowwise kernel + colwise kernel (plain scales) + swizzle kernel (plain -> s_col).
      return {x_bytes + x_bytes + s_col_plain, (elems + s_row) + (elems + s_col_plain) + s_col};
    case Op::kDequantize:
      return {elems + (groups == 0 ? s_row : s_col), 2 * elems};
  }
  return {};
}

// Bytes of useful work: the fused count for dual-axis ops, the op's own bytes otherwise.
inline int64_t effective_bytes(Op op, int64_t M, int64_t K, int64_t groups) {
  return op_traffic(op_is_dual(op) ? Op::kFused : op, M, K, groups).total();
}

}  // namespace mxq::tools
