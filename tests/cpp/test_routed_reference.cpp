// The routed input stage's CPU reference (mxq::ref::quantize_routed, docs/numerics.md §12.1) against
// the composition written in routed_util.h from the spec (gather, scale as torch would, pad, then
// ref::quantize with offs_p), byte for byte; its host checks of index and counts; and the fp32 ->
// fp16 rounding it uses, over every fp32 pattern.
#include <functional>
#include <thread>

#include "routed_util.h"

namespace mxq::test {
namespace {

struct RefCase {
  DType dtype;
  ScalingMode mode;
  Routing routing;
  bool scaled;
  int64_t T, K, N, E;
};

std::string ref_case_name(const ::testing::TestParamInfo<RefCase>& info) {
  const RefCase& c = info.param;
  return std::string(to_string(c.dtype)) + "_" + to_string(c.mode) + "_" + routing_name(c.routing) +
         (c.scaled ? "_scaled" : "") + "_T" + std::to_string(c.T) + "_K" + std::to_string(c.K) +
         "_N" + std::to_string(c.N) + "_E" + std::to_string(c.E);
}

std::vector<RefCase> ref_cases() {
  std::vector<RefCase> cases;
  for (DType d : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    for (ScalingMode m : {ScalingMode::kRceil, ScalingMode::kFloor}) {
      for (Routing r : {Routing::kRandom, Routing::kEmpty, Routing::kOneExpert,
                        Routing::kDuplicates, Routing::kAligned}) {
        for (bool scaled : {false, true}) cases.push_back({d, m, r, scaled, 45, 160, 197, 7});
      }
    }
  }
  cases.push_back(
      {DType::kBFloat16, ScalingMode::kRceil, Routing::kRandom, true, 300, 64, 600, 256});
  cases.push_back({DType::kFloat16, ScalingMode::kFloor, Routing::kEmpty, true, 17, 32, 40, 33});
  cases.push_back({DType::kBFloat16, ScalingMode::kRceil, Routing::kRandom, false, 8, 96, 0, 5});
  cases.push_back(
      {DType::kFloat32, ScalingMode::kRceil, Routing::kOneExpert, true, 64, 288, 257, 1});
  return cases;
}

class RoutedReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(RoutedReference, EqualsTheComposition) {
  const RefCase& c = GetParam();
  const RoutedProblem p = make_routed_problem(c.dtype, c.T, c.K, c.N, c.E, c.routing, c.scaled,
                                              std::hash<std::string>{}(ref_case_name({c, 0})));
  const RoutedOutputs want = composed_routed(p, c.mode, true, true);
  for (IndexType it : {IndexType::kInt32, IndexType::kInt64}) {
    const RoutedOutputs got = reference_routed(p, c.mode, true, true, it, it);
    EXPECT_TRUE(same_routed(got, want, p.Mp(), p.K)) << "index type " << int(it);
  }
  // One axis at a time: the same bytes for that axis.
  const RoutedOutputs row = reference_routed(p, c.mode, true, false);
  EXPECT_EQ(row.q_row, want.q_row);
  EXPECT_EQ(row.s_row, want.s_row);
  const RoutedOutputs col = reference_routed(p, c.mode, false, true, IndexType::kInt64);
  EXPECT_EQ(col.q_col, want.q_col);
  EXPECT_EQ(col.s_col, want.s_col);
}

INSTANTIATE_TEST_SUITE_P(Cases, RoutedReference, ::testing::ValuesIn(ref_cases()), ref_case_name);

// ---- the host checks of the reference ----

struct Call {
  RoutedProblem p = make_routed_problem(DType::kBFloat16, 10, 64, 40, 3, Routing::kRandom, true, 7);
  RoutedOutputs o = routed_buffers(p, true, true);
  std::vector<uint8_t> index = int_bytes(p.index, IndexType::kInt32);
  std::vector<uint8_t> counts = int_bytes(p.counts, IndexType::kInt32);
  QuantizeRoutedParams params() {
    index = int_bytes(p.index, IndexType::kInt32);
    counts = int_bytes(p.counts, IndexType::kInt32);
    QuantizeRoutedParams rp;
    rp.x = p.x.data();
    rp.T = p.T;
    rp.K = p.K;
    rp.index = index.data();
    rp.N = p.N;
    rp.counts = counts.data();
    rp.num_experts = p.E;
    rp.scale = p.scale.data();
    rp.q_row = o.q_row.data();
    rp.s_row = o.s_row.data();
    rp.q_col = o.q_col.data();
    rp.s_col = o.s_col.data();
    rp.offs_p = o.offs_p.data();
    rp.dest = o.dest.data();
    return rp;
  }
};

void expect_error(const QuantizeRoutedParams& rp, const std::string& text) {
  try {
    ref::quantize_routed(rp);
    ADD_FAILURE() << "no error, expected: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("mxq::ref::quantize_routed: ", 0), 0u) << e.what();
  }
}

TEST(RoutedReferenceErrors, IndexOutOfRange) {
  Call c;
  c.p.index[5] = c.p.T;
  expect_error(c.params(), "index[5]=10 is outside [0, T) for T=10");
  c.p.index[5] = -1;
  expect_error(c.params(), "index[5]=-1 is outside [0, T)");
  // Nothing written.
  EXPECT_TRUE(
      std::all_of(c.o.q_row.begin(), c.o.q_row.end(), [](uint8_t b) { return b == kPoison; }));
  EXPECT_TRUE(std::all_of(c.o.offs_p.begin(), c.o.offs_p.end(),
                          [](int32_t v) { return v == int32_t(0xA5A5A5A5); }));
}

TEST(RoutedReferenceErrors, Counts) {
  Call c;
  c.p.counts[0] += 1;
  expect_error(c.params(), "counts must sum to N=40");
  c.p.counts[0] -= 2;
  expect_error(c.params(), "counts must sum to N=40, got 39");
  c.p.counts[0] = -1;
  expect_error(c.params(), "counts[0]=-1 is negative");
}

TEST(RoutedReferenceErrors, Sizes) {
  Call c;
  QuantizeRoutedParams rp = c.params();
  rp.K = 48;
  expect_error(rp, "K must be a multiple of 32, got 48");
  rp = c.params();
  rp.num_experts = 0;
  expect_error(rp, "counts must hold 1 to 1024 experts, got E=0");
  rp.num_experts = 1025;
  expect_error(rp, "counts must hold 1 to 1024 experts, got E=1025");
  rp = c.params();
  rp.N = -1;
  expect_error(rp, "N (routed rows, the length of index) must be in [0, 2^31-1], got -1");
  rp = c.params();
  rp.index = nullptr;
  expect_error(rp, "index is null");
  rp = c.params();
  rp.dest = nullptr;
  expect_error(rp, "dest is null");
  rp = c.params();
  rp.q_col = nullptr;
  expect_error(rp, "q_col is null but s_col is set");
  rp = c.params();
  rp.q_row = rp.s_row = rp.q_col = rp.s_col = nullptr;
  expect_error(rp, "nothing to compute");
  rp = c.params();
  rp.index_type = static_cast<IndexType>(3);
  expect_error(rp, "index_type must be IndexType::kInt32 or kInt64, got 3");
  EXPECT_THROW(check_routed_sizes(0, 32, int64_t(1) << 31, 1), Error);
  EXPECT_THROW(check_routed_sizes(0, 32, (int64_t(1) << 31) - 40, 2), Error);  // Mp too large
  EXPECT_NO_THROW(check_routed_sizes(0, 32, 0, 1));
  EXPECT_EQ(quantize_routed_workspace_bytes(100, 3), padded_rows<int64_t>(100, 3) * 8);
}

TEST(RoutedLayout, PaddedRows) {
  // docs/numerics.md §12's example, without the tail: sizes [37, 0, 1, 32] -> 224 rows for M=75.
  EXPECT_EQ(padded_rows<int64_t>(75, 4), 224);
  EXPECT_EQ(padded_rows<int64_t>(0, 1), 32);
  EXPECT_EQ(padded_rows<int64_t>(32, 1), 64);
}

// ---- f16_from_f32 against the compiler's IEEE conversion ----
// Every 2^32 pattern takes minutes with a software conversion on the CPU, so: every upper 20 bits
// (sign, exponent, top of the mantissa) with the low 12 bits at the rounding boundaries of both the
// normal (13 dropped bits) and the subnormal fp16 range, plus a strided sweep of all patterns.
TEST(RoutedNumerics, F16FromF32) {
  const auto check = [](uint32_t bits, uint64_t& bad, uint32_t& first) {
    const float f = f32_from_bits(bits);
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    if (std::isnan(f)) want = kF16CanonicalNan;
    if (f16_from_f32(f) != want && bad++ == 0) first = bits;
  };
  const uint32_t lows[] = {0x000, 0x001, 0x7FF, 0x800, 0x801, 0xFFF, 0x555, 0xAAA};
  const uint64_t n = uint64_t(1) << 32;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<uint64_t> bad(threads, 0);
  std::vector<uint32_t> first(threads, 0);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (uint64_t hi = (uint64_t(1) << 20) * t / threads;
           hi < (uint64_t(1) << 20) * (t + 1) / threads; ++hi) {
        for (uint32_t lo : lows) check(static_cast<uint32_t>(hi << 12) | lo, bad[t], first[t]);
      }
      for (uint64_t i = t; i < n; i += 257 * uint64_t(threads)) {
        check(static_cast<uint32_t>(i), bad[t], first[t]);
      }
    });
  }
  for (auto& th : pool) th.join();
  for (unsigned t = 0; t < threads; ++t) {
    EXPECT_EQ(bad[t], 0u) << "first mismatch at fp32 pattern 0x" << std::hex << first[t];
  }
}

}  // namespace
}  // namespace mxq::test
