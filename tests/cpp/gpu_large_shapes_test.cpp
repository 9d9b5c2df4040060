// GpuLargeShapes: the six benchmark shapes of docs/numerics.md, byte-exact against the CPU
// reference. One input per shape (normal with the docs/numerics.md §4 blocks planted along rows and
// columns), the reference computed once (dense), then compared with the fused, composed, rowwise
// and colwise outputs, dense and in grouped mode (G = 8 with empty groups and a tail; the M-groups
// s_row and the K-groups s_col are the test_util.h rearrangements to_mgroups / to_kgroups of the
// reference's plain scales, so no second reference pass). PastTwoToThe31 adds 131072x16896
// (2.2e9 elements: every offset, scale index and group bound past 32 bits). Costly (131072x16896
// bf16 is 4.4 GB): skip with --gtest_filter=-*GpuLargeShapes* (ctest: -E GpuLargeShapes).
#include "gpu_util.h"

namespace mxq::test {
namespace {

class GpuLargeShapes : public GpuTestWithParam<Shape> {};

std::string param_name(const ::testing::TestParamInfo<Shape>& info) {
  return shape_name(info.param);
}

TEST_P(GpuLargeShapes, AllPathsMatchReference) {
  const int64_t M = GetParam().M, K = GetParam().K;
  const ScalingMode r = ScalingMode::kRceil;
  const uint64_t seed = test_seed();
  const std::vector<int32_t> offs = make_offs(M, 8, GroupFill::kTail, seed ^ 1);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", grouped offs " + offs_to_string(offs));

  const std::vector<uint16_t> x = make_large_special_input(M, K, seed);
  HostOutputs want = reference_outputs(x, M, K, {}, r);
  std::vector<uint8_t> want_mgroups = to_mgroups(want.s_row_plain, M, K, offs);
  std::vector<uint8_t> want_kgroups = to_kgroups(want.s_col_plain, M, K, offs);

  Stream stream;
  DeviceProblem dev(x, M, K, stream.get());
  // Large outputs: guards are checked after every run; the "unowned outputs still poisoned"
  // downloads are not.
  for (Path path : {Path::kFused, Path::kComposed, Path::kRowwise, Path::kColwise}) {
    expect_matches_reference(dev.run(path, r, kPoison, /*check_untouched=*/false), want, path, M, K,
                             0, "dense");
  }
  dev.set_offs(offs);
  // q_row and q_col are those of dense mode (docs/numerics.md §6).
  std::swap(want.s_row, want_mgroups);
  std::swap(want.s_col, want_kgroups);
  for (Path path : {Path::kFused, Path::kComposed, Path::kRowwise, Path::kColwise}) {
    expect_matches_reference(dev.run(path, r, kPoison, /*check_untouched=*/false), want, path, M, K,
                             8, "grouped");
  }
}

INSTANTIATE_TEST_SUITE_P(BenchmarkShapes, GpuLargeShapes,
                         ::testing::Values(Shape{8192, 2048}, Shape{8192, 7168}, Shape{32768, 2048},
                                           Shape{32768, 7168}, Shape{131072, 2048},
                                           Shape{131072, 7168}),
                         param_name);

INSTANTIATE_TEST_SUITE_P(PastTwoToThe31, GpuLargeShapes, ::testing::Values(Shape{131072, 16896}),
                         param_name);

}  // namespace
}  // namespace mxq::test
