// The host capability check: every device arch guard in the kernels has this host-side twin.
#include <cuda_runtime.h>

#include <atomic>

#include "common.cuh"
#include "launch.h"

namespace mxq::kernels {
// Present in every architecture this build targets; its attributes exist only if the device has
// code here.
__global__ void arch_check_kernel() {}
}  // namespace mxq::kernels

namespace mxq::detail {

namespace {
// The current device's SM count once its kernel code is verified; the check runs once per device
// (the driver queries cost microseconds, and every call passes here). Devices 0..63 are cached, a
// race only repeats the queries.
int verified_multiprocessor_count() {
  constexpr int kCached = 64;
  static std::atomic<int> counts[kCached] = {};  // 0: not verified yet
  int device = 0;
  const cudaError_t found = cudaGetDevice(&device);
  // No device or no driver is a missing capability (kUnsupported, as mxq.h promises), not a CUDA
  // failure; any other error (a sticky fault of an earlier kernel) stays one.
  const bool absent = found == cudaErrorNoDevice || found == cudaErrorInsufficientDriver ||
                      found == cudaErrorStubLibrary || found == cudaErrorSystemDriverMismatch;
  if (absent) (void)cudaGetLastError();
  MXQ_CHECK_SUPPORTED(!absent, "no usable CUDA device (", cudaGetErrorName(found), ": ",
                      cudaGetErrorString(found), ")");
  MXQ_CHECK_CUDA(found);
  if (device < kCached) {
    const int n = counts[device].load(std::memory_order_relaxed);
    if (n != 0) return n;
  }
  cudaDeviceProp prop{};
  MXQ_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, kernels::arch_check_kernel);
  if (err != cudaSuccess) (void)cudaGetLastError();
  MXQ_CHECK_SUPPORTED(err == cudaSuccess, "no kernel code for ", prop.name, " (compute capability ",
                      prop.major, ".", prop.minor, "); this build targets ", MXQ_CUDA_ARCHS);
  if (device < kCached) counts[device].store(prop.multiProcessorCount, std::memory_order_relaxed);
  return prop.multiProcessorCount;
}
}  // namespace

void require_supported_device() { (void)verified_multiprocessor_count(); }

int multiprocessor_count() { return verified_multiprocessor_count(); }

}  // namespace mxq::detail
