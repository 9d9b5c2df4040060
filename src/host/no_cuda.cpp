// The GPU entry points of a build without CUDA: each refuses clearly instead of pretending to run.
#include "../kernels/launch.h"
#include "check.h"
#include "validate.h"

namespace mxq {
namespace detail {

[[noreturn]] static void no_cuda() {
  MXQ_CHECK(false, "mxq: this build has no CUDA support (nvcc was not found at configure time)");
}

void check_device_pointer(const void*, const char*) { no_cuda(); }
void require_supported_device() { no_cuda(); }
void launch_quantize_rowwise(const RowwiseParams&) { no_cuda(); }
void launch_quantize_colwise(const ColwiseParams&) { no_cuda(); }
void launch_swizzle_col_scales(const SwizzleParams&) { no_cuda(); }
void launch_quantize_dual(const DualParams&) { no_cuda(); }
void launch_dequantize(const DequantizeParams&) { no_cuda(); }

}  // namespace detail

void validate_offs(const int32_t*, int64_t, int64_t, cudaStream_t) { detail::no_cuda(); }
void check_status(const int32_t*, cudaStream_t) { detail::no_cuda(); }
bool gpu_available() { return false; }
std::string build_info() { return std::string("mxq ") + MXQ_VERSION + ", CPU only (no CUDA)"; }

}  // namespace mxq
