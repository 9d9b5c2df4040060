// The public entry points: validate (SPEC §9), then launch. The CPU reference lives in src/ref/.
#include <sstream>

#include "../kernels/launch.h"
#include "check.h"
#include "mxq/mxq.h"
#include "validate.h"

namespace mxq {

ScaleRounding parse_scale_rounding(const std::string& name) {
  if (name == "rceil") return ScaleRounding::kRceil;
  if (name == "floor") return ScaleRounding::kFloor;
  MXQ_CHECK(false, "mxq: scaling_mode must be \"rceil\" or \"floor\", got \"", name, "\"");
}

const char* to_string(ScaleRounding rule) {
  return rule == ScaleRounding::kFloor ? "floor" : "rceil";
}

std::string describe_status(int32_t status) {
  if (status == 0) return "ok";
  std::ostringstream os;
  os << "malformed offs (status " << status << "):";
  if (status & kOffsDecreasing) os << " offsets decrease (or are negative);";
  if (status & kOffsBeyondM) os << " an offset exceeds M;";
  if (status & kOffsMisaligned)
    os << " a group boundary is not a multiple of " << kGroupAlign << ";";
  return os.str();
}

int64_t composed_workspace_bytes(int64_t M, int64_t K) { return s_col_plain_shape(M, K).bytes(); }

void quantize_rowwise(const RowwiseParams& p) {
  detail::validate(p, detail::kGpu);
  if (p.M == 0 || p.K == 0) return;
  detail::require_supported_device();
  detail::launch_quantize_rowwise(p);
}

void quantize_colwise(const ColwiseParams& p) {
  detail::validate(p, detail::kGpu);
  if (p.M == 0 || p.K == 0) return;
  detail::require_supported_device();
  detail::launch_quantize_colwise(p);
}

void swizzle_col_scales(const SwizzleParams& p) {
  detail::validate(p, detail::kGpu);
  if (s_col_shape(p.M, p.K, p.num_groups).bytes() == 0) return;
  detail::require_supported_device();
  detail::launch_swizzle_col_scales(p);
}

void quantize_dual(const DualParams& p) {
  detail::validate(p, detail::kGpu);
  if (s_col_shape(p.M, p.K, p.num_groups).bytes() == 0 && (p.M == 0 || p.K == 0)) return;
  detail::require_supported_device();
  detail::launch_quantize_dual(p);
}

void quantize_dual_composed(const DualParams& p, void* workspace) {
  detail::validate(p, detail::kGpu);
  if (p.M != 0 && p.K != 0) {
    MXQ_CHECK(workspace != nullptr, "mxq: workspace is null (needs composed_workspace_bytes = ",
              composed_workspace_bytes(p.M, p.K), " bytes)");
    detail::check_device_pointer(workspace, "workspace");
  }
  detail::require_supported_device();
  auto* s_plain = static_cast<uint8_t*>(workspace);
  if (p.M != 0 && p.K != 0) {
    detail::launch_quantize_rowwise({p.x, p.M, p.K, p.rounding, p.q_row, p.s_row, p.stream});
    detail::launch_quantize_colwise({p.x, p.M, p.K, p.rounding, p.q_col, s_plain, p.stream});
  }
  if (s_col_shape(p.M, p.K, p.num_groups).bytes() != 0) {
    detail::launch_swizzle_col_scales(
        {s_plain, p.M, p.K, p.offs, p.num_groups, p.s_col, p.status, p.stream});
  }
}

void dequantize(const DequantizeParams& p) {
  detail::validate(p, detail::kGpu);
  if (p.rows == 0 || p.cols == 0) return;
  detail::require_supported_device();
  detail::launch_dequantize(p);
}

}  // namespace mxq
