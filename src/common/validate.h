// Argument validation shared by the GPU entry points and the CPU reference (docs/numerics.md §9).
// Every check runs before anything is launched or written and throws mxq::Error naming the
// argument and its value. The rules that differ between the block formats (the block that M, K
// and group ends are multiples of, the scaling modes, the scale buffers' sizes) follow the params
// struct's `format`.
#pragma once

#include <cstdint>

#include "mxq/mxq.h"

namespace mxq::detail {

// The elements of one scale block of `format`: 32 (MXFP8) or 128 (FP8 blockwise). M, K and every
// group end are multiples of it.
constexpr int format_block(Format format) {
  return format == Format::kFp8Blockwise ? Fp8Blockwise::kBlock : Mxfp8::kBlock;
}

void validate(const QuantizeParams& p);
void validate(const DequantizeParams& p);
// Expert weights (docs/numerics.md §11, §13): N and K multiples of the format's block, G at least 1.
void validate(const QuantizeWeightParams& p);
// quantize_routed: sizes, types, pointers (not the workspace, which only the GPU path uses).
void validate(const QuantizeRoutedParams& p);
void check_routed_sizes(int64_t T, int64_t K, int64_t N, int64_t num_experts, Format format);

// grouped_gemm (docs/numerics.md §13.6): the grouping, sizes, pointers (not the workspace, which
// only the GPU path uses).
void validate(const GroupedGemmParams& p);
void check_grouped_gemm_sizes(int64_t M, int64_t N, int64_t K, int64_t num_groups);

// combine / combine_score_grad (docs/numerics.md §14): which of the two the params are for (the
// output and the inputs it reads differ), then sizes, pointers.
enum class CombineOutput { kTokens, kScoreGrad };
void validate(const CombineParams& p, CombineOutput output);

// The size rules (the public check_sizes / check_weight_sizes without an op name); num_groups < 0:
// dense, or the group count is checked elsewhere.
void check_sizes(int64_t M, int64_t K, int64_t num_groups, Format format, const char* m_name = "M",
                 const char* k_name = "K");
void check_weight_sizes(int64_t G, int64_t N, int64_t K, Format format);

// The byte sizes of the scale buffers for `format`: MXFP8's E8M0 bytes (layout.h s_row_shape /
// s_col_shape, the grouped allocations with num_groups > 0), FP8 blockwise's fp32 factors (4 bytes
// each: factor_shape(M, K) / factor_shape(K, M), the same with or without groups).
int64_t s_row_bytes(int64_t M, int64_t K, int64_t num_groups, Format format);
int64_t s_col_bytes(int64_t M, int64_t K, int64_t num_groups, Format format);
// Expert weights (G, N, K): weight_s_row_shape / weight_s_col_shape bytes, or the fp32 tile factors
// weight_factor_shape(G, N, K) / (G, K, N).
int64_t weight_s_row_bytes(int64_t G, int64_t N, int64_t K, Format format);
int64_t weight_s_col_bytes(int64_t G, int64_t N, int64_t K, Format format);

// The rows of the padded row space of quantize_routed (layout.h padded_rows) for `format`.
int64_t padded_rows_of(int64_t N, int64_t num_experts, Format format);

// The arguments of mxq::validate_offs and validate_offs_host, before offs is read: M as the ops
// check it, 1 to kMaxGroups groups, offs not null.
void validate_offs_args(const int32_t* offs, int64_t num_groups, int64_t M);

// True when the call has no output bytes at all (M or K is 0 and no K-groups slack to zero).
bool nothing_to_write(const QuantizeParams& p);
bool nothing_to_write(const QuantizeWeightParams& p);  // N or K is 0

}  // namespace mxq::detail
