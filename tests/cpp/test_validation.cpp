// Bad input gives a clear mxq::Error naming the argument and its value, and nothing is written
// (docs/numerics.md §9). Every refusal is checked whole: its kind (kInvalidArgument for a bad
// argument, kUnsupported for a build without CUDA), what() = "<op>: <message>" with the op named
// exactly once, the message itself, and no source location or internal expression in it.
// The reference entry points are checked in full; the GPU entry points for every check that comes
// before the device (they run here without one, on host buffers that are never touched), and for
// refusing cleanly in a build without CUDA. The rules of the one params struct: a null data/scale
// pair skips that axis, half a pair is refused naming both, no axis at all is "nothing to compute",
// a status word needs offs, the composed path needs both axes.
#include <functional>
#include <regex>
#include <utility>

#include "../../src/host/testing.h"
#include "test_util.h"

namespace mxq::test {
namespace {

using Bytes = std::vector<uint8_t>;

// ---- expected messages: exact text, with patterns only where a value is an address ----

// `text` as a regular expression matching exactly itself.
std::string exact(const std::string& text) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(text, special, R"(\$&)");
}
const std::string kAddr = "0x[0-9a-f]+";  // how std::ostream prints a non-null pointer

// A user-facing message: no source location, no internal expression. ("[" appears only in an
// offs entry, "offs[i]=v".)
::testing::AssertionResult reads_as_a_user_message(const std::string& what) {
  for (const char* bad : {".cpp:", ".h:", ".cu:", ".cuh:", "__", "==", "!=", "&&", "||", "->",
                          " % ", "MXQ_", "detail::", "p."}) {
    if (what.find(bad) != std::string::npos) {
      return ::testing::AssertionFailure() << "\"" << what << "\" contains \"" << bad << "\"";
    }
  }
  for (size_t at = what.find('['); at != std::string::npos; at = what.find('[', at + 1)) {
    if (at < 4 || what.compare(at - 4, 4, "offs") != 0) {
      return ::testing::AssertionFailure()
             << "\"" << what << "\" has a bracket that is no offs entry at " << at;
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs f; succeeds when it throws mxq::Error of `kind` whose what() is `op` + ": " + message(),
// names `op` exactly once, and whose message() matches `message` (a regular expression) whole.
::testing::AssertionResult throws_error(const std::function<void()>& f, const std::string& op,
                                        const std::string& message,
                                        Error::Kind kind = Error::Kind::kInvalidArgument) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (e.kind() != kind) {
      return ::testing::AssertionFailure()
             << "kind " << int(e.kind()) << " instead of " << int(kind) << ": " << what;
    }
    if (what != op + ": " + e.message()) {
      return ::testing::AssertionFailure() << "what() \"" << what << "\" is not \"" << op
                                           << ": \" + message() \"" << e.message() << "\"";
    }
    if (e.message().find(op) != std::string::npos || e.message().find("mxq::") == 0) {
      return ::testing::AssertionFailure() << "the op is named more than once: " << what;
    }
    if (!std::regex_match(e.message(), std::regex(message))) {
      return ::testing::AssertionFailure()
             << "message \"" << e.message() << "\" does not match \"" << message << "\"";
    }
    return reads_as_a_user_message(what);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-mxq exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

TEST(DTypeNames, AreTheCommandLineNames) {
  EXPECT_STREQ(to_string(DType::kBFloat16), "bf16");
  EXPECT_STREQ(to_string(DType::kFloat16), "fp16");
  EXPECT_STREQ(to_string(DType::kFloat32), "fp32");
}

TEST(ParseScalingMode, AcceptsExactlyTheThreeNames) {
  EXPECT_EQ(parse_scaling_mode("rceil"), ScalingMode::kRceil);
  EXPECT_EQ(parse_scaling_mode("floor"), ScalingMode::kFloor);
  EXPECT_EQ(parse_scaling_mode("fp32"), ScalingMode::kFp32);
  EXPECT_STREQ(to_string(ScalingMode::kRceil), "rceil");
  EXPECT_STREQ(to_string(ScalingMode::kFloor), "floor");
  EXPECT_STREQ(to_string(ScalingMode::kFp32), "fp32");
  for (const std::string bad : {"RCEIL", "Floor", "rceil ", " floor", "", "ceil", "even", "rne",
                                "floor\n", "FP32", "f32", "pow2", "fp32 "}) {
    try {
      parse_scaling_mode(bad);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
      // The parser names itself (§9); the torch layer puts its own op before message().
      const std::string message =
          "scaling_mode must be \"rceil\", \"floor\" or \"fp32\", got \"" + bad + "\"";
      EXPECT_EQ(e.message(), message);
      EXPECT_EQ(std::string(e.what()), "mxq::parse_scaling_mode: " + message);
    }
  }
}

TEST(DescribeStatus, NamesEveryBit) {
  EXPECT_EQ(describe_status(0), "ok");
  const std::string all = describe_status(kOffsDecreasing | kOffsBeyondM | kOffsMisaligned);
  EXPECT_NE(all.find("decrease"), std::string::npos) << all;
  EXPECT_NE(all.find("exceeds M"), std::string::npos) << all;
  EXPECT_NE(all.find("not a multiple of the format's block (32 for mxfp8, 128 for fp8_blockwise)"),
            std::string::npos)
      << all;
  const std::string routed = describe_status(kIndexOutOfRange | kCountsNegative | kCountsSumNotN);
  EXPECT_EQ(routed.rfind("bad routing (status 56):", 0), 0u) << routed;
  EXPECT_NE(routed.find("quantize_routed: [0, T)"), std::string::npos) << routed;
  EXPECT_NE(routed.find("combine: token_rows [0, N) or dest [0, Mp)"), std::string::npos) << routed;
  EXPECT_NE(routed.find("negative"), std::string::npos) << routed;
  EXPECT_NE(routed.find("do not sum to N"), std::string::npos) << routed;
  // A word that is not a status (64 is no StatusBits bit) says so instead of ending at the colon.
  EXPECT_EQ(describe_status(64), "malformed offs (status 64): unknown bits 64;");
}

TEST(ErrorType, WhatIsOpAndMessage) {
  const Error e(Error::Kind::kUnsupported, "mxq::quantize", "no kernel code");
  EXPECT_STREQ(e.what(), "mxq::quantize: no kernel code");
  EXPECT_EQ(e.message(), "no kernel code");
  EXPECT_EQ(e.kind(), Error::Kind::kUnsupported);
  const Error bare(Error::Kind::kCuda, "", "CUDA error");
  EXPECT_STREQ(bare.what(), "CUDA error");
}

TEST(BuildFacts, VersionAndBuildInfo) {
  const std::string v = version();
  EXPECT_FALSE(v.empty());
  EXPECT_NE(build_info().find(v), std::string::npos) << build_info();
}

// The example message of docs/numerics.md §9 and mxq.h, whole.
TEST(ErrorMessages, ExampleIsExact) {
  std::vector<uint16_t> x(48 * 32);
  Bytes q(48 * 32), s(size_t(s_row_shape<int64_t>(48, 32).bytes()));
  QuantizeParams p;
  p.x = x.data();
  p.M = 48;
  p.K = 32;
  p.q_row = q.data();
  p.s_row = s.data();
  try {
    ref::quantize(p);
    ADD_FAILURE() << "M = 48 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "mxq::ref::quantize: M must be a multiple of 32, got 48");
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
  }
}

// ---- the reference entry points ----

// Valid host arguments for every op (M = 256, K = 128, two groups), outputs poisoned.
struct Args {
  static constexpr int64_t M = 256, K = 128;
  std::vector<uint16_t> x = make_input(M, K, Dist::kNormal, 3);
  std::vector<int32_t> offs = {128, 256};
  Bytes q_row = Bytes(size_t(M * K), kPoison);
  Bytes s_row = Bytes(size_t(s_row_shape(M, K, 2).bytes()), kPoison);  // M-groups
  Bytes q_col = Bytes(size_t(M * K), kPoison);
  Bytes s_col = Bytes(size_t(s_col_shape(M, K, 2).bytes()), kPoison);
  std::vector<uint16_t> out = std::vector<uint16_t>(size_t(M * K), 0xA5A5);
  int32_t status = 0x5A5A5A5A;

  // All four outputs, grouped, with the status word.
  QuantizeParams both() {
    QuantizeParams p;
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
  QuantizeParams rowwise() {  // the colwise pair null: that axis skipped
    QuantizeParams p = both();
    p.q_col = p.s_col = nullptr;
    return p;
  }
  QuantizeParams colwise() {
    QuantizeParams p = both();
    p.q_row = p.s_row = nullptr;
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
    set_colwise_dequant_layout(p);
    p.out = out.data();
    p.status = &status;
    return p;
  }

  bool untouched() const {
    for (const Bytes* b : {&q_row, &s_row, &q_col, &s_col}) {
      if (std::any_of(b->begin(), b->end(), [](uint8_t v) { return v != kPoison; })) return false;
    }
    return status == 0x5A5A5A5A &&
           std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == 0xA5A5; });
  }
};

// The baseline that each bad case below breaks once. With offs, every call writes the status word
// (0: offs are well formed), whatever its axes.
TEST(RefValidationBasics, ValidArgumentsPass) {
  Args a;
  EXPECT_NO_THROW(ref::quantize(a.rowwise()));
  EXPECT_EQ(std::exchange(a.status, 0x5A5A5A5A), 0);
  EXPECT_TRUE(std::all_of(a.q_col.begin(), a.q_col.end(), [](uint8_t v) { return v == kPoison; }))
      << "a rowwise-only call wrote q_col";
  EXPECT_NO_THROW(ref::quantize(a.colwise()));
  EXPECT_EQ(std::exchange(a.status, 0x5A5A5A5A), 0);
  EXPECT_NO_THROW(ref::quantize(a.both()));
  EXPECT_EQ(std::exchange(a.status, 0x5A5A5A5A), 0);
  EXPECT_NO_THROW(ref::dequantize(a.dequantize()));
  EXPECT_EQ(a.status, 0);
}

struct BadCase {
  const char* name;
  std::function<void(Args&)> call;
  const char* op;
  std::string message;  // regular expression for message(), matched whole
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class RefValidation : public ::testing::TestWithParam<BadCase> {};

TEST_P(RefValidation, ThrowsNamingArgumentAndWritesNothing) {
  Args a;
  EXPECT_TRUE(throws_error([&] { GetParam().call(a); }, GetParam().op, GetParam().message));
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
  return on_ref(&Args::rowwise, ref::quantize, edit);
}
template <typename Edit>
std::function<void(Args&)> colwise(Edit edit) {
  return on_ref(&Args::colwise, ref::quantize, edit);
}
template <typename Edit>
std::function<void(Args&)> both(Edit edit) {
  return on_ref(&Args::both, ref::quantize, edit);
}
template <typename Edit>
std::function<void(Args&)> dequant(Edit edit) {
  return on_ref(&Args::dequantize, ref::dequantize, [=](DequantizeParams& p) {
    edit(p);
    set_colwise_dequant_layout(p);
  });
}

constexpr const char* kRefQuantize = "mxq::ref::quantize";
constexpr const char* kRefDequantize = "mxq::ref::dequantize";

// Malformed offs (two groups, M = 256).
constexpr int32_t kOffsDecreasing[] = {256, 128};
constexpr int32_t kOffsNegative[] = {-128, 128};
constexpr int32_t kOffsBeyondM[] = {128, 384};
constexpr int32_t kOffsMisaligned[] = {80, 256};
constexpr int32_t kOffsMisalignedLast[] = {128, 176};

// Half a pair: the message names both members (a null pair would skip that axis).
std::string pair_message(const char* q, const char* s, bool q_set, bool s_set) {
  EXPECT_NE(q_set, s_set);
  const std::string null = q_set ? s : q, set = q_set ? q : s;
  return exact(null + " is null but " + set +
               " is set: set both or neither (a null pair skips that axis)");
}
const std::string kNothing = exact(
    "nothing to compute: set q_row and s_row (rowwise), q_col and s_col (colwise), or all four");

const std::vector<BadCase> kBadCases = {
    // dimensions (§9): multiples of 32 on the CPU, non-negative, at most 2^31 - 1
    {"rowwise_M_48", rowwise([](auto& p) { p.M = 48; }), kRefQuantize,
     exact("M must be a multiple of 32, got 48")},
    {"rowwise_K_40", rowwise([](auto& p) { p.K = 40; }), kRefQuantize,
     exact("K must be a multiple of 32, got 40")},
    {"rowwise_M_negative", rowwise([](auto& p) { p.M = -32; }), kRefQuantize,
     exact("M must be non-negative, got -32")},
    {"rowwise_K_2pow31", rowwise([](auto& p) { p.K = int64_t(1) << 31; }), kRefQuantize,
     exact("K must be at most 2^31-1, got 2147483648")},
    {"colwise_M_16", colwise([](auto& p) { p.M = 16; }), kRefQuantize,
     exact("M must be a multiple of 32, got 16")},
    {"colwise_K_100", colwise([](auto& p) { p.K = 100; }), kRefQuantize,
     exact("K must be a multiple of 32, got 100")},
    {"both_M_2pow32", both([](auto& p) { p.M = int64_t(1) << 32; }), kRefQuantize,
     exact("M must be at most 2^31-1, got 4294967296")},
    {"dequantize_rows_48", dequant([](auto& p) { p.rows = 48; }), kRefDequantize,
     exact("rows must be a multiple of 32, got 48")},
    {"dequantize_cols_72", dequant([](auto& p) { p.cols = 72; }), kRefDequantize,
     exact("cols must be a multiple of 32, got 72")},
    // pointers
    {"rowwise_x_null", rowwise([](auto& p) { p.x = nullptr; }), kRefQuantize, exact("x is null")},
    {"rowwise_x_misaligned", rowwise([](auto& p) { p.x = static_cast<const uint16_t*>(p.x) + 1; }),
     kRefQuantize, exact("x must be 16-byte aligned, got address ") + kAddr},
    {"colwise_q_col_misaligned", colwise([](auto& p) { p.q_col += 4; }), kRefQuantize,
     exact("q_col must be 16-byte aligned, got address ") + kAddr},
    {"both_x_null", both([](auto& p) { p.x = nullptr; }), kRefQuantize, exact("x is null")},
    {"both_offs_pointer_misaligned", both([](auto& p) {
       p.offs = reinterpret_cast<const int32_t*>(reinterpret_cast<uintptr_t>(p.offs) + 2);
     }),
     kRefQuantize, exact("offs must be 4-byte aligned, got address ") + kAddr},
    {"both_status_pointer_misaligned", both([](auto& p) {
       p.status = reinterpret_cast<int32_t*>(reinterpret_cast<uintptr_t>(p.status) + 1);
     }),
     kRefQuantize, exact("status must be 4-byte aligned, got address ") + kAddr},
    {"dequantize_q_null", dequant([](auto& p) { p.q = nullptr; }), kRefDequantize,
     exact("q is null")},
    {"dequantize_scales_null", dequant([](auto& p) { p.scales = nullptr; }), kRefDequantize,
     exact("scales is null")},
    {"dequantize_out_null", dequant([](auto& p) { p.out = nullptr; }), kRefDequantize,
     exact("out is null")},
    // a data/scale pair is given whole or not at all (a null pair skips that axis)
    {"rowwise_q_row_null", rowwise([](auto& p) { p.q_row = nullptr; }), kRefQuantize,
     pair_message("q_row", "s_row", false, true)},
    {"rowwise_s_row_null", rowwise([](auto& p) { p.s_row = nullptr; }), kRefQuantize,
     pair_message("q_row", "s_row", true, false)},
    {"colwise_q_col_null", colwise([](auto& p) { p.q_col = nullptr; }), kRefQuantize,
     pair_message("q_col", "s_col", false, true)},
    {"colwise_s_col_null", colwise([](auto& p) { p.s_col = nullptr; }), kRefQuantize,
     pair_message("q_col", "s_col", true, false)},
    {"both_q_col_null", both([](auto& p) { p.q_col = nullptr; }), kRefQuantize,
     pair_message("q_col", "s_col", false, true)},
    {"both_s_row_null", both([](auto& p) { p.s_row = nullptr; }), kRefQuantize,
     pair_message("q_row", "s_row", true, false)},
    {"nothing_to_compute", both([](auto& p) { p.q_row = p.s_row = p.q_col = p.s_col = nullptr; }),
     kRefQuantize, kNothing},
    // the scaling mode
    {"rowwise_scaling_mode_7",
     rowwise([](auto& p) { p.scaling_mode = static_cast<ScalingMode>(7); }), kRefQuantize,
     exact("scaling_mode must be ScalingMode::kRceil or kFloor, got 7")},
    {"both_scaling_mode_minus1",
     both([](auto& p) { p.scaling_mode = static_cast<ScalingMode>(-1); }), kRefQuantize,
     exact("scaling_mode must be ScalingMode::kRceil or kFloor, got -1")},
    // groups and the status word
    {"both_groups_without_offs", both([](auto& p) { p.offs = nullptr; }), kRefQuantize,
     exact("num_groups must be 0 without offs, got 2")},
    {"rowwise_status_without_offs", rowwise([](auto& p) {
       p.offs = nullptr;
       p.num_groups = 0;
     }),
     kRefQuantize, exact("status reports on offs and needs offs")},
    {"dequantize_status_without_offs", dequant([](auto& p) {
       p.offs = nullptr;
       p.num_groups = 0;
     }),
     kRefDequantize, exact("status reports on offs and needs offs")},
    {"both_offs_zero_groups", both([](auto& p) { p.num_groups = 0; }), kRefQuantize,
     exact("offs must hold 1 to 1024 group end offsets, got G=0")},
    {"dequantize_1025_groups", dequant([](auto& p) { p.num_groups = 1025; }), kRefDequantize,
     exact("offs must hold 1 to 1024 group end offsets, got G=1025")},
    // offs contents, read on the host by the reference: index and value named
    {"colwise_offs_decreasing", colwise([](auto& p) { p.offs = kOffsDecreasing; }), kRefQuantize,
     exact("offs must be non-decreasing, got offs[1]=128 after offs[0]=256")},
    {"colwise_offs_negative", colwise([](auto& p) { p.offs = kOffsNegative; }), kRefQuantize,
     exact("offs[0]=-128 is negative")},
    {"colwise_offs_beyond_M", colwise([](auto& p) { p.offs = kOffsBeyondM; }), kRefQuantize,
     exact("offs[1]=384 exceeds M=256")},
    {"colwise_offs_misaligned", colwise([](auto& p) { p.offs = kOffsMisaligned; }), kRefQuantize,
     exact("offs[0]=80 is not a multiple of 32 (group sizes must be)")},
    {"rowwise_offs_decreasing", rowwise([](auto& p) { p.offs = kOffsDecreasing; }), kRefQuantize,
     exact("offs must be non-decreasing, got offs[1]=128 after offs[0]=256")},
    {"rowwise_offs_beyond_M", rowwise([](auto& p) { p.offs = kOffsBeyondM; }), kRefQuantize,
     exact("offs[1]=384 exceeds M=256")},
    {"both_offs_decreasing", both([](auto& p) { p.offs = kOffsDecreasing; }), kRefQuantize,
     exact("offs must be non-decreasing, got offs[1]=128 after offs[0]=256")},
    {"both_offs_beyond_M", both([](auto& p) { p.offs = kOffsBeyondM; }), kRefQuantize,
     exact("offs[1]=384 exceeds M=256")},
    {"both_offs_misaligned", both([](auto& p) { p.offs = kOffsMisalignedLast; }), kRefQuantize,
     exact("offs[1]=176 is not a multiple of 32 (group sizes must be)")},
    {"dequantize_layout_7",
     on_ref(&Args::dequantize, ref::dequantize,
            [](auto& p) { p.layout = static_cast<ScaleLayout>(7); }),
     kRefDequantize, exact("layout must be ScaleLayout::kBlocked, kMGroups or kKGroups, got 7")},
    {"dequantize_blocked_with_offs",
     on_ref(&Args::dequantize, ref::dequantize, [](auto& p) { p.layout = ScaleLayout::kBlocked; }),
     kRefDequantize, exact("the blocked layout takes no offs")},
    {"dequantize_kgroups_without_offs",
     on_ref(&Args::dequantize, ref::dequantize,
            [](auto& p) {
              p.offs = nullptr;
              p.num_groups = 0;
            }),
     kRefDequantize, exact("the grouped layouts need offs")},
    {"dequantize_mgroups_offs_beyond_rows",
     on_ref(&Args::dequantize, ref::dequantize,
            [](auto& p) {
              p.layout = ScaleLayout::kMGroups;  // rows = K = 128 are the tokens
              p.offs = kOffsBeyondM;
            }),
     kRefDequantize, exact("offs[1]=384 exceeds rows=128")},
    {"dequantize_offs_beyond_cols", dequant([](auto& p) { p.offs = kOffsBeyondM; }), kRefDequantize,
     exact("offs[1]=384 exceeds cols=256")},
    {"dequantize_offs_misaligned", dequant([](auto& p) { p.offs = kOffsMisaligned; }),
     kRefDequantize, exact("offs[0]=80 is not a multiple of 32 (group sizes must be)")},
};

INSTANTIATE_TEST_SUITE_P(Cases, RefValidation, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// §9: a zero-sized x gives empty outputs, and a buffer of 0 bytes may be null (a zero-size tensor
// has no storage). A K-groups s_col has bytes even for M = 0 (the slack) and is written.
TEST(RefValidationBasics, EmptyShapesNeedNoBuffers) {
  for (const auto& [M, K] : {std::pair<int64_t, int64_t>{0, 128}, {128, 0}, {0, 0}}) {
    QuantizeParams p;
    p.M = M;
    p.K = K;
    EXPECT_NO_THROW(ref::quantize(p)) << M << "x" << K;
  }
  EXPECT_NO_THROW(ref::dequantize({nullptr, nullptr, 0, 64}));
  // M = 0 grouped: only s_col (K, 4G) has bytes; every one is written 0, and so is the status.
  const int32_t offs[2] = {0, 0};
  Bytes s_col(size_t(s_col_shape(0, 128, 2).bytes()), kPoison);
  ASSERT_EQ(s_col.size(), 128u * 8);
  int32_t status = 0x5A5A5A5A;
  QuantizeParams g;
  g.K = 128;
  g.offs = offs;
  g.num_groups = 2;
  g.s_col = s_col.data();
  g.status = &status;
  EXPECT_NO_THROW(ref::quantize(g));
  EXPECT_TRUE(bytes_equal(s_col, Bytes(s_col.size(), 0), 8, "s_col"));
  EXPECT_EQ(status, 0);
  g.s_col = nullptr;  // that s_col is not empty: a null one with q_col set is half a pair
  alignas(16) uint8_t q_col[16];
  g.q_col = q_col;
  status = 0x5A5A5A5A;
  EXPECT_TRUE(throws_error([&] { ref::quantize(g); }, kRefQuantize,
                           pair_message("q_col", "s_col", true, false)));
  EXPECT_EQ(status, 0x5A5A5A5A);
}

// ---- the host offs checker (mxq::validate_offs_host; mxq::validate_offs runs it after its copy)

// The size rules alone (the torch layer's Meta impls call them): the ops' messages under their own
// names, and every size an op accepts passes.
TEST(CheckSizes, TheOpsRulesUnderTheirOwnNames) {
  const auto check = [](auto call, const char* op, const std::string& message) {
    EXPECT_TRUE(throws_error(call, op, exact(message))) << message;
  };
  check([] { check_sizes(100, 64, -1); }, "mxq::check_sizes",
        "M must be a multiple of 32, got 100");
  check([] { check_sizes(64, -32, -1); }, "mxq::check_sizes", "K must be non-negative, got -32");
  check([] { check_sizes(64, 64, 0); }, "mxq::check_sizes",
        "offs must hold 1 to 1024 group end offsets, got G=0");
  check([] { check_dequantize_sizes(64, 100, -1); }, "mxq::check_dequantize_sizes",
        "cols must be a multiple of 32, got 100");
  check([] { check_weight_sizes(0, 64, 64); }, "mxq::check_weight_sizes",
        "G must be at least 1, got 0");
  check([] { check_weight_sizes(2, 48, 64); }, "mxq::check_weight_sizes",
        "N must be a multiple of 32, got 48");
  EXPECT_NO_THROW(check_sizes(0, 0, -1));
  EXPECT_NO_THROW(check_sizes(kMaxDim / 32 * 32, 32, kMaxGroups));
  EXPECT_NO_THROW(check_dequantize_sizes(32, 64, 1));
  EXPECT_NO_THROW(check_weight_sizes(1, 0, 0));
}

TEST(ValidateOffsHost, WellFormedOffsPass) {
  const std::vector<std::vector<int32_t>> good = {
      {0}, {256}, {0, 0}, {128, 256}, {0, 128, 128, 256}};
  for (const auto& offs : good) {
    EXPECT_NO_THROW(validate_offs_host(offs.data(), int64_t(offs.size()), 256));
  }
  const int32_t zero = 0;
  EXPECT_NO_THROW(validate_offs_host(&zero, 1, 0));  // M = 0: every group empty
  const std::vector<int32_t> many(kMaxGroups, 128);
  EXPECT_NO_THROW(validate_offs_host(many.data(), kMaxGroups, 128));
}

TEST(ValidateOffsHost, NamesTheFirstBadEntry) {
  const char* op = "mxq::validate_offs";
  const int32_t two[] = {128, 256};
  const auto check = [&](const int32_t* offs, int64_t G, int64_t M, const std::string& message) {
    EXPECT_TRUE(throws_error([&] { validate_offs_host(offs, G, M); }, op, exact(message)))
        << message;
  };
  check(two, 0, 256, "offs must hold 1 to 1024 group end offsets, got G=0");
  check(two, kMaxGroups + 1, 256, "offs must hold 1 to 1024 group end offsets, got G=1025");
  check(nullptr, 2, 256, "offs is null");
  check(kOffsDecreasing, 2, 256, "offs must be non-decreasing, got offs[1]=128 after offs[0]=256");
  check(kOffsNegative, 2, 256, "offs[0]=-128 is negative");
  check(kOffsBeyondM, 2, 256, "offs[1]=384 exceeds M=256");
  check(kOffsMisaligned, 2, 256, "offs[0]=80 is not a multiple of 32 (group sizes must be)");
  check(kOffsMisalignedLast, 2, 256, "offs[1]=176 is not a multiple of 32 (group sizes must be)");
  check(two, 2, 128, "offs[1]=256 exceeds M=128");
  const int32_t first_of_three[] = {200, 100, 1024};  // three faults: the first entry is named
  check(first_of_three, 3, 512, "offs[0]=200 is not a multiple of 32 (group sizes must be)");
}

// M is checked as the ops check it, before G, offs and the entries: an offs that fits a bad M is
// not accepted, and a negative M is not reported as an entry exceeding it.
TEST(ValidateOffsHost, ChecksMFirst) {
  const char* op = "mxq::validate_offs";
  const int32_t ninety_six = 96, zero = 0;
  const auto check = [&](const int32_t* offs, int64_t G, int64_t M, const std::string& message) {
    EXPECT_TRUE(throws_error([&] { validate_offs_host(offs, G, M); }, op, exact(message)))
        << message;
  };
  check(&ninety_six, 1, 100, "M must be a multiple of 32, got 100");
  check(&zero, 1, -32, "M must be non-negative, got -32");
  check(&zero, 1, int64_t(1) << 40, "M must be at most 2^31-1, got 1099511627776");
  check(&zero, 1, int64_t(1) << 31, "M must be at most 2^31-1, got 2147483648");
  check(nullptr, 0, 100, "M must be a multiple of 32, got 100");  // M before G and offs
  EXPECT_NO_THROW(validate_offs_host(&zero, 1, kMaxDim - kMaxDim % kDimAlign));
}

// ---- the GPU entry points ----

// Valid host buffers at a GPU-legal shape (M = K = 128). Only used for calls that are refused
// before anything could touch them.
struct GpuArgs {
  static constexpr int64_t M = 128, K = 128;
  std::vector<uint16_t> x = std::vector<uint16_t>(size_t(M * K), 0x3F80);
  Bytes q_row = Bytes(size_t(M * K)), s_row = Bytes(size_t(s_row_shape(M, K, 1).bytes()));
  Bytes q_col = Bytes(size_t(M * K)), s_col = Bytes(size_t(s_col_shape(M, K, 1).bytes()));
  Bytes workspace = Bytes(size_t(composed_workspace_bytes(M, K)));
  std::vector<uint16_t> out = std::vector<uint16_t>(size_t(M * K));
  std::vector<int32_t> offs = {128};
  int32_t status = 0;

  QuantizeParams both() {
    QuantizeParams p;
    p.x = x.data();
    p.M = M;
    p.K = K;
    p.q_row = q_row.data();
    p.s_row = s_row.data();
    p.q_col = q_col.data();
    p.s_col = s_col.data();
    return p;
  }
  QuantizeParams rowwise() {
    QuantizeParams p = both();
    p.q_col = p.s_col = nullptr;
    return p;
  }
  QuantizeParams colwise() {
    QuantizeParams p = both();
    p.q_row = p.s_row = nullptr;
    return p;
  }
  QuantizeParams grouped() {  // all four, offs and the status word
    QuantizeParams p = both();
    p.offs = offs.data();
    p.num_groups = 1;
    p.status = &status;
    return p;
  }
  DequantizeParams dequantize() {
    DequantizeParams p;
    p.q = q_row.data();
    p.scales = s_row.data();
    p.rows = M;
    p.cols = K;
    p.out = out.data();
    return p;
  }
  // An empty q (rows = 0) in the K-groups layout: no output bytes, only the status word.
  DequantizeParams empty_grouped_dequantize() {
    DequantizeParams p;
    p.rows = 0;
    p.cols = K;
    p.layout = ScaleLayout::kKGroups;
    p.offs = offs.data();
    p.num_groups = 1;
    p.status = &status;
    return p;
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

// quantize_composed with GpuArgs' workspace (or none).
template <typename Edit>
std::function<void()> on_composed(Edit edit, bool workspace = true) {
  return [=] {
    GpuArgs a;
    QuantizeParams p = a.both();
    edit(p);
    quantize_composed(p, workspace ? a.workspace.data() : nullptr);
  };
}

struct GpuCase {
  const char* name;
  std::function<void()> call;
  const char* op;
  std::string message;  // regular expression for message(), matched whole
};
void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.name; }

constexpr const char* kQuantize = "mxq::quantize";
constexpr const char* kComposed = "mxq::quantize_composed";
constexpr const char* kDequantize = "mxq::dequantize";
const std::string kM100 = exact("M must be a multiple of 32, got 100");
const std::string kK136 = exact("K must be a multiple of 32, got 136");
const auto kQuantizeOp = static_cast<void (*)(const QuantizeParams&)>(quantize);
const auto kDequantizeOp = static_cast<void (*)(const DequantizeParams&)>(dequantize);

const std::vector<GpuCase> kGpuCases = {
    {"rowwise_M_100", on_gpu(&GpuArgs::rowwise, kQuantizeOp, [](auto& p) { p.M = 100; }), kQuantize,
     kM100},
    {"rowwise_K_136", on_gpu(&GpuArgs::rowwise, kQuantizeOp, [](auto& p) { p.K = 136; }), kQuantize,
     kK136},
    {"rowwise_M_negative", on_gpu(&GpuArgs::rowwise, kQuantizeOp, [](auto& p) { p.M = -128; }),
     kQuantize, exact("M must be non-negative, got -128")},
    {"colwise_M_100", on_gpu(&GpuArgs::colwise, kQuantizeOp, [](auto& p) { p.M = 100; }), kQuantize,
     kM100},
    {"both_M_100", on_gpu(&GpuArgs::both, kQuantizeOp, [](auto& p) { p.M = 100; }), kQuantize,
     kM100},
    {"both_K_2pow31", on_gpu(&GpuArgs::both, kQuantizeOp, [](auto& p) { p.K = int64_t(1) << 31; }),
     kQuantize, exact("K must be at most 2^31-1, got 2147483648")},
    {"composed_K_136", on_composed([](auto& p) { p.K = 136; }), kComposed, kK136},
    {"dequantize_rows_100",
     on_gpu(&GpuArgs::dequantize, kDequantizeOp, [](auto& p) { p.rows = 100; }), kDequantize,
     exact("rows must be a multiple of 32, got 100")},
    {"dequantize_cols_48",
     on_gpu(&GpuArgs::dequantize, kDequantizeOp, [](auto& p) { p.cols = 48; }), kDequantize,
     exact("cols must be a multiple of 32, got 48")},
    {"dequantize_blocked_with_offs",
     on_gpu(&GpuArgs::dequantize, kDequantizeOp,
            [](auto& p) {
              p.offs = reinterpret_cast<const int32_t*>(p.q);
              p.num_groups = 1;
            }),
     kDequantize, exact("the blocked layout takes no offs")},
    {"dequantize_mgroups_without_offs",
     on_gpu(&GpuArgs::dequantize, kDequantizeOp, [](auto& p) { p.layout = ScaleLayout::kMGroups; }),
     kDequantize, exact("the grouped layouts need offs")},
    // pointers that are checked without the device
    {"both_x_null", on_gpu(&GpuArgs::both, kQuantizeOp, [](auto& p) { p.x = nullptr; }), kQuantize,
     exact("x is null")},
    {"both_x_misaligned",
     on_gpu(&GpuArgs::both, kQuantizeOp,
            [](auto& p) { p.x = static_cast<const uint16_t*>(p.x) + 4; }),
     kQuantize, exact("x must be 16-byte aligned, got address ") + kAddr},
    {"rowwise_s_row_misaligned",
     on_gpu(&GpuArgs::rowwise, kQuantizeOp, [](auto& p) { p.s_row += 1; }), kQuantize,
     exact("s_row must be 16-byte aligned, got address ") + kAddr},
    {"dequantize_out_null",
     on_gpu(&GpuArgs::dequantize, kDequantizeOp, [](auto& p) { p.out = nullptr; }), kDequantize,
     exact("out is null")},
    {"both_scaling_mode_3",
     on_gpu(&GpuArgs::both, kQuantizeOp,
            [](auto& p) { p.scaling_mode = static_cast<ScalingMode>(3); }),
     kQuantize, exact("scaling_mode must be ScalingMode::kRceil or kFloor, got 3")},
    // the params rules
    {"rowwise_half_colwise_pair",
     on_gpu(&GpuArgs::rowwise, kQuantizeOp, [](auto& p) { p.s_col = p.s_row; }), kQuantize,
     pair_message("q_col", "s_col", false, true)},
    {"colwise_half_rowwise_pair",
     on_gpu(&GpuArgs::colwise, kQuantizeOp, [](auto& p) { p.q_row = p.q_col; }), kQuantize,
     pair_message("q_row", "s_row", true, false)},
    {"both_q_col_null", on_gpu(&GpuArgs::both, kQuantizeOp, [](auto& p) { p.q_col = nullptr; }),
     kQuantize, pair_message("q_col", "s_col", false, true)},
    {"composed_s_row_null", on_composed([](auto& p) { p.s_row = nullptr; }), kComposed,
     pair_message("q_row", "s_row", true, false)},
    {"nothing_to_compute",
     on_gpu(&GpuArgs::both, kQuantizeOp,
            [](auto& p) { p.q_row = p.s_row = p.q_col = p.s_col = nullptr; }),
     kQuantize, kNothing},
    {"composed_nothing_to_compute",
     on_composed([](auto& p) { p.q_row = p.s_row = p.q_col = p.s_col = nullptr; }), kComposed,
     kNothing},
    {"status_without_offs",
     on_gpu(&GpuArgs::grouped, kQuantizeOp,
            [](auto& p) {
              p.offs = nullptr;
              p.num_groups = 0;
            }),
     kQuantize, exact("status reports on offs and needs offs")},
    {"rowwise_status_without_offs",
     on_gpu(&GpuArgs::grouped, kQuantizeOp,
            [](auto& p) {
              p.offs = nullptr;
              p.num_groups = 0;
              p.q_col = p.s_col = nullptr;
            }),
     kQuantize, exact("status reports on offs and needs offs")},
    {"dequantize_status_without_offs",
     on_gpu(&GpuArgs::dequantize, kDequantizeOp,
            [](auto& p) { p.status = static_cast<int32_t*>(p.out); }),
     kDequantize, exact("status reports on offs and needs offs")},
    {"groups_without_offs",
     on_gpu(&GpuArgs::grouped, kQuantizeOp, [](auto& p) { p.offs = nullptr; }), kQuantize,
     exact("num_groups must be 0 without offs, got 1")},
    {"offs_zero_groups", on_gpu(&GpuArgs::grouped, kQuantizeOp, [](auto& p) { p.num_groups = 0; }),
     kQuantize, exact("offs must hold 1 to 1024 group end offsets, got G=0")},
    {"composed_rowwise_only", on_composed([](auto& p) { p.q_col = p.s_col = nullptr; }), kComposed,
     exact("the composed path quantizes both axes: set q_row, s_row, q_col and s_col")},
    {"composed_colwise_only", on_composed([](auto& p) { p.q_row = p.s_row = nullptr; }), kComposed,
     exact("the composed path quantizes both axes: set q_row, s_row, q_col and s_col")},
    {"composed_workspace_null", on_composed([](auto&) {}, /*workspace=*/false), kComposed,
     exact("workspace is null (it needs composed_workspace_bytes(M, K) = 512 bytes)")},
};

class GpuValidation : public ::testing::TestWithParam<GpuCase> {};

// The argument checks come before any device query, so these refusals are the same with or without
// CUDA and with or without a device.
TEST_P(GpuValidation, ArgumentChecksComeFirst) {
  EXPECT_TRUE(throws_error(GetParam().call, GetParam().op, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuValidation, ::testing::ValuesIn(kGpuCases),
                         [](const auto& info) { return std::string(info.param.name); });

// §9: no launch, so no device is needed; a buffer of 0 bytes may be null.
TEST(GpuValidationBasics, EmptyShapesLaunchNothing) {
  for (const auto& [M, K] : {std::pair<int64_t, int64_t>{0, 128}, {128, 0}, {0, 0}}) {
    QuantizeParams p;
    p.M = M;
    p.K = K;
    EXPECT_NO_THROW(quantize(p)) << M << "x" << K;
  }
  EXPECT_NO_THROW(dequantize({nullptr, nullptr, 128, 0}));
  // Non-null pointers are still checked (alignment), though nothing is written through them.
  alignas(16) uint8_t buffer[32] = {};
  QuantizeParams row;
  row.K = 128;
  row.q_row = buffer + 16;
  row.s_row = buffer + 1;
  EXPECT_TRUE(throws_error([&] { quantize(row); }, kQuantize,
                           exact("s_row must be 16-byte aligned, got address ") + kAddr));
  row.s_row = buffer;
  EXPECT_NO_THROW(quantize(row));
}

// The composed path with an empty x: all four buffers have 0 bytes and may be null, like the
// fused path's, and the workspace (0 bytes) too.
TEST(GpuValidationBasics, ComposedEmptyShapesNeedNoBuffers) {
  QuantizeParams p;
  p.M = 0;
  p.K = 256;
  EXPECT_NO_THROW(quantize_composed(p, nullptr));
}

// The tests' entry points (src/host/testing.h) take the tile heights 0 (automatic), 64 and 128 and
// refuse anything else before any other check; they need no device.
TEST(GpuValidationBasics, TileRowsTakesOnlyTheTileHeights) {
  for (int rows : {-64, 1, 32, 96, 256}) {
    const std::string message =
        exact("tile_rows must be 0, 64 or 128, got " + std::to_string(rows));
    EXPECT_TRUE(throws_error([&] { detail::quantize_with_tile_rows(QuantizeParams{}, rows); },
                             "mxq::quantize", message));
    EXPECT_TRUE(throws_error(
        [&] { detail::quantize_composed_with_tile_rows(QuantizeParams{}, nullptr, rows); },
        "mxq::quantize_composed", message));
    EXPECT_TRUE(
        throws_error([&] { detail::quantize_routed_with_tile_rows(QuantizeRoutedParams{}, rows); },
                     "mxq::quantize_routed", message));
  }
}

#ifndef MXQ_WITH_CUDA
// Every GPU entry point refuses with kUnsupported and says why, after the argument checks.
TEST(GpuValidationBasics, BuildWithoutCudaRefusesClearly) {
  GpuArgs a;
  const std::string no_cuda = exact(
      "this build of mxq has no CUDA (nvcc was not found at configure time); the CPU "
      "reference (mxq::ref) works");
  const auto unsupported = [&](const std::function<void()>& f, const char* op) {
    return throws_error(f, op, no_cuda, Error::Kind::kUnsupported);
  };
  EXPECT_TRUE(unsupported([&] { quantize(a.rowwise()); }, kQuantize));
  EXPECT_TRUE(unsupported([&] { quantize(a.colwise()); }, kQuantize));
  EXPECT_TRUE(unsupported([&] { quantize(a.both()); }, kQuantize));
  EXPECT_TRUE(unsupported([&] { quantize(a.grouped()); }, kQuantize));
  EXPECT_TRUE(unsupported([&] { quantize_composed(a.both(), a.workspace.data()); }, kComposed));
  EXPECT_TRUE(unsupported([&] { dequantize(a.dequantize()); }, kDequantize));
  EXPECT_TRUE(
      unsupported([&] { validate_offs(a.offs.data(), 1, 128, nullptr); }, "mxq::validate_offs"));
  EXPECT_TRUE(unsupported([&] { check_status(&a.status, nullptr); }, "mxq::check_status"));
  // M = 0 grouped still has the status word to write: refused too, not silently skipped.
  QuantizeParams empty = a.grouped();
  empty.M = 0;
  EXPECT_TRUE(unsupported([&] { quantize(empty); }, kQuantize));
  // So has an empty grouped dequantize; without a status word it has nothing to write at all.
  DequantizeParams empty_dequant = a.empty_grouped_dequantize();
  EXPECT_TRUE(unsupported([&] { dequantize(empty_dequant); }, kDequantize));
  empty_dequant.status = nullptr;
  EXPECT_NO_THROW(dequantize(empty_dequant));
  // An argument error is still reported as such, not hidden behind the missing CUDA.
  QuantizeParams bad = a.both();
  bad.M = 100;
  EXPECT_TRUE(throws_error([&] { quantize(bad); }, kQuantize, kM100));
  EXPECT_EQ(a.status, 0);
  EXPECT_FALSE(gpu_available());
  EXPECT_NE(build_info().find("CPU only"), std::string::npos) << build_info();
  // The host checker needs no CUDA.
  EXPECT_NO_THROW(validate_offs_host(a.offs.data(), 1, 128));
}
#else
// A CUDA build on a machine without a usable device: valid arguments are refused with an
// mxq::Error (no launch, no crash). Skipped where a device is present (the arguments here are host
// memory).
TEST(GpuValidationBasics, NoDeviceRefusesCleanly) {
  if (gpu_available()) GTEST_SKIP() << "a device is present: " << build_info();
  GpuArgs a;
  const std::vector<std::pair<const char*, std::function<void()>>> calls = {
      {kQuantize, [&] { quantize(a.both()); }},
      {kComposed, [&] { quantize_composed(a.both(), a.workspace.data()); }},
      {kDequantize, [&] { dequantize(a.dequantize()); }},
      // An empty grouped dequantize still has its status word to write (as quantize's M = 0).
      {kDequantize, [&] { dequantize(a.empty_grouped_dequantize()); }},
  };
  for (const auto& [op, call] : calls) {
    try {
      call();
      ADD_FAILURE() << op << " accepted valid arguments without a device";
    } catch (const Error& e) {
      // No device or no driver is a missing capability, not a CUDA failure (mxq.h).
      EXPECT_EQ(e.kind(), Error::Kind::kUnsupported) << e.what();
      EXPECT_EQ(std::string(e.what()), std::string(op) + ": " + e.message());
      EXPECT_TRUE(reads_as_a_user_message(e.what()));
    }
  }
  // Without a status word an empty dequantize has nothing to write: no device needed.
  DequantizeParams empty = a.empty_grouped_dequantize();
  empty.status = nullptr;
  EXPECT_NO_THROW(dequantize(empty));
}
#endif

}  // namespace
}  // namespace mxq::test
