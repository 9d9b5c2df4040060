#include "validate.h"

#include <string>

#include "check.h"

namespace mxq::detail {
namespace {

// A scaling mode as its enumerator's name, or its number when it is none.
std::string mode_name(ScalingMode mode) {
  switch (mode) {
    case ScalingMode::kRceil:
      return "ScalingMode::kRceil";
    case ScalingMode::kFloor:
      return "ScalingMode::kFloor";
    case ScalingMode::kFp32:
      return "ScalingMode::kFp32";
  }
  return std::to_string(static_cast<int>(mode));
}

void check_format(Format format) {
  MXQ_CHECK(format == Format::kMxfp8 || format == Format::kFp8Blockwise,
            "format must be Format::kMxfp8 or kFp8Blockwise, got ", static_cast<int>(format));
}

// MXFP8 takes the two power-of-two rules of its E8M0 byte; FP8 blockwise its exact fp32 rule or
// RCEIL's power of two (FLOOR can overflow e4m3 and is no rule of the recipe).
void check_scaling_mode(ScalingMode mode, Format format) {
  if (format == Format::kFp8Blockwise) {
    MXQ_CHECK(mode == ScalingMode::kFp32 || mode == ScalingMode::kRceil,
              "scaling_mode must be ScalingMode::kFp32 or kRceil for format fp8_blockwise, got ",
              mode_name(mode));
    return;
  }
  if (mode == ScalingMode::kFp32) {
    fail(Error::Kind::kInvalidArgument,
         "scaling_mode must be ScalingMode::kRceil or kFloor for format mxfp8, got "
         "ScalingMode::kFp32 (a rule of format fp8_blockwise)");
  }
  MXQ_CHECK(mode == ScalingMode::kRceil || mode == ScalingMode::kFloor,
            "scaling_mode must be ScalingMode::kRceil or kFloor, got ", static_cast<int>(mode));
}

void check_dim(const char* name, int64_t v, int block) {
  MXQ_CHECK(v >= 0, name, " must be non-negative, got ", v);
  MXQ_CHECK(v <= kMaxDim, name, " must be at most 2^31-1, got ", v);
  MXQ_CHECK(v % block == 0, name, " must be a multiple of ", block, ", got ", v);
}

void check_dtype(DType t) {
  MXQ_CHECK(t == DType::kBFloat16 || t == DType::kFloat16 || t == DType::kFloat32,
            "dtype must be DType::kBFloat16, kFloat16 or kFloat32, got ", static_cast<int>(t));
}

std::string scaling_name(WeightScaling s) {
  switch (s) {
    case WeightScaling::k1x32:
      return "WeightScaling::k1x32";
    case WeightScaling::k32x32:
      return "WeightScaling::k32x32";
    case WeightScaling::k128x128:
      return "WeightScaling::k128x128";
  }
  return std::to_string(static_cast<int>(s));
}

// MXFP8 weights take 1x32 blocks or 32x32 tiles; FP8 blockwise weights only 128x128 tiles.
void check_scaling(WeightScaling s, Format format) {
  if (format == Format::kFp8Blockwise) {
    MXQ_CHECK(s == WeightScaling::k128x128,
              "scaling must be WeightScaling::k128x128 for format fp8_blockwise, got ",
              scaling_name(s));
    return;
  }
  if (s == WeightScaling::k128x128) {
    fail(Error::Kind::kInvalidArgument,
         "scaling must be WeightScaling::k1x32 or k32x32 for format mxfp8, got "
         "WeightScaling::k128x128 (the tiles of format fp8_blockwise)");
  }
  MXQ_CHECK(s == WeightScaling::k1x32 || s == WeightScaling::k32x32,
            "scaling must be WeightScaling::k1x32 or k32x32, got ", static_cast<int>(s));
}

// Every buffer is accessed with 16-byte vectors (the fp32 factors of FP8 blockwise too: a
// 128-element run of them is 512 bytes), except offs and status (4-byte words).
void check_ptr(const void* ptr, const char* name, int align = 16) {
  MXQ_CHECK(ptr != nullptr, name, " is null");
  MXQ_CHECK(reinterpret_cast<uintptr_t>(ptr) % align == 0, name, " must be ", align,
            "-byte aligned, got address ", ptr);
}

// A data/scale pair is given whole or not at all (a null pair skips that axis). A buffer of 0
// bytes (an empty x) may be null either way.
void check_pair(const uint8_t* q, const uint8_t* s, int64_t q_bytes, int64_t s_bytes,
                const char* q_name, const char* s_name) {
  if (q == nullptr && s == nullptr) return;
  MXQ_CHECK(q != nullptr || q_bytes == 0, q_name, " is null but ", s_name,
            " is set: set both or neither (a null pair skips that axis)");
  MXQ_CHECK(s != nullptr || s_bytes == 0, s_name, " is null but ", q_name,
            " is set: set both or neither (a null pair skips that axis)");
  if (q != nullptr) check_ptr(q, q_name);
  if (s != nullptr) check_ptr(s, s_name);
}

void check_group_count(int64_t num_groups) {
  MXQ_CHECK(num_groups >= 1 && num_groups <= kMaxGroups, "offs must hold 1 to ", kMaxGroups,
            " group end offsets, got G=", num_groups);
}

void check_groups(const int32_t* offs, int64_t num_groups, const int32_t* status) {
  if (offs == nullptr) {
    MXQ_CHECK(num_groups == 0, "num_groups must be 0 without offs, got ", num_groups);
    MXQ_CHECK(status == nullptr, "status reports on offs and needs offs");
    return;
  }
  check_group_count(num_groups);
  check_ptr(offs, "offs", 4);
  if (status != nullptr) check_ptr(status, "status", 4);
}

}  // namespace

int64_t s_row_bytes(int64_t M, int64_t K, int64_t num_groups, Format format) {
  if (format == Format::kFp8Blockwise) return factor_shape(M, K).bytes() * int64_t(sizeof(float));
  return s_row_shape(M, K, num_groups).bytes();
}

int64_t s_col_bytes(int64_t M, int64_t K, int64_t num_groups, Format format) {
  if (format == Format::kFp8Blockwise) return factor_shape(K, M).bytes() * int64_t(sizeof(float));
  return s_col_shape(M, K, num_groups).bytes();
}

int64_t weight_s_row_bytes(int64_t G, int64_t N, int64_t K, Format format) {
  if (format == Format::kFp8Blockwise) {
    return weight_factor_shape(G, N, K).bytes() * int64_t(sizeof(float));
  }
  return weight_s_row_shape(G, N, K).bytes();
}

int64_t weight_s_col_bytes(int64_t G, int64_t N, int64_t K, Format format) {
  if (format == Format::kFp8Blockwise) {
    return weight_factor_shape(G, K, N).bytes() * int64_t(sizeof(float));
  }
  return weight_s_col_shape(G, N, K).bytes();
}

int64_t padded_rows_of(int64_t N, int64_t num_experts, Format format) {
  return format == Format::kFp8Blockwise ? padded_rows<int64_t, Fp8Blockwise>(N, num_experts)
                                         : padded_rows<int64_t, Mxfp8>(N, num_experts);
}

void check_sizes(int64_t M, int64_t K, int64_t num_groups, Format format, const char* m_name,
                 const char* k_name) {
  check_format(format);
  check_dim(m_name, M, format_block(format));
  check_dim(k_name, K, format_block(format));
  if (num_groups >= 0) check_group_count(num_groups);
}

void check_weight_sizes(int64_t G, int64_t N, int64_t K, Format format) {
  check_format(format);
  MXQ_CHECK(G >= 1, "G must be at least 1, got ", G);
  MXQ_CHECK(G <= kMaxDim, "G must be at most 2^31-1, got ", G);
  check_dim("N", N, format_block(format));
  check_dim("K", K, format_block(format));
  // Offsets are int64 element counts: G*N*K (N*K < 2^62 always) stays below 2^60, i.e. at most
  // 2^60 - 1 (G*NK <= 2^60 - 1 exactly when G <= floor((2^60 - 1) / NK)).
  MXQ_CHECK(N == 0 || K == 0 || G <= ((int64_t(1) << 60) - 1) / (N * K),
            "G*N*K must be below 2^60 elements, got G=", G, ", N=", N, ", K=", K);
}

void validate_offs_args(const int32_t* offs, int64_t num_groups, int64_t M) {
  check_dim("M", M, kDimAlign);
  check_group_count(num_groups);
  MXQ_CHECK(offs != nullptr, "offs is null");
}

bool nothing_to_write(const QuantizeParams& p) {
  if (p.M != 0 && p.K != 0) return false;
  return !(p.colwise() && s_col_bytes(p.M, p.K, p.num_groups, p.format) > 0) &&
         !(p.rowwise() && s_row_bytes(p.M, p.K, p.num_groups, p.format) > 0) && p.status == nullptr;
}

void validate(const QuantizeParams& p) {
  detail::check_sizes(p.M, p.K, -1, p.format);  // the group count with offs, below
  check_dtype(p.dtype);
  check_scaling_mode(p.scaling_mode, p.format);
  check_groups(p.offs, p.num_groups, p.status);
  const bool empty = p.M == 0 || p.K == 0;
  MXQ_CHECK(p.rowwise() || p.colwise() || empty,
            "nothing to compute: set q_row and s_row (rowwise), q_col and s_col (colwise), or all "
            "four");
  if (!empty) check_ptr(p.x, "x");
  check_pair(p.q_row, p.s_row, q_row_shape(p.M, p.K).bytes(),
             s_row_bytes(p.M, p.K, p.num_groups, p.format), "q_row", "s_row");
  check_pair(p.q_col, p.s_col, q_col_shape(p.M, p.K).bytes(),
             s_col_bytes(p.M, p.K, p.num_groups, p.format), "q_col", "s_col");
}

bool nothing_to_write(const QuantizeWeightParams& p) { return p.N == 0 || p.K == 0; }

void validate(const QuantizeWeightParams& p) {
  detail::check_weight_sizes(p.G, p.N, p.K, p.format);
  check_dtype(p.dtype);
  check_scaling_mode(p.scaling_mode, p.format);
  check_scaling(p.scaling, p.format);
  const bool empty = nothing_to_write(p);
  MXQ_CHECK(p.rowwise() || p.colwise() || empty,
            "nothing to compute: set q_row and s_row (rowwise), q_col and s_col (colwise), or all "
            "four");
  if (!empty) check_ptr(p.w, "w");
  const int64_t q_bytes = p.G * p.N * p.K;
  check_pair(p.q_row, p.s_row, q_bytes, weight_s_row_bytes(p.G, p.N, p.K, p.format), "q_row",
             "s_row");
  check_pair(p.q_col, p.s_col, q_bytes, weight_s_col_bytes(p.G, p.N, p.K, p.format), "q_col",
             "s_col");
}

void validate(const DequantizeParams& p) {
  detail::check_sizes(p.rows, p.cols, -1, p.format, "rows", "cols");
  MXQ_CHECK(p.layout == ScaleLayout::kBlocked || p.layout == ScaleLayout::kMGroups ||
                p.layout == ScaleLayout::kKGroups,
            "layout must be ScaleLayout::kBlocked, kMGroups or kKGroups, got ",
            static_cast<int>(p.layout));
  // FP8 blockwise factors have one layout, grouped or not: a group's factors are a slice of the
  // dense ones, so its data dequantizes as a dense matrix.
  MXQ_CHECK(p.format != Format::kFp8Blockwise || p.layout == ScaleLayout::kBlocked,
            "format fp8_blockwise dequantizes with layout ScaleLayout::kBlocked (a grouped "
            "tensor's factors are a slice of the dense ones), got layout ",
            static_cast<int>(p.layout));
  MXQ_CHECK((p.layout == ScaleLayout::kBlocked) == (p.offs == nullptr),
            p.layout == ScaleLayout::kBlocked ? "the blocked layout takes no offs"
                                              : "the grouped layouts need offs");
  check_groups(p.offs, p.num_groups, p.status);
  if (p.rows == 0 || p.cols == 0) return;
  check_ptr(p.q, "q");
  check_ptr(p.scales, "scales");
  check_ptr(p.out, "out");
}

void check_routed_sizes(int64_t T, int64_t K, int64_t N, int64_t num_experts, Format format) {
  check_format(format);
  MXQ_CHECK(T >= 0 && T <= kMaxDim, "T (rows of x) must be in [0, 2^31-1], got ", T);
  check_dim("K", K, format_block(format));
  MXQ_CHECK(N >= 0 && N <= kMaxDim,
            "N (routed rows, the length of index) must be in [0, 2^31-1], got ", N);
  MXQ_CHECK(num_experts >= 1 && num_experts <= kMaxGroups, "counts must hold 1 to ", kMaxGroups,
            " experts, got E=", num_experts);
  const int block = format_block(format);
  MXQ_CHECK(padded_rows_of(N, num_experts, format) <= kMaxDim, "the padded rows roundup(N + ",
            block - 1, "*E, ", block, ") must be at most 2^31-1, got ",
            padded_rows_of(N, num_experts, format), " (N=", N, ", E=", num_experts, ")");
}

void validate(const QuantizeRoutedParams& p) {
  detail::check_routed_sizes(p.T, p.K, p.N, p.num_experts, p.format);
  check_dtype(p.dtype);
  check_scaling_mode(p.scaling_mode, p.format);
  const auto check_index_type = [](IndexType t, const char* name) {
    MXQ_CHECK(t == IndexType::kInt32 || t == IndexType::kInt64, name,
              " must be IndexType::kInt32 or kInt64, got ", static_cast<int>(t));
  };
  check_index_type(p.index_type, "index_type");
  check_index_type(p.counts_type, "counts_type");
  const auto width = [](IndexType t) { return t == IndexType::kInt64 ? 8 : 4; };
  MXQ_CHECK(p.rowwise() || p.colwise() || p.K == 0,
            "nothing to compute: set q_row and s_row (rowwise), q_col and s_col (colwise), or all "
            "four");
  if (p.T > 0 && p.K > 0) check_ptr(p.x, "x");
  if (p.N > 0) {
    check_ptr(p.index, "index", width(p.index_type));
    check_ptr(p.dest, "dest", 4);
    if (p.scale != nullptr) check_ptr(p.scale, "scale", 4);
  }
  check_ptr(p.counts, "counts", width(p.counts_type));
  check_ptr(p.offs_p, "offs_p", 4);
  if (p.status != nullptr) check_ptr(p.status, "status", 4);
  const int64_t Mp = padded_rows_of(p.N, p.num_experts, p.format);
  check_pair(p.q_row, p.s_row, q_row_shape(Mp, p.K).bytes(),
             s_row_bytes(Mp, p.K, p.num_experts, p.format), "q_row", "s_row");
  check_pair(p.q_col, p.s_col, q_col_shape(Mp, p.K).bytes(),
             s_col_bytes(Mp, p.K, p.num_experts, p.format), "q_col", "s_col");
}

void check_grouped_gemm_sizes(int64_t M, int64_t N, int64_t K, int64_t num_groups) {
  constexpr int kBlock = Fp8Blockwise::kBlock;
  check_dim("M", M, kBlock);
  check_dim("N", N, kBlock);
  check_dim("K", K, kBlock);
  MXQ_CHECK(N > 0 && K > 0, "N and K must be positive, got N=", N, ", K=", K);
  MXQ_CHECK(num_groups >= 1 && num_groups <= kMaxGroups,
            "the group count (offs' length) must be 1 to ", kMaxGroups, ", got ", num_groups);
}

void validate(const GroupedGemmParams& p) {
  MXQ_CHECK(p.grouping == Grouping::kMGrouped || p.grouping == Grouping::kKGrouped,
            "grouping must be Grouping::kMGrouped or kKGrouped, got ",
            static_cast<int>(p.grouping));
  check_grouped_gemm_sizes(p.M, p.N, p.K, p.num_groups);
  if (p.M > 0) {  // with M = 0, a (and b K-grouped) has no bytes and may be null
    check_ptr(p.a, "a");
    check_ptr(p.a_scale, "a_scale");
  }
  if (p.grouping == Grouping::kMGrouped || p.M > 0) {
    check_ptr(p.b, "b");
    check_ptr(p.b_scale, "b_scale");
  }
  if (p.grouping == Grouping::kKGrouped || p.M > 0) check_ptr(p.out, "out");
  check_ptr(p.offs, "offs", 4);
  if (p.status != nullptr) check_ptr(p.status, "status", 4);
}

void validate(const CombineParams& p, CombineOutput output) {
  const bool tokens = output == CombineOutput::kTokens;
  MXQ_CHECK(p.T >= 0 && p.T <= kMaxDim, "T (tokens) must be in [0, 2^31-1], got ", p.T);
  MXQ_CHECK(p.top_k >= 1 && p.top_k <= kMaxTopK, "top_k must be in [1, ", kMaxTopK, "], got ",
            p.top_k);
  MXQ_CHECK(p.N == p.T * p.top_k, "N (routed rows) must be T*top_k = ", p.T * p.top_k, ", got ",
            p.N);
  MXQ_CHECK(p.N <= kMaxDim, "N (routed rows, T*top_k) must be at most 2^31-1, got ", p.N);
  MXQ_CHECK(p.Mp >= 0 && p.Mp <= kMaxDim, "Mp (rows of y) must be in [0, 2^31-1], got ", p.Mp);
  MXQ_CHECK(p.D >= 0 && p.D <= kMaxDim && p.D % 8 == 0,
            "D (columns of y) must be a multiple of 8 in [0, 2^31-1], got ", p.D);
  MXQ_CHECK(tokens || p.scale == nullptr,
            "scale is combine's input; combine_score_grad computes the scores' gradient");
  MXQ_CHECK(tokens || p.dout != nullptr || p.T == 0 || p.D == 0,
            "dout is null (combine_score_grad reads the output's gradient, (T, D) bf16)");
  if (p.status != nullptr) check_ptr(p.status, "status", 4);
  if (p.T == 0) return;
  check_ptr(p.token_rows, "token_rows", 4);
  check_ptr(p.dest, "dest", 4);
  check_ptr(p.out, "out", tokens ? 16 : 4);
  if (p.scale != nullptr) check_ptr(p.scale, "scale", 4);
  if (p.D == 0) return;
  MXQ_CHECK(p.Mp > 0, "y has no rows (Mp = 0) but T = ", p.T, " tokens read it");
  check_ptr(p.y, "y");
  if (!tokens) check_ptr(p.dout, "dout");
}

}  // namespace mxq::detail

namespace mxq {

void check_grouped_gemm_sizes(int64_t M, int64_t N, int64_t K, int64_t num_groups) {
  detail::with_op("mxq::check_grouped_gemm_sizes",
                  [&] { detail::check_grouped_gemm_sizes(M, N, K, num_groups); });
}

void check_routed_sizes(int64_t T, int64_t K, int64_t N, int64_t num_experts, Format format) {
  detail::with_op("mxq::check_routed_sizes",
                  [&] { detail::check_routed_sizes(T, K, N, num_experts, format); });
}

void check_sizes(int64_t M, int64_t K, int64_t num_groups, Format format) {
  detail::with_op("mxq::check_sizes", [&] { detail::check_sizes(M, K, num_groups, format); });
}

void check_dequantize_sizes(int64_t rows, int64_t cols, int64_t num_groups, Format format) {
  detail::with_op("mxq::check_dequantize_sizes",
                  [&] { detail::check_sizes(rows, cols, num_groups, format, "rows", "cols"); });
}

void check_weight_sizes(int64_t G, int64_t N, int64_t K, Format format) {
  detail::with_op("mxq::check_weight_sizes", [&] { detail::check_weight_sizes(G, N, K, format); });
}

}  // namespace mxq
