// CUDA helpers of the mxq tool: RAII wrappers, device facts, and the kernels the benchmark needs
// to make inputs (fill_random) and compare outputs (count_mismatches) on the device without host
// round trips, and its `copy` op (copy_halves).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <sstream>

#include "../src/kernels/common.cuh"  // launch_dependent, ptx::griddepcontrol_wait
#include "gpu.h"
#include "mxq/mxq.h"

namespace mxq::tools {

void cuda_fail(const char* call, cudaError_t err) {
  // Name the runtime function only ("cudaMalloc"), not the whole expression: the message is for
  // users, and the arguments mean nothing to them.
  const std::string expression(call);
  const std::string function = expression.substr(0, expression.find('('));
  std::ostringstream os;
  os << "CUDA error in " << function << ": " << cudaGetErrorString(err) << " ("
     << cudaGetErrorName(err) << ")";
  throw std::runtime_error(os.str());
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) MXQ_TOOL_CUDA(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = o.bytes_;
  }
  return *this;
}

Stream::Stream() { MXQ_TOOL_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() { cudaStreamDestroy(stream_); }

Event::Event() { MXQ_TOOL_CUDA(cudaEventCreate(&event_)); }
Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

float elapsed_ms(const Event& start, const Event& stop) {
  MXQ_TOOL_CUDA(cudaEventSynchronize(stop.get()));
  float ms = 0;
  MXQ_TOOL_CUDA(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

static std::string version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}
std::string DeviceInfo::driver_text() const { return version_text(driver_version); }
std::string DeviceInfo::runtime_text() const { return version_text(runtime_version); }
std::string DeviceInfo::toolkit_text() const { return version_text(toolkit_version); }

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string usable_gpu_problem() {
  if (gpu_available()) return "";
  if (device_count() == 0) return "no CUDA device is visible";
  return "the CUDA device has no kernels in this build (" + build_info() + ")";
}

DeviceInfo query_device() {
  DeviceInfo info;
  MXQ_TOOL_CUDA(cudaGetDevice(&info.index));
  cudaDeviceProp prop{};
  MXQ_TOOL_CUDA(cudaGetDeviceProperties(&prop, info.index));
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = prop.l2CacheSize;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  MXQ_TOOL_CUDA(cudaDriverGetVersion(&info.driver_version));
  MXQ_TOOL_CUDA(cudaRuntimeGetVersion(&info.runtime_version));
  info.toolkit_version = CUDART_VERSION;
  return info;
}

namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <DType kType>
__global__ void fill_random_kernel(void* x, int64_t n, int64_t cols, uint64_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = i / cols;
    const int64_t col = i - row * cols;
    const uint64_t tile = (uint64_t(row / 32) << 32) ^ uint64_t(col / 32);
    const int e = int(mix64(seed ^ (tile * 0x9E3779B97F4A7C15ull)) % 25) - 12;
    const uint64_t bits = mix64(seed + uint64_t(i) * 0x9E3779B97F4A7C15ull);
    // |v| < 2^12 is finite in every dtype: no NaN or Inf.
    const float u = float(int64_t(bits >> 40) - (1 << 23)) * (1.0f / float(1 << 23));
    const float v = ldexpf(u, e);
    if constexpr (kType == DType::kFloat32) {
      static_cast<float*>(x)[i] = v;
    } else if constexpr (kType == DType::kFloat16) {
      static_cast<uint16_t*>(x)[i] = __half_as_ushort(__float2half_rn(v));
    } else {
      const uint32_t f = __float_as_uint(v);
      static_cast<uint16_t*>(x)[i] = uint16_t((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);  // RNE
    }
  }
}

__global__ void count_mismatches_kernel(const uint8_t* a, const uint8_t* b, int64_t n,
                                        unsigned long long* count) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  const int64_t words = n / 16;
  const auto* a16 = reinterpret_cast<const uint4*>(a);
  const auto* b16 = reinterpret_cast<const uint4*>(b);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
    const uint4 va = a16[i];
    const uint4 vb = b16[i];
    const uint32_t xa[4] = {va.x, va.y, va.z, va.w};
    const uint32_t xb[4] = {vb.x, vb.y, vb.z, vb.w};
    for (int w = 0; w < 4; ++w) {
      const uint32_t d = xa[w] ^ xb[w];
      local += ((d & 0xFFu) != 0) + ((d & 0xFF00u) != 0) + ((d & 0xFF0000u) != 0) +
               ((d & 0xFF000000u) != 0);
    }
  }
  for (int64_t i = words * 16 + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    local += a[i] != b[i];
  }
  if (local != 0) atomicAdd(count, local);
}

// One 16-byte vector a thread, no loop: the textbook copy, which on the H200 beat grid-stride loops
// and several vectors a thread at the latency-bound sizes (docs/performance.md, "512x4096").
// Launched as the library launches its kernels (src/kernels/common.cuh launch_dependent), so that
// it stays the ceiling of the same launch.
__global__ void copy_halves_kernel(const uint4* __restrict__ x, uint4* __restrict__ a,
                                   uint4* __restrict__ b, int64_t half) {
  ptx::griddepcontrol_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < half) {
    a[i] = x[i];
  } else if (i < 2 * half) {
    b[i - half] = x[i];
  }
}

int grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

}  // namespace

void fill_random(void* x, DType dtype, int64_t n, int64_t cols, uint64_t seed,
                 cudaStream_t stream) {
  if (n == 0) return;
  const int grid = grid_for(n, 256);
  switch (dtype) {
    case DType::kFloat32:
      fill_random_kernel<DType::kFloat32><<<grid, 256, 0, stream>>>(x, n, cols, seed);
      break;
    case DType::kFloat16:
      fill_random_kernel<DType::kFloat16><<<grid, 256, 0, stream>>>(x, n, cols, seed);
      break;
    case DType::kBFloat16:
      fill_random_kernel<DType::kBFloat16><<<grid, 256, 0, stream>>>(x, n, cols, seed);
      break;
  }
  MXQ_TOOL_CUDA(cudaGetLastError());
}

void copy_halves(const void* x, void* a, void* b, int64_t bytes, cudaStream_t stream) {
  if (bytes % 32 != 0) throw std::logic_error("copy_halves: bytes must be a multiple of 32");
  const int64_t half = bytes / 32;  // 16-byte vectors in each half
  constexpr int kThreads = 256;
  if (half == 0) return;
  kernels::launch_dependent(
      copy_halves_kernel, static_cast<unsigned>((2 * half + kThreads - 1) / kThreads), kThreads, 0,
      stream, static_cast<const uint4*>(x), static_cast<uint4*>(a), static_cast<uint4*>(b), half);
}

int64_t count_mismatches(const uint8_t* a, const uint8_t* b, int64_t n, cudaStream_t stream) {
  // Both pointers come from cudaMalloc (256-byte aligned), so the 16-byte loads are aligned.
  DeviceBuffer count(sizeof(unsigned long long));
  MXQ_TOOL_CUDA(cudaMemsetAsync(count.get(), 0, count.bytes(), stream));
  if (n > 0) {
    count_mismatches_kernel<<<grid_for(n / 16 + 1, 256), 256, 0, stream>>>(
        a, b, n, count.as<unsigned long long>());
    MXQ_TOOL_CUDA(cudaGetLastError());
  }
  unsigned long long host = 0;
  MXQ_TOOL_CUDA(cudaMemcpyAsync(&host, count.get(), sizeof host, cudaMemcpyDeviceToHost, stream));
  MXQ_TOOL_CUDA(cudaStreamSynchronize(stream));
  return static_cast<int64_t>(host);
}

}  // namespace mxq::tools
