// CUDA helpers of the GPU suites (gpu_*.cpp): a visible skip without a device, RAII device buffers
// with guard bands and poison, a non-default stream, and DeviceProblem, which runs one quantize
// path on the device and hands back host copies of every output after checking that nothing outside
// the outputs changed.
//
// Every comparison is raw bytes against mxq::ref::quantize on host copies (test_util.h bytes_equal
// reports the mismatch count, the first coordinate and both bytes). Tests go through the public
// API only.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../src/common/parallel.h"
#include "../../src/host/testing.h"
#include "mxq/layout.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"
#include "test_util.h"

namespace mxq::test {

// ---- CUDA errors: thrown, so GoogleTest reports them as a failure of the running test ----
inline void cuda_check(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                           cudaGetErrorString(err) + ") from " + expr + " at " + file + ":" +
                           std::to_string(line));
}
#define MXQ_TEST_CUDA(call) ::mxq::test::cuda_check((call), #call, __FILE__, __LINE__)

// ---- skip visibly without a usable device ----
inline std::string no_gpu_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("cudaGetDeviceCount failed with ") + cudaGetErrorName(err);
  }
  if (count == 0) return "no devices";
  return "the device has no code in this build (" + build_info() + ")";
}

inline bool gpu_present() {
  static const bool present = mxq::gpu_available();
  return present;
}

#define MXQ_SKIP_WITHOUT_GPU()                                            \
  do {                                                                    \
    if (!::mxq::test::gpu_present()) {                                    \
      GTEST_SKIP() << "no CUDA device: " << ::mxq::test::no_gpu_reason(); \
    }                                                                     \
  } while (0)

// Fixtures of every GPU suite: skip in SetUp, so no test body runs without a device.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override { MXQ_SKIP_WITHOUT_GPU(); }
};
template <typename Param>
class GpuTestWithParam : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { MXQ_SKIP_WITHOUT_GPU(); }
};

// The 16-bit quantize kernels' tile height of the tests' quantize launches (src/host/testing.h):
// 0 (the launch chooses) unless a ForcedTileRows scope sets 64 or 128.
inline int& forced_tile_rows() {
  static int rows = 0;
  return rows;
}
// Forces the tile height for one scope, then gives the choice back to each launch.
class ForcedTileRows {
 public:
  explicit ForcedTileRows(int rows) { forced_tile_rows() = rows; }
  ~ForcedTileRows() { forced_tile_rows() = 0; }
  ForcedTileRows(const ForcedTileRows&) = delete;
  ForcedTileRows& operator=(const ForcedTileRows&) = delete;
};
constexpr int kTileHeights[] = {128, 64};

// ---- seeds: different for every test, reproducible, and movable with MXQ_TEST_SEED=<n> ----
inline uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t hash_string(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}
// Seed of the running test (its full name hashed), mixed with `salt` for several inputs in one
// test.
inline uint64_t test_seed(uint64_t salt = 0) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  uint64_t base = 0;
  if (const char* env = std::getenv("MXQ_TEST_SEED")) base = std::strtoull(env, nullptr, 10);
  return splitmix64(hash_string(name) ^ splitmix64(base) ^ (salt * 0x2545F4914F6CDD1Dull));
}

// Host parallelism for the large shapes (the device machine has 16 cores): detail::parallel_for.
using detail::parallel_for;

// bytes_equal with a memcmp fast path (the large shapes compare gigabytes).
inline ::testing::AssertionResult same_bytes(const std::vector<uint8_t>& got,
                                             const std::vector<uint8_t>& want, int64_t cols,
                                             const std::string& what) {
  if (got.size() == want.size() &&
      (got.empty() || std::memcmp(got.data(), want.data(), got.size()) == 0)) {
    return ::testing::AssertionSuccess();
  }
  return bytes_equal(got, want, cols, what);
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Fast input for the large shapes: approximately normal (Irwin-Hall of 4 uniforms), generated in
// parallel, with the docs/numerics.md §4 blocks planted along rows and columns at random positions
// like make_input(kSpecial).
inline std::vector<uint16_t> make_large_special_input(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<uint16_t> x(static_cast<size_t>(rows * cols));
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint64_t h = splitmix64(seed ^ uint64_t(r * cols + c) * 0x9E3779B97F4A7C15ull);
        const float sum = float(h & 0xFFFF) + float((h >> 16) & 0xFFFF) +
                          float((h >> 32) & 0xFFFF) + float(h >> 48);
        x[size_t(r * cols + c)] = bf16_from_f32((sum * (1.f / 65536.f) - 2.f) * 1.7320508f);
      }
    }
  });
  const auto blocks = special_blocks();
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> row_block(0, rows / kBlock - 1),
      col_block(0, cols / kBlock - 1);
  std::uniform_int_distribution<int64_t> any_row(0, rows - 1), any_col(0, cols - 1);
  const int64_t plants = std::max<int64_t>(8, rows * cols / 4096);
  for (int64_t i = 0; i < plants; ++i) {
    const auto& b = blocks[size_t(i) % blocks.size()];
    if (i % 2 == 0) {
      const int64_t r = any_row(rng), c0 = col_block(rng) * kBlock;
      for (int j = 0; j < kBlock; ++j) x[size_t(r * cols + c0 + j)] = b[size_t(j)];
    } else {
      const int64_t r0 = row_block(rng) * kBlock, c = any_col(rng);
      for (int j = 0; j < kBlock; ++j) x[size_t((r0 + j) * cols + c)] = b[size_t(j)];
    }
  }
  return x;
}

// (M, K) of x, named "MxK" in test names.
struct Shape {
  int64_t M;
  int64_t K;
};
inline std::string shape_name(const Shape& s) {
  return std::to_string(s.M) + "x" + std::to_string(s.K);
}

// ---- grouped mode: offs with random 128-multiple group sizes ----
enum class GroupFill {
  kTail,   // offs[G-1] < M: an uncovered tail; at least one empty group when G > 1
  kFull,   // offs[G-1] == M; at least one empty group when G > 1
  kEmpty,  // every group empty: offs all 0, the whole tensor is tail
};
inline const char* group_fill_name(GroupFill f) {
  switch (f) {
    case GroupFill::kTail:
      return "tail";
    case GroupFill::kFull:
      return "full";
    case GroupFill::kEmpty:
      return "empty";
  }
  return "?";
}

inline std::vector<int32_t> make_offs(int64_t M, int64_t G, GroupFill fill, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t units = M / kGroupAlign;
  int64_t covered = 0;
  if (fill == GroupFill::kFull) covered = units;
  if (fill == GroupFill::kTail && units > 1)
    covered = std::uniform_int_distribution<int64_t>(1, units - 1)(rng);
  std::uniform_int_distribution<int64_t> cut(0, covered);
  std::vector<int64_t> ends(static_cast<size_t>(G));
  for (auto& e : ends) e = cut(rng);
  std::sort(ends.begin(), ends.end());
  ends.back() = covered;
  if (G > 1) {  // make one group surely empty (random sizes make more of them at large G)
    const size_t g = size_t(std::uniform_int_distribution<int64_t>(0, G - 2)(rng));
    ends[g] = g == 0 ? 0 : ends[g - 1];
  }
  std::vector<int32_t> offs(static_cast<size_t>(G));
  for (size_t g = 0; g < offs.size(); ++g) offs[g] = int32_t(ends[g] * kGroupAlign);
  return offs;
}

inline std::string offs_to_string(const std::vector<int32_t>& offs, size_t max_items = 16) {
  std::string s = "[";
  for (size_t i = 0; i < offs.size() && i < max_items; ++i)
    s += (i ? "," : "") + std::to_string(offs[i]);
  if (offs.size() > max_items) s += ",... (" + std::to_string(offs.size()) + " groups)";
  return s + "]";
}

// ---- RAII device memory ----
class Stream {
 public:
  explicit Stream(bool non_blocking = true) {
    MXQ_TEST_CUDA(cudaStreamCreateWithFlags(
        &stream_, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault));
  }
  ~Stream() { (void)cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// One device allocation [guard | payload | guard]. The guards hold a pseudo-random pattern (no
// value a kernel is likely to write, and different for every buffer); guards_intact() reads them
// back. The payload starts kGuardBytes into a cudaMalloc allocation, so it keeps the 256-byte
// alignment every op needs.
class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 4096;

  GuardedBuffer() = default;
  GuardedBuffer(std::string name, size_t bytes) : name_(std::move(name)), bytes_(bytes) {
    MXQ_TEST_CUDA(cudaMalloc(reinterpret_cast<void**>(&base_), bytes_ + 2 * kGuardBytes));
    guard_.resize(2 * kGuardBytes);
    const uint64_t h = hash_string(name_) ^ uint64_t(bytes_);
    for (size_t i = 0; i < guard_.size(); ++i) guard_[i] = uint8_t(splitmix64(h + i) >> 56);
    MXQ_TEST_CUDA(cudaMemcpy(base_, guard_.data(), kGuardBytes, cudaMemcpyHostToDevice));
    MXQ_TEST_CUDA(cudaMemcpy(base_ + kGuardBytes + bytes_, guard_.data() + kGuardBytes, kGuardBytes,
                             cudaMemcpyHostToDevice));
  }
  ~GuardedBuffer() {
    if (base_ != nullptr) (void)cudaFree(base_);
  }
  GuardedBuffer(GuardedBuffer&& o) noexcept { *this = std::move(o); }
  GuardedBuffer& operator=(GuardedBuffer&& o) noexcept {
    if (this != &o) {
      if (base_ != nullptr) (void)cudaFree(base_);
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      name_ = std::move(o.name_);
      guard_ = std::move(o.guard_);
    }
    return *this;
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  bool allocated() const { return base_ != nullptr; }
  uint8_t* data() const { return base_ == nullptr ? nullptr : base_ + kGuardBytes; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data());
  }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

  // Poison (or any byte) over the payload only, enqueued on `stream`.
  void fill(uint8_t byte, cudaStream_t stream) const {
    if (bytes_ > 0) MXQ_TEST_CUDA(cudaMemsetAsync(data(), byte, bytes_, stream));
  }
  // Both copy the whole payload and synchronize `stream`.
  void upload(const void* host, cudaStream_t stream) const {
    if (bytes_ == 0) return;
    MXQ_TEST_CUDA(cudaMemcpyAsync(data(), host, bytes_, cudaMemcpyHostToDevice, stream));
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream));
  }
  void download_into(std::vector<uint8_t>& out, cudaStream_t stream) const {
    out.resize(bytes_);
    if (bytes_ == 0) return;
    MXQ_TEST_CUDA(cudaMemcpyAsync(out.data(), data(), bytes_, cudaMemcpyDeviceToHost, stream));
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream));
  }
  std::vector<uint8_t> download(cudaStream_t stream) const {
    std::vector<uint8_t> out;
    download_into(out, stream);
    return out;
  }

  ::testing::AssertionResult guards_intact(cudaStream_t stream) const {
    if (base_ == nullptr) return ::testing::AssertionSuccess();
    std::vector<uint8_t> got(2 * kGuardBytes);
    MXQ_TEST_CUDA(cudaMemcpyAsync(got.data(), base_, kGuardBytes, cudaMemcpyDeviceToHost, stream));
    MXQ_TEST_CUDA(cudaMemcpyAsync(got.data() + kGuardBytes, base_ + kGuardBytes + bytes_,
                                  kGuardBytes, cudaMemcpyDeviceToHost, stream));
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream));
    int64_t changed = 0;
    int64_t first =
        0;  // relative to the payload: -1 is the byte just before it, bytes() the byte just after
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] == guard_[i]) continue;
      if (changed++ == 0)
        first =
            i < kGuardBytes ? int64_t(i) - int64_t(kGuardBytes) : int64_t(bytes_ + i - kGuardBytes);
    }
    if (changed > 0) {
      return ::testing::AssertionFailure() << name_ << ": guard band overwritten, " << changed
                                           << " bytes changed, first at payload offset " << first
                                           << " (payload is " << bytes_ << " bytes)";
    }
    return ::testing::AssertionSuccess();
  }

  // Every payload byte equals `byte` (an output the op does not own stays poisoned).
  ::testing::AssertionResult all_bytes_are(uint8_t byte, cudaStream_t stream) const {
    const std::vector<uint8_t> got = download(stream);
    return same_bytes(got, std::vector<uint8_t>(got.size(), byte),
                      int64_t(std::max<size_t>(got.size(), 1)), name_ + " (expected untouched)");
  }
  ::testing::AssertionResult holds(const std::vector<uint8_t>& want, cudaStream_t stream) const {
    return same_bytes(download(stream), want, int64_t(std::max<size_t>(want.size(), 1)),
                      name_ + " (expected unchanged)");
  }

 private:
  std::string name_;
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  std::vector<uint8_t> guard_;
};

// ---- one problem on the device, every path ----
// Every path is one call of the public API on the same buffers; with offs (grouped mode) every path
// also gets offs and the status word, which it must write on every call.
enum class Path {
  kRowwise,   // mxq::quantize with q_row, s_row (q_col, s_col null: that axis skipped)
  kColwise,   // mxq::quantize with q_col, s_col: blocked, or K-groups with offs
  kFused,     // mxq::quantize with all four
  kComposed,  // mxq::quantize_composed: all four, the workspace as its only scratch
};
inline const char* path_name(Path p) {
  switch (p) {
    case Path::kRowwise:
      return "rowwise";
    case Path::kColwise:
      return "colwise";
    case Path::kFused:
      return "fused";
    case Path::kComposed:
      return "composed";
  }
  return "?";
}
inline bool has_rowwise(Path p) { return p != Path::kColwise; }
inline bool has_colwise(Path p) { return p != Path::kRowwise; }
inline const char* scaling_mode_name(ScalingMode r) { return to_string(r); }

// Printers, so GoogleTest and ctest show parameters as words instead of bytes.
inline void PrintTo(Path p, std::ostream* os) { *os << path_name(p); }
inline void PrintTo(GroupFill f, std::ostream* os) { *os << group_fill_name(f); }
inline void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

// Host copies of the outputs of a run (or of the reference). A path fills only the outputs it owns.
struct HostOutputs {
  std::vector<uint8_t> q_row, s_row, q_col, s_col;
  // The plain scales S_row (M, K/32) and S_col (K, M/32): filled by reference_outputs only (no GPU
  // entry point returns them), for the layout oracles row_scale_layout_holds and
  // col_scale_layout_holds.
  std::vector<uint8_t> s_row_plain, s_col_plain;
  int32_t status = 0;
};

// Plain S_col (K, M/32) read back out of the dense blocked s_col.
inline std::vector<uint8_t> unblock(const std::vector<uint8_t>& blocked, int64_t rows,
                                    int64_t cols) {
  std::vector<uint8_t> plain(size_t(rows * cols));
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c)
        plain[size_t(r * cols + c)] = blocked[size_t(blocked_offset(r, c, cols))];
    }
  });
  return plain;
}

// The dense blocked scales {s_row, s_col} of x by a reference call without offs.
inline std::pair<std::vector<uint8_t>, std::vector<uint8_t>> reference_dense_scales(
    const std::vector<uint16_t>& x, int64_t M, int64_t K, ScalingMode mode) {
  std::vector<uint8_t> q(size_t(q_row_shape(M, K).bytes()));
  std::vector<uint8_t> s_row(size_t(s_row_shape(M, K).bytes()));
  std::vector<uint8_t> s_col(size_t(s_col_shape(M, K).bytes()));
  QuantizeParams p;
  p.x = x.data();
  p.M = M;
  p.K = K;
  p.scaling_mode = mode;
  p.q_row = q.data();
  p.s_row = s_row.data();
  ref::quantize(p);
  p.q_row = p.s_row = nullptr;
  p.q_col = q.data();
  p.s_col = s_col.data();
  ref::quantize(p);
  return {std::move(s_row), std::move(s_col)};
}

// The CPU reference of every output: one mxq::ref::quantize call with all four outputs (and offs
// and the status word when given), plus the plain scales (read out of the dense s_row and s_col;
// when grouped, out of second, dense calls).
inline HostOutputs reference_outputs(const std::vector<uint16_t>& x, int64_t M, int64_t K,
                                     const std::vector<int32_t>& offs, ScalingMode mode) {
  const int64_t G = int64_t(offs.size());
  HostOutputs want;
  want.q_row.resize(size_t(q_row_shape(M, K).bytes()));
  want.s_row.resize(size_t(s_row_shape(M, K, G).bytes()));
  want.q_col.resize(size_t(q_col_shape(M, K).bytes()));
  want.s_col.resize(size_t(s_col_shape(M, K, G).bytes()));
  want.status = 0x5A5A5A5A;
  QuantizeParams p;
  p.x = x.data();
  p.M = M;
  p.K = K;
  p.scaling_mode = mode;
  p.offs = G ? offs.data() : nullptr;
  p.num_groups = G;
  p.q_row = want.q_row.data();
  p.s_row = want.s_row.data();
  p.q_col = want.q_col.data();
  p.s_col = want.s_col.data();
  p.status = G ? &want.status : nullptr;
  ref::quantize(p);
  if (G > 0) {
    EXPECT_EQ(want.status, 0) << "the reference's status word for well-formed offs";
  } else {
    want.status = 0;
  }
  if (G == 0) {
    want.s_row_plain = unblock(want.s_row, M, K / kBlock);
    want.s_col_plain = unblock(want.s_col, K, M / kBlock);
  } else {
    const auto dense = reference_dense_scales(x, M, K, mode);
    want.s_row_plain = unblock(dense.first, M, K / kBlock);
    want.s_col_plain = unblock(dense.second, K, M / kBlock);
  }
  return want;
}

// The docs/numerics.md §5-§6 placement of plain colwise scales built torchao's way (test_util.h
// to_blocked / to_kgroups, independent of layout.h): a second oracle beside the reference. Dense
// blocked when offs is empty, else the K-groups layout with every byte after the last group (slack,
// the uncovered tail's scales) 0.
inline ::testing::AssertionResult col_scale_layout_holds(const std::vector<uint8_t>& s_col,
                                                         const std::vector<uint8_t>& plain,
                                                         int64_t M, int64_t K,
                                                         const std::vector<int32_t>& offs) {
  const int64_t G = int64_t(offs.size());
  const std::vector<uint8_t> want =
      G == 0 ? to_blocked(plain, K, M / kBlock) : to_kgroups(plain, M, K, offs);
  return same_bytes(
      s_col, want, s_col_shape(M, K, G).cols,
      G ? "s_col vs torchao's K-groups rearrangement" : "s_col vs torchao's to_blocked");
}

// The same for the rowwise scales: dense blocked, or the M-groups layout (test_util.h to_mgroups:
// each group and then the tail blocked on their own, the rest 0).
inline ::testing::AssertionResult row_scale_layout_holds(const std::vector<uint8_t>& s_row,
                                                         const std::vector<uint8_t>& plain,
                                                         int64_t M, int64_t K,
                                                         const std::vector<int32_t>& offs) {
  const int64_t G = int64_t(offs.size());
  const std::vector<uint8_t> want =
      G == 0 ? to_blocked(plain, M, K / kBlock) : to_mgroups(plain, M, K, offs);
  return same_bytes(s_row, want, s_row_shape(M, K, G).cols,
                    G ? "s_row vs the M-groups rearrangement" : "s_row vs torchao's to_blocked");
}

// x, offs and every output of one (M, K) problem in guarded device buffers, on one stream.
// run(path) = poison all outputs, launch, synchronize, check every guard band and that the outputs
// the path does not own (and x and offs) are unchanged, download the outputs it owns.
class DeviceProblem {
 public:
  // `x` must outlive the DeviceProblem (kept for the "x unchanged" check).
  DeviceProblem(const std::vector<uint16_t>& x, int64_t M, int64_t K, cudaStream_t stream)
      : M_(M), K_(K), stream_(stream), x_host_(&x) {
    x_ = GuardedBuffer("x", x.size() * sizeof(uint16_t));
    x_.upload(x.data(), stream_);
    q_row_ = GuardedBuffer("q_row", size_t(q_row_shape(M, K).bytes()));
    q_col_ = GuardedBuffer("q_col", size_t(q_col_shape(M, K).bytes()));
    workspace_ = GuardedBuffer("workspace", size_t(composed_workspace_bytes(M, K)));
    status_ = GuardedBuffer("status", sizeof(int32_t));
    set_offs({});
  }

  // Grouped mode with these offs (uploaded as they are: malformed offs are allowed); empty = dense.
  void set_offs(const std::vector<int32_t>& offs) {
    offs_host_ = offs;
    offs_ = GuardedBuffer("offs", offs.size() * sizeof(int32_t));
    offs_.upload(offs.data(), stream_);
    s_row_ = GuardedBuffer("s_row", size_t(s_row_shape(M_, K_, num_groups()).bytes()));
    s_col_ = GuardedBuffer("s_col", size_t(s_col_shape(M_, K_, num_groups()).bytes()));
  }

  int64_t M() const { return M_; }
  int64_t K() const { return K_; }
  int64_t num_groups() const { return int64_t(offs_host_.size()); }
  bool grouped() const { return !offs_host_.empty(); }
  cudaStream_t stream() const { return stream_; }
  const GuardedBuffer& x() const { return x_; }
  const GuardedBuffer& offs() const { return offs_; }
  const GuardedBuffer& status() const { return status_; }
  const GuardedBuffer& q_row() const { return q_row_; }
  const GuardedBuffer& s_row() const { return s_row_; }
  const GuardedBuffer& q_col() const { return q_col_; }
  const GuardedBuffer& s_col() const { return s_col_; }
  const GuardedBuffer& workspace_buffer() const { return workspace_; }
  void* workspace() const { return workspace_.data(); }

  // The params of `path`: the pairs of the skipped axis null; offs and status when grouped.
  QuantizeParams params(Path path, ScalingMode r) const {
    QuantizeParams p;
    p.x = x_.data();
    p.M = M_;
    p.K = K_;
    p.scaling_mode = r;
    p.offs = grouped() ? offs_.as<int32_t>() : nullptr;
    p.num_groups = num_groups();
    if (has_rowwise(path)) {
      p.q_row = q_row_.data();
      p.s_row = s_row_.data();
    }
    if (has_colwise(path)) {
      p.q_col = q_col_.data();
      p.s_col = s_col_.data();
    }
    p.status = grouped() ? status_.as<int32_t>() : nullptr;
    p.stream = stream_;
    return p;
  }

  // Fills every output, the workspace and the status word with `byte` (enqueued on the stream).
  void poison(uint8_t byte = kPoison) const {
    for (const GuardedBuffer* b : outputs()) b->fill(byte, stream_);
  }

  // Enqueues the path (no synchronization: usable under graph capture).
  void launch(Path path, ScalingMode r) const {
    if (path == Path::kComposed) {
      detail::quantize_composed_with_tile_rows(params(path, r), workspace(), forced_tile_rows());
    } else {
      detail::quantize_with_tile_rows(params(path, r), forced_tile_rows());
    }
  }

  // Synchronizes, checks guards and untouched buffers (EXPECT: failures name the path), downloads.
  HostOutputs collect(Path path, uint8_t poisoned_with = kPoison,
                      bool check_untouched = true) const {
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream_));
    MXQ_TEST_CUDA(cudaGetLastError());
    expect_nothing_outside(path, poisoned_with, check_untouched);
    HostOutputs got;
    if (owns(path, q_row_)) q_row_.download_into(got.q_row, stream_);
    if (owns(path, s_row_)) s_row_.download_into(got.s_row, stream_);
    if (owns(path, q_col_)) q_col_.download_into(got.q_col, stream_);
    if (owns(path, s_col_)) s_col_.download_into(got.s_col, stream_);
    if (owns(path, status_)) {
      const std::vector<uint8_t> s = status_.download(stream_);
      std::memcpy(&got.status, s.data(), sizeof got.status);
    }
    return got;
  }

  HostOutputs run(Path path, ScalingMode r, uint8_t poison_byte = kPoison,
                  bool check_untouched = true) const {
    poison(poison_byte);
    launch(path, r);
    return collect(path, poison_byte, check_untouched);
  }

  // Guard bands of x, offs and every output intact; unowned outputs (the other axis, the workspace
  // outside the composed path, the status word in dense mode) still hold the poison; x and offs
  // unchanged.
  void expect_nothing_outside(Path path, uint8_t poisoned_with, bool check_untouched) const {
    for (const GuardedBuffer* b : all()) {
      EXPECT_TRUE(b->guards_intact(stream_)) << "after " << path_name(path);
    }
    if (!check_untouched) return;
    for (const GuardedBuffer* b : outputs()) {
      if (!owns(path, *b)) {
        EXPECT_TRUE(b->all_bytes_are(poisoned_with, stream_)) << "after " << path_name(path);
      }
    }
    EXPECT_TRUE(x_.holds(as_bytes(*x_host_), stream_)) << "after " << path_name(path);
    EXPECT_TRUE(offs_.holds(as_bytes(offs_host_), stream_)) << "after " << path_name(path);
  }

  // After a call that must have written nothing (it threw): every buffer as it was before the call.
  void expect_untouched(uint8_t poisoned_with = kPoison) const {
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream_));
    for (const GuardedBuffer* b : all()) EXPECT_TRUE(b->guards_intact(stream_));
    for (const GuardedBuffer* b : outputs()) EXPECT_TRUE(b->all_bytes_are(poisoned_with, stream_));
    EXPECT_TRUE(x_.holds(as_bytes(*x_host_), stream_));
    EXPECT_TRUE(offs_.holds(as_bytes(offs_host_), stream_));
  }

  // What `path` may write: its axes' data and scales, the status word when grouped, and the
  // workspace on the composed path (its only scratch).
  bool owns(Path path, const GuardedBuffer& b) const {
    if (&b == &q_row_ || &b == &s_row_) return has_rowwise(path);
    if (&b == &q_col_ || &b == &s_col_) return has_colwise(path);
    if (&b == &status_) return grouped();
    if (&b == &workspace_) return path == Path::kComposed;
    return false;
  }

 private:
  std::vector<const GuardedBuffer*> outputs() const {
    return {&q_row_, &s_row_, &q_col_, &s_col_, &workspace_, &status_};
  }
  std::vector<const GuardedBuffer*> all() const {
    return {&x_, &offs_, &q_row_, &s_row_, &q_col_, &s_col_, &workspace_, &status_};
  }

  int64_t M_, K_;
  cudaStream_t stream_;
  const std::vector<uint16_t>* x_host_;
  std::vector<int32_t> offs_host_;
  GuardedBuffer x_, offs_, q_row_, s_row_, q_col_, s_col_, workspace_, status_;
};

// Byte-exact comparison of every output `path` owns with the reference (and status 0 when grouped).
inline void expect_matches_reference(const HostOutputs& got, const HostOutputs& want, Path path,
                                     int64_t M, int64_t K, int64_t G,
                                     const std::string& label = "") {
  const std::string at = std::string(path_name(path)) + (label.empty() ? "" : " " + label) + " ";
  if (has_rowwise(path)) {
    EXPECT_TRUE(same_bytes(got.q_row, want.q_row, K, at + "q_row"));
    EXPECT_TRUE(same_bytes(got.s_row, want.s_row, s_row_shape(M, K, G).cols, at + "s_row"));
  }
  if (has_colwise(path)) {
    EXPECT_TRUE(same_bytes(got.q_col, want.q_col, M, at + "q_col"));
    EXPECT_TRUE(same_bytes(got.s_col, want.s_col, s_col_shape(M, K, G).cols, at + "s_col"));
  }
  if (G > 0) {
    EXPECT_EQ(got.status, 0) << at << "status: " << describe_status(got.status);
  }
}

}  // namespace mxq::test
