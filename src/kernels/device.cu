// The host capability check: every device arch guard in the kernels has this host-side twin.
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "common.cuh"
#include "launch.h"

namespace mxq::kernels {
// Present in every architecture this build targets; its attributes exist only if the device has
// code here.
__global__ void probe_kernel() {}
}  // namespace mxq::kernels

namespace mxq::detail {

void require_supported_device() {
  int device = 0;
  MXQ_CHECK_CUDA(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::vector<int> verified;  // devices already checked (the check costs a driver query)
  std::lock_guard<std::mutex> lock(mutex);
  for (int d : verified) {
    if (d == device) return;
  }
  cudaDeviceProp prop{};
  MXQ_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, kernels::probe_kernel);
  if (err != cudaSuccess) (void)cudaGetLastError();
  MXQ_CHECK(err == cudaSuccess, "mxq: no kernel code for ", prop.name, " (compute capability ",
            prop.major, ".", prop.minor, "); this build targets ", MXQ_CUDA_ARCHS, " (",
            cudaGetErrorString(err), ")");
  verified.push_back(device);
}

}  // namespace mxq::detail
