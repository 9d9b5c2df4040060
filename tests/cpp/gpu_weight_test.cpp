// mxq::quantize_weight on the device, byte-exact against mxq::ref::quantize_weight (docs/numerics.md
// §11). Every suite name contains "Weight" (--gtest_filter='*Weight*'):
//   GpuWeight             every dtype x policy x scaling mode x shape x input family; shapes with
//                         N or K = 32, 96, 160, 2880 (partial 128-tiles) and G = 1, 3, 8; each run
//                         twice with different poisons, guard bands and the input checked
//   GpuWeightAxes         every axis-skip combination: skipped outputs stay poisoned; no axis at
//                         all is refused before anything is written
//   GpuWeightDeterminism  repeated launches on different streams give identical bytes
//   GpuWeightBadInput     invalid arguments throw mxq::Error (exact message) before anything is
//                         written
//   GpuWeightLarge        G*N*K > 2^31 elements (64-bit offsets), checked on slices of the first
//                         and last expert
//   GpuWeightBandwidth    the issue's large shapes: % of the device-to-device copy roof (a report;
//                         it fails only on a mismatch with the reference on a sample)
#include <chrono>
#include <functional>
#include <iomanip>
#include <iostream>
#include <tuple>

#include "gpu_util.h"
#include "weight_util.h"

namespace mxq::test {
namespace {

constexpr uint8_t kPoisonB = 0x5A;

// W and the four outputs of one problem in guarded device buffers, on one stream.
class WeightDevice {
 public:
  WeightDevice(const WeightTensor& w, cudaStream_t stream) : w_host_(&w), stream_(stream) {
    const WeightShape& s = w.shape;
    w_ = GuardedBuffer("w", w.bytes.size());
    w_.upload(w.bytes.data(), stream_);
    q_row_ = GuardedBuffer("q_row", size_t(s.elems()));
    s_row_ = GuardedBuffer("s_row", size_t(weight_s_row_shape(s.G, s.N, s.K).bytes()));
    q_col_ = GuardedBuffer("q_col", size_t(s.elems()));
    s_col_ = GuardedBuffer("s_col", size_t(weight_s_col_shape(s.G, s.N, s.K).bytes()));
  }

  QuantizeWeightParams params(WeightScaling scaling, ScalingMode mode, bool rowwise = true,
                              bool colwise = true) const {
    QuantizeWeightParams p;
    p.w = w_.data();
    p.dtype = w_host_->dtype;
    p.G = w_host_->shape.G;
    p.N = w_host_->shape.N;
    p.K = w_host_->shape.K;
    p.scaling_mode = mode;
    p.scaling = scaling;
    p.q_row = rowwise ? q_row_.data() : nullptr;
    p.s_row = rowwise ? s_row_.data() : nullptr;
    p.q_col = colwise ? q_col_.data() : nullptr;
    p.s_col = colwise ? s_col_.data() : nullptr;
    p.stream = stream_;
    return p;
  }

  void poison(uint8_t byte) const {
    for (const GuardedBuffer* b : outputs()) b->fill(byte, stream_);
  }

  // Poisons, runs, synchronizes; checks guards, the input and that skipped outputs still hold the
  // poison (EXPECT, named with `label`); returns the outputs the call owns.
  WeightOutputs run(WeightScaling scaling, ScalingMode mode, bool rowwise, bool colwise,
                    uint8_t poison_byte, const std::string& label) const {
    poison(poison_byte);
    quantize_weight(params(scaling, mode, rowwise, colwise));
    return collect(rowwise, colwise, poison_byte, label);
  }

  WeightOutputs collect(bool rowwise, bool colwise, uint8_t poison_byte,
                        const std::string& label) const {
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream_));
    MXQ_TEST_CUDA(cudaGetLastError());
    for (const GuardedBuffer* b : all()) EXPECT_TRUE(b->guards_intact(stream_)) << label;
    EXPECT_TRUE(w_.holds(w_host_->bytes, stream_)) << label;
    WeightOutputs o;
    if (rowwise) {
      q_row_.download_into(o.q_row, stream_);
      s_row_.download_into(o.s_row, stream_);
    } else {
      EXPECT_TRUE(q_row_.all_bytes_are(poison_byte, stream_)) << label;
      EXPECT_TRUE(s_row_.all_bytes_are(poison_byte, stream_)) << label;
    }
    if (colwise) {
      q_col_.download_into(o.q_col, stream_);
      s_col_.download_into(o.s_col, stream_);
    } else {
      EXPECT_TRUE(q_col_.all_bytes_are(poison_byte, stream_)) << label;
      EXPECT_TRUE(s_col_.all_bytes_are(poison_byte, stream_)) << label;
    }
    return o;
  }

  // After a call that threw: every output still holds the poison, every guard intact.
  void expect_untouched(uint8_t poison_byte) const {
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream_));
    for (const GuardedBuffer* b : all()) EXPECT_TRUE(b->guards_intact(stream_));
    for (const GuardedBuffer* b : outputs()) EXPECT_TRUE(b->all_bytes_are(poison_byte, stream_));
    EXPECT_TRUE(w_.holds(w_host_->bytes, stream_));
  }

  const GuardedBuffer& w() const { return w_; }
  const GuardedBuffer& q_row() const { return q_row_; }
  const GuardedBuffer& s_row() const { return s_row_; }
  const GuardedBuffer& q_col() const { return q_col_; }
  const GuardedBuffer& s_col() const { return s_col_; }

 private:
  std::vector<const GuardedBuffer*> outputs() const { return {&q_row_, &s_row_, &q_col_, &s_col_}; }
  std::vector<const GuardedBuffer*> all() const {
    return {&w_, &q_row_, &s_row_, &q_col_, &s_col_};
  }

  const WeightTensor* w_host_;
  cudaStream_t stream_;
  GuardedBuffer w_, q_row_, s_row_, q_col_, s_col_;
};

// The outputs of one axis choice out of the reference's full outputs.
WeightOutputs only_axes(WeightOutputs o, bool rowwise, bool colwise) {
  if (!rowwise) o.q_row.clear(), o.s_row.clear();
  if (!colwise) o.q_col.clear(), o.s_col.clear();
  return o;
}

// ------------------------------------------------------------------------------------------------
// GpuWeight: dtype x policy x scaling mode x shape x input family.
// ------------------------------------------------------------------------------------------------
const WeightShape kGpuShapes[] = {{1, 32, 32},   {3, 96, 160},  {8, 160, 96},   {1, 2880, 160},
                                  {3, 32, 2880}, {8, 128, 256}, {1, 256, 2880}, {3, 2880, 96}};

using WeightParam = std::tuple<DType, WeightScaling, ScalingMode, WeightShape, WDist>;
class GpuWeight : public GpuTestWithParam<WeightParam> {};

TEST_P(GpuWeight, MatchesReference) {
  const auto [dtype, scaling, mode, shape, dist] = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const WeightTensor w = make_weight(dtype, shape, dist, seed);
  const WeightOutputs want = reference_weight(w, scaling, mode);
  Stream stream;
  WeightDevice dev(w, stream.get());
  for (const uint8_t poison : {kPoison, kPoisonB}) {
    const std::string label = "poison " + std::to_string(poison);
    EXPECT_TRUE(
        same_weight_outputs(dev.run(scaling, mode, true, true, poison, label), want, shape, label));
  }
}

std::string weight_name(const ::testing::TestParamInfo<WeightParam>& info) {
  const auto& [dtype, scaling, mode, shape, dist] = info.param;
  return std::string(to_string(dtype)) + "_" +
         (scaling == WeightScaling::k32x32 ? "t32x32" : "b1x32") + "_" + scaling_mode_name(mode) +
         "_" + weight_shape_name(shape) + "_" + wdist_name(dist);
}

INSTANTIATE_TEST_SUITE_P(All, GpuWeight,
                         ::testing::Combine(::testing::ValuesIn(kWeightDtypes),
                                            ::testing::ValuesIn(kWeightScalings),
                                            ::testing::ValuesIn(kModes),
                                            ::testing::ValuesIn(kGpuShapes),
                                            ::testing::ValuesIn(kWDists)),
                         weight_name);

// ------------------------------------------------------------------------------------------------
// GpuWeightAxes: both, rowwise only, colwise only, neither.
// ------------------------------------------------------------------------------------------------
using AxesParam = std::tuple<DType, WeightScaling, WeightShape>;
class GpuWeightAxes : public GpuTestWithParam<AxesParam> {};

TEST_P(GpuWeightAxes, SkippedAxesUntouched) {
  const auto [dtype, scaling, shape] = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const WeightTensor w = make_weight(dtype, shape, WDist::kSpecial, seed);
  Stream stream;
  WeightDevice dev(w, stream.get());
  for (const ScalingMode mode : kModes) {
    const WeightOutputs want = reference_weight(w, scaling, mode);
    for (const auto& [rowwise, colwise] :
         {std::pair<bool, bool>{true, true}, {true, false}, {false, true}, {false, false}}) {
      const std::string label = std::string(scaling_mode_name(mode)) + (rowwise ? " rowwise" : "") +
                                (colwise ? " colwise" : "") +
                                (!rowwise && !colwise ? " neither" : "");
      for (const uint8_t poison : {kPoison, kPoisonB}) {
        if (!rowwise && !colwise) {  // nothing to compute: refused, nothing written
          dev.poison(poison);
          EXPECT_THROW(quantize_weight(dev.params(scaling, mode, false, false)), Error) << label;
          dev.expect_untouched(poison);
          continue;
        }
        const WeightOutputs got = dev.run(scaling, mode, rowwise, colwise, poison, label);
        EXPECT_TRUE(same_weight_outputs(got, only_axes(want, rowwise, colwise), shape, label));
      }
    }
  }
}

std::string axes_name(const ::testing::TestParamInfo<AxesParam>& info) {
  const auto& [dtype, scaling, shape] = info.param;
  return std::string(to_string(dtype)) + "_" +
         (scaling == WeightScaling::k32x32 ? "t32x32" : "b1x32") + "_" + weight_shape_name(shape);
}

INSTANTIATE_TEST_SUITE_P(
    All, GpuWeightAxes,
    ::testing::Combine(::testing::ValuesIn(kWeightDtypes), ::testing::ValuesIn(kWeightScalings),
                       ::testing::Values(WeightShape{3, 96, 160}, WeightShape{2, 384, 288})),
    axes_name);

// ------------------------------------------------------------------------------------------------
// GpuWeightDeterminism: repeated launches, two streams, identical bytes (and the reference's).
// ------------------------------------------------------------------------------------------------
using DeterminismParam = std::tuple<DType, WeightScaling>;
class GpuWeightDeterminism : public GpuTestWithParam<DeterminismParam> {};

TEST_P(GpuWeightDeterminism, RepeatedLaunchesIdentical) {
  const auto [dtype, scaling] = GetParam();
  const WeightShape shape{3, 416, 2880};
  const WeightTensor w = make_weight(dtype, shape, WDist::kSpecial, test_seed());
  const WeightOutputs want = reference_weight(w, scaling, ScalingMode::kRceil);
  Stream a, b(false);
  WeightDevice dev_a(w, a.get()), dev_b(w, b.get());
  const WeightOutputs first =
      dev_a.run(scaling, ScalingMode::kRceil, true, true, kPoison, "first run");
  EXPECT_TRUE(same_weight_outputs(first, want, shape, "first run"));
  const uint8_t poisons[] = {kPoisonB, 0x00, 0xFF};
  for (int i = 0; i < 3; ++i) {
    const WeightDevice& dev = i % 2 ? dev_b : dev_a;
    const std::string label = "run " + std::to_string(i + 2);
    EXPECT_TRUE(same_weight_outputs(
        dev.run(scaling, ScalingMode::kRceil, true, true, poisons[i], label), first, shape, label));
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuWeightDeterminism,
                         ::testing::Combine(::testing::ValuesIn(kWeightDtypes),
                                            ::testing::ValuesIn(kWeightScalings)),
                         [](const ::testing::TestParamInfo<DeterminismParam>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  (std::get<1>(info.param) == WeightScaling::k32x32 ? "t32x32"
                                                                                    : "b1x32");
                         });

// ------------------------------------------------------------------------------------------------
// GpuWeightBadInput: mxq::Error naming the argument (and value), nothing written.
// ------------------------------------------------------------------------------------------------
template <typename T>
T* shifted(T* p, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes));
}

struct WeightBadCase {
  std::string name;
  void (*edit)(QuantizeWeightParams&);
  std::string message;  // message() exactly; "@" stands for the printed address
};
void PrintTo(const WeightBadCase& c, std::ostream* os) { *os << c.name; }

// Pointers are not queried for their residency (docs/numerics.md §9), so every case here breaks
// a check validation makes; a host pointer would reach the kernel.
std::vector<WeightBadCase> weight_bad_cases() {
  const std::string half = ": set both or neither (a null pair skips that axis)";
  return {
      {"w_null", [](QuantizeWeightParams& p) { p.w = nullptr; }, "w is null"},
      {"w_misaligned", [](QuantizeWeightParams& p) { p.w = shifted(p.w, 2); },
       "w must be 16-byte aligned, got address @"},
      {"q_row_misaligned", [](QuantizeWeightParams& p) { p.q_row = shifted(p.q_row, 1); },
       "q_row must be 16-byte aligned, got address @"},
      {"s_col_misaligned", [](QuantizeWeightParams& p) { p.s_col = shifted(p.s_col, 8); },
       "s_col must be 16-byte aligned, got address @"},
      {"q_row_without_s_row", [](QuantizeWeightParams& p) { p.s_row = nullptr; },
       "s_row is null but q_row is set" + half},
      {"s_col_without_q_col", [](QuantizeWeightParams& p) { p.q_col = nullptr; },
       "q_col is null but s_col is set" + half},
      {"N_100", [](QuantizeWeightParams& p) { p.N = 100; }, "N must be a multiple of 32, got 100"},
      {"K_48", [](QuantizeWeightParams& p) { p.K = 48; }, "K must be a multiple of 32, got 48"},
      {"G_0", [](QuantizeWeightParams& p) { p.G = 0; }, "G must be at least 1, got 0"},
      {"K_2pow31", [](QuantizeWeightParams& p) { p.K = int64_t(1) << 31; },
       "K must be at most 2^31-1, got 2147483648"},
      {"dtype_3", [](QuantizeWeightParams& p) { p.dtype = static_cast<DType>(3); },
       "dtype must be DType::kBFloat16, kFloat16 or kFloat32, got 3"},
      {"scaling_7", [](QuantizeWeightParams& p) { p.scaling = static_cast<WeightScaling>(7); },
       "scaling must be WeightScaling::k1x32 or k32x32, got 7"},
      {"scaling_mode_9",
       [](QuantizeWeightParams& p) { p.scaling_mode = static_cast<ScalingMode>(9); },
       "scaling_mode must be ScalingMode::kRceil or kFloor, got 9"},
      {"scaling_mode_fp32_for_mxfp8",
       [](QuantizeWeightParams& p) { p.scaling_mode = ScalingMode::kFp32; },
       "scaling_mode must be ScalingMode::kRceil or kFloor for format mxfp8, got "
       "ScalingMode::kFp32 (a rule of format fp8_blockwise)"},
  };
}

class GpuWeightBadInput : public GpuTestWithParam<WeightBadCase> {};

TEST_P(GpuWeightBadInput, ThrowsBeforeWriting) {
  const WeightBadCase& c = GetParam();
  const WeightShape shape{2, 96, 160};
  const WeightTensor w = make_weight(DType::kFloat32, shape, WDist::kNormal, 7);
  Stream stream;
  WeightDevice dev(w, stream.get());
  QuantizeWeightParams p = dev.params(WeightScaling::k32x32, ScalingMode::kRceil);
  c.edit(p);
  dev.poison(kPoison);
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
  try {
    quantize_weight(p);
    ADD_FAILURE() << "did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument) << e.what();
    std::string message = c.message;
    const size_t at = message.find('@');
    if (at != std::string::npos) {  // the address as std::ostream prints it
      const std::string got = e.message();
      const size_t addr = got.find("0x", at);
      message.replace(at, 1, addr == std::string::npos ? "?" : got.substr(addr));
    }
    EXPECT_EQ(e.message(), message);
    EXPECT_EQ(std::string(e.what()), "mxq::quantize_weight: " + e.message());
  }
  dev.expect_untouched(kPoison);
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuWeightBadInput, ::testing::ValuesIn(weight_bad_cases()),
                         [](const ::testing::TestParamInfo<WeightBadCase>& info) {
                           return info.param.name;
                         });

// ------------------------------------------------------------------------------------------------
// GpuWeightLarge: G*N*K > 2^31 (64-bit offsets everywhere); K not a multiple of 128. The reference
// runs on 128-row slices of the first and the last expert (a slice's rows are whole 32-row bands
// and whole 128-row scale atoms, so its outputs are the matching parts of the full outputs).
// ------------------------------------------------------------------------------------------------
class GpuWeightLarge : public GpuTestWithParam<WeightScaling> {};

TEST_P(GpuWeightLarge, BeyondTwoToThe31Elements) {
  const WeightScaling scaling = GetParam();
  const WeightShape shape{2, 32768, 32800};  // 2.15e9 elements, 4.3 GB of bf16
  ASSERT_GT(shape.elems(), int64_t(1) << 31);
  size_t free_bytes = 0, total_bytes = 0;
  MXQ_TEST_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < size_t(shape.elems()) * 5 + (size_t(1) << 30)) {
    GTEST_SKIP() << "needs " << shape.elems() * 5 / (1 << 20) << " MiB of device memory";
  }
  const uint64_t seed = test_seed();
  // Input: random bf16 bits of finite values, generated in parallel (2 bytes per element).
  WeightTensor w(DType::kBFloat16, shape);
  parallel_for(shape.G * shape.N, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t k = 0; k < shape.K; ++k) {
        const uint64_t h = splitmix64(seed ^ uint64_t(r * shape.K + k));
        uint16_t b = uint16_t(h);
        if ((b & 0x7F80) == 0x7F80) b = uint16_t(b & 0xBFFF);  // keep most values finite
        if ((h >> 40) % 100000 == 0) b = 0x7FC0;               // a NaN now and then
        w.set_bits(r * shape.K + k, b);
      }
    }
  });
  Stream stream;
  WeightDevice dev(w, stream.get());
  dev.poison(kPoison);
  quantize_weight(dev.params(scaling, ScalingMode::kRceil));
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
  MXQ_TEST_CUDA(cudaGetLastError());
  for (const GuardedBuffer* b : {&dev.q_row(), &dev.s_row(), &dev.q_col(), &dev.s_col()}) {
    EXPECT_TRUE(b->guards_intact(stream.get()));
  }
  const int64_t N = shape.N, K = shape.K, rows = 128;
  for (const auto& [g, n0] : {std::pair<int64_t, int64_t>{0, 0}, {1, N - rows}, {1, 4096}}) {
    SCOPED_TRACE("expert " + std::to_string(g) + " rows " + std::to_string(n0));
    // The slice W[g, n0:n0+128, :] on its own.
    WeightTensor slice(DType::kBFloat16, {1, rows, K});
    std::memcpy(slice.bytes.data(), w.bytes.data() + size_t(w.index(g, n0, 0)) * 2,
                slice.bytes.size());
    const WeightOutputs want = reference_weight(slice, scaling, ScalingMode::kRceil);
    // q_row rows: contiguous; s_row: the slice's scales are one 128-row atom row of the expert.
    std::vector<uint8_t> q_row(size_t(rows * K));
    MXQ_TEST_CUDA(cudaMemcpy(q_row.data(), dev.q_row().data() + (g * N + n0) * K, q_row.size(),
                             cudaMemcpyDeviceToHost));
    EXPECT_TRUE(same_bytes(q_row, want.q_row, K, "q_row slice"));
    std::vector<uint8_t> s_row(want.s_row.size());
    MXQ_TEST_CUDA(cudaMemcpy(s_row.data(), dev.s_row().data() + weight_s_row_offset(g, n0, 0, N, K),
                             s_row.size(), cudaMemcpyDeviceToHost));
    EXPECT_TRUE(same_bytes(s_row, want.s_row, 1, "s_row slice"));
    // q_col: 128 bytes of each of the K rows of expert g's (K, N) block.
    std::vector<uint8_t> q_col(size_t(rows * K));
    MXQ_TEST_CUDA(cudaMemcpy2D(q_col.data(), rows, dev.q_col().data() + g * K * N + n0, N, rows, K,
                               cudaMemcpyDeviceToHost));
    EXPECT_TRUE(same_bytes(q_col, want.q_col, rows, "q_col slice"));
    // s_col: scale columns n0/32 .. n0/32+3 of every row k, i.e. one atom column of the expert.
    std::vector<uint8_t> s_col_expert(size_t(weight_s_col_shape<int64_t>(1, N, K).cols));
    MXQ_TEST_CUDA(cudaMemcpy(s_col_expert.data(),
                             dev.s_col().data() + weight_s_col_offset(g, 0, 0, N, K),
                             s_col_expert.size(), cudaMemcpyDeviceToHost));
    std::vector<uint8_t> s_col(want.s_col.size());
    for (int64_t k = 0; k < round_up(K, 128); ++k) {
      for (int64_t i = 0; i < 4; ++i) {
        s_col[size_t(blocked_offset(k, i, rows / 32))] =
            s_col_expert[size_t(blocked_offset(k, n0 / 32 + i, N / 32))];
      }
    }
    EXPECT_TRUE(same_bytes(s_col, want.s_col, 1, "s_col slice"));
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, GpuWeightLarge, ::testing::ValuesIn(kWeightScalings),
                         [](const ::testing::TestParamInfo<WeightScaling>& info) {
                           return std::string(info.param == WeightScaling::k32x32 ? "t32x32"
                                                                                  : "b1x32");
                         });

// ------------------------------------------------------------------------------------------------
// GpuWeightBandwidth: the issue's shapes, bf16, both policies. Rotates over enough buffer sets
// that the inputs exceed the L2 several times; time per call = events over 20 calls after 3 warm-up
// calls; traffic = W read + both outputs written; roof = cudaMemcpyAsync device to device of the
// same traffic (read + written). A report, not a gate: the benchmark tool is the authority. The
// first set's outputs are compared with the reference on expert 0, so a fast wrong kernel fails.
// ------------------------------------------------------------------------------------------------
class GpuWeightBandwidth : public GpuTest {};

double time_ms(cudaStream_t stream, int calls, const std::function<void(int)>& call) {
  cudaEvent_t start, stop;
  MXQ_TEST_CUDA(cudaEventCreate(&start));
  MXQ_TEST_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) call(i);
  MXQ_TEST_CUDA(cudaEventRecord(start, stream));
  for (int i = 0; i < calls; ++i) call(i);
  MXQ_TEST_CUDA(cudaEventRecord(stop, stream));
  MXQ_TEST_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  MXQ_TEST_CUDA(cudaEventElapsedTime(&ms, start, stop));
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return double(ms) / calls;
}

TEST_F(GpuWeightBandwidth, IssueShapes) {
  const WeightShape shapes[] = {
      {8, 4096, 7168}, {64, 1536, 5120}, {128, 768, 2048}, {1, 7168, 2048}};
  Stream stream;
  std::cout << "  shape              policy  us/call   TB/s   % of copy roof\n";
  for (const WeightShape& s : shapes) {
    const int64_t in_bytes = s.elems() * 2;
    const int64_t out_bytes = 2 * s.elems() + weight_s_row_shape(s.G, s.N, s.K).bytes() +
                              weight_s_col_shape(s.G, s.N, s.K).bytes();
    const int sets = int(std::max<int64_t>(1, ceil_div(int64_t(512) << 20, in_bytes)));
    WeightTensor w = make_weight(DType::kBFloat16, {1, s.N, s.K}, WDist::kNormal, 11);
    std::vector<GuardedBuffer> ws, q_rows, s_rows, q_cols, s_cols;
    for (int i = 0; i < sets; ++i) {
      ws.emplace_back("w", size_t(in_bytes));
      for (int64_t g = 0; g < s.G; ++g) {  // every expert the same matrix (upload cost only)
        MXQ_TEST_CUDA(cudaMemcpy(ws.back().data() + g * int64_t(w.bytes.size()), w.bytes.data(),
                                 w.bytes.size(), cudaMemcpyHostToDevice));
      }
      q_rows.emplace_back("q_row", size_t(s.elems()));
      s_rows.emplace_back("s_row", size_t(weight_s_row_shape(s.G, s.N, s.K).bytes()));
      q_cols.emplace_back("q_col", size_t(s.elems()));
      s_cols.emplace_back("s_col", size_t(weight_s_col_shape(s.G, s.N, s.K).bytes()));
    }
    GuardedBuffer copy_src("copy_src", size_t((in_bytes + out_bytes) / 2));
    GuardedBuffer copy_dst("copy_dst", copy_src.bytes());
    const double copy_ms = time_ms(stream.get(), 20, [&](int) {
      MXQ_TEST_CUDA(cudaMemcpyAsync(copy_dst.data(), copy_src.data(), copy_src.bytes(),
                                    cudaMemcpyDeviceToDevice, stream.get()));
    });
    const double roof = double(2 * copy_src.bytes()) / (copy_ms * 1e-3);
    for (WeightScaling scaling : kWeightScalings) {
      const double ms = time_ms(stream.get(), 20, [&](int i) {
        const size_t b = size_t(i % sets);
        QuantizeWeightParams p;
        p.w = ws[b].data();
        p.G = s.G;
        p.N = s.N;
        p.K = s.K;
        p.scaling = scaling;
        p.q_row = q_rows[b].data();
        p.s_row = s_rows[b].data();
        p.q_col = q_cols[b].data();
        p.s_col = s_cols[b].data();
        p.stream = stream.get();
        quantize_weight(p);
      });
      const double bw = double(in_bytes + out_bytes) / (ms * 1e-3);
      std::cout << "  " << std::left << std::setw(19) << weight_shape_name(s) << std::setw(8)
                << to_string(scaling) << std::right << std::fixed << std::setprecision(1)
                << std::setw(8) << ms * 1e3 << std::setprecision(2) << std::setw(7) << bw / 1e12
                << std::setprecision(1) << std::setw(10) << 100.0 * bw / roof << "%\n";
      RecordProperty(weight_shape_name(s) + "_" + to_string(scaling) + "_pct_of_roof",
                     std::to_string(100.0 * bw / roof));
      // Expert 0 of the last run's set against the reference.
      MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
      const size_t last = size_t(19 % sets);  // the last timed call
      const WeightOutputs want = reference_weight(w, scaling, ScalingMode::kRceil);
      WeightOutputs got;
      got.q_row.resize(want.q_row.size());
      got.s_row.resize(want.s_row.size());
      got.q_col.resize(want.q_col.size());
      got.s_col.resize(want.s_col.size());
      MXQ_TEST_CUDA(cudaMemcpy(got.q_row.data(), q_rows[last].data(), got.q_row.size(),
                               cudaMemcpyDeviceToHost));
      MXQ_TEST_CUDA(cudaMemcpy(got.s_row.data(), s_rows[last].data(), got.s_row.size(),
                               cudaMemcpyDeviceToHost));
      MXQ_TEST_CUDA(cudaMemcpy(got.q_col.data(), q_cols[last].data(), got.q_col.size(),
                               cudaMemcpyDeviceToHost));
      MXQ_TEST_CUDA(cudaMemcpy(got.s_col.data(), s_cols[last].data(), got.s_col.size(),
                               cudaMemcpyDeviceToHost));
      EXPECT_TRUE(same_weight_outputs(got, want, w.shape, weight_shape_name(s) + " expert 0"));
    }
  }
}

}  // namespace
}  // namespace mxq::test
