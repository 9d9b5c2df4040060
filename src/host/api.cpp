// The public entry points: validate (docs/numerics.md §9), then launch. The CPU reference lives in
// src/ref/.
#include <sstream>

#include "../common/check.h"
#include "../common/offs.h"
#include "../common/validate.h"
#include "../kernels/grouped_gemm.h"
#include "../kernels/launch.h"
#include "mxq/mxq.h"

namespace mxq {

// The parsers name themselves like every entry point (§9); a binding that parses for its own op
// puts that op's name in front of message() instead.
ScalingMode parse_scaling_mode(const std::string& name) {
  return detail::with_op("mxq::parse_scaling_mode", [&] {
    if (name == "rceil") return ScalingMode::kRceil;
    if (name == "floor") return ScalingMode::kFloor;
    if (name == "fp32") return ScalingMode::kFp32;
    detail::fail(Error::Kind::kInvalidArgument,
                 "scaling_mode must be \"rceil\", \"floor\" or \"fp32\", got \"", name, "\"");
  });
}

const char* to_string(ScalingMode mode) {
  switch (mode) {
    case ScalingMode::kRceil:
      return "rceil";
    case ScalingMode::kFloor:
      return "floor";
    case ScalingMode::kFp32:
      return "fp32";
  }
  return "?";
}

Format parse_format(const std::string& name) {
  return detail::with_op("mxq::parse_format", [&] {
    if (name == "mxfp8") return Format::kMxfp8;
    if (name == "fp8_blockwise") return Format::kFp8Blockwise;
    detail::fail(Error::Kind::kInvalidArgument,
                 "format must be \"mxfp8\" or \"fp8_blockwise\", got \"", name, "\"");
  });
}

const char* to_string(Format format) {
  switch (format) {
    case Format::kMxfp8:
      return "mxfp8";
    case Format::kFp8Blockwise:
      return "fp8_blockwise";
  }
  return "?";
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "fp16";
    case DType::kFloat32:
      return "fp32";
  }
  return "?";
}

WeightScaling parse_weight_scaling(const std::string& name) {
  return detail::with_op("mxq::parse_weight_scaling", [&] {
    if (name == "1x32") return WeightScaling::k1x32;
    if (name == "32x32") return WeightScaling::k32x32;
    if (name == "128x128") return WeightScaling::k128x128;
    detail::fail(Error::Kind::kInvalidArgument,
                 "weight_scaling must be \"1x32\", \"32x32\" or \"128x128\", got \"", name, "\"");
  });
}

const char* to_string(WeightScaling scaling) {
  switch (scaling) {
    case WeightScaling::k1x32:
      return "1x32";
    case WeightScaling::k32x32:
      return "32x32";
    case WeightScaling::k128x128:
      return "128x128";
  }
  return "?";
}

Grouping parse_grouping(const std::string& name) {
  return detail::with_op("mxq::parse_grouping", [&] {
    if (name == "m_grouped") return Grouping::kMGrouped;
    if (name == "k_grouped") return Grouping::kKGrouped;
    detail::fail(Error::Kind::kInvalidArgument,
                 "grouping must be \"m_grouped\" or \"k_grouped\", got \"", name, "\"");
  });
}

const char* to_string(Grouping grouping) {
  switch (grouping) {
    case Grouping::kMGrouped:
      return "m_grouped";
    case Grouping::kKGrouped:
      return "k_grouped";
  }
  return "?";
}

const char* version() { return MXQ_VERSION; }

std::string describe_status(int32_t status) {
  if (status == 0) return "ok";
  std::ostringstream os;
  constexpr int32_t kOffsBits = kOffsDecreasing | kOffsBeyondM | kOffsMisaligned;
  constexpr int32_t kRoutedBits = kIndexOutOfRange | kCountsNegative | kCountsSumNotN;
  os << ((status & kRoutedBits) != 0 && (status & kOffsBits) == 0 ? "bad routing"
                                                                  : "malformed offs")
     << " (status " << status << "):";
  if (status & kOffsDecreasing) os << " offsets decrease (or are negative);";
  if (status & kOffsBeyondM) os << " an offset exceeds M;";
  if (status & kOffsMisaligned)
    os << " a group boundary is not a multiple of the format's block (" << Mxfp8::kBlock
       << " for mxfp8, " << Fp8Blockwise::kBlock << " for fp8_blockwise);";
  if (status & kIndexOutOfRange) {
    os << " an index entry is outside its range (quantize_routed: [0, T), its row reads as 0; "
          "combine: token_rows [0, N) or dest [0, Mp), the row contributes 0);";
  }
  if (status & kCountsNegative) os << " a counts entry is negative (taken as 0);";
  if (status & kCountsSumNotN) os << " counts do not sum to N;";
  const int32_t unknown = status & ~(kOffsBits | kRoutedBits);
  if (unknown != 0) os << " unknown bits " << unknown << ";";
  return os.str();
}

int64_t composed_workspace_bytes(int64_t M, int64_t K) { return s_col_plain_shape(M, K).bytes(); }

void validate_offs_host(const int32_t* offs, int64_t num_groups, int64_t M, Format format) {
  detail::with_op("mxq::validate_offs", [&] {
    detail::validate_offs_args(offs, num_groups, M);
    detail::check_host_offs(offs, num_groups, M, "M", detail::format_block(format));
  });
}

void quantize(const QuantizeParams& p) {
  detail::with_op("mxq::quantize", [&] {
    detail::validate(p);
    if (detail::nothing_to_write(p)) return;
    detail::require_supported_device();
    detail::launch_quantize(p, detail::kAutoTileRows);
  });
}

void quantize_composed(const QuantizeParams& p, void* workspace) {
  detail::with_op("mxq::quantize_composed", [&] {
    detail::validate(p);
    // The composed path is MXFP8's baseline (its third kernel places E8M0 bytes in the blocked
    // layout); FP8 blockwise has the fused kernel only.
    MXQ_CHECK(p.format == Format::kMxfp8,
              "the composed path (MXFP8's three-kernel baseline) takes format Format::kMxfp8 "
              "only, got ",
              to_string(p.format), " (quantize it with mxq::quantize)");
    if (detail::nothing_to_write(p)) return;
    MXQ_CHECK(p.rowwise() && p.colwise(),
              "the composed path quantizes both axes: set q_row, s_row, q_col and s_col");
    MXQ_CHECK(workspace != nullptr || composed_workspace_bytes(p.M, p.K) == 0,
              "workspace is null (it needs composed_workspace_bytes(M, K) = ",
              composed_workspace_bytes(p.M, p.K), " bytes)");
    detail::require_supported_device();
    detail::launch_quantize_composed(p, static_cast<uint8_t*>(workspace), detail::kAutoTileRows);
  });
}

int64_t quantize_routed_workspace_bytes(int64_t N, int64_t num_experts, Format format) {
  return detail::with_op("mxq::quantize_routed_workspace_bytes", [&] {
    detail::check_routed_sizes(0, 0, N, num_experts, format);
    // kernels::RouteEntry: source row, scale factor
    return detail::padded_rows_of(N, num_experts, format) * 8;
  });
}

void quantize_routed(const QuantizeRoutedParams& p) {
  detail::with_op("mxq::quantize_routed", [&] {
    detail::validate(p);
    MXQ_CHECK(p.workspace != nullptr,
              "workspace is null (it needs quantize_routed_workspace_bytes(N, E, format) = ",
              detail::padded_rows_of(p.N, p.num_experts, p.format) * 8, " bytes)");
    MXQ_CHECK(reinterpret_cast<uintptr_t>(p.workspace) % 16 == 0,
              "workspace must be 16-byte aligned, got address ", p.workspace);
    detail::require_supported_device();
    detail::launch_quantize_routed(p, detail::kAutoTileRows);
  });
}

void quantize_weight(const QuantizeWeightParams& p) {
  detail::with_op("mxq::quantize_weight", [&] {
    detail::validate(p);
    if (detail::nothing_to_write(p)) return;
    detail::require_supported_device();
    detail::launch_quantize_weight(p);
  });
}

int64_t grouped_gemm_workspace_bytes(Grouping grouping, int64_t M, int64_t N, int64_t K,
                                     int64_t num_groups) {
  return detail::with_op("mxq::grouped_gemm_workspace_bytes", [&] {
    detail::check_grouped_gemm_sizes(M, N, K, num_groups);
    return detail::grouped_gemm_workspace(grouping, M, N, K, num_groups).total;
  });
}

void grouped_gemm(const GroupedGemmParams& p) {
  detail::with_op("mxq::grouped_gemm", [&] {
    detail::validate(p);
    const int64_t bytes =
        detail::grouped_gemm_workspace(p.grouping, p.M, p.N, p.K, p.num_groups).total;
    MXQ_CHECK(p.workspace != nullptr, "workspace is null (it needs grouped_gemm_workspace_bytes(",
              to_string(p.grouping), ", M, N, K, G) = ", bytes, " bytes)");
    MXQ_CHECK(reinterpret_cast<uintptr_t>(p.workspace) % 256 == 0,
              "workspace must be 256-byte aligned, got address ", p.workspace);
    detail::require_supported_device();
    detail::launch_grouped_gemm(p);
  });
}

void combine(const CombineParams& p) {
  detail::with_op("mxq::combine", [&] {
    detail::validate(p, detail::CombineOutput::kTokens);
    if (p.T == 0 && p.status == nullptr) return;
    detail::require_supported_device();
    detail::launch_combine(p, detail::CombineOutput::kTokens);
  });
}

void combine_score_grad(const CombineParams& p) {
  detail::with_op("mxq::combine_score_grad", [&] {
    detail::validate(p, detail::CombineOutput::kScoreGrad);
    if (p.T == 0 && p.status == nullptr) return;
    detail::require_supported_device();
    detail::launch_combine(p, detail::CombineOutput::kScoreGrad);
  });
}

void dequantize(const DequantizeParams& p) {
  detail::with_op("mxq::dequantize", [&] {
    detail::validate(p);
    // An empty q has no output bytes, but a status word is still written (mxq.h: on every call).
    if ((p.rows == 0 || p.cols == 0) && p.status == nullptr) return;
    detail::require_supported_device();
    detail::launch_dequantize(p);
  });
}

}  // namespace mxq
