// layout.h against docs/numerics.md §5-§6: the worked examples, and torchao's own constructions of
// the blocked and K-groups layouts (test_util.h), which reach the same bytes by reshapes instead of
// a formula.
#include <numeric>

#include "test_util.h"

namespace mxq::test {
namespace {

TEST(Layout, Rounding) {
  EXPECT_EQ(ceil_div(0, 4), 0);
  EXPECT_EQ(ceil_div(5, 4), 2);
  EXPECT_EQ(round_up(130, 128), 256);
  EXPECT_EQ(round_up(128, 128), 128);
  EXPECT_EQ(round_up(0, 128), 0);
}

TEST(Layout, OutputShapes) {  // §5.1
  const int64_t M = 544, K = 96;
  EXPECT_EQ(q_row_shape(M, K).rows, M);
  EXPECT_EQ(q_row_shape(M, K).cols, K);
  EXPECT_EQ(q_col_shape(M, K).rows, K);
  EXPECT_EQ(q_col_shape(M, K).cols, M);
  EXPECT_EQ(s_row_plain_shape(M, K).cols, 3);
  EXPECT_EQ(s_col_plain_shape(M, K).rows, K);
  EXPECT_EQ(s_col_plain_shape(M, K).cols, 17);
  EXPECT_EQ(s_row_shape(M, K).rows, 640);
  EXPECT_EQ(s_row_shape(M, K).cols, 4);
  EXPECT_EQ(s_col_shape(M, K).rows, 128);
  EXPECT_EQ(s_col_shape(M, K).cols, 20);
  EXPECT_EQ(s_col_shape(M, K, 3).rows, 128);  // §6: (roundup(K,128), M/32 + 4G)
  EXPECT_EQ(s_col_shape(M, K, 3).cols, 17 + 12);
}

// The shape helpers take 64-bit (or symbolic) sizes only: in int, q_row_shape(262144, 8192).bytes()
// was -2^31 and weight_s_row_shape(64, 65536, 65536).bytes() 0. Narrower integers do not compile.
struct SymbolicSize {};  // stands for c10::SymInt
static_assert(is_shape_int_v<int64_t> && is_shape_int_v<long long> && is_shape_int_v<SymbolicSize>);
static_assert(!is_shape_int_v<int> && !is_shape_int_v<int32_t> && !is_shape_int_v<uint32_t> &&
              !is_shape_int_v<int16_t>);

TEST(Layout, ShapesPast2Pow31Bytes) {
  EXPECT_EQ(q_row_shape<int64_t>(262144, 8192).bytes(), int64_t(1) << 31);
  EXPECT_EQ(weight_s_row_shape<int64_t>(64, 65536, 65536).bytes(), int64_t(1) << 33);
}

// ---- §5.2 worked example R = 130, C = 5 ----

struct Placement {
  int64_t r, c, byte;
};
void PrintTo(const Placement& p, std::ostream* os) {
  *os << "(" << p.r << ", " << p.c << ") -> " << p.byte;
}

class BlockedExample : public ::testing::TestWithParam<Placement> {};

TEST_P(BlockedExample, Offset) {
  const Placement& p = GetParam();
  EXPECT_EQ(blocked_offset(p.r, p.c, 5), p.byte);
}

INSTANTIATE_TEST_SUITE_P(
    R130C5, BlockedExample,
    ::testing::Values(Placement{0, 0, 0}, Placement{1, 0, 16}, Placement{32, 0, 4},
                      Placement{33, 1, 21}, Placement{100, 2, 78}, Placement{127, 3, 511},
                      Placement{0, 4, 512}, Placement{128, 0, 1024}, Placement{129, 4, 1552}),
    [](const auto& info) {
      return "r" + std::to_string(info.param.r) + "_c" + std::to_string(info.param.c);
    });

// §5.2: shape (256, 8); every byte outside rows < 130, cols < 5 is padding.
TEST(BlockedExample, ShapeAndPadding) {
  const Shape2d shape = blocked_shape<int64_t>(130, 5);
  EXPECT_EQ(shape.rows, 256);
  EXPECT_EQ(shape.cols, 8);
  std::vector<int> hits(static_cast<size_t>(shape.bytes()), 0);
  for (int64_t r = 0; r < 130; ++r) {
    for (int64_t c = 0; c < 5; ++c) ++hits[static_cast<size_t>(blocked_offset(r, c, 5))];
  }
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 130 * 5);  // injective, inside the allocation
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 0), 2048 - 130 * 5);
}

// ---- blocked_offset == torchao's to_blocked, for every position of several shapes ----

class BlockedVsTorchao : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(BlockedVsTorchao, EveryPosition) {
  const auto [rows, cols] = GetParam();
  std::vector<int64_t> ids(static_cast<size_t>(rows * cols));
  std::iota(ids.begin(), ids.end(), 1);  // 0 marks padding
  const std::vector<int64_t> blocked = to_blocked(ids, rows, cols);
  ASSERT_EQ(int64_t(blocked.size()), blocked_shape(rows, cols).bytes());
  std::vector<int64_t> got(blocked.size(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      got[static_cast<size_t>(blocked_offset(r, c, cols))] = r * cols + c + 1;
  }
  EXPECT_EQ(got, blocked);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BlockedVsTorchao,
                         ::testing::Values(std::make_pair(1, 1), std::make_pair(32, 1),
                                           std::make_pair(128, 4), std::make_pair(130, 5),
                                           std::make_pair(256, 224), std::make_pair(1000, 17),
                                           std::make_pair(4096, 64)),
                         [](const auto& info) {
                           return std::to_string(info.param.first) + "x" +
                                  std::to_string(info.param.second);
                         });

// ---- §6 K-groups ----

std::vector<KGroup> kgroups(const std::vector<int32_t>& offs, int64_t K) {
  std::vector<KGroup> groups;
  KGroup g;
  for (const int32_t end : offs) groups.push_back(g = next_kgroup(g, end, K));
  return groups;
}

TEST(KGroupsExample, M512K256) {  // §6: offs = [128, 320, 384] (32-aligned)
  const std::vector<KGroup> g = kgroups({128, 320, 384}, 256);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].col_begin, 0);
  EXPECT_EQ(g[1].col_begin, 4);
  EXPECT_EQ(g[2].col_begin, 10);
  EXPECT_EQ(g[0].cols, 4);
  EXPECT_EQ(g[1].cols, 6);
  EXPECT_EQ(g[2].cols, 2);
  EXPECT_EQ(g[0].padded_cols(), 4);  // Q = [4, 8, 4]
  EXPECT_EQ(g[1].padded_cols(), 8);
  EXPECT_EQ(g[2].padded_cols(), 4);
  EXPECT_EQ(g[0].base, 0);
  EXPECT_EQ(g[1].base, 1024);
  EXPECT_EQ(g[2].base, 3072);
  EXPECT_EQ(g[1].offset(200, 9), 2697);
  const Shape2d alloc = s_col_shape(512, 256, 3);
  EXPECT_EQ(alloc.rows, 256);
  EXPECT_EQ(alloc.cols, 28);
  EXPECT_EQ(g[2].base + g[2].padded_cols() * 256, 4096);  // bytes 4096..7167 are slack (zero)
}

// Every K-group placement against torchao's K-groups rearrangement, including empty groups, a tail
// and 32-aligned group sizes (layout.h supports the later widening).
struct KGroupsCase {
  const char* name;
  int64_t M, K;
  std::vector<int32_t> offs;
};
void PrintTo(const KGroupsCase& c, std::ostream* os) { *os << c.name; }

class KGroupsVsTorchao : public ::testing::TestWithParam<KGroupsCase> {};

TEST_P(KGroupsVsTorchao, EveryPosition) {
  const KGroupsCase& t = GetParam();
  const int64_t scale_cols = t.M / kBlock;
  std::vector<uint8_t> plain(static_cast<size_t>(t.K * scale_cols));
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = uint8_t(1 + i % 251);  // never 0
  const std::vector<uint8_t> want = to_kgroups(plain, t.M, t.K, t.offs);
  ASSERT_EQ(int64_t(want.size()), s_col_shape(t.M, t.K, int64_t(t.offs.size())).bytes());
  std::vector<uint8_t> got(want.size(), 0);
  for (const KGroup& g : kgroups(t.offs, t.K)) {
    for (int64_t k = 0; k < t.K; ++k) {
      for (int64_t c = g.col_begin; c < g.col_begin + g.cols; ++c) {
        got[static_cast<size_t>(g.offset(k, c))] = plain[static_cast<size_t>(k * scale_cols + c)];
      }
    }
  }
  const int64_t width = s_col_shape(t.M, t.K, int64_t(t.offs.size())).cols;
  EXPECT_TRUE(bytes_equal(got, want, width, "K-groups"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KGroupsVsTorchao,
    ::testing::Values(KGroupsCase{"spec_example", 512, 256, {128, 320, 384}},
                      KGroupsCase{"one_group_full", 512, 256, {512}},
                      KGroupsCase{"one_group_tail", 512, 384, {256}},
                      KGroupsCase{"empty_groups", 1024, 256, {0, 128, 128, 640, 640}},
                      KGroupsCase{"all_tail", 512, 128, {0, 0}},
                      KGroupsCase{"k_not_128", 512, 96, {64, 96, 416}},
                      KGroupsCase{"many", 2048, 160, {32, 96, 96, 480, 512, 1024, 1056, 1952}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(KGroups, OneFullGroupIsDense) {  // G = 1 covering all of M: the dense blocked layout
  const int64_t M = 1024, K = 384;
  const KGroup g = next_kgroup(KGroup{}, M, K);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t c = 0; c < M / kBlock; ++c) {
      ASSERT_EQ(g.offset(k, c), blocked_offset(k, c, M / kBlock));
    }
  }
}

TEST(KGroups, RegionsFitTheAllocation) {  // §6: M/32 + 4G columns always suffice
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t M = 32 * int64_t(1 + rng() % 512), K = 32 * int64_t(1 + rng() % 16);
    const int G = 1 + int(rng() % 64);
    std::vector<int32_t> offs(static_cast<size_t>(G));
    for (auto& o : offs) o = int32_t(32 * (rng() % (M / 32 + 1)));
    std::sort(offs.begin(), offs.end());
    const KGroup last = kgroups(offs, K).back();
    ASSERT_LE(last.base + last.padded_cols() * round_up(K, kAtomRows), s_col_shape(M, K, G).bytes())
        << "M=" << M << " K=" << K << " G=" << G;
  }
}

}  // namespace
}  // namespace mxq::test
