// The GPU entry points of a build without CUDA: each refuses clearly instead of pretending to run.
#include "../common/check.h"
#include "../kernels/launch.h"

namespace mxq {
namespace detail {

[[noreturn]] static void no_cuda() {
  fail(Error::Kind::kUnsupported,
       "this build of mxq has no CUDA (nvcc was not found at configure time); the CPU reference "
       "(mxq::ref) works");
}

void require_supported_device() { no_cuda(); }
void launch_quantize(const QuantizeParams&, int) { no_cuda(); }
void launch_quantize_composed(const QuantizeParams&, uint8_t*, int) { no_cuda(); }
void launch_dequantize(const DequantizeParams&) { no_cuda(); }
void launch_quantize_weight(const QuantizeWeightParams&) { no_cuda(); }
void launch_quantize_routed(const QuantizeRoutedParams&, int) { no_cuda(); }
void launch_grouped_gemm(const GroupedGemmParams&) { no_cuda(); }
void launch_combine(const CombineParams&, CombineOutput) { no_cuda(); }

}  // namespace detail

void validate_offs(const int32_t*, int64_t, int64_t, cudaStream_t, Format) {
  detail::with_op("mxq::validate_offs", [] { detail::no_cuda(); });
}
void check_status(const int32_t*, cudaStream_t) {
  detail::with_op("mxq::check_status", [] { detail::no_cuda(); });
}
bool gpu_available() { return false; }
std::string build_info() { return std::string("mxq ") + MXQ_VERSION + ", CPU only (no CUDA)"; }

}  // namespace mxq
