// Bad input on the GPU path (docs/numerics.md §9): every entry point throws mxq::Error
// (kInvalidArgument) naming the argument (and its value where it has one) before any launch, and
// nothing is written: every output still holds the poison, every guard band is intact. Also the
// rules of the one params struct (a null data/scale pair skips that axis; half a pair, no axis at
// all, or a status word without offs is refused; the composed path needs both axes) and the
// empty-input rules: M = 0 dense launches nothing; M = 0 grouped still owns a zeroed s_col and the
// status word, on every path that has them; grouped dequantize of an empty q still writes the
// status word.
//
// Pointer residency (a host pointer given to a GPU entry point) is not checked by mxq any more (it
// cost microseconds per call; mxq.h), so no case here passes host memory.
#include <algorithm>
#include <cctype>
#include <regex>
#include <tuple>

#include "gpu_util.h"

namespace mxq::test {
namespace {

constexpr int64_t kM = 256;
constexpr int64_t kK = 256;

// The entry point and the axes it is given: mxq::quantize with rowwise, colwise or both pairs,
// mxq::quantize_composed, mxq::dequantize.
enum class Api { kRowwise, kColwise, kFused, kComposed, kDequantize };
const char* api_name(Api a) {
  switch (a) {
    case Api::kRowwise:
      return "rowwise";
    case Api::kColwise:
      return "colwise";
    case Api::kFused:
      return "fused";
    case Api::kComposed:
      return "composed";
    case Api::kDequantize:
      return "dequantize";
  }
  return "?";
}
const char* op_of(Api a) {
  switch (a) {
    case Api::kComposed:
      return "mxq::quantize_composed";
    case Api::kDequantize:
      return "mxq::dequantize";
    default:
      return "mxq::quantize";
  }
}

// Valid arguments of every entry point (grouped, G = 2), which a case then breaks in one place.
struct Call {
  QuantizeParams q;  // the pairs of the Api's axes set, the others null
  DequantizeParams dequant;
  void* workspace = nullptr;
  uint8_t* spare = nullptr;  // a valid, 16-byte aligned device buffer of kM * kK bytes
};

void invoke(Api api, const Call& c) {
  switch (api) {
    case Api::kRowwise:
    case Api::kColwise:
    case Api::kFused:
      quantize(c.q);
      break;
    case Api::kComposed:
      quantize_composed(c.q, c.workspace);
      break;
    case Api::kDequantize:
      dequantize(c.dequant);
      break;
  }
}

using Mutation = void (*)(Call&);

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
  using Words = std::vector<std::string>;
  std::vector<BadCase> cases;
  // Breakages that do not depend on the axes: every quantize Api.
  const std::vector<std::tuple<std::string, Mutation, Words>> common = {
      {"x_null", [](Call& c) { c.q.x = nullptr; }, {"x", "null"}},
      {"x_misaligned", [](Call& c) { c.q.x = shifted(c.q.x, 2); }, {"x", "16-byte"}},
      {"M_not_multiple_of_32", [](Call& c) { c.q.M = 144; }, {"M", "32", "144"}},
      {"K_not_multiple_of_32", [](Call& c) { c.q.K = 200; }, {"K", "32", "200"}},
      {"M_negative", [](Call& c) { c.q.M = -128; }, {"M", "-128"}},
      {"K_beyond_int32", [](Call& c) { c.q.K = int64_t(1) << 31; }, {"K", "2147483648"}},
      {"offs_misaligned", [](Call& c) { c.q.offs = shifted(c.q.offs, 2); }, {"offs"}},
      {"num_groups_0_with_offs", [](Call& c) { c.q.num_groups = 0; }, {"offs", "G", "0"}},
      {"num_groups_above_max",
       [](Call& c) { c.q.num_groups = kMaxGroups + 1; },
       {"offs", "G", std::to_string(kMaxGroups + 1)}},
      {"num_groups_without_offs", [](Call& c) { c.q.offs = nullptr; }, {"num_groups", "2"}},
      {"status_without_offs",
       [](Call& c) {
         c.q.offs = nullptr;
         c.q.num_groups = 0;
       },
       {"status", "offs"}},
      {"status_misaligned", [](Call& c) { c.q.status = shifted(c.q.status, 1); }, {"status"}},
      {"scaling_mode_invalid",
       [](Call& c) { c.q.scaling_mode = static_cast<ScalingMode>(7); },
       {"scaling_mode", "7"}},
      {"nothing_to_compute",
       [](Call& c) { c.q.q_row = c.q.s_row = c.q.q_col = c.q.s_col = nullptr; },
       {"nothing to compute"}},
  };
  for (Api api : {Api::kRowwise, Api::kColwise, Api::kFused, Api::kComposed}) {
    for (const auto& [name, mutate, words] : common) cases.push_back({name, api, mutate, words});
  }
  // Half a pair: the message names both members (a null pair would skip the axis).
  const std::vector<std::tuple<std::string, Mutation, Words>> rowwise_pair = {
      {"q_row_null", [](Call& c) { c.q.q_row = nullptr; }, {"q_row", "s_row", "both"}},
      {"s_row_null", [](Call& c) { c.q.s_row = nullptr; }, {"q_row", "s_row", "both"}},
      {"q_row_misaligned", [](Call& c) { c.q.q_row = shifted(c.q.q_row, 8); }, {"q_row"}},
      {"s_row_misaligned", [](Call& c) { c.q.s_row = shifted(c.q.s_row, 4); }, {"s_row"}},
  };
  const std::vector<std::tuple<std::string, Mutation, Words>> colwise_pair = {
      {"q_col_null", [](Call& c) { c.q.q_col = nullptr; }, {"q_col", "s_col", "both"}},
      {"s_col_null", [](Call& c) { c.q.s_col = nullptr; }, {"q_col", "s_col", "both"}},
      {"q_col_misaligned", [](Call& c) { c.q.q_col = shifted(c.q.q_col, 1); }, {"q_col"}},
      {"s_col_misaligned", [](Call& c) { c.q.s_col = shifted(c.q.s_col, 2); }, {"s_col"}},
  };
  for (Api api : {Api::kRowwise, Api::kFused, Api::kComposed}) {
    for (const auto& [name, mutate, words] : rowwise_pair) {
      cases.push_back({name, api, mutate, words});
    }
  }
  for (Api api : {Api::kColwise, Api::kFused, Api::kComposed}) {
    for (const auto& [name, mutate, words] : colwise_pair) {
      cases.push_back({name, api, mutate, words});
    }
  }
  // Half of the skipped axis' pair given.
  cases.push_back({"q_col_without_s_col",
                   Api::kRowwise,
                   [](Call& c) { c.q.q_col = c.spare; },
                   {"q_col", "s_col", "both"}});
  cases.push_back({"s_col_without_q_col",
                   Api::kRowwise,
                   [](Call& c) { c.q.s_col = c.spare; },
                   {"q_col", "s_col", "both"}});
  cases.push_back({"q_row_without_s_row",
                   Api::kColwise,
                   [](Call& c) { c.q.q_row = c.spare; },
                   {"q_row", "s_row", "both"}});
  cases.push_back({"s_row_without_q_row",
                   Api::kColwise,
                   [](Call& c) { c.q.s_row = c.spare; },
                   {"q_row", "s_row", "both"}});
  // The composed path: both axes and its workspace.
  cases.push_back({"rowwise_only",
                   Api::kComposed,
                   [](Call& c) { c.q.q_col = c.q.s_col = nullptr; },
                   {"composed", "both", "q_col", "s_col"}});
  cases.push_back({"colwise_only",
                   Api::kComposed,
                   [](Call& c) { c.q.q_row = c.q.s_row = nullptr; },
                   {"composed", "both", "q_row", "s_row"}});
  cases.push_back(
      {"workspace_null", Api::kComposed, [](Call& c) { c.workspace = nullptr; }, {"workspace"}});

  cases.push_back({"q_null", Api::kDequantize, [](Call& c) { c.dequant.q = nullptr; }, {"q"}});
  cases.push_back(
      {"scales_null", Api::kDequantize, [](Call& c) { c.dequant.scales = nullptr; }, {"scales"}});
  cases.push_back(
      {"out_null", Api::kDequantize, [](Call& c) { c.dequant.out = nullptr; }, {"out"}});
  cases.push_back({"out_misaligned",
                   Api::kDequantize,
                   [](Call& c) { c.dequant.out = shifted(c.dequant.out, 2); },
                   {"out"}});
  cases.push_back({"rows_not_multiple_of_32",
                   Api::kDequantize,
                   [](Call& c) { c.dequant.rows = 240; },
                   {"rows", "240"}});
  cases.push_back({"cols_not_multiple_of_32",
                   Api::kDequantize,
                   [](Call& c) { c.dequant.cols = 48; },
                   {"cols", "48"}});
  cases.push_back({"num_groups_above_max",
                   Api::kDequantize,
                   [](Call& c) {
                     c.dequant.offs = c.q.offs;
                     set_colwise_dequant_layout(c.dequant);
                     c.dequant.num_groups = kMaxGroups + 1;
                   },
                   {"offs", "G", std::to_string(kMaxGroups + 1)}});
  cases.push_back({"status_without_offs",
                   Api::kDequantize,
                   [](Call& c) { c.dequant.status = c.q.status; },
                   {"status", "offs"}});
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
  GuardedBuffer spare("spare", size_t(kM * kK));

  Call call;
  switch (bad.api) {
    case Api::kRowwise:
      call.q = dev.params(Path::kRowwise, ScalingMode::kRceil);
      break;
    case Api::kColwise:
      call.q = dev.params(Path::kColwise, ScalingMode::kRceil);
      break;
    default:
      call.q = dev.params(Path::kFused, ScalingMode::kRceil);
      break;
  }
  call.workspace = dev.workspace();
  call.spare = spare.data();
  call.dequant.q = dev.q_row().data();
  call.dequant.scales = dev.s_row().data();
  call.dequant.rows = kM;
  call.dequant.cols = kK;
  call.dequant.out = dq_out.data();
  call.dequant.stream = stream.get();

  dev.poison();
  dq_out.fill(kPoison, stream.get());
  spare.fill(kPoison, stream.get());
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));

  bad.mutate(call);
  try {
    invoke(bad.api, call);
    ADD_FAILURE() << api_name(bad.api) << " accepted " << bad.name;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument) << what;
    const std::string op = std::string(op_of(bad.api)) + ": ";
    EXPECT_EQ(what.rfind(op, 0), 0u) << "what() should start with \"" << op << "\": " << what;
    EXPECT_EQ(what, op + e.message());
    for (const std::string& w : bad.words) {
      EXPECT_TRUE(has_word(what, w)) << "message should name \"" << w << "\": " << what;
    }
  }
  dev.expect_untouched();
  for (const GuardedBuffer* b : {&dq_out, &spare}) {
    EXPECT_TRUE(b->guards_intact(stream.get()));
    EXPECT_TRUE(b->all_bytes_are(kPoison, stream.get()));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuBadInput, ::testing::ValuesIn(bad_cases()),
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
    EXPECT_NO_THROW(dev.run(path, ScalingMode::kRceil)) << path_name(path);
  }
  GuardedBuffer dq_out("dequantize out", size_t(kM * kK * 2));
  DequantizeParams d;
  d.q = dev.q_row().data();
  d.scales = dev.s_row().data();
  d.rows = kM;
  d.cols = kK;
  d.out = dq_out.data();
  d.stream = stream.get();
  EXPECT_NO_THROW(dequantize(d));
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
}

// M = 0 (docs/numerics.md §6, §9): a dense call launches nothing and writes nothing; a grouped call
// still owns the status word (every path writes 0) and the grouped scale allocations, all zero
// (every group is empty): s_row (128G, K/32 rounded) with the rowwise axis, s_col (K, 4G) with the
// colwise axis. DeviceProblem::run checks that nothing else is written.
TEST_F(GpuValidInput, ZeroTokens) {
  Stream stream;
  const std::vector<uint16_t> x;
  DeviceProblem dev(x, 0, kK, stream.get());
  for (Path path : {Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed}) {
    SCOPED_TRACE(path_name(path));
    dev.poison();
    EXPECT_NO_THROW(dev.launch(path, ScalingMode::kRceil));
    dev.expect_untouched();
  }
  const std::vector<int32_t> offs = {0, 0, 0};
  dev.set_offs(offs);
  const Shape2d s_row = s_row_shape(0, kK, 3), s_col = s_col_shape(0, kK, 3);
  ASSERT_GT(s_row.bytes(), 0);
  ASSERT_GT(s_col.bytes(), 0);
  for (Path path : {Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed}) {
    SCOPED_TRACE(path_name(path));
    const HostOutputs got = dev.run(path, ScalingMode::kRceil);
    if (has_rowwise(path)) {
      EXPECT_TRUE(same_bytes(got.s_row, std::vector<uint8_t>(size_t(s_row.bytes()), 0), s_row.cols,
                             std::string(path_name(path)) + " s_row"));
    }
    if (has_colwise(path)) {
      EXPECT_TRUE(same_bytes(got.s_col, std::vector<uint8_t>(size_t(s_col.bytes()), 0), s_col.cols,
                             std::string(path_name(path)) + " s_col"));
    }
    EXPECT_EQ(got.status, 0) << describe_status(got.status);
    // The status word reports on the offs: malformed ones are reported with M = 0 too.
    dev.set_offs({128, 0, 0});
    const HostOutputs bad = dev.run(path, ScalingMode::kRceil);
    EXPECT_EQ(bad.status, kOffsBeyondM | kOffsDecreasing) << describe_status(bad.status);
    dev.set_offs(offs);
  }
}

// M = 0 grouped as a framework calls it: the zero-byte buffers null (a zero-size tensor has no
// storage), only s_col (the K-groups slack) and the status word given. s_col is zero-filled, the
// status word written, nothing else touched.
TEST_F(GpuValidInput, ZeroTokensNullEmptyBuffers) {
  Stream stream;
  const std::vector<int32_t> offs = {0, 0};
  const Shape2d shape = s_col_shape(0, kK, 2);
  GuardedBuffer d_offs("offs", offs.size() * sizeof(int32_t)),
      s_col("s_col", size_t(shape.bytes()));
  GuardedBuffer status("status", sizeof(int32_t));
  d_offs.upload(offs.data(), stream.get());
  for (bool with_q_col : {false, true}) {
    SCOPED_TRACE(with_q_col ? "q_col given" : "q_col null");
    s_col.fill(kPoison, stream.get());
    status.fill(kPoison, stream.get());
    QuantizeParams p;
    p.M = 0;
    p.K = kK;
    p.offs = d_offs.as<int32_t>();
    p.num_groups = 2;
    p.s_col = s_col.data();
    p.q_col = with_q_col ? s_col.data() : nullptr;  // 0 bytes: never written through
    p.status = status.as<int32_t>();
    p.stream = stream.get();
    EXPECT_NO_THROW(quantize(p));
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
    for (const GuardedBuffer* b : {&d_offs, &s_col, &status}) {
      EXPECT_TRUE(b->guards_intact(stream.get()));
    }
    EXPECT_TRUE(same_bytes(s_col.download(stream.get()),
                           std::vector<uint8_t>(size_t(shape.bytes()), 0), shape.cols, "s_col"));
    EXPECT_NO_THROW(check_status(status.as<int32_t>(), stream.get()));
  }
}

// K = 0: no data and no scale bytes at all. Dense, nothing is launched; grouped, every path still
// writes its status word (its launch keeps one appended CTA for it although no slack needs
// zeroing).
TEST_F(GpuValidInput, ZeroFeatures) {
  Stream stream;
  const std::vector<uint16_t> x;
  DeviceProblem dev(x, kM, 0, stream.get());
  for (Path path : {Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed}) {
    SCOPED_TRACE(path_name(path));
    dev.poison();
    EXPECT_NO_THROW(dev.launch(path, ScalingMode::kRceil));
    dev.expect_untouched();
  }
  dev.set_offs({128, 256});
  ASSERT_EQ(s_row_shape(kM, 0, 2).bytes(), 0);
  ASSERT_EQ(s_col_shape(kM, 0, 2).bytes(), 0);
  for (Path path : {Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed}) {
    SCOPED_TRACE(path_name(path));
    const HostOutputs got = dev.run(path, ScalingMode::kRceil);
    EXPECT_EQ(got.status, 0) << "the status word was not written: " << describe_status(got.status);
  }
}

// dequantize of an empty q (rows or cols 0), grouped: no output bytes, but the status word is still
// written (mxq.h: on every call), as quantize's M = 0 and K = 0 calls write it, and it reports on
// offs against the tokens (rows for M-groups, cols for K-groups). The zero-byte buffers are null, as
// a framework passes them; nothing but the status word is touched.
TEST_F(GpuValidInput, DequantizeEmptyWritesStatus) {
  Stream stream;
  const std::vector<int32_t> good = {0, 0}, bad = {128, 0};
  GuardedBuffer d_offs("offs", good.size() * sizeof(int32_t));
  GuardedBuffer status("status", sizeof(int32_t));
  const std::pair<int64_t, int64_t> shapes[] = {{0, kK}, {kM, 0}, {0, 0}};
  for (ScaleLayout layout : {ScaleLayout::kMGroups, ScaleLayout::kKGroups}) {
    for (const auto& [rows, cols] : shapes) {
      for (const std::vector<int32_t>* offs : {&good, &bad}) {
        const int64_t tokens = layout == ScaleLayout::kMGroups ? rows : cols;
        SCOPED_TRACE(std::string(layout == ScaleLayout::kMGroups ? "M-groups" : "K-groups") +
                     " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " offs " +
                     offs_to_string(*offs));
        d_offs.upload(offs->data(), stream.get());
        status.fill(kPoison, stream.get());
        DequantizeParams p;
        p.rows = rows;
        p.cols = cols;
        p.layout = layout;
        p.offs = d_offs.as<int32_t>();
        p.num_groups = int64_t(offs->size());
        p.status = status.as<int32_t>();
        p.stream = stream.get();
        EXPECT_NO_THROW(dequantize(p));
        MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
        EXPECT_TRUE(d_offs.guards_intact(stream.get()));
        EXPECT_TRUE(status.guards_intact(stream.get()));
        EXPECT_TRUE(d_offs.holds(as_bytes(*offs), stream.get()));
        int32_t word = 0;
        const std::vector<uint8_t> s = status.download(stream.get());
        std::memcpy(&word, s.data(), sizeof word);
        const int32_t want =
            offs == &good ? 0 : kOffsDecreasing | (128 > tokens ? int32_t(kOffsBeyondM) : 0);
        EXPECT_EQ(word, want) << "got " << describe_status(word) << "; expected "
                              << describe_status(want);
      }
    }
  }
}

}  // namespace
}  // namespace mxq::test
