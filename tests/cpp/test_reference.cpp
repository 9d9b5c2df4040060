// The CPU reference (mxq::ref) against docs/numerics.md: the §4 table byte for byte, a naive
// test-side oracle (plain loops over §2 and torchao's layout constructions of §5-§6), the
// structural identities (colwise(x) = rowwise(x^T); all four outputs in one call = a rowwise-only
// call + a colwise-only call, dense and grouped), the every-byte rule of §7, the status word, and
// dequantize (§8).
#include <cmath>
#include <optional>

#include "test_util.h"

namespace mxq::test {
namespace {

using Bytes = std::vector<uint8_t>;
using Offs = std::optional<std::vector<int32_t>>;
constexpr uint8_t kPoison2 = 0x5A;

std::string mode_name(ScalingMode mode) { return to_string(mode); }

// ---- test-side oracle: §2 with float arithmetic and plain loops ----
// The scalar rules it calls are verified exhaustively in test_numerics.cpp.

uint8_t naive_block(const float* v, ScalingMode mode, uint8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < kBlock; ++i) {
    const float a = std::fabs(v[i]);
    amax = std::isnan(amax) || std::isnan(a) ? NAN : std::max(amax, a);
  }
  const uint8_t s = e8m0_from_amax(amax, mode);
  for (int i = 0; i < kBlock; ++i) q[i] = e4m3_from_f32(mul_rn(v[i], e8m0_reciprocal(s)));
  return s;
}

struct Plain {  // data (rows, cols) and plain scales (rows, cols/32) of 1x32 blocks along rows
  Bytes q, s;
};

// Quantizes a (rows, cols) bf16 matrix along its rows.
Plain naive_rows(const std::vector<uint16_t>& x, int64_t rows, int64_t cols, ScalingMode mode) {
  Plain out{Bytes(x.size()), Bytes(static_cast<size_t>(rows * cols / kBlock))};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols / kBlock; ++j) {
      float v[kBlock];
      for (int i = 0; i < kBlock; ++i) {
        v[i] = bf16_to_f32(x[static_cast<size_t>(r * cols + j * kBlock + i)]);
      }
      out.s[static_cast<size_t>(r * (cols / kBlock) + j)] =
          naive_block(v, mode, &out.q[static_cast<size_t>(r * cols + j * kBlock)]);
    }
  }
  return out;
}

template <typename T>
std::vector<T> transpose(const std::vector<T>& a, int64_t rows, int64_t cols) {
  std::vector<T> t(a.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      t[static_cast<size_t>(c * rows + r)] = a[static_cast<size_t>(r * cols + c)];
    }
  }
  return t;
}

// ---- running the reference ----

struct Problem {
  int64_t M = 0, K = 0;
  ScalingMode mode = ScalingMode::kRceil;
  std::vector<uint16_t> x;
  Offs offs;  // grouped mode when set
  int64_t groups() const { return offs ? int64_t(offs->size()) : 0; }
  const int32_t* offs_ptr() const { return offs ? offs->data() : nullptr; }
};

struct Outputs {  // what reference calls wrote, by name; empty when not produced
  Bytes q_row, s_row, q_col, s_col;
};

::testing::AssertionResult same(const Problem& p, const Outputs& a, const Outputs& b) {
  const struct {
    const char* name;
    const Bytes &got, &want;
    int64_t cols;
  } fields[] = {{"q_row", a.q_row, b.q_row, p.K},
                {"s_row", a.s_row, b.s_row, s_row_shape(p.M, p.K, p.groups()).cols},
                {"q_col", a.q_col, b.q_col, p.M},
                {"s_col", a.s_col, b.s_col, s_col_shape(p.M, p.K, p.groups()).cols}};
  for (const auto& f : fields) {
    const auto r = bytes_equal(f.got, f.want, std::max<int64_t>(f.cols, 1), f.name);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

Bytes poisoned(int64_t bytes, uint8_t poison) { return Bytes(static_cast<size_t>(bytes), poison); }

// Which pairs one mxq::ref::quantize call is given (a null pair skips that axis).
enum class Axes { kRowwise, kColwise, kBoth };

// One mxq::ref::quantize call with the outputs of `axes` poisoned first (offs, and `status` when
// given, in grouped mode).
Outputs run_quantize(const Problem& p, Axes axes, uint8_t poison = kPoison,
                     int32_t* status = nullptr) {
  Outputs o;
  QuantizeParams params;
  params.x = p.x.data();
  params.M = p.M;
  params.K = p.K;
  params.scaling_mode = p.mode;
  params.offs = p.offs_ptr();
  params.num_groups = p.groups();
  params.status = status;
  if (axes != Axes::kColwise) {
    o.q_row = poisoned(q_row_shape(p.M, p.K).bytes(), poison);
    o.s_row = poisoned(s_row_shape(p.M, p.K, p.groups()).bytes(), poison);
    params.q_row = o.q_row.data();
    params.s_row = o.s_row.data();
  }
  if (axes != Axes::kRowwise) {
    o.q_col = poisoned(q_col_shape(p.M, p.K).bytes(), poison);
    o.s_col = poisoned(s_col_shape(p.M, p.K, p.groups()).bytes(), poison);
    params.q_col = o.q_col.data();
    params.s_col = o.s_col.data();
  }
  ref::quantize(params);
  return o;
}

Outputs run_rowwise(const Problem& p, uint8_t poison = kPoison) {
  return run_quantize(p, Axes::kRowwise, poison);
}
Outputs run_colwise(const Problem& p, uint8_t poison = kPoison) {
  return run_quantize(p, Axes::kColwise, poison);
}
Outputs run_fused(const Problem& p, uint8_t poison = kPoison, int32_t* status = nullptr) {
  return run_quantize(p, Axes::kBoth, poison, status);
}

// A rowwise-only call and a colwise-only call: the axes one at a time.
Outputs run_split(const Problem& p, uint8_t poison = kPoison) {
  Outputs o = run_rowwise(p, poison);
  Outputs col = run_colwise(p, poison);
  o.q_col = std::move(col.q_col);
  o.s_col = std::move(col.s_col);
  return o;
}

std::vector<uint16_t> run_dequantize(const Bytes& q, const Bytes& scales, int64_t rows,
                                     int64_t cols, const Offs& offs = std::nullopt,
                                     uint16_t poison = 0xA5A5) {
  std::vector<uint16_t> out(static_cast<size_t>(rows * cols), poison);
  DequantizeParams params;
  params.q = q.data();
  params.scales = scales.data();
  params.rows = rows;
  params.cols = cols;
  params.offs = offs ? offs->data() : nullptr;
  params.num_groups = offs ? int64_t(offs->size()) : 0;
  set_colwise_dequant_layout(params);
  params.out = out.data();
  ref::dequantize(params);
  return out;
}

// ---- §4: the special-value table, byte for byte, through quantize_block and every op ----

std::vector<uint16_t> all(uint16_t v) { return std::vector<uint16_t>(kBlock, v); }
std::vector<uint16_t> alternating(uint16_t v) {  // +v, -v, +v, ...
  std::vector<uint16_t> b(kBlock);
  for (int i = 0; i < kBlock; ++i) b[i] = uint16_t(i % 2 ? v | 0x8000 : v);
  return b;
}
std::vector<uint16_t> ones_plus(uint16_t first) {  // 31 ones and `first` in position 0
  std::vector<uint16_t> b(kBlock, 0x3F80);
  b[0] = first;
  return b;
}
Bytes fill(uint8_t q) { return Bytes(kBlock, q); }
Bytes alternating(uint8_t pos, uint8_t neg) {
  Bytes b(kBlock);
  for (int i = 0; i < kBlock; ++i) b[i] = i % 2 ? neg : pos;
  return b;
}
Bytes first_rest(uint8_t first, uint8_t rest) {
  Bytes b(kBlock, rest);
  b[0] = first;
  return b;
}

struct SpecRow {
  const char* name;
  std::vector<uint16_t> block;
  uint8_t s_rceil;
  Bytes q_rceil;
  uint8_t s_floor;
  Bytes q_floor;
};

const std::vector<SpecRow>& spec_rows() {  // docs/numerics.md §4
  static const std::vector<SpecRow> rows = {
      {"all_zero", all(0x0000), 0, fill(0x00), 0, fill(0x00)},
      {"all_neg_zero", all(0x8000), 0, fill(0x80), 0, fill(0x80)},
      {"all_2pow_m126", all(0x0080), 0, fill(0x40), 0, fill(0x40)},
      {"ones_plus_inf", ones_plus(0x7F80), 255, fill(0x7F), 255, fill(0x7F)},
      {"ones_plus_neg_inf", ones_plus(0xFF80), 255, fill(0x7F), 255, fill(0x7F)},
      {"ones_plus_nan", ones_plus(0x7FC0), 255, fill(0x7F), 255, fill(0x7F)},
      {"all_nan", all(0x7FC0), 255, fill(0x7F), 255, fill(0x7F)},
      {"all_pm448", alternating(0x43E0), 127, alternating(0x7E, 0xFE), 127,
       alternating(0x7E, 0xFE)},
      {"all_pm_bf16_max", alternating(0x7F7F), 247, alternating(0x78, 0xF8), 246,
       alternating(0x7E, 0xFE)},
      {"all_pm_min_subnormal", alternating(0x0001), 0, alternating(0x08, 0x88), 0,
       alternating(0x08, 0x88)},
      {"ones_plus_min_subnormal", ones_plus(0x0001), 119, first_rest(0x00, 0x78), 119,
       first_rest(0x00, 0x78)},
      {"ones_plus_neg_min_subnormal", ones_plus(0x8001), 119, first_rest(0x80, 0x78), 119,
       first_rest(0x80, 0x78)},
      {"ones_plus_bf16_max", ones_plus(0x7F7F), 247, first_rest(0x78, 0x00), 246,
       first_rest(0x7E, 0x00)},
      {"all_pm480", alternating(0x43F0), 128, alternating(0x77, 0xF7), 127,
       alternating(0x7E, 0xFE)},
      {"all_3p5", all(0x4060), 120, fill(0x7E), 120, fill(0x7E)},
      {"all_512", all(0x4400), 128, fill(0x78), 128, fill(0x78)},
  };
  return rows;
}

class SpecTable : public ::testing::TestWithParam<std::tuple<size_t, ScalingMode>> {
 protected:
  const SpecRow& row() const { return spec_rows()[std::get<0>(GetParam())]; }
  ScalingMode mode() const { return std::get<1>(GetParam()); }
  uint8_t want_s() const { return mode() == ScalingMode::kRceil ? row().s_rceil : row().s_floor; }
  const Bytes& want_q() const {
    return mode() == ScalingMode::kRceil ? row().q_rceil : row().q_floor;
  }
};

TEST_P(SpecTable, QuantizeBlock) {
  Bytes q(kBlock);
  EXPECT_EQ(int(quantize_block(row().block.data(), 1, mode(), q.data())), int(want_s()));
  EXPECT_TRUE(bytes_equal(q, want_q(), kBlock, "q"));
  std::vector<uint16_t> strided(kBlock * 3, 0x4000);  // the block at stride 3, as colwise reads it
  for (int i = 0; i < kBlock; ++i) strided[i * 3] = row().block[i];
  EXPECT_EQ(int(quantize_block(strided.data(), 3, mode(), q.data())), int(want_s()));
  EXPECT_TRUE(bytes_equal(q, want_q(), kBlock, "q (strided)"));
}

// The block planted in a random (64, 64) x along row 5 (cols 32..63) and down column 7 (rows
// 32..63); the two placements do not overlap.
TEST_P(SpecTable, ReferenceOps) {
  Problem p{64, 64, mode(), make_input(64, 64, Dist::kNormal, 100 + std::get<0>(GetParam()))};
  for (int i = 0; i < kBlock; ++i) {
    p.x[static_cast<size_t>(5 * 64 + 32 + i)] = row().block[i];
    p.x[static_cast<size_t>((32 + i) * 64 + 7)] = row().block[i];
  }
  const Outputs o = run_split(p);
  const Outputs fused = run_fused(p);
  for (const Outputs* out : {&o, &fused}) {
    EXPECT_TRUE(bytes_equal(Bytes(out->q_row.begin() + 5 * 64 + 32, out->q_row.begin() + 6 * 64),
                            want_q(), kBlock, "q_row[5, 32:64]"));
    EXPECT_TRUE(bytes_equal(Bytes(out->q_col.begin() + 7 * 64 + 32, out->q_col.begin() + 8 * 64),
                            want_q(), kBlock, "q_col[7, 32:64]"));
    EXPECT_EQ(int(out->s_row[blocked_offset(5, 1, 2)]), int(want_s()));
    EXPECT_EQ(int(out->s_col[blocked_offset(7, 1, 2)]), int(want_s()));
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, SpecTable,
                         ::testing::Combine(::testing::Range<size_t>(0, spec_rows().size()),
                                            ::testing::Values(ScalingMode::kRceil,
                                                              ScalingMode::kFloor)),
                         [](const auto& info) {
                           return std::string(spec_rows()[std::get<0>(info.param)].name) + "_" +
                                  mode_name(std::get<1>(info.param));
                         });

// ---- dense mode: shapes x input families x scaling modes ----

using DenseParam = std::tuple<std::pair<int64_t, int64_t>, Dist, ScalingMode>;

class ReferenceDense : public ::testing::TestWithParam<DenseParam> {
 protected:
  Problem problem() const {
    const auto [shape, dist, mode] = GetParam();
    const uint64_t seed =
        uint64_t(shape.first * 7919 + shape.second * 31 + int(dist) * 3 + int(mode));
    return Problem{shape.first, shape.second, mode,
                   make_input(shape.first, shape.second, dist, seed)};
  }
};

TEST_P(ReferenceDense, MatchesNaiveOracle) {  // §2 and §5.2, padding included
  const Problem p = problem();
  const Plain rows = naive_rows(p.x, p.M, p.K, p.mode);
  // Column k of x is row k of x^T.
  const Plain cols = naive_rows(transpose(p.x, p.M, p.K), p.K, p.M, p.mode);
  Outputs want;
  want.q_row = rows.q;
  want.s_row = to_blocked(rows.s, p.M, p.K / kBlock);
  want.q_col = cols.q;
  want.s_col = to_blocked(cols.s, p.K, p.M / kBlock);
  EXPECT_TRUE(same(p, run_split(p), want));
  EXPECT_TRUE(same(p, run_fused(p), want));
}

TEST_P(ReferenceDense, ColwiseIsRowwiseOfTranspose) {  // §5.1
  const Problem p = problem();
  const Problem t{p.K, p.M, p.mode, transpose(p.x, p.M, p.K)};
  const Outputs col = run_colwise(p);
  const Outputs row_of_t = run_rowwise(t);
  EXPECT_TRUE(bytes_equal(col.q_col, row_of_t.q_row, p.M, "q_col(x) vs q_row(x^T)"));
  const int64_t width = s_col_shape(p.M, p.K).cols;
  EXPECT_TRUE(bytes_equal(col.s_col, row_of_t.s_row, width, "s_col(x) vs s_row(x^T)"));
}

// §5.1: one call for both axes gives the bytes of a rowwise-only and a colwise-only call.
TEST_P(ReferenceDense, BothAxesAreTheAxesOneAtATime) {
  const Problem p = problem();
  EXPECT_TRUE(same(p, run_fused(p), run_split(p)));
}

TEST_P(ReferenceDense, EveryByteWritten) {  // §7: two poisons, identical bytes
  const Problem p = problem();
  EXPECT_TRUE(same(p, run_rowwise(p, kPoison), run_rowwise(p, kPoison2)));
  EXPECT_TRUE(same(p, run_colwise(p, kPoison), run_colwise(p, kPoison2)));
  EXPECT_TRUE(same(p, run_fused(p, kPoison), run_fused(p, kPoison2)));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceDense,
    ::testing::Combine(::testing::Values(std::make_pair(32, 32), std::make_pair(64, 96),
                                         std::make_pair(96, 160), std::make_pair(128, 128),
                                         std::make_pair(160, 288), std::make_pair(544, 96),
                                         std::make_pair(256, 1024), std::make_pair(1056, 224)),
                       ::testing::Values(Dist::kNormal, Dist::kWide, Dist::kSpecial),
                       ::testing::Values(ScalingMode::kRceil, ScalingMode::kFloor)),
    [](const auto& info) {
      const auto& shape = std::get<0>(info.param);
      return "M" + std::to_string(shape.first) + "_K" + std::to_string(shape.second) + "_" +
             dist_name(std::get<1>(info.param)) + "_" + mode_name(std::get<2>(info.param));
    });

// ---- grouped mode (§6): 128- and 32-aligned groups, empty groups, an uncovered tail ----

struct GroupedCase {
  const char* name;
  int64_t M, K;
  std::vector<int32_t> offs;
};
void PrintTo(const GroupedCase& c, std::ostream* os) { *os << c.name; }

// G sorted random 128-multiples in [0, M - 128]: empty groups when G is large, always a tail.
std::vector<int32_t> random_offs(int64_t M, int G, uint64_t seed, int64_t align = 128) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> offs(static_cast<size_t>(G));
  for (auto& o : offs) o = int32_t(align * int64_t(rng() % uint64_t(M / align)));
  std::sort(offs.begin(), offs.end());
  return offs;
}

class ReferenceGrouped : public ::testing::TestWithParam<std::tuple<GroupedCase, ScalingMode>> {
 protected:
  Problem problem(bool grouped = true) const {
    const auto& [c, mode] = GetParam();
    Problem p{c.M, c.K, mode,
              make_input(c.M, c.K, Dist::kSpecial, uint64_t(c.M * 3 + c.K + int(mode)))};
    if (grouped) p.offs = c.offs;
    return p;
  }
};

TEST_P(ReferenceGrouped, DataAsDense) {  // §6: q_row and q_col are the dense bytes
  const Problem p = problem();
  Outputs dense = run_fused(problem(/*grouped=*/false));
  dense.s_row.clear();
  dense.s_col.clear();
  for (Outputs grouped : {run_fused(p), run_split(p)}) {
    grouped.s_row.clear();
    grouped.s_col.clear();
    EXPECT_TRUE(same(p, grouped, dense));
  }
}

// §6: the M-groups layout (each group, then the tail, blocked on its own), the slack zero.
TEST_P(ReferenceGrouped, RowScalesAreMGroups) {
  const Problem p = problem();
  const Plain rows = naive_rows(p.x, p.M, p.K, p.mode);
  const Bytes want = to_mgroups(rows.s, p.M, p.K, *p.offs);
  const int64_t width = s_row_shape(p.M, p.K, p.groups()).cols;
  EXPECT_TRUE(bytes_equal(run_fused(p).s_row, want, width, "both axes: s_row"));
  EXPECT_TRUE(bytes_equal(run_rowwise(p).s_row, want, width, "rowwise only: s_row"));
}

// §6: the K-groups layout, the tail's scales zeroed, the slack zero.
TEST_P(ReferenceGrouped, ColScalesAreTorchaoKGroups) {
  const Problem p = problem();
  const Plain cols = naive_rows(transpose(p.x, p.M, p.K), p.K, p.M, p.mode);
  const Bytes want = to_kgroups(cols.s, p.M, p.K, *p.offs);
  const int64_t width = s_col_shape(p.M, p.K, p.groups()).cols;
  EXPECT_TRUE(bytes_equal(run_fused(p).s_col, want, width, "both axes: s_col"));
  EXPECT_TRUE(bytes_equal(run_colwise(p).s_col, want, width, "colwise only: s_col"));
}

TEST_P(ReferenceGrouped, BothAxesAreTheAxesOneAtATime) {
  const Problem p = problem();
  EXPECT_TRUE(same(p, run_fused(p), run_split(p)));
}

TEST_P(ReferenceGrouped, EveryByteWritten) {  // §7
  const Problem p = problem();
  EXPECT_TRUE(same(p, run_rowwise(p, kPoison), run_rowwise(p, kPoison2)));
  EXPECT_TRUE(same(p, run_colwise(p, kPoison), run_colwise(p, kPoison2)));
  EXPECT_TRUE(same(p, run_fused(p, kPoison), run_fused(p, kPoison2)));
}

// mxq.h: the optional status word is written on every call, whatever the axes.
TEST_P(ReferenceGrouped, StatusIsWellFormed) {
  for (Axes axes : {Axes::kRowwise, Axes::kColwise, Axes::kBoth}) {
    int32_t status = 0x5A5A5A5A;
    run_quantize(problem(), axes, kPoison, &status);
    EXPECT_EQ(status, 0) << "axes " << int(axes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ReferenceGrouped,
    ::testing::Combine(
        ::testing::Values(GroupedCase{"g1_full", 512, 256, {512}},
                          GroupedCase{"g1_tail", 512, 384, {256}},
                          GroupedCase{"g4_empty_and_tail", 1024, 384, {0, 256, 256, 640}},
                          GroupedCase{"g4_all_tail", 512, 128, {0, 0, 0, 0}},
                          GroupedCase{"g4_k96", 640, 96, {128, 128, 384, 512}},
                          GroupedCase{"g8_random", 2048, 160, random_offs(2048, 8, 1)},
                          GroupedCase{"g64_random", 4096, 128, random_offs(4096, 64, 2)},
                          // 32-aligned groups (kGroupAlign): atoms shared by no two groups
                          GroupedCase{"g3_docs_example", 512, 256, {128, 320, 384}},
                          GroupedCase{"g5_32_aligned", 640, 160, {32, 32, 96, 416, 608}},
                          GroupedCase{"g8_random32", 2048, 96, random_offs(2048, 8, 3, 32)},
                          GroupedCase{"g64_random32", 4096, 64, random_offs(4096, 64, 4, 32)}),
        ::testing::Values(ScalingMode::kRceil, ScalingMode::kFloor)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" + mode_name(std::get<1>(info.param));
    });

// M = 0: every group is empty, s_row and s_col are all padding and slack and still written, and so
// is the status word.
TEST(ReferenceGroupedEmpty, NoTokens) {
  Problem p{0, 256, ScalingMode::kRceil, {}, std::vector<int32_t>{0, 0}};
  for (Axes axes : {Axes::kRowwise, Axes::kColwise, Axes::kBoth}) {
    int32_t status = 0x5A5A5A5A;
    const Outputs o = run_quantize(p, axes, kPoison, &status);
    EXPECT_EQ(status, 0) << "axes " << int(axes);
    if (axes != Axes::kColwise) {  // M-groups: 128 rows per group, all padding
      ASSERT_EQ(int64_t(o.s_row.size()), 256 * 8);
      EXPECT_TRUE(bytes_equal(o.s_row, Bytes(o.s_row.size(), 0), 8, "s_row"));
    }
    if (axes != Axes::kRowwise) {  // K-groups: 4 columns per group, all slack
      ASSERT_EQ(int64_t(o.s_col.size()), 256 * 8);
      EXPECT_TRUE(bytes_equal(o.s_col, Bytes(o.s_col.size(), 0), 8, "s_col"));
    }
  }
}

// ---- §8 dequantize ----

Bytes random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (auto& v : b) v = uint8_t(rng());
  return b;
}

::testing::AssertionResult bf16_equal(const std::vector<uint16_t>& got,
                                      const std::vector<uint16_t>& want, int64_t cols) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {  // bitwise: NaN outputs are the canonical 0x7FC0
      return ::testing::AssertionFailure()
             << "first mismatch at [" << int64_t(i) / cols << ", " << int64_t(i) % cols
             << "]: got 0x" << std::hex << got[i] << ", want 0x" << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// §8: every code, every scale byte (255 included), random padding bytes.
TEST(Dequantize, DenseDefinition) {
  const int64_t rows = 160, cols = 96;
  const Bytes q = random_bytes(size_t(rows * cols), 1);
  const Bytes s_plain = random_bytes(size_t(rows * cols / kBlock), 2);
  const int64_t scale_cols = cols / kBlock;
  Bytes scales = to_blocked(s_plain, rows, scale_cols);
  const Shape2d padded = blocked_shape(rows, scale_cols);
  const Bytes noise = random_bytes(scales.size(), 3);
  for (int64_t r = 0; r < padded.rows; ++r) {  // padding bytes must not be read
    for (int64_t c = 0; c < padded.cols; ++c) {
      const int64_t at = blocked_offset(r, c, scale_cols);
      if (r >= rows || c >= scale_cols) scales[size_t(at)] = noise[size_t(at)];
    }
  }
  std::vector<uint16_t> want(q.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      want[i] = dequantize_element(q[i], s_plain[size_t(r * (cols / kBlock) + c / kBlock)]);
    }
  }
  EXPECT_TRUE(bf16_equal(run_dequantize(q, scales, rows, cols), want, cols));
  EXPECT_EQ(run_dequantize(q, scales, rows, cols, std::nullopt, 0x1111),
            run_dequantize(q, scales, rows, cols, std::nullopt, 0x2222));  // §7
}

// §8: cols are tokens; the uncovered tail has no scale and gives +0.
TEST(Dequantize, KGroupsDefinition) {
  const int64_t rows = 96, cols = 1024;
  const std::vector<int32_t> offs = {128, 128, 512, 640};
  const Bytes q = random_bytes(size_t(rows * cols), 4);
  const Bytes s_plain = random_bytes(size_t(rows * cols / kBlock), 5);
  const Bytes scales = to_kgroups(s_plain, cols, rows, offs);
  std::vector<uint16_t> want(q.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      want[i] = c < offs.back()
                    ? dequantize_element(q[i], s_plain[size_t(r * (cols / kBlock) + c / kBlock)])
                    : 0;
    }
  }
  EXPECT_TRUE(bf16_equal(run_dequantize(q, scales, rows, cols, offs), want, cols));
  EXPECT_EQ(run_dequantize(q, scales, rows, cols, offs, 0x1111),
            run_dequantize(q, scales, rows, cols, offs, 0x2222));
}

// §8: rows are tokens; the M-groups scales of every segment (the tail included) are placed, so
// every row dequantizes as with the dense layout. Random codes and scales, 32-aligned groups.
TEST(Dequantize, MGroupsDefinition) {
  const int64_t rows = 1024, cols = 96;
  const std::vector<int32_t> offs = {96, 96, 512, 640};
  const Bytes q = random_bytes(size_t(rows * cols), 6);
  const Bytes s_plain = random_bytes(size_t(rows * cols / kBlock), 7);
  std::vector<uint16_t> want(q.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      want[i] = dequantize_element(q[i], s_plain[size_t(r * (cols / kBlock) + c / kBlock)]);
    }
  }
  std::vector<uint16_t> out(q.size(), 0xA5A5);
  const Bytes scales = to_mgroups(s_plain, rows, cols, offs);
  DequantizeParams p;
  p.q = q.data();
  p.scales = scales.data();
  p.rows = rows;
  p.cols = cols;
  p.layout = ScaleLayout::kMGroups;
  p.offs = offs.data();
  p.num_groups = int64_t(offs.size());
  p.out = out.data();
  ref::dequantize(p);
  EXPECT_TRUE(bf16_equal(out, want, cols));
}

class DequantizeRoundTrip : public ::testing::TestWithParam<std::tuple<Dist, ScalingMode>> {};

// |dequantize(quantize(x)) - x| within half an e4m3 step at the block's scale (FLOOR: plus the
// saturation of (448, 512)), plus half a bf16 subnormal step for the final rounding. §8.
::testing::AssertionResult within_block_error(const std::vector<uint16_t>& x, const Bytes& s_plain,
                                              const std::vector<uint16_t>& out, int64_t rows,
                                              int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      const double v = bf16_to_f32(x[i]), got = bf16_to_f32(out[i]);
      const double scale =
          std::ldexp(1.0, int(s_plain[size_t(r * (cols / kBlock) + c / kBlock)]) - 127);
      const double p = std::fabs(v) / scale;
      const double bound =
          std::max({p / 16, std::ldexp(1.0, -10), p - 448}) * scale + std::ldexp(1.0, -134);
      if (!(std::fabs(got - v) <= bound)) {
        return ::testing::AssertionFailure()
               << "at [" << r << ", " << c << "]: x=" << v << " got " << got << ", error "
               << std::fabs(got - v) << " > " << bound;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST_P(DequantizeRoundTrip, WithinBlockError) {
  const auto [dist, mode] = GetParam();
  const int64_t M = 512, K = 256;
  Problem p{M, K, mode, make_input(M, K, dist, 77 + int(dist)), std::vector<int32_t>{128, 384}};
  Outputs o = run_fused(p);
  o.s_row = run_rowwise(Problem{M, K, mode, p.x}).s_row;  // dense blocked, for dense dequantize
  const Plain rows = naive_rows(p.x, M, K, mode);
  const Plain cols = naive_rows(transpose(p.x, M, K), K, M, mode);
  EXPECT_TRUE(within_block_error(p.x, rows.s, run_dequantize(o.q_row, o.s_row, M, K), M, K))
      << "rowwise";
  const std::vector<uint16_t> xt = transpose(p.x, M, K);
  const std::vector<uint16_t> col_dense =
      run_dequantize(o.q_col, to_blocked(cols.s, K, M / kBlock), K, M);
  EXPECT_TRUE(within_block_error(xt, cols.s, col_dense, K, M)) << "colwise";
  // K-groups scales: the same values on covered tokens, +0 on the tail (tokens 384..511).
  std::vector<uint16_t> want = col_dense;
  for (int64_t k = 0; k < K; ++k) {
    std::fill(want.begin() + k * M + 384, want.begin() + (k + 1) * M, 0);
  }
  EXPECT_EQ(run_dequantize(o.q_col, o.s_col, K, M, p.offs), want);
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, DequantizeRoundTrip,
    ::testing::Combine(::testing::Values(Dist::kNormal, Dist::kUniform, Dist::kWide),
                       ::testing::Values(ScalingMode::kRceil, ScalingMode::kFloor)),
    [](const auto& info) {
      return std::string(dist_name(std::get<0>(info.param))) + "_" +
             mode_name(std::get<1>(info.param));
    });

// §8: blocks of e4m3 values times one power of two, each holding +-448 times it, round-trip
// exactly (both scaling modes pick that power of two as the scale).
std::vector<uint16_t> representable_rows(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> x(size_t(rows * cols));
  for (size_t b = 0; b < x.size() / kBlock; ++b) {
    const int e = int(rng() % 221) - 110;
    for (int i = 0; i < kBlock; ++i) {
      const uint8_t code = uint8_t(rng() % 0x7F);  // any finite non-negative code, 0x00..0x7E
      const float v = std::ldexp(e4m3_to_f32(code), e) * (rng() % 2 ? -1.0f : 1.0f);
      x[b * kBlock + size_t(i)] = bf16_from_f32(v);
    }
    x[b * kBlock + rng() % kBlock] = bf16_from_f32(std::ldexp(448.0f, e));
  }
  return x;
}

class DequantizeExact : public ::testing::TestWithParam<ScalingMode> {};

TEST_P(DequantizeExact, RepresentableBlocks) {
  const ScalingMode mode = GetParam();
  const int64_t M = 256, K = 128;
  const Problem row_problem{M, K, mode, representable_rows(M, K, 5)};
  const Outputs r = run_fused(row_problem);
  EXPECT_EQ(run_dequantize(r.q_row, r.s_row, M, K), row_problem.x);
  const std::vector<uint16_t> e = representable_rows(K, M, 6);  // x = e^T: colwise blocks = rows
  const Problem col_problem{M, K, mode, transpose(e, K, M)};
  const Outputs c = run_fused(col_problem);
  EXPECT_EQ(run_dequantize(c.q_col, c.s_col, K, M), e);
}

INSTANTIATE_TEST_SUITE_P(Rules, DequantizeExact,
                         ::testing::Values(ScalingMode::kRceil, ScalingMode::kFloor),
                         [](const auto& info) { return mode_name(info.param); });

}  // namespace
}  // namespace mxq::test
