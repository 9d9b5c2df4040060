// The one place that says how many bytes each op moves (docs/numerics.md §5-§6 for the shapes).
// TB/s and % of the copy roof in `mxq bench`, the JSON results and benchmarks/plot.py all come from
// these numbers: change a formula here, nowhere else.
//
// x is (M, K) of `dtype`: 2 bytes an element for bf16 and fp16, 4 for fp32 (xb below). G = 0 is
// dense; G > 0 grouped, where both scale outputs take their grouped allocations: s_row the M-groups
// allocation (roundup(M,128) + 128G, roundup(K/32,4)), s_col the K-groups allocation
// (roundup(K,128), M/32 + 4G). Every op writes every byte of each allocation on every call (slack
// zero-filled, docs/numerics.md §7), so the allocation is what it writes.
//   op          read                       written                              B/elem (bf16)
//   rowwise     x (xb)                     q_row (1), s_row                      ~3.03
//   colwise     x (xb)                     q_col (1), s_col (blocked/K-groups)   ~3.03
//   fused       x (xb)                     q_row + q_col (1 + 1), s_row, s_col   ~4.06
//   probe       the fused kernel's bytes (mxq::bench::quantize_probe: no math)    ~4.06
//   copy        x (xb)                     x's bytes again, into q_row + q_col      4 (bf16)
//               (a plain 16-byte copy kernel, no scales: the shape's own copy ceiling)
//   composed    three kernels: rowwise; colwise writing plain S_col into the
//               workspace; swizzle reading it back and writing s_col. x is read
//               twice, plain scales written and read once more              ~6.1
//   dequantize  dense: q_row (1), s_row    bf16 (2), whatever x's dtype was     ~3.03
//               grouped: q_col (1), K-groups s_col
//   weight      W (G, N, K) (xb)           q_row + q_col (1 + 1), both per-expert blocked scale
//               tensors (weight_s_row_shape + weight_s_col_shape), either scaling ~4.06
// "Effective" bytes of a two-axis op are the fused count: the useful work, whatever path does it.
// Peers in benchmarks/README.md are quoted that way, so fused and composed compare on effective TB/s.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mxq/layout.h"
#include "mxq/numerics.h"

namespace mxq::tools {

// kProbe: the fused kernel's data movement with a stand-in for the math (the design's ceiling).
// kCopy: x copied by a plain copy kernel (the shape's ceiling, whatever the design).
enum class Op { kRowwise, kColwise, kFused, kComposed, kDequantize, kWeight, kProbe, kCopy };
constexpr Op kAllOps[] = {Op::kRowwise,    Op::kColwise, Op::kFused, Op::kComposed,
                          Op::kDequantize, Op::kWeight,  Op::kProbe, Op::kCopy};

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
    case Op::kWeight:
      return "weight";
    case Op::kProbe:
      return "probe";
    case Op::kCopy:
      return "copy";
  }
  return "?";
}

inline std::optional<Op> parse_op(const std::string& name) {
  for (Op op : kAllOps) {
    if (name == op_name(op)) return op;
  }
  return std::nullopt;
}

// Ops producing all four outputs; their effective bytes are the fused count.
inline bool op_is_dual(Op op) {
  return op == Op::kFused || op == Op::kComposed || op == Op::kProbe;
}

// The largest M*K the counts below take: no op moves more than ~11 bytes an element plus scale
// padding (under 2^52 bytes at this size), so every count stays below 2^60. `mxq bench` refuses
// larger shapes; dimensions alone (each up to 2^31-1) would let M*K*4 pass 2^63.
constexpr int64_t kMaxTrafficElements = int64_t(1) << 56;

struct Traffic {
  int64_t read = 0;
  int64_t written = 0;
  int64_t total() const { return read + written; }
};

// An activation op on x (M, K) of `dtype`, `groups` = 0 dense. (Op::kWeight: weight_traffic.)
inline Traffic op_traffic(Op op, int64_t M, int64_t K, int64_t groups,
                          DType dtype = DType::kBFloat16) {
  const int64_t elems = M * K;
  const int64_t x_bytes = dtype_bytes(dtype) * elems;
  const int64_t s_row = s_row_shape(M, K, groups).bytes();
  const int64_t s_col = s_col_shape(M, K, groups).bytes();
  const int64_t s_col_plain = s_col_plain_shape(M, K).bytes();
  switch (op) {
    case Op::kRowwise:
      return {x_bytes, elems + s_row};
    case Op::kColwise:
      return {x_bytes, elems + s_col};
    case Op::kFused:
    case Op::kProbe:
      return {x_bytes, 2 * elems + s_row + s_col};
    case Op::kComposed:
      // rowwise kernel + colwise kernel (plain scales) + swizzle kernel (plain -> s_col).
      return {x_bytes + x_bytes + s_col_plain, (elems + s_row) + (elems + s_col_plain) + s_col};
    case Op::kDequantize:
      // Output is bf16 whatever the input dtype was.
      return {elems + (groups == 0 ? s_row : s_col), 2 * elems};
    case Op::kCopy:
      return {x_bytes, x_bytes};
    case Op::kWeight:
      break;
  }
  return {};
}

// mxq::quantize_weight on W (G, N, K) of `dtype`, both axes: read G*N*K elements, write the two
// e4m3 copies (G, N, K) and (G, K, N) and both scale tensors. k1x32 and k32x32 move the same bytes.
inline Traffic weight_traffic(int64_t G, int64_t N, int64_t K, DType dtype = DType::kBFloat16) {
  const int64_t elems = G * N * K;
  return {dtype_bytes(dtype) * elems,
          2 * elems + weight_s_row_shape(G, N, K).bytes() + weight_s_col_shape(G, N, K).bytes()};
}

// Bytes of useful work: the fused count for dual-axis ops, the op's own bytes otherwise.
inline int64_t effective_bytes(Op op, int64_t M, int64_t K, int64_t groups,
                               DType dtype = DType::kBFloat16) {
  return op_traffic(op_is_dual(op) ? Op::kFused : op, M, K, groups, dtype).total();
}

}  // namespace mxq::tools
