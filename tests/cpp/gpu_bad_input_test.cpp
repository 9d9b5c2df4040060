// Bad input on the GPU path (SPEC §9): every op throws mxq::Error naming the argument (and its
// value where it has one) before any launch, and nothing is written: every output still holds the
// poison, every guard band is intact. Also the empty-input rules: M = 0 dense launches nothing; M =
// 0 grouped still owns a zeroed s_col.
#include <algorithm>
#include <cctype>
#include <regex>
#include <tuple>

#include "gpu_util.h"

namespace mxq::test {
namespace {

constexpr int64_t kM = 256;
constexpr int64_t kK = 256;

enum class Api { kRowwise, kColwise, kSwizzle, kFused, kComposed, kDequantize };
const char* api_name(Api a) {
  switch (a) {
    case Api::kRowwise:
      return "rowwise";
    case Api::kColwise:
      return "colwise";
    case Api::kSwizzle:
      return "swizzle";
    case Api::kFused:
      return "fused";
    case Api::kComposed:
      return "composed";
    case Api::kDequantize:
      return "dequantize";
  }
  return "?";
}

// Valid arguments of every op (grouped, G = 2), which a case then breaks in one place.
struct Call {
  RowwiseParams row;
  ColwiseParams col;
  SwizzleParams swizzle;
  DualParams dual;
  DequantizeParams dequant;
  void* workspace = nullptr;
};

void invoke(Api api, const Call& c) {
  switch (api) {
    case Api::kRowwise:
      quantize_rowwise(c.row);
      break;
    case Api::kColwise:
      quantize_colwise(c.col);
      break;
    case Api::kSwizzle:
      swizzle_col_scales(c.swizzle);
      break;
    case Api::kFused:
      quantize_dual(c.dual);
      break;
    case Api::kComposed:
      quantize_dual_composed(c.dual, c.workspace);
      break;
    case Api::kDequantize:
      dequantize(c.dequant);
      break;
  }
}

// `host` is host memory large enough for any buffer of the problem.
using Mutation = void (*)(Call&, uint8_t* host);

struct BadCase {
  std::string name;
  Api api;
  Mutation mutate;
  std::vector<std::string> words;  // must appear in what() as whole words (argument names, values)
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << api_name(c.api) << " " << c.name; }

template <typename T>
T* shifted(T* p, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes));
}

std::vector<BadCase> bad_cases() {
  std::vector<BadCase> cases;
  // Dual: the same breakages for the fused and the composed path.
  const std::vector<std::tuple<std::string, Mutation, std::vector<std::string>>> dual = {
      {"x_host", [](Call& c, uint8_t* h) { c.dual.x = h; }, {"x"}},
      {"x_null", [](Call& c, uint8_t*) { c.dual.x = nullptr; }, {"x"}},
      {"x_misaligned", [](Call& c, uint8_t*) { c.dual.x = shifted(c.dual.x, 2); }, {"x"}},
      {"M_not_multiple_of_128", [](Call& c, uint8_t*) { c.dual.M = 160; }, {"M", "160"}},
      {"K_not_multiple_of_128", [](Call& c, uint8_t*) { c.dual.K = 192; }, {"K", "192"}},
      {"M_negative", [](Call& c, uint8_t*) { c.dual.M = -128; }, {"M", "-128"}},
      {"K_beyond_int32",
       [](Call& c, uint8_t*) { c.dual.K = int64_t(1) << 31; },
       {"K", "2147483648"}},
      {"q_row_null", [](Call& c, uint8_t*) { c.dual.q_row = nullptr; }, {"q_row"}},
      {"s_row_null", [](Call& c, uint8_t*) { c.dual.s_row = nullptr; }, {"s_row"}},
      {"q_col_null", [](Call& c, uint8_t*) { c.dual.q_col = nullptr; }, {"q_col"}},
      {"s_col_null", [](Call& c, uint8_t*) { c.dual.s_col = nullptr; }, {"s_col"}},
      {"q_row_host", [](Call& c, uint8_t* h) { c.dual.q_row = h; }, {"q_row"}},
      {"s_col_host", [](Call& c, uint8_t* h) { c.dual.s_col = h; }, {"s_col"}},
      {"q_col_misaligned",
       [](Call& c, uint8_t*) { c.dual.q_col = shifted(c.dual.q_col, 1); },
       {"q_col"}},
      {"offs_host",
       [](Call& c, uint8_t* h) { c.dual.offs = reinterpret_cast<int32_t*>(h); },
       {"offs"}},
      {"offs_misaligned",
       [](Call& c, uint8_t*) { c.dual.offs = shifted(c.dual.offs, 2); },
       {"offs"}},
      {"num_groups_0_with_offs",
       [](Call& c, uint8_t*) { c.dual.num_groups = 0; },
       {"num_groups", "0"}},
      {"num_groups_above_max",
       [](Call& c, uint8_t*) { c.dual.num_groups = kMaxGroups + 1; },
       {"num_groups", std::to_string(kMaxGroups + 1)}},
      {"num_groups_without_offs",
       [](Call& c, uint8_t*) { c.dual.offs = nullptr; },
       {"num_groups", "2"}},
      {"status_host",
       [](Call& c, uint8_t* h) { c.dual.status = reinterpret_cast<int32_t*>(h); },
       {"status"}},
      {"status_misaligned",
       [](Call& c, uint8_t*) { c.dual.status = shifted(c.dual.status, 1); },
       {"status"}},
      {"rounding_invalid",
       [](Call& c, uint8_t*) { c.dual.rounding = static_cast<ScaleRounding>(7); },
       {"rounding", "7"}},
  };
  for (Api api : {Api::kFused, Api::kComposed}) {
    for (const auto& [name, mutate, words] : dual) cases.push_back({name, api, mutate, words});
  }
  cases.push_back({"workspace_null",
                   Api::kComposed,
                   [](Call& c, uint8_t*) { c.workspace = nullptr; },
                   {"workspace"}});
  cases.push_back({"workspace_host",
                   Api::kComposed,
                   [](Call& c, uint8_t* h) { c.workspace = h; },
                   {"workspace"}});

  cases.push_back({"x_host", Api::kRowwise, [](Call& c, uint8_t* h) { c.row.x = h; }, {"x"}});
  cases.push_back({"M_not_multiple_of_128",
                   Api::kRowwise,
                   [](Call& c, uint8_t*) { c.row.M = 96; },
                   {"M", "96"}});
  cases.push_back(
      {"q_row_null", Api::kRowwise, [](Call& c, uint8_t*) { c.row.q_row = nullptr; }, {"q_row"}});
  cases.push_back(
      {"s_row_host", Api::kRowwise, [](Call& c, uint8_t* h) { c.row.s_row = h; }, {"s_row"}});
  cases.push_back({"rounding_invalid",
                   Api::kRowwise,
                   [](Call& c, uint8_t*) { c.row.rounding = static_cast<ScaleRounding>(-1); },
                   {"rounding", "-1"}});

  cases.push_back({"x_misaligned",
                   Api::kColwise,
                   [](Call& c, uint8_t*) { c.col.x = shifted(c.col.x, 8); },
                   {"x"}});
  cases.push_back({"K_not_multiple_of_128",
                   Api::kColwise,
                   [](Call& c, uint8_t*) { c.col.K = 320; },
                   {"K", "320"}});
  cases.push_back(
      {"q_col_host", Api::kColwise, [](Call& c, uint8_t* h) { c.col.q_col = h; }, {"q_col"}});
  cases.push_back({"s_col_plain_null",
                   Api::kColwise,
                   [](Call& c, uint8_t*) { c.col.s_col_plain = nullptr; },
                   {"s_col_plain"}});

  cases.push_back({"s_col_plain_host",
                   Api::kSwizzle,
                   [](Call& c, uint8_t* h) { c.swizzle.s_col_plain = h; },
                   {"s_col_plain"}});
  cases.push_back({"s_col_null",
                   Api::kSwizzle,
                   [](Call& c, uint8_t*) { c.swizzle.s_col = nullptr; },
                   {"s_col"}});
  cases.push_back({"M_not_multiple_of_128",
                   Api::kSwizzle,
                   [](Call& c, uint8_t*) { c.swizzle.M = 200; },
                   {"M", "200"}});
  cases.push_back({"offs_host",
                   Api::kSwizzle,
                   [](Call& c, uint8_t* h) { c.swizzle.offs = reinterpret_cast<int32_t*>(h); },
                   {"offs"}});
  cases.push_back({"num_groups_0_with_offs",
                   Api::kSwizzle,
                   [](Call& c, uint8_t*) { c.swizzle.num_groups = 0; },
                   {"num_groups", "0"}});

  cases.push_back(
      {"q_null", Api::kDequantize, [](Call& c, uint8_t*) { c.dequant.q = nullptr; }, {"q"}});
  cases.push_back({"scales_host",
                   Api::kDequantize,
                   [](Call& c, uint8_t* h) { c.dequant.scales = h; },
                   {"scales"}});
  cases.push_back(
      {"out_null", Api::kDequantize, [](Call& c, uint8_t*) { c.dequant.out = nullptr; }, {"out"}});
  cases.push_back(
      {"out_host", Api::kDequantize, [](Call& c, uint8_t* h) { c.dequant.out = h; }, {"out"}});
  cases.push_back({"rows_not_multiple_of_128",
                   Api::kDequantize,
                   [](Call& c, uint8_t*) { c.dequant.rows = 224; },
                   {"rows", "224"}});
  cases.push_back({"cols_not_multiple_of_128",
                   Api::kDequantize,
                   [](Call& c, uint8_t*) { c.dequant.cols = 32; },
                   {"cols", "32"}});
  cases.push_back({"num_groups_above_max",
                   Api::kDequantize,
                   [](Call& c, uint8_t*) {
                     c.dequant.offs = c.swizzle.offs;
                     c.dequant.num_groups = kMaxGroups + 1;
                   },
                   {"num_groups", std::to_string(kMaxGroups + 1)}});
  return cases;
}

bool has_word(const std::string& text, const std::string& word) {
  std::string escaped;
  for (char ch : word)
    escaped +=
        std::string(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ? "" : "\\") + ch;
  // Whole word: "x" must not match inside "0x7f..", "q" not inside "q_row", "0" not inside "10".
  return std::regex_search(text, std::regex("(^|[^A-Za-z0-9_])" + escaped + "($|[^A-Za-z0-9_])"));
}

class GpuBadInput : public GpuTestWithParam<BadCase> {};

TEST_P(GpuBadInput, ThrowsNamingTheArgumentAndWritesNothing) {
  const BadCase& bad = GetParam();
  Stream stream;
  const std::vector<uint16_t> x = make_input(kM, kK, Dist::kNormal, test_seed());
  DeviceProblem dev(x, kM, kK, stream.get());
  dev.set_offs({128, 256});
  GuardedBuffer dq_out("dequantize out", size_t(kM * kK * 2));
  std::vector<uint8_t> host(size_t(kM * kK * 4),
                            kPoison);  // host memory big enough for any argument

  Call call;
  call.row = dev.rowwise_params(ScaleRounding::kRceil);
  call.col = dev.colwise_params(ScaleRounding::kRceil);
  call.dual = dev.dual_params(ScaleRounding::kRceil);
  call.workspace = dev.workspace();
  call.swizzle.s_col_plain = dev.s_col_plain().data();
  call.swizzle.M = kM;
  call.swizzle.K = kK;
  call.swizzle.offs = call.dual.offs;
  call.swizzle.num_groups = call.dual.num_groups;
  call.swizzle.s_col = dev.s_col().data();
  call.swizzle.status = call.dual.status;
  call.swizzle.stream = stream.get();
  call.dequant.q = dev.q_row().data();
  call.dequant.scales = dev.s_row().data();
  call.dequant.rows = kM;
  call.dequant.cols = kK;
  call.dequant.out = dq_out.data();
  call.dequant.stream = stream.get();

  dev.poison();
  dq_out.fill(kPoison, stream.get());
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));

  bad.mutate(call, host.data());
  try {
    invoke(bad.api, call);
    ADD_FAILURE() << api_name(bad.api) << " accepted " << bad.name;
  } catch (const Error& e) {
    for (const std::string& w : bad.words) {
      EXPECT_TRUE(has_word(e.what(), w)) << "message should name \"" << w << "\": " << e.what();
    }
  }
  dev.expect_untouched();
  EXPECT_TRUE(dq_out.guards_intact(stream.get()));
  EXPECT_TRUE(dq_out.all_bytes_are(kPoison, stream.get()));
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](uint8_t b) { return b == kPoison; }))
      << "the host buffer passed as an argument was written";
}

INSTANTIATE_TEST_SUITE_P(SpecSection9, GpuBadInput, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           return std::string(api_name(info.param.api)) + "_" + info.param.name;
                         });

// The unbroken arguments of GpuBadInput are accepted (so each case fails for its one breakage).
class GpuValidInput : public GpuTest {};

TEST_F(GpuValidInput, BaseArgumentsAreAccepted) {
  Stream stream;
  const std::vector<uint16_t> x = make_input(kM, kK, Dist::kNormal, test_seed());
  DeviceProblem dev(x, kM, kK, stream.get());
  dev.set_offs({128, 256});
  for (Path path : {Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed}) {
    EXPECT_NO_THROW(dev.run(path, ScaleRounding::kRceil)) << path_name(path);
  }
}

// M = 0: a dense call launches nothing and writes nothing; a grouped call still owns s_col (K, 4G),
// all zero (every group is empty, SPEC §6), and writes status 0.
TEST_F(GpuValidInput, ZeroTokens) {
  Stream stream;
  const std::vector<uint16_t> x;
  DeviceProblem dev(x, 0, kK, stream.get());
  for (Path path : {Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed}) {
    SCOPED_TRACE(path_name(path));
    dev.poison();
    EXPECT_NO_THROW(dev.launch(path, ScaleRounding::kRceil));
    dev.expect_untouched();
  }
  const std::vector<int32_t> offs = {0, 0, 0};
  dev.set_offs(offs);
  for (Path path : {Path::kFused, Path::kComposed}) {
    const HostOutputs got = dev.run(path, ScaleRounding::kRceil);
    EXPECT_TRUE(same_bytes(got.s_col,
                           std::vector<uint8_t>(size_t(s_col_shape(0, kK, 3).bytes()), 0),
                           s_col_shape(0, kK, 3).cols, std::string(path_name(path)) + " s_col"));
    EXPECT_EQ(got.status, 0) << path_name(path) << ": " << describe_status(got.status);
  }
}

}  // namespace
}  // namespace mxq::test
