// mxq from a downstream C++ project (CMakeLists.txt here: find_package(mxq), mxq::mxq): quantize a
// bf16 tensor on the GPU with mxq::quantize and compare all four outputs byte for byte with the CPU
// reference, mxq::ref::quantize. Without a usable GPU it runs the reference alone and says so.
//
//   mxq_example [M K]        (default 1024 4096: multiples of 32, M*K at most 2^31)
//
// Exit status: 0 when the GPU's bytes equal the reference's (or there is no GPU), 1 on a mismatch
// or an error (a report that could not be written to stdout included), 2 on bad arguments.
#include <mxq/mxq.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(MXQ_WITH_CUDA)  // defined by mxq::mxq when mxq was built with its CUDA kernels
#include <cuda_runtime.h>
#endif

namespace {

using Bytes = std::vector<uint8_t>;
using Outputs = std::array<Bytes, 4>;  // q_row, s_row, q_col, s_col
const char* const kNames[] = {"q_row", "s_row", "q_col", "s_col"};

Outputs allocate(int64_t M, int64_t K) {  // sized by mxq's shape helpers (dense: no groups)
  return {
      Bytes(size_t(mxq::q_row_shape(M, K).bytes())), Bytes(size_t(mxq::s_row_shape(M, K).bytes())),
      Bytes(size_t(mxq::q_col_shape(M, K).bytes())), Bytes(size_t(mxq::s_col_shape(M, K).bytes()))};
}

// Random values whose magnitude changes from block to block, so the scales differ, and a few
// special values (docs/numerics.md §3): +Inf or NaN gives its block the NaN scale 0xFF.
std::vector<uint16_t> make_input(int64_t M, int64_t K) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> x(size_t(M * K));
  for (size_t i = 0; i < x.size(); ++i) {
    const int exponent = int((i / mxq::kBlock) % 41) - 20;  // 2^-20 .. 2^20
    x[i] = mxq::bf16_from_f32(std::ldexp(normal(rng), exponent));
  }
  x[size_t(1 * K + 7)] = mxq::kBf16Inf;
  x[size_t(2 * K + 30)] = mxq::kBf16CanonicalNan;
  x[size_t(3 * K + 0)] = 0x0001;  // the smallest bf16 subnormal
  return x;
}

#if defined(MXQ_WITH_CUDA)
void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// p (host pointers) run on the GPU: x to the device, mxq::quantize into outputs poisoned with 0xA5
// (a byte the kernel failed to write shows up as a mismatch), the outputs back.
Outputs quantize_on_gpu(mxq::QuantizeParams p, const std::vector<uint16_t>& x) {
  Outputs host = allocate(p.M, p.K);
  // One allocation: x, then the four outputs (every size is a multiple of 16 bytes, so each buffer
  // keeps the 16-byte alignment mxq requires).
  const size_t x_bytes = x.size() * sizeof(uint16_t);
  size_t bytes = x_bytes;
  for (const Bytes& h : host) bytes += h.size();
  void* base = nullptr;
  cuda_check(cudaMalloc(&base, bytes), "cudaMalloc");
  const std::unique_ptr<void, decltype(&cudaFree)> owner(base, &cudaFree);
  uint8_t* dev = static_cast<uint8_t*>(base);
  std::array<uint8_t*, 4> out{dev + x_bytes};
  for (int i = 1; i < 4; ++i) out[i] = out[i - 1] + host[i - 1].size();
  cuda_check(cudaMemcpy(dev, x.data(), x_bytes, cudaMemcpyHostToDevice), "copy x");
  cuda_check(cudaMemset(out[0], 0xA5, bytes - x_bytes), "poison the outputs");
  p.x = dev, p.q_row = out[0], p.s_row = out[1], p.q_col = out[2], p.s_col = out[3];
  p.stream = nullptr;  // the default stream here; mxq enqueues on the one given and never syncs
  mxq::quantize(p);    // validates, then one kernel: one read of x, four outputs
  for (int i = 0; i < 4; ++i) {
    cuda_check(cudaMemcpy(host[i].data(), out[i], host[i].size(), cudaMemcpyDeviceToHost), "copy");
  }
  return host;
}
#endif

int run(int64_t M, int64_t K) {
  mxq::check_sizes(M, K, -1);  // the library's size rules, as mxq::Error
  std::printf("%s\nx: bf16 %lld x %lld\n", mxq::build_info().c_str(), (long long)M, (long long)K);
  const std::vector<uint16_t> x = make_input(M, K);
  Outputs ref = allocate(M, K);
  mxq::QuantizeParams p;  // the defaults: bf16 input, RCEIL scales, dense (no offs)
  p.x = x.data(), p.M = M, p.K = K;
  p.q_row = ref[0].data(), p.s_row = ref[1].data(), p.q_col = ref[2].data(),
  p.s_col = ref[3].data();
  mxq::ref::quantize(p);

  std::printf("a few elements, rowwise: q (e4m3), s (E8M0), bf16(e4m3(q) * 2^(s-127))\n");
  const int64_t shown[][2] = {{0, 0}, {0, 1}, {1, 7}, {2, 0}, {3, 0}, {M - 1, K - 1}};
  for (const auto& [m, k] : shown) {
    const uint8_t q = ref[0][size_t(m * K + k)];
    const uint8_t s = ref[1][size_t(mxq::blocked_offset(m, k / mxq::kBlock, K / mxq::kBlock))];
    char at[48];
    std::snprintf(at, sizeof at, "x[%lld, %lld]", (long long)m, (long long)k);
    std::printf("  %-16s = %-13.6g q 0x%02X  s %3u  -> %.6g\n", at,
                mxq::bf16_to_f32(x[size_t(m * K + k)]), q, s,
                mxq::bf16_to_f32(mxq::dequantize_element(q, s)));
  }
  if (!mxq::gpu_available()) {
    std::printf(
        "no usable GPU: ran the CPU reference only (mxq::ref::quantize), nothing compared\n");
    return 0;
  }
#if defined(MXQ_WITH_CUDA)
  const Outputs gpu = quantize_on_gpu(p, x);
  int rc = 0;
  for (int i = 0; i < 4; ++i) {
    size_t bad = 0, first = 0;
    for (size_t j = 0; j < ref[i].size(); ++j) {
      if (ref[i][j] != gpu[i][j] && bad++ == 0) first = j;
    }
    if (bad == 0) continue;
    rc = 1;
    std::printf(
        "MISMATCH %s: %zu of %zu bytes differ; the first, byte %zu: GPU 0x%02X, CPU 0x%02X\n",
        kNames[i], bad, ref[i].size(), first, gpu[i][first], ref[i][first]);
  }
  if (rc == 0) std::printf("OK: the GPU's q_row, s_row, q_col, s_col equal the CPU reference's\n");
  return rc;
#else
  return 0;  // not reached: without CUDA, gpu_available() is false
#endif
}

bool parse_dim(const char* s, int64_t& v) {  // a positive decimal number, nothing else
  const char* end = s + std::strlen(s);
  const auto [ptr, ec] = std::from_chars(s, end, v);
  return ec == std::errc() && ptr == end && v > 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t M = 1024, K = 4096;
  if (argc != 1 && (argc != 3 || !parse_dim(argv[1], M) || !parse_dim(argv[2], K) ||
                    M > (int64_t(1) << 31) / K)) {
    std::fprintf(stderr, "usage: mxq_example [M K]   (multiples of 32, M*K at most 2^31)\n");
    return 2;
  }
  int rc = 1;
  try {
    rc = run(M, K);
  } catch (const mxq::Error& e) {
    std::fprintf(stderr, "mxq_example: %s\n", e.what());
    rc = e.kind() == mxq::Error::Kind::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxq_example: %s\n", e.what());
  }
  // A report that did not reach its reader (a full disk, /dev/full) is a failure.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "mxq_example: cannot write to stdout: %s\n", std::strerror(errno));
    return 1;
  }
  return rc;
}
