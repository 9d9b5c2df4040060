// docs/numerics.md §7: identical bytes across repeated launches, streams and CUDA-graph replays;
// work only on the caller's stream (capturable, no synchronization inside an op). Every path
// (rowwise only, colwise only, fused, composed), dense and grouped. Every run is also compared with
// the CPU reference, so a kernel is never only compared with itself.
//   GpuDeterminism  repeated launches with a different poison each time (an unwritten byte cannot
//                   hide)
//   GpuStreams      legacy default, per-thread default, blocking and non-blocking streams
//   GpuConcurrent   two problems in flight at once on two streams
//   GpuGraph        capture on a non-blocking stream (global capture mode), kernel nodes present,
//                   nothing run during capture, 3 replays with the outputs re-poisoned outside the
//                   graph
#include <tuple>

#include "gpu_util.h"

namespace mxq::test {
namespace {

constexpr uint8_t kPoisons[] = {kPoison, 0x5A, 0xFF, 0x00};
std::string hex_byte(uint8_t b) {
  const char* digits = "0123456789ABCDEF";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

// A problem (M, K) with offs (empty = dense) and its reference.
struct Case {
  int64_t M, K;
  std::vector<uint16_t> x;
  std::vector<int32_t> offs;
  HostOutputs want;
};
Case make_case(int64_t M, int64_t K, bool grouped, ScalingMode r, uint64_t seed) {
  Case c{M, K, make_input(M, K, Dist::kSpecial, seed), {}, {}};
  if (grouped) c.offs = make_offs(M, 8, GroupFill::kTail, seed ^ 1);
  c.want = reference_outputs(c.x, M, K, c.offs, r);
  return c;
}

// Same outputs of `path`, raw bytes (got vs an earlier run).
void expect_same_outputs(const HostOutputs& a, const HostOutputs& b, Path path,
                         const std::string& label) {
  EXPECT_TRUE(a.q_row == b.q_row && a.s_row == b.s_row && a.q_col == b.q_col &&
              a.s_col == b.s_col && a.status == b.status)
      << path_name(path) << ": " << label << " differs from the first run";
}

using PathGrouped = std::tuple<Path, bool>;
std::string path_grouped_name(const ::testing::TestParamInfo<PathGrouped>& info) {
  return std::string(path_name(std::get<0>(info.param))) +
         (std::get<1>(info.param) ? "_grouped" : "_dense");
}
const auto kPathGroupedValues = ::testing::Combine(
    ::testing::Values(Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed),
    ::testing::Bool());

// ------------------------------------------------------------------------------------------------
class GpuDeterminism : public GpuTestWithParam<PathGrouped> {};

TEST_P(GpuDeterminism, RepeatedLaunchesIdentical) {
  const auto [path, grouped] = GetParam();
  const Case c = make_case(1024, 768, grouped, ScalingMode::kRceil, test_seed());
  Stream stream;
  DeviceProblem dev(c.x, c.M, c.K, stream.get());
  dev.set_offs(c.offs);
  const HostOutputs first = dev.run(path, ScalingMode::kRceil, kPoisons[0]);
  expect_matches_reference(first, c.want, path, c.M, c.K, int64_t(c.offs.size()));
  for (size_t i = 1; i < std::size(kPoisons); ++i) {
    const HostOutputs again = dev.run(path, ScalingMode::kRceil, kPoisons[i]);
    expect_same_outputs(again, first, path,
                        "launch " + std::to_string(i) + " over poison " + hex_byte(kPoisons[i]));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuDeterminism, kPathGroupedValues, path_grouped_name);

// ------------------------------------------------------------------------------------------------
enum class StreamKind { kLegacyDefault, kPerThreadDefault, kBlocking, kNonBlocking };
const char* stream_kind_name(StreamKind k) {
  switch (k) {
    case StreamKind::kLegacyDefault:
      return "legacy_default";
    case StreamKind::kPerThreadDefault:
      return "per_thread_default";
    case StreamKind::kBlocking:
      return "blocking";
    case StreamKind::kNonBlocking:
      return "non_blocking";
  }
  return "?";
}

void PrintTo(StreamKind k, std::ostream* os) { *os << stream_kind_name(k); }

using StreamParam = std::tuple<StreamKind, Path>;
class GpuStreams : public GpuTestWithParam<StreamParam> {};

// Every path runs grouped on two stream kinds and dense on the other two (the status word is
// stream work too).
TEST_P(GpuStreams, MatchesReference) {
  const auto [kind, path] = GetParam();
  const bool grouped = (int(kind) + int(path)) % 2 == 1;
  const Case c = make_case(512, 1024, grouped, ScalingMode::kFloor, test_seed());
  Stream blocking(false), non_blocking(true);
  cudaStream_t s = nullptr;
  if (kind == StreamKind::kPerThreadDefault) s = cudaStreamPerThread;
  if (kind == StreamKind::kBlocking) s = blocking.get();
  if (kind == StreamKind::kNonBlocking) s = non_blocking.get();
  DeviceProblem dev(c.x, c.M, c.K, s);
  dev.set_offs(c.offs);
  expect_matches_reference(dev.run(path, ScalingMode::kFloor), c.want, path, c.M, c.K,
                           int64_t(c.offs.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, GpuStreams,
    ::testing::Combine(::testing::Values(StreamKind::kLegacyDefault, StreamKind::kPerThreadDefault,
                                         StreamKind::kBlocking, StreamKind::kNonBlocking),
                       ::testing::Values(Path::kRowwise, Path::kColwise, Path::kFused,
                                         Path::kComposed)),
    [](const ::testing::TestParamInfo<StreamParam>& info) {
      return std::string(stream_kind_name(std::get<0>(info.param))) + "_" +
             path_name(std::get<1>(info.param));
    });

// Two problems of different shapes in flight on two streams at once (no shared scratch state
// between calls).
class GpuConcurrent : public GpuTest {};

TEST_F(GpuConcurrent, TwoStreamsInFlight) {
  for (Path path : {Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed}) {
    SCOPED_TRACE(path_name(path));
    const Case a = make_case(2048, 512, true, ScalingMode::kRceil, test_seed(1));
    const Case b = make_case(512, 2048, false, ScalingMode::kRceil, test_seed(2));
    Stream sa, sb;
    DeviceProblem da(a.x, a.M, a.K, sa.get()), db(b.x, b.M, b.K, sb.get());
    da.set_offs(a.offs);
    for (int round = 0; round < 2; ++round) {
      da.poison();
      db.poison();
      MXQ_TEST_CUDA(cudaDeviceSynchronize());
      da.launch(path, ScalingMode::kRceil);
      db.launch(path, ScalingMode::kRceil);
      da.launch(path, ScalingMode::kRceil);  // again while the other stream may still run
      expect_matches_reference(da.collect(path), a.want, path, a.M, a.K, int64_t(a.offs.size()),
                               "stream A");
      expect_matches_reference(db.collect(path), b.want, path, b.M, b.K, 0, "stream B");
    }
  }
}

// ------------------------------------------------------------------------------------------------
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  }
  int64_t kernel_nodes() const {
    size_t n = 0;
    MXQ_TEST_CUDA(cudaGraphGetNodes(graph, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    if (n > 0) MXQ_TEST_CUDA(cudaGraphGetNodes(graph, nodes.data(), &n));
    int64_t kernels = 0;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type{};
      MXQ_TEST_CUDA(cudaGraphNodeGetType(node, &type));
      kernels += type == cudaGraphNodeTypeKernel;
    }
    return kernels;
  }
};

class GpuGraph : public GpuTestWithParam<PathGrouped> {};

TEST_P(GpuGraph, CaptureAndReplayIdentical) {
  const auto [path, grouped] = GetParam();
  const ScalingMode r = grouped ? ScalingMode::kFloor : ScalingMode::kRceil;
  const Case c = make_case(2048, 640, grouped, r, test_seed());
  Stream stream;
  DeviceProblem dev(c.x, c.M, c.K, stream.get());
  dev.set_offs(c.offs);
  // Warm-up outside capture (module loading, one-time queries), as every graph user does.
  expect_matches_reference(dev.run(path, r), c.want, path, c.M, c.K, int64_t(c.offs.size()),
                           "warm-up");
  dev.poison();
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));

  Graph g;
  MXQ_TEST_CUDA(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
  try {
    dev.launch(path, r);
  } catch (...) {
    (void)cudaStreamEndCapture(stream.get(), &g.graph);
    (void)cudaGetLastError();
    throw;
  }
  MXQ_TEST_CUDA(cudaStreamEndCapture(stream.get(), &g.graph));
  const int64_t kernels = g.kernel_nodes();
  EXPECT_GE(kernels, 1)
      << "the captured graph has no kernel node: the op ignored the caller's stream";
  if (path == Path::kComposed) {
    EXPECT_GE(kernels, 3) << "the composed path is three kernels: rowwise, colwise, to_blocked";
  }
  // Capture records, it does not run: every output still holds the poison.
  dev.expect_untouched();
  MXQ_TEST_CUDA(cudaGraphInstantiate(&g.exec, g.graph, 0));

  HostOutputs first;
  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    dev.poison(kPoisons[replay]);  // outside the graph
    MXQ_TEST_CUDA(cudaGraphLaunch(g.exec, stream.get()));
    const HostOutputs got = dev.collect(path, kPoisons[replay]);
    expect_matches_reference(got, c.want, path, c.M, c.K, int64_t(c.offs.size()), "graph replay");
    if (replay == 0) {
      first = got;
    } else {
      expect_same_outputs(got, first, path, "replay " + std::to_string(replay));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuGraph, kPathGroupedValues, path_grouped_name);

}  // namespace
}  // namespace mxq::test
