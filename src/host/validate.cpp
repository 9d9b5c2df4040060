#include "validate.h"

#include <string>

#include "check.h"

namespace mxq::detail {
namespace {

void check_rounding(ScaleRounding r) {
  MXQ_CHECK(r == ScaleRounding::kRceil || r == ScaleRounding::kFloor,
            "mxq: rounding must be ScaleRounding::kRceil or kFloor, got ", static_cast<int>(r));
}

void check_dim(const char* name, int64_t v, const Target& t) {
  MXQ_CHECK(v >= 0, "mxq: ", name, " must be non-negative, got ", name, "=", v);
  MXQ_CHECK(v <= kMaxDim, "mxq: ", name, " must be at most 2^31-1, got ", name, "=", v);
  MXQ_CHECK(v % t.align == 0, "mxq: ", name, " must be a multiple of ", t.align, " on the ", t.name,
            " path, got ", name, "=", v);
}

// Every GPU buffer is accessed with 16-byte vectors, except offs and status (4-byte words).
void check_ptr(const void* ptr, const char* name, const Target& t, int align = 16) {
  MXQ_CHECK(ptr != nullptr, "mxq: ", name, " is null");
  if (!t.device) return;
  check_device_pointer(ptr, name);
  MXQ_CHECK(reinterpret_cast<uintptr_t>(ptr) % align == 0, "mxq: ", name, " must be ", align,
            "-byte aligned, got address ", ptr);
}

void check_x(const void* x, int64_t M, int64_t K, const Target& t) {
  check_dim("M", M, t);
  check_dim("K", K, t);
  if (M == 0 || K == 0) return;
  check_ptr(x, "x", t);
  MXQ_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0,
            "mxq: x must be 16-byte aligned, got address ", x);
}

void check_groups(const int32_t* offs, int64_t num_groups, const Target& t) {
  if (offs == nullptr) {
    MXQ_CHECK(num_groups == 0,
              "mxq: num_groups must be 0 when offs is absent, got num_groups=", num_groups);
    return;
  }
  MXQ_CHECK(num_groups >= 1 && num_groups <= kMaxGroups, "mxq: num_groups must be in [1, ",
            kMaxGroups, "] when offs is given, got num_groups=", num_groups);
  check_ptr(offs, "offs", t, 4);
}

}  // namespace

void check_host_offs(const int32_t* offs, int64_t num_groups, int64_t tokens, const char* name) {
  int64_t prev = 0;
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t end = offs[g];
    MXQ_CHECK(end >= prev, "mxq: offs must be non-decreasing and non-negative, got offs[", g,
              "]=", end, g > 0 ? " after " : " (negative)",
              g > 0 ? std::to_string(prev) : std::string());
    MXQ_CHECK(end <= tokens, "mxq: offs must not exceed ", name, "=", tokens, ", got offs[", g,
              "]=", end);
    MXQ_CHECK(end % kGroupAlign == 0, "mxq: group boundaries must be multiples of ", kGroupAlign,
              ", got offs[", g, "]=", end);
    prev = end;
  }
}

void validate(const RowwiseParams& p, const Target& t) {
  check_x(p.x, p.M, p.K, t);
  check_rounding(p.rounding);
  if (p.M == 0 || p.K == 0) return;
  check_ptr(p.q_row, "q_row", t);
  check_ptr(p.s_row, "s_row", t);
}

void validate(const ColwiseParams& p, const Target& t) {
  check_x(p.x, p.M, p.K, t);
  check_rounding(p.rounding);
  if (p.M == 0 || p.K == 0) return;
  check_ptr(p.q_col, "q_col", t);
  check_ptr(p.s_col_plain, "s_col_plain", t);
}

void validate(const SwizzleParams& p, const Target& t) {
  check_dim("M", p.M, t);
  check_dim("K", p.K, t);
  check_groups(p.offs, p.num_groups, t);
  if (p.status != nullptr) check_ptr(p.status, "status", t, 4);
  if (s_col_shape(p.M, p.K, p.num_groups).bytes() == 0) return;
  if (p.M != 0 && p.K != 0) check_ptr(p.s_col_plain, "s_col_plain", t);
  check_ptr(p.s_col, "s_col", t);
}

void validate(const DualParams& p, const Target& t) {
  check_x(p.x, p.M, p.K, t);
  check_rounding(p.rounding);
  check_groups(p.offs, p.num_groups, t);
  if (p.status != nullptr) check_ptr(p.status, "status", t, 4);
  if (p.M != 0 && p.K != 0) {
    check_ptr(p.q_row, "q_row", t);
    check_ptr(p.s_row, "s_row", t);
    check_ptr(p.q_col, "q_col", t);
  }
  if (s_col_shape(p.M, p.K, p.num_groups).bytes() != 0) check_ptr(p.s_col, "s_col", t);
}

void validate(const DequantizeParams& p, const Target& t) {
  check_dim("rows", p.rows, t);
  check_dim("cols", p.cols, t);
  check_groups(p.offs, p.num_groups, t);
  if (p.status != nullptr) check_ptr(p.status, "status", t, 4);
  if (p.rows == 0 || p.cols == 0) return;
  check_ptr(p.q, "q", t);
  check_ptr(p.scales, "scales", t);
  check_ptr(p.out, "out", t);
}

}  // namespace mxq::detail
