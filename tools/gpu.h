// CUDA helpers of the mxq tool (built only with CUDA): error checks, owning device buffers and
// events, device facts, and three small kernels (random fill, byte comparison, the benchmark's
// plain copy) in gpu.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "mxq/numerics.h"

// Throws std::runtime_error naming the runtime function and the CUDA error ("CUDA error in
// cudaMalloc: out of memory (cudaErrorMemoryAllocation)"); no file paths, the message is for users.
#define MXQ_TOOL_CUDA(call)                                                  \
  do {                                                                       \
    const cudaError_t tool_err_ = (call);                                    \
    if (tool_err_ != cudaSuccess) ::mxq::tools::cuda_fail(#call, tool_err_); \
  } while (0)

namespace mxq::tools {

[[noreturn]] void cuda_fail(const char* call, cudaError_t err);

// One cudaMalloc'd allocation; move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T = uint8_t>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// An owning CUDA stream and event.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Milliseconds between two recorded events (synchronizes on `stop`).
float elapsed_ms(const Event& start, const Event& stop);

// The facts a benchmark result records about the machine.
struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  int driver_version = 0;           // cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;          // cudaRuntimeGetVersion
  int toolkit_version = 0;          // CUDART_VERSION the tool was compiled with
  std::string driver_text() const;  // "13.0"
  std::string runtime_text() const;
  std::string toolkit_text() const;
};
DeviceInfo query_device();
int device_count();  // 0 when there is no device or no driver
// Why mxq's GPU entry points cannot run here ("no CUDA device is visible"), or "" when they can.
std::string usable_gpu_problem();

// Fills n values of `dtype` (bf16, fp16 or fp32; raw elements at x) with hash-random data: uniform
// in (-1, 1) times 2^e, e in [-12, 12] per 32x32 tile of an (n / cols, cols) matrix, so every block
// gets its own scale, like random_input on the host (other values). The same fp32 values for every
// dtype, rounded to nearest even for bf16 and fp16 (the smallest become fp16 subnormals or signed
// zeros); never NaN or Inf.
void fill_random(void* x, DType dtype, int64_t n, int64_t cols, uint64_t seed, cudaStream_t stream);
// `mxq bench` op "copy": the first half of x's `bytes` into a, the second half into b, by a plain
// copy kernel (16-byte vectors; bytes a multiple of 32; a, b and x 16-byte aligned).
void copy_halves(const void* x, void* a, void* b, int64_t bytes, cudaStream_t stream);
// Number of differing bytes between a and b (synchronizes the stream).
int64_t count_mismatches(const uint8_t* a, const uint8_t* b, int64_t n, cudaStream_t stream);

}  // namespace mxq::tools
