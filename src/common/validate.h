// Argument validation shared by the GPU entry points and the CPU reference (docs/numerics.md §9).
// Every check runs before anything is launched or written and throws mxq::Error naming the
// argument and its value.
#pragma once

#include <cstdint>

#include "mxq/mxq.h"

namespace mxq::detail {

void validate(const QuantizeParams& p);
void validate(const DequantizeParams& p);
// Expert weights (docs/numerics.md §11): N and K multiples of kDimAlign, G at least 1.
void validate(const QuantizeWeightParams& p);
// quantize_routed: sizes, types, pointers (not the workspace, which only the GPU path uses).
void validate(const QuantizeRoutedParams& p);
void check_routed_sizes(int64_t T, int64_t K, int64_t N, int64_t num_experts);

// The size rules (the public check_sizes / check_weight_sizes without an op name); num_groups < 0:
// dense, or the group count is checked elsewhere.
void check_sizes(int64_t M, int64_t K, int64_t num_groups, const char* m_name = "M",
                 const char* k_name = "K");
void check_weight_sizes(int64_t G, int64_t N, int64_t K);

// The arguments of mxq::validate_offs and validate_offs_host, before offs is read: M as the ops
// check it, 1 to kMaxGroups groups, offs not null.
void validate_offs_args(const int32_t* offs, int64_t num_groups, int64_t M);

// True when the call has no output bytes at all (M or K is 0 and no K-groups slack to zero).
bool nothing_to_write(const QuantizeParams& p);
bool nothing_to_write(const QuantizeWeightParams& p);  // N or K is 0

}  // namespace mxq::detail
