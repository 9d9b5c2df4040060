// The rules of grouped offsets (docs/numerics.md §6, §9) on a host copy: non-decreasing,
// non-negative, at most `tokens` (named `name` in messages: "M", or "cols" for dequantize),
// multiples of `align`, the format's block (kGroupAlign = 32 for MXFP8, 128 for FP8 blockwise). Throws mxq::Error naming the first bad entry. The CPU reference runs it
// on its host offs; mxq::validate_offs runs it after copying the device offs.
#pragma once

#include <cstdint>

#include "check.h"

namespace mxq::detail {

inline void check_host_offs(const int32_t* offs, int64_t num_groups, int64_t tokens,
                            const char* name, int align = kGroupAlign) {
  int64_t prev = 0;
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t end = offs[g];
    MXQ_CHECK(end >= 0, "offs[", g, "]=", end, " is negative");
    MXQ_CHECK(end >= prev, "offs must be non-decreasing, got offs[", g, "]=", end, " after offs[",
              g - 1, "]=", prev);
    MXQ_CHECK(end <= tokens, "offs[", g, "]=", end, " exceeds ", name, "=", tokens);
    MXQ_CHECK(end % align == 0, "offs[", g, "]=", end, " is not a multiple of ", align,
              " (group sizes must be)");
    prev = end;
  }
}

}  // namespace mxq::detail
