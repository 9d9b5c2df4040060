// The CPU reference of mxq::grouped_gemm (docs/numerics.md §13.6) on hand-computed cases: a few
// nonzero elements whose product lands at one output element only if every layout (the outer-fastest
// activation factors, the weights' padded tile factors, the colwise factors) and the offs handling
// (group boundaries, empty groups, the M-grouped tail) are read as documented; bf16 rounding of the
// fp32 sum; and the refusals, whole.
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "test_util.h"

namespace mxq::test {
namespace {

constexpr uint8_t kOne = 0x38;    // e4m3 1.0
constexpr uint8_t kTwo = 0x40;    // e4m3 2.0
constexpr uint8_t kThree = 0x44;  // e4m3 3.0
constexpr uint8_t kFour = 0x48;   // e4m3 4.0
constexpr uint16_t kPoison = 0xA5A5;

// Factors that are all different powers of two, so a factor read from the wrong place changes the
// result (and every product stays exact).
std::vector<float> random_factors(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> f(static_cast<size_t>(n));
  for (auto& v : f) v = std::ldexp(1.0f, int(rng() % 9) + 2);  // 4 .. 1024, never 0.5 or 0.25
  return f;
}

struct Case {
  int64_t M, N, K;
  std::vector<int32_t> offs;
  std::vector<uint8_t> a, b;
  std::vector<float> a_scale, b_scale;
  std::vector<uint16_t> out;

  GroupedGemmParams params(Grouping grouping) {
    GroupedGemmParams p;
    p.grouping = grouping;
    p.a = a.data();
    p.a_scale = a_scale.data();
    p.b = b.data();
    p.b_scale = b_scale.data();
    p.offs = offs.data();
    p.num_groups = static_cast<int64_t>(offs.size());
    p.M = M;
    p.N = N;
    p.K = K;
    p.out = out.data();
    return p;
  }
};

// M-grouped: a (M, K), b (G, N, K); 3 groups, group 1 empty, rows 256.. a tail. K/128 = 3: the
// weight's factor rows are padded to 4.
Case m_grouped_case() {
  Case c{384, 256, 384, {128, 128, 256}, {}, {}, {}, {}, {}};
  const int64_t G = 3;
  c.a.assign(c.M * c.K, 0);
  c.b.assign(G * c.N * c.K, 0);
  c.a_scale = random_factors(factor_shape(c.M, c.K).bytes(), 1);
  c.b_scale = random_factors(weight_factor_shape(G, c.N, c.K).bytes(), 2);
  c.out.assign(c.M * c.N, kPoison);
  return c;
}

// K-grouped: a (N, M) = dY's q_col, b (K, M) = X's q_col; 3 groups, group 1 empty.
Case k_grouped_case() {
  Case c{384, 256, 128, {128, 128, 384}, {}, {}, {}, {}, {}};
  const int64_t G = 3;
  c.a.assign(c.N * c.M, 0);
  c.b.assign(c.K * c.M, 0);
  c.a_scale = random_factors(factor_shape(c.N, c.M).bytes(), 3);
  c.b_scale = random_factors(factor_shape(c.K, c.M).bytes(), 4);
  c.out.assign(G * c.N * c.K, kPoison);
  return c;
}

// The element of out that must equal `want`, every other one +0.
::testing::AssertionResult only(const std::vector<uint16_t>& out,
                                const std::vector<std::pair<int64_t, float>>& want) {
  int64_t wrong = 0;
  std::string first;
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    uint16_t expected = 0;
    for (const auto& [at, value] : want) {
      if (at == i) expected = bf16_from_f32(value);
    }
    if (out[i] != expected) {
      if (wrong++ == 0) {
        first = "element " + std::to_string(i) + ": got 0x" + std::to_string(out[i]) + ", want " +
                std::to_string(expected);
      }
    }
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << wrong << " elements differ; first " << first;
}

TEST(GroupedGemmReference, MGroupedReadsEachGroupsExpertAndFactors) {
  Case c = m_grouped_case();
  // Row 130 (group 2), column 257 (K block 2); its factor [130, 2] at 2 * M + 130.
  c.a[130 * c.K + 257] = kTwo;
  c.a_scale[factor_offset(130, 2, c.M)] = 0.5f;
  // Expert 2, output column 200, K 257: tile (1, 2) of expert 2, at 2 * (2 * 4) + 1 * 4 + 2.
  c.b[(2 * c.N + 200) * c.K + 257] = kThree;
  c.b_scale[weight_factor_offset(2, 1, 2, c.N, c.K)] = 0.25f;
  // The same (n, k) of expert 1 (the empty group) and row 10 (group 0) against expert 0's zeros:
  // a wrong expert or group would pick them up.
  c.b[(1 * c.N + 200) * c.K + 257] = kFour;
  c.a[10 * c.K + 257] = kOne;
  // A tail row (past offs[2] = 256): must come out +0 whatever it holds.
  c.a[300 * c.K + 257] = kFour;
  ref::grouped_gemm(c.params(Grouping::kMGrouped));
  EXPECT_TRUE(only(c.out, {{130 * c.N + 200, 2.0f * 0.5f * 3.0f * 0.25f}}));
}

TEST(GroupedGemmReference, MGroupedGroupZero) {
  Case c = m_grouped_case();
  c.a[10 * c.K + 5] = kTwo;  // row 10 (group 0), K block 0
  c.b[(0 * c.N + 7) * c.K + 5] = kThree;
  const float fa = c.a_scale[factor_offset(10, 0, c.M)];
  const float fb = c.b_scale[weight_factor_offset(0, 0, 0, c.N, c.K)];
  ref::grouped_gemm(c.params(Grouping::kMGrouped));
  EXPECT_TRUE(only(c.out, {{10 * c.N + 7, 2.0f * fa * 3.0f * fb}}));
}

TEST(GroupedGemmReference, KGroupedSumsEachGroupsColumnsOnly) {
  Case c = k_grouped_case();
  // Token 200 (group 2, block 1): dY[200, n=5] and X[200, k=7]; factors [5, 1] and [7, 1].
  c.a[5 * c.M + 200] = kTwo;
  c.a_scale[factor_offset(5, 1, c.N)] = 0.5f;
  c.b[7 * c.M + 200] = kThree;
  c.b_scale[factor_offset(7, 1, c.K)] = 0.25f;
  // Token 10 (group 0, block 0) at the same (n, k).
  c.a[5 * c.M + 10] = kOne;
  c.b[7 * c.M + 10] = kFour;
  const float fa0 = c.a_scale[factor_offset(5, 0, c.N)];
  const float fb0 = c.b_scale[factor_offset(7, 0, c.K)];
  ref::grouped_gemm(c.params(Grouping::kKGrouped));
  // out (G, N, K): group 0 at [0, 5, 7], group 2 at [2, 5, 7], the empty group 1 all +0.
  EXPECT_TRUE(only(c.out, {{(0 * c.N + 5) * c.K + 7, 1.0f * fa0 * 4.0f * fb0},
                           {(2 * c.N + 5) * c.K + 7, 2.0f * 0.5f * 3.0f * 0.25f}}));
}

TEST(GroupedGemmReference, RoundsTheFp32SumOnceToBf16) {
  for (const auto& [small, want] :
       std::vector<std::pair<uint8_t, uint16_t>>{{0x02, 0x3F80},  // 1 + 2^-8: a tie, to even (1.0)
                                                 {0x03, 0x3F81}}) {  // 1 + 3 * 2^-9: above the tie
    Case c = m_grouped_case();
    c.a_scale.assign(c.a_scale.size(), 1.0f);
    c.b_scale.assign(c.b_scale.size(), 1.0f);
    c.a[0] = kOne;
    c.a[1] = small;  // e4m3 subnormal: small * 2^-9
    c.b[0] = kOne;
    c.b[1] = kOne;
    ref::grouped_gemm(c.params(Grouping::kMGrouped));
    EXPECT_EQ(c.out[0], want) << "small byte " << int(small);
  }
}

TEST(GroupedGemmReference, EveryGroupEmpty) {
  Case c = k_grouped_case();
  c.offs = {0, 0, 0};
  c.a.assign(c.a.size(), kOne);
  c.b.assign(c.b.size(), kOne);
  ref::grouped_gemm(c.params(Grouping::kKGrouped));
  EXPECT_TRUE(only(c.out, {}));
  Case m = m_grouped_case();
  m.offs = {0, 0, 0};
  m.a.assign(m.a.size(), kOne);
  ref::grouped_gemm(m.params(Grouping::kMGrouped));
  EXPECT_TRUE(only(m.out, {}));
}

// ---- refusals ----

// `what` whole, or (ending in "address ") up to the address, which varies.
void expect_error(const std::function<void()>& call, Error::Kind kind, const std::string& what) {
  try {
    call();
    ADD_FAILURE() << "no error; expected \"" << what << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    const bool to_address = what.size() >= 8 && what.compare(what.size() - 8, 8, "address ") == 0;
    EXPECT_EQ(std::string(e.what()).substr(0, to_address ? what.size() : std::string::npos), what);
  }
}

TEST(GroupedGemmValidation, RefusesBadArguments) {
  using K = Error::Kind;
  const std::string op = "mxq::ref::grouped_gemm: ";
  auto with = [](const std::function<void(GroupedGemmParams&)>& change) {
    return [change] {
      Case c = m_grouped_case();
      GroupedGemmParams p = c.params(Grouping::kMGrouped);
      change(p);
      ref::grouped_gemm(p);
    };
  };
  expect_error(with([](auto& p) { p.K = 200; }), K::kInvalidArgument,
               op + "K must be a multiple of 128, got 200");
  expect_error(with([](auto& p) { p.N = 0; }), K::kInvalidArgument,
               op + "N and K must be positive, got N=0, K=384");
  expect_error(with([](auto& p) { p.M = 100; }), K::kInvalidArgument,
               op + "M must be a multiple of 128, got 100");
  expect_error(with([](auto& p) { p.num_groups = 0; }), K::kInvalidArgument,
               op + "the group count (offs' length) must be 1 to 1024, got 0");
  expect_error(with([](auto& p) { p.grouping = static_cast<Grouping>(7); }), K::kInvalidArgument,
               op + "grouping must be Grouping::kMGrouped or kKGrouped, got 7");
  expect_error(with([](auto& p) { p.b_scale = nullptr; }), K::kInvalidArgument,
               op + "b_scale is null");
  expect_error(with([](auto& p) { p.a = p.a + 1; }), K::kInvalidArgument,
               op + "a must be 16-byte aligned, got address ");
}

TEST(GroupedGemmValidation, RefusesMalformedOffs) {
  using K = Error::Kind;
  const std::string op = "mxq::ref::grouped_gemm: ";
  for (const auto& [offs, message] : std::vector<std::pair<std::vector<int32_t>, std::string>>{
           {{128, 100, 256}, "offs must be non-decreasing, got offs[1]=100 after offs[0]=128"},
           {{128, 192, 256}, "offs[1]=192 is not a multiple of 128 (group sizes must be)"},
           {{128, 256, 512}, "offs[2]=512 exceeds M=384"}}) {
    Case c = m_grouped_case();
    c.offs = offs;
    expect_error([&] { ref::grouped_gemm(c.params(Grouping::kMGrouped)); }, K::kInvalidArgument,
                 op + message);
  }
}

TEST(GroupedGemmValidation, ParsesGroupingsAndSizesWorkspaces) {
  EXPECT_EQ(parse_grouping("m_grouped"), Grouping::kMGrouped);
  EXPECT_EQ(parse_grouping("k_grouped"), Grouping::kKGrouped);
  EXPECT_STREQ(to_string(Grouping::kKGrouped), "k_grouped");
  expect_error([] { parse_grouping("m"); }, Error::Kind::kInvalidArgument,
               "mxq::parse_grouping: grouping must be \"m_grouped\" or \"k_grouped\", got \"m\"");
  // M-grouped carries the copied factors: a's M * K/128 floats and b's G * N/128 * K/128.
  const int64_t m = grouped_gemm_workspace_bytes(Grouping::kMGrouped, 4096, 2048, 7168, 8);
  const int64_t k = grouped_gemm_workspace_bytes(Grouping::kKGrouped, 4096, 2048, 7168, 8);
  EXPECT_EQ(m - k, 4096 * 56 * 4 + 8 * 16 * 56 * 4);
  expect_error([] { grouped_gemm_workspace_bytes(Grouping::kMGrouped, 128, 128, 128, 1025); },
               Error::Kind::kInvalidArgument,
               "mxq::grouped_gemm_workspace_bytes: the group count (offs' length) must be 1 to "
               "1024, got 1025");
}

TEST(GroupedGemmValidation, GpuEntryPointChecksBeforeTheDevice) {
  Case c = m_grouped_case();
  GroupedGemmParams p = c.params(Grouping::kMGrouped);
  expect_error(
      [&] { grouped_gemm(p); }, Error::Kind::kInvalidArgument,
      "mxq::grouped_gemm: workspace is null (it needs grouped_gemm_workspace_bytes("
      "m_grouped, M, N, K, G) = " +
          std::to_string(grouped_gemm_workspace_bytes(Grouping::kMGrouped, c.M, c.N, c.K, 3)) +
          " bytes)");
}

}  // namespace
}  // namespace mxq::test
