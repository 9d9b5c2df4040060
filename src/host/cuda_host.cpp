// Host-side pieces of the GPU path that need the CUDA runtime but no kernels: pointer checks, the
// synchronizing offs checker, status reads, build facts.
#include <cuda_runtime_api.h>

#include <sstream>
#include <vector>

#include "../kernels/launch.h"
#include "check.h"
#include "validate.h"

namespace mxq {
namespace detail {

void check_device_pointer(const void* ptr, const char* name) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess)
    (void)cudaGetLastError();  // clear the sticky-free error of an unknown pointer
  int device = -1;
  MXQ_CHECK_CUDA(cudaGetDevice(&device));
  const bool on_device = err == cudaSuccess &&
                         (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged);
  MXQ_CHECK(on_device, "mxq: ", name, " must be device memory, got a host pointer ", ptr);
  MXQ_CHECK(attr.device == device, "mxq: ", name, " lives on cuda:", attr.device,
            " but the current device is cuda:", device);
}

}  // namespace detail

void validate_offs(const int32_t* offs_device, int64_t num_groups, int64_t M, cudaStream_t stream) {
  MXQ_CHECK(offs_device != nullptr, "mxq: offs is null");
  MXQ_CHECK(num_groups >= 1 && num_groups <= kMaxGroups, "mxq: num_groups must be in [1, ",
            kMaxGroups, "], got num_groups=", num_groups);
  detail::check_device_pointer(offs_device, "offs");
  std::vector<int32_t> offs(static_cast<size_t>(num_groups));
  MXQ_CHECK_CUDA(cudaMemcpyAsync(offs.data(), offs_device, offs.size() * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, stream));
  MXQ_CHECK_CUDA(cudaStreamSynchronize(stream));
  detail::check_host_offs(offs.data(), num_groups, M);
}

void check_status(const int32_t* status_device, cudaStream_t stream) {
  MXQ_CHECK(status_device != nullptr, "mxq: status is null");
  int32_t status = 0;
  MXQ_CHECK_CUDA(
      cudaMemcpyAsync(&status, status_device, sizeof status, cudaMemcpyDeviceToHost, stream));
  MXQ_CHECK_CUDA(cudaStreamSynchronize(stream));
  MXQ_CHECK(status == 0, "mxq: ", describe_status(status));
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
  os << "mxq " << MXQ_VERSION << ", CUDA runtime " << runtime / 1000 << "." << (runtime % 1000) / 10
     << ", driver " << driver / 1000 << "." << (driver % 1000) / 10 << ", kernels for "
     << MXQ_CUDA_ARCHS;
  return os.str();
}

}  // namespace mxq
