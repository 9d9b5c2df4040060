// Host-side pieces of the GPU path that need the CUDA runtime but no kernels: the synchronizing
// offs checker, status reads, build facts.
#include <cuda_runtime_api.h>

#include <sstream>
#include <vector>

#include "../common/check.h"
#include "../common/offs.h"
#include "../common/validate.h"
#include "../kernels/launch.h"

namespace mxq {

void validate_offs(const int32_t* offs_device, int64_t num_groups, int64_t M, cudaStream_t stream,
                   Format format) {
  detail::with_op("mxq::validate_offs", [&] {
    detail::validate_offs_args(offs_device, num_groups, M);
    std::vector<int32_t> offs(static_cast<size_t>(num_groups));
    MXQ_CHECK_CUDA(cudaMemcpyAsync(offs.data(), offs_device, offs.size() * sizeof(int32_t),
                                   cudaMemcpyDefault, stream));
    MXQ_CHECK_CUDA(cudaStreamSynchronize(stream));
    detail::check_host_offs(offs.data(), num_groups, M, "M", detail::format_block(format));
  });
}

void check_status(const int32_t* status_device, cudaStream_t stream) {
  detail::with_op("mxq::check_status", [&] {
    MXQ_CHECK(status_device != nullptr, "status is null");
    int32_t status = 0;
    MXQ_CHECK_CUDA(
        cudaMemcpyAsync(&status, status_device, sizeof status, cudaMemcpyDefault, stream));
    MXQ_CHECK_CUDA(cudaStreamSynchronize(stream));
    MXQ_CHECK(status == 0, describe_status(status));
  });
}

bool gpu_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return false;
  }
  try {
    detail::require_supported_device();
  } catch (const Error&) {
    return false;
  }
  return true;
}

std::string build_info() {
  std::ostringstream os;
  int runtime = 0;
  int driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  os << "mxq " << MXQ_VERSION << ", CUDA runtime " << runtime / 1000 << "."
     << (runtime % 1000) / 10;
  if (driver == 0) {  // cudaDriverGetVersion reports 0 when no driver is installed
    os << ", no CUDA driver";
  } else {
    os << ", driver " << driver / 1000 << "." << (driver % 1000) / 10;
  }
  os << ", kernels for " << MXQ_CUDA_ARCHS;
  return os.str();
}

}  // namespace mxq
