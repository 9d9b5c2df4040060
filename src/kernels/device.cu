// The host capability check: every device arch guard in the kernels has this host-side twin.
#include <cuda_runtime.h>

#include <atomic>

#include "common.cuh"
#include "launch.h"

namespace mxq::kernels {
// Present in every architecture this build targets; its attributes exist only if the device has
// code here.
__global__ void probe_kernel() {}
}  // namespace mxq::kernels

namespace mxq::detail {

void require_supported_device() {
  // One bit per device already verified: the driver query costs microseconds, and this runs on
  // every call. A race only repeats the query.
  static std::atomic<uint64_t> verified{0};
  int device = 0;
  MXQ_CHECK_CUDA(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (verified.load(std::memory_order_relaxed) & bit) return;
  cudaDeviceProp prop{};
  MXQ_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, kernels::probe_kernel);
  if (err != cudaSuccess) (void)cudaGetLastError();
  MXQ_CHECK_SUPPORTED(err == cudaSuccess, "no kernel code for ", prop.name, " (compute capability ",
                      prop.major, ".", prop.minor, "); this build targets ", MXQ_CUDA_ARCHS);
  verified.fetch_or(bit, std::memory_order_relaxed);
}

int multiprocessor_count() {
  constexpr int kCached = 64;
  static std::atomic<int> counts[kCached] = {};  // 0: not queried yet
  int device = 0;
  MXQ_CHECK_CUDA(cudaGetDevice(&device));
  int n = device < kCached ? counts[device].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    MXQ_CHECK_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    if (device < kCached) counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace mxq::detail
