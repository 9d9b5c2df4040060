// FP8 blockwise on the device (docs/numerics.md §13), byte for byte against the CPU reference
// (mxq::ref::quantize, quantize_weight, dequantize, quantize_routed with format kFp8Blockwise):
// every input type, path (rowwise, colwise, fused), dense and grouped (empty groups and a
// tail), both scaling modes (fp32, rceil), random and adversarial 128-element blocks. Outputs are
// poisoned (two poisons, so a byte left unwritten cannot match by chance) and guarded (nothing is
// written outside them); misaligned offs set the status bit.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_util.h"

namespace mxq::test {
namespace {

constexpr int kB = Fp8Blockwise::kBlock;
constexpr uint8_t kPoisons[] = {kPoison, 0x5A};

// ---- inputs: values as fp32, stored in the input type ----

// The adversarial 128-element blocks: zeros, subnormals, NaN and Inf (either sign, one element or
// all), the input type's extremes, amax below the 1e-12 floor, and amaxes at the RCEIL boundaries
// (448 * 2^k and its neighbours), each scattered over otherwise ordinary values or alone.
std::vector<std::vector<float>> blockwise_special_blocks() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto fill = [](float v) { return std::vector<float>(kB, v); };
  auto ones_with = [](float v, int at) {
    std::vector<float> b(kB, 1.0f);
    b[size_t(at)] = v;
    return b;
  };
  auto alternating = [](float v) {
    std::vector<float> b(kB);
    for (int i = 0; i < kB; ++i) b[size_t(i)] = i % 2 ? -v : v;
    return b;
  };
  auto ramp = [](float top) {
    std::vector<float> b(kB);
    for (int i = 0; i < kB; ++i) b[size_t(i)] = top * float(i + 1) / kB;
    return b;
  };
  return {fill(0.0f),
          fill(-0.0f),
          fill(1e-40f),  // fp32 subnormal; 0 in bf16/fp16 after rounding
          alternating(9.2e-41f),
          fill(1e-13f),  // amax below the floor
          ones_with(1e-13f, 5),
          ones_with(inf, 0),
          ones_with(-inf, 127),
          ones_with(nan, 64),
          fill(nan),
          ones_with(inf, 31) /* a piece boundary */,
          alternating(3.3895314e38f),  // bf16 max
          alternating(65504.0f),       // fp16 max
          ramp(448.0f),
          ramp(448.0f * 1024.0f),
          ramp(std::nextafter(448.0f, 0.0f)),
          ramp(std::nextafter(448.0f, 1e9f)),
          ramp(448.0f / 65536.0f),
          alternating(6.1035156e-05f),  // fp16 smallest normal
          alternating(5.9604645e-08f),  // fp16 smallest subnormal
          ones_with(1e30f, 100),
          fill(3.0f)};
}

std::vector<float> make_values(int64_t rows, int64_t cols, bool special, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  for (auto& e : v) e = std::ldexp(normal(rng), special ? exponent(rng) / 4 : 0);
  if (!special) return v;
  const auto blocks = blockwise_special_blocks();
  std::uniform_int_distribution<int64_t> any_row(0, rows - 1), any_col(0, cols - 1);
  std::uniform_int_distribution<int64_t> row_block(0, rows / kB - 1), col_block(0, cols / kB - 1);
  const int64_t plants = std::max<int64_t>(2 * int64_t(blocks.size()), rows * cols / 8192);
  for (int64_t i = 0; i < plants; ++i) {
    const auto& b = blocks[size_t(i) % blocks.size()];
    if (i % 2 == 0) {  // a rowwise block
      const int64_t r = any_row(rng), c0 = col_block(rng) * kB;
      for (int j = 0; j < kB; ++j) v[size_t(r * cols + c0 + j)] = b[size_t(j)];
    } else {  // a colwise block
      const int64_t r0 = row_block(rng) * kB, c = any_col(rng);
      for (int j = 0; j < kB; ++j) v[size_t((r0 + j) * cols + c)] = b[size_t(j)];
    }
  }
  return v;
}

// offs with 128-multiple groups: random sizes, at least one empty group, and a tail (offs[G-1]
// < M) when `tail`.
std::vector<int32_t> blockwise_offs(int64_t M, int64_t G, bool tail, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t units = M / kB;
  const int64_t covered = tail ? std::max<int64_t>(units - 1, 0) : units;
  std::uniform_int_distribution<int64_t> cut(0, covered);
  std::vector<int64_t> ends(static_cast<size_t>(G));
  for (auto& e : ends) e = cut(rng);
  std::sort(ends.begin(), ends.end());
  ends.back() = covered;
  if (G > 1) ends[1] = ends[0];  // group 1 empty
  std::vector<int32_t> offs(static_cast<size_t>(G));
  for (size_t g = 0; g < offs.size(); ++g) offs[g] = int32_t(ends[g] * kB);
  return offs;
}

const char* dtype_name(DType t) { return to_string(t); }

// ---- activations ----

using ActParam = std::tuple<DType, Path, bool /*grouped*/, ScalingMode, Shape, bool /*special*/>;

class BlockwiseQuantize : public GpuTestWithParam<ActParam> {};

TEST_P(BlockwiseQuantize, MatchesReference) {
  const auto [dtype, path, grouped, mode, shape, special] = GetParam();
  const int64_t M = shape.M, K = shape.K;
  const auto x = encode_as(make_values(M, K, special, test_seed()), dtype);
  const std::vector<int32_t> offs =
      grouped ? blockwise_offs(M, 4, true, test_seed(1)) : std::vector<int32_t>{};
  const bool row = has_rowwise(path), col = has_colwise(path);
  const int64_t q_bytes = M * K;
  const int64_t d_row_bytes = factor_shape(M, K).bytes() * 4;
  const int64_t d_col_bytes = factor_shape(K, M).bytes() * 4;

  // The reference, into poisoned host buffers.
  HostOutputs want;
  want.q_row.assign(size_t(q_bytes), kPoison);
  want.q_col.assign(size_t(q_bytes), kPoison);
  want.s_row.assign(size_t(d_row_bytes), kPoison);
  want.s_col.assign(size_t(d_col_bytes), kPoison);
  {
    QuantizeParams p;
    p.x = x.data();
    p.dtype = dtype;
    p.M = M;
    p.K = K;
    p.format = Format::kFp8Blockwise;
    p.scaling_mode = mode;
    if (grouped) {
      p.offs = offs.data();
      p.num_groups = int64_t(offs.size());
    }
    if (row) {
      p.q_row = want.q_row.data();
      p.s_row = want.s_row.data();
    }
    if (col) {
      p.q_col = want.q_col.data();
      p.s_col = want.s_col.data();
    }
    ref::quantize(p);
  }

  Stream stream;
  GuardedBuffer dx("x", x.size()), dq_row("q_row", size_t(q_bytes)),
      dq_col("q_col", size_t(q_bytes)), ds_row("s_row", size_t(d_row_bytes)),
      ds_col("s_col", size_t(d_col_bytes)), doffs("offs", offs.size() * 4), dstatus("status", 4);
  dx.upload(x.data(), stream.get());
  if (grouped) doffs.upload(offs.data(), stream.get());
  for (const uint8_t poison : kPoisons) {
    for (const GuardedBuffer* b : {&dq_row, &dq_col, &ds_row, &ds_col, &dstatus}) {
      b->fill(poison, stream.get());
    }
    QuantizeParams p;
    p.x = dx.data();
    p.dtype = dtype;
    p.M = M;
    p.K = K;
    p.format = Format::kFp8Blockwise;
    p.scaling_mode = mode;
    p.stream = stream.get();
    if (grouped) {
      p.offs = doffs.as<int32_t>();
      p.num_groups = int64_t(offs.size());
      p.status = dstatus.as<int32_t>();
    }
    if (row) {
      p.q_row = dq_row.data();
      p.s_row = ds_row.data();
    }
    if (col) {
      p.q_col = dq_col.data();
      p.s_col = ds_col.data();
    }
    quantize(p);
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
    const std::string tag = std::string(" (poison 0x") + (poison == kPoison ? "a5" : "5a") + ")";
    if (row) {
      EXPECT_TRUE(same_bytes(dq_row.download(stream.get()), want.q_row, K, "q_row" + tag));
      EXPECT_TRUE(same_bytes(ds_row.download(stream.get()), want.s_row, 4 * M, "d_row" + tag));
    } else {
      EXPECT_TRUE(dq_row.all_bytes_are(poison, stream.get()));
      EXPECT_TRUE(ds_row.all_bytes_are(poison, stream.get()));
    }
    if (col) {
      EXPECT_TRUE(same_bytes(dq_col.download(stream.get()), want.q_col, M, "q_col" + tag));
      EXPECT_TRUE(same_bytes(ds_col.download(stream.get()), want.s_col, 4 * K, "d_col" + tag));
    } else {
      EXPECT_TRUE(dq_col.all_bytes_are(poison, stream.get()));
      EXPECT_TRUE(ds_col.all_bytes_are(poison, stream.get()));
    }
    if (grouped) {
      int32_t status = -1;
      MXQ_TEST_CUDA(cudaMemcpy(&status, dstatus.data(), 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(status, 0) << describe_status(status);
    } else {
      EXPECT_TRUE(dstatus.all_bytes_are(poison, stream.get()));
    }
    for (const GuardedBuffer* b : {&dx, &dq_row, &dq_col, &ds_row, &ds_col, &doffs, &dstatus}) {
      EXPECT_TRUE(b->guards_intact(stream.get()));
    }
    EXPECT_TRUE(dx.holds(x, stream.get()));
  }
}

std::string act_name(const ::testing::TestParamInfo<ActParam>& info) {
  const auto [dtype, path, grouped, mode, shape, special] = info.param;
  return std::string(dtype_name(dtype)) + "_" + path_name(path) + "_" +
         (grouped ? "grouped" : "dense") + "_" + to_string(mode) + "_" + shape_name(shape) + "_" +
         (special ? "special" : "normal");
}

const Shape kShapes[] = {{128, 128}, {256, 384}, {384, 1024}, {1152, 256}};

INSTANTIATE_TEST_SUITE_P(
    Shapes, BlockwiseQuantize,
    ::testing::Combine(::testing::Values(DType::kBFloat16, DType::kFloat16, DType::kFloat32),
                       ::testing::Values(Path::kRowwise, Path::kColwise, Path::kFused),
                       ::testing::Bool(),
                       ::testing::Values(ScalingMode::kFp32, ScalingMode::kRceil),
                       ::testing::ValuesIn(kShapes), ::testing::Bool()),
    act_name);

// The large shape (DeepSeek-V3's hidden size), fused only.
INSTANTIATE_TEST_SUITE_P(
    Large, BlockwiseQuantize,
    ::testing::Combine(::testing::Values(DType::kBFloat16, DType::kFloat16),
                       ::testing::Values(Path::kFused), ::testing::Bool(),
                       ::testing::Values(ScalingMode::kFp32, ScalingMode::kRceil),
                       ::testing::Values(Shape{4096, 7168}), ::testing::Values(true)),
    act_name);

// ---- grouped: misaligned offs set the status bit; nothing is written outside the outputs ----
class BlockwiseOffsStatus : public GpuTest {};

TEST_F(BlockwiseOffsStatus, MisalignedDecreasingBeyond) {
  const int64_t M = 512, K = 256;
  const auto x = encode_as(make_values(M, K, false, test_seed()), DType::kBFloat16);
  struct Case {
    std::vector<int32_t> offs;
    int32_t bits;
  };
  const Case cases[] = {{{128, 160, 512}, kOffsMisaligned},  // 32-aligned: fine for MXFP8 only
                        {{256, 128, 512}, kOffsDecreasing},
                        {{128, 640}, kOffsBeyondM},
                        {{0, 0, 384}, 0}};
  Stream stream;
  GuardedBuffer dx("x", x.size()), dq_row("q_row", size_t(M * K)), dq_col("q_col", size_t(M * K)),
      ds_row("s_row", size_t(factor_shape(M, K).bytes() * 4)),
      ds_col("s_col", size_t(factor_shape(K, M).bytes() * 4)), dstatus("status", 4);
  dx.upload(x.data(), stream.get());
  for (const Case& c : cases) {
    GuardedBuffer doffs("offs", c.offs.size() * 4);
    doffs.upload(c.offs.data(), stream.get());
    QuantizeParams p;
    p.x = dx.data();
    p.M = M;
    p.K = K;
    p.format = Format::kFp8Blockwise;
    p.scaling_mode = ScalingMode::kFp32;
    p.offs = doffs.as<int32_t>();
    p.num_groups = int64_t(c.offs.size());
    p.status = dstatus.as<int32_t>();
    p.q_row = dq_row.data();
    p.s_row = ds_row.data();
    p.q_col = dq_col.data();
    p.s_col = ds_col.data();
    p.stream = stream.get();
    quantize(p);
    int32_t status = -1;
    MXQ_TEST_CUDA(
        cudaMemcpyAsync(&status, dstatus.data(), 4, cudaMemcpyDeviceToHost, stream.get()));
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
    EXPECT_EQ(status & c.bits, c.bits) << offs_to_string(c.offs) << ": " << describe_status(status);
    if (c.bits == 0) EXPECT_EQ(status, 0) << describe_status(status);
    for (const GuardedBuffer* b : {&dx, &dq_row, &dq_col, &ds_row, &ds_col, &doffs, &dstatus}) {
      EXPECT_TRUE(b->guards_intact(stream.get())) << offs_to_string(c.offs);
    }
  }
}

// The composed path is MXFP8's baseline: FP8 blockwise is refused, not run another way.
TEST_F(BlockwiseOffsStatus, ComposedRefused) {
  const int64_t M = 128, K = 128;
  GuardedBuffer dx("x", size_t(M * K * 2)), dq("q", size_t(M * K)), ds("s", 512), work("ws", 4096);
  QuantizeParams p;
  p.x = dx.data();
  p.M = M;
  p.K = K;
  p.format = Format::kFp8Blockwise;
  p.scaling_mode = ScalingMode::kFp32;
  p.q_row = p.q_col = dq.data();
  p.s_row = p.s_col = ds.data();
  EXPECT_THROW(quantize_composed(p, work.data()), Error);
}

// ---- dequantize ----
using DequantParam = std::tuple<bool /*colwise*/, ScalingMode, Shape>;
class BlockwiseDequantize : public GpuTestWithParam<DequantParam> {};

TEST_P(BlockwiseDequantize, MatchesReference) {
  const auto [colwise, mode, shape] = GetParam();
  const int64_t M = shape.M, K = shape.K;
  const auto x = encode_as(make_values(M, K, true, test_seed()), DType::kBFloat16);
  // q and d from the reference (the quantize kernels are checked above).
  std::vector<uint8_t> q(static_cast<size_t>(M * K)), d;
  const int64_t rows = colwise ? K : M, cols = colwise ? M : K;
  d.resize(size_t(factor_shape(rows, cols).bytes() * 4));
  {
    QuantizeParams p;
    p.x = x.data();
    p.M = M;
    p.K = K;
    p.format = Format::kFp8Blockwise;
    p.scaling_mode = mode;
    (colwise ? p.q_col : p.q_row) = q.data();
    (colwise ? p.s_col : p.s_row) = d.data();
    ref::quantize(p);
  }
  std::vector<uint8_t> want(size_t(rows * cols * 2), kPoison);
  DequantizeParams p;
  p.q = q.data();
  p.scales = d.data();
  p.rows = rows;
  p.cols = cols;
  p.format = Format::kFp8Blockwise;
  p.out = want.data();
  ref::dequantize(p);

  Stream stream;
  GuardedBuffer dq("q", q.size()), dd("d", d.size()), dout("out", want.size());
  dq.upload(q.data(), stream.get());
  dd.upload(d.data(), stream.get());
  for (const uint8_t poison : kPoisons) {
    dout.fill(poison, stream.get());
    p.q = dq.data();
    p.scales = dd.data();
    p.out = dout.data();
    p.stream = stream.get();
    dequantize(p);
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
    EXPECT_TRUE(same_bytes(dout.download(stream.get()), want, 2 * cols, "out"));
    for (const GuardedBuffer* b : {&dq, &dd, &dout}) EXPECT_TRUE(b->guards_intact(stream.get()));
  }
}

std::string dequant_name(const ::testing::TestParamInfo<DequantParam>& info) {
  const auto [colwise, mode, shape] = info.param;
  return std::string(colwise ? "colwise" : "rowwise") + "_" + to_string(mode) + "_" +
         shape_name(shape);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BlockwiseDequantize,
    ::testing::Combine(::testing::Bool(),
                       ::testing::Values(ScalingMode::kFp32, ScalingMode::kRceil),
                       ::testing::Values(Shape{128, 128}, Shape{256, 384}, Shape{1024, 640})),
    dequant_name);

// ---- weights (G, N, K), 128x128 tiles ----
using WeightParam = std::tuple<DType, ScalingMode, int /*axes: 1 row, 2 col, 3 both*/,
                               std::tuple<int64_t, int64_t, int64_t>>;
class BlockwiseWeight : public GpuTestWithParam<WeightParam> {};

TEST_P(BlockwiseWeight, MatchesReference) {
  const auto [dtype, mode, axes, gnk] = GetParam();
  const auto [G, N, K] = gnk;
  const auto w = encode_as(make_values(G * N, K, true, test_seed()), dtype);
  const bool row = axes & 1, col = axes & 2;
  const int64_t q_bytes = G * N * K;
  const int64_t s_row_bytes = weight_factor_shape(G, N, K).bytes() * 4;
  const int64_t s_col_bytes = weight_factor_shape(G, K, N).bytes() * 4;
  std::vector<uint8_t> q_row(size_t(q_bytes), kPoison), q_col(size_t(q_bytes), kPoison),
      s_row(size_t(s_row_bytes), kPoison), s_col(size_t(s_col_bytes), kPoison);
  QuantizeWeightParams p;
  p.w = w.data();
  p.dtype = dtype;
  p.G = G;
  p.N = N;
  p.K = K;
  p.format = Format::kFp8Blockwise;
  p.scaling_mode = mode;
  p.scaling = WeightScaling::k128x128;
  if (row) {
    p.q_row = q_row.data();
    p.s_row = s_row.data();
  }
  if (col) {
    p.q_col = q_col.data();
    p.s_col = s_col.data();
  }
  ref::quantize_weight(p);

  Stream stream;
  GuardedBuffer dw("w", w.size()), dq_row("q_row", size_t(q_bytes)),
      dq_col("q_col", size_t(q_bytes)), ds_row("s_row", size_t(s_row_bytes)),
      ds_col("s_col", size_t(s_col_bytes));
  dw.upload(w.data(), stream.get());
  for (const uint8_t poison : kPoisons) {
    for (const GuardedBuffer* b : {&dq_row, &dq_col, &ds_row, &ds_col})
      b->fill(poison, stream.get());
    QuantizeWeightParams d = p;
    d.w = dw.data();
    d.q_row = row ? dq_row.data() : nullptr;
    d.s_row = row ? ds_row.data() : nullptr;
    d.q_col = col ? dq_col.data() : nullptr;
    d.s_col = col ? ds_col.data() : nullptr;
    d.stream = stream.get();
    quantize_weight(d);
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
    if (row) {
      EXPECT_TRUE(same_bytes(dq_row.download(stream.get()), q_row, K, "q_row"));
      EXPECT_TRUE(same_bytes(ds_row.download(stream.get()), s_row, 4, "s_row"));
    } else {
      EXPECT_TRUE(dq_row.all_bytes_are(poison, stream.get()));
    }
    if (col) {
      EXPECT_TRUE(same_bytes(dq_col.download(stream.get()), q_col, N, "q_col"));
      EXPECT_TRUE(same_bytes(ds_col.download(stream.get()), s_col, 4, "s_col"));
    } else {
      EXPECT_TRUE(dq_col.all_bytes_are(poison, stream.get()));
    }
    for (const GuardedBuffer* b : {&dw, &dq_row, &dq_col, &ds_row, &ds_col}) {
      EXPECT_TRUE(b->guards_intact(stream.get()));
    }
  }
}

std::string weight_name(const ::testing::TestParamInfo<WeightParam>& info) {
  const auto [dtype, mode, axes, gnk] = info.param;
  return std::string(dtype_name(dtype)) + "_" + to_string(mode) + "_" +
         (axes == 1   ? "rowwise"
          : axes == 2 ? "colwise"
                      : "both") +
         "_" + std::to_string(std::get<0>(gnk)) + "x" + std::to_string(std::get<1>(gnk)) + "x" +
         std::to_string(std::get<2>(gnk));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BlockwiseWeight,
    ::testing::Combine(::testing::Values(DType::kBFloat16, DType::kFloat16, DType::kFloat32),
                       ::testing::Values(ScalingMode::kFp32, ScalingMode::kRceil),
                       ::testing::Values(1, 2, 3),
                       ::testing::Values(std::make_tuple(int64_t(1), int64_t(128), int64_t(128)),
                                         std::make_tuple(int64_t(1), int64_t(384), int64_t(640)),
                                         std::make_tuple(int64_t(3), int64_t(256), int64_t(1152)),
                                         std::make_tuple(int64_t(2), int64_t(640), int64_t(256)))),
    weight_name);

// ---- routed ----
using RoutedParam = std::tuple<DType, ScalingMode, bool /*scaled*/>;
class BlockwiseRouted : public GpuTestWithParam<RoutedParam> {};

TEST_P(BlockwiseRouted, MatchesReference) {
  const auto [dtype, mode, scaled] = GetParam();
  const int64_t T = 300, K = 384, E = 5;
  std::mt19937_64 rng(test_seed());
  const auto x = encode_as(make_values(T, K, true, test_seed(1)), dtype);
  std::vector<int32_t> counts = {70, 0, 129, 1, 200};
  int64_t N = 0;
  for (const int32_t c : counts) N += c;
  std::vector<int32_t> index(static_cast<size_t>(N));
  std::uniform_int_distribution<int32_t> row(0, int32_t(T - 1));
  for (auto& i : index) i = row(rng);
  std::vector<float> scale(static_cast<size_t>(N));
  std::uniform_real_distribution<float> gate(0.f, 1.f);
  for (auto& s : scale) s = gate(rng);
  const int64_t Mp = padded_rows<int64_t, Fp8Blockwise>(N, E);
  const int64_t q_bytes = Mp * K;
  const int64_t d_row_bytes = factor_shape(Mp, K).bytes() * 4;
  const int64_t d_col_bytes = factor_shape(K, Mp).bytes() * 4;

  std::vector<uint8_t> q_row(size_t(q_bytes), kPoison), q_col(size_t(q_bytes), kPoison),
      s_row(size_t(d_row_bytes), kPoison), s_col(size_t(d_col_bytes), kPoison);
  std::vector<int32_t> offs_p(static_cast<size_t>(E)), dest(static_cast<size_t>(N));
  QuantizeRoutedParams p;
  p.x = x.data();
  p.dtype = dtype;
  p.T = T;
  p.K = K;
  p.index = index.data();
  p.N = N;
  p.counts = counts.data();
  p.num_experts = E;
  p.scale = scaled ? scale.data() : nullptr;
  p.format = Format::kFp8Blockwise;
  p.scaling_mode = mode;
  p.q_row = q_row.data();
  p.s_row = s_row.data();
  p.q_col = q_col.data();
  p.s_col = s_col.data();
  p.offs_p = offs_p.data();
  p.dest = dest.data();
  ref::quantize_routed(p);

  Stream stream;
  GuardedBuffer dx("x", x.size()), dindex("index", index.size() * 4),
      dcounts("counts", counts.size() * 4), dscale("scale", scale.size() * 4),
      dq_row("q_row", size_t(q_bytes)), dq_col("q_col", size_t(q_bytes)),
      ds_row("s_row", size_t(d_row_bytes)), ds_col("s_col", size_t(d_col_bytes)),
      doffs_p("offs_p", size_t(E) * 4), ddest("dest", size_t(N) * 4), dstatus("status", 4),
      work("workspace", size_t(quantize_routed_workspace_bytes(N, E, Format::kFp8Blockwise)));
  dx.upload(x.data(), stream.get());
  dindex.upload(index.data(), stream.get());
  dcounts.upload(counts.data(), stream.get());
  dscale.upload(scale.data(), stream.get());
  for (const GuardedBuffer* b : {&dq_row, &dq_col, &ds_row, &ds_col, &doffs_p, &ddest, &dstatus}) {
    b->fill(kPoison, stream.get());
  }
  QuantizeRoutedParams d = p;
  d.x = dx.data();
  d.index = dindex.data();
  d.counts = dcounts.data();
  d.scale = scaled ? dscale.as<float>() : nullptr;
  d.q_row = dq_row.data();
  d.s_row = ds_row.data();
  d.q_col = dq_col.data();
  d.s_col = ds_col.data();
  d.offs_p = doffs_p.as<int32_t>();
  d.dest = ddest.as<int32_t>();
  d.status = dstatus.as<int32_t>();
  d.workspace = work.data();
  d.stream = stream.get();
  quantize_routed(d);
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
  EXPECT_TRUE(same_bytes(dq_row.download(stream.get()), q_row, K, "q_row"));
  EXPECT_TRUE(same_bytes(ds_row.download(stream.get()), s_row, 4 * Mp, "d_row"));
  EXPECT_TRUE(same_bytes(dq_col.download(stream.get()), q_col, Mp, "q_col"));
  EXPECT_TRUE(same_bytes(ds_col.download(stream.get()), s_col, 4 * K, "d_col"));
  EXPECT_TRUE(same_bytes(doffs_p.download(stream.get()), as_bytes(offs_p), 4 * E, "offs_p"));
  EXPECT_TRUE(same_bytes(ddest.download(stream.get()), as_bytes(dest), 4 * N, "dest"));
  int32_t status = -1;
  MXQ_TEST_CUDA(cudaMemcpy(&status, dstatus.data(), 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(status, 0) << describe_status(status);
  for (const GuardedBuffer* b :
       {&dx, &dq_row, &dq_col, &ds_row, &ds_col, &doffs_p, &ddest, &dstatus}) {
    EXPECT_TRUE(b->guards_intact(stream.get()));
  }
}

std::string routed_name(const ::testing::TestParamInfo<RoutedParam>& info) {
  const auto [dtype, mode, scaled] = info.param;
  return std::string(dtype_name(dtype)) + "_" + to_string(mode) +
         (scaled ? "_scaled" : "_unscaled");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BlockwiseRouted,
    ::testing::Combine(::testing::Values(DType::kBFloat16, DType::kFloat16, DType::kFloat32),
                       ::testing::Values(ScalingMode::kFp32, ScalingMode::kRceil),
                       ::testing::Bool()),
    routed_name);

}  // namespace
}  // namespace mxq::test
