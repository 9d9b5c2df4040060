// The composed path's to_blocked and dequantize on the device, byte-exact against the CPU
// reference:
//   GpuComposedToBlocked  the colwise scale placement of quantize_composed (its third kernel,
//                         to_blocked: plain S_col -> dense blocked or K-groups from device offs,
//                         slack and tail zeroed) on inputs whose 32x1 blocks take every scale byte;
//                         every output against the reference and s_col also against torchao's
//                         to_blocked / K-groups rearrangement (test_util.h, independent of
//                         layout.h)
//   GpuDequantize       rowwise (q_row (M, K) + dense s_row, and M-groups s_row + offs), colwise
//                       (q_col (K, M) + dense s_col, and K-groups s_col + offs) on random e4m3 and
//                       E8M0 bytes (NaN codes and scale 255 included), and every (q, s) pair
// Dequantize inputs are random bytes, not quantizer outputs: every code, including ones a quantizer
// never writes.
#include <algorithm>
#include <tuple>

#include "gpu_util.h"

namespace mxq::test {
namespace {

// Grouping of one case: G = 0 is dense.
struct Grouping {
  int G;
  GroupFill fill;
};
std::string grouping_name(const Grouping& g) {
  return g.G == 0 ? std::string("dense")
                  : "G" + std::to_string(g.G) + "_" + group_fill_name(g.fill);
}
void PrintTo(const Grouping& g, std::ostream* os) { *os << grouping_name(g); }
const Grouping kGroupings[] = {{0, GroupFill::kFull},  {1, GroupFill::kTail}, {1, GroupFill::kFull},
                               {1, GroupFill::kEmpty}, {4, GroupFill::kTail}, {8, GroupFill::kFull},
                               {64, GroupFill::kTail}, {64, GroupFill::kFull}};

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> b(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t r = rng();
    for (size_t j = 0; j < 8 && i + j < n; ++j) b[i + j] = uint8_t(r >> (8 * j));
  }
  return b;
}

// ------------------------------------------------------------------------------------------------
// GpuComposedToBlocked
// ------------------------------------------------------------------------------------------------
// x whose colwise 32x1 blocks take every scale byte: block (i, k) (rows 32i..32i+31 of column k)
// has a random top exponent field E in 0..254 (its largest magnitude, at a random row) and values
// one to three binades below it, or (1 in 32) a NaN or an Inf (scale 255).
std::vector<uint16_t> make_scale_sweep_input(int64_t M, int64_t K, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> x(size_t(M * K));
  for (int64_t i = 0; i < M / kBlock; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      const int top = int(rng() % 255);
      for (int64_t j = 0; j < kBlock; ++j) {
        const int e = std::max(0, top - 1 - int(rng() % 3));
        x[size_t((i * kBlock + j) * K + k)] =
            uint16_t((e << 7) | (rng() & 0x7F) | ((rng() & 1) ? 0x8000 : 0));
      }
      uint16_t peak = uint16_t((top << 7) | (rng() & 0x7F));
      if (rng() % 32 == 0) peak = (rng() & 1) ? 0x7FC0 : 0x7F80;
      x[size_t((i * kBlock + int64_t(rng() % kBlock)) * K + k)] =
          uint16_t(peak | ((rng() & 1) ? 0x8000 : 0));
    }
  }
  return x;
}

using ToBlockedParam = std::tuple<Shape, Grouping>;
class GpuComposedToBlocked : public GpuTestWithParam<ToBlockedParam> {};

TEST_P(GpuComposedToBlocked, MatchesReferenceAndTorchaoLayout) {
  const auto [shape, grouping] = GetParam();
  const int64_t M = shape.M, K = shape.K, G = grouping.G;
  const ScalingMode mode = ScalingMode::kRceil;
  const uint64_t seed = test_seed();
  const std::vector<int32_t> offs =
      G ? make_offs(M, G, grouping.fill, seed ^ 1) : std::vector<int32_t>{};
  SCOPED_TRACE("seed " + std::to_string(seed) + ", offs " + offs_to_string(offs));
  const std::vector<uint16_t> x = make_scale_sweep_input(M, K, seed);
  const HostOutputs want = reference_outputs(x, M, K, offs, mode);
  // The placement is checked on many different bytes, not on a few repeated values.
  std::vector<bool> seen(256, false);
  for (uint8_t v : want.s_col_plain) seen[v] = true;
  EXPECT_GE(std::count(seen.begin(), seen.end(), true), 128)
      << "the input should give the colwise blocks most scale bytes";

  Stream stream;
  DeviceProblem dev(x, M, K, stream.get());
  dev.set_offs(offs);
  // Dense: the status word is not the composed path's and must stay poisoned (DeviceProblem::owns).
  const HostOutputs got = dev.run(Path::kComposed, mode);
  expect_matches_reference(got, want, Path::kComposed, M, K, G);
  EXPECT_TRUE(col_scale_layout_holds(got.s_col, want.s_col_plain, M, K, offs));
  if (G) {
    EXPECT_NO_THROW(check_status(dev.status().as<int32_t>(), stream.get()));
  }
}

std::string to_blocked_name(const ::testing::TestParamInfo<ToBlockedParam>& info) {
  return shape_name(std::get<0>(info.param)) + "_" + grouping_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuComposedToBlocked,
                         ::testing::Combine(::testing::Values(Shape{96, 160}, Shape{128, 128},
                                                              Shape{256, 512}, Shape{1056, 224},
                                                              Shape{512, 4096}, Shape{8192, 256}),
                                            ::testing::ValuesIn(kGroupings)),
                         to_blocked_name);

// ------------------------------------------------------------------------------------------------
// GpuDequantize
// ------------------------------------------------------------------------------------------------
enum class DequantMode {
  // q_row (M, K) with s_row (dense blocked, or M-groups with offs): rows = M (tokens), cols = K
  kRowwise,
  // q_col (K, M) with s_col (dense blocked, or K-groups with offs): rows = K, cols = M (tokens)
  kColwise,
};

void PrintTo(DequantMode m, std::ostream* os) {
  *os << (m == DequantMode::kRowwise ? "rowwise" : "colwise");
}

struct DequantCase {
  int64_t rows, cols;
  std::vector<uint8_t> q, scales;
  std::vector<int32_t> offs;  // empty: dense
  ScaleLayout layout = ScaleLayout::kBlocked;
};

// Runs dequantize on the device and the reference; compares the bf16 outputs byte for byte.
void expect_dequantize_matches(const DequantCase& c, uint64_t seed) {
  const int64_t G = int64_t(c.offs.size());
  std::vector<uint8_t> want(size_t(c.rows * c.cols * 2));
  DequantizeParams p;
  p.q = c.q.data();
  p.scales = c.scales.data();
  p.rows = c.rows;
  p.cols = c.cols;
  p.offs = G ? c.offs.data() : nullptr;
  p.layout = c.layout;
  p.num_groups = G;
  p.out = want.data();
  ref::dequantize(p);

  Stream stream;
  GuardedBuffer d_q("q", c.q.size()), d_scales("scales", c.scales.size());
  GuardedBuffer d_offs("offs", c.offs.size() * sizeof(int32_t)), d_out("out", want.size());
  GuardedBuffer d_status("status", sizeof(int32_t));
  d_q.upload(c.q.data(), stream.get());
  d_scales.upload(c.scales.data(), stream.get());
  d_offs.upload(c.offs.data(), stream.get());
  d_out.fill(kPoison, stream.get());
  d_status.fill(kPoison, stream.get());
  p.q = d_q.data();
  p.scales = d_scales.data();
  p.offs = G ? d_offs.as<int32_t>() : nullptr;
  p.out = d_out.data();
  p.status = G ? d_status.as<int32_t>() : nullptr;
  p.stream = stream.get();
  dequantize(p);
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));

  SCOPED_TRACE(
      "seed " + std::to_string(seed) + ", offs " + offs_to_string(c.offs) +
      "; out coordinates are [row, byte] with byte = 2 * element column (+1 for the high byte)");
  for (const GuardedBuffer* b : {&d_q, &d_scales, &d_offs, &d_out, &d_status}) {
    EXPECT_TRUE(b->guards_intact(stream.get()));
  }
  EXPECT_TRUE(d_q.holds(c.q, stream.get()));
  EXPECT_TRUE(d_scales.holds(c.scales, stream.get()));
  EXPECT_TRUE(same_bytes(d_out.download(stream.get()), want, c.cols * 2, "dequantized bf16"));
  if (G) {
    EXPECT_NO_THROW(check_status(d_status.as<int32_t>(), stream.get()));
  }
}

using DequantParam = std::tuple<DequantMode, Shape, Grouping>;
class GpuDequantize : public GpuTestWithParam<DequantParam> {};

TEST_P(GpuDequantize, RandomCodesMatchReference) {
  const auto [mode, shape, grouping] = GetParam();
  const int64_t M = shape.M, K = shape.K;
  const uint64_t seed = test_seed();
  DequantCase c;
  if (mode == DequantMode::kRowwise) {
    c.rows = M;
    c.cols = K;
    if (grouping.G) c.offs = make_offs(M, grouping.G, grouping.fill, seed ^ 1);
    c.layout = grouping.G ? ScaleLayout::kMGroups : ScaleLayout::kBlocked;
    c.scales = random_bytes(size_t(s_row_shape(M, K, grouping.G).bytes()), seed ^ 2);
  } else {
    c.rows = K;
    c.cols = M;
    if (grouping.G) c.offs = make_offs(M, grouping.G, grouping.fill, seed ^ 1);
    c.layout = grouping.G ? ScaleLayout::kKGroups : ScaleLayout::kBlocked;
    c.scales = random_bytes(size_t(s_col_shape(M, K, grouping.G).bytes()), seed ^ 2);
  }
  c.q = random_bytes(size_t(c.rows * c.cols), seed);
  expect_dequantize_matches(c, seed);
}

std::string dequant_name(const ::testing::TestParamInfo<DequantParam>& info) {
  const auto& [mode, shape, grouping] = info.param;
  return std::string(mode == DequantMode::kRowwise ? "rowwise_" : "colwise_") + shape_name(shape) +
         "_" + grouping_name(grouping);
}

INSTANTIATE_TEST_SUITE_P(Rowwise, GpuDequantize,
                         ::testing::Combine(::testing::Values(DequantMode::kRowwise),
                                            ::testing::Values(Shape{96, 160}, Shape{128, 128},
                                                              Shape{256, 512}, Shape{1024, 384},
                                                              Shape{512, 4096}, Shape{8192, 256}),
                                            ::testing::ValuesIn(kGroupings)),
                         dequant_name);
INSTANTIATE_TEST_SUITE_P(Colwise, GpuDequantize,
                         ::testing::Combine(::testing::Values(DequantMode::kColwise),
                                            ::testing::Values(Shape{96, 160}, Shape{128, 128},
                                                              Shape{256, 512}, Shape{1024, 384},
                                                              Shape{8192, 256}),
                                            ::testing::ValuesIn(kGroupings)),
                         dequant_name);

// Every (e4m3 code, scale byte) pair: rows = 256, cols = 256 blocks of 32. Row r holds codes
// 32*(r%8) .. 32*(r%8)+31 in every block; block j of row r has scale (r + j) % 256, so each code
// meets every scale.
class GpuDequantizeAllPairs : public GpuTest {};

TEST_F(GpuDequantizeAllPairs, EveryCodeAgainstEveryScale) {
  DequantCase c;
  c.rows = 256;
  c.cols = 256 * kBlock;
  c.q.resize(size_t(c.rows * c.cols));
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t col = 0; col < c.cols; ++col)
      c.q[size_t(r * c.cols + col)] = uint8_t(32 * (r % 8) + col % kBlock);
  }
  c.scales.assign(size_t(s_row_shape(c.rows, c.cols).bytes()), 0);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < c.cols / kBlock; ++j) {
      c.scales[size_t(blocked_offset(r, j, c.cols / kBlock))] = uint8_t((r + j) % 256);
    }
  }
  expect_dequantize_matches(c, 0);
}

}  // namespace
}  // namespace mxq::test
