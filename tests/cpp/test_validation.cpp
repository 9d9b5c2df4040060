// Bad input gives a clear mxq::Error naming the argument and its value, and nothing is written
// (docs/numerics.md §9). The reference entry points are checked in full; the GPU entry points for
// the checks that come before any pointer or device check, and for refusing cleanly in a build
// without CUDA.
#include <functional>
#include <utility>

#include "test_util.h"

namespace mxq::test {
namespace {

using Bytes = std::vector<uint8_t>;

// Runs f; succeeds when it throws mxq::Error whose message contains every part.
::testing::AssertionResult throws_error(const std::function<void()>& f,
                                        const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& part : parts) {
      if (what.find(part) == std::string::npos) {
        return ::testing::AssertionFailure()
               << "message \"" << what << "\" lacks \"" << part << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-mxq exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

TEST(ParseScaleRounding, AcceptsExactlyTheTwoNames) {
  EXPECT_EQ(parse_scale_rounding("rceil"), ScaleRounding::kRceil);
  EXPECT_EQ(parse_scale_rounding("floor"), ScaleRounding::kFloor);
  EXPECT_STREQ(to_string(ScaleRounding::kRceil), "rceil");
  EXPECT_STREQ(to_string(ScaleRounding::kFloor), "floor");
  for (const std::string bad :
       {"RCEIL", "Floor", "rceil ", " floor", "", "ceil", "even", "rne", "floor\n"}) {
    EXPECT_TRUE(
        throws_error([&] { parse_scale_rounding(bad); }, {"scaling_mode", "\"" + bad + "\""}))
        << "name \"" << bad << "\"";
  }
}

TEST(DescribeStatus, NamesEveryBit) {
  EXPECT_EQ(describe_status(0), "ok");
  const std::string all = describe_status(kOffsDecreasing | kOffsBeyondM | kOffsMisaligned);
  EXPECT_NE(all.find("decrease"), std::string::npos) << all;
  EXPECT_NE(all.find("exceeds M"), std::string::npos) << all;
  EXPECT_NE(all.find("128"), std::string::npos) << all;
}

// ---- the reference entry points ----

// Valid host arguments for every op (M = 256, K = 128, two groups), outputs poisoned.
struct Args {
  static constexpr int64_t M = 256, K = 128;
  std::vector<uint16_t> x = make_input(M, K, Dist::kNormal, 3);
  std::vector<int32_t> offs = {128, 256};
  Bytes q_row = Bytes(size_t(M * K), kPoison);
  Bytes s_row = Bytes(size_t(s_row_shape(M, K).bytes()), kPoison);
  Bytes q_col = Bytes(size_t(M * K), kPoison);
  Bytes s_col_plain = Bytes(size_t(s_col_plain_shape(M, K).bytes()), kPoison);
  Bytes s_col = Bytes(size_t(s_col_shape(M, K, 2).bytes()), kPoison);
  std::vector<uint16_t> out = std::vector<uint16_t>(size_t(M * K), 0xA5A5);
  int32_t status = 0x5A5A5A5A;

  RowwiseParams rowwise() {
    return {x.data(), M, K, ScaleRounding::kRceil, q_row.data(), s_row.data()};
  }
  ColwiseParams colwise() {
    return {x.data(), M, K, ScaleRounding::kRceil, q_col.data(), s_col_plain.data()};
  }
  SwizzleParams swizzle() {
    return {s_col_plain.data(), M, K, offs.data(), int64_t(offs.size()), s_col.data(), &status};
  }
  DualParams dual() {
    DualParams p;
    p.x = x.data();
    p.M = M;
    p.K = K;
    p.offs = offs.data();
    p.num_groups = int64_t(offs.size());
    p.q_row = q_row.data();
    p.s_row = s_row.data();
    p.q_col = q_col.data();
    p.s_col = s_col.data();
    p.status = &status;
    return p;
  }
  DequantizeParams dequantize() {  // q_col (K, M) with K-groups scales: cols are tokens
    DequantizeParams p;
    p.q = q_col.data();
    p.scales = s_col.data();
    p.rows = K;
    p.cols = M;
    p.offs = offs.data();
    p.num_groups = int64_t(offs.size());
    p.out = out.data();
    p.status = &status;
    return p;
  }

  bool untouched() const {
    for (const Bytes* b : {&q_row, &s_row, &q_col, &s_col_plain, &s_col}) {
      if (std::any_of(b->begin(), b->end(), [](uint8_t v) { return v != kPoison; })) return false;
    }
    return status == 0x5A5A5A5A &&
           std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == 0xA5A5; });
  }
};

// The baseline that each bad case below breaks once. Grouped ops write the status word (0: offs are
// well formed) on every call.
TEST(RefValidationBasics, ValidArgumentsPass) {
  Args a;
  EXPECT_NO_THROW(ref::quantize_rowwise(a.rowwise()));
  EXPECT_NO_THROW(ref::quantize_colwise(a.colwise()));
  EXPECT_NO_THROW(ref::swizzle_col_scales(a.swizzle()));
  EXPECT_EQ(std::exchange(a.status, 0x5A5A5A5A), 0);
  EXPECT_NO_THROW(ref::quantize_dual(a.dual()));
  EXPECT_EQ(std::exchange(a.status, 0x5A5A5A5A), 0);
  EXPECT_NO_THROW(ref::dequantize(a.dequantize()));
  EXPECT_EQ(a.status, 0);
}

struct BadCase {
  const char* name;
  std::function<void(Args&)> call;
  std::vector<std::string> message;  // parts what() must contain: the argument and its value
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class RefValidation : public ::testing::TestWithParam<BadCase> {};

TEST_P(RefValidation, ThrowsNamingArgumentAndWritesNothing) {
  Args a;
  EXPECT_TRUE(throws_error([&] { GetParam().call(a); }, GetParam().message));
  EXPECT_TRUE(a.untouched());
}

// Calls a reference op with Args' valid params for it after one edit.
template <typename Params, typename Edit>
std::function<void(Args&)> on_ref(Params (Args::*make)(), void (*op)(const Params&), Edit edit) {
  return [=](Args& a) {
    Params p = (a.*make)();
    edit(p);
    op(p);
  };
}
template <typename Edit>
std::function<void(Args&)> rowwise(Edit edit) {
  return on_ref(&Args::rowwise, ref::quantize_rowwise, edit);
}
template <typename Edit>
std::function<void(Args&)> colwise(Edit edit) {
  return on_ref(&Args::colwise, ref::quantize_colwise, edit);
}
template <typename Edit>
std::function<void(Args&)> swizzle(Edit edit) {
  return on_ref(&Args::swizzle, ref::swizzle_col_scales, edit);
}
template <typename Edit>
std::function<void(Args&)> dual(Edit edit) {
  return on_ref(&Args::dual, ref::quantize_dual, edit);
}
template <typename Edit>
std::function<void(Args&)> dequant(Edit edit) {
  return on_ref(&Args::dequantize, ref::dequantize, edit);
}

// Malformed offs (two groups, M = 256).
constexpr int32_t kOffsDecreasing[] = {256, 128};
constexpr int32_t kOffsNegative[] = {-128, 128};
constexpr int32_t kOffsBeyondM[] = {128, 384};
constexpr int32_t kOffsMisaligned[] = {96, 256};
constexpr int32_t kOffsMisalignedLast[] = {128, 160};

const std::vector<BadCase> kBadCases = {
    // dimensions (§9): multiples of 32 on the CPU, non-negative, at most 2^31 - 1
    {"rowwise_M_48", rowwise([](auto& p) { p.M = 48; }), {"M must be a multiple of 32", "M=48"}},
    {"rowwise_K_40", rowwise([](auto& p) { p.K = 40; }), {"K must be a multiple of 32", "K=40"}},
    {"rowwise_M_negative",
     rowwise([](auto& p) { p.M = -32; }),
     {"M must be non-negative", "M=-32"}},
    {"rowwise_K_2pow31",
     rowwise([](auto& p) { p.K = int64_t(1) << 31; }),
     {"at most 2^31-1", "K=2147483648"}},
    {"colwise_M_16", colwise([](auto& p) { p.M = 16; }), {"M must be a multiple of 32", "M=16"}},
    {"swizzle_K_100", swizzle([](auto& p) { p.K = 100; }), {"K must be a multiple of 32", "K=100"}},
    {"dual_M_2pow32",
     dual([](auto& p) { p.M = int64_t(1) << 32; }),
     {"at most 2^31-1", "M=4294967296"}},
    {"dequantize_rows_48",
     dequant([](auto& p) { p.rows = 48; }),
     {"rows must be a multiple of 32", "rows=48"}},
    {"dequantize_cols_72",
     dequant([](auto& p) { p.cols = 72; }),
     {"cols must be a multiple of 32", "cols=72"}},
    // pointers
    {"rowwise_x_null", rowwise([](auto& p) { p.x = nullptr; }), {"x is null"}},
    {"rowwise_x_misaligned",
     rowwise([](auto& p) { p.x = static_cast<const uint16_t*>(p.x) + 1; }),
     {"x must be 16-byte aligned"}},
    {"rowwise_q_row_null", rowwise([](auto& p) { p.q_row = nullptr; }), {"q_row is null"}},
    {"rowwise_s_row_null", rowwise([](auto& p) { p.s_row = nullptr; }), {"s_row is null"}},
    {"colwise_q_col_null", colwise([](auto& p) { p.q_col = nullptr; }), {"q_col is null"}},
    {"colwise_s_col_plain_null",
     colwise([](auto& p) { p.s_col_plain = nullptr; }),
     {"s_col_plain is null"}},
    {"swizzle_s_col_plain_null",
     swizzle([](auto& p) { p.s_col_plain = nullptr; }),
     {"s_col_plain is null"}},
    {"swizzle_s_col_null", swizzle([](auto& p) { p.s_col = nullptr; }), {"s_col is null"}},
    {"dual_x_null", dual([](auto& p) { p.x = nullptr; }), {"x is null"}},
    {"dual_q_col_null", dual([](auto& p) { p.q_col = nullptr; }), {"q_col is null"}},
    {"dual_s_col_null", dual([](auto& p) { p.s_col = nullptr; }), {"s_col is null"}},
    {"dequantize_q_null", dequant([](auto& p) { p.q = nullptr; }), {"q is null"}},
    {"dequantize_scales_null", dequant([](auto& p) { p.scales = nullptr; }), {"scales is null"}},
    {"dequantize_out_null", dequant([](auto& p) { p.out = nullptr; }), {"out is null"}},
    // the rounding rule
    {"rowwise_rounding_7",
     rowwise([](auto& p) { p.rounding = static_cast<ScaleRounding>(7); }),
     {"rounding", "got 7"}},
    {"dual_rounding_minus1",
     dual([](auto& p) { p.rounding = static_cast<ScaleRounding>(-1); }),
     {"rounding", "got -1"}},
    // groups
    {"swizzle_groups_without_offs",
     swizzle([](auto& p) { p.offs = nullptr; }),
     {"num_groups must be 0", "num_groups=2"}},
    {"dual_offs_zero_groups",
     dual([](auto& p) { p.num_groups = 0; }),
     {"num_groups must be in [1, 1024]", "num_groups=0"}},
    {"dequantize_1025_groups",
     dequant([](auto& p) { p.num_groups = 1025; }),
     {"num_groups must be in [1, 1024]", "num_groups=1025"}},
    // offs contents, read on the host by the reference: index and value named
    {"swizzle_offs_decreasing",
     swizzle([](auto& p) { p.offs = kOffsDecreasing; }),
     {"non-decreasing", "offs[1]=128", "after 256"}},
    {"swizzle_offs_negative",
     swizzle([](auto& p) { p.offs = kOffsNegative; }),
     {"non-negative", "offs[0]=-128"}},
    {"swizzle_offs_beyond_M",
     swizzle([](auto& p) { p.offs = kOffsBeyondM; }),
     {"must not exceed M=256", "offs[1]=384"}},
    {"swizzle_offs_misaligned",
     swizzle([](auto& p) { p.offs = kOffsMisaligned; }),
     {"multiples of 128", "offs[0]=96"}},
    {"dual_offs_decreasing",
     dual([](auto& p) { p.offs = kOffsDecreasing; }),
     {"non-decreasing", "offs[1]=128"}},
    {"dual_offs_beyond_M",
     dual([](auto& p) { p.offs = kOffsBeyondM; }),
     {"must not exceed M=256", "offs[1]=384"}},
    {"dual_offs_misaligned",
     dual([](auto& p) { p.offs = kOffsMisalignedLast; }),
     {"multiples of 128", "offs[1]=160"}},
    {"dequantize_offs_beyond_cols",
     dequant([](auto& p) { p.offs = kOffsBeyondM; }),
     {"must not exceed cols=256", "offs[1]=384"}},
    {"dequantize_offs_misaligned",
     dequant([](auto& p) { p.offs = kOffsMisaligned; }),
     {"multiples of 128", "offs[0]=96"}},
};

INSTANTIATE_TEST_SUITE_P(Cases, RefValidation, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(RefValidationBasics, EmptyShapesNeedNoBuffers) {  // §9: a zero-sized x gives empty outputs
  EXPECT_NO_THROW(
      ref::quantize_rowwise({nullptr, 0, 128, ScaleRounding::kRceil, nullptr, nullptr}));
  EXPECT_NO_THROW(
      ref::quantize_colwise({nullptr, 128, 0, ScaleRounding::kFloor, nullptr, nullptr}));
  EXPECT_NO_THROW(ref::quantize_dual({nullptr, 0, 0}));
  EXPECT_NO_THROW(ref::dequantize({nullptr, nullptr, 0, 64}));
}

// ---- the GPU entry points ----

// Valid host buffers at a GPU-legal shape (M = K = 128).
struct GpuArgs {
  static constexpr int64_t M = 128, K = 128;
  std::vector<uint16_t> x = std::vector<uint16_t>(size_t(M * K), 0x3F80);
  Bytes q_row = Bytes(size_t(M * K)), s_row = Bytes(size_t(s_row_shape(M, K).bytes()));
  Bytes q_col = Bytes(size_t(M * K)), s_col = Bytes(size_t(s_col_shape(M, K).bytes()));
  Bytes s_col_plain = Bytes(size_t(s_col_plain_shape(M, K).bytes()));
  std::vector<uint16_t> out = std::vector<uint16_t>(size_t(M * K));

  RowwiseParams rowwise() {
    return {x.data(), M, K, ScaleRounding::kRceil, q_row.data(), s_row.data()};
  }
  ColwiseParams colwise() {
    return {x.data(), M, K, ScaleRounding::kRceil, q_col.data(), s_col_plain.data()};
  }
  SwizzleParams swizzle() { return {s_col_plain.data(), M, K, nullptr, 0, s_col.data()}; }
  DualParams dual() {
    DualParams p;
    p.x = x.data();
    p.M = M;
    p.K = K;
    p.q_row = q_row.data();
    p.s_row = s_row.data();
    p.q_col = q_col.data();
    p.s_col = s_col.data();
    return p;
  }
  DequantizeParams dequantize() {
    return {q_row.data(), s_row.data(), M, K, nullptr, 0, out.data()};
  }
};

// Calls a GPU entry point with GpuArgs' valid params for it after one edit.
template <typename Params, typename Edit>
std::function<void()> on_gpu(Params (GpuArgs::*make)(), void (*op)(const Params&), Edit edit) {
  return [=] {
    GpuArgs a;
    Params p = (a.*make)();
    edit(p);
    op(p);
  };
}

void dual_composed(const DualParams& p) { quantize_dual_composed(p, nullptr); }

struct GpuCase {
  const char* name;
  std::function<void()> call;
  std::vector<std::string> message;
};
void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.name; }

const std::vector<std::string> kM96 = {"M must be a multiple of 128 on the GPU path", "M=96"};
const std::vector<std::string> kK160 = {"K must be a multiple of 128 on the GPU path", "K=160"};

const std::vector<GpuCase> kGpuCases = {
    {"rowwise_M_96", on_gpu(&GpuArgs::rowwise, quantize_rowwise, [](auto& p) { p.M = 96; }), kM96},
    {"rowwise_K_160", on_gpu(&GpuArgs::rowwise, quantize_rowwise, [](auto& p) { p.K = 160; }),
     kK160},
    {"rowwise_M_negative",
     on_gpu(&GpuArgs::rowwise, quantize_rowwise, [](auto& p) { p.M = -128; }),
     {"M must be non-negative", "M=-128"}},
    {"colwise_M_96", on_gpu(&GpuArgs::colwise, quantize_colwise, [](auto& p) { p.M = 96; }), kM96},
    {"swizzle_K_160", on_gpu(&GpuArgs::swizzle, swizzle_col_scales, [](auto& p) { p.K = 160; }),
     kK160},
    {"dual_M_96", on_gpu(&GpuArgs::dual, quantize_dual, [](auto& p) { p.M = 96; }), kM96},
    {"dual_composed_K_160", on_gpu(&GpuArgs::dual, dual_composed, [](auto& p) { p.K = 160; }),
     kK160},
    {"dequantize_rows_96",
     on_gpu(&GpuArgs::dequantize, dequantize, [](auto& p) { p.rows = 96; }),
     {"rows must be a multiple of 128 on the GPU path", "rows=96"}},
    {"dequantize_cols_32",
     on_gpu(&GpuArgs::dequantize, dequantize, [](auto& p) { p.cols = 32; }),
     {"cols must be a multiple of 128 on the GPU path", "cols=32"}},
};

class GpuValidation : public ::testing::TestWithParam<GpuCase> {};

// The dimension checks come first, so these messages are the same with or without CUDA.
TEST_P(GpuValidation, DimensionChecksComeFirst) {
  EXPECT_TRUE(throws_error(GetParam().call, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuValidation, ::testing::ValuesIn(kGpuCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(GpuValidationBasics, EmptyShapesLaunchNothing) {  // §9: no launch, so no device is needed
  EXPECT_NO_THROW(quantize_rowwise({nullptr, 0, 128}));
  EXPECT_NO_THROW(quantize_colwise({nullptr, 128, 0}));
  EXPECT_NO_THROW(quantize_dual({nullptr, 0, 0}));
  EXPECT_NO_THROW(dequantize({nullptr, nullptr, 128, 0}));
}

#ifndef MXQ_WITH_CUDA
TEST(GpuValidationBasics, BuildWithoutCudaRefusesClearly) {
  GpuArgs a;
  const std::vector<std::string> no_cuda = {"no CUDA support"};
  EXPECT_TRUE(throws_error([&] { quantize_rowwise(a.rowwise()); }, no_cuda));
  EXPECT_TRUE(throws_error([&] { quantize_colwise(a.colwise()); }, no_cuda));
  EXPECT_TRUE(throws_error([&] { swizzle_col_scales(a.swizzle()); }, no_cuda));
  EXPECT_TRUE(throws_error([&] { quantize_dual(a.dual()); }, no_cuda));
  EXPECT_TRUE(
      throws_error([&] { quantize_dual_composed(a.dual(), a.s_col_plain.data()); }, no_cuda));
  EXPECT_TRUE(throws_error([&] { dequantize(a.dequantize()); }, no_cuda));
  const int32_t offs[1] = {128};
  EXPECT_TRUE(throws_error([&] { validate_offs(offs, 1, 128, nullptr); }, no_cuda));
  EXPECT_TRUE(throws_error([&] { check_status(offs, nullptr); }, no_cuda));
  EXPECT_FALSE(gpu_available());
  EXPECT_NE(build_info().find("CPU only"), std::string::npos) << build_info();
}
#endif

}  // namespace
}  // namespace mxq::test
