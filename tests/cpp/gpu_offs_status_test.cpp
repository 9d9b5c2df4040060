// Malformed device offs (docs/numerics.md §6, §9: checked on the device): every grouped op (each
// quantize path: rowwise only, colwise only, fused, composed; and dequantize) must not throw (the
// offsets are not read on the host), must not write outside its outputs (guard bands, x and offs
// unchanged, the other axis and the workspace still poisoned, the context still healthy), and must
// set the status word to the right StatusBits. The rowwise-only path needs no offs for its outputs
// and still writes the status word. mxq::validate_offs names the first bad index and
// mxq::check_status throws.
#include <climits>
#include <functional>
#include <tuple>

#include "gpu_util.h"

namespace mxq::test {
namespace {

constexpr int64_t kM = 1024;
constexpr int64_t kK = 256;

struct BadOffs {
  const char* name;
  std::vector<int32_t> offs;
  int32_t bits;             // the status word StatusBits prescribe (docs/numerics.md §6)
  std::string first_entry;  // what validate_offs must name: "offs[i]=v"
};

const std::vector<BadOffs>& bad_offs_cases() {
  static_assert(128 % kGroupAlign == 0, "the well-formed entries below are multiples of 128");
  constexpr int32_t A = 128;
  constexpr int32_t M = int32_t(kM);
  static const std::vector<BadOffs> cases = {
      {"decreasing", {2 * A, A, 4 * A, 6 * A}, kOffsDecreasing, "offs[1]=128"},
      {"negative", {-A, A, 2 * A, 4 * A}, kOffsDecreasing, "offs[0]=-128"},
      {"int_min", {INT_MIN, 0, 0, 0}, kOffsDecreasing, "offs[0]=-2147483648"},
      {"beyond_m", {A, 2 * A, M + A, M + 2 * A}, kOffsBeyondM, "offs[2]=1152"},
      {"beyond_m_last", {0, A, 3 * A, M + A}, kOffsBeyondM, "offs[3]=1152"},
      {"int_max",
       {A, INT_MAX, INT_MAX, INT_MAX},
       kOffsBeyondM | kOffsMisaligned,
       "offs[1]=2147483647"},
      {"misaligned_half",
       {A, A + kGroupAlign / 2, 3 * A, 4 * A},
       kOffsMisaligned,
       "offs[1]=" + std::to_string(A + kGroupAlign / 2)},
      {"misaligned_odd", {A, 2 * A + 1, 3 * A, 4 * A}, kOffsMisaligned, "offs[1]=257"},
      {"all_three",
       {200, 100, M + 2 * A, M + 2 * A},
       kOffsDecreasing | kOffsBeyondM | kOffsMisaligned,
       "offs[0]=200"},
  };
  return cases;
}

enum class GroupedOp { kRowwise, kColwise, kFused, kComposed, kDequantize };
const char* op_name(GroupedOp op) {
  switch (op) {
    case GroupedOp::kRowwise:
      return "rowwise";
    case GroupedOp::kColwise:
      return "colwise";
    case GroupedOp::kFused:
      return "fused";
    case GroupedOp::kComposed:
      return "composed";
    case GroupedOp::kDequantize:
      return "dequantize";
  }
  return "?";
}
constexpr GroupedOp kAllOps[] = {GroupedOp::kRowwise, GroupedOp::kColwise, GroupedOp::kFused,
                                 GroupedOp::kComposed, GroupedOp::kDequantize};

Path path_of(GroupedOp op) {
  switch (op) {
    case GroupedOp::kRowwise:
      return Path::kRowwise;
    case GroupedOp::kColwise:
      return Path::kColwise;
    case GroupedOp::kFused:
      return Path::kFused;
    default:
      return Path::kComposed;
  }
}

void PrintTo(GroupedOp op, std::ostream* os) { *os << op_name(op); }

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> b(n);
  std::mt19937_64 rng(seed);
  for (auto& v : b) v = uint8_t(rng());
  return b;
}

// Runs `op` on the device with these (uploaded as-is) offs; returns the status word. Every EXPECT
// on guards and untouched inputs happens here.
int32_t run_grouped_op(GroupedOp op, const std::vector<int32_t>& offs, uint64_t seed) {
  Stream stream;
  const int64_t G = int64_t(offs.size());
  if (op != GroupedOp::kDequantize) {
    const std::vector<uint16_t> x = make_input(kM, kK, Dist::kSpecial, seed);
    DeviceProblem dev(x, kM, kK, stream.get());
    dev.set_offs(offs);
    const Path path = path_of(op);
    dev.poison();
    EXPECT_NO_THROW(dev.launch(path, ScalingMode::kRceil))
        << "offs are checked on the device, not the host";
    // Synchronizes, checks guards, x and offs unchanged, the outputs the path does not own (the
    // other axis, the workspace) still poisoned.
    return dev.collect(path).status;
  }
  // dequantize: q_col (K, M) + K-groups s_col -> bf16 (K, M).
  const std::vector<uint8_t> in_a = random_bytes(size_t(kK * kM), seed);
  const std::vector<uint8_t> in_b = random_bytes(size_t(s_col_shape(kM, kK, G).bytes()), seed ^ 1);
  GuardedBuffer a("q", in_a.size()), b("scales", in_b.size());
  GuardedBuffer d_offs("offs", offs.size() * sizeof(int32_t)), status("status", sizeof(int32_t));
  GuardedBuffer out("out", size_t(kK * kM * 2));
  a.upload(in_a.data(), stream.get());
  b.upload(in_b.data(), stream.get());
  d_offs.upload(offs.data(), stream.get());
  out.fill(kPoison, stream.get());
  status.fill(kPoison, stream.get());
  {
    DequantizeParams p;
    p.q = a.data();
    p.scales = b.data();
    p.rows = kK;
    p.cols = kM;
    p.offs = d_offs.as<int32_t>();
    set_colwise_dequant_layout(p);
    p.num_groups = G;
    p.out = out.data();
    p.status = status.as<int32_t>();
    p.stream = stream.get();
    EXPECT_NO_THROW(dequantize(p)) << "offs are checked on the device, not the host";
  }
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
  for (const GuardedBuffer* buf : {&a, &b, &d_offs, &status, &out})
    EXPECT_TRUE(buf->guards_intact(stream.get()));
  EXPECT_TRUE(a.holds(in_a, stream.get()));
  EXPECT_TRUE(b.holds(in_b, stream.get()));
  EXPECT_TRUE(d_offs.holds(as_bytes(offs), stream.get()));
  int32_t word = 0;
  const std::vector<uint8_t> s = status.download(stream.get());
  std::memcpy(&word, s.data(), sizeof word);
  return word;
}

// ------------------------------------------------------------------------------------------------
using MalformedParam = std::tuple<GroupedOp, size_t>;
class GpuMalformedOffs : public GpuTestWithParam<MalformedParam> {};

TEST_P(GpuMalformedOffs, ReportedNeverWrittenOutside) {
  const auto [op, index] = GetParam();
  const BadOffs& bad = bad_offs_cases()[index];
  SCOPED_TRACE(std::string(op_name(op)) + " with offs " + offs_to_string(bad.offs));
  const int32_t status = run_grouped_op(op, bad.offs, test_seed());
  EXPECT_EQ(status, bad.bits) << "status: " << describe_status(status) << "; expected "
                              << describe_status(bad.bits);
  // The device is still healthy: no trap, no sticky error.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

std::string malformed_name(const ::testing::TestParamInfo<MalformedParam>& info) {
  return std::string(op_name(std::get<0>(info.param))) + "_" +
         bad_offs_cases()[std::get<1>(info.param)].name;
}

INSTANTIATE_TEST_SUITE_P(Offs, GpuMalformedOffs,
                         ::testing::Combine(::testing::ValuesIn(kAllOps),
                                            ::testing::Range<size_t>(0, bad_offs_cases().size())),
                         malformed_name);

// ------------------------------------------------------------------------------------------------
class GpuOffsCheckers : public GpuTestWithParam<size_t> {};

TEST_P(GpuOffsCheckers, ValidateOffsNamesTheFirstBadEntry) {
  const BadOffs& bad = bad_offs_cases()[GetParam()];
  Stream stream;
  GuardedBuffer d_offs("offs", bad.offs.size() * sizeof(int32_t));
  d_offs.upload(bad.offs.data(), stream.get());
  try {
    validate_offs(d_offs.as<int32_t>(), int64_t(bad.offs.size()), kM, stream.get());
    ADD_FAILURE() << "validate_offs accepted " << offs_to_string(bad.offs);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad.first_entry), std::string::npos)
        << "message should name " << bad.first_entry << ": " << e.what();
  }
  EXPECT_TRUE(d_offs.guards_intact(stream.get()));
}

TEST_P(GpuOffsCheckers, CheckStatusThrowsOnTheStatusAnOpWrote) {
  const BadOffs& bad = bad_offs_cases()[GetParam()];
  Stream stream;
  const std::vector<uint16_t> x = make_input(kM, kK, Dist::kNormal, test_seed());
  DeviceProblem dev(x, kM, kK, stream.get());
  dev.set_offs(bad.offs);
  for (Path path : {Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed}) {
    SCOPED_TRACE(path_name(path));
    dev.poison();
    dev.launch(path, ScalingMode::kRceil);
    try {
      check_status(dev.status().as<int32_t>(), stream.get());
      ADD_FAILURE() << "check_status accepted the status of offs " << offs_to_string(bad.offs);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()), "mxq::check_status: " + describe_status(bad.bits));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Offs, GpuOffsCheckers,
                         ::testing::Range<size_t>(0, bad_offs_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(bad_offs_cases()[info.param].name);
                         });

// Well-formed offs: both checkers are silent, and every grouped op writes status 0 over a poisoned
// word.
class GpuGoodOffs : public GpuTest {};

TEST_F(GpuGoodOffs, StatusZeroAndCheckersSilent) {
  const std::vector<std::vector<int32_t>> good = {{0},
                                                  {int32_t(kM)},
                                                  {0, 0, 0, 0},
                                                  {128, 128, 512, 1024},
                                                  {0, 256, 256, 640},
                                                  make_offs(kM, 64, GroupFill::kTail, 7)};
  for (const auto& offs : good) {
    SCOPED_TRACE("offs " + offs_to_string(offs));
    for (GroupedOp op : kAllOps) {
      EXPECT_EQ(run_grouped_op(op, offs, test_seed(offs.size())), 0) << op_name(op);
    }
    Stream stream;
    GuardedBuffer d_offs("offs", offs.size() * sizeof(int32_t));
    d_offs.upload(offs.data(), stream.get());
    EXPECT_NO_THROW(validate_offs(d_offs.as<int32_t>(), int64_t(offs.size()), kM, stream.get()));
  }
}

// The whole message of each refusal (what() = "<op>: <message>"), and its kind.
void expect_refusal(const std::function<void()>& call, const std::string& what) {
  try {
    call();
    ADD_FAILURE() << "accepted; expected \"" << what << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument) << e.what();
    EXPECT_EQ(std::string(e.what()), what);
  }
}

TEST_F(GpuGoodOffs, ValidateOffsRejectsBadArguments) {
  Stream stream;
  const std::vector<int32_t> offs = {128, 256};
  GuardedBuffer d_offs("offs", offs.size() * sizeof(int32_t));
  d_offs.upload(offs.data(), stream.get());
  const int32_t* d = d_offs.as<int32_t>();
  cudaStream_t s = stream.get();
  expect_refusal([&] { validate_offs(d, 0, kM, s); },
                 "mxq::validate_offs: offs must hold 1 to 1024 group end offsets, got G=0");
  expect_refusal([&] { validate_offs(d, kMaxGroups + 1, kM, s); },
                 "mxq::validate_offs: offs must hold 1 to 1024 group end offsets, got G=1025");
  expect_refusal([&] { validate_offs(nullptr, 2, kM, s); }, "mxq::validate_offs: offs is null");
  expect_refusal([&] { validate_offs(d, 2, 128, s); },
                 "mxq::validate_offs: offs[1]=256 exceeds M=128");
  // M is checked as the ops check it, before offs is copied or read.
  expect_refusal([&] { validate_offs(d, 2, 272, s); },
                 "mxq::validate_offs: M must be a multiple of 32, got 272");
  expect_refusal([&] { validate_offs(d, 2, -32, s); },
                 "mxq::validate_offs: M must be non-negative, got -32");
  expect_refusal([&] { validate_offs(d, 2, int64_t(1) << 40, s); },
                 "mxq::validate_offs: M must be at most 2^31-1, got 1099511627776");
  expect_refusal([&] { check_status(nullptr, s); }, "mxq::check_status: status is null");
  EXPECT_TRUE(d_offs.guards_intact(s));
}

}  // namespace
}  // namespace mxq::test
